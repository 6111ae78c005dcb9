#!/usr/bin/env python3
"""What the official `anthropic` and `openai` Python SDKs send as their
timeout, and the deadline `ratewise proxy` derives from it.

Usage: sdk_timeouts.py --ratewise BIN [--table]

Starts a recording upstream (a small HTTP server in this process that
answers like the provider and keeps the headers of every request), then a
`ratewise proxy` in front of it. For each SDK (`messages.create`,
`chat.completions.create`), with the default client, a client with
`timeout=30`, a call with `timeout=30`, and `timeout=None` on each:

* calls the recording upstream directly: what the SDK sends
  (`x-stainless-read-timeout`, `x-stainless-timeout`);
* calls it again through the proxy with `with_raw_response`: the
  proxy's answer says the deadline it used (`x-ratewise-deadline-ms`),
  which must be the one the rule derives (read timeout, then a numeric
  timeout, in seconds, else the default 120 000 ms; at most 3 600 000 ms);
  the SDK's headers reach the upstream as they were sent, and
  `x-ratewise-deadline-ms` does not;
* an `x-ratewise-deadline-ms` of the caller's wins; a junk one falls
  through to the SDK's timeout (no 400).

`--table` prints the Markdown table of what each SDK sent. Exit status 1
if any check fails.
"""

import argparse
import http.server
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request

import anthropic
import openai

ap = argparse.ArgumentParser()
ap.add_argument("--ratewise", required=True, help="the ratewise binary")
ap.add_argument("--table", action="store_true")
args = ap.parse_args()

DEFAULT_MS = 120_000
MAX_MS = 3_600_000
TIMEOUT_HEADERS = ("x-stainless-read-timeout", "x-stainless-timeout")
MSGS = [{"role": "user", "content": "hi"}]
SEEN = []  # headers of every request the upstream received, lower-cased

ANT_BODY = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn",
    "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 1},
}
OAI_BODY = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}


class Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 - http.server's name
        n = int(self.headers.get("content-length") or 0)
        self.rfile.read(n)
        SEEN.append({k.lower(): v for k, v in self.headers.items()})
        body = json.dumps(OAI_BODY if "chat/completions" in self.path else ANT_BODY).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def seconds_ms(value):
    """A header's seconds as milliseconds, or None when junk."""
    if value is None or len(value) > 32:
        return None
    try:
        n = float(value.strip())
    except ValueError:
        return None
    if not math.isfinite(n) or n <= 0:
        return None
    return n * 1000


def expected_ms(sent):
    """The deadline the proxy must derive from what the SDK sent."""
    for h in TIMEOUT_HEADERS:
        ms = seconds_ms(sent.get(h))
        if ms is not None:
            return min(max(int(ms), 1), MAX_MS)
    return DEFAULT_MS


upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
threading.Thread(target=upstream.serve_forever, daemon=True).start()
UP = f"http://127.0.0.1:{upstream.server_address[1]}"

port, admin = free_port(), free_port()
log = tempfile.TemporaryFile()
proxy = subprocess.Popen(
    [args.ratewise, "proxy", "--listen", f"127.0.0.1:{port}", "--admin", f"127.0.0.1:{admin}",
     "--upstream", UP],
    # Its admin token goes to a directory of its own, not the user's.
    env={**os.environ, "XDG_STATE_HOME": tempfile.mkdtemp()},
    stdout=log, stderr=subprocess.STDOUT)
PROXY = f"http://127.0.0.1:{port}"
for _ in range(100):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{admin}/healthz", timeout=1).read()
        break
    except OSError:
        time.sleep(0.1)
else:
    proxy.kill()
    log.seek(0)
    print("FAIL: the proxy never answered\n" + log.read().decode(errors="replace"))
    sys.exit(1)

SDKS = {
    "anthropic": (anthropic.__version__, "messages.create",
                  lambda base, **kw: anthropic.Anthropic(api_key="sk-ant-timeouts", base_url=base,
                                                         max_retries=0, **kw),
                  lambda c: c.messages.with_raw_response.create,
                  dict(model="claude-sonnet-4-5", max_tokens=16, messages=MSGS)),
    "openai": (openai.__version__, "chat.completions.create",
               lambda base, **kw: openai.OpenAI(api_key="sk-proj-timeouts", base_url=base + "/v1",
                                                max_retries=0, **kw),
               lambda c: c.chat.completions.with_raw_response.create,
               dict(model="gpt-4o-mini", max_tokens=16, messages=MSGS)),
}
# name: (client's arguments, the call's extra arguments, the deadline the
# rule promises a caller of that client, in ms)
CLIENTS = {
    "default": ({}, {}, 600_000),
    "timeout=30": ({"timeout": 30}, {}, 30_000),
    "create(timeout=30)": ({}, {"timeout": 30}, 30_000),
    # No timeout at all: nothing numeric is sent, the proxy's default holds.
    "timeout=None": ({"timeout": None}, {}, DEFAULT_MS),
    "create(timeout=None)": ({}, {"timeout": None}, DEFAULT_MS),
}
RESULTS = []
TABLE = []


def case(sdk, client):
    version, call, make, create, params = SDKS[sdk]
    kw, call_kw, _ = CLIENTS[client]
    params = dict(params, **call_kw)
    # What the SDK sends, straight to the recording upstream.
    SEEN.clear()
    create(make(UP, **kw))(**params).parse()
    sent = {h: SEEN[-1].get(h) for h in TIMEOUT_HEADERS}
    want = expected_ms(sent)
    TABLE.append((sdk, version, call, client, sent, want))
    # The same call through the proxy.
    SEEN.clear()
    raw = create(make(PROXY, **kw))(**params)
    raw.parse()
    got = raw.headers.get("x-ratewise-deadline-ms")
    assert got == str(want), f"the proxy used {got} ms, the SDK's headers {sent} mean {want}"
    arrived = SEEN[-1]
    for h in TIMEOUT_HEADERS:
        assert arrived.get(h) == sent[h], f"{h} reached the upstream as {arrived.get(h)!r}, sent {sent[h]!r}"
    # The caller's own header wins, and is not forwarded.
    SEEN.clear()
    raw = create(make(PROXY, **kw))(**params, extra_headers={"x-ratewise-deadline-ms": "4500"})
    raw.parse()
    assert raw.headers.get("x-ratewise-deadline-ms") == "4500", raw.headers
    assert "x-ratewise-deadline-ms" not in SEEN[-1], "x-ratewise-deadline-ms went upstream"
    # A junk one falls through to the SDK's (answered, not a 400).
    raw = create(make(PROXY, **kw))(**params, extra_headers={"x-ratewise-deadline-ms": "soon"})
    raw.parse()
    assert raw.headers.get("x-ratewise-deadline-ms") == str(want), raw.headers


try:
    for sdk in SDKS:
        for client in CLIENTS:
            name = f"{sdk} {client}"
            try:
                case(sdk, client)
                RESULTS.append((name, None))
                print(f"PASS {name}")
            except Exception:  # noqa: BLE001 - report every failure
                RESULTS.append((name, traceback.format_exc()))
                print(f"FAIL {name}\n{traceback.format_exc()}")
    # What the rule promises callers, whatever the SDK version sends.
    for sdk, _, _, client, _, want in TABLE:
        name = f"{sdk} {client}: deadline"
        ok = want == CLIENTS[client][2]
        RESULTS.append((name, None if ok else f"{want} ms"))
        print(("PASS " if ok else "FAIL ") + f"{name} {want} ms")
finally:
    proxy.kill()
    proxy.wait()
    upstream.shutdown()

if args.table or any(err for _, err in RESULTS):
    print("\n| SDK (version) | call | client | x-stainless-read-timeout | x-stainless-timeout | deadline |")
    print("|---|---|---|---|---|---|")
    for sdk, version, call, client, sent, want in TABLE:
        cells = [f"`{sent[h]}`" if sent[h] is not None else "—" for h in TIMEOUT_HEADERS]
        print(f"| {sdk} {version} | `{call}` | {client} | {cells[0]} | {cells[1]} | {want} ms |")

failed = [n for n, err in RESULTS if err]
print(f"\n{len(RESULTS) - len(failed)}/{len(RESULTS)} SDK timeout checks passed")
sys.exit(1 if failed else 0)
