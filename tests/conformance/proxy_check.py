#!/usr/bin/env python3
"""The official `anthropic` and `openai` Python SDKs (retries off) through
`ratewise proxy` against ratewise-mock: what an application sees.

Usage: proxy_check.py --proxy URL --admin URL --mock URL --restart CMD

`--restart` is a shell command that kills the proxy with SIGKILL and starts
it again on the same addresses with the same journal (run.sh provides it).
`--tls-proxy URL` (optional) is a second proxy whose upstream is the mock
behind TLS with a test CA. `--term-proxy URL --term-admin URL --term-pid FILE
--term-rc FILE` (optional) is a third, with `[limits] requests = 20`, that the
SIGTERM check signals (its pid in one file, its exit code written to the
other). Exit status 1 if any check fails.
"""

import argparse
import json
import subprocess
import sys
import threading
import time
import traceback
import urllib.request

import anthropic
import openai

ap = argparse.ArgumentParser()
ap.add_argument("--proxy", required=True)
ap.add_argument("--admin", required=True)
ap.add_argument("--mock", required=True)
ap.add_argument("--restart", required=True)
ap.add_argument("--tls-proxy")
ap.add_argument("--term-proxy")
ap.add_argument("--term-admin")
ap.add_argument("--term-pid")
ap.add_argument("--term-rc")
args = ap.parse_args()

KEY_ANT = "sk-ant-proxy-conformance"
KEY_OAI = "sk-proj-proxy-conformance"
MSGS = [{"role": "user", "content": "Say hello through the proxy."}]
RESULTS = []


def ant(timeout=30, base=None):
    return anthropic.Anthropic(api_key=KEY_ANT, base_url=base or args.proxy, max_retries=0, timeout=timeout)


def oai(timeout=30):
    return openai.OpenAI(api_key=KEY_OAI, base_url=args.proxy + "/v1", max_retries=0, timeout=timeout)


def http(method, url, value=...):
    data = None if value is ... else json.dumps(value).encode()
    req = urllib.request.Request(url, data=data, method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
    try:
        return json.loads(body)
    except ValueError:
        return body.decode()


def mock(method, path, value=...):
    return http(method, args.mock + path, value)


def admin(method, path):
    return http(method, args.admin + path)


def sends():
    return len(mock("GET", "/mock/records"))


def fingerprint(key):
    import hashlib

    return "fp-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def reset():
    mock("PUT", "/mock/faults", [])
    mock("PUT", "/mock/spend-cap", None)
    mock("PUT", "/mock/billing", False)
    for key in (KEY_ANT, KEY_OAI):
        admin("POST", "/resume?key=" + fingerprint(key))


def check(fn):
    name = fn.__name__
    try:
        reset()
        fn()
        RESULTS.append((name, None))
        print(f"PASS {name}")
    except Exception:  # noqa: BLE001 - report every failure
        RESULTS.append((name, traceback.format_exc()))
        print(f"FAIL {name}\n{traceback.format_exc()}")
    return fn


def ant_create(client=None, **kw):
    return (client or ant()).messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=MSGS, **kw)


def oai_create(client=None, **kw):
    return (client or oai()).chat.completions.create(model="gpt-4o-mini", max_tokens=64, messages=MSGS, **kw)


def raises(cls, fn):
    try:
        fn()
    except cls as e:
        return e
    raise AssertionError(f"expected {cls.__name__}")


@check
def success_both_shapes_and_streams():
    m = ant_create()
    assert m.usage.output_tokens > 0
    c = oai_create()
    assert c.usage.completion_tokens > 0
    with ant().messages.stream(model="claude-sonnet-4-5", max_tokens=64, messages=MSGS) as s:
        text = "".join(s.text_stream)
    assert text
    chunks = list(oai().chat.completions.create(
        model="gpt-4o-mini", max_tokens=64, messages=MSGS, stream=True,
        stream_options={"include_usage": True}))
    assert chunks and chunks[-1].usage is not None


@check
def a_429_and_an_overload_are_retried_by_the_proxy_not_the_sdk():
    # The mock counts every request it ever received.
    before = sends()
    mock("PUT", "/mock/faults", [
        {"fault": {"retry_after": {"format": "seconds", "secs": 1}}, "when": {"nth": [before + 1]}},
        {"fault": "overloaded", "when": {"nth": [before + 2]}},
    ])
    m = ant_create()
    assert m.usage.output_tokens > 0
    assert sends() - before == 3, sends() - before


@check
def a_spend_cap_gives_every_later_job_the_typed_error_with_zero_sends():
    mock("PUT", "/mock/spend-cap", 0)
    first = raises(anthropic.RateLimitError, ant_create)
    assert first.error_code == "enforced_spend_limit_reached", first.error_code
    assert first.response.headers.get("x-ratewise-action") == "stop_queue"
    assert first.response.headers.get("x-should-retry") == "false"
    after_cap = sends()
    for _ in range(3):
        e = raises(anthropic.RateLimitError, ant_create)
        assert e.error_code == "enforced_spend_limit_reached", e.error_code
    assert sends() == after_cap, "zero sends after the cap"
    status = admin("GET", "/status")
    assert "spend_cap" in json.dumps(status), status
    # OpenAI's shape: insufficient_quota, typed the same way.
    e = raises(openai.RateLimitError, oai_create)
    assert e.code == "insufficient_quota", e.code
    e = raises(openai.RateLimitError, oai_create)
    assert e.code == "insufficient_quota", e.code


@check
def a_deadline_ends_in_a_timeout_error_naming_the_last_cause():
    mock("PUT", "/mock/faults", [{"fault": {"retry_after": {"format": "seconds", "secs": 5}}, "when": "always"}])
    e = raises(anthropic.APIStatusError, lambda: ant_create(extra_headers={"x-ratewise-deadline-ms": "1500"}))
    assert e.status_code == 504, e.status_code
    assert "rate_limited" in str(e.body), e.body


@check
def disconnecting_callers_do_not_drain_capacity():
    mock("PUT", "/mock/faults", [{"fault": {"stall": {"ms": 1500}}, "when": "always"}])
    threads = []
    errors = []

    def impatient():
        try:
            # The SDK says its 0.3 s (x-stainless-read-timeout), and the
            # proxy would answer within it; a longer deadline of ratewise's
            # own wins, so these callers leave first, as callers that do not
            # say their timeout do. Long enough that every one of the eight
            # could be sent in its turn (a shorter one is answered at once
            # when its turn, behind the others, comes too late).
            ant_create(client=ant(timeout=0.3), extra_headers={"x-ratewise-deadline-ms": "120000"})
        except anthropic.APITimeoutError:
            errors.append("timeout")
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    for _ in range(8):
        t = threading.Thread(target=impatient)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    assert errors.count("timeout") == 8, errors
    mock("PUT", "/mock/faults", [])
    time.sleep(2.5)
    status = admin("GET", "/status")
    assert status["reservations_outstanding"] == 0, status
    t0 = time.monotonic()
    ant_create()
    assert time.monotonic() - t0 < 3, "the next caller is served at once"


@check
def kill_9_then_restart_reports_unknown_outcomes_and_keeps_a_stop():
    fp = fingerprint(KEY_ANT)
    admin("POST", "/stop?key=" + fp)
    # A request in flight when the proxy dies: started, never ended.
    mock("PUT", "/mock/faults", [{"fault": {"stall": {"ms": 4000}}, "when": "always"}])
    # The caller names its job: cut by the crash, it finds it among the
    # unknown outcomes, with its key and model.
    holder = threading.Thread(target=lambda: raises(Exception, lambda: oai_create(
        client=oai(timeout=10), extra_headers={"x-ratewise-job": "conformance-cut-1"})))
    holder.start()
    time.sleep(0.8)
    subprocess.run(args.restart, shell=True, check=True)
    holder.join()
    mock("PUT", "/mock/faults", [])
    status = admin("GET", "/status")
    assert status["unknown_outcomes"], status
    cut = [u for u in status["unknown_outcomes"] if u["job_id"] == "conformance-cut-1"]
    assert cut and cut[0]["key"] == fingerprint(KEY_OAI) and cut[0]["model"] == "gpt-4o-mini", status
    before = sends()
    e = raises(anthropic.RateLimitError, ant_create)
    assert e.response.headers.get("x-ratewise-action") == "stop_queue"
    assert sends() == before, "the stop survived the restart"
    admin("POST", "/resume?key=" + fp)
    ant_create()


def stop_since(fp):
    for k in admin("GET", "/status")["keys"]:
        if k["fingerprint"] == fp and k["stop"]:
            return k["stop"]["since_ms"]
    return None


@check
def a_restart_keeps_the_spend_caps_typed_error_and_its_since():
    mock("PUT", "/mock/spend-cap", 0)
    first = raises(anthropic.RateLimitError, ant_create)
    assert first.error_code == "enforced_spend_limit_reached", first.error_code
    assert first.response.headers.get("x-ratewise-job"), "every answer names its job"
    o = raises(openai.RateLimitError, oai_create)
    assert o.code == "insufficient_quota", o.code
    since = stop_since(fingerprint(KEY_ANT))
    assert since, admin("GET", "/status")
    before = sends()
    subprocess.run(args.restart, shell=True, check=True)
    # The same typed errors after the restart, nothing sent, the same since.
    e = raises(anthropic.RateLimitError, ant_create)
    assert e.error_code == "enforced_spend_limit_reached", (e.error_code, e.body)
    assert e.response.headers.get("x-ratewise-action") == "stop_queue"
    assert "retry-after" not in e.response.headers or int(e.response.headers["retry-after"]) < 40 * 86400
    o = raises(openai.RateLimitError, oai_create)
    assert o.code == "insufficient_quota", (o.code, o.body)
    assert sends() == before, "zero sends after the restart"
    assert stop_since(fingerprint(KEY_ANT)) == since, (since, admin("GET", "/status"))


@check
def an_https_upstream_with_a_test_ca():
    if not args.tls_proxy:
        raise AssertionError("no --tls-proxy given")
    m = ant_create(client=ant(base=args.tls_proxy))
    assert m.usage.output_tokens > 0


@check
def sigterm_answers_every_caller_and_sends_nothing_new():
    if not args.term_proxy:
        raise AssertionError("no --term-proxy given")
    import os
    import signal
    import urllib.error

    base = args.term_proxy
    # The send in flight takes 2 s; the others wait for admission (20
    # requests a minute, ramping up: about 30 s).
    mock("PUT", "/mock/faults", [{"fault": {"stall": {"ms": 2000}}, "when": "always"}])
    out = {}

    def run(name):
        try:
            out[name] = ant_create(client=ant(base=base, timeout=60))
        except Exception as e:  # noqa: BLE001 - what the caller saw
            out[name] = e

    start = sends()
    a = threading.Thread(target=run, args=("in_flight",))
    a.start()
    for _ in range(100):
        if sends() == start + 1:
            break
        time.sleep(0.02)
    assert sends() == start + 1, "the first is on the wire"
    waiting = [threading.Thread(target=run, args=(f"waiting{i}",)) for i in range(2)]
    for t in waiting:
        t.start()
    time.sleep(0.5)
    before = sends()
    assert before == start + 1, "the others wait"
    pid = int(open(args.term_pid).read().strip())
    os.kill(pid, signal.SIGTERM)
    for t in waiting:
        t.join(10)
        assert not t.is_alive(), "a waiting caller was answered at once"
    for i in range(2):
        e = out[f"waiting{i}"]
        assert isinstance(e, anthropic.APIStatusError) and e.status_code == 503, repr(e)
        assert e.response.headers.get("retry-after"), e.response.headers
        assert e.response.headers.get("connection") == "close", e.response.headers
    # A new caller during the grace: 503 at once; the admin: draining.
    e = raises(anthropic.APIStatusError, lambda: ant_create(client=ant(base=base)))
    assert e.status_code == 503, e
    try:
        http("GET", args.term_admin + "/healthz")
        raise AssertionError("healthz answered 200 while draining")
    except urllib.error.HTTPError as h:
        assert h.code == 503 and h.read().decode().strip() == "draining", h
    # The one in flight: its upstream's answer.
    a.join(30)
    m = out["in_flight"]
    assert not isinstance(m, Exception), repr(m)
    assert m.usage.output_tokens > 0
    # Nothing was cut: exit 0.
    for _ in range(300):
        if os.path.exists(args.term_rc) and open(args.term_rc).read().strip():
            break
        time.sleep(0.1)
    assert open(args.term_rc).read().strip() == "0", "exit code"
    assert sends() == before, "nothing sent after the signal"


failed = [n for n, err in RESULTS if err]
print(f"\n{len(RESULTS) - len(failed)}/{len(RESULTS)} SDK-through-proxy checks passed")
sys.exit(1 if failed else 0)
