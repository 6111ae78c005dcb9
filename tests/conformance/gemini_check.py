#!/usr/bin/env python3
"""Conformance of ratewise-mock's Gemini surface against the official
`google-genai` Python SDK (import name `google.genai`): it must parse the
mock's GenerateContentResponse and its SSE stream, read the usage the mock
charged, and map its google.rpc.Status errors to `google.genai.errors`.

Usage: gemini_check.py BASE_URL   (e.g. http://127.0.0.1:40123)

Runs against the instance run.sh started with tests/conformance/mock.json
(`gemini-limited`: 1 request per minute; `gemini-zero`: a model the key's
tier lacks). The SDK's own retries are off (one attempt), so every answer
the checks see is the mock's first. Exit status 1 if any check fails.
"""

import json
import sys
import traceback
import urllib.request

from google import genai
from google.genai import errors, types

BASE = sys.argv[1].rstrip("/")
KEY = "AIza-gemini-conformance"
CLIENT = genai.Client(
    api_key=KEY,
    http_options=types.HttpOptions(
        base_url=BASE,
        timeout=20_000,  # milliseconds
        retry_options=types.HttpRetryOptions(attempts=1),
    ),
)
MODEL = "gemini-2.0-flash"
PROMPT = "Say hello to the conformance check."

RESULTS = []


def control(method, path, value=...):
    data = None if value is ... else json.dumps(value).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body and r.headers.get("content-type") == "application/json" else None


def faults(*rules):
    control("PUT", "/mock/faults", list(rules))


def records():
    return control("GET", "/mock/records")


def gemini_records(model=None):
    return [r for r in records() if r["provider"] == "gemini" and (model is None or r["model"] == model)]


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


def detail(err, kind):
    """The google.rpc detail of `kind` in an APIError's body."""
    for d in err.details["error"]["details"]:
        if d["@type"].endswith(kind):
            return d
    raise AssertionError(f"no {kind} in {err.details}")


@check
def gemini_generate_content_returns_text_and_usage():
    r = CLIENT.models.generate_content(model=MODEL, contents=PROMPT)
    rec = gemini_records(MODEL)[-1]
    assert rec["status"] == 200 and not rec["stream"], rec
    assert r.text and len(r.text.split()) == rec["output_tokens"], (r.text, rec)
    u = r.usage_metadata
    assert u.prompt_token_count == rec["input_tokens"], (u, rec)
    assert u.candidates_token_count == rec["output_tokens"], (u, rec)
    assert u.total_token_count == rec["input_tokens"] + rec["output_tokens"], u
    assert r.candidates[0].finish_reason == types.FinishReason.STOP, r.candidates[0].finish_reason
    assert r.model_version == MODEL and r.response_id, (r.model_version, r.response_id)
    headers = {k.lower() for k in (r.sdk_http_response.headers or {})}
    assert not [h for h in headers if "ratelimit" in h or h == "retry-after"], headers


@check
def gemini_max_output_tokens_caps_the_answer():
    r = CLIENT.models.generate_content(
        model=MODEL, contents=PROMPT + " (short)", config=types.GenerateContentConfig(max_output_tokens=3)
    )
    rec = gemini_records(MODEL)[-1]
    assert rec["max_tokens"] == 3, rec
    assert r.usage_metadata.candidates_token_count == 3, r.usage_metadata
    assert r.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS, r.candidates[0].finish_reason


@check
def gemini_stream_has_several_chunks_and_usage_last():
    chunks = list(CLIENT.models.generate_content_stream(model=MODEL, contents=PROMPT + " (stream)"))
    rec = gemini_records(MODEL)[-1]
    assert rec["stream"] and rec["status"] == 200, rec
    assert len(chunks) >= 2, len(chunks)
    text = "".join(c.text or "" for c in chunks)
    assert len(text.split()) == rec["output_tokens"], (text, rec)
    last = chunks[-1]
    assert last.candidates[0].finish_reason == types.FinishReason.STOP, last.candidates[0].finish_reason
    assert last.usage_metadata.prompt_token_count == rec["input_tokens"], (last.usage_metadata, rec)
    assert last.usage_metadata.candidates_token_count == rec["output_tokens"], (last.usage_metadata, rec)
    assert all(c.candidates[0].finish_reason is None for c in chunks[:-1])


@check
def gemini_rate_limit_is_a_client_error_429_with_details():
    model = "gemini-limited"  # 1 request per minute (mock.json)
    before = len(gemini_records(model))
    CLIENT.models.generate_content(model=model, contents=PROMPT)
    e = expect_raises(errors.ClientError, lambda: CLIENT.models.generate_content(model=model, contents=PROMPT))
    assert e.code == 429 and e.status == "RESOURCE_EXHAUSTED", (e.code, e.status)
    assert "Quota exceeded for metric: generativelanguage.googleapis.com/generate_requests_per_model, limit: 1" in e.message, e.message
    v = detail(e, "google.rpc.QuotaFailure")["violations"][0]
    assert v["quotaId"] == "GenerateRequestsPerMinutePerProjectPerModel", v
    assert v["quotaValue"] == "1" and v["quotaDimensions"]["model"] == model, v
    delay = detail(e, "google.rpc.RetryInfo")["retryDelay"]
    assert delay.endswith("s") and 1 <= int(delay[:-1]) <= 60, delay
    said = float(e.message.rsplit("Please retry in ", 1)[1].rstrip(".").rstrip("s"))
    assert said <= int(delay[:-1]) < said + 1, (said, delay)
    # the SDK's retries are off: two requests reached the mock, not more
    recs = gemini_records(model)[before:]
    assert [r["status"] for r in recs] == [200, 429], recs
    assert recs[1]["dimension"] == "requests", recs[1]


@check
def gemini_limit_zero_model_is_a_429_saying_limit_0():
    e = expect_raises(errors.ClientError, lambda: CLIENT.models.generate_content(model="gemini-zero", contents=PROMPT))
    assert e.code == 429 and e.status == "RESOURCE_EXHAUSTED", (e.code, e.status)
    assert "limit: 0" in e.message and e.message.endswith("Please retry in 25.46s."), e.message
    assert gemini_records("gemini-zero")[-1]["cause"] == "permission"


@check
def gemini_overload_is_a_server_error_503():
    faults({"fault": "overloaded", "when": "always", "provider": "gemini"})
    e = expect_raises(errors.ServerError, lambda: CLIENT.models.generate_content(model=MODEL, contents=PROMPT))
    assert e.code == 503 and e.status == "UNAVAILABLE", (e.code, e.status)
    assert e.message == "The model is overloaded. Please try again later.", e.message


@check
def gemini_unknown_method_is_a_404():
    e = expect_raises(errors.ClientError, lambda: CLIENT.models.count_tokens(model=MODEL, contents=PROMPT))
    assert e.code == 404 and e.status == "NOT_FOUND", (e.code, e.status)


@check
def gemini_records_hold_no_keys():
    text = json.dumps(records())
    assert KEY not in text
    assert all(r["key"].startswith("k:") for r in gemini_records())


failed = [n for n, err in RESULTS if err]
print(f"\ngoogle-genai {genai.__version__}: {len(RESULTS) - len(failed)}/{len(RESULTS)} checks passed")
sys.exit(1 if failed else 0)
