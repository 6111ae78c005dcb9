#!/usr/bin/env bash
# The official Python SDKs (retries off) through `ratewise proxy` against
# the mock provider as a provider we did not write would behave: buckets
# holding 10 s of refill, JSON bodies framed with `Content-Length`, latency,
# and (OpenAI shape) rejected requests that still count and a TPM charged
# from `max_tokens`. 150 jobs, 16 at a time, per shape; and an Anthropic
# tier-1 key (`tier1`: 80 jobs at 16, the SDK's default timeout).
#
#   bash bench/proxy_sdk.sh            # anthropic openai tier1 tight, the silent shapes, gemini and pool (CI)
#   bash bench/proxy_sdk.sh all        # every shape below
#   bash bench/proxy_sdk.sh anthropic  # the shapes named
#   RATEWISE_BENCH_PARALLEL=9 bash bench/proxy_sdk.sh  # up to 9 shapes at once
#
# Each shape waits on its provider's pace (one takes about 8 % of a core),
# so CI runs them side by side (RATEWISE_BENCH_PARALLEL): each has its own
# mock, proxies and state directory, and its output is printed whole, in
# order, when all are done. Alone is the default, for clean figures.
#
# Shapes:
#   anthropic   RPM 600, ITPM 300k, OTPM 60k (a user's run at 5x), binding
#               input; <= 2 % answered 429, >= 0.9 of the limit used.
#   openai      RPM 500, TPM 200k from max_tokens, rejected requests count;
#               <= 2 %, >= 0.9.
#   tier1       Anthropic tier 1 (RPM 50, ITPM 40k, OTPM 8k), 80 jobs;
#               <= 1 %, >= 0.8.
#   The "tight" Anthropic key of issue #24: RPM 120, ITPM 60k, OTPM 12k,
#   10 s buckets (a bucket holds 2 000 output tokens, under two
#   max_tokens of 1 024, which the mock charges up front), outputs of
#   50-400 tokens, inputs of 200-1 500, 150 jobs at 16, the token
#   `*-remaining` headers rounded to the nearest thousand as Anthropic
#   documents (the mock's default). Real time, not scaled: running the
#   limits at 5x (as `anthropic` does) would make a bucket hold ten
#   max_tokens and the shape no longer tight; one run takes about three
#   minutes. Binding: output tokens. Each fails unless every job is done,
#   <= 1.02 sends per job (counted at the mock) and >= 0.9 of the output
#   limit is used, and unless at most the share of 429s given is:
#   tight             one proxy, plain; <= 1 %.
#   tight-stream      the SDK streams (stream=True, read to the end); <= 1 %.
#   tight-biased      the mock's token remaining 400 high before rounding
#                     (bias.remaining_tokens_high); <= 3 %.
#   tight-redis       three proxies sharing the key through one
#                     redis-server, callers spread over them in turn; <= 2 %.
#   tight-redis-biased  the same with remaining 400 high; <= 3 %.
#   tight-disconnect  24 callers whose own timeout (1.5 s) is shorter than
#                     the mock takes to answer (a 4 s stall; ratewise told
#                     it may wait 120 s) give up mid-request, queued or
#                     sent; then 60 normal jobs: all 60 done;
#                     <= 1 %; sends count all 84 callers; the share of the
#                     limit is judged on the later 60 (the run's claim:
#                     the callers who left cost them nothing), the whole
#                     run's is printed beside it.
#   Silent providers (issue #35: no rate-limit headers at all, only 429s;
#   the mock's "silent" mode), each failing unless every job is done,
#   <= 3 % of sends are answered 429 and >= 0.85 of the binding limit is
#   used:
#   silent-anthropic  the anthropic shape, 429s with retry-after only.
#   silent-openai     the openai shape, the wait only in the message
#                     ("Please try again in 1.146s").
#   gemini            the official google-genai SDK (retries off) on
#                     Gemini's native path (`--provider gemini`): RPM 600
#                     and input TPM 300k per model, no rate-limit headers,
#                     429s as google.rpc.Status with QuotaFailure and
#                     RetryInfo (issue #36); then 5 calls on another key to
#                     a model its tier lacks ("limit: 0"): one send, the key
#                     stopped, nothing more sent.
#   redis-down        three proxies whose Redis is down from the start
#                     (a closed port), on the openai shape with its headers:
#                     each must learn its share from its own 429s instead of
#                     pacing at a fixed half (1.5x the limit for three).
#   pool        issue #40: two mock providers with the same limits (the
#               anthropic shape's: RPM 600, ITPM 300k, OTPM 60k, 10 s
#               buckets), one proxy with a [[pools]] of both (no
#               --upstream; the SDK's key is the pool's caller_key, each
#               member's own key read from the environment), 300 jobs at
#               16; every job done, <= 1 % of sends answered 429, >= 0.9
#               of the sum of the two limits used; each member's sends
#               and share printed.
#   The redis shapes need redis-server: without it they fail under CI=true
#   and are skipped ("SKIPPED: ...") elsewhere.
#
# Fails (exit 1), naming the shape and what missed, when a threshold is
# missed; a tight shape that misses prints what each proxy's /status
# (capacities, margins, surprises, advice per bucket) and /metrics show.
# RATEWISE_BENCH_KEEP=DIR keeps every proxy's /status and /metrics there.
# When PyPI
# cannot be reached (the SDKs come from there) it fails under CI=true and
# elsewhere prints "SKIPPED: <what>: <why>" and exits 0. RATEWISE_CONFORMANCE_VENV overrides
# the virtual environment (shared with tests/conformance).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RATEWISE_CONFORMANCE_VENV:-$ROOT/target/conformance-venv}"
PYTHON="${PYTHON:-python3}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
ALL=(anthropic openai tier1 tight silent-anthropic silent-openai redis-down gemini pool tight-stream tight-biased tight-redis tight-redis-biased tight-disconnect)
if [ $# -eq 0 ]; then
    SHAPES=(anthropic openai tier1 tight silent-anthropic silent-openai redis-down gemini pool)
elif [ "$*" = all ]; then
    SHAPES=("${ALL[@]}")
else
    SHAPES=("$@")
fi

CHECK="bench/proxy_sdk.sh"
. "$ROOT/tests/conformance/venv.sh"
. "$ROOT/bench/lib.sh"

# RATEWISE_BINS_BUILT: .ci/run built these binaries with the test suite.
[ -n "${RATEWISE_BINS_BUILT:-}" ] || (cd "$ROOT" && cargo build --quiet -p ratewise-mock -p ratewise-cli)
MOCK_BIN="$TARGET/debug/ratewise-mock"
PROXY_BIN="$TARGET/debug/ratewise"

WORK="$(mktemp -d)"
PIDS=()
REDIS_PID=""
# shellcheck disable=SC2329  # run by the EXIT trap
cleanup() {
    for p in "${PIDS[@]:-}" "$REDIS_PID"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

# One redis-server for the redis shapes (as bench/redis_procs.sh), started
# on first use; each shape keeps its keys under its own prefix.
REDIS_URL=""
start_redis() {
    [ -n "$REDIS_URL" ] && return 0
    local port
    port="$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        >"$WORK/redis.out" 2>&1 &
    REDIS_PID=$!
    disown "$REDIS_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do
        if (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null; then
            REDIS_URL="redis://127.0.0.1:$port/"
            return 0
        fi
        sleep 0.05
    done
    echo "FAIL: redis-server did not start" >&2
    cat "$WORK/redis.out" >&2
    return 1
}

# What proxy admin listener $2 shows after shape $1 (its number $3):
# /status per bucket (levels, capacities, margins, surprises, advice) and
# the /metrics margin and surprise lines.
show_admin() {
    local shape=$1 admin=$2 n=$3 status metrics
    status="$(admin_curl "http://$admin/status" || echo '{}')"
    metrics="$(admin_curl "http://$admin/metrics" || true)"
    if [ -n "${RATEWISE_BENCH_KEEP:-}" ]; then
        mkdir -p "$RATEWISE_BENCH_KEEP"
        echo "$status" >"$RATEWISE_BENCH_KEEP/$shape.proxy$n.status.json"
        echo "$metrics" >"$RATEWISE_BENCH_KEEP/$shape.proxy$n.metrics.txt"
    fi
    [ "${4:-}" = show ] || return 0
    echo "  proxy $n /status:"
    STATUS="$status" "$PYTHON" - <<'PY'
import json, os
s = json.loads(os.environ["STATUS"] or "{}")
for k in s.get("keys", []):
    for c in k.get("classes", []):
        print(f"    key ...{k.get('last_four')} class {c.get('class')}:")
        for f in ("limits", "levels", "capacities", "margins", "surprises"):
            print(f"      {f}: {json.dumps(c.get(f))}")
        print(f"      advice: {json.dumps(c.get('advice'))}")
print(f"    reservations_outstanding: {s.get('reservations_outstanding')}, store: {json.dumps(s.get('store'))}")
PY
    echo "  proxy $n /metrics:"
    echo "$metrics" | grep -E '^ratewise_bucket_(margin|surprises_total)' | sed 's/^/    /' || true
}

run_shape() {
    local shape=$1 config limit binding max_tokens input_lo input_hi sdk=$1
    local jobs=150 max429=0.02 minused=0.9 proxies=1 tight=no pyargs=() silent="" dead_redis=no
    local provider_arg=() pool=no
    case "$shape" in
        pool) sdk=anthropic; pool=yes; jobs=300; max429=0.01; minused=0.9 ;;
        silent-anthropic) silent=retry_after; sdk=anthropic; max429=0.03; minused=0.85 ;;
        silent-openai) silent=message; sdk=openai; max429=0.03; minused=0.85 ;;
        redis-down) sdk=openai; max429=0.03; minused=0.85; proxies=3; dead_redis=yes ;;
        gemini) max429=0.03; minused=0.85; provider_arg=(--provider gemini)
            pyargs+=(--zero-model gemini-zero --zero-jobs 5) ;;
    esac
    case "$sdk" in
        anthropic)
            # Anthropic-like: RPM 600, ITPM 300k, OTPM 60k (the user's run
            # at 5x, so 150 jobs take about a minute), 10 s buckets.
            config='{
              "seconds_per_minute": 60,
              "anthropic_limits": {"requests_per_minute": 600, "input_tokens_per_minute": 300000, "output_tokens_per_minute": 60000},
              "capacity_seconds": 10,
              "framing": "content_length",
              "output_tokens": {"min": 100, "max": 400},
              "latency": {"first_byte_ms": 150, "per_output_token_ms": 1.0}
            }'
            limit=300000; binding=input; max_tokens=1024; input_lo=1000; input_hi=3000 ;;
        openai)
            # OpenAI-like: RPM 500, TPM 200k charged from max_tokens at
            # admission, rejected requests count, 10 s buckets.
            config='{
              "seconds_per_minute": 60,
              "openai_limits": {"requests_per_minute": 500, "tokens_per_minute": 200000},
              "capacity_seconds": 10,
              "count_rejected": true,
              "framing": "content_length",
              "output_tokens": {"min": 100, "max": 400},
              "latency": {"first_byte_ms": 150, "per_output_token_ms": 1.0}
            }'
            limit=200000; binding=tokens; max_tokens=512; input_lo=500; input_hi=1500 ;;
        gemini)
            # Gemini-like: RPM 600 and input TPM 300k per model, 10 s
            # buckets, no rate-limit headers (Gemini sends none); the
            # "gemini-zero" model has a quota of 0 on this tier.
            config='{
              "seconds_per_minute": 60,
              "gemini_limits": {"requests_per_minute": 600, "input_tokens_per_minute": 300000},
              "gemini": {"limit_zero_models": ["gemini-zero"]},
              "capacity_seconds": 10,
              "framing": "content_length",
              "output_tokens": {"min": 100, "max": 400},
              "latency": {"first_byte_ms": 150, "per_output_token_ms": 1.0}
            }'
            limit=300000; binding=input; max_tokens=1024; input_lo=1000; input_hi=3000 ;;
        tier1)
            # The most common key there is: Anthropic tier 1 (RPM 50, ITPM
            # 40k, OTPM 8k), 10 s buckets, max_tokens 1024, outputs of
            # 50-400 tokens, 80 jobs at 16 on a cold key, the SDK's default
            # 10-minute timeout. Every job must be done (none turned away
            # that could have waited), <= 1 % answered 429, >= 0.8 of the
            # binding (output) limit used.
            config='{
              "seconds_per_minute": 60,
              "anthropic_limits": {"requests_per_minute": 50, "input_tokens_per_minute": 40000, "output_tokens_per_minute": 8000},
              "capacity_seconds": 10,
              "framing": "content_length",
              "output_tokens": {"min": 50, "max": 400},
              "latency": {"first_byte_ms": 150, "per_output_token_ms": 1.0}
            }'
            sdk=anthropic; jobs=80; max429=0.01; minused=0.8
            limit=8000; binding=output; max_tokens=1024; input_lo=200; input_hi=1500 ;;
        tight*)
            # Issue #24's tight key, in real time (see the top of the file).
            local bias=""
            case "$shape" in
                tight|tight-stream|tight-redis|tight-disconnect) max429=0.01 ;;
                tight-biased|tight-redis-biased)
                    bias=', "bias": {"remaining_tokens_high": 400}'; max429=0.03 ;;
                *) echo "unknown shape $shape" >&2; return 2 ;;
            esac
            case "$shape" in
                tight-redis) max429=0.02; proxies=3 ;;
                tight-redis-biased) proxies=3 ;;
                tight-stream) pyargs+=(--stream) ;;
                tight-disconnect)
                    jobs=60
                    pyargs+=(--impatient 24 --impatient-timeout 1.5 --impatient-stall-ms 4000) ;;
            esac
            config='{
              "seconds_per_minute": 60,
              "anthropic_limits": {"requests_per_minute": 120, "input_tokens_per_minute": 60000, "output_tokens_per_minute": 12000},
              "capacity_seconds": 10,
              "remaining_rounding": "documented",
              "framing": "content_length",
              "output_tokens": {"min": 50, "max": 400},
              "latency": {"first_byte_ms": 150, "per_output_token_ms": 1.0}'"$bias"'
            }'
            sdk=anthropic; minused=0.9; tight=yes
            pyargs+=(--max-sends-per-job 1.02)
            limit=12000; binding=output; max_tokens=1024; input_lo=200; input_hi=1500 ;;
        *) echo "unknown shape $shape" >&2; return 2 ;;
    esac
    if [ -n "$silent" ]; then
        # No rate-limit headers on any answer; the wait in retry-after or
        # only in the 429's message.
        config="${config%\}*}, \"silent\": \"$silent\"}"
    fi
    if [ "$dead_redis" = yes ]; then
        # A port nothing listens on: the proxies start degraded and stay so.
        local dead_port
        dead_port="$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
        REDIS_URL_DEAD="redis://127.0.0.1:$dead_port/"
    elif [ "$proxies" -gt 1 ]; then
        if ! command -v redis-server >/dev/null; then
            (skip_check "$CHECK $shape" "redis-server not found") || return 1
            return 0
        fi
        start_redis || return 1
    fi
    # Its own state directory (the admin token), so shapes run side by
    # side do not race to write one.
    local BENCH_STATE="$WORK/state-$shape"
    echo "$config" >"$WORK/$shape.json"
    "$MOCK_BIN" --config "$WORK/$shape.json" --addr 127.0.0.1:0 >"$WORK/$shape.mock.out" 2>&1 &
    local mock_pid=$!
    PIDS+=("$mock_pid")
    local mock_addr
    mock_addr="$(wait_addr "$WORK/$shape.mock.out" "$mock_pid")"
    local mocks=("http://$mock_addr") pool_env=()
    if [ "$pool" = yes ]; then
        # A second provider with the same limits, and a pool of both: the
        # SDK's key selects it; each member has its own key.
        "$MOCK_BIN" --config "$WORK/$shape.json" --addr 127.0.0.1:0 >"$WORK/$shape.mockb.out" 2>&1 &
        local mockb_pid=$!
        PIDS+=("$mockb_pid")
        local mockb_addr
        mockb_addr="$(wait_addr "$WORK/$shape.mockb.out" "$mockb_pid")"
        mocks+=("http://$mockb_addr")
        cat >"$WORK/$shape.toml" <<TOML
[[pools]]
name = "bench"
caller_key = "sk-ant-bench-key"
provider = "anthropic"
[[pools.members]]
upstream = "http://$mock_addr"
key_env = "RATEWISE_BENCH_POOL_KEY_A"
[[pools.members]]
upstream = "http://$mockb_addr"
key_env = "RATEWISE_BENCH_POOL_KEY_B"
TOML
        pool_env=(RATEWISE_BENCH_POOL_KEY_A=sk-ant-bench-member-a RATEWISE_BENCH_POOL_KEY_B=sk-ant-bench-member-b)
    fi
    local urls=() admins=() pids=() i
    for i in $(seq 1 "$proxies"); do
        local args=(proxy --listen 127.0.0.1:0 --admin 127.0.0.1:0 --upstream "http://$mock_addr" "${provider_arg[@]}")
        if [ "$pool" = yes ]; then
            # No upstream: every caller is routed by its key.
            args=(proxy --listen 127.0.0.1:0 --admin 127.0.0.1:0 --config "$WORK/$shape.toml")
        elif [ "$dead_redis" = yes ]; then
            printf '[redis]\nurl = "%s"\nprefix = "bench-%s"\n' "$REDIS_URL_DEAD" "$shape" >"$WORK/$shape.toml"
            args+=(--config "$WORK/$shape.toml")
        elif [ "$proxies" -gt 1 ]; then
            printf '[redis]\nurl = "%s"\nprefix = "bench-%s"\n' "$REDIS_URL" "$shape" >"$WORK/$shape.toml"
            args+=(--config "$WORK/$shape.toml")
        fi
        env "${pool_env[@]}" XDG_STATE_HOME="$BENCH_STATE" "$PROXY_BIN" "${args[@]}" >"$WORK/$shape.proxy$i.out" 2>&1 &
        local pid=$!
        PIDS+=("$pid")
        pids+=("$pid")
        urls+=("http://$(wait_addr "$WORK/$shape.proxy$i.out" "$pid" addr)")
        admins+=("$(wait_addr "$WORK/$shape.proxy$i.out" "$pid" admin_addr)")
    done
    local rc=0
    "$VENV/bin/python" "$ROOT/bench/proxy_sdk.py" --shape "$sdk" --label "$shape" \
        --proxy "${urls[@]}" --mock "${mocks[@]}" \
        --jobs "$jobs" --concurrency 16 --max-tokens "$max_tokens" --input "$input_lo" "$input_hi" \
        --limit "$limit" --binding "$binding" --capacity-seconds 10 \
        --max-429-share "$max429" --min-used "$minused" "${pyargs[@]}" || rc=$?
    if [ "$pool" = yes ]; then
        # Each member as the proxy's /status shows it.
        local pstatus
        pstatus="$(admin_curl "http://${admins[0]}/status" || echo '{}')"
        if [ -n "${RATEWISE_BENCH_KEEP:-}" ]; then
            mkdir -p "$RATEWISE_BENCH_KEEP"
            echo "$pstatus" >"$RATEWISE_BENCH_KEEP/$shape.proxy1.status.json"
            admin_curl "http://${admins[0]}/metrics" >"$RATEWISE_BENCH_KEEP/$shape.proxy1.metrics.txt" || true
        fi
        STATUS="$pstatus" "$PYTHON" - <<'PY'
import json, os
s = json.loads(os.environ["STATUS"] or "{}")
for p in s.get("pools", []):
    for m in p.get("members", []):
        print(f"  pool {p.get('name')} member {m.get('upstream')} {m.get('key')}: weight {m.get('weight')}, "
              f"{m.get('sends')} sends, share {m.get('share', 0):.3f}, stopped {json.dumps(m.get('stopped'))}")
PY
    fi
    if [ "$tight" = yes ] || [ "$proxies" -gt 1 ] || [ -n "$silent" ] || [ "$sdk" = gemini ]; then
        local show=""
        [ "$rc" -ne 0 ] && show=show
        for i in $(seq 1 "$proxies"); do
            show_admin "$shape" "${admins[$((i - 1))]}" "$i" "$show"
        done
    fi
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    kill "$mock_pid" 2>/dev/null || true
    [ "$pool" = yes ] && { kill "$mockb_pid" 2>/dev/null || true; }
    if [ "$sdk" = gemini ] && [ -z "${RATEWISE_BENCH_NO_SDK_LOOP:-}" ]; then
        # Side by side: the same jobs from the SDK with its own retry loop
        # (its defaults), straight at a fresh provider of the same shape,
        # without ratewise. Printed, never failing the run.
        "$MOCK_BIN" --config "$WORK/$shape.json" --addr 127.0.0.1:0 >"$WORK/$shape.mock2.out" 2>&1 &
        local mock2_pid=$!
        PIDS+=("$mock2_pid")
        local mock2_addr
        mock2_addr="$(wait_addr "$WORK/$shape.mock2.out" "$mock2_pid")"
        echo "  the same jobs, the SDK's own retries, no ratewise:"
        "$VENV/bin/python" "$ROOT/bench/proxy_sdk.py" --shape gemini --label "$shape (SDK's retries, direct)" \
            --proxy "http://$mock2_addr" --mock "http://$mock2_addr" --sdk-retries \
            --jobs "$jobs" --concurrency 16 --max-tokens "$max_tokens" --input "$input_lo" "$input_hi" \
            --limit "$limit" --binding "$binding" --capacity-seconds 10 \
            --max-429-share 1 --min-used 0 2>&1 | sed 's/^/  /' || true
        kill "$mock2_pid" 2>/dev/null || true
    fi
    return "$rc"
}

status=0
PARALLEL="${RATEWISE_BENCH_PARALLEL:-1}"
if [ "$PARALLEL" -le 1 ]; then
    for shape in "${SHAPES[@]}"; do
        run_shape "$shape" || status=1
    done
    exit "$status"
fi

# Side by side: one redis-server for every shape that shares one (started
# here, so the subshells do not each start their own), each shape in a
# subshell that stops its own processes, its output kept and printed in
# order with its exit status.
for shape in "${SHAPES[@]}"; do
    case "$shape" in
        tight-redis*)
            if command -v redis-server >/dev/null; then start_redis || exit 1; fi ;;
    esac
done
echo "running ${#SHAPES[@]} shapes, up to $PARALLEL at once (output printed as each ends, in order)"
running=0
for shape in "${SHAPES[@]}"; do
    if [ "$running" -ge "$PARALLEL" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    (
        PIDS=()
        REDIS_PID=""
        trap 'for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done' EXIT
        rc=0
        run_shape "$shape" || rc=$?
        echo "$rc" >"$WORK/$shape.rc"
    ) >"$WORK/$shape.log" 2>&1 &
    running=$((running + 1))
done
wait || true
for shape in "${SHAPES[@]}"; do
    echo "--- $shape"
    cat "$WORK/$shape.log"
    [ "$(cat "$WORK/$shape.rc" 2>/dev/null || echo 1)" = 0 ] || status=1
done
exit "$status"
