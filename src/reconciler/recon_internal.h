/*
 * recon_internal.h — private state of the reconciler engine (src/reconciler/):
 * shared by reconcile.c (applying a MachineList page to the inventory, the
 * resync walk's seen set and removals) and pass.c (the engine's life, the
 * List/Get passes and their scheduling). Contracts are in reconciler.h.
 */
#ifndef BF_RECON_INTERNAL_H
#define BF_RECON_INTERNAL_H

#include "reconciler/reconciler.h"

/* A full walk over the provider's machines: one unpaged List, or pages
 * threaded with since_revision cursors (reconciler.h "Resync walks"). */
struct recon_walk {
    bool active;
    bool paged;             /* max_results = page size, pages threaded by cursor */
    uint8_t *cursor;        /* the previous page's revision; NULL before the first page */
    size_t cursor_len;      /* 0 before the first page */
    uint32_t pages;         /* pages applied */
    uint32_t listed;        /* machines listed over the walk */
    int64_t started_ns;     /* monotonic */
    uint64_t exec_head;     /* executor change-log position folded into exec_written so far */
    bool exec_lapped;       /* the executor's log lapped during the walk: remove nothing */
    uint64_t *exec_written; /* bitmap: slots the executor wrote since the walk began */
};

/* The walk's next page, asked for before the page before it is applied
 * (pass.c "Pipelined walk pages"): at most one, and one List in flight. */
enum { PF_NONE = 0, PF_INFLIGHT = 1, PF_PARKED = 2 };
struct pf_ticket;
struct recon_prefetch {
    int state;                /* PF_* */
    struct pf_ticket *ticket; /* the call's argument while in flight (detached by free) */
    struct bf_prov_call *call;
    uint64_t exec_head; /* executor change-log head when it was issued */
    uint32_t page;      /* max_results asked */
    bool consumer;      /* a pass waits for it */
    bool follow;        /* that pass was requested: after the page, the List the request needs */
    /* PF_PARKED: the reply arrived before a pass asked for it (a copy: one page) */
    struct bf_prov_result pr;
    char message[160];
    uint8_t *buf;
    size_t len;
    bool has_list;
    struct bf_net_timer *timer; /* delivers a parked reply on the loop */
};

struct bf_recon {
    struct bf_shm *shm;
    struct bf_prov_client *client;
    struct bf_recon_opts o;
    struct bf_prov_shape_cache *shapes;
    size_t words;   /* bitmap words over the slots */
    uint64_t *seen; /* bitmap: slots some List mentioned since the walk began */
    /* slots the executor wrote after the current List was issued: the List
     * may predate those writes, so its view of them is not applied */
    uint64_t *touched;       /* bitmap over slots */
    uint64_t list_exec_head; /* executor change-log head when the List was issued */
    bool touched_all;        /* the log lapped in between: trust no divergence */
    uint32_t next_slot;      /* where the next listed machine probably is (predicted()) */
    bool inserting;          /* the last machine applied was new (decode, do not peek) */
    struct recon_walk walk;
    /* the delta cursor (in memory: a restart starts with a walk) */
    uint8_t *cursor;
    size_t cursor_len;
    bool have_cursor;
    bool delta_more; /* the last delta page was truncated: more changes wait */
    bool no_cursor;  /* the provider returned no revision: full Lists only */
    bool no_paging;  /* pages did not advance: unpaged walks only */
    bool synced;     /* a walk completed since start (the delta cursor is valid) */
    bool resync_now; /* a resync is due at once (lost refresh candidates) */
    /* a paged walk found more missing machines than Gets confirm: the next
     * walk is unpaged and removes them if they are really gone */
    bool confirm_unpaged;
    uint32_t confirm_expect; /* machines the paged walk missed */
    bool confirming;         /* the walk under way is that unpaged one */
    uint32_t confirm_found;  /* Gets of a paged walk's candidates that found the machine */
    int64_t last_walk_ns;    /* monotonic end of the last complete walk */
    int64_t retry_at_ns;     /* background work waits until then after a failure */
    int client_state_seen;   /* provider client state at the last step */
    /* refresh candidates: private read cursors over the executor's and the
     * supervisor's change logs (read only: the cycle owns the logs' tails) */
    uint64_t cl_cursor[BF_CHANGELOG_WRITERS];
    bool refresh_lost; /* a log lapped our cursor, or a pass failed: resync */
    uint32_t *refresh; /* slots flagged NEEDS_REFRESH, for targeted Gets */
    uint32_t n_refresh;
    size_t refresh_cap;
    /* the pass in flight */
    bool busy;
    int kind;           /* enum bf_recon_kind */
    uint32_t pass_page; /* max_results asked (0 = unpaged) */
    int64_t t0;
    uint32_t gets_outstanding;
    struct bf_recon_result res; /* accumulated over the List and the Gets */
    bf_recon_done_fn done;
    void *done_arg;
    /* per List reply */
    int rejects_logged;
    bool events_pushed;
    struct recon_prefetch pf;
    struct bf_recon_result carry; /* the prefetched page's result when a List followed it */
    bool have_carry;
    /* ADR-0055: NULL = adopt everything */
    struct bf_recon_own *own;
    struct bf_recon_result sweep; /* releases of the sweep before this pass */
};

/* reconcile.c */
void bf_recon_apply_page(struct bf_recon *r, const struct bf_prov_list *l,
                         struct bf_recon_result *res);
/* Opens a walk (clears the seen set, starts following the executor's log). */
void bf_recon_walk_begin(struct bf_recon *r, bool paged);
/* Folds the executor's log into the walk's exec_written set (after each page). */
void bf_recon_walk_follow(struct bf_recon *r);
/* Ends a complete walk: removes what no List mentioned (unpaged walk), or
 * lists the candidates in refresh[] for Gets (paged walk; reconciler.h). */
void bf_recon_walk_finish(struct bf_recon *r, struct bf_recon_result *res);
void bf_recon_walk_abort(struct bf_recon *r);
/* Applies one machine (a List entry or a Get reply). */
void bf_recon_apply_one(struct bf_recon *r, const struct bf_prov_bytes *raw, int64_t now_unix_s,
                        struct bf_recon_result *res);
bool bf_recon_remove_slot(struct bf_recon *r, uint32_t slot, uint32_t id_ref,
                          struct bf_recon_result *res);

/* ownership.c — the ADR-0055 partition on the reconciler's side (the rule
 * and the store: bigfleet/ownership.h). */
struct bf_recon_own;
int bf_recon_own_new(struct bf_shm *shm, const char *data_dir, int policy, uint32_t sync_slice,
                     struct bf_recon_own **out);
void bf_recon_own_free(struct bf_recon_own *o);
bool bf_recon_own_refresh(struct bf_recon_own *o);
int bf_recon_own_decide_listed(struct bf_recon_own *o, const struct bf_prov_machine *m);
void bf_recon_own_adopted(struct bf_recon_own *o, const char *id, size_t len, int source);
void bf_recon_own_removed(struct bf_recon_own *o, const char *id, size_t len);
void bf_recon_own_sweep(struct bf_recon_own *o, struct bf_recon_result *res);
void bf_recon_own_finish(struct bf_recon_own *o, struct bf_recon_result *res, bool full_ok);
bool bf_recon_own_idle(struct bf_recon_own *o);
bool bf_recon_own_sync_pending(const struct bf_recon_own *o);

#endif
