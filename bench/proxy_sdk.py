"""Drive `ratewise proxy` with the official Python SDKs, as a user would.

    python bench/proxy_sdk.py --proxy http://127.0.0.1:PORT --mock http://127.0.0.1:PORT \
        --shape anthropic --jobs 150 --concurrency 16 --itpm 300000 --capacity-seconds 10

Several `--proxy` addresses spread the jobs across them in turn (replicas
of the proxy sharing one key, `bench/redis_procs.sh`).

The SDK's own retries are off (`max_retries=0`): the proxy is the one retry
owner. Every job is one SDK call. When all are back, the mock's records say
what reached the provider: sends, 429s, and the input tokens of the sends
it answered with success, from which the share of the binding limit used
is computed:

    used = input tokens answered / (capacity + limit * span)

where `span` is the provider time from the first send to the last answer
and `capacity` what the provider's bucket held at the start (a client that
took all of it at once and then the limit's refill could not use more).

Prints one JSON object and a table; exits 1 when a job did not finish or
more than `--max-429-share` of the sends were answered 429.
"""

import argparse
import asyncio
import json
import sys
import time
import urllib.request


def words(n, salt):
    # ~4 bytes per token: n tokens of text, distinct per job.
    base = f"job{salt} lorem ipsum dolor sit amet consectetur "
    text = (base * (n * 4 // len(base) + 1))[: n * 4]
    return text


async def run_anthropic(args, sizes):
    import anthropic

    clients = [
        anthropic.AsyncAnthropic(base_url=p, api_key="sk-ant-bench-key", max_retries=0, timeout=600)
        for p in args.proxy
    ]
    return await run_jobs(args, sizes, lambda i, n: clients[i % len(clients)].messages.create(
        model="claude-sonnet-4-5",
        max_tokens=args.max_tokens,
        messages=[{"role": "user", "content": words(n, i)}],
    ))


async def run_openai(args, sizes):
    import openai

    clients = [
        openai.AsyncOpenAI(base_url=p + "/v1", api_key="sk-bench-key", max_retries=0, timeout=600)
        for p in args.proxy
    ]
    return await run_jobs(args, sizes, lambda i, n: clients[i % len(clients)].chat.completions.create(
        model="gpt-4o",
        max_tokens=args.max_tokens,
        messages=[{"role": "user", "content": words(n, i)}],
    ))


async def run_jobs(args, sizes, call):
    sem = asyncio.Semaphore(args.concurrency)
    outcomes = []

    async def job(i, n):
        async with sem:
            try:
                await call(i, n)
                outcomes.append(("done", None))
            except Exception as e:  # the SDK's typed errors, reported as such
                outcomes.append(("error", f"{type(e).__name__}: {str(e)[:160]}"))

    await asyncio.gather(*(job(i, n) for i, n in enumerate(sizes)))
    return outcomes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--proxy", required=True, nargs="+")
    ap.add_argument("--mock", required=True)
    ap.add_argument("--shape", choices=["anthropic", "openai"], default="anthropic")
    ap.add_argument("--jobs", type=int, default=150)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--input", type=int, nargs=2, default=[1000, 3000])
    ap.add_argument("--limit", type=int, required=True,
                    help="the binding limit per minute (input tokens or tokens)")
    ap.add_argument("--binding", choices=["input", "output", "tokens"], default="input")
    ap.add_argument("--capacity-seconds", type=float, default=60.0)
    ap.add_argument("--max-429-share", type=float, default=0.02)
    ap.add_argument("--min-used", type=float, default=0.0)
    ap.add_argument("--label", default="")
    args = ap.parse_args()

    lo, hi = args.input
    sizes = [lo + (i * 7919) % (hi - lo + 1) for i in range(args.jobs)]
    started = time.monotonic()
    runner = run_anthropic if args.shape == "anthropic" else run_openai
    outcomes = asyncio.run(runner(args, sizes))
    wall_s = time.monotonic() - started

    with urllib.request.urlopen(args.mock + "/mock/records", timeout=30) as r:
        records = json.load(r)
    sends = len(records)
    r429 = sum(1 for x in records if x.get("status") == 429)
    ok = [x for x in records if x.get("status") == 200]
    if args.binding == "input":
        used_tokens = sum(x["input_tokens"] for x in ok)
    elif args.binding == "output":
        used_tokens = sum(x["output_tokens"] for x in ok)
    else:
        # OpenAI-style TPM: input plus output (the max_tokens charged at
        # admission is corrected to the output when the answer ends).
        used_tokens = sum(x["input_tokens"] + x["output_tokens"] for x in ok)
    times = [x["provider_ms"] for x in records]
    span_min = (max(times) - min(times)) / 60000.0 if times else 0.0
    offered = args.limit * args.capacity_seconds / 60.0 + args.limit * span_min
    used = used_tokens / offered if offered else 0.0
    done = sum(1 for o, _ in outcomes if o == "done")
    errors = [e for o, e in outcomes if o == "error"]
    share = r429 / sends if sends else 0.0
    result = {
        "label": args.label,
        "proxies": len(args.proxy),
        "shape": args.shape,
        "jobs": args.jobs,
        "concurrency": args.concurrency,
        "done": done,
        "sends": sends,
        "sends_per_job": round(sends / max(done, 1), 3),
        "answered_429": r429,
        "share_429": round(share, 4),
        "used_of_binding_limit": round(used, 3),
        "wall_s": round(wall_s, 1),
        "errors": errors[:5],
    }
    print(json.dumps(result))
    print(f"| {args.label or args.shape} | {done}/{args.jobs} | {sends} sends ({result['sends_per_job']} per job) "
          f"| {r429} answered 429 ({100 * share:.2f} %) | used {used:.3f} of the binding limit "
          f"| {wall_s:.1f} s |")
    failed = []
    if done != args.jobs:
        failed.append(f"{args.jobs - done} jobs not done")
    if share > args.max_429_share:
        failed.append(f"429 share {share:.4f} > {args.max_429_share}")
    if used < args.min_used:
        failed.append(f"used {used:.3f} < {args.min_used}")
    if failed:
        print("FAIL: " + "; ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
