#!/usr/bin/env bash
# Beliefs remembered across a restart (issue #46): the official Anthropic
# SDK (retries off) through `ratewise proxy --journal` against the mock as
# a provider that states no limits at all (the silent-anthropic shape of
# bench/proxy_sdk.sh: RPM 600, ITPM 300k, OTPM 60k, 10 s buckets, 429s
# with retry-after only). Three arms side by side, each on its own mock:
#
#   never      one proxy, run A then run B;
#   restarted  run A, the proxy stopped (SIGTERM) and started again on the
#              same journal, run B: it starts from what run A taught;
#   forgotten  the same restart on a fresh journal: it learns from nothing.
#
# Between the runs the provider's buckets refill (12 s) and the mock's
# records are cleared, so run B's figures are run B's alone. Prints run
# B's figures per arm (jobs done, sends, answered 429, the share of the
# limit used, wall time). Fails unless every job of every run is done
# and the restarted arm answers no more 429s in run B than the arm never
# restarted (one more is allowed for noise).
#
#   bash bench/remember.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${RATEWISE_CONFORMANCE_VENV:-$ROOT/target/conformance-venv}"
PYTHON="${PYTHON:-python3}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
CHECK="bench/remember.sh"
. "$ROOT/tests/conformance/venv.sh"
. "$ROOT/bench/lib.sh"
[ -n "${RATEWISE_BINS_BUILT:-}" ] || (cd "$ROOT" && cargo build --quiet -p ratewise-mock -p ratewise-cli)
MOCK_BIN="$TARGET/debug/ratewise-mock"
PROXY_BIN="$TARGET/debug/ratewise"

WORK="$(mktemp -d)"
PIDS=()
# shellcheck disable=SC2329  # run by the EXIT trap
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

CONFIG='{
  "seconds_per_minute": 60,
  "anthropic_limits": {"requests_per_minute": 600, "input_tokens_per_minute": 300000, "output_tokens_per_minute": 60000},
  "capacity_seconds": 10,
  "framing": "content_length",
  "output_tokens": {"min": 100, "max": 400},
  "latency": {"first_byte_ms": 150, "per_output_token_ms": 1.0},
  "silent": "retry_after"
}'
echo "$CONFIG" >"$WORK/mock.json"

# start_proxy ARM JOURNAL MOCK_ADDR N: starts a proxy, prints its address.
start_proxy() {
    local arm=$1 journal=$2 mock=$3 n=$4
    XDG_STATE_HOME="$WORK/state" "$PROXY_BIN" proxy --listen 127.0.0.1:0 --admin 127.0.0.1:0 \
        --upstream "http://$mock" --journal "$journal" >"$WORK/$arm.proxy$n.out" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    echo "$pid" >"$WORK/$arm.pid"
    wait_addr "$WORK/$arm.proxy$n.out" "$pid" addr
}

# run ARM LABEL PROXY MOCK: one run of 150 jobs at 16; its JSON figures to
# $WORK/ARM.LABEL.json.
run() {
    local arm=$1 label=$2 proxy=$3 mock=$4
    "$VENV/bin/python" "$ROOT/bench/proxy_sdk.py" --shape anthropic --label "$arm, run $label" \
        --proxy "http://$proxy" --mock "http://$mock" \
        --jobs 150 --concurrency 16 --max-tokens 1024 --input 1000 3000 \
        --limit 300000 --binding input --capacity-seconds 10 \
        --max-429-share 1 --min-used 0 >"$WORK/$arm.$label.out"
    head -n1 "$WORK/$arm.$label.out" >"$WORK/$arm.$label.json"
    tail -n1 "$WORK/$arm.$label.out"
}

arm() {
    local arm=$1
    # An arm runs in a subshell of its own, and each proxy's start in a
    # command substitution: their PIDS entries never reach the main EXIT
    # trap (the mocks and proxies were left running after the script).
    # The arm stops its own: its mock (PIDS, reset here so as not to hold
    # the sibling arms its copy started with) and its live proxy (the pid
    # file `start_proxy` writes).
    PIDS=()
    ARM=$arm
    # shellcheck disable=SC2317  # run by the EXIT trap
    stop_arm() {
        for p in "${PIDS[@]:-}" "$(cat "$WORK/$ARM.pid" 2>/dev/null)"; do
            [ -n "$p" ] && kill "$p" 2>/dev/null || true
        done
    }
    trap stop_arm EXIT
    "$MOCK_BIN" --config "$WORK/mock.json" --addr 127.0.0.1:0 >"$WORK/$arm.mock.out" 2>&1 &
    local mock_pid=$!
    PIDS+=("$mock_pid")
    local mock
    mock="$(wait_addr "$WORK/$arm.mock.out" "$mock_pid")"
    local proxy
    proxy="$(start_proxy "$arm" "$WORK/$arm.journal" "$mock" 1)"
    run "$arm" A "$proxy" "$mock"
    case "$arm" in
        never) ;;
        restarted | forgotten)
            local pid
            pid="$(cat "$WORK/$arm.pid")"
            kill -TERM "$pid"
            while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
            [ "$arm" = forgotten ] && rm -f "$WORK/$arm.journal"
            proxy="$(start_proxy "$arm" "$WORK/$arm.journal" "$mock" 2)" ;;
    esac
    # The provider's buckets refill; run B's records are its own.
    sleep 12
    curl -fsS -X DELETE "http://$mock/mock/records" >/dev/null
    run "$arm" B "$proxy" "$mock"
}

for a in never restarted forgotten; do
    arm "$a" >"$WORK/$a.log" 2>&1 &
    PIDS+=("$!")
    eval "pid_$a=$!"
done
rc=0
for a in never restarted forgotten; do
    p="pid_$a"
    wait "${!p}" || { echo "FAIL: $CHECK: arm $a:"; cat "$WORK/$a.log"; rc=1; }
done
[ "$rc" = 0 ] || exit 1
echo "| arm, run | done | sends | answered 429 | used of the binding limit | wall |"
echo "|---|---|---|---|---|---|"
for a in never restarted forgotten; do cat "$WORK/$a.log"; done
"$PYTHON" - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
b = {a: json.load(open(f"{work}/{a}.B.json")) for a in ("never", "restarted", "forgotten")}
a = {x: json.load(open(f"{work}/{x}.A.json")) for x in ("never", "restarted", "forgotten")}
failed = []
for arm in ("never", "restarted", "forgotten"):
    for run, r in (("A", a[arm]), ("B", b[arm])):
        if r["done"] != r["jobs"]:
            failed.append(f"{arm} run {run}: {r['done']}/{r['jobs']} done")
print("run B, 429s: never restarted %d, restarted %d, restarted with the memory dropped %d"
      % (b["never"]["answered_429"], b["restarted"]["answered_429"], b["forgotten"]["answered_429"]))
print("run B, wall: never restarted %.1f s, restarted %.1f s, memory dropped %.1f s"
      % (b["never"]["wall_s"], b["restarted"]["wall_s"], b["forgotten"]["wall_s"]))
if b["restarted"]["answered_429"] > b["never"]["answered_429"] + 1:
    failed.append("the restarted proxy answered more 429s than the one never restarted")
if failed:
    print("FAIL: bench/remember.sh: " + "; ".join(failed), file=sys.stderr)
    sys.exit(1)
PY
