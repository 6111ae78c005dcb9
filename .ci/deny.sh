#!/usr/bin/env bash
# Supply-chain check: `cargo deny check` against deny.toml (licenses
# allow-listed, RustSec advisories denied, duplicate versions warned,
# crates.io only). Installs cargo-deny from crates.io when missing.
#
# The advisory database is a git clone from GitHub. When it cannot be
# fetched (offline CI, no route to github.com) and no local copy exists,
# the advisories check is skipped *and says so*; licenses, bans and
# sources still run and still fail the build.
#
# Environment:
#   RATEWISE_DENY_FETCH_TIMEOUT  seconds allowed for fetching the DB (60)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo deny --version >/dev/null 2>&1; then
    echo "deny: cargo-deny missing, installing from crates.io"
    cargo install cargo-deny --locked
fi
echo "deny: $(cargo deny --version)"

db_root="${CARGO_HOME:-$HOME/.cargo}/advisory-dbs"
fetch_log=$(mktemp)
trap 'rm -f "$fetch_log"' EXIT

if timeout "${RATEWISE_DENY_FETCH_TIMEOUT:-60}" cargo deny --workspace fetch db >"$fetch_log" 2>&1; then
    echo "deny: advisory database fetched"
    cargo deny --workspace check
elif compgen -G "$db_root/*/crates" >/dev/null; then
    echo "deny: advisory database could not be fetched; using the local copy in $db_root (may be stale)"
    cargo deny --workspace --offline check
else
    reason=$(grep -m1 -o -E "Could not resolve host[^\"]*|unable to access[^\"]*|timed out|Connection refused" "$fetch_log" || true)
    echo "deny: advisories SKIPPED: the RustSec advisory database could not be fetched (${reason:-see below}) and no local copy exists in $db_root"
    [ -n "$reason" ] || tail -n 5 "$fetch_log"
    cargo deny --workspace check licenses bans sources
fi
