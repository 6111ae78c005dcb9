#!/usr/bin/env python3
"""Conformance of ratewise-mock against the official `anthropic` and `openai`
Python SDKs: they must parse the mock's answers, map its errors to the right
exception classes, read its request ids and stream its SSE to completion.

Usage: check.py BASE_URL   (e.g. http://127.0.0.1:40123)

The mock is driven through its control routes (PUT /mock/faults, ...), so one
instance serves every check. Exit status 1 if any check fails.
"""

import json
import sys
import traceback
import urllib.request

import anthropic
import openai

BASE = sys.argv[1].rstrip("/")
ANT = anthropic.Anthropic(api_key="sk-ant-conformance", base_url=BASE, max_retries=0, timeout=20)
OAI = openai.OpenAI(api_key="sk-openai-conformance", base_url=BASE + "/v1", max_retries=0, timeout=20)
MSGS = [{"role": "user", "content": "Say hello to the conformance check."}]

RESULTS = []


def control(method, path, value):
    data = None if value is ... else json.dumps(value).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body and r.headers.get("content-type") == "application/json" else None


def faults(*rules):
    control("PUT", "/mock/faults", list(rules))


def check(fn):
    name = fn.__name__
    try:
        faults()
        fn()
        RESULTS.append((name, None))
        print(f"PASS {name}")
    except Exception:  # noqa: BLE001 - report every failure
        RESULTS.append((name, traceback.format_exc()))
        print(f"FAIL {name}\n{traceback.format_exc()}")
    finally:
        try:
            faults()
            control("PUT", "/mock/billing", False)
            control("PUT", "/mock/spend-cap", None)
            control("PUT", "/mock/acceleration", None)
        except Exception:  # noqa: BLE001
            pass
    return fn


def expect_raises(cls, fn):
    try:
        fn()
    except cls as e:
        return e
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"expected {cls.__name__}, got {type(e).__name__}: {e}") from e
    raise AssertionError(f"expected {cls.__name__}, nothing raised")


def ant_create(**kw):
    kw.setdefault("model", "claude-mock-1")
    kw.setdefault("max_tokens", 100)
    kw.setdefault("messages", MSGS)
    return ANT.messages.create(**kw)


def oai_create(**kw):
    kw.setdefault("model", "gpt-4o-mini")
    kw.setdefault("messages", MSGS)
    return OAI.chat.completions.create(**kw)


# ---- Anthropic -------------------------------------------------------------

@check
def anthropic_message_parses_with_usage_and_request_id():
    m = ant_create()
    assert m.type == "message" and m.role == "assistant", m
    assert m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason == "end_turn"
    assert m.usage.input_tokens > 0 and 5 <= m.usage.output_tokens <= 40, m.usage
    assert m.usage.cache_read_input_tokens == 0
    assert m._request_id and m._request_id.startswith("req_"), m._request_id
    recs = control("GET", "/mock/records", ...)
    assert recs[-1]["request_id"] == m._request_id, recs[-1]
    assert recs[-1]["output_tokens"] == m.usage.output_tokens


@check
def anthropic_raw_headers_have_rate_limits():
    raw = ANT.messages.with_raw_response.create(model="claude-mock-1", max_tokens=50, messages=MSGS)
    for h in ("requests", "input-tokens", "output-tokens"):
        assert raw.headers.get(f"anthropic-ratelimit-{h}-limit"), h
        assert raw.headers.get(f"anthropic-ratelimit-{h}-reset", "").endswith("Z"), h
    assert raw.parse().usage.output_tokens > 0


@check
def anthropic_stream_completes():
    with ANT.messages.stream(model="claude-mock-1", max_tokens=100, messages=MSGS) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
        rid = s.request_id
    assert text and final.content[0].text == text
    assert final.stop_reason == "end_turn"
    assert 5 <= final.usage.output_tokens <= 40 and final.usage.input_tokens > 0
    assert rid and rid.startswith("req_")
    events = [e.type for e in ant_create(stream=True)]
    assert events[0] == "message_start" and events[-1] == "message_stop", events
    assert "message_delta" in events


@check
def anthropic_rate_limit_error():
    ant_create(model="claude-limited")
    e = expect_raises(anthropic.RateLimitError, lambda: ant_create(model="claude-limited"))
    assert e.status_code == 429
    assert e.type == "rate_limit_error", e.type
    assert e.request_id and e.request_id.startswith("req_")
    assert float(e.response.headers["retry-after"]) > 0
    assert e.response.headers["x-should-retry"] == "true"


@check
def anthropic_ramp_limit_error():
    control("PUT", "/mock/acceleration", {"idle_secs": 60, "window_secs": 60, "max_requests": 1})
    ant_create()
    e = expect_raises(anthropic.RateLimitError, ant_create)
    assert e.error_code == "ramp_limit_exceeded", e.error_code
    ramp = getattr(anthropic, "RampLimitExceededError", None) or getattr(
        anthropic.types.shared, "RampLimitExceededError", None)
    if ramp is not None:
        assert isinstance(e, ramp), type(e)


@check
def anthropic_overloaded_529():
    faults({"fault": "overloaded", "when": "always"})
    e = expect_raises(anthropic.InternalServerError, ant_create)
    assert e.status_code == 529
    assert isinstance(e, anthropic.OverloadedError), type(e)
    assert e.type == "overloaded_error"
    assert e.request_id


@check
def anthropic_server_errors_json_and_html():
    faults({"fault": {"status": {"status": 500}}, "when": "always"})
    e = expect_raises(anthropic.InternalServerError, ant_create)
    assert e.status_code == 500 and e.type == "api_error"
    faults({"fault": {"status": {"status": 502, "html": True}}, "when": "always"})
    e = expect_raises(anthropic.InternalServerError, ant_create)
    assert e.status_code == 502 and "Bad Gateway" in str(e.body)
    faults({"fault": {"status": {"status": 408}}, "when": "always"})
    e = expect_raises(anthropic.APIStatusError, ant_create)
    assert e.status_code == 408


@check
def anthropic_spend_cap():
    control("PUT", "/mock/spend-cap", 0)
    e = expect_raises(anthropic.RateLimitError, ant_create)
    assert e.error_code == "enforced_spend_limit_reached", e.error_code
    assert "retry-after" not in e.response.headers


@check
def anthropic_billing_402():
    control("PUT", "/mock/billing", True)
    e = expect_raises(anthropic.APIStatusError, ant_create)
    assert e.status_code == 402 and e.type == "billing_error"
    paid = getattr(anthropic, "PaymentRequiredError", None)
    if paid is not None:
        assert isinstance(e, paid), type(e)


@check
def anthropic_stream_error_first_frame_and_mid_stream():
    faults({"fault": {"stream_error": {"after_events": 0}}, "when": "always"})
    e = expect_raises(anthropic.APIStatusError, lambda: list(ant_create(stream=True)))
    assert "overloaded_error" in str(e), e
    faults({"fault": {"stream_error": {"after_events": 4}}, "when": "always"})
    seen = []

    def consume():
        for ev in ant_create(stream=True):
            seen.append(ev.type)
    e = expect_raises(anthropic.APIStatusError, consume)
    assert "overloaded_error" in str(e)
    assert seen[:2] == ["message_start", "content_block_start"], seen


@check
def anthropic_stream_cut_has_no_message_stop():
    # The stream ends cleanly after 4 events, without message_stop. The SDK
    # either ends its iteration there or refuses the truncated stream with
    # one of its own API errors; either way it yielded the events before
    # the cut and never a message_stop. Any other exception (a parse error
    # on the mock's frames) fails the check.
    faults({"fault": {"stream_cut": {"after_events": 4}}, "when": "always"})
    events = []
    try:
        for e in ant_create(stream=True):
            events.append(e.type)
    except anthropic.APIError:
        pass
    assert events[:2] == ["message_start", "content_block_start"], events
    assert len(events) <= 4, events
    assert "message_stop" not in events, events


@check
def anthropic_reset_is_a_connection_error():
    faults({"fault": "reset", "when": "always"})
    e = expect_raises(anthropic.APIConnectionError, ant_create)
    assert not isinstance(e, anthropic.APITimeoutError)


@check
def anthropic_stall_is_a_timeout():
    faults({"fault": {"stall": {"ms": 3000}}, "when": "always"})
    expect_raises(anthropic.APITimeoutError, lambda: ANT.with_options(timeout=0.5).messages.create(
        model="claude-mock-1", max_tokens=10, messages=MSGS))


# ---- OpenAI ----------------------------------------------------------------

@check
def openai_completion_parses_with_usage_and_request_id():
    c = oai_create(max_completion_tokens=200)
    assert c.object == "chat.completion"
    assert c.choices[0].message.content and c.choices[0].finish_reason == "stop"
    assert c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens
    assert c._request_id and c._request_id.startswith("req_")
    raw = OAI.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=MSGS)
    assert raw.headers["x-ratelimit-limit-requests"] and raw.headers["x-ratelimit-reset-tokens"]


@check
def openai_stream_completes_with_usage():
    chunks = list(oai_create(stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text and finish == ["stop"], finish
    assert chunks[-1].usage and chunks[-1].usage.completion_tokens == len(text.split(" "))


@check
def openai_rate_limit_error():
    oai_create(model="gpt-limited")
    e = expect_raises(openai.RateLimitError, lambda: oai_create(model="gpt-limited"))
    assert e.status_code == 429 and e.code == "rate_limit_exceeded" and e.type == "requests"
    assert e.request_id and e.request_id.startswith("req_")
    assert "Please try again in" in e.message


@check
def openai_slow_down():
    control("PUT", "/mock/acceleration", {"idle_secs": 60, "window_secs": 60, "max_requests": 1})
    oai_create()
    e = expect_raises(openai.RateLimitError, oai_create)
    assert e.code == "slow_down"


@check
def openai_insufficient_quota():
    control("PUT", "/mock/spend-cap", 0)
    e = expect_raises(openai.RateLimitError, oai_create)
    assert e.code == "insufficient_quota" and e.type == "insufficient_quota"


@check
def openai_overloaded_503_and_html_502():
    faults({"fault": "overloaded", "when": "always"})
    e = expect_raises(openai.InternalServerError, oai_create)
    assert e.status_code == 503 and e.code == "server_is_overloaded"
    faults({"fault": {"status": {"status": 502, "html": True}}, "when": "always"})
    e = expect_raises(openai.InternalServerError, oai_create)
    assert e.status_code == 502


@check
def openai_billing_402():
    control("PUT", "/mock/billing", True)
    e = expect_raises(openai.APIStatusError, oai_create)
    assert e.status_code == 402
    assert not isinstance(e, (openai.RateLimitError, openai.InternalServerError))


@check
def openai_stream_error_mid_stream():
    faults({"fault": {"stream_error": {"after_events": 2}}, "when": "always"})
    got = []

    def consume():
        for c in oai_create(stream=True):
            got.append(c)
    e = expect_raises(openai.APIError, consume)
    assert len(got) == 2 and "server had an error" in e.message, (len(got), e.message)


@check
def openai_reset_and_stall():
    faults({"fault": "reset", "when": "always"})
    expect_raises(openai.APIConnectionError, oai_create)
    faults({"fault": {"stall": {"ms": 3000}}, "when": "always"})
    expect_raises(openai.APITimeoutError, lambda: OAI.with_options(timeout=0.5).chat.completions.create(
        model="gpt-4o-mini", messages=MSGS))


@check
def records_hold_no_keys():
    text = json.dumps(control("GET", "/mock/records", ...))
    assert "sk-ant-conformance" not in text and "sk-openai-conformance" not in text


failed = [n for n, err in RESULTS if err]
print(f"\nanthropic {anthropic.__version__}, openai {openai.__version__}: "
      f"{len(RESULTS) - len(failed)}/{len(RESULTS)} checks passed")
sys.exit(1 if failed else 0)
