#!/usr/bin/env bash
# The official Python SDKs (retries off) through `ratewise proxy` against
# the mock provider as a provider we did not write would behave: buckets
# holding 10 s of refill, JSON bodies framed with `Content-Length`, latency,
# and (OpenAI shape) rejected requests that still count and a TPM charged
# from `max_tokens`. 150 jobs, 16 at a time, per shape; and an Anthropic
# tier-1 key (`tier1`: 80 jobs at 16, the SDK's default timeout).
#
#   bash bench/proxy_sdk.sh            # every shape
#   bash bench/proxy_sdk.sh anthropic  # one (anthropic, openai, tier1)
#
# Fails (exit 1) when a job is not done, more than 2 % of the sends were
# answered 429, or less than 0.9 of the binding limit was used (tier1:
# 1 % and 0.8). When PyPI
# cannot be reached (the SDKs come from there) it fails under CI=true and
# elsewhere prints "SKIPPED: <what>: <why>" and exits 0. RATEWISE_CONFORMANCE_VENV overrides
# the virtual environment (shared with tests/conformance).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RATEWISE_CONFORMANCE_VENV:-$ROOT/target/conformance-venv}"
PYTHON="${PYTHON:-python3}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
if [ $# -gt 0 ]; then SHAPES=("$@"); else SHAPES=(anthropic openai tier1); fi

CHECK="bench/proxy_sdk.sh"
. "$ROOT/tests/conformance/venv.sh"
. "$ROOT/bench/lib.sh"

(cd "$ROOT" && cargo build --quiet -p ratewise-mock -p ratewise-cli)
MOCK_BIN="$TARGET/debug/ratewise-mock"
PROXY_BIN="$TARGET/debug/ratewise"

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

run_shape() {
    local shape=$1 config limit binding max_tokens input_lo input_hi sdk=$1
    local jobs=150 max429=0.02 minused=0.9
    case "$shape" in
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
        *) echo "unknown shape $shape" >&2; return 2 ;;
    esac
    echo "$config" >"$WORK/$shape.json"
    "$MOCK_BIN" --config "$WORK/$shape.json" --addr 127.0.0.1:0 >"$WORK/$shape.mock.out" 2>&1 &
    local mock_pid=$!
    PIDS+=("$mock_pid")
    local mock_addr
    mock_addr="$(wait_addr "$WORK/$shape.mock.out" "$mock_pid")"
    "$PROXY_BIN" proxy --listen 127.0.0.1:0 --admin 127.0.0.1:0 \
        --upstream "http://$mock_addr" >"$WORK/$shape.proxy.out" 2>&1 &
    local proxy_pid=$!
    PIDS+=("$proxy_pid")
    local proxy_addr
    proxy_addr="$(wait_addr "$WORK/$shape.proxy.out" "$proxy_pid")"
    local rc=0
    "$VENV/bin/python" "$ROOT/bench/proxy_sdk.py" --shape "$sdk" --label "$shape" \
        --proxy "http://$proxy_addr" --mock "http://$mock_addr" \
        --jobs "$jobs" --concurrency 16 --max-tokens "$max_tokens" --input "$input_lo" "$input_hi" \
        --limit "$limit" --binding "$binding" --capacity-seconds 10 \
        --max-429-share "$max429" --min-used "$minused" || rc=$?
    kill "$proxy_pid" "$mock_pid" 2>/dev/null || true
    return "$rc"
}

status=0
for shape in "${SHAPES[@]}"; do
    run_shape "$shape" || status=1
done
exit "$status"
