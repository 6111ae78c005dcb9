#!/usr/bin/env bash
# `cargo package` of every crate meant for crates.io (every workspace
# member whose Cargo.toml does not say `publish = false`), as `cargo
# publish` would make it, before anything is published:
#
# 1. each crate's crates.io metadata: description, license, rust-version,
#    a readme that exists, keywords (at most 5, each at most 20 characters
#    of [A-Za-z0-9_-] starting with a letter), categories from crates.io's
#    list, no placeholder URL;
# 2. each crate's file list (`cargo package --list`): its README is in it,
#    no file over 1 MiB, nothing from fuzz corpora or build output (a
#    test's own data, such as ratewise-core's tests/fixtures, stays);
# 3. all of them packaged together (`cargo package -p A -p B ...`): cargo
#    resolves each crate's dependencies on the others from the tarballs it
#    has just made (a local registry in front of crates.io), so crates
#    that depend on unpublished ones are checked too. By default each
#    tarball is also unpacked and built, as `cargo publish` verifies it;
#    `--no-verify` skips that build.
#
# Offline: the index entries come from the cargo cache that building the
# workspace filled (run it after a build; CI runs it after the test
# suite's). Usage: bash .ci/package.sh [--no-verify]
set -euo pipefail
cd "$(dirname "$0")/.."
verify=()
case "${1:-}" in
    "") ;;
    --no-verify) verify=(--no-verify) ;;
    *) echo "usage: $0 [--no-verify]" >&2; exit 2 ;;
esac

meta=$(mktemp)
trap 'rm -f "$meta"' EXIT
cargo metadata --format-version 1 --no-deps --offline >"$meta"

# 1. Metadata. Prints the publishable crates, one a line.
crates=$(python3 - "$meta" <<'PY'
import json, os, re, sys
m = json.load(open(sys.argv[1]))
# crates.io's category slugs this workspace may use (the whole list:
# https://crates.io/category_slugs); add one here after checking it there.
CATEGORIES = {
    "asynchronous", "command-line-utilities", "network-programming",
    "development-tools::testing", "simulation",
    "web-programming", "web-programming::http-client",
    "web-programming::http-server",
}
bad = []
members = set(m["workspace_members"])
for p in sorted(m["packages"], key=lambda p: p["name"]):
    if p["id"] not in members or p["publish"] == []:
        continue
    name, d = p["name"], os.path.dirname(p["manifest_path"])
    for field in ("description", "license", "rust_version", "readme"):
        if not p.get(field):
            bad.append(f"{name}: no {field.replace('_', '-')}")
    if p.get("readme") and not os.path.isfile(os.path.join(d, p["readme"])):
        bad.append(f"{name}: readme {p['readme']} does not exist")
    kw = p.get("keywords") or []
    if not kw:
        bad.append(f"{name}: no keywords")
    if len(kw) > 5:
        bad.append(f"{name}: {len(kw)} keywords (crates.io takes 5)")
    for k in kw:
        if len(k) > 20 or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", k):
            bad.append(f"{name}: keyword {k!r} (at most 20 of [A-Za-z0-9_-], a letter first)")
    cats = p.get("categories") or []
    if not cats:
        bad.append(f"{name}: no categories")
    if len(cats) > 5:
        bad.append(f"{name}: {len(cats)} categories (crates.io takes 5)")
    for c in cats:
        if c not in CATEGORIES:
            bad.append(f"{name}: category {c!r} is not in this script's list of crates.io slugs")
    for field in ("repository", "homepage", "documentation"):
        url = p.get(field) or ""
        if re.search(r"example\.(invalid|com|org)|localhost|TODO", url):
            bad.append(f"{name}: {field} {url!r} is a placeholder")
    print(name)
for b in bad:
    print("package.sh: " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
)
echo "publishable: $(echo $crates)"

# 2. File lists.
failed=0
for c in $crates; do
    dir=$(python3 -c 'import json,os,sys; m=json.load(open(sys.argv[1])); print(next(os.path.dirname(p["manifest_path"]) for p in m["packages"] if p["name"]==sys.argv[2]))' "$meta" "$c")
    readme=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(next(p["readme"] for p in m["packages"] if p["name"]==sys.argv[2]))' "$meta" "$c")
    files=$(cargo package -p "$c" --list --offline --allow-dirty --no-metadata 2>/dev/null)
    n=$(echo "$files" | wc -l)
    if ! echo "$files" | grep -qxF "$readme"; then
        echo "package.sh: $c: $readme is not in the package"; failed=1
    fi
    # Build output, cargo-fuzz's directories and libFuzzer's inputs (named
    # by their SHA-1), coverage data, archives.
    junk=$(echo "$files" | grep -E '(^|/)(fuzz|target|artifacts)/|(^|/)[0-9a-f]{40}$|\.(profraw|profdata|tar\.gz|zip|crate)$' || true)
    if [ -n "$junk" ]; then
        echo "package.sh: $c: files that are not the crate's:"; echo "$junk" | sed 's/^/  /'; failed=1
    fi
    big=$(cd "$dir" && echo "$files" | grep -vE '^(Cargo\.toml|Cargo\.lock|\.cargo_vcs_info\.json)$' \
        | while read -r f; do [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt 1048576 ] && echo "$f"; done || true)
    if [ -n "$big" ]; then
        echo "package.sh: $c: files over 1 MiB:"; echo "$big" | sed 's/^/  /'; failed=1
    fi
    printf '  %-20s %4d files, %s\n' "$c" "$n" "$(cd "$dir" && echo "$files" | grep -vE '^(Cargo\.toml|Cargo\.lock|\.cargo_vcs_info\.json)$' | xargs du -cb 2>/dev/null | tail -1 | cut -f1) bytes before compression"
done
[ "$failed" = 0 ] || exit 1

# 3. Packaged together (and built, unless --no-verify).
args=()
for c in $crates; do args+=(-p "$c"); done
cargo package --offline --allow-dirty --no-metadata "${verify[@]}" "${args[@]}"
