# Sourced by every script CI runs that needs something from outside the
# workspace (PyPI for the official SDKs, redis-server): the one way such a
# script may decline to run. DESIGN principle 16: a skip is not a pass.
#
#   skip_check "what did not run" "why"
#
# Under CI=true it prints "FAIL: …" and exits 1: CI either runs the check or
# fails. Elsewhere (a developer's machine) it prints "SKIPPED: …" on a line
# of its own, naming what did not run, and exits 0.
skip_check() {
    if [ "${CI:-}" = true ]; then
        echo "FAIL: $1 did not run: $2 (CI=true, where a skip is not a pass)" >&2
        exit 1
    fi
    echo "SKIPPED: $1 did not run: $2"
    exit 0
}
