/*
 * live.c — the live configuration block of the state segment: what a SIGHUP
 * may change in a running appliance (bigfleet/shm.h bf_live_*).
 *
 * One writer (the supervisor). A sequence word makes a multi-word copy
 * consistent: the writer makes seq odd (release fence after), stores the
 * words, makes seq even (release); a reader loads seq (acquire), copies,
 * fences (acquire) and re-loads seq, retrying a bounded number of times.
 * The kill switch and dry-run are single words read directly by the cycle
 * (and the executor) and are stored here too for one consistent snapshot.
 */
#include <errno.h>
#include <string.h>

#include "bigfleet/config.h"
#include "bigfleet/log.h"
#include "shm_internal.h"

#define PATH_BYTES (BF_LIVE_PATH_WORDS * 8)

static void copy_path(char *dst, const char *src)
{
    memset(dst, 0, PATH_BYTES);
    size_t l = strlen(src);
    if (l > PATH_BYTES - 1)
        l = PATH_BYTES - 1;
    memcpy(dst, src, l);
}

void bf_live_from_config(struct bf_live_values *v, const struct bf_config *c)
{
    memset(v, 0, sizeof *v);
    v->actuation_paused = c->actuation_paused;
    v->dry_run = c->dry_run;
    v->reclaim_cap_fraction = c->reclaim_cap_fraction;
    v->max_actions_per_cycle = (uint32_t)c->max_actions_per_cycle;
    int lvl = bf_log_level_parse(c->log_level);
    v->log_level = lvl < 0 ? BF_LOG_INFO : lvl;
    copy_path(v->tls_cert, c->tls_cert);
    copy_path(v->tls_key, c->tls_key);
    copy_path(v->tls_ca, c->tls_ca);
    copy_path(v->audit_log, c->audit_log);
}

void bf_live_publish(struct bf_shm *s, const struct bf_live_values *v)
{
    struct bf_state_main *st = s->st;
    struct bf_live_config *L = &st->host.live;
    uint64_t seq = atomic_load_explicit(&L->seq, memory_order_relaxed);
    atomic_store_explicit(&L->seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release); /* pairs with the reader's acquire fence */
    uint64_t bits;
    memcpy(&bits, &v->reclaim_cap_fraction, sizeof bits);
    atomic_store_explicit(&L->reclaim_cap_bits, bits, memory_order_relaxed);
    atomic_store_explicit(&L->max_actions_per_cycle, v->max_actions_per_cycle,
                          memory_order_relaxed);
    atomic_store_explicit(&L->log_level, v->log_level, memory_order_relaxed);
    char tmp[PATH_BYTES];
    copy_path(tmp, v->tls_cert);
    bf_shm_store_words(L->tls_cert, tmp, PATH_BYTES);
    copy_path(tmp, v->tls_key);
    bf_shm_store_words(L->tls_key, tmp, PATH_BYTES);
    copy_path(tmp, v->tls_ca);
    bf_shm_store_words(L->tls_ca, tmp, PATH_BYTES);
    copy_path(tmp, v->audit_log);
    bf_shm_store_words(L->audit_log, tmp, PATH_BYTES);
    atomic_store_explicit(&st->actuation_paused, v->actuation_paused ? 1 : 0, memory_order_relaxed);
    atomic_store_explicit(&st->dry_run, v->dry_run ? 1 : 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&L->generation, 1, memory_order_relaxed);
    atomic_store_explicit(&L->seq, seq + 2, memory_order_release);
}

int bf_live_read(const struct bf_shm *s, struct bf_live_values *v)
{
    const struct bf_state_main *st = s->st;
    const struct bf_live_config *L = &st->host.live;
    for (unsigned attempt = 0; attempt < 64; attempt++) {
        uint64_t s0 = atomic_load_explicit(&L->seq, memory_order_acquire);
        if (s0 & 1u) {
            bf_backoff(attempt);
            continue;
        }
        uint64_t bits = atomic_load_explicit(&L->reclaim_cap_bits, memory_order_relaxed);
        memcpy(&v->reclaim_cap_fraction, &bits, sizeof bits);
        v->max_actions_per_cycle =
            atomic_load_explicit(&L->max_actions_per_cycle, memory_order_relaxed);
        v->log_level = atomic_load_explicit(&L->log_level, memory_order_relaxed);
        bf_shm_load_words(v->tls_cert, L->tls_cert, PATH_BYTES);
        bf_shm_load_words(v->tls_key, L->tls_key, PATH_BYTES);
        bf_shm_load_words(v->tls_ca, L->tls_ca, PATH_BYTES);
        bf_shm_load_words(v->audit_log, L->audit_log, PATH_BYTES);
        v->actuation_paused = atomic_load_explicit(&st->actuation_paused, memory_order_relaxed);
        v->dry_run = atomic_load_explicit(&st->dry_run, memory_order_relaxed);
        v->generation = atomic_load_explicit(&L->generation, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire); /* pairs with the writer's release fence */
        if (atomic_load_explicit(&L->seq, memory_order_relaxed) == s0) {
            v->tls_cert[PATH_BYTES - 1] = v->tls_key[PATH_BYTES - 1] = 0;
            v->tls_ca[PATH_BYTES - 1] = v->audit_log[PATH_BYTES - 1] = 0;
            return 0;
        }
        bf_backoff(attempt);
    }
    return -EAGAIN;
}

uint64_t bf_live_generation(const struct bf_shm *s)
{
    return atomic_load_explicit(&s->st->host.live.generation, memory_order_acquire);
}
