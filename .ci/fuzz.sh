#!/usr/bin/env bash
# Fuzz smoke: build every cargo-fuzz target once, then run each for a
# bounded time and fail on any crash (a panic, a broken property, a
# sanitizer report, a timeout or an out-of-memory).
#
# Needs a nightly toolchain (libFuzzer instrumentation); installs
# cargo-fuzz from crates.io when missing. A toolchain cannot be fetched on
# these machines, so without nightly (or cargo-fuzz) it says so on a line
# of its own and runs the same target bodies on stable instead, through
# `cargo test -p ratewise-fuzz-targets` over every seed, regression and
# local corpus file: that run fails like any test. It never exits 0 having
# run neither (DESIGN principle 16).
#
# Usage: bash .ci/fuzz.sh [all|build|run]   (default all)
#   build  install cargo-fuzz when missing and build every target (CI runs
#          this in the background while wall-clock-bound steps run)
#   run    fuzz each target (building first if the build phase did not)
#
# Environment:
#   RATEWISE_FUZZ_SECONDS  seconds per target (default 60; CI sets 10)
#   RATEWISE_FUZZ_TARGETS  space-separated subset of targets (default: all)
#   RATEWISE_FUZZ_NICE     niceness of the fuzzing processes (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."

phase="${1:-all}"
case "$phase" in all|build|run) ;; *) echo "usage: $0 [all|build|run]" >&2; exit 2 ;; esac
secs="${RATEWISE_FUZZ_SECONDS:-60}"
niceness="${RATEWISE_FUZZ_NICE:-10}"

skip() {
    if [ "$phase" = build ]; then
        echo "fuzz build: nothing to build ($*); the run phase says what it runs instead"
        exit 0
    fi
    echo "fuzz smoke: libFuzzer NOT run: $*"
    echo "fuzz smoke: running the same target bodies as stable tests instead (cargo test -p ratewise-fuzz-targets)"
    cargo test -p ratewise-fuzz-targets 2>&1
    echo "fuzz smoke passed on stable: the target bodies over every seed and regression (no coverage-guided run)"
    exit 0
}

command -v rustup >/dev/null 2>&1 || skip "rustup not found, so no nightly toolchain can be selected"
nightly=$(rustup run nightly rustc --version 2>/dev/null) ||
    skip "no nightly toolchain installed (cargo-fuzz needs one: rustup toolchain install nightly)"
echo "fuzz: $nightly"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: cargo-fuzz missing, installing from crates.io"
    cargo install cargo-fuzz --locked || skip "cargo-fuzz could not be installed from crates.io"
fi
echo "fuzz: $(cargo fuzz --version)"

host=$(rustup run nightly rustc -vV | sed -n 's/^host: //p')
bin_dir="fuzz/target/$host/release"
if [ -n "${RATEWISE_FUZZ_TARGETS:-}" ]; then
    read -r -a targets <<<"$RATEWISE_FUZZ_TARGETS"
else
    targets=()
    for f in fuzz/fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi

# One build for all targets: optimised, with debug assertions and overflow
# checks on (-a) so arithmetic slips are crashes too.
build_start=$SECONDS
cargo +nightly fuzz build -O -a
echo "fuzz: build took $((SECONDS - build_start)) s"
[ "$phase" = build ] && exit 0

failed=()
summary=()
for t in "${targets[@]}"; do
    corpus="fuzz/corpus/$t"
    artifacts="fuzz/artifacts/$t"
    mkdir -p "$corpus" "$artifacts"
    # The committed seeds and crash regressions start every run; the
    # scratch corpus (gitignored) keeps what earlier local runs found.
    for src in "fuzz/seeds/$t" "fuzz/regressions/$t"; do
        if [ -d "$src" ]; then cp -n "$src"/* "$corpus"/ 2>/dev/null || true; fi
    done
    log="fuzz/artifacts/$t.log"
    echo "fuzz: $t for ${secs} s"
    set +e
    nice -n "$niceness" "$bin_dir/$t" "$corpus" \
        -max_total_time="$secs" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$artifacts/" >"$log" 2>&1
    rc=$?
    set -e
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    summary+=("$(printf '%-18s rc=%-3s execs=%-10s exec/s=%s' "$t" "$rc" "${runs:-?}" "${rate:-?}")")
    if [ "$rc" -ne 0 ]; then
        failed+=("$t")
        echo "fuzz: $t FAILED (exit $rc); log $log, inputs in $artifacts/:"
        grep -a -m5 -E "panicked at|^SUMMARY|Test unit written|ERROR: libFuzzer" "$log" || tail -n 20 "$log"
    fi
done

echo "fuzz: summary (${secs} s per target)"
printf '  %s\n' "${summary[@]}"
if [ "${#failed[@]}" -ne 0 ]; then
    echo "fuzz smoke FAILED: ${failed[*]}"
    echo "Reproduce: cargo +nightly fuzz run -O -a <target> fuzz/artifacts/<target>/<crash-file>"
    exit 1
fi
echo "fuzz smoke passed: ${#targets[@]} targets, no crashes"
