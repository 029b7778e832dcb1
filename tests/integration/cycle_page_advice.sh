#!/usr/bin/env bash
# cycle_page_advice.sh — the cycle process follows --transparent-huge-pages
# (docs/operating.md "Huge pages"): by default its big arrays (the inventory
# mirror's columns, mapped when the process starts, and the feed's slot info,
# advised at the first cycle's rescan) are advised MADV_NOHUGEPAGE and, after
# the first cycle, no mapping of the process is advised MADV_HUGEPAGE; with
# --transparent-huge-pages=true they are advised MADV_HUGEPAGE. Read from
# /proc/<cycle>/smaps (VmFlags "nh" / "hg").
source "$(dirname "$0")/lib.bash"
[ -e /sys/kernel/mm/transparent_hugepage/enabled ] ||
    { echo "skip: this kernel has no transparent huge pages"; exit 77; }
ID=$(new_id thp)
# 400,000 slots: the mirror's columns are ~15 MB and the feed's slot info
# (12 B a slot) ~4.8 MB, each holding whole 2 MiB blocks the advice covers;
# the embedded provider, so that cycles run
ARGS=(--id "$ID" --data-dir "$TMP/data" --listen 127.0.0.1:0 --metrics-addr 0
      --max-machines 400000 --max-needs 4096 --max-clusters 64 --cycle-interval 500ms)
advice_in() { grep -c "^VmFlags:.* $2" "/proc/$1/smaps" 2>/dev/null; }
has_advice() { [ "$(advice_in "$1" "$2")" -gt 0 ] 2>/dev/null; }
first_cycles() { grep -c 'msg="first cycle"' "$TMP/log"; }
more_first_cycles() { [ "$(first_cycles)" -gt "$1" ]; }
: >"$TMP/log"
run() { # run ARGS...: start the appliance, wait for its cycle child's first cycle
    local n; n=$(first_cycles)
    "$BIN/bigfleet-shardd" "${ARGS[@]}" --sim-listen "127.0.0.1:$(free_port)" "$@" >>"$TMP/log" 2>&1 &
    SUP=$!; PIDS+=("$SUP")
    wait_for 10 has_child cycle "$SUP" || fail "no cycle child: $(tail -5 "$TMP/log")"
    wait_for 30 more_first_cycles "$n" || fail "no first cycle: $(tail -5 "$TMP/log")"
}
stop() {
    kill -TERM "$SUP"; wait_for 8 no_procs "$ID" || fail "did not stop"
    wait "$SUP" 2>/dev/null
}

run
CYC=$(child_pid cycle "$SUP")
has_advice "$CYC" nh || fail "no mapping of the cycle process is advised nohugepage"
[ "$(advice_in "$CYC" hg)" = 0 ] || fail "the cycle process has $(advice_in "$CYC" hg) mapping(s) advised hugepage by default"
pass "by default, after the first cycle, the cycle's big arrays are advised nohugepage ($(advice_in "$CYC" nh) mappings) and none hugepage"
stop

run --transparent-huge-pages=true
CYC=$(child_pid cycle "$SUP")
has_advice "$CYC" hg || fail "--transparent-huge-pages=true: no mapping of the cycle process is advised hugepage"
pass "--transparent-huge-pages=true: $(advice_in "$CYC" hg) mapping(s) of the cycle process advised hugepage"
stop
