#!/usr/bin/env bash
# The official anthropic and openai Python SDKs (retries off) through
# `ratewise proxy` against ratewise-mock: success and streams, retries owned
# by the proxy, a spend cap (typed error, zero sends after it), a deadline,
# disconnecting callers, kill -9 and a restart with --journal (an unknown
# outcome traced by the caller's x-ratewise-job; a spend cap's typed error
# and its since kept), an HTTPS upstream behind a test CA, and SIGTERM with
# jobs waiting and in flight (every caller answered, nothing new sent, exit
# code 0).
#
#   tests/conformance/proxy.sh
#
# Exits 0 when every check passes, 1 on any failure. When PyPI cannot be
# reached it fails under CI=true and elsewhere prints "SKIPPED: <what>: <why>"
# and exits 0 (tests/conformance/skip.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/tests/conformance"
VENV="${RATEWISE_CONFORMANCE_VENV:-$ROOT/target/conformance-venv}"
PYTHON="${PYTHON:-python3}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"

CHECK="the official Python SDKs through ratewise proxy"
. "$HERE/venv.sh"
command -v openssl >/dev/null || { echo "FAIL: openssl is needed for the test CA" >&2; exit 1; }

# RATEWISE_BINS_BUILT: .ci/run built these binaries with the test suite.
[ -n "${RATEWISE_BINS_BUILT:-}" ] || (cd "$ROOT" && cargo build --quiet -p ratewise-mock -p ratewise-cli)
MOCK_BIN="$TARGET/debug/ratewise-mock"
RATEWISE="$TARGET/debug/ratewise"

WORK="$(mktemp -d)"
cleanup() {
    for f in "$WORK"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() {
    for _ in $(seq 1 100); do
        "$PYTHON" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=1)" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "FAIL: $1 never answered" >&2
    return 1
}

"$MOCK_BIN" --config "$HERE/mock.json" --addr 127.0.0.1:0 >"$WORK/mock.out" 2>&1 &
echo $! >"$WORK/mock.pid"; disown
for _ in $(seq 1 100); do MOCK="$(head -n1 "$WORK/mock.out" 2>/dev/null || true)"; [ -n "$MOCK" ] && break; sleep 0.1; done
[ -n "$MOCK" ] || { echo "FAIL: no mock address" >&2; exit 1; }

PORT=$(free_port); ADMIN=$(free_port)
cat >"$WORK/start.sh" <<SH
#!/usr/bin/env bash
"$RATEWISE" proxy --listen 127.0.0.1:$PORT --admin 127.0.0.1:$ADMIN \\
    --upstream http://$MOCK --journal "$WORK/journal.jsonl" >>"$WORK/proxy.out" 2>&1 &
echo \$! >"$WORK/proxy.pid"
SH
cat >"$WORK/restart.sh" <<SH
#!/usr/bin/env bash
kill -9 "\$(cat "$WORK/proxy.pid")"
sleep 0.3
bash "$WORK/start.sh"
for _ in \$(seq 1 100); do
    "$PYTHON" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$ADMIN/healthz', timeout=1)" 2>/dev/null && exit 0
    sleep 0.1
done
exit 1
SH
bash "$WORK/start.sh"
wait_http "http://127.0.0.1:$ADMIN/healthz"

# The mock behind TLS, its certificate signed by a throwaway CA.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=ratewise test CA" \
    -keyout "$WORK/ca.key" -out "$WORK/ca.pem" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$WORK/leaf.key" \
    -out "$WORK/leaf.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost\n' >"$WORK/leaf.ext"
openssl x509 -req -in "$WORK/leaf.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial \
    -days 1 -extfile "$WORK/leaf.ext" -out "$WORK/leaf.pem" 2>/dev/null
"$PYTHON" "$HERE/tls_relay.py" "$WORK/leaf.pem" "$WORK/leaf.key" "${MOCK##*:}" >"$WORK/relay.out" 2>&1 &
echo $! >"$WORK/relay.pid"; disown
for _ in $(seq 1 100); do RELAY="$(head -n1 "$WORK/relay.out" 2>/dev/null || true)"; [ -n "$RELAY" ] && break; sleep 0.1; done
TLS_PORT=$(free_port); TLS_ADMIN=$(free_port)
cat >"$WORK/tls.toml" <<TOML
[[upstream]]
url = "https://localhost:$RELAY"
ca_file = "$WORK/ca.pem"
TOML
XDG_STATE_HOME="$WORK/state" "$RATEWISE" proxy --listen 127.0.0.1:$TLS_PORT --admin 127.0.0.1:$TLS_ADMIN \
    --config "$WORK/tls.toml" >"$WORK/tls-proxy.out" 2>&1 &
echo $! >"$WORK/tls-proxy.pid"; disown
wait_http "http://127.0.0.1:$TLS_ADMIN/healthz"

# A third proxy, for SIGTERM: jobs after the first wait for admission; its
# exit code is written down when it exits.
TERM_PORT=$(free_port); TERM_ADMIN=$(free_port)
printf '[limits]\nrequests_per_minute = 20\n' >"$WORK/term.toml"
(
    "$RATEWISE" proxy --listen 127.0.0.1:$TERM_PORT --admin 127.0.0.1:$TERM_ADMIN \
        --upstream "http://$MOCK" --config "$WORK/term.toml" --grace 20 >"$WORK/term-proxy.out" 2>&1 &
    echo $! >"$WORK/term.pid"
    wait $! && echo 0 >"$WORK/term.rc" || echo $? >"$WORK/term.rc"
) &
disown
wait_http "http://127.0.0.1:$TERM_ADMIN/healthz"

rc=0
"$VENV/bin/python" "$HERE/proxy_check.py" --proxy "http://127.0.0.1:$PORT" \
    --admin "http://127.0.0.1:$ADMIN" --mock "http://$MOCK" \
    --admin-token-file "$WORK/journal.jsonl.admin-token" \
    --restart "bash $WORK/restart.sh" --tls-proxy "http://127.0.0.1:$TLS_PORT" \
    --term-proxy "http://127.0.0.1:$TERM_PORT" --term-admin "http://127.0.0.1:$TERM_ADMIN" \
    --term-pid "$WORK/term.pid" --term-rc "$WORK/term.rc" || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "--- proxy log (last 40 lines)"; tail -n 40 "$WORK/proxy.out"
    echo "--- SIGTERM proxy log (last 20 lines)"; tail -n 20 "$WORK/term-proxy.out"
fi
# What each SDK sends as its timeout, and the deadline the proxy derives
# (its own proxy, in front of a recording upstream).
"$VENV/bin/python" "$HERE/sdk_timeouts.py" --ratewise "$RATEWISE" --table || rc=1
exit "$rc"
