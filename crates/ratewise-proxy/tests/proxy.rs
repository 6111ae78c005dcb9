//! `ratewise proxy` end to end on loopback, against the mock provider:
//! what a caller gets back in each situation, what reaches the upstream,
//! and that nothing stays reserved.

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_mock::{Fault, FaultRule, MockConfig, MockServer, RetryAfterFormat};
use ratewise_proxy::config::{Flags, ProxyConfig};
use ratewise_proxy::keys::fingerprint;
use ratewise_proxy::Running;
use std::time::Duration;

const KEY: &str = "sk-ant-api03-test-KEY1";
const BODY: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;

fn roomy() -> MockConfig {
    let mut cfg = MockConfig::default();
    cfg.anthropic_limits.requests_per_minute = Some(100_000);
    cfg.anthropic_limits.input_tokens_per_minute = Some(100_000_000);
    cfg.anthropic_limits.output_tokens_per_minute = Some(100_000_000);
    cfg
}

async fn proxy(upstream: &str, toml: &str) -> Running {
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:1".into()),
        upstream: Some(upstream.into()),
        ..Flags::default()
    };
    let mut config = ProxyConfig::from_toml(&flags, toml, |_| None).expect("config");
    // Both on ephemeral ports.
    config.admin = "127.0.0.1:0".parse().unwrap();
    ratewise_proxy::start(config).await.expect("proxy starts")
}

struct Answer {
    status: StatusCode,
    headers: http::HeaderMap,
    body: String,
}

async fn call(p: &Running, extra: &[(&str, &str)], body: &str) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::post(format!("http://{}/v1/messages", p.addr))
        .header("content-type", "application/json")
        .header("x-api-key", KEY);
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let resp = client
        .request(req.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
        .await
        .expect("the proxy answers");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

async fn admin(p: &Running, method: &str, path: &str) -> (StatusCode, serde_json::Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", p.admin_addr))
        .header("authorization", p.app.admin.authorization())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    )
}

fn action(a: &Answer) -> &str {
    a.headers
        .get("x-ratewise-action")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Every reservation ended, none twice.
/// The answer that ends a job for its caller's deadline: a 504
/// `timeout_error` in the provider's shape that invites no retry.
fn assert_ends_for_its_deadline(a: &Answer) {
    assert_eq!(a.status, 504, "{}", a.body);
    assert_eq!(action(a), "give_up");
    assert_eq!(a.headers["x-should-retry"], "false");
    assert!(a.headers.get("retry-after").is_none(), "{:?}", a.headers);
    assert!(a.body.contains("timeout_error"), "{}", a.body);
}

fn assert_clean(p: &Running) {
    let l = p.app.store.ledger();
    assert!(l.is_clean(), "{l:?}");
}

/// The jitter seed of the stopped-at-admission test.
const SEED: u64 = 2;

/// Waits until `cond` holds: for what the proxy does after the caller has
/// its answer (a settle as the body ends, a release once the caller is
/// gone). Not a timing assertion: the bound only turns a hang into a
/// failure.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..2_000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("never happened: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_passes_through_and_its_key_is_only_a_fingerprint() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = proxy(&mock.base_url(), "").await;
    let a = call(&p, &[], BODY).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body.contains("\"usage\""));
    assert_eq!(mock.records().len(), 1);
    let (s, status) = admin(&p, "GET", "/status").await;
    assert_eq!(s, 200);
    let text = status.to_string();
    assert!(text.contains(&fingerprint(KEY)), "{text}");
    assert!(text.contains("\"last_four\":\"KEY1\""), "{text}");
    assert!(!text.contains(KEY), "the key itself never shows");
    let (_, m) = admin(&p, "GET", "/healthz").await;
    assert_eq!(m, serde_json::Value::Null, "healthz is plain text");
    // Its usage settled exactly.
    let l = p.app.store.ledger();
    assert_eq!(l.charged.output, mock.records()[0].output_tokens, "{l:?}");
    assert_clean(&p);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spend_cap_stops_the_key_every_later_job_gets_the_same_typed_error_with_no_send() {
    let mock = MockServer::start(roomy()).await.unwrap();
    mock.set_spend_cap(Some(0.0));
    let p = proxy(&mock.base_url(), "").await;
    let first = call(&p, &[], BODY).await;
    assert_eq!(action(&first), "stop_queue", "{}", first.body);
    assert_eq!(first.headers.get("x-should-retry").unwrap(), "false");
    assert_eq!(mock.records().len(), 1);
    for _ in 0..3 {
        let later = call(&p, &[], BODY).await;
        assert_eq!(later.status, first.status);
        assert_eq!(
            later.body, first.body,
            "the provider's own answer, replayed"
        );
        assert_eq!(action(&later), "stop_queue");
    }
    assert_eq!(mock.records().len(), 1, "zero sends after the cap");
    let (_, status) = admin(&p, "GET", "/status").await;
    assert!(status.to_string().contains("spend_cap"), "{status}");
    // A human raises the cap and resumes the key.
    mock.set_spend_cap(None);
    let fp = fingerprint(KEY);
    let (s, _) = admin(&p, "POST", &format!("/resume?key={fp}")).await;
    assert_eq!(s, 200);
    let after = call(&p, &[], BODY).await;
    assert_eq!(after.status, 200, "{}", after.body);
    let (s, _) = admin(&p, "POST", "/resume").await;
    assert_eq!(s, 400, "a key is required");
    assert_clean(&p);
    p.shutdown().await;
}

/// Job A's first send is overloaded; while A backs off, job B meets a
/// billing error that stops the key. A's retry is stopped at admission and
/// A gets B's answer (the stopping one), not its own 529, with no second
/// send.
///
/// The order is held, not raced: A's backoff is drawn from a fixed seed
/// (`SEED`: the second call's draw in a 4 s window is about 2.5 s), and B
/// runs only once the mock has recorded A's first send — so B's stop, a
/// loopback round trip, lands inside A's backoff, before A asks for
/// admission again. Should the order ever be lost (another draw, a change
/// in the jitter), A's retry reaches the mock and the test fails on A's
/// status and the send count; nothing is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_stopped_at_admission_gets_the_stopping_answer_not_its_own_earlier_one() {
    const BACKOFF: Duration = Duration::from_secs(4);
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = {
        let flags = Flags {
            listen: Some("127.0.0.1:0".into()),
            admin: Some("127.0.0.1:1".into()),
            upstream: Some(mock.base_url()),
            ..Flags::default()
        };
        let mut config = ProxyConfig::from_toml(&flags, "", |_| None).expect("config");
        config.admin = "127.0.0.1:0".parse().unwrap();
        config.layer.seed = Some(SEED);
        config.layer.policy.backoff.transient_base = BACKOFF;
        config.layer.policy.backoff.cap = BACKOFF;
        ratewise_proxy::start(config).await.expect("proxy starts")
    };
    assert_eq!(
        call(&p, &[], BODY).await.status,
        200,
        "the cold-start probe"
    );
    let n = mock.records().len();
    mock.set_faults(vec![FaultRule::nth(Fault::Overloaded, [n as u64 + 1])]);
    let a = {
        let addr = p.addr;
        tokio::spawn(async move {
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            let req = Request::post(format!("http://{addr}/v1/messages"))
                .header("content-type", "application/json")
                .header("x-api-key", KEY)
                .body(Full::new(Bytes::from_static(BODY.as_bytes())))
                .unwrap();
            let resp = client.request(req).await.unwrap();
            let (parts, body) = resp.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            Answer {
                status: parts.status,
                headers: parts.headers,
                body: String::from_utf8_lossy(&body).into_owned(),
            }
        })
    };
    // A's first send has reached the mock (and is answered 529 at once).
    let mut polls = 0;
    while mock.records().len() == n {
        polls += 1;
        assert!(polls < 1_000, "A's first send never reached the mock");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    mock.set_billing_error(true);
    let b = call(&p, &[], BODY).await;
    assert_eq!(action(&b), "stop_queue", "{}", b.body);
    assert_eq!(b.status, 402, "{}", b.body);
    let a = a.await.unwrap();
    assert_eq!(
        a.status, 402,
        "A ends with the answer that stopped the key: {}",
        a.body
    );
    assert_eq!(a.body, b.body, "B's answer, replayed");
    assert_eq!(action(&a), "stop_queue");
    let records = mock.records();
    assert_eq!(
        records.len(),
        n + 2,
        "A's first send and B's, and no retry of A: {records:?}"
    );
    let later = call(&p, &[], BODY).await;
    assert_eq!(later.status, 402, "{}", later.body);
    assert_eq!(later.body, b.body);
    assert_eq!(mock.records().len(), n + 2, "zero sends once stopped");
    assert_clean(&p);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_stop_holds_until_resumed() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = proxy(&mock.base_url(), "").await;
    let fp = fingerprint(KEY);
    // A key never seen cannot be stopped (404); once seen, it can.
    let (s, _) = admin(&p, "POST", &format!("/stop?key={fp}")).await;
    assert_eq!(s, 404);
    assert_eq!(call(&p, &[], BODY).await.status, 200);
    let (s, _) = admin(&p, "POST", &format!("/stop?key={fp}")).await;
    assert_eq!(s, 200);
    let a = call(&p, &[], BODY).await;
    assert_eq!(a.status, 429, "{}", a.body);
    assert_eq!(action(&a), "stop_queue");
    assert!(
        a.body.contains("\"type\":\"error\""),
        "Anthropic's shape: {}",
        a.body
    );
    assert_eq!(mock.records().len(), 1);
    admin(&p, "POST", &format!("/resume?key={fp}")).await;
    assert_eq!(call(&p, &[], BODY).await.status, 200);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_gives_up_with_a_timeout_naming_the_last_cause() {
    let mut cfg = roomy();
    cfg.faults = vec![FaultRule::always(Fault::RetryAfter {
        format: RetryAfterFormat::Seconds,
        secs: 5,
    })];
    let mock = MockServer::start(cfg).await.unwrap();
    let p = proxy(&mock.base_url(), "").await;
    let a = call(&p, &[("x-ratewise-deadline-ms", "1500")], BODY).await;
    assert_eq!(a.status, 504, "{}", a.body);
    assert_eq!(action(&a), "give_up");
    assert!(a.body.contains("timeout_error"), "{}", a.body);
    assert!(
        a.body.contains("rate_limited"),
        "names the last cause: {}",
        a.body
    );
    assert_eq!(mock.records().len(), 1, "no retry that cannot fit");
    assert_clean(&p);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_read_timeout_is_the_jobs_deadline() {
    let mut cfg = roomy();
    cfg.faults = vec![FaultRule::always(Fault::RetryAfter {
        format: RetryAfterFormat::Seconds,
        secs: 5,
    })];
    let mock = MockServer::start(cfg).await.unwrap();
    let p = proxy(&mock.base_url(), "").await;
    // What anthropic-python sends with `timeout=1.5` on the client.
    let a = call(
        &p,
        &[
            ("x-stainless-read-timeout", "1.5"),
            ("x-stainless-timeout", "NOT_GIVEN"),
        ],
        BODY,
    )
    .await;
    assert_eq!(a.status, 504, "{}", a.body);
    assert_eq!(action(&a), "give_up");
    assert_eq!(a.headers["x-ratewise-deadline-ms"], "1500");
    assert_eq!(mock.records().len(), 1, "no retry that cannot fit");
    assert_clean(&p);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_says_the_deadline_its_job_was_given() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = proxy(
        &mock.base_url(),
        "[policy]\ndefault_deadline_ms = 90000\nmax_deadline_ms = 700000\n",
    )
    .await;
    let cases: [(&[(&str, &str)], &str); 7] = [
        (&[], "90000"),
        (&[("x-stainless-read-timeout", "600.0")], "600000"),
        (&[("x-stainless-timeout", "30")], "30000"),
        (&[("x-stainless-timeout", "NOT_GIVEN")], "90000"),
        // The caller's own header first; junk falls through.
        (
            &[
                ("x-ratewise-deadline-ms", "2500"),
                ("x-stainless-read-timeout", "600"),
            ],
            "2500",
        ),
        (
            &[
                ("x-ratewise-deadline-ms", "-1"),
                ("x-stainless-read-timeout", "nan"),
                ("x-stainless-timeout", "45"),
            ],
            "45000",
        ),
        // Capped at policy.max_deadline_ms.
        (&[("x-stainless-read-timeout", "86400")], "700000"),
    ];
    for (headers, want) in cases {
        let a = call(&p, headers, BODY).await;
        assert_eq!(a.status, 200, "{headers:?}: {}", a.body);
        assert_eq!(a.headers["x-ratewise-deadline-ms"], want, "{headers:?}");
    }
    // An answer of the proxy's own too.
    let a = call(&p, &[("x-ratewise-upstream", "nowhere")], BODY).await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(a.headers["x-ratewise-deadline-ms"], "90000");
    assert_clean(&p);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_past_the_callers_deadline_ends_at_once_without_an_invitation_to_retry() {
    let mut cfg = roomy();
    cfg.faults = vec![FaultRule::always(Fault::RetryAfter {
        format: RetryAfterFormat::Seconds,
        secs: 60,
    })];
    let mock = MockServer::start(cfg).await.unwrap();
    // The inline limit no longer ends a job whose caller still waits; its
    // deadline does. A caller that waits 15 s cannot wait out 60 s.
    let p = proxy(&mock.base_url(), "[policy]\nmax_inline_wait_ms = 1000\n").await;
    let started = std::time::Instant::now();
    let a = call(&p, &[("x-ratewise-deadline-ms", "15000")], BODY).await;
    // Answered on the 429, not held until the deadline (a generous bound:
    // what it rules out is a wait of 15 s).
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered at once"
    );
    assert_ends_for_its_deadline(&a);
    assert_eq!(mock.records().len(), 1, "sent once, not again");
    assert_clean(&p);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_cannot_be_sent_before_its_deadline_is_answered_at_once_and_nothing_is_sent() {
    let mock = MockServer::start(roomy()).await.unwrap();
    // One request a minute: after the first, the next unit is a minute
    // (or more, from the ramp's start) away.
    let p = proxy(&mock.base_url(), "[limits]\nrequests = 1\n").await;
    assert_eq!(call(&p, &[], BODY).await.status, 200);
    let started = std::time::Instant::now();
    let a = call(&p, &[("x-ratewise-deadline-ms", "20000")], BODY).await;
    // Answered as it arrives, not held until its deadline (a generous
    // bound: what it rules out is a wait of 20 s).
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered at once"
    );
    assert_ends_for_its_deadline(&a);
    let earliest = a.headers["x-ratewise-earliest"].to_str().unwrap();
    let at = ratewise_core::time::parse_rfc3339(earliest).expect("an RFC 3339 instant");
    let wait = at
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    assert!(wait > Duration::from_secs(20), "{earliest}: {wait:?}");
    assert!(a.body.contains("nothing was sent"), "{}", a.body);
    assert_eq!(mock.records().len(), 1, "the second was never sent");
    // One whose caller waits long enough is not turned away: it waits.
    let waits = tokio::time::timeout(
        Duration::from_millis(500),
        call(&p, &[("x-ratewise-deadline-ms", "600000")], BODY),
    )
    .await;
    assert!(waits.is_err(), "still waiting for its turn, not answered");
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_answer_and_the_next_request_is_served() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = proxy(&mock.base_url(), "[bounds]\nmax_request_body = 200\n").await;
    let big = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(500)
    );
    let a = call(&p, &[], &big).await;
    assert_eq!(a.status, 413, "{}", a.body);
    // A junk deadline is no reason to refuse: it falls to the default.
    let a = call(&p, &[("x-ratewise-deadline-ms", "soon")], BODY).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-ratewise-deadline-ms"], "120000");
    // Malformed JSON goes upstream; the provider's own 400 comes back.
    let a = call(&p, &[], "{not json").await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(action(&a), "fail");
    assert_eq!(call(&p, &[], BODY).await.status, 200);
    assert_clean(&p);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_gone_during_the_send_costs_nothing_and_its_usage_settles() {
    let mut cfg = roomy();
    cfg.latency.first_byte_ms = 400;
    let mock = MockServer::start(cfg).await.unwrap();
    let p = proxy(&mock.base_url(), "").await;
    // The first answer teaches the key's limits (a cold key sends one
    // request first).
    assert_eq!(call(&p, &[], BODY).await.status, 200);
    mock.clear_records();
    let before = p.app.store.ledger().charged.output;
    for _ in 0..3 {
        let r = tokio::time::timeout(Duration::from_millis(100), call(&p, &[], BODY)).await;
        assert!(r.is_err(), "the caller gave up first");
    }
    until("each sent and settled", || {
        mock.records().len() == 3 && p.app.store.ledger().all_ended()
    })
    .await;
    let recs = mock.records();
    assert_eq!(recs.len(), 3, "each sent once");
    let l = p.app.store.ledger();
    let used: u64 = recs.iter().map(|r| r.output_tokens).sum();
    assert_eq!(
        l.charged.output - before,
        used,
        "settled from the usage: {l:?}"
    );
    assert_clean(&p);
    // Capacity did not drain: the next caller is served at once.
    assert_eq!(call(&p, &[], BODY).await.status, 200);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_gone_before_the_send_releases_its_reservation() {
    let mock = MockServer::start(roomy()).await.unwrap();
    // 20 requests a minute, ramping up from 10 %: the second request
    // waits about 30 s for admission.
    let p = proxy(&mock.base_url(), "[limits]\nrequests = 20\n").await;
    assert_eq!(call(&p, &[], BODY).await.status, 200);
    let waiting = tokio::time::timeout(Duration::from_millis(300), async {
        let call = call(&p, &[], BODY);
        tokio::pin!(call);
        // While it waits, /status counts it.
        tokio::select! {
            a = &mut call => panic!("answered at once: {} {}", a.status, a.body),
            _ = tokio::time::sleep(Duration::from_millis(150)) => {}
        }
        let (_, s) = admin(&p, "GET", "/status").await;
        assert_eq!(s["jobs_waiting"], 1, "{s}");
        call.await
    })
    .await;
    assert!(waiting.is_err(), "the caller gave up first");
    until("the gone caller's job ended", || {
        p.app
            .metrics
            .waiting
            .load(std::sync::atomic::Ordering::Relaxed)
            == 0
    })
    .await;
    assert_eq!(mock.records().len(), 1, "never sent");
    let (_, s) = admin(&p, "GET", "/status").await;
    assert_eq!(s["jobs_waiting"], 0, "{s}");
    assert_eq!(s["jobs_in_flight"], 0, "{s}");
    assert_clean(&p);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_trickles_in_is_cut_without_holding_anything() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = proxy(&mock.base_url(), "[bounds]\nbody_timeout_ms = 300\n").await;
    // A raw connection that promises a body and never sends it.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    s.write_all(
        b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\ncontent-length: 100\r\n\r\n{",
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("answered")
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert_eq!(mock.records().len(), 0);
    // The next caller is served.
    assert_eq!(call(&p, &[], BODY).await.status, 200);
    assert_clean(&p);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_answer_reaches_the_caller_as_asked_and_its_usage_settles() {
    let mut cfg = roomy();
    cfg.compression = true;
    let mock = MockServer::start(cfg).await.unwrap();
    let p = proxy(&mock.base_url(), "").await;
    assert_eq!(
        call(&p, &[], BODY).await.status,
        200,
        "the cold-start probe"
    );
    let before = p.app.store.ledger().charged.output;
    let a = call(&p, &[("accept-encoding", "gzip")], BODY).await;
    assert_eq!(a.status, 200);
    assert_eq!(
        a.headers
            .get("content-encoding")
            .map(|v| v.to_str().unwrap()),
        Some("gzip"),
        "the caller gets what it asked for"
    );
    until("settled", || p.app.store.ledger().all_ended()).await;
    let l = p.app.store.ledger();
    let last = mock.records().last().unwrap().output_tokens;
    assert_eq!(
        l.charged.output - before,
        last,
        "usage read from the gzip body: {l:?}"
    );
    assert_clean(&p);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_cut_at_its_timeout_is_an_unknown_outcome_listed_in_status() {
    let mut cfg = roomy();
    cfg.latency.first_byte_ms = 1500;
    let mock = MockServer::start(cfg).await.unwrap();
    let p = proxy(&mock.base_url(), "[policy]\nsend_timeout_ms = 300\n").await;
    let a = call(&p, &[], BODY).await;
    assert_eq!(a.status, 504, "{}", a.body);
    assert_eq!(action(&a), "hold_unknown");
    assert!(a.body.contains("not sent again"), "{}", a.body);
    assert_eq!(mock.records().len(), 1, "never resent");
    let (_, s) = admin(&p, "GET", "/status").await;
    assert_eq!(
        s["unknown_outcomes"].as_array().map(Vec::len),
        Some(1),
        "{s}"
    );
    assert_clean(&p);
    p.shutdown().await;
}

/// Another endpoint (`GET /v1/models`) goes to the upstream as it came,
/// and the caller gets the upstream's own answer: the mock serves no such
/// path and says which request reached it ("Not found: GET /v1/models",
/// its 404). The 404 is final (not retried), and its reservation ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_endpoints_pass_through_to_the_upstream_and_its_answer_comes_back() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = proxy(&mock.base_url(), "").await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::get(format!("http://{}/v1/models", p.addr))
        .header("x-api-key", KEY)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 404, "the upstream's status: {body}");
    assert!(
        body.contains("Not found: GET /v1/models"),
        "the upstream saw this method and path: {body}"
    );
    assert!(
        body.contains("\"type\":\"error\""),
        "the upstream's (Anthropic-shaped) body: {body}"
    );
    assert_eq!(
        headers
            .get("x-ratewise-action")
            .map(|v| v.to_str().unwrap()),
        Some("fail"),
        "a 404 is final: {headers:?}"
    );
    // (The mock records API calls only; its 404 body above names the
    // request it got.)
    assert!(mock.records().is_empty());
    assert_clean(&p);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_request_in_flight_finish() {
    let mut cfg = roomy();
    cfg.latency.first_byte_ms = 300;
    let mock = MockServer::start(cfg).await.unwrap();
    let p = proxy(&mock.base_url(), "").await;
    let addr = p.addr;
    let in_flight = tokio::spawn(async move {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let req = Request::post(format!("http://{addr}/v1/messages"))
            .header("content-type", "application/json")
            .header("x-api-key", KEY)
            .body(Full::new(Bytes::from_static(BODY.as_bytes())))
            .unwrap();
        client.request(req).await.map(|r| r.status())
    });
    // In flight: it reached the upstream, which answers after 300 ms.
    until("the request reached the upstream", || {
        mock.records().len() == 1
    })
    .await;
    p.shutdown().await;
    assert_eq!(in_flight.await.unwrap().unwrap(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_url_it_cannot_use_is_refused_without_echoing_it() {
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:1".into()),
        upstream: Some("http://127.0.0.1:9".into()),
        redis: Some("http://user:hunter2@127.0.0.1:6379".into()),
        ..Flags::default()
    };
    let e = ProxyConfig::from_toml(&flags, "", |_| None).unwrap_err();
    assert!(e.to_string().contains("redis"), "{e}");
    assert!(!e.to_string().contains("hunter2"), "{e}");
    let bad_share = "[redis]\nurl = \"redis://127.0.0.1:1/\"\nfallback_share = 1.5\n";
    let flags = Flags {
        redis: None,
        ..flags
    };
    assert!(ProxyConfig::from_toml(&flags, bad_share, |_| None).is_err());
}

/// The input-token level `/status` shows for `KEY`'s only class.
fn input_level(status: &serde_json::Value) -> i64 {
    let fp = fingerprint(KEY);
    let key = status["keys"]
        .as_array()
        .and_then(|ks| ks.iter().find(|k| k["fingerprint"] == fp.as_str()))
        .unwrap_or_else(|| panic!("{fp} in {status}"));
    key["classes"][0]["levels"]["input_tokens"]
        .as_i64()
        .unwrap_or_else(|| panic!("an input level in {key}"))
}

/// The input-token level `/metrics` shows for `KEY`.
fn metrics_input_level(text: &str) -> f64 {
    let fp = fingerprint(KEY);
    text.lines()
        .find(|l| {
            l.starts_with("ratewise_bucket_level{")
                && l.contains(&fp)
                && l.contains("dimension=\"input_tokens\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("an input level in {text}"))
}

async fn metrics_text(p: &Running) -> String {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::get(format!("http://{}/metrics", p.admin_addr))
        .header("authorization", p.app.admin.authorization())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_metrics_show_levels_refilled_to_the_moment_they_are_read() {
    let mock = MockServer::start(roomy()).await.unwrap();
    // 60 000 input tokens a minute: 1 000 a second refill; a request of
    // ~10 000 tokens takes ten seconds to refill.
    let p = proxy(
        &mock.base_url(),
        "[limits]\nrequests = 6000\ninput_tokens = 60000\noutput_tokens = 600000\n",
    )
    .await;
    let big = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "lorem ipsum ".repeat(3000)
    );
    let a = call(&p, &[], &big).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let (_, first) = admin(&p, "GET", "/status").await;
    let first_metric = metrics_input_level(&metrics_text(&p).await);
    let drained = input_level(&first);
    assert!(drained < 60_000, "the request drained the bucket: {first}");
    // No traffic in between: only time passes.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (_, second) = admin(&p, "GET", "/status").await;
    let second_metric = metrics_input_level(&metrics_text(&p).await);
    let refilled = input_level(&second);
    assert!(
        refilled > drained,
        "/status refilled to now: {drained} then {refilled}"
    );
    assert!(
        second_metric > first_metric,
        "/metrics refilled to now: {first_metric} then {second_metric}"
    );
    assert_eq!(mock.records().len(), 1);
    assert_clean(&p);
    p.shutdown().await;
}

/// An upstream that keeps the headers of every request and answers a
/// small Anthropic message.
async fn recording_upstream() -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<http::HeaderMap>>>,
) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let kept = kept.clone();
        async move {
            kept.lock().unwrap().push(req.headers().clone());
            (
                [("content-type", "application/json")],
                r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}"#,
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_timeout_headers_go_upstream_as_sent_and_ratewises_does_not() {
    let (url, seen) = recording_upstream().await;
    let p = proxy(&url, "").await;
    let a = call(
        &p,
        &[
            ("x-ratewise-deadline-ms", "5000"),
            ("x-stainless-read-timeout", "600"),
            ("x-stainless-timeout", "NOT_GIVEN"),
        ],
        BODY,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-ratewise-deadline-ms"], "5000");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let h = &seen[0];
    assert_eq!(h["x-stainless-read-timeout"], "600");
    assert_eq!(h["x-stainless-timeout"], "NOT_GIVEN");
    assert!(h.get("x-ratewise-deadline-ms").is_none(), "{h:?}");
    p.shutdown().await;
}

/// The margin learned from a 429 ratewise did not expect, for `KEY`, as
/// `/metrics` shows it: (dimension, margin, surprises) where either is set.
fn metrics_margins(text: &str) -> Vec<(String, f64, f64)> {
    let fp = fingerprint(KEY);
    let value = |prefix: &str, dim: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix) && l.contains(&fp) && l.contains(dim))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    ["requests", "input_tokens", "output_tokens", "tokens"]
        .iter()
        .filter_map(|d| {
            let dim = format!("dimension=\"{d}\"");
            let m = value("ratewise_bucket_margin{", &dim)?;
            let s = value("ratewise_bucket_surprises_total{", &dim)?;
            Some((d.to_string(), m, s))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_the_model_did_not_expect_shows_as_a_margin_in_status_and_metrics() {
    // The provider publishes roomy limits, then answers the second request
    // 429: the model believed every bucket had room — a surprise.
    let mut cfg = roomy();
    cfg.faults = vec![FaultRule::nth(
        Fault::RetryAfter {
            format: RetryAfterFormat::Seconds,
            secs: 1,
        },
        [2],
    )];
    let mock = MockServer::start(cfg).await.unwrap();
    let p = proxy(&mock.base_url(), "").await;
    let before = metrics_margins(&metrics_text(&p).await);
    assert!(
        before.iter().all(|(_, m, s)| *m == 0.0 && *s == 0.0),
        "{before:?}"
    );
    assert_eq!(call(&p, &[], BODY).await.status, 200);
    let a = call(&p, &[], BODY).await;
    assert_eq!(a.status, 200, "retried after the 429: {}", a.body);
    assert_eq!(mock.records().len(), 3);
    let (_, status) = admin(&p, "GET", "/status").await;
    let class = &status["keys"][0]["classes"][0];
    let dims = ["requests", "input_tokens", "output_tokens", "tokens"];
    let surprises: u64 = dims
        .iter()
        .filter_map(|d| class["surprises"][d].as_u64())
        .sum();
    assert_eq!(surprises, 1, "{class}");
    let margin: u64 = dims
        .iter()
        .filter_map(|d| class["margins"][d].as_u64())
        .sum();
    assert!(margin > 0, "{class}");
    assert!(
        class["capacities"]["requests"].as_u64().is_some(),
        "{class}"
    );
    let after = metrics_margins(&metrics_text(&p).await);
    assert!(
        after.iter().any(|(_, m, s)| *m > 0.0 && *s == 1.0),
        "{after:?}"
    );
    p.shutdown().await;

    // The switch: learning off, the same 429 teaches only its hint.
    mock.set_faults(vec![FaultRule::nth(
        Fault::RetryAfter {
            format: RetryAfterFormat::Seconds,
            secs: 1,
        },
        [5],
    )]);
    let p = proxy(&mock.base_url(), "[policy]\nlearn_margins = false").await;
    assert_eq!(call(&p, &[], BODY).await.status, 200);
    assert_eq!(call(&p, &[], BODY).await.status, 200);
    assert_eq!(mock.records().len(), 6);
    let off = metrics_margins(&metrics_text(&p).await);
    assert!(
        !off.is_empty() && off.iter().all(|(_, m, s)| *m == 0.0 && *s == 0.0),
        "{off:?}"
    );
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_name_each_type_once() {
    let mock = MockServer::start(roomy()).await.unwrap();
    let p = proxy(&mock.base_url(), "").await;
    assert_eq!(call(&p, &[], BODY).await.status, 200);
    let text = metrics_text(&p).await;
    let mut seen = std::collections::HashSet::new();
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        assert!(seen.insert(line.to_owned()), "twice: {line}\n{text}");
    }
    assert!(
        seen.iter().any(|l| l.contains("ratewise_bucket_margin")),
        "{text}"
    );
    p.shutdown().await;
}

/// A provider that states no limit (issue #35): the proxy learns one from
/// its 429s, and `/status` and `/metrics` say, per dimension, that the limit
/// is estimated, not stated. 40 callers at once against 120 requests a
/// minute over a 10 s bucket: every caller answered 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_providers_limit_is_estimated_and_shown_as_such() {
    let mut cfg = roomy();
    cfg.anthropic_limits.requests_per_minute = Some(120);
    cfg.capacity_seconds = 10.0;
    cfg.silent = ratewise_mock::Silent::RetryAfter;
    let mock = MockServer::start(cfg).await.unwrap();
    let p = std::sync::Arc::new(proxy(&mock.base_url(), "").await);
    let mut calls = Vec::new();
    for _ in 0..40 {
        let p = p.clone();
        calls.push(tokio::spawn(
            async move { call(&p, &[], BODY).await.status },
        ));
    }
    for c in calls {
        assert_eq!(c.await.unwrap(), 200);
    }
    let throttled = mock
        .records()
        .iter()
        .filter(|r| r.status == Some(429))
        .count();
    assert!(
        throttled > 0,
        "the bucket of 20 ran dry: a 429 taught the limit"
    );
    let (_, status) = admin(&p, "GET", "/status").await;
    let class = &status["keys"][0]["classes"][0];
    assert_eq!(class["limit_sources"]["requests"], "estimated", "{status}");
    let estimate = class["limits"]["requests"].as_u64().expect("an estimate");
    assert!(estimate <= 240, "near 120 a minute: {estimate}");
    let metrics = admin_text(&p, "/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("ratewise_limit_per_minute{")
                && l.contains("dimension=\"requests\"")
                && l.contains("source=\"estimated\"")),
        "{metrics}"
    );
    assert_clean(&p);
}

/// An admin API page as text (`/metrics`).
async fn admin_text(p: &Running, path: &str) -> String {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::get(format!("http://{}{}", p.admin_addr, path))
        .header("authorization", p.app.admin.authorization())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.expect("the admin API answers");
    String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned()
}

/// An OpenAI-shaped call to `path` through `p`.
async fn call_openai(p: &Running, path: &str) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::post(format!("http://{}{path}", p.addr))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {KEY}"))
        .body(Full::new(Bytes::from_static(
            br#"{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#,
        )))
        .unwrap();
    let resp = client.request(req).await.expect("the proxy answers");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// `--upstream http://…/v1` (the base URL the OpenAI SDKs document) is
/// the upstream `http://…`, as `ratewise run --upstream` reads it: the
/// caller's `/v1/chat/completions` reaches the mock once as
/// `/v1/chat/completions`, not `/v1/v1/chat/completions` (the mock's
/// 404).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_given_with_v1_gets_the_callers_path_once() {
    let mut cfg = roomy();
    cfg.openai_limits.requests_per_minute = Some(100_000);
    cfg.openai_limits.tokens_per_minute = Some(100_000_000);
    let mock = MockServer::start(cfg).await.unwrap();
    for suffix in ["/v1", "/v1/", "/", ""] {
        let up = format!("{}{suffix}", mock.base_url());
        let p = proxy(&up, "").await;
        assert_eq!(p.app.config.upstreams[0].url, mock.base_url(), "{up}");
        let before = mock.records().len();
        let a = call_openai(&p, "/v1/chat/completions").await;
        assert_eq!(a.status, 200, "{up}: {}", a.body);
        assert!(a.body.contains("chat.completion"), "{}", a.body);
        let records = mock.records();
        assert_eq!(records.len(), before + 1, "{up}");
        // Only the mock's `/v1/chat/completions` route records an OpenAI
        // request; any other path is its 404, unrecorded.
        assert_eq!(
            records.last().unwrap().provider,
            ratewise_core::Provider::Openai,
            "{up}"
        );
        assert_clean(&p);
        p.shutdown().await;
    }
}

/// A connection the proxy could not make is a 502 that names the upstream
/// it tried, as `scheme://host:port` — never its user, password or path,
/// nor the caller's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_failure_names_the_upstream_it_could_not_reach() {
    // A loopback port nobody listens on: bound, then let go.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let up = format!("http://operator:hunter2@127.0.0.1:{port}/gateway/v1");
    let p = proxy(&up, "[policy]\nmax_attempts = 1\n").await;
    let a = call(&p, &[], BODY).await;
    assert_eq!(a.status, 502, "{}", a.body);
    assert!(a.body.contains("\"type\":\"error\""), "{}", a.body);
    assert!(
        a.body.contains(&format!(
            "could not connect to the upstream http://127.0.0.1:{port} (connect_failed)"
        )),
        "{}",
        a.body
    );
    for secret in ["hunter2", "operator", "gateway", KEY] {
        assert!(!a.body.contains(secret), "{secret} in {}", a.body);
    }
    assert_clean(&p);
    p.shutdown().await;
}
