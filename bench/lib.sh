# shellcheck shell=bash
# Shared by the bench scripts: sourced, not run.

# Prints the first loopback address that appears in file $1 (written by
# process $2); with $3, the one after `$3=` (e.g. admin_addr). Fails when
# the process exits first or nothing appears within 20 s.
wait_addr() {
    local file=$1 pid=$2 key=${3:-} addr=""
    for _ in $(seq 1 200); do
        if [ -n "$key" ]; then
            addr="$(grep -oE "$key=127\.0\.0\.1:[0-9]+" "$file" | head -n1 | cut -d= -f2 || true)"
        else
            addr="$(grep -oE '127\.0\.0\.1:[0-9]+' "$file" | head -n1 || true)"
        fi
        [ -n "$addr" ] && { echo "$addr"; return 0; }
        kill -0 "$pid" 2>/dev/null || { echo "FAIL: process exited:" >&2; cat "$file" >&2; return 1; }
        sleep 0.1
    done
    echo "FAIL: no address printed in $file" >&2
    return 1
}

# The admin API needs the token (`Authorization: Bearer`). The bench
# scripts start their proxies with XDG_STATE_HOME=$WORK/state (or
# $BENCH_STATE), so the first generates it into
# $WORK/state/ratewise/admin-token (mode 0600) and the others read it
# there. admin_curl URL... calls with it.
admin_curl() {
    curl -fsS -H "Authorization: Bearer $(cat "${BENCH_STATE:-$WORK/state}/ratewise/admin-token")" "$@"
}
