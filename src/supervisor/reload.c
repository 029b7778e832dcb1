/*
 * reload.c — SIGHUP: re-read the configuration and change what is safe to
 * change in a running appliance, without a restart (no new epoch, no full
 * provider re-list, no process replaced).
 *
 * The configuration is parsed again from the same layers (the supervisor's
 * own flags and environment, which cannot have changed, and the file, which
 * can). An invalid result changes nothing: logged, counted
 * (bigfleet_appliance_config_reloads_total{result="failed"}). Otherwise each
 * setting that differs from the running value is logged: a live one
 * (actuation-paused, dry-run, reclaim-cap-fraction, max-actions-per-cycle,
 * log-level, tls-cert/key/ca, audit-log) is applied; any other one needs a
 * restart and is refused, keeping the running value. Switching between
 * plaintext and TLS also needs a restart.
 *
 * Application: the running configuration (what a restarted child is given)
 * takes the live values, which are published in the state segment
 * (bf_live_publish): the cycle reads the rails at its next cycle, every
 * child applies the log level at its next tick, the executor reopens the
 * audit log (rotation: the file is reopened even when its name is
 * unchanged), and the session re-reads the TLS files. A SIGHUP always
 * publishes, so it always reopens the audit log and re-reads the TLS files.
 */
#include <stdio.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "supervisor_internal.h"

extern char **environ;

struct diff_ctx {
    struct sup *s;
    bool tls_mode_change;
    int applied, rejected;
};

static bool is_tls(const char *name)
{
    return strncmp(name, "tls-", 4) == 0;
}

static void on_diff(const char *name, const char *running, const char *next, bool live, void *arg)
{
    struct diff_ctx *d = arg;
    if (strcmp(name, "provider-addr") == 0 && d->s->with_sim && !next[0])
        return; /* the running value is the embedded provider's address */
    if (live && !(is_tls(name) && d->tls_mode_change)) {
        BF_INFO("configuration changed", "setting=%s from=\"%s\" to=\"%s\"", name, running, next);
        d->applied++;
        return;
    }
    BF_WARN("configuration change needs a restart; keeping the running value",
            "setting=%s running=\"%s\" requested=\"%s\"%s", name, running, next,
            is_tls(name) ? " reason=\"switching between plaintext and TLS\"" : "");
    d->rejected++;
}

void bf_sup_reload(struct sup *s)
{
    static struct bf_config next;
    char err[512] = "";
    struct bf_state_main *st = s->shm.st;
    int64_t now = bf_now_ns();
    int rc = bf_config_load(&next, s->argc, s->argv, environ, NULL, err, sizeof err);
    if (rc != BF_CONFIG_OK) {
        BF_ERROR("configuration reload refused: the configuration is invalid; nothing changed",
                 "error=\"%s\"", rc == BF_CONFIG_USAGE ? err : "--help/--version given");
        if (st) {
            BF_STAT_INC(st->host.reload_failures);
            BF_STAT_SET(st->host.last_reload_ns, now);
            BF_STAT_SET(st->host.last_reload_ok, 0);
        }
        return;
    }
    struct diff_ctx d = {.s = s, .tls_mode_change = bf_config_tls(&s->run) != bf_config_tls(&next)};
    bf_config_diff(&s->run, &next, on_diff, &d);
    if (!d.tls_mode_change)
        bf_config_copy_live(&s->run, &next);
    else {
        /* the other live settings still apply; the TLS ones stay */
        char cert[BF_PATH_MAX], key[BF_PATH_MAX], ca[BF_PATH_MAX];
        memcpy(cert, s->run.tls_cert, sizeof cert);
        memcpy(key, s->run.tls_key, sizeof key);
        memcpy(ca, s->run.tls_ca, sizeof ca);
        bf_config_copy_live(&s->run, &next);
        memcpy(s->run.tls_cert, cert, sizeof cert);
        memcpy(s->run.tls_key, key, sizeof key);
        memcpy(s->run.tls_ca, ca, sizeof ca);
    }
    bf_log_set_level(bf_log_level_parse(s->run.log_level));
    if (st) {
        struct bf_live_values v;
        bf_live_from_config(&v, &s->run);
        bf_live_publish(&s->shm, &v);
        BF_STAT_INC(st->host.reloads);
        BF_STAT_ADD(st->host.reload_changes_applied, (uint64_t)d.applied);
        BF_STAT_ADD(st->host.reload_changes_rejected, (uint64_t)d.rejected);
        BF_STAT_SET(st->host.last_reload_ns, now);
        BF_STAT_SET(st->host.last_reload_ok, 1);
    }
    BF_INFO("configuration reloaded",
            "applied=%d needs_restart=%d paused=%d dry_run=%d "
            "reclaim_cap=%g max_actions=%d log_level=%s audit_log=\"%s\"",
            d.applied, d.rejected, s->run.actuation_paused, s->run.dry_run,
            s->run.reclaim_cap_fraction, s->run.max_actions_per_cycle, s->run.log_level,
            s->run.audit_log);
}
