# tests/integration/provider_lib.bash — helpers for the provider-path
# integration tests (sourced after lib.bash).
#   start_sim NAME ARGS...   runs bigfleet-simprovider (gRPC on $SIM_PORT if set,
#                            else a free port) with an
#                            HTTP stats endpoint; sets SIM_PID, SIM_ADDR,
#                            SIM_HTTP (host:port); logs in $TMP/NAME.log
#   sim_stat KEY [SUB]       a number from /stats (e.g. sim_stat accepted create)
#   start_appliance ARGS...  bigfleet-shardd with small capacities, a huge
#                            --cycle-interval (bf_actuate is the only action
#                            source) and --local-bootstrap; sets SUP
#   A ARGS...                bf_actuate --id $ID
#   view CMD                 bf_actuate output captured in $TMP/view (grep it:
#                            `A dump | grep -q` would trip pipefail on SIGPIPE)
ACT="$BIN/../tests/interop/bf_actuate"
[ -x "$ACT" ] || { echo "skip: $ACT not built"; exit 77; }

start_sim() {
    local name=$1; shift
    local port=${SIM_PORT:-$(free_port)}
    "$BIN/bigfleet-simprovider" --addr "127.0.0.1:$port" --http-addr 127.0.0.1:0 "$@" \
        >"$TMP/$name.out" 2>>"$TMP/$name.log" &
    SIM_PID=$!; PIDS+=("$SIM_PID")
    wait_for 10 grep -q READY "$TMP/$name.out" || { cat "$TMP/$name.log"; fail "simprovider $name did not start"; }
    SIM_ADDR="127.0.0.1:$port"
    SIM_HTTP="127.0.0.1:$(sed -n 's/.*http=\([0-9]*\).*/\1/p' "$TMP/$name.out")"
}

sim_stat() {
    curl -sf "http://$SIM_HTTP/stats" >"$TMP/simstats" || return 1
    python3 - "$TMP/simstats" "$@" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    v = v[k]
print(v)
EOF
}

start_appliance() {
    "$BIN/bigfleet-shardd" --id "$ID" --data-dir "$TMP/data" --listen 127.0.0.1:0 --metrics-addr 0 \
        --max-machines 4096 --max-needs 1024 --max-clusters 16 --cycle-interval 24h \
        --local-bootstrap "$@" >>"$TMP/appliance.log" 2>&1 &
    SUP=$!; PIDS+=("$SUP")
}

A() { "$ACT" --id "$ID" "$@"; }
view() { A "$@" >"$TMP/view"; }

# transitional machines in the current inventory (0 when settled)
transitional() { view dump && grep -cE "state=(Creating|Configuring|Draining|Deleting) " "$TMP/view"; }
