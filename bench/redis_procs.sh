#!/usr/bin/env bash
# Three `ratewise proxy` processes sharing one key, the official Anthropic
# SDK's jobs spread across them, against the mock provider with 10 s
# buckets and `Content-Length` bodies (as bench/proxy_sdk.sh, at 1.2x the
# jobs and 1.5x the callers):
#
#   1. with --redis: one set of limits between the three. Fails (exit 1)
#      unless every job is done, at most 2 % of the sends are answered 429
#      and at least 0.9 of the binding limit is used;
#   2. the same three without Redis, beside it (run at the same time as
#      1, each on its own mock): each paces on its own (reported, not
#      judged);
#   3. with --redis, Redis killed (SIGKILL) 8 s in and restarted empty 5 s
#      later: fails unless every job is done, every proxy is still up, and
#      each went back to Redis after it noticed the outage.
#
#   bash bench/redis_procs.sh
#
# Starts its own redis-server on a free loopback port. Without one (or
# without PyPI, where the SDK comes from) it fails under CI=true and
# elsewhere prints "SKIPPED: <what>: <why>" and exits 0.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RATEWISE_CONFORMANCE_VENV:-$ROOT/target/conformance-venv}"
PYTHON="${PYTHON:-python3}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"

CHECK="bench/redis_procs.sh"
. "$ROOT/tests/conformance/skip.sh"
command -v redis-server >/dev/null || skip_check "$CHECK" "redis-server not found"

. "$ROOT/tests/conformance/venv.sh"
. "$ROOT/bench/lib.sh"

# RATEWISE_BINS_BUILT: .ci/run built these binaries with the test suite.
[ -n "${RATEWISE_BINS_BUILT:-}" ] || (cd "$ROOT" && cargo build --quiet -p ratewise-mock -p ratewise-cli)
MOCK_BIN="$TARGET/debug/ratewise-mock"
PROXY_BIN="$TARGET/debug/ratewise"

WORK="$(mktemp -d)"
PIDS=()
REDIS_PID=""
cleanup() {
    for p in "${PIDS[@]:-}" "$REDIS_PID"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
    "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

REDIS_PORT="$(free_port)"
REDIS_URL="redis://127.0.0.1:$REDIS_PORT/"
start_redis() {
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
        >"$WORK/redis.out" 2>&1 &
    REDIS_PID=$!
    disown "$REDIS_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do
        (echo >/dev/tcp/127.0.0.1/"$REDIS_PORT") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "FAIL: redis-server did not start" >&2
    cat "$WORK/redis.out" >&2
    return 1
}

CONFIG='{
  "seconds_per_minute": 60,
  "anthropic_limits": {"requests_per_minute": 600, "input_tokens_per_minute": 300000, "output_tokens_per_minute": 60000},
  "capacity_seconds": 10,
  "framing": "content_length",
  "output_tokens": {"min": 100, "max": 400},
  "latency": {"first_byte_ms": 150, "per_output_token_ms": 1.0}
}'
echo "$CONFIG" >"$WORK/mock.json"

# run LABEL REDIS(yes|no) MAX_429 MIN_USED [outage]
run() {
    local label=$1 redis=$2 max429=$3 minused=$4 outage=${5:-}
    # Its own state directory (the admin token): runs side by side do not
    # race to write one (admin_curl reads BENCH_STATE).
    local BENCH_STATE="$WORK/state-$label"
    "$MOCK_BIN" --config "$WORK/mock.json" --addr 127.0.0.1:0 >"$WORK/$label.mock.out" 2>&1 &
    local mock_pid=$!
    PIDS+=("$mock_pid")
    local mock_addr
    mock_addr="$(wait_addr "$WORK/$label.mock.out" "$mock_pid")"
    local proxies=() admins=() pids=()
    for i in 1 2 3; do
        local args=(proxy --listen 127.0.0.1:0 --admin 127.0.0.1:0 --upstream "http://$mock_addr")
        if [ "$redis" = yes ]; then
            printf '[redis]\nurl = "%s"\nprefix = "bench-%s"\n' "$REDIS_URL" "$label" >"$WORK/$label.toml"
            args+=(--config "$WORK/$label.toml")
        fi
        XDG_STATE_HOME="$BENCH_STATE" "$PROXY_BIN" "${args[@]}" >"$WORK/$label.proxy$i.out" 2>&1 &
        local pid=$!
        PIDS+=("$pid")
        pids+=("$pid")
        proxies+=("http://$(wait_addr "$WORK/$label.proxy$i.out" "$pid" addr)")
        admins+=("$(wait_addr "$WORK/$label.proxy$i.out" "$pid" admin_addr)")
    done
    local killer=""
    if [ -n "$outage" ]; then
        (
            sleep 8
            kill -9 "$REDIS_PID" 2>/dev/null || true
            sleep 5
            start_redis
            echo "$REDIS_PID" >"$WORK/redis.pid"
        ) &
        killer=$!
    fi
    local rc=0
    "$VENV/bin/python" "$ROOT/bench/proxy_sdk.py" --shape anthropic --label "$label" \
        --proxy "${proxies[@]}" --mock "http://$mock_addr" \
        --jobs 180 --concurrency 24 --max-tokens 1024 --input 1000 3000 \
        --limit 300000 --binding input --capacity-seconds 10 \
        --max-429-share "$max429" --min-used "$minused" || rc=$?
    if [ -n "$killer" ]; then
        wait "$killer" || true
        REDIS_PID="$(cat "$WORK/redis.pid" 2>/dev/null || echo "$REDIS_PID")"
        # One more job per proxy after the restart: each goes back to Redis.
        "$VENV/bin/python" "$ROOT/bench/proxy_sdk.py" --shape anthropic --label "$label-after" \
            --proxy "${proxies[@]}" --mock "http://$mock_addr" \
            --jobs 3 --concurrency 3 --max-tokens 64 --input 100 200 \
            --limit 300000 --binding input --capacity-seconds 10 \
            --max-429-share 1 --min-used 0 >/dev/null || rc=$?
        for i in 0 1 2; do
            if ! kill -0 "${pids[$i]}" 2>/dev/null; then
                echo "FAIL: proxy $((i + 1)) died during the outage" >&2
                cat "$WORK/$label.proxy$((i + 1)).out" >&2
                rc=1
                continue
            fi
            local m
            m="$(admin_curl "http://${admins[$i]}/metrics")"
            local degraded errors
            degraded="$(echo "$m" | awk '$1=="ratewise_store_degraded"{print $2}')"
            errors="$(echo "$m" | awk '$1=="ratewise_store_errors_total"{print $2}')"
            echo "  proxy $((i + 1)): after the restart degraded=$degraded, round trips failed during the outage=$errors"
            if [ "$degraded" != "0" ] || [ "${errors%.*}" -lt 1 ]; then
                echo "FAIL: proxy $((i + 1)) did not see the outage and come back (degraded=$degraded errors=$errors)" >&2
                rc=1
            fi
        done
        grep -h "Redis unavailable\|Redis is back" "$WORK/$label".proxy*.out | sed -E 's/^.*(WARN|INFO) /  /' | sort | uniq -c || true
    fi
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    kill "$mock_pid" 2>/dev/null || true
    return "$rc"
}

# A run in a subshell of its own, its output kept in $WORK/LABEL.log and
# its status in $WORK/LABEL.rc; it stops its own processes on the way out.
run_aside() {
    local label=$1
    shift
    (
        PIDS=()
        trap 'for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done' EXIT
        rc=0
        run "$label" "$@" || rc=$?
        echo "$rc" >"$WORK/$label.rc"
    ) >"$WORK/$label.log" 2>&1 &
}

start_redis
status=0
# The first two side by side: each has its own mock, proxies and state
# directory, the second no Redis, and each waits on its provider's pace
# (a few % of a core). The outage kills Redis, so it runs after them.
run_aside redis yes 0.02 0.9
run_aside alone no 1 0
wait
echo "three proxies sharing one key through Redis:"
cat "$WORK/redis.log"
[ "$(cat "$WORK/redis.rc" 2>/dev/null || echo 1)" = 0 ] || status=1
echo "the same three, each pacing alone (for comparison, not judged):"
cat "$WORK/alone.log"
[ "$(cat "$WORK/alone.rc" 2>/dev/null || echo 1)" = 0 ] \
    || echo "  (not judged: without a shared store each proxy paces on its own)"
echo "with Redis killed 8 s in and restarted empty 5 s later:"
run outage yes 1 0 outage || status=1
exit "$status"
