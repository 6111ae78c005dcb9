#!/usr/bin/env bash
# A skip is not a pass (DESIGN principle 16): each script that needs the
# official SDKs from PyPI must fail under CI=true when the package index
# cannot be reached, and say why; without CI=true it must skip and say so.
# Runs each with PIP_INDEX_URL pointing nowhere and a fresh virtual
# environment (nothing is built or installed: the scripts stop first).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts=(tests/conformance/run.sh tests/conformance/proxy.sh bench/proxy_sdk.sh bench/redis_procs.sh bench/remember.sh bench/tenants.sh)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bad=0
for s in "${scripts[@]}"; do
    for ci in true false; do
        out="$work/out"
        rc=0
        CI=$ci PIP_INDEX_URL=http://127.0.0.1:9/simple RATEWISE_CONFORMANCE_VENV="$work/venv-$ci" \
            bash "$s" >"$out" 2>&1 </dev/null || rc=$?
        last=$(tail -n1 "$out")
        if [ "$ci" = true ]; then
            want="FAIL: "
            [ "$rc" -ne 0 ] && [[ $last == "$want"*"did not run"* ]] || { echo "skips: $s under CI=true exited $rc: $last"; bad=1; continue; }
        else
            want="SKIPPED: "
            [ "$rc" -eq 0 ] && [[ $last == "$want"*"did not run"* ]] || { echo "skips: $s without CI exited $rc: $last"; bad=1; continue; }
        fi
        echo "skips: $s CI=$ci -> exit $rc: $last"
    done
done
[ "$bad" -eq 0 ] || { echo "skips: FAILED: a script passes without running its check"; exit 1; }
echo "skips: every SDK script fails under CI=true without PyPI and skips loudly elsewhere"
