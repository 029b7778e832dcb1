/*
 * test_cycle_pace.c — --cycle-min-gap, the pacing of demand-triggered cycles
 * (bf_cycle_pace_wait / bf_cycle_pace_ran, the decision the cycle process's
 * loop makes before every sleep). A simulated clock drives a model of that
 * loop (src/cycle/cycle_main.c): demand is pending while the needs change
 * counter differs from the value the last cycle read; a cycle reads it and
 * takes CYCLE_NS; a wake (a demand change, ownership work) ends a sleep
 * early unless a demand change waits out the gap (the loop then sleeps
 * without its wake fd). The model asks the real functions whether to run or
 * how long to sleep.
 */
#include <check.h>
#include <stdint.h>

#include "bigfleet/cycle.h"
#include "bigfleet/util.h"
#include "check_run.h"

#define MS         BF_NS_PER_MS
#define US         1000LL
#define GAP        (5 * MS)
#define INTERVAL   (1000 * MS)
#define CYCLE_NS   (100 * US)
#define MAX_CYCLES 256

struct sim {
    struct bf_cycle_pace pace;
    int64_t now, next;      /* clock; next periodic cycle */
    uint64_t counter, seen; /* needs change counter; the value the last cycle read */
    int ncycles;
    int64_t start[MAX_CYCLES]; /* each cycle's start */
    bool demand[MAX_CYCLES];   /* a demand change was pending at its start */
    uint64_t read[MAX_CYCLES]; /* the counter it read */
    int sleeps;                /* loop iterations that slept (a spin would show here) */
    int64_t decided_at[64];    /* per change: the start of the cycle that read it */
    int64_t change_at[64];
    int nchanges;
    int64_t urgent_at; /* ownership work / deferral follow-up at this time (-1: none) */
};

static void sim_init(struct sim *s, int64_t gap)
{
    *s = (struct sim){.pace = {.gap_ns = gap}, .urgent_at = -1};
    s->next = INTERVAL; /* the first (periodic) cycle at 0 is taken as done */
}

/* Runs the loop until `until` with demand changes at the times in `at`
 * (ascending, >= s->now). */
static void sim_run(struct sim *s, const int64_t *at, int n, int64_t until)
{
    int i = 0;
    while (s->now < until) {
        while (i < n && at[i] <= s->now) { /* the session bumps the counter and wakes us */
            s->change_at[s->nchanges] = at[i];
            s->decided_at[s->nchanges++] = -1;
            s->counter++;
            i++;
        }
        bool urgent = s->urgent_at >= 0 && s->now >= s->urgent_at;
        bool demand = s->counter != s->seen;
        int64_t wait = bf_cycle_pace_wait(&s->pace, s->now, s->next, urgent, demand);
        if (wait > 0) {
            ck_assert_int_lt(++s->sleeps, 100000);
            int64_t wake = s->now + wait;
            if (!demand && i < n && at[i] < wake)
                wake = at[i]; /* a wake ends the sleep early */
            if (!demand && s->urgent_at > s->now && s->urgent_at < wake)
                wake = s->urgent_at;
            s->now = wake;
            continue;
        }
        ck_assert_int_lt(s->ncycles, MAX_CYCLES);
        bf_cycle_pace_ran(&s->pace, s->now, demand);
        if (urgent)
            s->urgent_at = -1;
        s->start[s->ncycles] = s->now;
        s->demand[s->ncycles] = demand;
        s->read[s->ncycles++] = s->counter;
        for (int k = 0; k < s->nchanges; k++)
            if (s->decided_at[k] < 0)
                s->decided_at[k] = s->now;
        s->seen = s->counter;
        s->now += CYCLE_NS;
        s->next = s->now + INTERVAL;
    }
}

/* (a) ten changes inside the gap after a demand cycle: one cycle, when the
 * gap has passed, reading all ten; not one per change. */
START_TEST(changes_inside_the_gap_make_one_cycle_after_the_gap)
{
    struct sim s;
    sim_init(&s, GAP);
    s.now = 100 * MS;
    int64_t at[11] = {100 * MS};
    for (int k = 1; k <= 10; k++)
        at[k] = 100 * MS + k * 400 * US; /* 0.4 .. 4.0 ms after the first */
    sim_run(&s, at, 11, 200 * MS);
    ck_assert_int_eq(s.ncycles, 2);
    ck_assert_int_eq(s.start[0], 100 * MS);       /* the first change at once */
    ck_assert_int_eq(s.start[1], 100 * MS + GAP); /* the rest when the gap ends */
    ck_assert(s.demand[1]);
    ck_assert_int_eq(s.read[1], 11);
    for (int k = 1; k <= 10; k++)
        ck_assert_int_eq(s.decided_at[k], 100 * MS + GAP);
}
END_TEST

/* (b) a change after a quiet period (longer than the gap) is decided at once,
 * gap or not; with the gap off every change is. */
START_TEST(a_change_after_a_quiet_period_is_decided_at_once)
{
    struct sim s;
    sim_init(&s, GAP);
    s.now = 50 * MS;
    int64_t at[3] = {50 * MS, 50 * MS + GAP + 1 * MS, 80 * MS};
    sim_run(&s, at, 3, 200 * MS);
    ck_assert_int_eq(s.ncycles, 3);
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(s.decided_at[k], at[k]);
    /* the very first change (no demand cycle yet) */
    sim_init(&s, GAP);
    int64_t first[1] = {3 * US};
    sim_run(&s, first, 1, 10 * MS);
    ck_assert_int_eq(s.decided_at[0], 3 * US);
    /* --cycle-min-gap=0: one cycle per change, at once */
    sim_init(&s, 0);
    int64_t burst[4] = {1 * MS, 1 * MS + 200 * US, 1 * MS + 400 * US, 1 * MS + 600 * US};
    sim_run(&s, burst, 4, 10 * MS);
    ck_assert_int_eq(s.ncycles, 4);
    for (int k = 0; k < 4; k++)
        ck_assert_int_eq(s.decided_at[k], burst[k]);
}
END_TEST

/* (c) a pending change is never lost: a steady stream of changes (every
 * 300 us for 200 ms, each waking the loop) is decided within one gap (plus a
 * cycle) of each change, the last one included; demand cycles start at least
 * a gap apart; the loop sleeps between them (no spin) and never waits for the
 * periodic cycle. */
START_TEST(a_pending_change_is_never_lost_and_the_loop_never_spins)
{
    struct sim s;
    sim_init(&s, GAP);
    static int64_t at[64];
    int n = 0;
    for (int64_t t = 10 * MS; n < 64; t += 3100 * US)
        at[n++] = t; /* wakes that fall inside, at the end of and after gaps */
    sim_run(&s, at, n, at[n - 1] + 50 * MS);
    ck_assert_int_eq(s.nchanges, n);
    ck_assert_int_eq(s.seen, s.counter);
    for (int k = 0; k < n; k++) {
        ck_assert_int_ge(s.decided_at[k], s.change_at[k]);
        ck_assert_msg(s.decided_at[k] - s.change_at[k] <= GAP + CYCLE_NS,
                      "change %d at %lld decided at %lld", k, (long long)s.change_at[k],
                      (long long)s.decided_at[k]);
    }
    for (int c = 1; c < s.ncycles; c++)
        if (s.demand[c])
            ck_assert_int_ge(s.start[c] - s.start[c - 1], GAP);
    ck_assert_int_lt(s.ncycles, n); /* coalesced */
    ck_assert_int_le(s.sleeps, 2 * n + 4);
}
END_TEST

/* Periodic cycles, ownership work and a deferral's follow-up run at once
 * inside the gap (and take the pending change along); the loop, asleep
 * without its wake fd while a change waits out the gap, sees ownership work
 * that arrives meanwhile at the gap's end. */
START_TEST(urgent_and_periodic_cycles_are_not_delayed_by_the_gap)
{
    struct bf_cycle_pace p = {.gap_ns = GAP};
    bf_cycle_pace_ran(&p, 100 * MS, true);
    ck_assert_int_eq(bf_cycle_pace_wait(&p, 101 * MS, INTERVAL, false, true), 4 * MS);
    ck_assert_int_eq(bf_cycle_pace_wait(&p, 101 * MS, INTERVAL, true, true), 0);
    ck_assert_int_eq(bf_cycle_pace_wait(&p, 101 * MS, 101 * MS, false, true), 0);
    ck_assert_int_eq(bf_cycle_pace_wait(&p, 101 * MS, 102 * MS, false, true), 1 * MS);
    ck_assert_int_eq(bf_cycle_pace_wait(&p, 101 * MS, INTERVAL, false, false), INTERVAL - 101 * MS);
    /* a cycle without a demand change does not restart the gap */
    bf_cycle_pace_ran(&p, 102 * MS, false);
    ck_assert_int_eq(bf_cycle_pace_wait(&p, 105 * MS, INTERVAL, false, true), 0);
    struct sim s;
    sim_init(&s, GAP);
    s.now = 20 * MS;
    int64_t at[2] = {20 * MS, 21 * MS};
    s.urgent_at = 22 * MS;
    sim_run(&s, at, 2, 40 * MS);
    ck_assert_int_eq(s.ncycles, 2);
    ck_assert_int_eq(s.start[1], 20 * MS + GAP);
    ck_assert_int_eq(s.decided_at[1], 20 * MS + GAP);
    ck_assert_int_eq(s.urgent_at, -1); /* taken by that cycle */
    /* ownership work with no demand change waiting: at once, inside the gap */
    sim_init(&s, GAP);
    s.now = 20 * MS;
    int64_t one[1] = {20 * MS};
    s.urgent_at = 21 * MS;
    sim_run(&s, one, 1, 40 * MS);
    ck_assert_int_eq(s.ncycles, 2);
    ck_assert_int_eq(s.start[1], 21 * MS);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cycle_pace");
    TCase *tc = tcase_create("pace");
    tcase_add_test(tc, changes_inside_the_gap_make_one_cycle_after_the_gap);
    tcase_add_test(tc, a_change_after_a_quiet_period_is_decided_at_once);
    tcase_add_test(tc, a_pending_change_is_never_lost_and_the_loop_never_spins);
    tcase_add_test(tc, urgent_and_periodic_cycles_are_not_delayed_by_the_gap);
    suite_add_tcase(s, tc);
    return check_run(s);
}
