"""One key, many workloads (issue #49): drive `ratewise proxy` with the
official Anthropic SDK (retries off) as two applications sharing one key
would, and say what each got.

    python bench/tenants.py --proxy http://127.0.0.1:PORT --mock http://127.0.0.1:PORT \
        --arm priority --bulk-level bulk --interactive-level interactive

The workloads (all on one model, one key):

* **bulk**: `--bulk-jobs` requests, `--concurrency` at a time, inputs of
  200-2 000 tokens (800-8 000 characters), `max_tokens` 1 024; the mock
  answers 50-400 output tokens. `--flows A:N,B:N` splits them into flows
  (each its own `x-ratewise-flow`, `N` jobs, the first flow's inputs the
  smaller); `--bulk-level L` sends `x-ratewise-priority: L` on each, none
  when not given.
* **interactive**: one call every `--interactive-every` seconds while the
  bulk work runs (1 200 characters of input, `max_tokens` 256, about 40
  output tokens: `x-mock-output-tokens: 30-50`), with
  `x-ratewise-priority: --interactive-level` when given. `--flood N`
  makes it N callers that each call again as soon as answered (a
  permanent interactive flood) instead.

"Wait" is an interactive call's whole latency as the SDK sees it. From
the mock's records: sends, 429s, and the share of each of the key's
limits used over the bulk work's span (from its first send to its last
answer; the interactive calls' tokens count, they are the key's too):

    used = units answered / (capacity + limit * span)

the binding limit being the one most used. With `--flows`, each flow's
cost while both wait (the run is cut before either is done) is its sends'
dominant shares (the largest of input / ITPM, output / OTPM, 1 / RPM, per
send, from the mock's records; the flows' input ranges are disjoint, so
a record's flow is known from its input), and their ratio is printed
beside their input tokens'. With `--flood`, the bulk work's share of
the sends' dominant shares.

Prints one JSON object and a table row; exits 1 when a check given
(`--max-p95`, `--min-used`, `--max-429-share`, `--ratio`, `--min-bulk-share`,
every bulk job done unless `--duration` cuts the run) misses.
"""

import argparse
import asyncio
import json
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_sdk import words  # noqa: E402  (the same text per token count)


def flow_inputs(n_flows, fi):
    # One bulk flow: inputs of 200-2 000 tokens. Two: disjoint ranges, so a
    # send's flow is known from its input tokens in the mock's records, and
    # both input-dominant (their inputs weigh more against ITPM than their
    # outputs against OTPM), so their dominant shares are input tokens.
    if n_flows == 1:
        return 200, 2000
    return (1500, 2500) if fi == 0 else (3000, 5000)


def pct(xs, p):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round((len(xs) - 1) * p))]


async def run(args):
    import anthropic

    client = anthropic.AsyncAnthropic(base_url=args.proxy, api_key="sk-ant-tenants-key",
                                      max_retries=0, timeout=900)
    calls = []  # (kind, flow, start, end, ok, input_tokens, output_tokens, error)
    t0 = time.monotonic()
    stop = asyncio.Event()

    async def call(kind, flow, n_in, max_tokens, headers):
        start = time.monotonic()
        try:
            r = await client.messages.create(
                model="claude-sonnet-4-5", max_tokens=max_tokens,
                messages=[{"role": "user", "content": words(n_in, f"{kind}{flow}{start}")}],
                extra_headers=headers)
            calls.append((kind, flow, start - t0, time.monotonic() - t0, True,
                          r.usage.input_tokens, r.usage.output_tokens, None))
        except Exception as e:  # the SDK's typed errors, reported as such
            calls.append((kind, flow, start - t0, time.monotonic() - t0, False, 0, 0,
                          f"{type(e).__name__}: {str(e)[:160]}"))

    flows = []
    for spec in (args.flows.split(",") if args.flows else ["bulk:" + str(args.bulk_jobs)]):
        name, n = spec.split(":")
        flows.append((name, int(n)))

    async def bulk_flow(fi, name, n):
        sem = asyncio.Semaphore(args.concurrency)
        lo, hi = flow_inputs(len(flows), fi)

        async def one(i):
            async with sem:
                if stop.is_set():
                    return
                h = {}
                if args.bulk_level:
                    h["x-ratewise-priority"] = args.bulk_level
                if args.flows:
                    h["x-ratewise-flow"] = name
                await call("bulk", name, lo + (i * 7919) % (hi - lo + 1), 1024, h)

        await asyncio.gather(*(one(i) for i in range(n)))

    def interactive_headers():
        h = {"x-mock-output-tokens": "30-50"}
        if args.interactive_level:
            h["x-ratewise-priority"] = args.interactive_level
        return h

    async def interactive():
        if args.flood:
            async def caller():
                while not stop.is_set():
                    await call("interactive", "flood", 300, 256, interactive_headers())
            await asyncio.gather(*(caller() for _ in range(args.flood)))
            return
        tasks = []
        while not stop.is_set():
            tasks.append(asyncio.ensure_future(call("interactive", "app", 300, 256, interactive_headers())))
            try:
                await asyncio.wait_for(stop.wait(), args.interactive_every)
            except asyncio.TimeoutError:
                pass
        await asyncio.gather(*tasks)

    async def bulk():
        await asyncio.gather(*(bulk_flow(i, n, c) for i, (n, c) in enumerate(flows)))
        if args.while_pid:
            # The bulk work is another process's (`ratewise run`): the
            # interactive calls go on while it runs.
            while Path(f"/proc/{args.while_pid}").exists():
                await asyncio.sleep(0.2)
        stop.set()

    async def cap():
        if args.duration:
            await asyncio.sleep(args.duration)
            stop.set()

    side = [asyncio.ensure_future(cap())]
    if args.interactive_every or args.flood:
        side.append(asyncio.ensure_future(interactive()))
    main = asyncio.ensure_future(bulk())
    if args.duration:
        # Cut at the duration: the calls still out are cancelled (not done).
        await stop.wait()
        await asyncio.sleep(0)
        main.cancel()
        for t in side:
            t.cancel()
        await asyncio.gather(main, *side, return_exceptions=True)
    else:
        await main
        await asyncio.gather(*side)
    await client.close()
    return calls, flows


def mock_records(base):
    with urllib.request.urlopen(base + "/mock/records", timeout=30) as r:
        return json.load(r)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--proxy", required=True)
    ap.add_argument("--mock", required=True)
    ap.add_argument("--arm", required=True, help="the row's name")
    ap.add_argument("--bulk-jobs", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--flows", default=None, help="A:N,B:N: bulk flows (x-ratewise-flow) and their jobs")
    ap.add_argument("--bulk-level", default=None)
    ap.add_argument("--interactive-level", default=None)
    ap.add_argument("--interactive-every", type=float, default=2.0, help="0: no interactive calls")
    ap.add_argument("--flood", type=int, default=0)
    ap.add_argument("--while-pid", type=int, default=None,
                    help="the bulk work is this process's (ratewise run): interactive calls while it runs")
    ap.add_argument("--write-batch", default=None,
                    help="write --bulk-jobs Anthropic Message Batches lines (the bulk work) to this file and exit")
    ap.add_argument("--duration", type=float, default=None, help="cut the run after this many seconds")
    ap.add_argument("--limits", default="120,60000,12000", help="RPM,ITPM,OTPM of the key")
    ap.add_argument("--capacity-seconds", type=float, default=10.0)
    ap.add_argument("--max-p95", type=float, default=None)
    ap.add_argument("--min-used", type=float, default=None)
    ap.add_argument("--max-429-share", type=float, default=None)
    ap.add_argument("--ratio", type=float, default=None, help="expected cost ratio of the first flow to the second")
    ap.add_argument("--ratio-tolerance", type=float, default=0.10)
    ap.add_argument("--min-bulk-share", type=float, default=None)
    args = ap.parse_args()
    rpm, itpm, otpm = (float(x) for x in args.limits.split(","))
    if args.write_batch:
        # The same bulk jobs as the SDK arms', as `ratewise run` reads them.
        lo, hi = flow_inputs(1, 0)
        with open(args.write_batch, "w") as f:
            for i in range(args.bulk_jobs):
                n = lo + (i * 7919) % (hi - lo + 1)
                f.write(json.dumps({"custom_id": f"bulk-{i:03}", "params": {
                    "model": "claude-sonnet-4-5", "max_tokens": 1024,
                    "messages": [{"role": "user", "content": words(n, f"bulk{i}")}]}}) + "\n")
        return

    calls, flows = asyncio.run(run(args))
    recs = mock_records(args.mock)
    sends = len(recs)
    r429 = sum(1 for x in recs if x.get("status") == 429)
    ok = [x for x in recs if x.get("status") == 200]

    inter = [c for c in calls if c[0] == "interactive"]
    waits = [c[3] - c[2] for c in inter if c[4]]
    bulk = [c for c in calls if c[0] == "bulk"]
    bulk_done = sum(1 for c in bulk if c[4])
    bulk_jobs = sum(n for _, n in flows)

    # The bulk work's span on the provider's clock: its first send to its
    # last answer (the records do not say whose a send is: the interactive
    # calls' are the 30-50-token ones, whose output is capped at 50).
    times = [x["provider_ms"] for x in recs]
    span_min = (max(times) - min(times)) / 60000.0 if times else 0.0
    used = {}
    for dim, limit in (("requests", rpm), ("input", itpm), ("output", otpm)):
        units = sum(1 if dim == "requests" else x[f"{dim}_tokens"] for x in ok)
        offered = limit * args.capacity_seconds / 60.0 + limit * span_min
        used[dim] = units / offered if offered else 0.0
    binding = max(used, key=used.get)

    result = {
        "arm": args.arm,
        "interactive_calls": len(inter),
        "interactive_failed": len(inter) - len(waits),
        "wait_p50_s": round(pct(waits, 0.5), 2),
        "wait_p95_s": round(pct(waits, 0.95), 2),
        "wait_max_s": round(max(waits), 2) if waits else 0.0,
        "bulk_done": bulk_done,
        "bulk_jobs": bulk_jobs,
        "sends": sends,
        "answered_429": r429,
        "share_429": round(r429 / sends, 4) if sends else 0.0,
        "binding": binding,
        "used_of_binding_limit": round(used[binding], 3),
        "used": {k: round(v, 3) for k, v in used.items()},
        "span_s": round(span_min * 60, 1),
        "errors": [c[7] for c in calls if not c[4]][:5],
    }
    failed = []
    # What each send cost the key, from the mock's records (every send the
    # provider took, those still running at a cut included): its dominant
    # share of the limits, as the discipline charges it once settled.
    def rec_cost(x):
        return max(1.0 / rpm, x["input_tokens"] / itpm, x["output_tokens"] / otpm)

    def is_interactive(x):
        return x.get("max_tokens") == 256

    if len(flows) > 1:
        # While both wait (the run is cut before either is done): every
        # send, told apart by its input range.
        sent = [x for x in ok if not is_interactive(x)]
        ranges = [flow_inputs(len(flows), fi) for fi in range(len(flows))]
        # The mock counts a little more than the text's tokens (the
        # request's other fields): a send belongs to the nearest range.
        def flow_of(x):
            n = x["input_tokens"]
            return min(range(len(ranges)), key=lambda fi: 0 if ranges[fi][0] <= n <= ranges[fi][1] * 1.1
                       else min(abs(n - ranges[fi][0]), abs(n - ranges[fi][1])))
        costs = [sum(rec_cost(x) for x in sent if flow_of(x) == fi) for fi in range(len(flows))]
        tokens = [sum(x["input_tokens"] for x in sent if flow_of(x) == fi) for fi in range(len(flows))]
        ratio = costs[0] / costs[1] if costs[1] else float("inf")
        result["flow_costs"] = {name: round(x, 3) for (name, _), x in zip(flows, costs)}
        result["flow_input_tokens"] = {name: x for (name, _), x in zip(flows, tokens)}
        result["flow_ratio"] = round(ratio, 3)
        result["flow_token_ratio"] = round(tokens[0] / tokens[1], 3) if tokens[1] else None
        if args.ratio and abs(ratio / args.ratio - 1.0) > args.ratio_tolerance:
            failed.append(f"flow cost ratio {ratio:.3f}, not {args.ratio} +- {args.ratio_tolerance:.0%}")
    if args.flood:
        b = sum(rec_cost(x) for x in ok if not is_interactive(x))
        i = sum(rec_cost(x) for x in ok if is_interactive(x))
        share = b / (b + i) if b + i else 0.0
        result["bulk_share_under_flood"] = round(share, 3)
        if args.min_bulk_share is not None and share < args.min_bulk_share:
            failed.append(f"bulk share under the flood {share:.3f} < {args.min_bulk_share}")
    print(json.dumps(result))
    extra = ""
    if "flow_ratio" in result:
        extra = (f" | flows' dominant shares {result['flow_costs']} ratio {result['flow_ratio']}, "
                 f"input tokens {result['flow_input_tokens']} ratio {result['flow_token_ratio']}")
    if "bulk_share_under_flood" in result:
        extra = f" | bulk share under the flood {result['bulk_share_under_flood']}"
    print(f"| {args.arm} | {result['wait_p50_s']} / {result['wait_p95_s']} / {result['wait_max_s']} s "
          f"({len(inter)} calls) | {bulk_done}/{bulk_jobs} | {r429} of {sends} sends answered 429 "
          f"| {used[binding]:.3f} of the {binding} limit over {result['span_s']} s{extra} |")
    if args.duration is None and bulk_done < bulk_jobs:
        failed.append(f"{bulk_jobs - bulk_done} bulk jobs not done")
    if result["interactive_failed"]:
        failed.append(f"{result['interactive_failed']} interactive calls failed")
    if args.max_p95 is not None and result["wait_p95_s"] > args.max_p95:
        failed.append(f"interactive wait p95 {result['wait_p95_s']} s > {args.max_p95} s")
    if args.min_used is not None and used[binding] < args.min_used:
        failed.append(f"used {used[binding]:.3f} of the {binding} limit < {args.min_used}")
    if args.max_429_share is not None and result["share_429"] > args.max_429_share:
        failed.append(f"429 share {result['share_429']} > {args.max_429_share}")
    if failed:
        print(f"FAIL: {args.arm}: " + "; ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
