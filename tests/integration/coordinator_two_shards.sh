#!/usr/bin/env bash
# coordinator_two_shards.sh — the short 2-shard replay (issue 17): the
# multi-shard main job (scripts/run-multi-shard: etcd, three
# bigfleet-coordinator replicas, one simulated provider partitioned by
# instance type over two real appliances, every GPU type on shard 0) replays
# the openb trace's busiest 3 days in 45 s of wall time, one cluster a shard,
# and pauses the coordinator leader 15 s in (SIGSTOP; SIGCONT once a new
# leader leads and both shards have seen its term: a deposed "zombie"
# leader). Asserts behaviour, never speed:
#   - no machine is in both shards' inventories, at the end and at every
#     check during the run (whole machine ids from bigfleet-inspect --json);
#   - the GPU-starved shard 1 received machines through the coordinator
#     (Tier-1 TransferOwnership of Idle or Tier-2 ReassignSpeculative), and
#     shard 0 gave up at least as many (a move is two-phase: donor first);
#   - no reclaim of a still-demanded machine on either shard;
#   - the pause fails over: a new leader with a strictly higher term, and
#     both shards' term high-water marks reach it;
#   - the resumed zombie does not lead: it stepped down, and a probe sent to
#     it right after SIGCONT is not answered as by a leader with its old
#     term; each shard's stale replies/instructions rejected are reported
#     (they stay 0 when the zombie steps down before any shard comes back to
#     it: docs/coordinator.md §8; the shard-side fence itself is asserted
#     by tests/interop/session_coordinator.test.js).
# Satisfaction at the peak is printed (the figure), not asserted: it depends
# on how many cycles a loaded machine runs in 45 s.
source "$(dirname "$0")/lib.bash"
[ -r "$SHARED/data/openb/openb_pod_list_default.csv" ] || { echo "no ../shared/data/openb"; exit 77; }
for c in etcd jq curl; do
    command -v "$c" >/dev/null || fail "$c is missing (scripts/install-deps installs it)"
done
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=$TMP/run
# run-multi-shard cleans up what it started (processes, its shards' segments)
# the heaviest imbalance (every GPU type on shard 0): transfers must happen
RESULTS=$out SHARED=$SHARED SHARDS=2 CLUSTERS=1 WALL=45s WINDOW=3d PAUSE_LEADER_AT=15 STARVED_TYPES=all-gpu \
    bash "$repo/scripts/run-multi-shard" "$BIN/.." >"$TMP/job.out" 2>&1
rc=$?
cat "$TMP/job.out"
# 0 = every acceptance figure met; 3 = one was not (checked one by one below)
[ $rc = 0 ] || [ $rc = 3 ] || fail "run-multi-shard exited $rc"
j=$out/multi-shard.json
[ -s "$j" ] || fail "no multi-shard.json"
q() { jq -r "$1" "$j"; }

[ "$(q '.double_owned.checks')" -ge 3 ] || fail "fewer than 3 double-ownership checks during the run"
# the checks saw both inventories (an empty listing would prove nothing)
[ "$(q '.double_owned.listed_min_during_run')" -gt 0 ] && [ "$(q '.double_owned.listed_at_end')" -gt 0 ] ||
    fail "a double-ownership check listed no machine: $(q '.double_owned')"
[ "$(q '.double_owned.max_during_run')" = 0 ] ||
    fail "$(q '.double_owned.max_during_run') machines in both inventories during the run"
[ "$(q '.double_owned.at_end')" = 0 ] || fail "$(q '.double_owned.at_end') machines in both inventories at the end"
pass "no machine in two inventories ($(q '.double_owned.checks') checks of >= $(q '.double_owned.listed_min_during_run') machines, and at the end)"

in1=$(q '.shards[1].transferred_in + .shards[1].speculative_in')
out0=$(q '.shards[0].transferred_out + .shards[0].speculative_out')
[ "$in1" -ge 1 ] || fail "the starved shard 1 received no machine through the coordinator"
[ "$out0" -ge "$in1" ] || fail "shard 1 took $in1 machines, shard 0 gave up only $out0"
pass "shard 1 received $in1 machines (Tier 1: $(q '.shards[1].transferred_in'), Tier 2: $(q '.shards[1].speculative_in')); shard 0 gave up $out0"

for k in 0 1; do
    r=$(q ".shards[$k].replay.reclaims_still_demanded.count")
    [ "$r" = 0 ] || fail "shard $k reclaimed $r still-demanded machines"
    echo "shard $k: satisfied at peak $(q ".shards[$k].replay.satisfied.at_peak.min")"
done
pass "0 reclaims of still-demanded machines"

old=$(q '.failover.old_term') new=$(q '.failover.new_term')
[ "$old" != null ] && [ "$new" != null ] || fail "no failover recorded: $(q '.failover')"
[ "$new" -gt "$old" ] || fail "the new leader's term $new is not above $old"
pass "leader paused at term $old; new leader at term $new after $(q '.failover.seconds') s"
for k in 0 1; do
    h=$(q ".shards[$k].coordinator_term_high_water_mark")
    [ "$h" != null ] && [ "$h" -ge "$new" ] || fail "shard $k's term high-water mark $h is below the new term $new"
    sr=$(q ".shards[$k].stale_replies_ignored") si=$(q ".shards[$k].stale_reply_instructions_ignored")
    [ "$sr" != null ] && [ "$si" != null ] || fail "shard $k's stale replies are not reported"
    echo "shard $k: term mark $h; stale replies ignored $sr ($si instructions); stale instructions rejected by the cycle $(q ".shards[$k].stale_instructions_rejected")"
done
pass "both shards' term marks reached the new term $new"
z() { q ".zombie.$1"; }
[ "$(z replica)" != null ] || fail "no zombie recorded: $(q '.zombie')"
[ "$(z leader_after_resume)" = 0 ] || fail "the resumed zombie $(z replica) still leads: $(q '.zombie')"
[ "$(z stepdowns)" -ge 1 ] || fail "the zombie never stepped down: $(q '.zombie')"
case "$(z probe_after_resume)" in
*"not leader"*) ;;
*) fail "the zombie answered a probe right after SIGCONT as a leader: $(z probe_after_resume)" ;;
esac
pass "the resumed zombie $(z replica) stepped down (\"$(z stepdown_reason)\"), answered the probe \"not leader\"; $(z pending_instructions_at_pause) instructions were pending at the pause, $(z reports_answered_since_pause) ReportShard answered since"
