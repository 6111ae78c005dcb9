#!/usr/bin/env bash
# Conformance of ratewise-mock against the official anthropic, openai and
# google-genai Python SDKs (installed from PyPI into a virtual environment):
# check.py drives the first two, gemini_check.py the Gemini surface.
#
#   tests/conformance/run.sh
#
# Exits 0 when every check passes, 1 on any failure. When PyPI cannot be
# reached it fails under CI=true and elsewhere prints "SKIPPED: <what>: <why>"
# and exits 0 (tests/conformance/skip.sh).
# RATEWISE_CONFORMANCE_VENV overrides the venv location
# (default: target/conformance-venv; reused when present).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/tests/conformance"
VENV="${RATEWISE_CONFORMANCE_VENV:-$ROOT/target/conformance-venv}"
PYTHON="${PYTHON:-python3}"

command -v "$PYTHON" >/dev/null || { echo "FAIL: $PYTHON not found" >&2; exit 1; }

CHECK="mock conformance against the official Python SDKs"
. "$HERE/venv.sh"

# RATEWISE_BINS_BUILT: .ci/run built these binaries with the test suite.
[ -n "${RATEWISE_BINS_BUILT:-}" ] || (cd "$ROOT" && cargo build --quiet -p ratewise-mock)
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/ratewise-mock"

OUT="$(mktemp)"
"$BIN" --config "$HERE/mock.json" --addr 127.0.0.1:0 >"$OUT" 2>&1 &
MOCK_PID=$!
trap 'kill "$MOCK_PID" 2>/dev/null || true; rm -f "$OUT"' EXIT

ADDR=""
for _ in $(seq 1 100); do
    ADDR="$(head -n1 "$OUT" 2>/dev/null || true)"
    [ -n "$ADDR" ] && break
    kill -0 "$MOCK_PID" 2>/dev/null || { echo "FAIL: ratewise-mock exited:" >&2; cat "$OUT" >&2; exit 1; }
    sleep 0.1
done
[ -n "$ADDR" ] || { echo "FAIL: ratewise-mock printed no address" >&2; exit 1; }

status=0
"$VENV/bin/python" "$HERE/check.py" "http://$ADDR" || status=1
"$VENV/bin/python" "$HERE/gemini_check.py" "http://$ADDR" || status=1
exit "$status"
