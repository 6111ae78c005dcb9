#!/usr/bin/env bash
# `ratewise run` (the durable batch queue) end to end against the mock
# provider: an OpenAI batch file in, every result out. Three parts, each
# printing its figures; all must pass.
#
#   bash bench/run_queue.sh                             # parts 1 2 3 4 (CI)
#   RATEWISE_RUN_BENCH_PARTS="1 3" bash bench/run_queue.sh
#   RATEWISE_BENCH_SKIP_BUILD=1 ...                     # binaries already built
#
# 1. Pacing. 1 000 jobs, inputs of 200-2 000 tokens (seeded), max_tokens
#    1 024, outputs of 50-400 tokens, against an OpenAI-like key: RPM 500,
#    TPM 200k charged input + max_tokens at admission (refunded down to
#    the real output when the answer ends), rejected requests counted,
#    buckets holding 10 s of refill, Content-Length bodies, small latency
#    (50 ms + 0.25 ms per output token, real). ratewise is told no limits:
#    it learns them from the headers. Time runs 6x: a provider minute in
#    10 real seconds, so the run takes about 70 s instead of 7 minutes.
#    Not with the mock's `seconds_per_minute`: `ratewise run` keeps real
#    time and reads `x-ratelimit-limit-*` as per real minute, while a
#    scaled mock's limit headers count provider minutes (only its resets
#    and retry-afters are scaled), so ratewise would pace at a sixth of
#    the rate the mock allows. The same buckets in real time instead:
#    every limit x6 (RPM 3 000, TPM 1.2M) and capacity_seconds 10/6, so a
#    bucket holds what the 10 s bucket of the 500 RPM / 200k TPM key holds
#    (83 requests, 33 333 tokens) and refills 6x as fast; the headers then
#    tell a real-time client the truth. Judged from the mock's records:
#      (a) all 1 000 done (the summary, and one `done` line per job);
#      (b) <= 1 % of sends answered 429;
#      (c) <= 1.02 sends per job;
#      (d) makespan (first send to last answer: the records' arrival
#          `at_ms` plus the mock's latency for that answer) <= 1.15 x the
#          lower bound: over requests and tokens, (what the mock charged -
#          the bucket's capacity) / the rate, the larger. Charged: requests
#          = every send (429s count); tokens = input + output of every
#          success (admission takes input + max_tokens, the end gives back
#          max_tokens - output; 429s take no tokens). A refund that would
#          overflow a full bucket is lost at the mock, which only makes the
#          bound lower than the truth (a bucket is full only when idle).
# 2. Store throughput. 10 000 small jobs (max_tokens 16) against huge
#    limits and no latency: 10 000 / the wall time of the whole
#    `ratewise run` command (import, sends, journal, results) >= 2 000
#    jobs/s.
# 3. Bounded memory. A 1 GiB input (1 024 lines, each ~1 MiB of message
#    content; huge limits, no latency) runs to the end with every job done
#    and the run's peak RSS < 512 MiB: the summary's `peak_rss_kb`, and
#    the same cross-checked from outside (`/usr/bin/time -f %M`; where it
#    is missing, python's getrusage of the child). The input is generated
#    under a `mktemp -d` directory, deleted on exit like everything else.
#
# 4. Price. 1 000 jobs (part 1's inputs, gpt-4o-mini at its list price
#    in the mock: 0.15 / 0.60 USD per million input / output tokens) once
#    with `--via direct` and once with `--via batch` against a fresh mock
#    each; both must do every job, every line names its price basis, and
#    what the mock billed for the batch run is about half the direct run's
#    (both providers document batch work at 50 % of the list price).
#
# All parts use the release build: part 2 measures what a user's run
# does, and the debug build's unoptimised code is the bottleneck there
# (about 500 jobs/s, ratewise's own CPU). On a 2-core machine part 1 takes
# about 70 s, part 2 a few seconds, part 3 well under a minute (plus 10 s
# writing the input). RATEWISE_RUN_BENCH_SPEED=1 runs part 1 in real time
# with the key's own limits (about 7 minutes). Each part prints the run's
# CPU time and the mock's, to tell where the time went. Fails (exit 1),
# naming the part and what missed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
PARTS="${RATEWISE_RUN_BENCH_PARTS:-1 2 3 4}"
. "$ROOT/bench/lib.sh"

if [ "${RATEWISE_BENCH_SKIP_BUILD:-}" != 1 ]; then
    (cd "$ROOT" && cargo build --quiet --release -p ratewise-mock -p ratewise-cli)
fi
MOCK_BIN="$TARGET/release/ratewise-mock"
RATEWISE_BIN="$TARGET/release/ratewise"

WORK="$(mktemp -d)"
MOCK_PID=""
# shellcheck disable=SC2329  # run by the EXIT trap
cleanup() {
    if [ -n "$MOCK_PID" ]; then kill "$MOCK_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

FAILS=()
# Extra `ratewise run` arguments (part 4: --via batch).
RUN_EXTRA=()
fail() {
    echo "  FAIL: $*"
    FAILS+=("$*")
}

# Starts the mock with the JSON config $2 (label $1); sets MOCK_ADDR.
start_mock() {
    echo "$2" >"$WORK/$1.mock.json"
    "$MOCK_BIN" --config "$WORK/$1.mock.json" --addr 127.0.0.1:0 >"$WORK/$1.mock.out" 2>&1 &
    MOCK_PID=$!
    MOCK_ADDR="$(wait_addr "$WORK/$1.mock.out" "$MOCK_PID")"
}

stop_mock() {
    [ -n "$MOCK_PID" ] || return 0
    kill "$MOCK_PID" 2>/dev/null || true
    wait "$MOCK_PID" 2>/dev/null || true
    MOCK_PID=""
}

# `ratewise run` on input $2 (label $1) against the mock, at most $3
# seconds. Leaves $WORK/$1.{stdout,stderr,out.jsonl,rusage,mock_cpu_s,wall_s,rc}
# and the mock's records ($1.records.json).
run_queue() {
    local label=$1 input=$2 limit=$3 rc=0 t0 t1 timer=()
    # Peak RSS (KiB) and CPU seconds (user, system) of the run, measured
    # from outside.
    if [ -x /usr/bin/time ]; then
        timer=(/usr/bin/time -f '%M %U %S' -o "$WORK/$label.time")
    else
        # The same figures /usr/bin/time gives: the child's rusage.
        timer=("$PYTHON" -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write("%d %.2f %.2f\n" % (u.ru_maxrss, u.ru_utime, u.ru_stime))
sys.exit(rc)' "$WORK/$label.time")
    fi
    t0=$(date +%s.%N)
    OPENAI_API_KEY=sk-test XDG_STATE_HOME="$WORK/state" \
        timeout "$limit" "${timer[@]}" "$RATEWISE_BIN" run "$input" \
        --out "$WORK/$label.out.jsonl" --db "$WORK/$label.db" \
        --upstream "http://$MOCK_ADDR" --progress json "${RUN_EXTRA[@]}" \
        >"$WORK/$label.stdout" 2>"$WORK/$label.stderr" || rc=$?
    t1=$(date +%s.%N)
    echo "$rc" >"$WORK/$label.rc"
    "$PYTHON" -c "print(f'{$t1 - $t0:.3f}')" >"$WORK/$label.wall_s"
    # /usr/bin/time writes "Command exited with non-zero status N" first.
    tail -n1 "$WORK/$label.time" >"$WORK/$label.rusage" 2>/dev/null || true
    # The mock's CPU seconds so far (user + system): is it the bottleneck?
    local ticks
    ticks="$(awk '{print $14 + $15}' "/proc/$MOCK_PID/stat" 2>/dev/null || echo "")"
    if [ -n "$ticks" ]; then
        "$PYTHON" -c "print(f'{$ticks / $(getconf CLK_TCK):.2f}')" >"$WORK/$label.mock_cpu_s"
    else
        echo "" >"$WORK/$label.mock_cpu_s"
    fi
    if [ "$rc" = 124 ]; then
        fail "part ${label#p}: ratewise run did not end within ${limit}s (killed)"
    fi
    if ! curl -fsS "http://$MOCK_ADDR/mock/records" >"$WORK/$label.records.json"; then
        echo '[]' >"$WORK/$label.records.json"
        fail "part ${label#p}: the mock's records could not be read (mock alive: $(kill -0 "$MOCK_PID" 2>/dev/null && echo yes || echo no)); its output:"
        sed 's/^/    /' "$WORK/$label.mock.out" | tail -n 20
    fi
}

# Judges the run of part $1 (label) with N jobs: prints the figures and
# one "FAIL: ..." line per miss. Limits for part 1's lower bound come as
# env (RPM, TPM, CAP_S, FIRST_BYTE_MS, PER_TOKEN_MS).
judge() {
    local label=$1 jobs=$2 part=$3 lines
    lines="$(LABEL="$label" JOBS="$jobs" PART="$part" WORK="$WORK" "$PYTHON" - <<'PY'
import json, os
work, label = os.environ["WORK"], os.environ["LABEL"]
jobs, part = int(os.environ["JOBS"]), os.environ["PART"]
p = lambda ext: os.path.join(work, f"{label}.{ext}")
fails = []
rc = int(open(p("rc")).read().strip() or "-1")
wall = float(open(p("wall_s")).read())
rusage = open(p("rusage")).read().split() if os.path.exists(p("rusage")) else []
try:
    rss_outside, cpu_user, cpu_sys = int(rusage[0]), float(rusage[1]), float(rusage[2])
except (IndexError, ValueError):
    rss_outside = cpu_user = cpu_sys = None
mock_cpu = open(p("mock_cpu_s")).read().strip() or "?"

# The summary: the last stdout line whose event is "summary".
summary, progress = None, 0
for line in open(p("stdout"), errors="replace"):
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    if isinstance(ev, dict) and ev.get("event") == "summary":
        summary = ev
    elif isinstance(ev, dict) and ev.get("event") == "progress":
        progress += 1
if summary is None:
    fails.append("no summary line on stdout")
    summary = {}
print(f"  ratewise run: exit {rc}, wall {wall:.2f} s, CPU user {cpu_user} s + system {cpu_sys} s; "
      f"the mock's CPU {mock_cpu} s; {progress} progress lines")
print("  summary: " + json.dumps(summary, separators=(",", ":")))
if rc != 0:
    fails.append(f"ratewise run exited {rc}")
if summary.get("done") != jobs or summary.get("total") != jobs:
    fails.append(f"summary done/total {summary.get('done')}/{summary.get('total')}, not {jobs}/{jobs}")

# The output: one line per custom_id, each done with a 200.
want = {f"job-{i}" for i in range(1, jobs + 1)}
seen, bad = {}, {}
try:
    with open(p("out.jsonl"), errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                o = json.loads(line)
            except ValueError:
                bad["unparsable line"] = bad.get("unparsable line", 0) + 1
                continue
            cid = o.get("custom_id")
            seen[cid] = seen.get(cid, 0) + 1
            outcome = (o.get("ratewise") or {}).get("outcome")
            status = (o.get("response") or {}).get("status_code")
            if outcome != "done" or status != 200:
                k = f"outcome {outcome} status {status}"
                bad[k] = bad.get(k, 0) + 1
except FileNotFoundError:
    fails.append("no output file")
dups = sum(1 for c, n in seen.items() if n > 1)
missing = len(want - set(seen))
extra = len(set(seen) - want)
print(f"  output: {len(seen)} custom_ids, {missing} missing, {dups} more than once, {extra} unknown, not done: {bad or 'none'}")
if missing or dups or extra or bad:
    fails.append(f"output file: {missing} missing, {dups} duplicated, {extra} unknown, not done {bad}")

# The mock's records.
recs = json.load(open(p("records.json")))
sends = len(recs)
n429 = sum(1 for r in recs if r.get("status") == 429)
per_job = {}
for r in recs:
    per_job[r.get("job")] = per_job.get(r.get("job"), 0) + 1
no_job = per_job.pop(None, 0)
spj = sends / jobs
print(f"  mock: {sends} sends ({no_job} without x-ratewise-job), {n429} answered 429 "
      f"({100 * n429 / max(sends, 1):.2f} %), {spj:.4f} sends per job, most for one job "
      f"{max(per_job.values(), default=0)}; summary sends {summary.get('sends')}, answered_429 {summary.get('answered_429')}")
statuses = {}
for r in recs:
    statuses[r.get("status")] = statuses.get(r.get("status"), 0) + 1
if set(statuses) - {200, 429}:
    print(f"  mock statuses: {statuses}")

rss = summary.get("peak_rss_kb")
print(f"  peak RSS: summary {rss} KiB, outside {rss_outside} KiB")

if part == "1":
    if n429 > 0.01 * sends:
        fails.append(f"{n429} of {sends} sends answered 429 ({100 * n429 / max(sends, 1):.2f} % > 1 %)")
    if spj > 1.02:
        fails.append(f"{spj:.4f} sends per job > 1.02")
    rpm, tpm = float(os.environ["RPM"]), float(os.environ["TPM"])
    cap_s = float(os.environ["CAP_S"])
    fb, per_tok = float(os.environ["FIRST_BYTE_MS"]), float(os.environ["PER_TOKEN_MS"])
    if recs:
        first = min(r["at_ms"] for r in recs)
        def answered(r):
            lat = fb + (per_tok * r.get("output_tokens", 0) if r.get("status") == 200 else 0)
            return r["at_ms"] + lat
        makespan = (max(answered(r) for r in recs) - first) / 1000
        ok = [r for r in recs if r.get("status") == 200]
        charged = {
            "requests": (sends, rpm),
            "tokens": (sum(r["input_tokens"] + r["output_tokens"] for r in ok), tpm),
        }
        bounds = {}
        for dim, (total, per_min) in charged.items():
            cap = per_min * cap_s / 60
            bounds[dim] = max(total - cap, 0) / (per_min / 60)
            print(f"  {dim}: charged {total:.0f}, bucket {cap:.0f}, rate {per_min / 60:.1f}/s "
                  f"-> at least {bounds[dim]:.2f} s")
        dim = max(bounds, key=bounds.get)
        lb = bounds[dim]
        ratio = makespan / lb if lb > 0 else float("inf")
        print(f"  makespan {makespan:.2f} s (first send to last answer; summary elapsed "
              f"{summary.get('elapsed_s')} s), lower bound {lb:.2f} s ({dim}), ratio {ratio:.3f}")
        if ratio > 1.15:
            fails.append(f"makespan {makespan:.2f} s is {ratio:.3f} x the lower bound {lb:.2f} s (> 1.15)")
    else:
        fails.append("the mock recorded no sends")
elif part == "2":
    rate = jobs / wall
    print(f"  throughput: {jobs} jobs in {wall:.2f} s wall = {rate:.0f} jobs/s (summary elapsed {summary.get('elapsed_s')} s)")
    if rate < 2000:
        fails.append(f"{rate:.0f} jobs/s < 2000 ({jobs} jobs in {wall:.2f} s)")
elif part == "3":
    limit_kb = 512 * 1024
    if not isinstance(rss, int):
        fails.append(f"summary peak_rss_kb is {rss!r}, not a number")
    elif rss >= limit_kb:
        fails.append(f"summary peak_rss_kb {rss} KiB >= 512 MiB")
    if rss_outside is None:
        fails.append("no peak RSS measured from outside")
    elif rss_outside >= limit_kb:
        fails.append(f"peak RSS from outside {rss_outside} KiB >= 512 MiB")
for f in fails:
    print(f"FAIL: {f}")
PY
)" || lines+=$'\nFAIL: the judging script failed (see above)'
    while IFS= read -r line; do
        case "$line" in
            FAIL:\ *) fail "part $part: ${line#FAIL: }" ;;
            *) echo "$line" ;;
        esac
    done <<<"$lines"
    if [ "$(cat "$WORK/$label.rc")" != 0 ]; then
        echo "  ratewise run stderr (last 20 lines):"
        tail -n 20 "$WORK/$label.stderr" | sed 's/^/    /'
    fi
}

# Writes an OpenAI batch file: $1 = path, then mode-specific arguments.
gen() {
    "$PYTHON" - "$@" <<'PY'
import json, random, sys
path, mode = sys.argv[1], sys.argv[2]
def line(i, content, max_tokens):
    return json.dumps({
        "custom_id": f"job-{i}", "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": "gpt-4o-mini", "max_tokens": max_tokens,
                 "messages": [{"role": "user", "content": content}]},
    }, separators=(",", ":")) + "\n"
with open(path, "w") as f:
    if mode == "pacing":
        # Input tokens uniform in [lo, hi]: the mock counts ceil(bytes / 4)
        # of the strings under `messages`, "user" included (4 bytes).
        jobs, lo, hi = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        rng = random.Random(20261202)
        letters = "abcdefghijklmnopqrstuvwxyz     "
        total = 0
        for i in range(1, jobs + 1):
            n = rng.randint(lo, hi)
            total += n
            f.write(line(i, "".join(rng.choices(letters, k=4 * n - 4)), 1024))
        print(f"  input: {jobs} jobs, {total} input tokens ({total / jobs:.0f} a job)")
    elif mode == "small":
        jobs = int(sys.argv[3])
        for i in range(1, jobs + 1):
            f.write(line(i, f"Say hello to number {i}.", 16))
    elif mode == "big":
        jobs, mib = int(sys.argv[3]), int(sys.argv[4])
        size = mib * 1024 * 1024 - 160  # the line's JSON around the content
        filler = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
        for i in range(1, jobs + 1):
            f.write(line(i, f"job {i}: " + filler, 16))
PY
}

# Huge limits: headers as usual, nothing ever waits.
HUGE='"openai_limits": {"requests_per_minute": 100000000, "tokens_per_minute": 100000000000}'

part1() {
    local speed="${RATEWISE_RUN_BENCH_SPEED:-6}"
    echo "== part 1: pacing, 1000 jobs, OpenAI-like key (RPM 500, TPM 200k, 10 s buckets) at ${speed}x"
    local rpm=500 tpm=200000 cap=10 fb=50 pt=0.25
    local rpm_x=$((rpm * speed)) tpm_x=$((tpm * speed)) cap_x
    cap_x="$("$PYTHON" -c "print($cap / $speed)")"
    gen "$WORK/p1.jsonl" pacing 1000 200 2000
    start_mock p1 '{
      "seconds_per_minute": 60,
      "openai_limits": {"requests_per_minute": '"$rpm_x"', "tokens_per_minute": '"$tpm_x"'},
      "capacity_seconds": '"$cap_x"',
      "count_rejected": true,
      "framing": "content_length",
      "output_tokens": {"min": 50, "max": 400},
      "latency": {"first_byte_ms": '"$fb"', "per_output_token_ms": '"$pt"'}
    }'
    echo "  mock: RPM $rpm_x, TPM $tpm_x, capacity_seconds $cap_x (a 10 s bucket of RPM $rpm / TPM $tpm at ${speed}x)"
    run_queue p1 "$WORK/p1.jsonl" 600
    stop_mock
    RPM=$rpm_x TPM=$tpm_x CAP_S=$cap_x FIRST_BYTE_MS=$fb PER_TOKEN_MS=$pt judge p1 1000 1
}

part2() {
    echo "== part 2: store throughput, 10000 small jobs, huge limits, no latency"
    gen "$WORK/p2.jsonl" small 10000
    start_mock p2 '{'"$HUGE"', "output_tokens": {"min": 5, "max": 16}}'
    run_queue p2 "$WORK/p2.jsonl" 300
    stop_mock
    judge p2 10000 2
}

part3() {
    local jobs=1024 mib=1
    echo "== part 3: bounded memory, a $((jobs * mib)) MiB input ($jobs lines of ~$mib MiB), huge limits, no latency"
    local t0 t1
    t0=$(date +%s)
    gen "$WORK/p3.jsonl" big "$jobs" "$mib"
    t1=$(date +%s)
    echo "  input: $(du -m "$WORK/p3.jsonl" | cut -f1) MiB written in $((t1 - t0)) s"
    start_mock p3 '{'"$HUGE"', "output_tokens": {"min": 5, "max": 16}}'
    run_queue p3 "$WORK/p3.jsonl" 900
    stop_mock
    rm -f "$WORK/p3.jsonl"
    judge p3 "$jobs" 3
}

# Judges part 4: both runs did every job, and what the mock billed each.
judge_price() {
    local lines
    lines="$(WORK="$WORK" "$PYTHON" - <<'PY'
import json, os
work = os.environ["WORK"]
fails, usd = [], {}
for label, via in (("p4d", "direct"), ("p4b", "batch")):
    p = lambda ext: os.path.join(work, f"{label}.{ext}")
    rc = open(p("rc")).read().strip()
    summary = {}
    for line in open(p("stdout"), errors="replace"):
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and ev.get("event") == "summary":
            summary = ev
    outcomes, bases, ids = {}, {}, set()
    try:
        for line in open(p("out.jsonl"), errors="replace"):
            if line.strip():
                o = json.loads(line)
                ids.add(o.get("custom_id"))
                rw = o.get("ratewise") or {}
                outcomes[rw.get("outcome")] = outcomes.get(rw.get("outcome"), 0) + 1
                bases[rw.get("price_basis")] = bases.get(rw.get("price_basis"), 0) + 1
    except FileNotFoundError:
        fails.append(f"{via}: no output file")
    spend = json.load(open(p("spend.json")))
    usd[via] = spend.get(f"usd_{via}", 0.0)
    wall = float(open(p("wall_s")).read())
    print(f"  via {via}: exit {rc}, {wall:.1f} s, {len(ids)} custom_ids, outcomes {outcomes}, "
          f"price_basis {bases}; the mock billed {usd[via]:.4f} USD")
    if rc != "0":
        fails.append(f"via {via}: exit {rc}")
    if outcomes != {"done": 1000} or len(ids) != 1000:
        fails.append(f"via {via}: outcomes {outcomes}, {len(ids)} custom_ids (want 1000 done)")
    if bases != {via: 1000}:
        fails.append(f"via {via}: price_basis {bases}")
if usd.get("direct"):
    ratio = usd["batch"] / usd["direct"]
    print(f"  price: direct {usd['direct']:.4f} USD, batch {usd['batch']:.4f} USD, batch/direct {ratio:.3f}")
    if not 0.45 <= ratio <= 0.55:
        fails.append(f"batch/direct price {ratio:.3f}, not about 0.5")
else:
    fails.append("the mock billed nothing for the direct run")
for f in fails:
    print(f"FAIL: {f}")
PY
)" || lines+=$'\nFAIL: the judging script failed (see above)'
    while IFS= read -r line; do
        case "$line" in
            FAIL:\ *) fail "part 4: ${line#FAIL: }" ;;
            *) echo "$line" ;;
        esac
    done <<<"$lines"
}

part4() {
    echo "== part 4: price, 1000 jobs via direct and via batch (gpt-4o-mini at its list price, batch at the documented 50 %)"
    gen "$WORK/p4.jsonl" pacing 1000 200 2000
    local mock='{'"$HUGE"', "output_tokens": {"min": 50, "max": 400},
      "prices": [{"prefix": "gpt-4o-mini", "input_usd_per_mtok": 0.15, "output_usd_per_mtok": 0.6}],
      "batch": {"items_per_second": 1000, "validating_seconds": 1}}'
    local label via
    for via in direct batch; do
        label="p4${via:0:1}"
        RUN_EXTRA=(--via "$via" --batch-poll 1s)
        start_mock "$label" "$mock"
        run_queue "$label" "$WORK/p4.jsonl" 300
        curl -fsS "http://$MOCK_ADDR/mock/spend" >"$WORK/$label.spend.json" || echo '{}' >"$WORK/$label.spend.json"
        stop_mock
        if [ "$(cat "$WORK/$label.rc")" != 0 ]; then
            echo "  ratewise run --via $via stderr (last 20 lines):"
            tail -n 20 "$WORK/$label.stderr" | sed 's/^/    /'
        fi
    done
    RUN_EXTRA=()
    judge_price
}

for part in $PARTS; do
    case "$part" in
        1) part1 ;;
        2) part2 ;;
        3) part3 ;;
        4) part4 ;;
        *) echo "unknown part $part (parts: 1 2 3 4)" >&2; exit 2 ;;
    esac
done

if [ "${#FAILS[@]}" -gt 0 ]; then
    echo
    echo "bench/run_queue.sh: ${#FAILS[@]} miss(es):"
    printf '  %s\n' "${FAILS[@]}"
    exit 1
fi
echo
echo "bench/run_queue.sh: parts $PARTS passed"
