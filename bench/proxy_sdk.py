"""Drive `ratewise proxy` with the official Python SDKs, as a user would.

    python bench/proxy_sdk.py --proxy http://127.0.0.1:PORT --mock http://127.0.0.1:PORT \
        --shape anthropic --jobs 150 --concurrency 16 --itpm 300000 --capacity-seconds 10

Several `--proxy` addresses spread the jobs across them in turn (replicas
of the proxy sharing one key, `bench/redis_procs.sh`). Several `--mock`
addresses are providers with the same limits behind one proxy's pool
(issue #40): their records are read together, `--limit` is each one's, and
the share used is of the sum of their limits (each one's span and
capacity counted on its own clock).

The SDK's own retries are off (`max_retries=0`): the proxy is the one retry
owner. Every job is one SDK call. When all are back, the mock's records say
what reached the provider: sends, 429s, and the input tokens of the sends
it answered with success, from which the share of the binding limit used
is computed:

    used = input tokens answered / (capacity + limit * span)

where `span` is the provider time from the first send to the last answer
and `capacity` what the provider's bucket held at the start (a client that
took all of it at once and then the limit's refill could not use more).

`--binding requests` counts the sends answered with success instead of
tokens (a requests-per-minute limit). `--others-share X`: another client
takes that share of every limit's refill (the mock's
`bias.other_client_share`), so the limit offers `(1 - X)` of its rate
after the capacity it starts with. `--requests-limit N` prints the share
of a requests-per-minute limit used beside the binding one (not judged).

`--arrival-per-sec R` starts job i at i / R seconds instead of all at
once, and `--deadline-s D` gives each job D seconds from its arrival
(queued behind the concurrency included): its call's timeout is what is
left (the SDK sends it, the proxy reads it as the job's deadline), and an
answer after it is a job not done. `--min-done N`: fewer jobs may be
done (a shape where no client can do them all), at least N.
`--oracle-minutes M`: the simulator's oracle (the best client, reading
the provider's true state) does the same jobs in M minutes; where that
uses less than the limit (jobs arriving slower than it allows, or
`max_tokens` charged up front holding the bucket while answers take
seconds), the share judged is of the oracle's: `used / oracle's`, the
oracle's being the same jobs' units over `capacity + rate * M`.
`--max-wall-s S` cancels the jobs not back after S seconds (not done).

`--stream` makes every Anthropic call a stream (`stream=True`), read to
its end. `--impatient N` first sends N callers whose own timeout
(`--impatient-timeout`, seconds) is shorter than the mock takes to answer
(a `stall` of `--impatient-stall-ms` is injected for them, and
`x-ratewise-deadline-ms` says ratewise may wait longer, so the callers leave
first, mid-request): they give up, then the `--jobs` normal jobs run. The
sends, 429s and tokens used count all of them; "done" counts the normal
jobs.

Prints one JSON object and a table; exits 1 when a job did not finish, more
than `--max-429-share` of the sends were answered 429, less than
`--min-used` of the binding limit was used, or (when given) there were more
than `--max-sends-per-job` sends per job.
"""

import argparse
import asyncio
import json
import os
import sys
import time
import urllib.request


def mock_put(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="PUT",
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()


def words(n, salt):
    # ~4 bytes per token: n tokens of text, distinct per job.
    base = f"job{salt} lorem ipsum dolor sit amet consectetur "
    text = (base * (n * 4 // len(base) + 1))[: n * 4]
    return text


async def run_anthropic(args, sizes, timeout=600, headers=None, salt=0):
    import anthropic

    clients = [
        anthropic.AsyncAnthropic(base_url=p, api_key="sk-ant-bench-key", max_retries=0, timeout=timeout)
        for p in args.proxy
    ]

    async def call(i, n, **per_call):
        client = clients[i % len(clients)]
        kw = dict(
            model="claude-sonnet-4-5",
            max_tokens=args.max_tokens,
            messages=[{"role": "user", "content": words(n, salt + i)}],
            extra_headers=headers or {},
            **per_call,
        )
        if not args.stream:
            return await client.messages.create(**kw)
        stream = await client.messages.create(stream=True, **kw)
        events = 0
        async for _ in stream:
            events += 1
        if events == 0:
            raise RuntimeError("empty stream")
        return events

    try:
        return await run_jobs(args, sizes, call)
    finally:
        for c in clients:
            await c.close()


async def run_openai(args, sizes):
    import openai

    clients = [
        openai.AsyncOpenAI(base_url=p + "/v1", api_key="sk-bench-key", max_retries=0, timeout=600)
        for p in args.proxy
    ]
    return await run_jobs(args, sizes, lambda i, n, **per_call: clients[i % len(clients)].chat.completions.create(
        model="gpt-4o",
        max_tokens=args.max_tokens,
        messages=[{"role": "user", "content": words(n, i)}],
        **per_call,
    ))


async def run_gemini(args, sizes):
    # The official google-genai SDK, its own retries off (one attempt), its
    # base URL the proxy: Gemini's native path, the key in x-goog-api-key.
    from google import genai
    from google.genai import types

    # --sdk-retries: the SDK's own retry loop (its defaults: 5 attempts,
    # exponential backoff from 1 s), for the comparison run straight at
    # the provider.
    retries = types.HttpRetryOptions() if args.sdk_retries else types.HttpRetryOptions(attempts=1)
    clients = [
        genai.Client(api_key="AIza-bench-key", http_options=types.HttpOptions(
            base_url=p, timeout=600_000, retry_options=retries))
        for p in args.proxy
    ]

    async def call(i, n):
        client = clients[i % len(clients)]
        r = await client.aio.models.generate_content(
            model="gemini-2.5-flash",
            contents=words(n, i),
            config=types.GenerateContentConfig(max_output_tokens=args.max_tokens),
        )
        if r.usage_metadata is None or not r.usage_metadata.prompt_token_count:
            raise RuntimeError("no usage in the answer")
        return r

    return await run_jobs(args, sizes, call)


async def run_gemini_zero(args):
    # A model the key's tier has no quota for ("limit: 0"): the first
    # answer stops the key; the jobs after it must not be sent. Its own key,
    # so the stop does not reach the main run's.
    from google import genai
    from google.genai import types

    client = genai.Client(api_key="AIza-bench-zero-key", http_options=types.HttpOptions(
        base_url=args.proxy[0], timeout=60_000, retry_options=types.HttpRetryOptions(attempts=1)))
    outcomes = []
    for i in range(args.zero_jobs):
        try:
            await client.aio.models.generate_content(model=args.zero_model, contents=words(50, i))
            outcomes.append("done")
        except Exception as e:  # the SDK's APIError, with the status the proxy answered
            outcomes.append(f"{type(e).__name__} {getattr(e, 'code', '')}")
    return outcomes


async def run_jobs(args, sizes, call):
    sem = asyncio.Semaphore(args.concurrency)
    outcomes = []
    t0 = time.monotonic()
    rate = getattr(args, "arrival_per_sec", None)
    deadline = getattr(args, "deadline_s", None)

    async def job(i, n):
        # Its arrival (all at once, or one every 1 / rate seconds), from
        # which its deadline counts, queued behind the others included.
        arrival = t0 + i / rate if rate else t0
        if rate:
            await asyncio.sleep(max(0.0, arrival - time.monotonic()))
        async with sem:
            per_call = {}
            if deadline:
                left = arrival + deadline - time.monotonic()
                if left <= 0:
                    outcomes.append(("error", f"deadline passed before it left the queue ({deadline} s)"))
                    return
                # The SDK sends it (x-stainless-read-timeout): the proxy's
                # deadline for the job.
                per_call["timeout"] = left
            try:
                await call(i, n, **per_call)
                late = time.monotonic() - (arrival + deadline) if deadline else 0.0
                if late > 0:
                    outcomes.append(("error", f"answered {late:.1f} s after its deadline"))
                else:
                    outcomes.append(("done", None))
            except Exception as e:  # the SDK's typed errors, reported as such
                outcomes.append(("error", f"{type(e).__name__}: {str(e)[:160]}"))

    tasks = [asyncio.ensure_future(job(i, n)) for i, n in enumerate(sizes)]
    cap = getattr(args, "max_wall_s", None)
    _, pending = await asyncio.wait(tasks, timeout=cap)
    for t in pending:
        t.cancel()
        outcomes.append(("error", f"not back after the bench's {cap:.0f} s"))
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
    return outcomes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--proxy", required=True, nargs="+")
    ap.add_argument("--mock", required=True, nargs="+")
    ap.add_argument("--shape", choices=["anthropic", "openai", "gemini"], default="anthropic")
    ap.add_argument("--jobs", type=int, default=150)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--input", type=int, nargs=2, default=[1000, 3000])
    ap.add_argument("--limit", type=int, required=True,
                    help="the binding limit per minute (input tokens or tokens)")
    ap.add_argument("--binding", choices=["input", "output", "tokens", "requests"], default="input")
    ap.add_argument("--others-share", type=float, default=0.0,
                    help="another client takes this share of every limit's refill")
    ap.add_argument("--requests-limit", type=int, default=None,
                    help="also print the share of this requests-per-minute limit used (not judged)")
    ap.add_argument("--arrival-per-sec", type=float, default=None,
                    help="job i arrives at i / R seconds (default: all at once)")
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="each job's deadline from its arrival, seconds (its call's timeout)")
    ap.add_argument("--min-done", type=int, default=None,
                    help="jobs that must be done (default: every one)")
    ap.add_argument("--oracle-minutes", type=float, default=None,
                    help="the simulator's oracle does these jobs in this many minutes: where that uses less "
                         "than the limit, the share judged is of the oracle's")
    ap.add_argument("--max-wall-s", type=float, default=None,
                    help="jobs not back after this many seconds are cancelled (not done)")
    ap.add_argument("--capacity-seconds", type=float, default=60.0)
    ap.add_argument("--max-429-share", type=float, default=0.02)
    ap.add_argument("--min-used", type=float, default=0.0)
    ap.add_argument("--max-sends-per-job", type=float, default=None)
    ap.add_argument("--stream", action="store_true", help="Anthropic only: stream=True, read to the end")
    ap.add_argument("--impatient", type=int, default=0,
                    help="Anthropic only: callers that give up mid-request before the jobs")
    ap.add_argument("--impatient-timeout", type=float, default=1.5)
    ap.add_argument("--impatient-stall-ms", type=int, default=4000)
    ap.add_argument("--zero-model", default=None,
                    help="Gemini only: after the run, --zero-jobs calls to this limit-0 model on another key")
    ap.add_argument("--zero-jobs", type=int, default=5)
    ap.add_argument("--sdk-retries", action="store_true",
                    help="Gemini only: the SDK's own retries on (its defaults), for a run without ratewise")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    if (args.stream or args.impatient) and args.shape != "anthropic":
        ap.error("--stream and --impatient are for --shape anthropic")
    if args.deadline_s and args.shape == "gemini":
        ap.error("--deadline-s is for --shape anthropic or openai")

    lo, hi = args.input
    sizes = [lo + (i * 7919) % (hi - lo + 1) for i in range(args.jobs)]
    started = time.monotonic()
    impatient = []
    if args.impatient:
        # Every answer is held back longer than these callers wait; ratewise
        # is told it may wait two minutes, so the callers are the ones to go.
        mock_put(args.mock[0], "/mock/faults", [{"fault": {"stall": {"ms": args.impatient_stall_ms}}, "when": "always"}])
        isizes = [lo + (i * 104729) % (hi - lo + 1) for i in range(args.impatient)]
        impatient = asyncio.run(run_anthropic(args, isizes, timeout=args.impatient_timeout,
                                              headers={"x-ratewise-deadline-ms": "120000"}, salt=100000))
        mock_put(args.mock[0], "/mock/faults", [])
    runner = {"anthropic": run_anthropic, "openai": run_openai, "gemini": run_gemini}[args.shape]
    outcomes = asyncio.run(runner(args, sizes))
    wall_s = time.monotonic() - started
    zero = asyncio.run(run_gemini_zero(args)) if args.zero_model else None

    per_mock = []
    for i, m in enumerate(args.mock):
        with urllib.request.urlopen(m + "/mock/records", timeout=30) as r:
            recs = json.load(r)
        for x in recs:
            # Which provider it reached: each one's clock is its own.
            x["_mock"] = i
        per_mock.append(recs)
    records = [x for recs in per_mock for x in recs]
    zero_sends = 0
    if args.zero_model:
        # The limit-0 model's sends are the check's own, not the run's.
        zero_sends = sum(1 for x in records if x.get("model") == args.zero_model)
        records = [x for x in records if x.get("model") != args.zero_model]
    if os.environ.get("RATEWISE_BENCH_RECORDS"):
        # Every send the mock saw, for reading a run's timeline afterwards.
        with open(os.environ["RATEWISE_BENCH_RECORDS"], "w") as f:
            json.dump(records, f)
    sends = len(records)
    r429 = sum(1 for x in records if x.get("status") == 429)
    ok = [x for x in records if x.get("status") == 200]
    def units(x, binding):
        if binding == "requests":
            return 1
        if binding == "input":
            return x["input_tokens"]
        if binding == "output":
            return x["output_tokens"]
        # OpenAI-style TPM: input plus output (the max_tokens charged at
        # admission is corrected to the output when the answer ends).
        return x["input_tokens"] + x["output_tokens"]

    def used_and_offered(recs, binding=None, limit=None):
        binding = binding or args.binding
        limit = limit or args.limit
        oks = [x for x in recs if x.get("status") == 200]
        n = sum(units(x, binding) for x in oks)
        times = [x["provider_ms"] for x in recs]
        span = (max(times) - min(times)) / 60000.0 if times else 0.0
        # Another client on the key takes its share of the refill; the
        # capacity the key starts with is whole.
        rate = limit * (1.0 - args.others_share)
        offered = limit * args.capacity_seconds / 60.0 + rate * span
        return n, offered

    def share_used(recs, binding=None, limit=None):
        # Each provider's limit over its own span, summed: of the sum of
        # the limits when there are several.
        n = offered = 0.0
        for i in range(len(args.mock)):
            a, b = used_and_offered([x for x in recs if x["_mock"] == i], binding, limit)
            n += a
            offered += b
        return n / offered if offered else 0.0

    used = share_used(records)
    # The best any client can do with these jobs, where that is less than
    # the limit: the same share over the span the simulator's oracle takes
    # (--oracle-minutes); the share judged is then of the oracle's.
    oracle_used = None
    if args.oracle_minutes and len(args.mock) == 1:
        # The oracle does every job: their units, from the mean of those
        # answered here (all of them, unless the run was cut).
        n, _ = used_and_offered(records)
        n = n * args.jobs / max(len(ok), 1)
        rate = args.limit * (1.0 - args.others_share)
        best = args.limit * args.capacity_seconds / 60.0 + rate * args.oracle_minutes
        oracle_used = n / best if best else 0.0
    done = sum(1 for o, _ in outcomes if o == "done")
    errors = [e for o, e in outcomes if o == "error"]
    share = r429 / sends if sends else 0.0
    total_jobs = args.jobs + args.impatient
    result = {
        "label": args.label,
        "proxies": len(args.proxy),
        "shape": args.shape,
        "jobs": args.jobs,
        "concurrency": args.concurrency,
        "done": done,
        "sends": sends,
        "sends_per_job": round(sends / max(total_jobs, 1), 3),
        "answered_429": r429,
        "share_429": round(share, 4),
        "binding": args.binding,
        "used_of_binding_limit": round(used, 3),
        "wall_s": round(wall_s, 1),
        "errors": errors[:5],
    }
    if oracle_used is not None:
        result["oracle_used_of_binding_limit"] = round(oracle_used, 3)
        result["oracle_minutes"] = args.oracle_minutes
        result["used_of_oracles"] = round(used / min(oracle_used, 1.0), 3) if oracle_used else 0.0
    if args.requests_limit and args.binding != "requests":
        result["used_of_requests_limit"] = round(share_used(records, "requests", args.requests_limit), 3)
    if args.deadline_s or args.arrival_per_sec:
        result["deadline_s"] = args.deadline_s
        result["arrival_per_sec"] = args.arrival_per_sec
    if r429:
        # When (provider seconds from the first send) and on which bucket.
        t0 = min(x["provider_ms"] for x in records)
        result["429s"] = [[round((x["provider_ms"] - t0) / 1000.0, 1), x.get("dimension")]
                          for x in records if x.get("status") == 429][:20]
    if args.impatient:
        gave_up = sum(1 for o, e in impatient if o == "error" and "Timeout" in e)
        result["impatient"] = args.impatient
        result["impatient_timed_out"] = gave_up
        result["impatient_other"] = [e for o, e in impatient if not (o == "error" and "Timeout" in e)][:5]
        # What the impatient callers sent, and the later jobs on their own
        # (the stall was on for the impatient callers' sends only). The
        # claim of this run is about the jobs after the callers left: the
        # share of the limit is judged on them (over the whole run, the
        # callers' stall and a cold key's first seconds weigh in too, and
        # both are printed).
        early = [x for x in records if x.get("fault")]
        later = [x for x in records if not x.get("fault")]
        result["impatient_sends"] = len(early)
        result["impatient_sends_answered"] = {}
        for x in early:
            k = str(x.get("status"))
            result["impatient_sends_answered"][k] = result["impatient_sends_answered"].get(k, 0) + 1
        result["later_sends_per_job"] = round(len(later) / max(args.jobs, 1), 3)
        result["later_429"] = sum(1 for x in later if x.get("status") == 429)
        result["later_used_of_binding_limit"] = round(share_used(later), 3)
    if len(args.mock) > 1:
        result["per_mock"] = []
        for i, m in enumerate(args.mock):
            recs = [x for x in records if x["_mock"] == i]
            n, offered = used_and_offered(recs)
            result["per_mock"].append({
                "mock": m,
                "sends": len(recs),
                "answered_429": sum(1 for x in recs if x.get("status") == 429),
                "used_of_its_limit": round(n / offered, 3) if offered else 0.0,
            })
    if args.zero_model:
        result["limit_zero"] = {"jobs": args.zero_jobs, "sends": zero_sends, "outcomes": zero}
    print(json.dumps(result))
    extra = ""
    if args.impatient:
        extra = f" (after {args.impatient} callers who gave up: {result['impatient_timed_out']} timed out)"
    later_used = ""
    if args.impatient:
        later_used = f" (the later jobs: {result['later_used_of_binding_limit']:.3f})"
    of = f"of the binding ({args.binding}) limit" if len(args.mock) == 1 else f"of the sum of the {len(args.mock)} binding ({args.binding}) limits"
    if oracle_used is not None:
        of += (f" (the simulated oracle's {oracle_used:.3f} in {args.oracle_minutes * 60:.0f} s: "
               f"{result['used_of_oracles']:.3f} of it)")
    if "used_of_requests_limit" in result:
        of += f", {result['used_of_requests_limit']:.3f} of the requests limit"
    print(f"| {args.label or args.shape} | {done}/{args.jobs}{extra} | {sends} sends ({result['sends_per_job']} per job) "
          f"| {r429} answered 429 ({100 * share:.2f} %) | used {used:.3f} {of}{later_used} "
          f"| {wall_s:.1f} s |")
    failed = []
    must_do = args.jobs if args.min_done is None else min(args.min_done, args.jobs)
    if done < must_do:
        failed.append(f"{args.jobs - done} jobs not done" + (f" (at most {args.jobs - must_do} may not be)" if must_do < args.jobs else ""))
    if share > args.max_429_share:
        failed.append(f"429 share {share:.4f} > {args.max_429_share}")
    judged_used = result["later_used_of_binding_limit"] if args.impatient else used
    which = "the later jobs used" if args.impatient else "used"
    if oracle_used is not None and oracle_used < 1.0:
        # Where no client can use the whole limit, of what the best one uses.
        judged_used = result["used_of_oracles"]
        which = "used, of the oracle's share,"
    if judged_used < args.min_used:
        failed.append(f"{which} {judged_used:.3f} < {args.min_used}")
    if args.max_sends_per_job is not None and result["sends_per_job"] > args.max_sends_per_job:
        failed.append(f"{result['sends_per_job']} sends per job > {args.max_sends_per_job}")
    if args.zero_model and (zero_sends != 1 or "done" in zero):
        failed.append(f"limit 0: {zero_sends} sends for {args.zero_jobs} jobs (one expected, then the key stopped)")
    if failed and args.sdk_retries:
        # The comparison run without ratewise is reported, not judged.
        print(f"(without ratewise: {'; '.join(failed)})")
    elif failed:
        print(f"FAIL: {args.label or args.shape}: " + "; ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
