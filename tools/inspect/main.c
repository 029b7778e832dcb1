/*
 * main.c — bigfleet-inspect: attaches READ-ONLY (PROT_READ) to a running
 * appliance's shared segments by shard id and shows its state; or, for
 * `needs --addr`, reads Needs through ShardRead/InspectNeeds.
 *
 * Flow: parse flags (usage errors exit 2) -> attach read-only with
 * bf_shm_attach(readonly = true), which validates magic, kind, layout
 * version (a mismatch names both versions) and size (errors exit 1) ->
 * install the fault guard -> render frames. --watch redraws every
 * --interval like top (alternate screen on a terminal; plain frames when
 * stdout is not a terminal, one JSON document per line with --json), quits
 * on q, SIGINT or SIGTERM (exit 0), and exits 1 with a message when the
 * appliance goes away (supervisor gone, shutting down, segments removed or
 * re-created) or its segments are torn down under a read (SIGBUS).
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "bigfleet/config.h"

#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "inspect.h"

static const char USAGE[] =
    "usage: bigfleet-inspect [--id SHARD] [--json] [--watch [--interval 1s] [--frames N]]\n"
    "                        [COMMAND [ARGS]]\n"
    "\n"
    "Attaches read-only (PROT_READ) to the shared segments of a running BigFleet shard\n"
    "appliance (/dev/shm/bigfleet.<shard-id>.{inventory,needs,rings,state}) and shows its\n"
    "state without disturbing it. Nothing is ever written into a segment.\n"
    "\n"
    "commands:\n"
    "  summary                 (default) machines by state x type x zone (an exact scan of\n"
    "                          every record), clusters, Needs, actions in flight, the last\n"
    "                          cycle, ownership, rings and processes\n"
    "  machines [--state S] [--cluster C] [--type T] [--zone Z] [--limit N]\n"
    "                          machine records matching every filter (--limit default 100,\n"
    "                          0 = all); S is a state name (Idle, Configured, ...)\n"
    "  machine ID | machine --slot N\n"
    "                          one machine's full record: profile labels, resources and\n"
    "                          allocatable, assignment (fingerprint, group, priority,\n"
    "                          penalties), flags, seq, pending action\n"
    "  clusters                every cluster row: connected, first rollup, rows, generation,\n"
    "                          quarantine, last rollup age, rollup counters\n"
    "  needs [--cluster C] [--limit N] [--addr HOST:PORT [--tls-cert F --tls-key F\n"
    "        --tls-ca F [--tls-server-name N]] [--timeout 10s]]\n"
    "                          a cluster's Need rows (all clusters without --cluster) joined\n"
    "                          with the last cycle's verdicts (satisfied, residual deficit,\n"
    "                          counts, Same domain, parking, unmet reason, matching supply,\n"
    "                          preemption, Same candidates); priority desc, arrival asc.\n"
    "                          With --addr the same view comes from the shard's\n"
    "                          ShardRead/InspectNeeds RPC instead of the segments\n"
    "  shortfalls              the last cycle's shortfall ledger (top 100)\n"
    "  rings                   depth, capacity, pushes and drops of every ring\n"
    "  procs                   pid, role, state, restarts, uptime, last heartbeat, last exit\n"
    "  histogram [--all]       cycle-latency and per-phase histograms (count, mean, p50, p90,\n"
    "                          p99, buckets); --all adds executor/reconciler/session ones\n"
    "  ownership               the ADR-0055 partition: mode, owned-set size, assigned\n"
    "                          domains, transfers in/out, machines reserved for transfer\n"
    "                          (until when), held machines, instruction outcomes\n"
    "\n"
    "global flags:\n"
    "  --id SHARD              shard id (default shard-0)\n"
    "  --json                  one JSON document (strings escaped, control bytes and NUL\n"
    "                          as \\u00XX); with --watch one document per line per frame\n"
    "  --watch                 refresh in place like top; q, Ctrl-C or SIGTERM quits. Without\n"
    "                          a terminal, frames are printed one after another. Exits 1\n"
    "                          when the appliance goes away\n"
    "  --interval D            --watch period (Go duration, default 1s, minimum 50ms)\n"
    "  --frames N              --watch: stop after N frames (0 = until quit)\n"
    "  -h, --help              this text\n"
    "  --version               print the version and exit\n"
    "\n"
    "exit status: 0 ok; 1 runtime error (no segments for the shard id, layout version\n"
    "mismatch, segments torn down, appliance gone, unknown machine or cluster, RPC error);\n"
    "2 usage error.\n";

static const char *const cmd_names[CMD_COUNT] = {"summary",   "machines",   "machine", "clusters",
                                                 "needs",     "shortfalls", "rings",   "procs",
                                                 "histogram", "ownership"};

static volatile sig_atomic_t g_stop;
static struct termios g_tio;
static bool g_tio_saved, g_alt;

static void on_stop(int sig)
{
    g_stop = sig;
}

static void tty_restore(void)
{
    if (g_alt) {
        static const char s[] = "\x1b[?25h\x1b[?1049l";
        ssize_t w = write(1, s, sizeof s - 1);
        (void)w;
        g_alt = false;
    }
    if (g_tio_saved) {
        tcsetattr(0, TCSANOW, &g_tio);
        g_tio_saved = false;
    }
}

static int usage_error(const char *fmt, const char *a)
{
    fprintf(stderr, "bigfleet-inspect: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n(bigfleet-inspect --help for usage)\n");
    return INSP_EXIT_USAGE;
}

static int parse_int(const char *s, int64_t min, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min)
        return -1;
    *out = v;
    return 0;
}

/* Returns -1 to exit 0 (help), 0 ok, >0 exit code. */
static int parse(int argc, char **argv, struct insp_opts *o)
{
    bool have_cmd = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] == 0) {
            if (!have_cmd) {
                int k;
                for (k = 0; k < CMD_COUNT; k++)
                    if (strcmp(a, cmd_names[k]) == 0)
                        break;
                if (k == CMD_COUNT)
                    return usage_error("unknown command %s", a);
                o->cmd = (enum insp_cmd)k;
                have_cmd = true;
            } else if (o->cmd == CMD_MACHINE && !o->machine_id) {
                o->machine_id = a;
            } else {
                return usage_error("unexpected argument %s", a);
            }
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(USAGE, stdout);
            return -1;
        }
        if (strcmp(a, "--version") == 0) {
            printf("bigfleet-inspect %s\n", BF_VERSION);
            return -1;
        }
        /* --name=value or --name value */
        char name[64];
        const char *val = NULL;
        const char *eq = strchr(a, '=');
        size_t nl = eq ? (size_t)(eq - a) : strlen(a);
        if (nl >= sizeof name)
            return usage_error("unknown flag %s", a);
        memcpy(name, a, nl);
        name[nl] = 0;
        if (eq)
            val = eq + 1;
        static const char *const boolf[] = {"--json", "--watch", "--all"};
        bool is_bool = false;
        for (size_t k = 0; k < 3; k++)
            if (strcmp(name, boolf[k]) == 0)
                is_bool = true;
        if (is_bool) {
            if (val)
                return usage_error("flag %s takes no value", name);
            if (strcmp(name, "--json") == 0)
                o->json = true;
            else if (strcmp(name, "--watch") == 0)
                o->watch = true;
            else
                o->all = true;
            continue;
        }
        static const char *const valf[] = {
            "--id",      "--interval", "--frames",  "--count",          "--state", "--cluster",
            "--type",    "--zone",     "--limit",   "--slot",           "--addr",  "--tls-cert",
            "--tls-key", "--tls-ca",   "--timeout", "--tls-server-name"};
        bool known = false;
        for (size_t k = 0; k < sizeof valf / sizeof valf[0]; k++)
            if (strcmp(name, valf[k]) == 0)
                known = true;
        if (!known)
            return usage_error("unknown flag %s", name);
        if (!val) {
            if (i + 1 >= argc)
                return usage_error("flag %s needs a value", name);
            val = argv[++i];
        }
        if (strcmp(name, "--id") == 0) {
            if (!*val)
                return usage_error("--id needs a shard id%s", "");
            o->id = val;
        } else if (strcmp(name, "--interval") == 0 || strcmp(name, "--timeout") == 0) {
            int64_t ns;
            if (bf_parse_duration(val, &ns) != 0 || ns <= 0)
                return usage_error("bad duration %s (Go syntax: 500ms, 1s, 2m)", val);
            if (name[2] == 'i') {
                if (ns < 50 * BF_NS_PER_MS)
                    return usage_error("--interval %s is below the 50ms minimum", val);
                o->interval_ns = ns;
            } else {
                o->timeout_ns = ns;
            }
        } else if (strcmp(name, "--frames") == 0 || strcmp(name, "--count") == 0) {
            if (parse_int(val, 0, &o->frames) != 0)
                return usage_error("bad frame count %s", val);
        } else if (strcmp(name, "--state") == 0) {
            int st = bf_state_from_name(val);
            if (st <= 0)
                return usage_error("unknown state %s (Speculative, Creating, Idle, Configuring, "
                                   "Configured, Draining, Deleting, Failed)",
                                   val);
            o->state = st;
        } else if (strcmp(name, "--limit") == 0) {
            if (parse_int(val, 0, &o->limit) != 0)
                return usage_error("bad limit %s (a number >= 0; 0 = no limit)", val);
        } else if (strcmp(name, "--slot") == 0) {
            if (parse_int(val, 0, &o->slot) != 0)
                return usage_error("bad slot %s", val);
        } else {
            /* the flags whose value is kept as given */
            const struct {
                const char *flag;
                const char **dst;
            } strf[] = {{"--cluster", &o->cluster},   {"--type", &o->type},
                        {"--zone", &o->zone},         {"--addr", &o->addr},
                        {"--tls-cert", &o->tls_cert}, {"--tls-key", &o->tls_key},
                        {"--tls-ca", &o->tls_ca},     {"--tls-server-name", &o->tls_server_name}};
            for (size_t k = 0; k < sizeof strf / sizeof strf[0]; k++)
                if (strcmp(name, strf[k].flag) == 0)
                    *strf[k].dst = val;
        }
    }
    /* per-command checks */
    bool filters = o->state >= 0 || o->type || o->zone;
    if (filters && o->cmd != CMD_MACHINES)
        return usage_error("--state, --type and --zone apply to `machines` only%s", "");
    if (o->cluster && o->cmd != CMD_MACHINES && o->cmd != CMD_NEEDS)
        return usage_error("--cluster applies to `machines` and `needs` only%s", "");
    if (o->limit >= 0 && o->cmd != CMD_MACHINES && o->cmd != CMD_NEEDS)
        return usage_error("--limit applies to `machines` and `needs` only%s", "");
    if (o->cmd == CMD_MACHINE && !o->machine_id && o->slot < 0)
        return usage_error("machine needs a machine id (or --slot N)%s", "");
    if (o->cmd == CMD_MACHINE && o->machine_id && o->slot >= 0)
        return usage_error("machine takes an id or --slot, not both%s", "");
    if (o->slot >= 0 && o->cmd != CMD_MACHINE)
        return usage_error("--slot applies to `machine` only%s", "");
    if (o->all && o->cmd != CMD_HISTOGRAM)
        return usage_error("--all applies to `histogram` only%s", "");
    bool tls = o->tls_cert || o->tls_key || o->tls_ca || o->tls_server_name;
    if ((o->addr || tls) && o->cmd != CMD_NEEDS)
        return usage_error("--addr and --tls-* apply to `needs` only%s", "");
    if (tls && !o->addr)
        return usage_error("--tls-cert/--tls-key/--tls-ca need --addr%s", "");
    if (tls && !(o->tls_cert && o->tls_key && o->tls_ca))
        return usage_error("set all three of --tls-cert, --tls-key, --tls-ca (mTLS) or none%s", "");
    if (o->frames && !o->watch)
        return usage_error("--frames applies to --watch only%s", "");
    return 0;
}

/* ------------------------------------------------------------ output */

static int term_rows(void)
{
    struct winsize ws;
    if (ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 2)
        return ws.ws_row;
    return 0;
}

static int write_all(const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(1, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A frame whose buffer ran out of memory is never written (it would be a
 * cut document): the process exits, as a CLI tool with nothing to undo. */
static void exit_if_failed(const struct bf_strbuf *b)
{
    if (b->failed) {
        fputs("bigfleet-inspect: out of memory\n", stderr);
        exit(INSP_EXIT_RUNTIME);
    }
}

/* Emits one frame: on a terminal in --watch, redraw in place, clipped to the
 * window; otherwise as is (with a separator line between text frames). */
static int emit(const struct insp_opts *o, bool tty, int64_t frame, const struct bf_strbuf *b)
{
    exit_if_failed(b);
    if (!o->watch || !tty) {
        if (o->watch && !o->json) {
            char t[48], hdr[128];
            insp_fmt_time(t, sizeof t, bf_now_ns());
            int n = snprintf(hdr, sizeof hdr, "=== bigfleet-inspect %s frame %lld at %s ===\n",
                             cmd_names[o->cmd], (long long)frame + 1, t);
            if (write_all(hdr, (size_t)n))
                return -1;
        }
        return write_all(b->p ? b->p : "", b->len);
    }
    struct bf_strbuf out = {0};
    char t[48];
    insp_fmt_time(t, sizeof t, bf_now_ns());
    bf_sb_puts(&out, "\x1b[H");
    bf_sb_printf(&out, "bigfleet-inspect %s -- shard %s -- every %.1fs -- %s -- q to quit\x1b[K\n",
                 cmd_names[o->cmd], o->id, (double)o->interval_ns / 1e9, t);
    int rows = term_rows(), line = 1;
    const char *p = b->p ? b->p : "";
    while (*p && (!rows || line < rows - 1)) {
        const char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) : strlen(p);
        bf_sb_put(&out, p, l);
        bf_sb_puts(&out, "\x1b[K\n");
        line++;
        p += l + (nl ? 1 : 0);
    }
    bf_sb_puts(&out, "\x1b[J");
    exit_if_failed(&out);
    int rc = write_all(out.p, out.len);
    bf_sb_free(&out);
    return rc;
}

/* Waits one interval; returns 1 when the user asked to quit. */
static int wait_interval(const struct insp_opts *o, bool keys)
{
    int64_t end = bf_mono_ns() + o->interval_ns;
    while (!g_stop) {
        int64_t left = end - bf_mono_ns();
        if (left <= 0)
            return 0;
        struct pollfd p = {0, POLLIN, 0};
        int n = poll(&p, keys ? 1 : 0, (int)((left + 999999) / 1000000));
        if (n > 0 && (p.revents & POLLIN)) {
            char c[64];
            ssize_t r = read(0, c, sizeof c);
            for (ssize_t k = 0; k < r; k++)
                if (c[k] == 'q' || c[k] == 'Q' || c[k] == 3)
                    return 1;
            if (r == 0)
                keys = false; /* stdin closed */
        }
    }
    return 1;
}

/* Shows frame `frame` and, in --watch, waits for the next one: true to go
 * on; false when the output failed, the frames are done or the user stopped. */
static bool show_then_wait(const struct insp_opts *o, bool tty, int64_t frame,
                           const struct bf_strbuf *b, bool keys)
{
    if (emit(o, tty, frame, b) != 0)
        return false;
    if (!o->watch || (o->frames && frame + 1 >= o->frames) || g_stop)
        return false;
    return !wait_interval(o, keys);
}

/* --watch quits cleanly on SIGINT/SIGTERM: installed before the segments are
 * attached, so a signal that arrives while attaching is not fatal (exit 130). */
static void stop_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static void watch_setup(const struct insp_opts *o, bool *tty, bool *keys)
{
    *tty = o->watch && !o->json && isatty(1); /* --json --watch: one document per line */
    *keys = o->watch && isatty(0);
    if (*keys && tcgetattr(0, &g_tio) == 0) {
        struct termios t = g_tio;
        t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        t.c_cc[VMIN] = 0;
        t.c_cc[VTIME] = 0;
        if (tcsetattr(0, TCSANOW, &t) == 0)
            g_tio_saved = true;
    }
    if (*tty) {
        static const char s[] = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J";
        if (write_all(s, sizeof s - 1) == 0)
            g_alt = true;
    }
    atexit(tty_restore);
}

static int fail(const char *msg)
{
    tty_restore();
    fprintf(stderr, "bigfleet-inspect: %s\n", msg);
    return INSP_EXIT_RUNTIME;
}

/* ------------------------------------------------------------ remote */

static int run_remote(const struct insp_opts *o)
{
    bool tty, keys;
    if (o->watch)
        watch_setup(o, &tty, &keys);
    else
        tty = keys = false;
    struct bf_strbuf b = {0};
    char src[300];
    snprintf(src, sizeof src, "InspectNeeds %s", o->addr);
    for (int64_t frame = 0;; frame++) {
        struct insp_needs n;
        char err[700];
        if (insp_needs_remote(o, &n, err, sizeof err) != 0) {
            insp_needs_free(&n);
            bf_sb_free(&b);
            return fail(err);
        }
        bf_sb_reset(&b);
        insp_render_needs(o, &n, src, bf_now_ns(), &b);
        insp_needs_free(&n);
        if (!show_then_wait(o, tty, frame, &b, keys))
            break;
    }
    bf_sb_free(&b);
    tty_restore();
    return INSP_EXIT_OK;
}

/* ------------------------------------------------------------ local */

static struct insp_ctx g_ctx;

static int run_local(const struct insp_opts *o)
{
    char err[512];
    struct insp_ident id0, id1;
    int rc = -1;
    for (int attempt = 0; attempt < 3; attempt++) {
        bool had0 = insp_ident_take(o->id, &id0) == 0;
        rc = bf_shm_attach(&g_ctx.shm, o->id, true, err, sizeof err);
        if (rc)
            break;
        if (had0 && insp_ident_take(o->id, &id1) == 0 && id0.dev == id1.dev && id0.ino == id1.ino)
            break;
        bf_shm_detach(&g_ctx.shm); /* re-created while attaching: again */
        rc = -EAGAIN;
        snprintf(err, sizeof err, "the segments of shard id %s kept changing while attaching",
                 o->id);
    }
    if (rc == -ENOENT) {
        char avail[400];
        insp_list_shards(avail, sizeof avail);
        fprintf(stderr,
                "bigfleet-inspect: no appliance segments for shard id %s "
                "(/dev/shm/bigfleet.%s.* not found; %s%s)\n",
                o->id, o->id,
                avail[0] ? "segments exist for shard ids: " : "no bigfleet segments at all", avail);
        return INSP_EXIT_RUNTIME;
    }
    if (rc)
        return fail(err);
    insp_fault_install(&g_ctx.shm);
    g_ctx.o = o;
    g_ctx.cache = bf_blob_cache_new();
    if (!g_ctx.cache)
        return fail("out of memory");
    if (!o->watch && !insp_supervisor_running(&g_ctx.shm))
        fprintf(stderr,
                "bigfleet-inspect: warning: supervisor pid %u of shard id %s is not running: "
                "these segments are stale\n",
                g_ctx.shm.state_hdr->supervisor_pid, o->id);
    bool tty = false, keys = false;
    if (o->watch)
        watch_setup(o, &tty, &keys);
    static struct bf_strbuf b;
    static sigjmp_buf jb;
    if (sigsetjmp(jb, 1)) {
        insp_fault_arm(NULL);
        return fail(insp_fault_message());
    }
    insp_fault_arm(&jb);
    int code = INSP_EXIT_OK;
    for (int64_t frame = 0;; frame++) {
        if (o->watch && insp_alive(&g_ctx.shm, &id0, err, sizeof err) != 0) {
            code = fail(err);
            break;
        }
        g_ctx.now_ns = bf_now_ns();
        bf_sb_reset(&b);
        if (insp_render(&g_ctx, &b, err, sizeof err) != 0) {
            code = fail(err);
            break;
        }
        if (!show_then_wait(o, tty, frame, &b, keys))
            break;
    }
    insp_fault_arm(NULL);
    tty_restore();
    bf_sb_free(&b);
    bf_blob_cache_free(g_ctx.cache);
    bf_shm_detach(&g_ctx.shm);
    return code;
}

int main(int argc, char **argv)
{
    struct insp_opts o = {.cmd = CMD_SUMMARY,
                          .id = "shard-0",
                          .interval_ns = BF_NS_PER_SEC,
                          .slot = -1,
                          .state = -1,
                          .limit = -1,
                          .timeout_ns = 10 * BF_NS_PER_SEC};
    int rc = parse(argc, argv, &o);
    if (rc < 0)
        return INSP_EXIT_OK;
    if (rc > 0)
        return rc;
    bf_log_init("inspect", BF_LOG_ERROR);
    if (o.watch)
        stop_signals_install();
    if (o.cmd == CMD_NEEDS && o.addr)
        return run_remote(&o);
    return run_local(&o);
}
