/*
 * test_shm.c — the shared segments: create/attach/validate, seqlock under a
 * forked writer (no torn read), a writer killed mid-write and repaired, ring
 * wrap/full/empty and redelivery after a consumer restart, change-log
 * overflow signalling, the id index, the string table (dedup, NUL bytes, a
 * dead lock owner, an arena that grows its file), cluster latches; segment
 * modes and the owner check on attach (another user cannot read a segment; a
 * segment others can write is refused), attach's validation of every header
 * field, table and inner offset of a corrupted or truncated file (one test
 * per check), and the live-configuration block (SIGHUP values reach readers
 * whole, with a generation that moves once per publish); the supervisor's
 * repair of cluster rows and stamps a dead session left mid-write, the
 * reconciler's non-consuming change-log peek, and the ownership tables'
 * publish.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bigfleet/config.h"
#include "bigfleet/log.h"
#include "bigfleet/ownership.h"
#include "bigfleet/shm.h"
#include "shm/shm_internal.h"

#include "shm_fixture.h"
#include "check_run.h"

static void setup(void)
{
    struct bf_shm_caps caps = {.max_machines = 4096, .max_needs = 1024, .max_clusters = 64};
    shm_fixture_create("shm", &caps, 7);
}

static void teardown(void)
{
    shm_fixture_remove();
}

static uint32_t intern(const char *s)
{
    uint32_t r;
    ck_assert_int_eq(bf_str_intern_cstr(&g_s, s, &r), 0);
    return r;
}

START_TEST(attach_validates_header_and_names_both_versions_on_mismatch)
{
    struct bf_shm ro;
    char err[256];
    ck_assert_int_eq(bf_shm_attach(&ro, g_id, true, err, sizeof err), 0);
    ck_assert_int_eq(ro.inv_hdr->epoch, 7);
    ck_assert_uint_eq(ro.max_machines, 4096);
    ck_assert_str_eq(ro.inv_hdr->shard_id, g_id);
    bf_shm_detach(&ro);
    /* bump the version in the live mapping: attach must refuse, naming both */
    g_s.needs_hdr->layout_version = BF_SHM_LAYOUT_VERSION + 41;
    int rc = bf_shm_attach(&ro, g_id, true, err, sizeof err);
    ck_assert_int_eq(rc, -EPROTONOSUPPORT);
    char want[64];
    snprintf(want, sizeof want, "version %u", BF_SHM_LAYOUT_VERSION + 41);
    ck_assert_ptr_nonnull(strstr(err, want));
    snprintf(want, sizeof want, "expects version %u", BF_SHM_LAYOUT_VERSION);
    ck_assert_ptr_nonnull(strstr(err, want));
    g_s.needs_hdr->layout_version = BF_SHM_LAYOUT_VERSION;
    g_s.rings_hdr->magic = 0x1234;
    ck_assert_int_eq(bf_shm_attach(&ro, g_id, true, err, sizeof err), -EPROTO);
    g_s.rings_hdr->magic = BF_SHM_MAGIC;
    ck_assert_int_eq(bf_shm_attach(&ro, "no-such-shard-xyz", true, err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "no-such-shard-xyz"));
    /* creating over live segments is refused */
    struct bf_shm dup;
    struct bf_shm_caps caps = {.max_machines = 16, .max_needs = 16, .max_clusters = 4};
    ck_assert_int_eq(bf_shm_create(&dup, g_id, &caps, 1, 0, err, sizeof err), -EEXIST);
}
END_TEST

START_TEST(string_table_dedups_and_keeps_embedded_nul)
{
    uint32_t a = intern("openb-node-0001"), b = intern("openb-node-0001"), c = intern("x");
    ck_assert_uint_eq(a, b);
    ck_assert_uint_ne(a, c);
    ck_assert_uint_eq(intern(""), 0);
    const char grp[] = "topology.bigfleet/rack\0gang-7";
    uint32_t g, g2, len;
    ck_assert_int_eq(bf_str_intern(&g_s, grp, sizeof grp - 1, &g), 0);
    ck_assert_int_eq(bf_str_find(&g_s, grp, sizeof grp - 1, &g2), 0);
    ck_assert_uint_eq(g, g2);
    const char *p = bf_str(&g_s, g, &len);
    ck_assert_uint_eq(len, sizeof grp - 1);
    ck_assert_int_eq(memcmp(p, grp, len), 0);
    /* a prefix up to the NUL is a different string */
    ck_assert_int_eq(bf_str_find(&g_s, grp, 22, &g2), -ENOENT);
    ck_assert_ptr_null(bf_str(&g_s, 0x7fffffff, &len));
}
END_TEST

/* A child attaches, takes the string-table lock and dies holding it (SIGKILL);
 * asserts the lock still names it, returns its pid. */
static pid_t die_holding_the_string_lock(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct bf_shm c;
        if (bf_shm_attach(&c, g_id, false, NULL, 0) != 0)
            _exit(3);
        uint32_t zero = 0;
        atomic_compare_exchange_strong(&c.inv->strtab.lock_owner, &zero, (uint32_t)getpid());
        raise(SIGKILL);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFSIGNALED(st));
    ck_assert_uint_eq(atomic_load(&g_s.inv->strtab.lock_owner), (uint32_t)pid);
    return pid;
}

START_TEST(string_lock_held_by_a_dead_process_is_stolen)
{
    die_holding_the_string_lock();
    uint32_t r;
    ck_assert_int_eq(bf_str_intern_cstr(&g_s, "after-steal", &r), 0);
    ck_assert_uint_eq(atomic_load(&g_s.inv->strtab.lock_steals), 1);
    ck_assert_uint_eq(atomic_load(&g_s.inv->strtab.lock_owner), 0);
}
END_TEST

START_TEST(repair_releases_the_string_lock_a_dead_process_held_and_reports_it)
{
    pid_t pid = die_holding_the_string_lock();
    struct bf_repair_report rep;
    /* another dead pid's repair leaves a lock it does not hold alone */
    bf_shm_repair_dead_writer(&g_s, (uint32_t)pid + 1, BF_ROLE_EXECUTOR, &rep);
    ck_assert_int_eq(rep.locks, 0);
    ck_assert_uint_eq(atomic_load(&g_s.inv->strtab.lock_owner), (uint32_t)pid);
    bf_shm_repair_dead_writer(&g_s, (uint32_t)pid, BF_ROLE_EXECUTOR, &rep);
    ck_assert_int_eq(rep.locks, 1);
    ck_assert_uint_eq(atomic_load(&g_s.inv->strtab.lock_owner), 0);
    ck_assert_uint_eq(atomic_load(&g_s.inv->strtab.lock_steals), 0); /* not stolen: released */
    bf_shm_repair_dead_writer(&g_s, (uint32_t)pid, BF_ROLE_EXECUTOR, &rep);
    ck_assert_int_eq(rep.locks, 0); /* counted once */
}
END_TEST

static struct bf_machine_rec mk(uint32_t id, uint8_t state)
{
    struct bf_machine_rec r;
    memset(&r, 0, sizeof r);
    r.id = id;
    r.state = state;
    r.price_per_hour = 1.5f;
    return r;
}

/* Found with fuzz_inspect_segment (the input is in its corpus): on a
 * segment whose arena_used was corrupted past the arena, bf_str trusted any
 * ref below it and bigfleet-inspect read 2 GiB past its mapping (SIGSEGV);
 * an entry whose length ran past the published end was returned whole. */
START_TEST(string_lookups_stay_inside_the_arena_when_its_counts_are_corrupted)
{
    uint32_t ref = intern("abc"), len;
    _Atomic uint64_t *used = &g_s.inv->strtab.arena_used;
    uint64_t was = atomic_load(used);
    atomic_store(used, UINT64_MAX);
    ck_assert_ptr_null(bf_str(&g_s, 0x0fffffffu, &len)); /* 2 GiB in: outside the arena */
    ck_assert_uint_eq(len, 0);
    ck_assert_ptr_null(bf_str(&g_s, (uint32_t)(g_s.arena_bytes / 8), NULL));
    const char *p = bf_str(&g_s, ref, &len);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(len, 3);
    ck_assert_str_eq(p, "abc");
    uint32_t found;
    ck_assert_int_eq(bf_str_find(&g_s, "abc", 3, &found), 0);
    ck_assert_uint_eq(found, ref);
    atomic_store(used, was);
    /* an entry whose length runs past the published end is not returned */
    uint32_t *elen = (uint32_t *)(g_s.arena + (uint64_t)ref * 8);
    uint32_t l0 = *elen;
    *elen = 0x7fffffff;
    ck_assert_ptr_null(bf_str(&g_s, ref, &len));
    ck_assert_int_eq(bf_str_find(&g_s, "abc", 3, &found), -ENOENT);
    *elen = l0;
    ck_assert_ptr_nonnull(bf_str(&g_s, ref, NULL));
}
END_TEST

START_TEST(id_index_inserts_looks_up_removes_and_reuses_slots)
{
    uint32_t slots[500];
    char buf[32];
    for (int i = 0; i < 500; i++) {
        snprintf(buf, sizeof buf, "m-%04d", i);
        struct bf_machine_rec r = mk(intern(buf), BF_STATE_IDLE);
        ck_assert_int_eq(bf_inv_insert(&g_s, &r, &slots[i]), 0);
    }
    ck_assert_uint_eq(atomic_load(&g_s.inv->n_machines), 500);
    for (int i = 0; i < 500; i++) {
        snprintf(buf, sizeof buf, "m-%04d", i);
        uint32_t sl;
        ck_assert_int_eq(bf_inv_lookup_id(&g_s, buf, strlen(buf), &sl), 0);
        ck_assert_uint_eq(sl, slots[i]);
    }
    struct bf_machine_rec dup = mk(intern("m-0007"), BF_STATE_IDLE);
    uint32_t ex;
    ck_assert_int_eq(bf_inv_insert(&g_s, &dup, &ex), -EEXIST);
    ck_assert_uint_eq(ex, slots[7]);
    for (int i = 0; i < 500; i += 2)
        ck_assert_int_eq(bf_inv_remove(&g_s, slots[i]), 0);
    ck_assert_int_eq(bf_inv_remove(&g_s, slots[0]), -ENOENT);
    for (int i = 0; i < 500; i++) {
        snprintf(buf, sizeof buf, "m-%04d", i);
        uint32_t sl;
        ck_assert_int_eq(bf_inv_lookup_id(&g_s, buf, strlen(buf), &sl), (i % 2) ? 0 : -ENOENT);
    }
    uint32_t hwm = bf_inv_hwm(&g_s);
    /* re-inserting reuses freed slots before growing the high-water mark */
    for (int i = 0; i < 250; i++) {
        snprintf(buf, sizeof buf, "n-%04d", i);
        struct bf_machine_rec r = mk(intern(buf), BF_STATE_SPECULATIVE);
        uint32_t sl;
        ck_assert_int_eq(bf_inv_insert(&g_s, &r, &sl), 0);
        ck_assert_uint_lt(sl, hwm);
    }
    ck_assert_uint_eq(bf_inv_hwm(&g_s), hwm);
    /* the records carry what was written */
    struct bf_machine_rec got;
    ck_assert_int_eq(bf_inv_read(&g_s, slots[1], &got), 0);
    ck_assert_uint_eq(got.state, BF_STATE_IDLE);
    ck_assert(got.flags & BF_REC_VALID);
    ck_assert(got.price_per_hour == 1.5f);
}
END_TEST

/* The bulk insert of a known-new id takes free slots and publishes the id
 * exactly as bf_inv_insert does: the checked insert and the lookups see it. */
START_TEST(insert_new_publishes_like_insert_and_reuses_freed_slots)
{
    char buf[32];
    uint32_t slots[300];
    for (int i = 0; i < 300; i++) {
        snprintf(buf, sizeof buf, "b-%04d", i);
        struct bf_machine_rec r = mk(intern(buf), BF_STATE_IDLE);
        ck_assert_int_eq(bf_inv_insert_new(&g_s, &r, &slots[i]), 0);
        ck_assert_uint_eq(slots[i], (uint32_t)i);
    }
    ck_assert_uint_eq(atomic_load(&g_s.inv->n_machines), 300);
    for (int i = 0; i < 300; i++) {
        snprintf(buf, sizeof buf, "b-%04d", i);
        uint32_t sl;
        ck_assert_int_eq(bf_inv_lookup_id(&g_s, buf, strlen(buf), &sl), 0);
        ck_assert_uint_eq(sl, slots[i]);
    }
    struct bf_machine_rec dup = mk(intern("b-0042"), BF_STATE_IDLE);
    uint32_t ex;
    ck_assert_int_eq(bf_inv_insert(&g_s, &dup, &ex), -EEXIST);
    ck_assert_uint_eq(ex, slots[42]);
    ck_assert_int_eq(bf_inv_remove(&g_s, slots[5]), 0);
    struct bf_machine_rec r = mk(intern("b-new"), BF_STATE_SPECULATIVE);
    uint32_t sl;
    ck_assert_int_eq(bf_inv_insert_new(&g_s, &r, &sl), 0);
    ck_assert_uint_eq(sl, slots[5]);
    struct bf_machine_rec got;
    ck_assert_int_eq(bf_inv_read(&g_s, sl, &got), 0);
    ck_assert(got.flags & BF_REC_VALID);
    ck_assert_uint_eq(got.state, BF_STATE_SPECULATIVE);
    struct bf_machine_rec none = mk(0, BF_STATE_IDLE);
    ck_assert_int_eq(bf_inv_insert_new(&g_s, &none, &sl), -EINVAL);
}
END_TEST

START_TEST(inventory_full_reports_enospc)
{
    char buf[32];
    int rc = 0, n = 0;
    for (; n < 5000 && rc == 0; n++) {
        snprintf(buf, sizeof buf, "f-%05d", n);
        struct bf_machine_rec r = mk(intern(buf), BF_STATE_IDLE);
        uint32_t sl;
        rc = bf_inv_insert(&g_s, &r, &sl);
    }
    ck_assert_int_eq(rc, -ENOSPC);
    ck_assert_int_eq(n - 1, 4096);
}
END_TEST

/* Every payload word carries the same value k, so every field of the record
 * (ids, state, priority, flags, price, ...) is derived from the one counter
 * k: a torn read shows mixed values in some word, whichever field it hits. */
static struct bf_machine_rec uniform(uint32_t k)
{
    struct bf_machine_rec r;
    uint32_t *w = (uint32_t *)&r;
    for (size_t i = 0; i < sizeof r / 4; i++)
        w[i] = k;
    return r;
}

static bool is_uniform(const struct bf_machine_rec *r)
{
    const uint32_t *w = (const uint32_t *)r;
    for (size_t i = 1; i < sizeof *r / 4; i++)
        if (w[i] != w[0])
            return false;
    return true;
}

/* A forked writer of its own attachment: for k = 1 .. rounds - 1, commits
 * uniform(k) to every slot in [first, first + n). Exits 0, or 3/4 when it
 * cannot attach or begin a write. */
static pid_t fork_uniform_writer(uint32_t first, uint32_t n, uint32_t rounds)
{
    pid_t w = fork();
    if (w != 0)
        return w;
    struct bf_shm c;
    if (bf_shm_attach(&c, g_id, false, NULL, 0) != 0)
        _exit(3);
    for (uint32_t k = 1; k < rounds; k++)
        for (uint32_t slot = first; slot < first + n; slot++) {
            struct bf_inv_txn t;
            if (bf_inv_begin(&c, slot, &t) != 0)
                _exit(4);
            struct bf_machine_rec r = uniform(k);
            bf_inv_commit(&c, &t, &r, -1);
        }
    _exit(0);
}

START_TEST(seqlock_forked_writer_never_yields_a_torn_read)
{
    struct bf_machine_rec r0 = mk(intern("torn-test"), BF_STATE_IDLE);
    uint32_t slot;
    ck_assert_int_eq(bf_inv_insert(&g_s, &r0, &slot), 0);
    /* from here on every stable version of the record is uniform (k = 0, 1, ...):
     * any read that is not uniform is torn, in whatever field */
    struct bf_inv_txn t0;
    ck_assert_int_eq(bf_inv_begin(&g_s, slot, &t0), 0);
    struct bf_machine_rec u0 = uniform(0);
    bf_inv_commit(&g_s, &t0, &u0, -1);
    pid_t w = fork_uniform_writer(slot, 1, 400000);
    /* two readers: this process and a forked one; each also checks that the
     * versions it reads never go back (k only grows) */
    struct bf_machine_rec first;
    for (int i = 0; i < 10000; i++) { /* the writer has started: bounded, 10 s */
        if (bf_inv_read(&g_s, slot, &first) == 0 && first.id != 0)
            break;
        usleep(1000);
    }
    ck_assert_msg(first.id != 0, "the writer never committed");
    pid_t rd = fork();
    long torn = 0, back = 0, ok = 0, busy = 0;
    uint32_t last = 0;
    for (int i = 0; i < 300000; i++) {
        struct bf_machine_rec r;
        int rc = bf_inv_read(&g_s, slot, &r);
        if (rc == -EAGAIN) {
            busy++;
            continue;
        }
        ck_assert_int_eq(rc, 0);
        if (!is_uniform(&r)) {
            torn++;
            continue;
        }
        if (r.id < last)
            back++;
        last = r.id;
        ok++;
    }
    if (rd == 0) {
        if (torn || back)
            fprintf(stderr, "forked reader: %ld torn, %ld went back, %ld ok\n", torn, back, ok);
        _exit(torn || back ? 1 : 0);
    }
    int st;
    waitpid(rd, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "forked reader saw a torn record");
    waitpid(w, &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert_msg(torn == 0, "%ld torn reads of %ld (%ld busy)", torn, torn + ok, busy);
    ck_assert_msg(back == 0, "%ld reads went back to an older version", back);
    ck_assert_int_gt(ok, 1000);
}
END_TEST

/* The seqlock recipe itself (bf_seq_read / bf_seq_write_begin/_end) on a
 * long payload, so that a read overlaps a write often: a forked writer
 * stores k in every one of 512 words per write, k = 1, 2, ...; every read
 * that succeeds must be uniform. A reader that skips the re-check of seq
 * (R2) or the odd test (R1) fails this within the run. */
#define SEQ_WORDS 512
struct seq_page {
    _Atomic uint32_t seq;
    _Atomic uint32_t stop;
    _Atomic uint64_t w[SEQ_WORDS];
};

START_TEST(seqlock_read_of_a_long_payload_is_never_torn)
{
    struct seq_page *pg =
        mmap(NULL, sizeof *pg, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(pg, MAP_FAILED);
    pid_t w = fork();
    if (w == 0) {
        for (uint64_t k = 1; !atomic_load_explicit(&pg->stop, memory_order_relaxed); k++) {
            uint32_t odd = bf_seq_write_begin(&pg->seq);
            for (int i = 0; i < SEQ_WORDS; i++)
                atomic_store_explicit(&pg->w[i], k, memory_order_relaxed);
            bf_seq_write_end(&pg->seq, odd);
            for (int d = 0; d < 256; d++) /* a stable window between writes */
                bf_cpu_relax();
        }
        _exit(0);
    }
    static uint64_t out[SEQ_WORDS];
    long torn = 0, ok = 0, busy = 0;
    uint64_t retries = 0, last = 0;
    for (int i = 0; i < 1000000 && (ok < 100000 || last == 0); i++) {
        if (bf_seq_read(&pg->seq, pg->w, SEQ_WORDS, out, BF_SEQLOCK_READ_TRIES, NULL, &retries) !=
            0) {
            busy++;
            continue;
        }
        bool uniform = true;
        for (int j = 1; j < SEQ_WORDS; j++)
            uniform = uniform && out[j] == out[0];
        if (!uniform)
            torn++;
        else
            ok++;
        last = out[0];
    }
    atomic_store_explicit(&pg->stop, 1, memory_order_relaxed);
    int st;
    waitpid(w, &st, 0);
    munmap(pg, sizeof *pg);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert_msg(torn == 0, "%ld torn reads of %ld (%ld busy)", torn, torn + ok, busy);
    ck_assert_msg(ok > 1000 && last > 0,
                  "%ld reads, last version %llu: the reads never overlapped the writer", ok,
                  (unsigned long long)last);
}
END_TEST

START_TEST(writer_killed_mid_write_is_repaired_and_marked_for_refresh)
{
    struct bf_machine_rec r0 = mk(intern("victim"), BF_STATE_CONFIGURED);
    r0.cluster = intern("cluster-a");
    uint32_t slot;
    ck_assert_int_eq(bf_inv_insert(&g_s, &r0, &slot), 0);
    pid_t pid = fork();
    if (pid == 0) {
        struct bf_shm c;
        if (bf_shm_attach(&c, g_id, false, NULL, 0) != 0)
            _exit(3);
        struct bf_inv_txn t;
        if (bf_inv_begin(&c, slot, &t) != 0)
            _exit(4);
        /* half a payload, then die */
        atomic_store(&c.records[slot].w[3], 0xdeadbeefdeadbeefull);
        raise(SIGKILL);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFSIGNALED(st));
    struct bf_machine_rec r;
    ck_assert_int_eq(bf_inv_read(&g_s, slot, &r), -EAGAIN); /* bounded, not a hang */
    ck_assert_int_eq(bf_inv_repair_dead_writer(&g_s, (uint32_t)pid), 1);
    ck_assert_int_eq(bf_inv_read(&g_s, slot, &r), 0);
    ck_assert(r.flags & BF_REC_NEEDS_REFRESH);
    ck_assert(r.flags & BF_REC_VALID);
    ck_assert_uint_eq(r.id, r0.id); /* untouched words survive */
    ck_assert_uint_eq(atomic_load(&g_s.records[slot].seq) & 1, 0);
    ck_assert_uint_eq(atomic_load(&g_s.records[slot].writer), 0);
    /* the repair is visible to the change-log consumer */
    ck_assert_uint_ge(atomic_load(&g_s.changelog[BF_CL_SUPERVISOR].head), 1);
    /* and the record can be written again */
    struct bf_inv_txn t;
    ck_assert_int_eq(bf_inv_begin(&g_s, slot, &t), 0);
    bf_inv_commit(&g_s, &t, &r0, BF_CL_RECONCILER);
    /* a clean repair of an innocent pid changes nothing */
    ck_assert_int_eq(bf_inv_repair_dead_writer(&g_s, 999999), 0);
}
END_TEST

static void count_cb(void *arg, uint32_t slot)
{
    (void)slot;
    (*(int *)arg)++;
}

START_TEST(changelog_overflow_is_signalled_then_recovers)
{
    uint64_t cap = (uint64_t)g_s.changelog_mask + 1;
    int n = 0;
    for (uint32_t i = 0; i < 10; i++)
        bf_cl_append(&g_s, BF_CL_EXECUTOR, i);
    ck_assert_int_eq(bf_cl_drain(&g_s, BF_CL_EXECUTOR, count_cb, &n), 10);
    ck_assert_int_eq(n, 10);
    for (uint64_t i = 0; i < cap + 5; i++)
        bf_cl_append(&g_s, BF_CL_EXECUTOR, (uint32_t)(i % 4096));
    n = 0;
    ck_assert_int_eq(bf_cl_drain(&g_s, BF_CL_EXECUTOR, count_cb, &n), -EOVERFLOW);
    ck_assert_uint_eq(atomic_load(&g_s.changelog[BF_CL_EXECUTOR].overflows), 1);
    bf_cl_append(&g_s, BF_CL_EXECUTOR, 3);
    n = 0;
    ck_assert_int_eq(bf_cl_drain(&g_s, BF_CL_EXECUTOR, count_cb, &n), 1);
    ck_assert_int_eq(bf_cl_drain(&g_s, BF_CL_EXECUTOR, count_cb, &n), 0);
}
END_TEST

START_TEST(ring_wraps_reports_full_and_empty_in_order)
{
    struct bf_action_msg m, out;
    memset(&m, 0, sizeof m);
    uint64_t cap = g_s.ring[BF_RING_ACTIONS]->capacity;
    ck_assert_int_eq(bf_ring_pop(&g_s, BF_RING_ACTIONS, &out), -EAGAIN);
    uint64_t next_out = 0, next_in = 0;
    /* fill, verify full, then stream 3 capacities through with wrap */
    for (; next_in < cap; next_in++) {
        m.serial = next_in;
        ck_assert_int_eq(bf_ring_push(&g_s, BF_RING_ACTIONS, &m), 0);
    }
    m.serial = 12345;
    ck_assert_int_eq(bf_ring_push(&g_s, BF_RING_ACTIONS, &m), -ENOSPC);
    ck_assert_uint_eq(atomic_load(&g_s.ring[BF_RING_ACTIONS]->drops), 1);
    ck_assert_uint_eq(bf_ring_depth(&g_s, BF_RING_ACTIONS), cap);
    while (next_out < 3 * cap) {
        ck_assert_int_eq(bf_ring_pop(&g_s, BF_RING_ACTIONS, &out), 0);
        ck_assert_uint_eq(out.serial, next_out++);
        if (next_in < 3 * cap) {
            m.serial = next_in++;
            ck_assert_int_eq(bf_ring_push(&g_s, BF_RING_ACTIONS, &m), 0);
        }
    }
    ck_assert_int_eq(bf_ring_pop(&g_s, BF_RING_ACTIONS, &out), -EAGAIN);
    ck_assert_uint_eq(bf_ring_depth(&g_s, BF_RING_ACTIONS), 0);
}
END_TEST

START_TEST(ring_redelivers_unreleased_entries_after_consumer_restart)
{
    struct bf_action_msg m;
    memset(&m, 0, sizeof m);
    for (uint64_t i = 0; i < 10; i++) {
        m.serial = 100 + i;
        ck_assert_int_eq(bf_ring_push(&g_s, BF_RING_ACTIONS, &m), 0);
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* consumer reads ahead, releases only the first 4, then crashes */
        struct bf_shm c;
        if (bf_shm_attach(&c, g_id, false, NULL, 0) != 0)
            _exit(3);
        struct bf_action_msg o;
        uint64_t base = bf_ring_cons(&c, BF_RING_ACTIONS);
        for (uint64_t p = base; p < base + 10; p++)
            if (bf_ring_read_at(&c, BF_RING_ACTIONS, p, &o) != 0)
                _exit(4);
        bf_ring_release(&c, BF_RING_ACTIONS, base + 4);
        raise(SIGKILL);
    }
    int st;
    waitpid(pid, &st, 0);
    /* the successor sees entries 4..9 again */
    struct bf_action_msg o;
    for (uint64_t i = 4; i < 10; i++) {
        ck_assert_int_eq(bf_ring_pop(&g_s, BF_RING_ACTIONS, &o), 0);
        ck_assert_uint_eq(o.serial, 100 + i);
    }
    ck_assert_int_eq(bf_ring_pop(&g_s, BF_RING_ACTIONS, &o), -EAGAIN);
    ck_assert_int_eq(bf_ring_read_at(&g_s, BF_RING_ACTIONS, 0, &o), -ERANGE);
}
END_TEST

START_TEST(bytes_ring_wraps_variable_records_and_refuses_oversize)
{
    uint64_t cap = g_s.ring[BF_RING_BOOT_RESP]->capacity;
    static char blob[1 << 20], out[1 << 20];
    for (size_t i = 0; i < sizeof blob; i++)
        blob[i] = (char)(i * 7);
    ck_assert_int_eq(bf_ring_push_bytes(&g_s, BF_RING_BOOT_RESP, blob, cap / 2 - 7, NULL, 0),
                     -E2BIG);
    size_t total = 0, len;
    for (int i = 0; total < 3 * cap; i++) {
        size_t a = 16, b = (size_t)(1000 + (i * 7919) % (sizeof blob - 1000));
        uint64_t hdr[2] = {(uint64_t)i, b};
        ck_assert_int_eq(bf_ring_push_bytes(&g_s, BF_RING_BOOT_RESP, hdr, a, blob, b), 0);
        ck_assert_int_eq(bf_ring_pop_bytes(&g_s, BF_RING_BOOT_RESP, out, 16, &len), -EMSGSIZE);
        ck_assert_uint_eq(len, a + b);
        ck_assert_int_eq(bf_ring_pop_bytes(&g_s, BF_RING_BOOT_RESP, out, sizeof out, &len), 0);
        ck_assert_uint_eq(len, a + b);
        uint64_t got[2];
        memcpy(got, out, 16);
        ck_assert_uint_eq(got[0], (uint64_t)i);
        ck_assert_int_eq(memcmp(out + 16, blob, b), 0);
        total += a + b;
    }
    ck_assert_int_eq(bf_ring_pop_bytes(&g_s, BF_RING_BOOT_RESP, out, sizeof out, &len), -EAGAIN);
}
END_TEST

/* The bytes rings hold records of up to half the ring less the 8-byte
 * record header (i18-needseg, stop 33: the rings are sized as twice their
 * largest record): such a record fits once the ring has drained wherever the
 * producer index stands, one byte more is refused, and the bootstrap ring
 * still takes the documented largest blob (4 MiB with its 32-byte header). */
START_TEST(bytes_ring_takes_a_half_ring_record_at_every_offset)
{
    const int rings[] = {BF_RING_BOOT_RESP, BF_RING_COORD_IN, BF_RING_COORD_OUT, BF_RING_OWN_AUDIT};
    for (size_t k = 0; k < sizeof rings / sizeof rings[0]; k++) {
        int ring = rings[k];
        uint64_t cap = g_s.ring[ring]->capacity;
        size_t big = (size_t)(cap / 2 - 8);
        char *blob = malloc(big + 1), *out = malloc(big + 1);
        ck_assert_ptr_nonnull(blob);
        ck_assert_ptr_nonnull(out);
        for (size_t i = 0; i <= big; i++)
            blob[i] = (char)(i * 13 + k);
        ck_assert_int_eq(bf_ring_push_bytes(&g_s, ring, blob, big + 1, NULL, 0), -E2BIG);
        size_t len;
        /* producer offsets across the whole ring, the middle ones included */
        for (uint64_t step = 0; step < 40; step++) {
            ck_assert_int_eq(bf_ring_push_bytes(&g_s, ring, blob, big, NULL, 0), 0);
            ck_assert_int_eq(bf_ring_pop_bytes(&g_s, ring, out, big + 1, &len), 0);
            ck_assert_uint_eq(len, big);
            ck_assert_int_eq(memcmp(out, blob, big), 0);
            size_t small = (size_t)(cap / 40) - 8 + (size_t)(step % 3) * 8;
            ck_assert_int_eq(bf_ring_push_bytes(&g_s, ring, blob, small, NULL, 0), 0);
            ck_assert_int_eq(bf_ring_pop_bytes(&g_s, ring, out, big + 1, &len), 0);
            ck_assert_uint_eq(len, small);
        }
        ck_assert_int_eq(bf_ring_pop_bytes(&g_s, ring, out, big + 1, &len), -EAGAIN);
        free(blob);
        free(out);
    }
    /* the documented contract: bootstrap blobs up to 4 MiB (less a few bytes) */
    ck_assert_uint_ge(g_s.ring[BF_RING_BOOT_RESP]->capacity / 2 - 8 -
                          sizeof(struct bf_boot_resp_hdr),
                      (4u << 20) - 64);
    /* and the coordinator's: an instruction or ack naming BF_OWN_MAX_IDS
     * ids of BF_OWN_ID_MAX bytes (ADR-0055 §7; each id is a tag, a 2-byte
     * length and its bytes on the wire), with its instruction id, shard id
     * and header around them */
    size_t largest = (size_t)(BF_OWN_MAX_IDS + 4) * (BF_OWN_ID_MAX + 3) + 64;
    ck_assert_uint_ge(g_s.ring[BF_RING_COORD_IN]->capacity / 2 - 8, largest);
    ck_assert_uint_ge(g_s.ring[BF_RING_COORD_OUT]->capacity / 2 - 8, largest);
}
END_TEST

/* A bytes ring whose record header was corrupted (only another appliance
 * process can write it) is dropped, never read past the ring's data or past
 * what the producer published: a header near the ring's end claiming the
 * largest record, and one claiming more than was pushed. */
START_TEST(a_corrupt_bytes_ring_record_is_dropped_not_read_past_the_ring)
{
    int ring = BF_RING_COORD_IN;
    struct bf_ring_hdr *r = g_s.ring[ring];
    uint64_t cap = r->capacity;
    uint8_t *d = (uint8_t *)g_s.rings_hdr + r->data_off;
    static char out[8u << 20];
    size_t len;
    /* move both ends to 64 bytes before the ring's end */
    atomic_store(&r->prod, 5 * cap - 64);
    atomic_store(&r->cons, 5 * cap - 64);
    ck_assert_int_eq(bf_ring_push_bytes(&g_s, ring, "abcdefgh", 8, NULL, 0), 0);
    uint32_t *hdr = (uint32_t *)(d + cap - 64);
    ck_assert_uint_eq(hdr[0], 8);
    hdr[0] = (uint32_t)(cap / 2 - 8); /* the largest record, from 64 bytes before the end */
    ck_assert_int_eq(bf_ring_pop_bytes(&g_s, ring, out, sizeof out, &len), -EAGAIN);
    ck_assert_uint_eq(atomic_load(&r->cons), atomic_load(&r->prod));
    /* a record longer than what was published */
    ck_assert_int_eq(bf_ring_push_bytes(&g_s, ring, "abcdefgh", 8, NULL, 0), 0);
    uint64_t off = (atomic_load(&r->prod) - 16) & (cap - 1);
    hdr = (uint32_t *)(d + off);
    ck_assert_uint_eq(hdr[0], 8);
    hdr[0] = 32;
    ck_assert_int_eq(bf_ring_pop_bytes(&g_s, ring, out, sizeof out, &len), -EAGAIN);
    /* and the ring works on */
    ck_assert_int_eq(bf_ring_push_bytes(&g_s, ring, "ok", 2, NULL, 0), 0);
    ck_assert_int_eq(bf_ring_pop_bytes(&g_s, ring, out, sizeof out, &len), 0);
    ck_assert_uint_eq(len, 2);
    ck_assert_int_eq(memcmp(out, "ok", 2), 0);
}
END_TEST

/* cluster-a's row: in use, generation 5, 3 need rows */
static struct bf_cluster_rec cluster_a_row(void)
{
    struct bf_cluster_rec r;
    memset(&r, 0, sizeof r);
    r.name_ref = intern("cluster-a");
    r.in_use = 1;
    r.generation = 5;
    r.rows_count = 3;
    return r;
}

START_TEST(cluster_latch_readers_never_stall_on_a_dead_writer)
{
    struct bf_cluster_rec r = cluster_a_row(), got;
    bf_cluster_write(&g_s, 0, &r);
    atomic_store(&g_s.needs->n_clusters, 1);
    ck_assert_int_eq(bf_cluster_find(&g_s, r.name_ref), 0);
    pid_t pid = fork();
    if (pid == 0) {
        struct bf_shm c;
        if (bf_shm_attach(&c, g_id, false, NULL, 0) != 0)
            _exit(3);
        /* start a write (seq odd, copy 0 half-written), die */
        struct bf_shm_cluster *cl = &c.clusters[0];
        atomic_store(&cl->seq, atomic_load(&cl->seq) + 1);
        atomic_store(&cl->w[0][2], 0xffffffffffffffffull);
        raise(SIGKILL);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert_int_eq(bf_cluster_read(&g_s, 0, &got, NULL), 0);
    ck_assert_uint_eq(got.generation, 5); /* the intact copy */
    ck_assert_uint_eq(got.rows_count, 3);
    /* the session's next write recovers the odd seq */
    r.generation = 6;
    bf_cluster_write(&g_s, 0, &r);
    ck_assert_int_eq(bf_cluster_read(&g_s, 0, &got, NULL), 0);
    ck_assert_uint_eq(got.generation, 6);
}
END_TEST

/* A session killed inside bf_cluster_write, at either half: the row the
 * readers were reading is intact, and the repair makes both copies and the
 * seq as after a complete write. */
static pid_t die_mid_cluster_write(uint32_t idx, bool second_half, uint64_t new_generation)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct bf_shm c;
        if (bf_shm_attach(&c, g_id, false, NULL, 0) != 0)
            _exit(3);
        struct bf_shm_cluster *cl = &c.clusters[idx];
        atomic_store(&cl->writer, (uint32_t)getpid());
        uint32_t seq = atomic_load(&cl->seq);
        atomic_store(&cl->seq, seq + 1); /* readers on copy 1 */
        if (!second_half) {
            atomic_store(&cl->w[0][1], 0xffffffffffffffffull); /* copy 0 torn */
            raise(SIGKILL);
        }
        struct bf_cluster_rec r;
        uint64_t w[BF_CLUSTER_WORDS];
        for (int i = 0; i < BF_CLUSTER_WORDS; i++)
            w[i] = atomic_load(&cl->w[1][i]);
        memcpy(&r, w, sizeof r);
        r.generation = new_generation;
        memcpy(w, &r, sizeof r);
        for (int i = 0; i < BF_CLUSTER_WORDS; i++)
            atomic_store(&cl->w[0][i], w[i]);
        atomic_store(&cl->seq, seq + 2);                   /* readers on copy 0 */
        atomic_store(&cl->w[1][1], 0xffffffffffffffffull); /* copy 1 torn */
        raise(SIGKILL);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFSIGNALED(st));
    return pid;
}

static void assert_cluster_copies_equal(uint32_t idx)
{
    struct bf_shm_cluster *cl = &g_s.clusters[idx];
    for (int i = 0; i < BF_CLUSTER_WORDS; i++)
        ck_assert_uint_eq(atomic_load(&cl->w[0][i]), atomic_load(&cl->w[1][i]));
    ck_assert_uint_eq(atomic_load(&cl->seq) & 1u, 0);
    ck_assert_uint_eq(atomic_load(&cl->writer), 0);
}

START_TEST(cluster_row_left_mid_write_is_repaired_from_the_copy_readers_used)
{
    struct bf_cluster_rec r = cluster_a_row(), got;
    bf_cluster_write(&g_s, 0, &r);
    bf_cluster_write(&g_s, 1, &r);
    atomic_store(&g_s.needs->n_clusters, 2);
    /* died in the first half: copy 0 torn, readers on the old copy 1 */
    pid_t pid = die_mid_cluster_write(0, false, 0);
    ck_assert_int_eq(bf_cluster_repair_dead_writer(&g_s, 999999), 0); /* an innocent pid */
    ck_assert_uint_eq(atomic_load(&g_s.clusters[0].seq) & 1u, 1);
    ck_assert_int_eq(bf_cluster_repair_dead_writer(&g_s, (uint32_t)pid), 1);
    assert_cluster_copies_equal(0);
    ck_assert_int_eq(bf_cluster_read(&g_s, 0, &got, NULL), 0);
    ck_assert_uint_eq(got.generation, 5);
    ck_assert_uint_eq(got.rows_count, 3);
    /* died in the second half: copy 0 holds the new row, copy 1 torn */
    pid = die_mid_cluster_write(1, true, 6);
    ck_assert_int_eq(bf_cluster_read(&g_s, 1, &got, NULL), 0);
    ck_assert_uint_eq(got.generation, 6);
    uint32_t seq = atomic_load(&g_s.clusters[1].seq);
    ck_assert_int_eq(bf_cluster_repair_dead_writer(&g_s, (uint32_t)pid), 1);
    assert_cluster_copies_equal(1);
    ck_assert_uint_eq(atomic_load(&g_s.clusters[1].seq), seq); /* already even: kept */
    ck_assert_int_eq(bf_cluster_read(&g_s, 1, &got, NULL), 0);
    ck_assert_uint_eq(got.generation, 6);
    /* the rows stay writable, and a second repair finds nothing */
    r.generation = 7;
    bf_cluster_write(&g_s, 1, &r);
    ck_assert_int_eq(bf_cluster_read(&g_s, 1, &got, NULL), 0);
    ck_assert_uint_eq(got.generation, 7);
    ck_assert_int_eq(bf_cluster_repair_dead_writer(&g_s, (uint32_t)pid), 0);
}
END_TEST

START_TEST(stamp_left_odd_by_a_dead_session_is_repaired_only_for_the_session)
{
    uint32_t c = intern("cluster-a"), f = intern("p=1|ipb=0|rpb=0|reqs=|spr=");
    ck_assert_int_eq(bf_stamp_touch(&g_s, c, f, 1000), 0);
    int i = bf_stamp_find(&g_s, c, f);
    ck_assert_int_ge(i, 0);
    pid_t pid = fork();
    if (pid == 0) {
        struct bf_shm s;
        if (bf_shm_attach(&s, g_id, false, NULL, 0) != 0)
            _exit(3);
        atomic_fetch_add(&s.stamps[i].seq, 1); /* a stamp write begun */
        raise(SIGKILL);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert_int_eq(bf_stamp_find(&g_s, c, f), -1); /* unreadable (bounded), not a hang */
    struct bf_repair_report rep;
    bf_shm_repair_dead_writer(&g_s, (uint32_t)pid, BF_ROLE_EXECUTOR, &rep);
    ck_assert_int_eq(rep.stamps, 0); /* the executor never writes a stamp */
    ck_assert_int_eq(bf_stamp_find(&g_s, c, f), -1);
    bf_shm_repair_dead_writer(&g_s, (uint32_t)pid, BF_ROLE_SESSION, &rep);
    ck_assert_int_eq(rep.stamps, 1);
    ck_assert_int_eq(rep.records, 0);
    ck_assert_int_eq(rep.cluster_rows, 0);
    ck_assert_int_eq(bf_stamp_find(&g_s, c, f), i);
    int64_t lat = 0;
    ck_assert_int_eq(bf_stamp_observe(&g_s, c, f, 4000, &lat), 1); /* first-seen kept */
    ck_assert_int_eq(lat, 3000);
}
END_TEST

struct peek_ctx {
    int calls, stop_at, lap;
    uint32_t last;
};
static int peek_cb(void *arg, uint32_t slot)
{
    struct peek_ctx *x = arg;
    x->calls++;
    x->last = slot;
    for (int i = 0; i < x->lap; i++) /* the producer laps us mid-read */
        bf_cl_append(&g_s, BF_CL_EXECUTOR, 7);
    x->lap = 0;
    return x->calls == x->stop_at;
}

START_TEST(changelog_peek_reads_without_consuming_and_reports_laps)
{
    uint64_t cap = (uint64_t)g_s.changelog_mask + 1, head;
    uint64_t h0 = bf_cl_head(&g_s, BF_CL_EXECUTOR);
    for (uint32_t i = 0; i < 10; i++)
        bf_cl_append(&g_s, BF_CL_EXECUTOR, i);
    bf_cl_append(&g_s, BF_CL_EXECUTOR, g_s.max_machines); /* not a slot: skipped */
    struct peek_ctx x = {0};
    ck_assert_int_eq(bf_cl_peek(&g_s, BF_CL_EXECUTOR, h0, &head, peek_cb, &x), 10);
    ck_assert_int_eq(x.calls, 10);
    ck_assert_uint_eq(x.last, 9);
    ck_assert_uint_eq(head, h0 + 11);
    ck_assert_uint_eq(bf_cl_head(&g_s, BF_CL_EXECUTOR), head);
    /* early stop */
    x = (struct peek_ctx){.stop_at = 3};
    ck_assert_int_eq(bf_cl_peek(&g_s, BF_CL_EXECUTOR, h0, &head, peek_cb, &x), 3);
    /* nothing was consumed: the cycle still drains every entry */
    int n = 0;
    ck_assert_int_eq(bf_cl_drain(&g_s, BF_CL_EXECUTOR, count_cb, &n), 11);
    ck_assert_int_eq(n, 10);
    /* lapped before the read: nothing passed, the head reported */
    uint64_t from = bf_cl_head(&g_s, BF_CL_EXECUTOR);
    for (uint64_t i = 0; i < cap + 1; i++)
        bf_cl_append(&g_s, BF_CL_EXECUTOR, 1);
    x = (struct peek_ctx){0};
    ck_assert_int_eq(bf_cl_peek(&g_s, BF_CL_EXECUTOR, from, &head, peek_cb, &x), -EOVERFLOW);
    ck_assert_int_eq(x.calls, 0);
    ck_assert_uint_eq(head, from + cap + 1);
    /* lapped during the read */
    from = bf_cl_head(&g_s, BF_CL_EXECUTOR);
    bf_cl_append(&g_s, BF_CL_EXECUTOR, 2);
    x = (struct peek_ctx){.lap = (int)cap};
    ck_assert_int_eq(bf_cl_peek(&g_s, BF_CL_EXECUTOR, from, &head, peek_cb, &x), -ESTALE);
    ck_assert_int_eq(x.calls, 1);
    ck_assert_uint_eq(head, from + 1);
    /* skip empties the log for the consumer */
    bf_cl_skip(&g_s, BF_CL_EXECUTOR);
    n = 0;
    ck_assert_int_eq(bf_cl_drain(&g_s, BF_CL_EXECUTOR, count_cb, &n), 0);
}
END_TEST

START_TEST(ownership_tables_are_read_whole_or_refused_while_written)
{
    static uint64_t in[(BF_OWN_TABLES_BYTES + 7) / 8], out[(BF_OWN_TABLES_BYTES + 7) / 8];
    _Static_assert(BF_OWN_TABLES_BYTES % 8 == 0, "word copies");
    for (size_t i = 0; i < sizeof in / 8; i++)
        in[i] = 0x0101010101010101ull * (i % 251);
    bf_own_tables_publish(&g_s, in);
    ck_assert_uint_eq(atomic_load(&g_s.st->own.seq), 2);
    ck_assert_int_eq(bf_own_tables_read(&g_s, out), 0);
    ck_assert_int_eq(memcmp(in, out, BF_OWN_TABLES_BYTES), 0);
    struct bf_shm ro;
    char err[256];
    ck_assert_int_eq(bf_shm_attach(&ro, g_id, true, err, sizeof err), 0);
    memset(out, 0, sizeof out);
    ck_assert_int_eq(bf_own_tables_read(&ro, out), 0); /* read-only attachment */
    ck_assert_int_eq(memcmp(in, out, BF_OWN_TABLES_BYTES), 0);
    /* a write in progress (seq odd): bounded refusal */
    atomic_store(&g_s.st->own.seq, 3);
    ck_assert_int_eq(bf_own_tables_read(&ro, out), -EAGAIN);
    bf_shm_detach(&ro);
}
END_TEST

START_TEST(needs_copy_returns_the_published_rows)
{
    struct bf_need_row rows[3];
    memset(rows, 0, sizeof rows);
    for (int i = 0; i < 3; i++) {
        rows[i].profile_ref = (uint32_t)(10 + i);
        rows[i].aggregate[0] = 1000 * (i + 1);
    }
    memcpy(&g_s.rows[5], rows, sizeof rows);
    struct bf_cluster_rec r;
    memset(&r, 0, sizeof r);
    r.in_use = 1;
    r.rows_off = 5;
    r.rows_count = 3;
    r.generation = 1;
    bf_cluster_write(&g_s, 1, &r);
    struct bf_need_row out[3];
    struct bf_cluster_rec got;
    ck_assert_int_eq(bf_needs_copy(&g_s, 1, &got, out, 3), 3);
    ck_assert_int_eq(memcmp(out, rows, sizeof rows), 0);
    ck_assert_int_eq(bf_needs_copy(&g_s, 1, &got, out, 2), 3); /* too small: asks for more */
}
END_TEST

START_TEST(registries_assign_stable_indices)
{
    ck_assert_int_eq(bf_dim_intern(&g_s, "cpu"), 0);
    ck_assert_int_eq(bf_dim_intern(&g_s, "memory"), 1);
    ck_assert_int_eq(bf_dim_intern(&g_s, "cpu"), 0);
    ck_assert_int_eq(bf_dim_lookup(&g_s, "nvidia.com/gpu"), -1);
    struct bf_dims d;
    bf_shm_dims(&g_s, &d);
    ck_assert_uint_eq(d.n, 2);
    ck_assert_int_eq(bf_type_intern(&g_s, ""), 0);
    int t = bf_type_intern(&g_s, "a3-highgpu-8g");
    ck_assert_int_eq(t, 1);
    ck_assert_str_eq(bf_type_name(&g_s, (uint32_t)t), "a3-highgpu-8g");
    ck_assert_int_eq(bf_zone_intern(&g_s, "zone-a"), 1);
    ck_assert_str_eq(bf_zone_name(&g_s, 0), "");
    for (int i = 2; i < BF_MAX_DIMS; i++) {
        char n[16];
        snprintf(n, sizeof n, "dim%d", i);
        ck_assert_int_eq(bf_dim_intern(&g_s, n), i);
    }
    ck_assert_int_eq(bf_dim_intern(&g_s, "one-too-many"), -ENOSPC);
}
END_TEST

START_TEST(provisioning_stamps_are_observed_once_and_restamped_after)
{
    uint32_t c = intern("cluster-a"), f = intern("p=1|ipb=0|rpb=0|reqs=|spr=");
    int64_t lat = 0;
    ck_assert_int_eq(bf_stamp_observe(&g_s, c, f, 100, &lat), 0); /* nothing stamped */
    ck_assert_int_eq(bf_stamp_touch(&g_s, c, f, 1000), 0);
    ck_assert_int_eq(bf_stamp_touch(&g_s, c, f, 2000), 0); /* unobserved: keeps first-seen */
    ck_assert_int_eq(bf_stamp_observe(&g_s, c, f, 5000, &lat), 1);
    ck_assert_int_eq(lat, 4000);
    ck_assert_int_eq(bf_stamp_observe(&g_s, c, f, 6000, &lat), 0); /* observe-once */
    ck_assert_int_eq(bf_stamp_touch(&g_s, c, f, 7000), 0);         /* re-stamped */
    ck_assert_int_eq(bf_stamp_observe(&g_s, c, f, 7500, &lat), 1);
    ck_assert_int_eq(lat, 500);
    /* other keys are independent */
    uint32_t c2 = intern("cluster-b");
    ck_assert_int_eq(bf_stamp_find(&g_s, c2, f), -1);
    ck_assert_int_eq(bf_stamp_touch(&g_s, c2, f, 9000), 0);
    ck_assert_int_ge(bf_stamp_find(&g_s, c2, f), 0);
}
END_TEST

/* Go's TestObserveRolledUpDemand_PrunesAbsent, in the stamp table: a pruned
 * (cluster, fingerprint) gives no latency sample, other keys keep theirs,
 * and demand that comes back is timed from its return, not its first
 * appearance (Go deletes the map entry; we mark it absent). */
START_TEST(provisioning_stamps_pruned_when_withdrawn_restart_on_return)
{
    uint32_t c = intern("cluster-p"), f1 = intern("p=1|ipb=0|rpb=0|reqs=|spr="),
             f2 = intern("p=2|ipb=0|rpb=0|reqs=|spr=");
    int64_t lat = 0;
    ck_assert_int_eq(bf_stamp_prune(&g_s, c, f1), 0); /* nothing to prune */
    ck_assert_int_eq(bf_stamp_touch(&g_s, c, f1, 1000), 0);
    ck_assert_int_eq(bf_stamp_touch(&g_s, c, f2, 1000), 0);
    ck_assert_int_eq(bf_stamp_prune(&g_s, c, f2), 1);
    ck_assert_int_eq(bf_stamp_prune(&g_s, c, f2), 0); /* already absent */
    ck_assert_int_eq(bf_stamp_observe(&g_s, c, f2, 3000, &lat), 0);
    ck_assert_int_eq(bf_stamp_observe(&g_s, c, f1, 3000, &lat), 1); /* the other key kept */
    ck_assert_int_eq(lat, 2000);
    ck_assert_int_eq(bf_stamp_touch(&g_s, c, f2, 5000), 0); /* demanded again */
    ck_assert_int_eq(bf_stamp_touch(&g_s, c, f2, 6000), 0); /* first-seen kept from 5000 */
    ck_assert_int_eq(bf_stamp_observe(&g_s, c, f2, 8000, &lat), 1);
    ck_assert_int_eq(lat, 3000);
    /* an observed stamp pruned then demanded again is also timed afresh */
    ck_assert_int_eq(bf_stamp_prune(&g_s, c, f1), 1);
    ck_assert_int_eq(bf_stamp_touch(&g_s, c, f1, 9000), 0);
    ck_assert_int_eq(bf_stamp_observe(&g_s, c, f1, 9100, &lat), 1);
    ck_assert_int_eq(lat, 100);
}
END_TEST

START_TEST(the_string_arena_grows_its_file_with_use_and_every_process_sees_it)
{
    struct bf_strtab_meta *m = &g_s.inv->strtab;
    /* created backed by one step, far below the reserve */
    off_t f0 = (off_t)shm_fixture_file_bytes(BF_SEG_INVENTORY);
    ck_assert_uint_eq((uint64_t)f0, g_s.arena_off + atomic_load(&m->arena_committed));
    ck_assert_uint_lt(atomic_load(&m->arena_committed), g_s.arena_bytes / 8);
    ck_assert_uint_eq(bf_shm_segment_bytes(&g_s, BF_SEG_INVENTORY), (size_t)f0);
    ck_assert_uint_eq(g_s.len[BF_SEG_INVENTORY], g_s.arena_off + g_s.arena_bytes);
    /* ~2.4 MB of strings: the file grows, always ahead of what is used */
    char buf[160];
    uint32_t r = 0;
    for (int i = 0; i < 20000; i++) {
        snprintf(buf, sizeof buf, "i-%08d-%0110d", i, i);
        r = intern(buf);
        ck_assert_uint_le(atomic_load(&m->arena_used), atomic_load(&m->arena_committed));
    }
    off_t f1 = (off_t)shm_fixture_file_bytes(BF_SEG_INVENTORY);
    ck_assert_int_gt(f1, f0 + (2 << 20));
    ck_assert_uint_eq((uint64_t)f1, g_s.arena_off + atomic_load(&m->arena_committed));
    ck_assert_uint_le(atomic_load(&m->arena_committed),
                      atomic_load(&m->arena_used) + atomic_load(&m->arena_used) / 8 + (2u << 20));
    /* another process maps the segments and reads the newest string */
    pid_t pid = fork();
    if (pid == 0) {
        struct bf_shm c;
        if (bf_shm_attach(&c, g_id, true, NULL, 0) != 0)
            _exit(2);
        uint32_t l;
        const char *p = bf_str(&c, r, &l);
        _exit(p && strcmp(p, buf) == 0 ? 0 : 3);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* the file cannot grow (no descriptor here): refused, counted, nothing
     * published, and interning works again once it can */
    int fd = g_s.inv_fd;
    g_s.inv_fd = -1;
    uint64_t fails = atomic_load(&m->intern_failures);
    uint32_t x;
    int rc = 0;
    for (int i = 0; rc == 0 && i < 100000; i++) {
        snprintf(buf, sizeof buf, "j-%08d-%0110d", i, i);
        rc = bf_str_intern_cstr(&g_s, buf, &x);
    }
    ck_assert_int_eq(rc, -ENOSPC);
    ck_assert_uint_eq(atomic_load(&m->intern_failures), fails + 1);
    ck_assert_int_ne(bf_str_find(&g_s, buf, (uint32_t)strlen(buf), &x), 0);
    g_s.inv_fd = fd;
    ck_assert_int_eq(bf_str_intern_cstr(&g_s, buf, &x), 0);
}
END_TEST

START_TEST(soft_interning_stops_at_the_reserve_and_keeps_room_for_essentials)
{
    char buf[64];
    uint32_t r;
    int n = 0, rc = 0;
    /* unique per-event strings: the soft variant refuses before the arena is full */
    for (; rc == 0 && n < 10000000; n++) {
        snprintf(buf, sizeof buf, "host-ref-%08d-padding-padding-padding", n);
        rc = bf_str_intern_soft(&g_s, buf, (uint32_t)strlen(buf), &r);
    }
    ck_assert_int_eq(rc, -ENOSPC);
    ck_assert_uint_eq(atomic_load(&g_s.inv->strtab.intern_failures), 0);
    /* an already interned string is still found through the soft path */
    ck_assert_int_eq(bf_str_intern_soft(&g_s, "host-ref-00000000-padding-padding-padding", 41, &r),
                     0);
    /* essential strings still fit in the reserve */
    for (int i = 0; i < 1000; i++) {
        snprintf(buf, sizeof buf, "machine-%d", i);
        ck_assert_int_eq(bf_str_intern_cstr(&g_s, buf, &r), 0);
    }
}
END_TEST

/* The verdict writer's domain names are peer-controlled (label values under
 * a Same key): a new one is interned only while the string table has room
 * to spare, so a churning fleet of names cannot starve machine ids; a name
 * the table already holds is still found, and a refused one is counted. */
START_TEST(verdict_domain_names_never_take_the_string_tables_reserve)
{
    struct bf_verdict_writer w;
    ck_assert_uint_eq(bf_verdict_write_begin(&w, &g_s, 0, 4), 4);
    uint32_t known = bf_verdict_domain_ref(&w, "zone=us-east-1a");
    ck_assert_uint_ne(known, 0);
    char buf[64];
    uint32_t r;
    int rc = 0;
    for (int n = 0; rc == 0 && n < 10000000; n++) { /* fill up to the soft reserve */
        snprintf(buf, sizeof buf, "host-ref-%08d-padding-padding-padding", n);
        rc = bf_str_intern_soft(&g_s, buf, (uint32_t)strlen(buf), &r);
    }
    ck_assert_int_eq(rc, -ENOSPC);
    uint64_t entries = atomic_load(&g_s.inv->strtab.entries);
    ck_assert_uint_eq(w.lost, 0);
    ck_assert_uint_eq(bf_verdict_domain_ref(&w, "hostname=ip-10-0-3-17.ec2.internal"), 0);
    ck_assert_uint_eq(w.lost, 1);
    ck_assert_uint_eq(atomic_load(&g_s.inv->strtab.entries), entries);
    ck_assert_uint_eq(bf_verdict_domain_ref(&w, "zone=us-east-1a"), known);
    /* machine ids still fit */
    ck_assert_int_eq(bf_str_intern_cstr(&g_s, "machine-after-the-names", &r), 0);
}
END_TEST

START_TEST(segments_are_private_and_another_user_cannot_attach)
{
    for (int k = 1; k < BF_SEG_KIND_COUNT; k++) {
        char name[128], path[160];
        bf_shm_name(g_id, k, name, sizeof name);
        snprintf(path, sizeof path, "/dev/shm%s", name);
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_msg((st.st_mode & 0777) == 0600, "%s mode %o", path, st.st_mode & 0777);
    }
    if (geteuid() != 0)
        return; /* needs root to become another user */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534))
            _exit(10);
        struct bf_shm x;
        char err[256];
        int ro = bf_shm_attach(&x, g_id, true, err, sizeof err);
        int rw = bf_shm_attach(&x, g_id, false, err, sizeof err);
        _exit(ro == -EACCES && rw == -EACCES ? 0 : 11);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nobody could attach (%d)", st);
}
END_TEST

START_TEST(attach_refuses_segments_others_can_write_or_another_uid_owns)
{
    char err[256];
    struct bf_shm x;
    /* hand the segments to nobody: a root read-write attach is still allowed,
     * a non-root one must refuse (checked by a forked uid below) */
    struct bf_shm_owner own = {.uid = 65534, .gid = 65534, .mode = 0640};
    ck_assert_int_eq(bf_shm_set_owner(&g_s, &own, err, sizeof err), 0);
    ck_assert_int_eq(bf_shm_attach(&x, g_id, true, err, sizeof err), 0);
    bf_shm_detach(&x);
    if (geteuid() == 0) {
        pid_t pid = fork();
        if (pid == 0) {
            if (setresgid(1, 1, 1) || setresuid(1, 1, 1)) /* daemon: not the owner */
                _exit(10);
            struct bf_shm y;
            char e2[256];
            _exit(bf_shm_attach(&y, g_id, false, e2, sizeof e2) == -EACCES ? 0 : 11);
        }
        int st;
        waitpid(pid, &st, 0);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    /* a segment writable by the group: a read-only attacher cannot trust it */
    own.mode = 0660;
    ck_assert_int_eq(bf_shm_set_owner(&g_s, &own, err, sizeof err), 0);
    ck_assert_int_eq(bf_shm_attach(&x, g_id, true, err, sizeof err), -EPERM);
    ck_assert_ptr_nonnull(strstr(err, "writable by users other than its owner"));
    /* two owners among the four segments */
    own.mode = 0600;
    ck_assert_int_eq(bf_shm_set_owner(&g_s, &own, err, sizeof err), 0);
    char name[128];
    bf_shm_name(g_id, BF_SEG_STATE, name, sizeof name);
    int fd = shm_open(name, O_RDWR, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fchown(fd, 1, 1), 0);
    close(fd);
    ck_assert_int_eq(bf_shm_attach(&x, g_id, true, err, sizeof err), -EPERM);
    ck_assert_ptr_nonnull(strstr(err, "owned by uid 1, the others by uid 65534"));
}
END_TEST

/* ---- attach validates every header field against the file (corrupted or
 * truncated segments, bigfleet-inspect's input) ---- */

/* bf_shm_attach must refuse with -EPROTO, name the field (needle) and map
 * nothing; `kind` names the segment the message must name. */
static void attach_refused(int kind, const char *needle)
{
    struct bf_shm ro;
    char err[512] = "";
    int rc = bf_shm_attach(&ro, g_id, true, err, sizeof err);
    ck_assert_msg(rc == -EPROTO, "attach returned %d (%s), expected -EPROTO for %s", rc, err,
                  needle);
    ck_assert_msg(strstr(err, needle) != NULL, "message \"%s\" does not name \"%s\"", err, needle);
    char name[128];
    bf_shm_name(g_id, kind, name, sizeof name);
    ck_assert_msg(strstr(err, name) != NULL, "message \"%s\" does not name segment %s", err, name);
    for (int k = 1; k < BF_SEG_KIND_COUNT; k++)
        ck_assert_ptr_null(ro.base[k]); /* a refused attach keeps no mapping */
}

static void attach_accepted(void)
{
    struct bf_shm ro;
    char err[512] = "";
    int rc = bf_shm_attach(&ro, g_id, true, err, sizeof err);
    ck_assert_msg(rc == 0, "attach after the repair: %d %s", rc, err);
    bf_shm_detach(&ro);
}

static void resize_segment(int kind, off_t size)
{
    char name[128];
    bf_shm_name(g_id, kind, name, sizeof name);
    int fd = shm_open(name, O_RDWR, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, size), 0);
    close(fd);
}

START_TEST(attach_refuses_a_file_shorter_than_its_header)
{
    resize_segment(BF_SEG_NEEDS, 100);
    attach_refused(BF_SEG_NEEDS, "truncated (100 bytes, shorter than its 512-byte header)");
}
END_TEST

START_TEST(attach_refuses_a_file_whose_size_differs_from_its_header)
{
    uint64_t size = g_s.rings_hdr->size;
    resize_segment(BF_SEG_RINGS, (off_t)(size - 4096));
    char want[128];
    snprintf(want, sizeof want, "is %llu bytes but its header says %llu",
             (unsigned long long)(size - 4096), (unsigned long long)size);
    attach_refused(BF_SEG_RINGS, want);
}
END_TEST

START_TEST(attach_refuses_capacities_that_differ_between_segments)
{
    /* capacities a segment's own size does not depend on (a change that
     * moves its size is refused by the size check first) */
    g_s.needs_hdr->max_machines += 1;
    attach_refused(BF_SEG_NEEDS, "differ from the inventory segment's");
    g_s.needs_hdr->max_machines -= 1;
    g_s.state_hdr->max_clusters += 1;
    attach_refused(BF_SEG_STATE, "differ from the inventory segment's");
    g_s.state_hdr->max_clusters -= 1;
    g_s.needs_hdr->max_needs += 1;
    attach_refused(BF_SEG_NEEDS, "the header's size is");
    g_s.needs_hdr->max_needs -= 1;
    attach_accepted();
}
END_TEST

START_TEST(attach_refuses_capacities_out_of_range)
{
    struct bf_seg_header *h[] = {g_s.inv_hdr, g_s.needs_hdr, g_s.rings_hdr, g_s.state_hdr};
    uint32_t was = h[0]->max_machines;
    for (int i = 0; i < 4; i++)
        h[i]->max_machines = 0; /* all four agree: the range check must catch it */
    attach_refused(BF_SEG_INVENTORY, "capacities out of range (machines 0,");
    for (int i = 0; i < 4; i++)
        h[i]->max_machines = 1u << 30;
    attach_refused(BF_SEG_INVENTORY, "capacities out of range");
    for (int i = 0; i < 4; i++)
        h[i]->max_machines = was;
    attach_accepted();
}
END_TEST

START_TEST(attach_refuses_a_header_size_its_capacities_do_not_need)
{
    /* a consistent but foreign size: file and header both 4 KiB larger */
    uint64_t size = g_s.state_hdr->size;
    resize_segment(BF_SEG_STATE, (off_t)(size + 4096));
    g_s.state_hdr->size = size + 4096;
    attach_refused(BF_SEG_STATE, "the header's size is");
    g_s.state_hdr->size = size;
    resize_segment(BF_SEG_STATE, (off_t)size);
    /* found by fuzz_inspect_segment: a huge size in the inventory's header
     * (its file is legitimately shorter than its mapping) reached mmap and
     * came back as -ENOMEM; it is refused from the header, before mapping */
    uint64_t inv = g_s.inv_hdr->size;
    g_s.inv_hdr->size = INT64_MAX;
    attach_refused(BF_SEG_INVENTORY, "the header's size is 9223372036854775807");
    g_s.inv_hdr->size = inv;
    attach_accepted();
}
END_TEST

START_TEST(attach_refuses_derived_capacities_that_do_not_match)
{
    struct bf_seg_header *h = g_s.inv_hdr;
    h->index_capacity *= 2;
    attach_refused(BF_SEG_INVENTORY, "index_capacity is");
    h->index_capacity /= 2;
    h->strings_arena_bytes += 8;
    attach_refused(BF_SEG_INVENTORY, "strings_arena_bytes is");
    h->strings_arena_bytes -= 8;
    g_s.needs_hdr->changelog_capacity = 0;
    attach_refused(BF_SEG_NEEDS, "changelog_capacity is 0");
    g_s.needs_hdr->changelog_capacity = h->changelog_capacity;
    g_s.state_hdr->stamp_capacity += 1;
    attach_refused(BF_SEG_STATE, "stamp_capacity is");
    g_s.state_hdr->stamp_capacity -= 1;
    attach_accepted();
}
END_TEST

START_TEST(attach_refuses_a_table_outside_the_file_even_when_offset_plus_length_overflows)
{
    struct bf_seg_header *h = g_s.needs_hdr;
    uint64_t off = h->table_off[BF_NEEDS_T_ROWS], len = h->table_len[BF_NEEDS_T_ROWS];
    h->table_off[BF_NEEDS_T_ROWS] = UINT64_MAX - 8; /* offset + length wraps around */
    attach_refused(BF_SEG_NEEDS, "table 2 (offset 18446744073709551607,");
    h->table_off[BF_NEEDS_T_ROWS] = h->size - 8; /* starts inside, ends outside */
    attach_refused(BF_SEG_NEEDS, "lies outside the");
    h->table_off[BF_NEEDS_T_ROWS] = off;
    h->table_len[BF_NEEDS_T_ROWS] = h->size; /* too long */
    attach_refused(BF_SEG_NEEDS, "lies outside the");
    h->table_len[BF_NEEDS_T_ROWS] = len;
    /* an unused table slot is checked too */
    g_s.state_hdr->table_len[BF_SEG_MAX_TABLES - 1] = g_s.state_hdr->size + 1;
    attach_refused(BF_SEG_STATE, "table 15 (offset 0,");
    g_s.state_hdr->table_len[BF_SEG_MAX_TABLES - 1] = 0;
    attach_accepted();
}
END_TEST

START_TEST(attach_refuses_a_table_moved_inside_the_file)
{
    struct bf_seg_header *h = g_s.inv_hdr;
    h->table_off[BF_INV_T_RECORDS] += 64;
    attach_refused(BF_SEG_INVENTORY, "table 3 is at offset");
    h->table_off[BF_INV_T_RECORDS] -= 64;
    h->table_len[BF_INV_T_META] -= 8;
    attach_refused(BF_SEG_INVENTORY, "table 0 is at offset");
    h->table_len[BF_INV_T_META] += 8;
    attach_accepted();
}
END_TEST

START_TEST(attach_refuses_pending_offsets_off_the_layout)
{
    struct bf_pending_hdr *ph = (struct bf_pending_hdr *)((uint8_t *)g_s.inv_hdr +
                                                          g_s.inv_hdr->table_off[BF_INV_T_PENDING]);
    ph->enq_off += g_s.inv_hdr->size; /* would point past the file */
    attach_refused(BF_SEG_INVENTORY, "the pending enq offset is");
    ph->enq_off -= g_s.inv_hdr->size;
    ph->done_off = 0;
    attach_refused(BF_SEG_INVENTORY, "the pending done offset is 0");
    ph->done_off = ph->enq_off + g_s.max_machines;
    attach_accepted();
}
END_TEST

START_TEST(attach_refuses_change_log_entries_offsets_off_the_layout)
{
    uint64_t was = g_s.changelog[2].entries_off;
    g_s.changelog[2].entries_off = UINT64_MAX;
    attach_refused(BF_SEG_INVENTORY, "change log 2's entries offset is");
    g_s.changelog[2].entries_off = was;
    attach_accepted();
}
END_TEST

START_TEST(attach_refuses_ring_geometry_off_the_layout)
{
    struct bf_ring_hdr *r = g_s.ring[BF_RING_BOOT_RESP];
    r->capacity *= 2; /* the byte area would run past the file */
    attach_refused(BF_SEG_RINGS, "ring 2's capacity is");
    r->capacity /= 2;
    r->data_off = 0;
    attach_refused(BF_SEG_RINGS, "ring 2's data offset is 0");
    r->data_off = g_s.rings_hdr->table_off[BF_RING_BOOT_RESP] + sizeof(struct bf_ring_hdr);
    r = g_s.ring[BF_RING_ACTIONS];
    r->slot_size += 1;
    attach_refused(BF_SEG_RINGS, "ring 0's slot size is");
    r->slot_size -= 1;
    r->kind = BF_RING_BYTES;
    attach_refused(BF_SEG_RINGS, "ring 0's kind is");
    r->kind = BF_RING_FIXED;
    g_s.ring[BF_RING_RECLAIM]->consumer = BF_ROLE_CYCLE;
    attach_refused(BF_SEG_RINGS, "ring 5's consumer is");
    g_s.ring[BF_RING_RECLAIM]->consumer = BF_ROLE_SESSION;
    attach_accepted();
}
END_TEST

START_TEST(attach_refuses_an_inventory_file_shorter_than_its_committed_arena)
{
    uint64_t arena_off = g_s.inv_hdr->table_off[BF_INV_T_ARENA];
    /* grow the arena past its first step: 3 MiB of strings */
    char buf[1024];
    for (int i = 0; i < 3000; i++) {
        memset(buf, 'a' + i % 26, sizeof buf);
        snprintf(buf, 16, "%d", i);
        uint32_t r;
        ck_assert_int_eq(bf_str_intern(&g_s, buf, sizeof buf, &r), 0);
    }
    uint64_t committed = atomic_load(&g_s.inv->strtab.arena_committed);
    ck_assert_uint_gt(committed, 2u << 20);
    attach_accepted();
    /* a file cut inside the committed arena */
    resize_segment(BF_SEG_INVENTORY, (off_t)(arena_off + committed - 4096));
    attach_refused(BF_SEG_INVENTORY, "the string arena's committed");
    /* cut before the tables end */
    resize_segment(BF_SEG_INVENTORY, (off_t)(arena_off - 4096));
    attach_refused(BF_SEG_INVENTORY, "shorter than its tables and first arena step");
    resize_segment(BF_SEG_INVENTORY, (off_t)(arena_off + committed));
    attach_accepted();
    /* a committed count past the reserve */
    atomic_store(&g_s.inv->strtab.arena_committed, g_s.arena_bytes + 4096);
    attach_refused(BF_SEG_INVENTORY, "do not fit its reserve");
    atomic_store(&g_s.inv->strtab.arena_committed, committed);
    attach_accepted();
}
END_TEST

START_TEST(the_verdict_ledger_grows_its_file_before_rows_are_published_and_older_maps_see_them)
{
    uint64_t off = g_s.state_hdr->table_off[BF_STATE_T_VERDICTS];
    uint64_t reserve = g_s.state_hdr->table_len[BF_STATE_T_VERDICTS];
    uint32_t n = 2 * g_s.max_needs; /* cells of one buffer */
    ck_assert_uint_ge(reserve, 2ull * n * sizeof(union bf_verdict_cell));
    ck_assert_uint_eq(g_s.len[BF_SEG_STATE], off + reserve); /* the whole reserve is mapped */
    /* created backed by one step, short of the reserve */
    off_t f0 = (off_t)shm_fixture_file_bytes(BF_SEG_STATE);
    ck_assert_uint_eq((uint64_t)f0, off + bf_shm_grown(&g_s, BF_SEG_STATE));
    ck_assert_uint_lt(bf_shm_grown(&g_s, BF_SEG_STATE), reserve);
    ck_assert_uint_eq(bf_shm_segment_bytes(&g_s, BF_SEG_STATE), (size_t)f0);
    ck_assert_uint_lt(bf_verdict_cells_backed(&g_s, 1), n);
    /* a reader attached now (before the growth) */
    struct bf_shm ro;
    char err[256];
    ck_assert_int_eq(bf_shm_attach(&ro, g_id, true, err, sizeof err), 0);
    ck_assert_uint_eq(bf_verdict_cells_backed(&ro, 1), bf_verdict_cells_backed(&g_s, 1));
    ck_assert_int_eq(bf_shm_grow(&ro, BF_SEG_STATE, reserve), -EROFS);
    /* buffer 1 takes every row: the file grows first, to the reserve */
    ck_assert_uint_eq(bf_verdict_cells_reserve(&g_s, 1, n), n);
    ck_assert_uint_eq((uint64_t)(off_t)shm_fixture_file_bytes(BF_SEG_STATE), off + reserve);
    ck_assert_uint_eq(bf_verdict_cells_backed(&g_s, 1), n);
    ck_assert_uint_eq(bf_verdict_cells_backed(&g_s, 0), n);
    g_s.verdicts[bf_verdict_index(1, n - 1)].row.cluster_ref = 77;
    /* the older read-only mapping reads the new last row */
    ck_assert_uint_eq(bf_verdict_cells_backed(&ro, 1), n);
    ck_assert_uint_eq(ro.verdicts[bf_verdict_index(1, n - 1)].row.cluster_ref, 77);
    ck_assert_uint_eq(bf_shm_segment_bytes(&ro, BF_SEG_STATE), off + reserve);
    bf_shm_detach(&ro);
    /* past the reserve; a segment whose tables are all fixed */
    ck_assert_int_eq(bf_shm_grow(&g_s, BF_SEG_STATE, reserve + 1), -ENOSPC);
    ck_assert_int_eq(bf_shm_grow(&g_s, BF_SEG_RINGS, 1), -EINVAL);
    ck_assert_uint_eq(bf_shm_grown(&g_s, BF_SEG_RINGS), 0);
    ck_assert_uint_eq(bf_verdict_cells_reserve(&g_s, 0, n + 5), n); /* at most max_needs */
}
END_TEST

START_TEST(attach_refuses_a_state_file_shorter_than_its_grown_verdict_table)
{
    uint64_t off = g_s.state_hdr->table_off[BF_STATE_T_VERDICTS];
    uint64_t reserve = g_s.state_hdr->table_len[BF_STATE_T_VERDICTS];
    ck_assert_uint_eq(bf_verdict_cells_reserve(&g_s, 1, 2 * g_s.max_needs), 2 * g_s.max_needs);
    uint64_t grown = bf_shm_grown(&g_s, BF_SEG_STATE);
    attach_accepted();
    /* a file cut inside the grown table */
    resize_segment(BF_SEG_STATE, (off_t)(off + grown - 4096));
    attach_refused(BF_SEG_STATE, "grown");
    resize_segment(BF_SEG_STATE, (off_t)(off + grown));
    attach_accepted();
    /* a grown count past the reserve, or below the first step */
    atomic_store(&g_s.state_hdr->grown, reserve + 4096);
    attach_refused(BF_SEG_STATE, "its reserve");
    atomic_store(&g_s.state_hdr->grown, 0);
    attach_refused(BF_SEG_STATE, "first step");
    atomic_store(&g_s.state_hdr->grown, grown);
    attach_accepted();
}
END_TEST

/* A row as the cycle fills it (emit.c): zeroed, then set; domain names
 * below BF_DOMAIN_MAX bytes. */
static void random_row(struct bf_verdict_row *r, unsigned *seed, bool details)
{
    memset(r, 0, sizeof *r);
    r->cluster_ref = (uint32_t)rand_r(seed);
    r->need_profile_ref = (uint32_t)rand_r(seed);
    r->group_ref = (uint32_t)rand_r(seed);
    r->arrival_ns = (int64_t)rand_r(seed) << 20;
    for (int d = 0; d < BF_MAX_DIMS; d++) {
        r->aggregate[d] = rand_r(seed) % 3 ? 0 : (int64_t)rand_r(seed) * 1000;
        r->min_unit[d] = rand_r(seed) % 3 ? 0 : -(int64_t)rand_r(seed);
    }
    r->claimed_machine_count = rand_r(seed) % 50;
    r->bootstrap_count = rand_r(seed) % 5;
    r->provision_count = rand_r(seed) % 5;
    r->parked_age_cycles = rand_r(seed) % 9;
    r->age_cycles_unmet = rand_r(seed) % 9;
    r->satisfied = (uint8_t)(rand_r(seed) & 1);
    r->same_satisfiable = (uint8_t)(rand_r(seed) & 1);
    r->acquisition_parked = (uint8_t)(rand_r(seed) & 1);
    r->unmet_reason = (uint8_t)(rand_r(seed) % 6);
    r->matching_capped = (uint8_t)(rand_r(seed) & 1);
    r->has_matching_supply = (uint8_t)(rand_r(seed) & 1);
    r->has_preemption = (uint8_t)(rand_r(seed) & 1);
    if (rand_r(seed) & 1)
        snprintf(r->same_domain, sizeof r->same_domain, "zone=us-east-%d%c", rand_r(seed) % 4,
                 'a' + rand_r(seed) % 3);
    if (rand_r(seed) % 5 == 0) /* the longest name a row holds */
        memset(r->same_domain, 'x', BF_DOMAIN_MAX - 1);
    if (!details)
        return;
    for (int d = 0; d < BF_MAX_DIMS; d++) {
        r->residual_deficit[d] = rand_r(seed) % 2 ? 0 : (int64_t)rand_r(seed);
        r->capacity_freed[d] = rand_r(seed) % 4 ? 0 : (int64_t)rand_r(seed);
    }
    r->victims_found = rand_r(seed) % 3;
    r->matching_idle = rand_r(seed) % 7;
    r->matching_configured = rand_r(seed) % 7;
    r->matching_speculative = rand_r(seed) % 7;
    r->n_same_candidates = (uint8_t)(rand_r(seed) % 4);
    for (int j = 0; j < r->n_same_candidates; j++) {
        snprintf(r->same_candidates[j].domain, BF_DOMAIN_MAX, "rack=r%d", rand_r(seed) % 40);
        r->same_candidates[j].coverage_per_mille = rand_r(seed) % 1001;
        r->same_candidates[j].satisfiable = (uint8_t)(rand_r(seed) & 1);
    }
}

/* A growing table's file is backed by memory when it grows: on a full tmpfs
 * the growth answers -ENOSPC (the caller rejects and counts), where an
 * ftruncate would have succeeded and the first store into the new pages
 * would have been a SIGBUS. Run in a child with its own mount namespace and
 * a 1 MiB tmpfs; where the host gives no mount namespace (not root) the
 * child says so and the test checks nothing else. */
START_TEST(growing_a_file_on_a_full_tmpfs_fails_with_enospc_not_sigbus)
{
    char dir[] = "/tmp/bf-tmpfs-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("tmpfs", dir, "tmpfs", 0, "size=1m") != 0)
            _exit(77); /* no mount namespace here */
        char path[64];
        snprintf(path, sizeof path, "%s/seg", dir);
        int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0)
            _exit(21);
        /* 512 KiB fits: backed, and every page can be stored into */
        if (bf_shm_file_back(fd, 0, 512u << 10) != 0)
            _exit(22);
        uint8_t *m = mmap(NULL, 4u << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
            _exit(23);
        for (size_t o = 0; o < (512u << 10); o += 4096)
            m[o] = 1;
        /* 4 MiB does not fit in the 1 MiB mount: refused here, not later */
        if (bf_shm_file_back(fd, 512u << 10, 4u << 20) != -ENOSPC)
            _exit(24);
        struct stat st;
        if (fstat(fd, &st) != 0 || st.st_size < (512 << 10))
            _exit(25); /* a refused growth never shrinks what was backed */
        m[(512u << 10) - 1] = 2;
        _exit(0);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    rmdir(dir); /* the mount lived and died with the child's namespace */
    ck_assert_msg(WIFEXITED(status), "the child died of signal %d (SIGBUS = %d)",
                  WIFSIGNALED(status) ? WTERMSIG(status) : 0, SIGBUS);
    if (WEXITSTATUS(status) == 77) {
        fprintf(stderr, "growing_a_file_on_a_full_tmpfs: no mount namespace here; not run\n");
        return;
    }
    ck_assert_int_eq(WEXITSTATUS(status), 0);
}
END_TEST

START_TEST(verdict_rows_read_back_byte_for_byte_from_their_smaller_cells)
{
    enum { N = 900 };
    static struct bf_verdict_row in[N], out;
    unsigned seed = 7;
    uint32_t with_details = 0;
    for (int i = 0; i < N; i++) {
        random_row(&in[i], &seed, i % 3 == 0);
        with_details += i % 3 == 0;
    }
    for (uint32_t b = 0; b < 2; b++) {
        struct bf_verdict_writer w;
        struct bf_cycle_result res;
        memset(&res, 0, sizeof res);
        ck_assert_uint_eq(bf_verdict_write_begin(&w, &g_s, b, N), N);
        for (int i = 0; i < N; i++)
            bf_verdict_write(&w, &in[i]);
        bf_verdict_write_end(&w, &res);
        ck_assert_uint_eq(w.lost, 0);
        ck_assert_uint_eq(res.n_verdicts, N);
        /* only rows with details take a second cell */
        ck_assert_uint_le(res.n_verdict_extras, with_details);
        ck_assert_uint_ge(res.n_verdict_extras, with_details * 9 / 10);
        uint32_t nv = res.n_verdicts, ne = res.n_verdict_extras;
        bf_verdict_bound(&g_s, b, &nv, &ne);
        ck_assert_uint_eq(nv, N);
        for (uint32_t i = 0; i < N; i++) {
            bf_verdict_read(&g_s, b, i, nv, ne, &out);
            ck_assert_msg(memcmp(&out, &in[i], sizeof out) == 0, "row %u of buffer %u differs", i,
                          b);
        }
        /* a row's extra index outside this publish's extras reads as none */
        union bf_verdict_cell *c = &g_s.verdicts[bf_verdict_index(b, 0)];
        ck_assert_uint_ne(c->row.extra, 0);
        uint32_t keep = c->row.extra;
        c->row.extra = 2; /* cell 1: a row, not an extra */
        bf_verdict_read(&g_s, b, 0, nv, ne, &out);
        ck_assert_int_eq(out.residual_deficit[0] | out.capacity_freed[0], 0);
        ck_assert_int_eq(out.victims_found + out.matching_idle, 0);
        c->row.extra = UINT32_MAX;
        bf_verdict_read(&g_s, b, 0, nv, ne, &out);
        ck_assert_int_eq(out.matching_configured, 0);
        c->row.extra = keep;
        /* a domain ref outside the string table reads as "" */
        uint32_t dref = c->row.same_domain_ref;
        c->row.same_domain_ref = UINT32_MAX;
        bf_verdict_read(&g_s, b, 0, nv, ne, &out);
        ck_assert_str_eq(out.same_domain, "");
        c->row.same_domain_ref = dref;
    }
    /* counts past what the file backs are cut to it */
    uint32_t nv = UINT32_MAX, ne = UINT32_MAX;
    bf_verdict_bound(&g_s, 1, &nv, &ne);
    ck_assert_uint_eq(nv, g_s.max_needs);
    ck_assert_uint_le((uint64_t)nv + ne, bf_verdict_cells_backed(&g_s, 1));
}
END_TEST

START_TEST(live_configuration_reaches_readers_whole_once_per_publish)
{
    struct bf_config c;
    bf_config_defaults(&c);
    c.actuation_paused = true;
    c.reclaim_cap_fraction = 0.25;
    c.max_actions_per_cycle = 11;
    snprintf(c.log_level, sizeof c.log_level, "warn");
    snprintf(c.audit_log, sizeof c.audit_log, "/var/log/bigfleet/audit.jsonl");
    snprintf(c.tls_cert, sizeof c.tls_cert, "/etc/bigfleet/shard.pem");
    struct bf_live_values v, r;
    bf_live_from_config(&v, &c);
    uint64_t g0 = bf_live_generation(&g_s);
    bf_live_publish(&g_s, &v);
    ck_assert_uint_eq(bf_live_generation(&g_s), g0 + 1);
    struct bf_shm ro;
    char err[256];
    ck_assert_int_eq(bf_shm_attach(&ro, g_id, true, err, sizeof err), 0);
    ck_assert_int_eq(bf_live_read(&ro, &r), 0);
    ck_assert(r.actuation_paused && !r.dry_run);
    ck_assert(r.reclaim_cap_fraction == 0.25);
    ck_assert_uint_eq(r.max_actions_per_cycle, 11);
    ck_assert_int_eq(r.log_level, BF_LOG_WARN);
    ck_assert_str_eq(r.audit_log, "/var/log/bigfleet/audit.jsonl");
    ck_assert_str_eq(r.tls_cert, "/etc/bigfleet/shard.pem");
    ck_assert_uint_eq(r.generation, g0 + 1);
    ck_assert_int_eq(atomic_load(&ro.st->actuation_paused), 1);
    /* a forked publisher flipping two full path values: never a mix */
    pid_t pid = fork();
    if (pid == 0) {
        struct bf_live_values a = v, b = v;
        memset(a.audit_log, 'a', 1000);
        a.audit_log[1000] = 0;
        memset(b.audit_log, 'b', 1000);
        b.audit_log[1000] = 0;
        for (int i = 0; i < 20000; i++)
            bf_live_publish(&g_s, (i & 1) ? &a : &b);
        _exit(0);
    }
    int torn = 0, reads = 0;
    for (int i = 0; i < 20000; i++) {
        if (bf_live_read(&ro, &r) != 0)
            continue;
        reads++;
        char first = r.audit_log[0];
        if (first == 'a' || first == 'b')
            for (int k = 0; k < 1000; k++)
                torn += r.audit_log[k] != first;
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert_int_gt(reads, 0);
    ck_assert_int_eq(torn, 0);
    bf_shm_detach(&ro);
}
END_TEST

/* The cycle-result publish protocol (src/shm/result.c): a random
 * interleaving of one writer's steps (begin, store into the buffer it
 * fills, end) and one reader's (begin, copy, validate) against a model of
 * which buffer each writer store hit. Whenever bf_result_read_valid accepts
 * a copy, no writer store touched the buffer being copied between the
 * reader's begin and its validation; a copy with no publish step in between
 * is always accepted. */
START_TEST(result_read_accepts_a_copy_only_if_its_buffer_was_not_rewritten)
{
    uint32_t seed = 12345;
    uint64_t accepted = 0, refused = 0;
    for (int round = 0; round < 20000; round++) {
        int wstate = 0; /* 0 idle, 1 begun (filling wbuf) */
        uint32_t wbuf = 0;
        uint64_t wseq = 0;
        struct bf_result_read r;
        bool reading = false, torn = false, quiet = true;
        for (int step = 0; step < 12; step++) {
            seed = seed * 1103515245u + 12345u;
            int what = (int)((seed >> 16) % 3);
            if (what == 0) { /* writer: next step */
                if (wstate == 0) {
                    wbuf = bf_result_publish_begin(&g_s, &wseq);
                    wstate = 1;
                } else if ((seed >> 20) & 1) {
                    if (reading && wbuf == r.buffer)
                        torn = true; /* a store into the buffer being copied */
                    atomic_store(&g_s.st->result[wbuf].cycle, (uint64_t)step);
                } else {
                    bf_result_publish_end(&g_s, wbuf, wseq);
                    wstate = 0;
                }
                if (reading)
                    quiet = false;
            } else if (!reading) {
                bf_result_read_begin(&g_s, &r);
                reading = true;
                torn = false;
                quiet = true;
                ck_assert_uint_eq(r.buffer, atomic_load(&g_s.st->published) & 1u);
            } else {
                bool ok = bf_result_read_valid(&g_s, &r);
                if (ok)
                    ck_assert_msg(!torn, "round %d: a copy of a rewritten buffer was accepted",
                                  round);
                if (quiet)
                    ck_assert_msg(ok, "round %d: a copy with no publish step was refused", round);
                ok ? accepted++ : refused++;
                reading = false;
            }
        }
        if (wstate == 1)
            bf_result_publish_end(&g_s, wbuf, wseq);
    }
    ck_assert_uint_gt(accepted, 1000);
    ck_assert_uint_gt(refused, 100);
    /* bf_result_read copies the published buffer whole */
    struct bf_cycle_result *out = malloc(sizeof *out);
    uint64_t seq;
    uint32_t b = bf_result_publish_begin(&g_s, &seq);
    atomic_store(&g_s.st->result[b].cycle, 4242);
    bf_result_publish_end(&g_s, b, seq);
    uint32_t retries = 99;
    ck_assert_int_eq(bf_result_read(&g_s, out, &retries), 0);
    ck_assert_uint_eq(out->cycle, 4242);
    ck_assert_uint_eq(retries, 0);
    free(out);
}
END_TEST

/* ------------------------------------------------------------ bulk reads */

/* A scan (shm.h "bulk reads") gives what bf_inv_read and bf_str give, for
 * every slot of the inventory, taking the records from its copies and the
 * ids from its window: ids interned in slot order, a block of 16 interned
 * in reverse (the window reloads backwards), one id longer than the window
 * (read live), freed slots, a ref past the published end (NULL). */
START_TEST(a_scan_reads_every_record_and_id_as_the_mapping_does)
{
    enum { N = 3000 };
    static uint32_t refs[N];
    char buf[64];
    for (int i = 0; i < N; i++) {
        if (i >= 1000 && i < 1016)
            continue;
        snprintf(buf, sizeof buf, "scan-machine-%05d", i);
        refs[i] = intern(buf);
    }
    for (int i = 1015; i >= 1000; i--) { /* interned in reverse: the window reloads */
        snprintf(buf, sizeof buf, "scan-machine-%05d", i);
        refs[i] = intern(buf);
    }
    size_t big_len = BF_INV_SCAN_WINDOW + 100;
    char *big = malloc(big_len + 1);
    ck_assert_ptr_nonnull(big);
    memset(big, 'x', big_len);
    big[big_len] = 0;
    ck_assert_int_eq(bf_str_intern(&g_s, big, (uint32_t)big_len, &refs[7]), 0);
    free(big);
    for (int i = 0; i < N; i++) {
        struct bf_machine_rec r = mk(refs[i], (uint8_t)(i % BF_STATE_COUNT));
        r.price_per_hour = (float)i;
        uint32_t slot;
        ck_assert_int_eq(bf_inv_insert(&g_s, &r, &slot), 0);
        ck_assert_uint_eq(slot, (uint32_t)i);
    }
    for (int i = 0; i < N; i += 97)
        ck_assert_int_eq(bf_inv_remove(&g_s, (uint32_t)i), 0);
    struct bf_inv_scan *sc;
    ck_assert_int_eq(bf_inv_scan_begin(&g_s, &sc), 0);
    uint32_t valid = 0;
    for (uint32_t slot = 0; slot < g_s.max_machines; slot++) {
        struct bf_machine_rec a, b;
        memset(&a, 0xa5, sizeof a);
        memset(&b, 0x5a, sizeof b);
        ck_assert_int_eq(bf_inv_scan_read(sc, slot, &a), 0);
        ck_assert_int_eq(bf_inv_read(&g_s, slot, &b), 0);
        ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "slot %u: the copy differs", slot);
        if (!(a.flags & BF_REC_VALID))
            continue;
        valid++;
        uint32_t la = 0, lb = 0;
        const char *sa = bf_inv_scan_str(sc, a.id, &la);
        const char *sb = bf_str(&g_s, a.id, &lb);
        ck_assert_ptr_nonnull(sb);
        ck_assert_ptr_nonnull(sa);
        ck_assert_uint_eq(la, lb);
        ck_assert_msg(memcmp(sa, sb, lb + 1) == 0, "slot %u: id %s, not %s", slot, sa, sb);
    }
    ck_assert_ptr_null(bf_inv_scan_str(sc, UINT32_MAX / 8, NULL));
    struct bf_machine_rec r;
    ck_assert_int_eq(bf_inv_scan_read(sc, g_s.max_machines, &r), -ERANGE);
    struct bf_inv_scan_stats st;
    bf_inv_scan_end(sc, &st);
    ck_assert_uint_eq(valid, N - (N + 96) / 97);
    ck_assert_uint_eq(st.copied, g_s.max_machines);
    ck_assert_uint_eq(st.live, 0);
    ck_assert_uint_eq(st.chunks, g_s.max_machines / BF_INV_SCAN_RECS);
    ck_assert_uint_ge(st.str_window, valid - 1);
    ck_assert_uint_ge(st.str_live, 1); /* the long id */
    ck_assert_uint_ge(st.win_loads, 2);
}
END_TEST

/* A record a writer holds (seq odd in the copies) is read live, under the
 * seqlock: -EAGAIN while it is held, the new payload once committed. */
START_TEST(a_scan_reads_a_record_a_writer_holds_live)
{
    struct bf_machine_rec r0 = mk(intern("held"), BF_STATE_IDLE), r1 = r0;
    r1.price_per_hour = 9.0f;
    uint32_t slot;
    ck_assert_int_eq(bf_inv_insert(&g_s, &r0, &slot), 0);
    struct bf_inv_txn t;
    ck_assert_int_eq(bf_inv_begin(&g_s, slot, &t), 0); /* seq odd: a write in progress */
    struct bf_shm_machine *m = &g_s.records[slot];
    atomic_store_explicit(&m->w[1], 12345, memory_order_relaxed); /* half of the payload */
    struct bf_inv_scan *sc;
    ck_assert_int_eq(bf_inv_scan_begin(&g_s, &sc), 0);
    struct bf_machine_rec got;
    ck_assert_int_eq(bf_inv_scan_read(sc, slot, &got), -EAGAIN);
    struct bf_inv_scan_stats st;
    bf_inv_scan_end(sc, &st);
    ck_assert_uint_eq(st.live, 1);
    ck_assert_uint_eq(st.copied, 0);
    bf_inv_commit(&g_s, &t, &r1, -1);
    ck_assert_int_eq(bf_inv_scan_begin(&g_s, &sc), 0);
    ck_assert_int_eq(bf_inv_scan_read(sc, slot, &got), 0);
    bf_inv_scan_end(sc, &st);
    ck_assert_uint_eq(st.copied, 1);
    ck_assert(got.price_per_hour == 9.0f);
}
END_TEST

/* Scans against a forked writer that commits uniform versions k = 1, 2, ...
 * to a chunk's worth of records as fast as it can: every record a scan
 * returns is uniform, some came from the copies and some were read live
 * (their seq moved while the chunk was copied). A scan that trusts the
 * seqs of one copy only returns torn records here. */
START_TEST(a_scan_under_a_forked_writer_never_yields_a_torn_record)
{
    enum { M = BF_INV_SCAN_RECS };
    char name[32];
    for (uint32_t i = 0; i < M; i++) {
        snprintf(name, sizeof name, "torn-%u", i);
        struct bf_machine_rec r = mk(intern(name), BF_STATE_IDLE);
        uint32_t slot;
        ck_assert_int_eq(bf_inv_insert(&g_s, &r, &slot), 0);
        struct bf_inv_txn t;
        ck_assert_int_eq(bf_inv_begin(&g_s, slot, &t), 0);
        struct bf_machine_rec u = uniform(0);
        bf_inv_commit(&g_s, &t, &u, -1);
    }
    pid_t w = fork_uniform_writer(0, M, 3000);
    long torn = 0, ok = 0, copied = 0, live = 0;
    for (int pass = 0; pass < 400; pass++) {
        struct bf_inv_scan *sc;
        ck_assert_int_eq(bf_inv_scan_begin(&g_s, &sc), 0);
        for (uint32_t slot = 0; slot < M; slot++) {
            struct bf_machine_rec r;
            if (bf_inv_scan_read(sc, slot, &r) != 0)
                continue;
            if (is_uniform(&r))
                ok++;
            else
                torn++;
        }
        struct bf_inv_scan_stats st;
        bf_inv_scan_end(sc, &st);
        copied += (long)st.copied;
        live += (long)st.live;
    }
    kill(w, SIGKILL);
    int st;
    waitpid(w, &st, 0);
    ck_assert_msg(torn == 0, "%ld torn records of %ld", torn, torn + ok);
    ck_assert_int_gt(copied, 0);
    ck_assert_msg(live > 0, "no record's seq moved during a copy: the test did not race");
}
END_TEST

/* Labels are defined next to their enums by value (src/shm/labels.c):
 * every value has its own name, the reference names hold, and out-of-range
 * values fall back instead of reading past the table. */
START_TEST(every_enum_value_has_its_own_label)
{
    const char *(*fn[3])(int) = {bf_outcome_label, bf_ring_label, bf_phase_label};
    const int n[3] = {BF_OUT_COUNT, BF_RING_COUNT, BF_PHASE_COUNT};
    for (int f = 0; f < 3; f++)
        for (int i = 0; i < n[f]; i++) {
            ck_assert_ptr_nonnull(fn[f](i));
            for (int j = 0; j < i; j++)
                ck_assert_str_ne(fn[f](i), fn[f](j));
        }
    ck_assert_str_eq(bf_outcome_label(BF_OUT_SUCCESS), "success");
    ck_assert_str_eq(bf_outcome_label(BF_OUT_RACED_TO_IDLE), "transition_raced_to_idle");
    ck_assert_str_eq(bf_outcome_label(BF_OUT_MISSING_PROFILE), "missing_profile");
    ck_assert_str_eq(bf_outcome_label(BF_OUT_COUNT), "other");
    ck_assert_str_eq(bf_outcome_label(-1), "other");
    ck_assert_str_eq(bf_ring_label(BF_RING_BOOT_RESP), "boot_resp");
    ck_assert_str_eq(bf_ring_label(BF_RING_OWN_AUDIT), "own_audit");
    ck_assert_str_eq(bf_ring_label(BF_RING_COUNT), "unknown");
    ck_assert_str_eq(bf_phase_label(BF_PHASE_SNAPREAD), "snapread");
    ck_assert_str_eq(bf_phase_label(BF_PHASE_EXECUTE), "execute");
    ck_assert_str_eq(bf_phase_label(BF_PHASE_COUNT), "unknown");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shm");
    TCase *tc = tcase_create("segments");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, attach_validates_header_and_names_both_versions_on_mismatch);
    tcase_add_test(tc, string_table_dedups_and_keeps_embedded_nul);
    tcase_add_test(tc, string_lock_held_by_a_dead_process_is_stolen);
    tcase_add_test(tc, repair_releases_the_string_lock_a_dead_process_held_and_reports_it);
    tcase_add_test(tc, string_lookups_stay_inside_the_arena_when_its_counts_are_corrupted);
    tcase_add_test(tc, id_index_inserts_looks_up_removes_and_reuses_slots);
    tcase_add_test(tc, insert_new_publishes_like_insert_and_reuses_freed_slots);
    tcase_add_test(tc, inventory_full_reports_enospc);
    tcase_add_test(tc, seqlock_forked_writer_never_yields_a_torn_read);
    tcase_add_test(tc, seqlock_read_of_a_long_payload_is_never_torn);
    tcase_add_test(tc, a_scan_reads_every_record_and_id_as_the_mapping_does);
    tcase_add_test(tc, a_scan_reads_a_record_a_writer_holds_live);
    tcase_add_test(tc, a_scan_under_a_forked_writer_never_yields_a_torn_record);
    tcase_add_test(tc, writer_killed_mid_write_is_repaired_and_marked_for_refresh);
    tcase_add_test(tc, changelog_overflow_is_signalled_then_recovers);
    tcase_add_test(tc, ring_wraps_reports_full_and_empty_in_order);
    tcase_add_test(tc, ring_redelivers_unreleased_entries_after_consumer_restart);
    tcase_add_test(tc, bytes_ring_wraps_variable_records_and_refuses_oversize);
    tcase_add_test(tc, bytes_ring_takes_a_half_ring_record_at_every_offset);
    tcase_add_test(tc, a_corrupt_bytes_ring_record_is_dropped_not_read_past_the_ring);
    tcase_add_test(tc, cluster_latch_readers_never_stall_on_a_dead_writer);
    tcase_add_test(tc, needs_copy_returns_the_published_rows);
    tcase_add_test(tc, registries_assign_stable_indices);
    tcase_add_test(tc, provisioning_stamps_are_observed_once_and_restamped_after);
    tcase_add_test(tc, provisioning_stamps_pruned_when_withdrawn_restart_on_return);
    tcase_add_test(tc, soft_interning_stops_at_the_reserve_and_keeps_room_for_essentials);
    tcase_add_test(tc, verdict_domain_names_never_take_the_string_tables_reserve);
    tcase_add_test(tc, the_string_arena_grows_its_file_with_use_and_every_process_sees_it);
    tcase_add_test(tc, segments_are_private_and_another_user_cannot_attach);
    tcase_add_test(tc, attach_refuses_segments_others_can_write_or_another_uid_owns);
    tcase_add_test(tc, attach_refuses_a_file_shorter_than_its_header);
    tcase_add_test(tc, attach_refuses_a_file_whose_size_differs_from_its_header);
    tcase_add_test(tc, attach_refuses_capacities_that_differ_between_segments);
    tcase_add_test(tc, attach_refuses_capacities_out_of_range);
    tcase_add_test(tc, attach_refuses_a_header_size_its_capacities_do_not_need);
    tcase_add_test(tc, attach_refuses_derived_capacities_that_do_not_match);
    tcase_add_test(tc,
                   attach_refuses_a_table_outside_the_file_even_when_offset_plus_length_overflows);
    tcase_add_test(tc, attach_refuses_a_table_moved_inside_the_file);
    tcase_add_test(tc, attach_refuses_pending_offsets_off_the_layout);
    tcase_add_test(tc, attach_refuses_change_log_entries_offsets_off_the_layout);
    tcase_add_test(tc, attach_refuses_ring_geometry_off_the_layout);
    tcase_add_test(tc, attach_refuses_an_inventory_file_shorter_than_its_committed_arena);
    tcase_add_test(tc, attach_refuses_a_state_file_shorter_than_its_grown_verdict_table);
    tcase_add_test(tc, verdict_rows_read_back_byte_for_byte_from_their_smaller_cells);
    tcase_add_test(tc, growing_a_file_on_a_full_tmpfs_fails_with_enospc_not_sigbus);
    tcase_add_test(
        tc, the_verdict_ledger_grows_its_file_before_rows_are_published_and_older_maps_see_them);
    tcase_add_test(tc, live_configuration_reaches_readers_whole_once_per_publish);
    tcase_add_test(tc, result_read_accepts_a_copy_only_if_its_buffer_was_not_rewritten);
    tcase_add_test(tc, every_enum_value_has_its_own_label);
    tcase_add_test(tc, cluster_row_left_mid_write_is_repaired_from_the_copy_readers_used);
    tcase_add_test(tc, stamp_left_odd_by_a_dead_session_is_repaired_only_for_the_session);
    tcase_add_test(tc, changelog_peek_reads_without_consuming_and_reports_laps);
    tcase_add_test(tc, ownership_tables_are_read_whole_or_refused_while_written);
    suite_add_tcase(s, tc);
    return check_run(s);
}
