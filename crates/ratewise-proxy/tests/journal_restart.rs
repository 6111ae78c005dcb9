//! `--journal`: after a crash, attempts that started and never ended are
//! reported as unknown outcomes (until an operator acknowledges them), a
//! stop survives the restart, and the journal is compacted to what is
//! live.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_mock::{MockConfig, MockServer};
use ratewise_proxy::config::{Flags, ProxyConfig};
use ratewise_proxy::keys::fingerprint;
use std::io::Write;

const KEY: &str = "sk-ant-journal-KEY9";

async fn start(upstream: &str, journal: &std::path::Path) -> ratewise_proxy::Running {
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:1".into()),
        upstream: Some(upstream.into()),
        journal: Some(journal.to_owned()),
        ..Flags::default()
    };
    let mut config = ProxyConfig::from_toml(&flags, "", |_| None).unwrap();
    config.admin = "127.0.0.1:0".parse().unwrap();
    ratewise_proxy::start(config).await.unwrap()
}

/// An admin GET, with the admin token.
async fn get(p: &ratewise_proxy::Running, path: &str) -> String {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let url = format!("http://{}{path}", p.admin_addr);
    let req = Request::get(url).header("authorization", p.app.admin.authorization());
    let resp = client
        .request(req.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned()
}

async fn call(p: &ratewise_proxy::Running) -> (u16, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::post(format!("http://{}/v1/messages", p.addr))
        .header("content-type", "application/json")
        .header("x-api-key", KEY)
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#,
        )))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let action = resp
        .headers()
        .get("x-ratewise-action")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let status = resp.status().as_u16();
    resp.into_body().collect().await.unwrap();
    (status, action)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_attempts_are_unknown_after_a_crash_and_a_stop_survives() {
    let mut cfg = MockConfig::default();
    cfg.anthropic_limits.requests_per_minute = Some(100_000);
    let mock = MockServer::start(cfg).await.unwrap();
    let dir = std::env::temp_dir().join(format!("ratewise-journal-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let journal = dir.join("journal.jsonl");
    let _ = std::fs::remove_file(&journal);

    // A first run: one job done, then the provider's spend cap stops the
    // key.
    let p = start(&mock.base_url(), &journal).await;
    assert_eq!(call(&p).await.0, 200);
    mock.set_spend_cap(Some(0.0));
    assert_eq!(call(&p).await.1, "stop_queue");
    let fp = fingerprint(KEY);
    p.shutdown().await;
    // ... and, as if the process had been killed mid-send, an attempt that
    // started and never ended (a line cut short after it, too).
    {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&journal)
            .unwrap();
        writeln!(f, r#"{{"event":"attempt_started","job_id":"crashed-7","attempt":2,"at_ms":1796000000000,"key":"fp-00000000000000aa","model":"claude-x","request_id":"req_earlier"}}"#).unwrap();
        write!(f, r#"{{"event":"attempt_ended","job_id":"#).unwrap();
    }
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(!text.contains(KEY), "no key in the journal");
    assert!(text.contains(&fp) && text.contains("spend_cap"), "{text}");
    // The cap is lifted at the provider, but nobody resumed the key.
    mock.set_spend_cap(None);

    // The restart: the unknown outcome is reported, the stop holds.
    let sends = mock.records().len();
    let p = start(&mock.base_url(), &journal).await;
    let status = get(&p, "/status").await;
    assert!(status.contains("crashed-7"), "{status}");
    assert!(
        status.contains("fp-00000000000000aa")
            && status.contains("claude-x")
            && status.contains("req_earlier"),
        "an unknown outcome names its key, model and request id: {status}"
    );
    let (code, action) = call(&p).await;
    assert_eq!(action, "stop_queue", "{code}");
    assert_eq!(mock.records().len(), sends, "a stopped key sends nothing");
    p.shutdown().await;

    // Kept until an operator acknowledges it: the next start reports it
    // again (see `an_unknown_outcome_is_kept_across_restarts_until_an_operator_acknowledges_it`).
    let p = start(&mock.base_url(), &journal).await;
    let status = get(&p, "/status").await;
    assert!(status.contains("crashed-7"), "{status}");
    p.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// One call with optional extra headers: status, the answer's headers, its
/// body as JSON (null when not JSON).
async fn call_full(
    p: &ratewise_proxy::Running,
    extra: &[(&str, &str)],
) -> (u16, http::HeaderMap, serde_json::Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::post(format!("http://{}/v1/messages", p.addr))
        .header("content-type", "application/json")
        .header("x-api-key", KEY);
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#,
        )))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        headers,
        serde_json::from_slice(&body).unwrap_or_default(),
    )
}

/// The error's (type, code) in Anthropic's shape.
fn typed(body: &serde_json::Value) -> (String, String) {
    (
        body["error"]["type"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        body["error"]["details"]["error_code"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// The stop's `since_ms` for `fp` in `/status`.
fn since_ms(status: &str, fp: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(status).ok()?;
    v["keys"]
        .as_array()?
        .iter()
        .find(|k| k["fingerprint"] == fp)?["stop"]["since_ms"]
        .as_u64()
}

fn job_header(h: &http::HeaderMap) -> String {
    h.get("x-ratewise-job")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spend_caps_typed_answer_and_its_since_survive_a_restart() {
    let mut cfg = MockConfig::default();
    cfg.anthropic_limits.requests_per_minute = Some(100_000);
    let mock = MockServer::start(cfg).await.unwrap();
    let dir = std::env::temp_dir().join(format!("ratewise-journal-cap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let journal = dir.join("journal.jsonl");
    let _ = std::fs::remove_file(&journal);
    let fp = fingerprint(KEY);

    let p = start(&mock.base_url(), &journal).await;
    // Every answer names its job; a caller's own id is used.
    let (s, h, _) = call_full(&p, &[("x-ratewise-job", "caller-job-1")]).await;
    assert_eq!((s, job_header(&h).as_str()), (200, "caller-job-1"));
    let (_, h, _) = call_full(&p, &[("x-ratewise-job", "not a word/{}")]).await;
    let generated = job_header(&h);
    assert!(
        !generated.is_empty() && generated != "not a word/{}",
        "{generated}"
    );
    // The caller's header is not forwarded: upstream sees the layer's own
    // job header, naming the job the caller's answer names.
    let jobs: Vec<_> = mock.records().into_iter().map(|r| r.job).collect();
    assert_eq!(
        jobs,
        vec![Some("caller-job-1".to_owned()), Some(generated.clone())]
    );
    mock.set_spend_cap(Some(0.0));
    // The provider's own answer, then the kept one: the same typed error.
    let (s1, h1, b1) = call_full(&p, &[]).await;
    assert_eq!(h1["x-ratewise-action"], "stop_queue");
    assert!(!job_header(&h1).is_empty(), "an error answer names its job");
    let want = (
        "rate_limit_error".to_owned(),
        "enforced_spend_limit_reached".to_owned(),
    );
    assert_eq!((s1, typed(&b1)), (429, want.clone()), "{b1}");
    let (s2, h2, b2) = call_full(&p, &[("x-ratewise-job", "caller-job-2")]).await;
    assert_eq!((s2, typed(&b2)), (429, want.clone()), "{b2}");
    assert_eq!(
        job_header(&h2),
        "caller-job-2",
        "a stopped answer names its job"
    );
    let since = since_ms(&get(&p, "/status").await, &fp).expect("the stop is shown");
    p.shutdown().await;
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(!text.contains(KEY), "no key in the journal");
    assert!(
        text.contains(r#""job_id":"caller-job-1""#)
            && text.contains(&format!(r#""key":"{fp}""#))
            && text.contains(r#""model":"claude-sonnet-4-5""#),
        "the caller's id, the key and the model in the attempt lines: {text}"
    );
    assert!(text.contains("enforced_spend_limit_reached"), "{text}");
    mock.set_spend_cap(None);

    // After the restart: the same typed answer, the original since,
    // nothing sent.
    let sends = mock.records().len();
    let p = start(&mock.base_url(), &journal).await;
    let (s3, h3, b3) = call_full(&p, &[]).await;
    assert_eq!(h3["x-ratewise-action"], "stop_queue");
    assert_eq!((s3, typed(&b3)), (429, want), "{b3}");
    assert_eq!(
        b3, b2,
        "the same body: type, code, message and the provider's request id"
    );
    assert_eq!(
        h3.contains_key("retry-after"),
        h2.contains_key("retry-after")
    );
    let status = get(&p, "/status").await;
    assert_eq!(since_ms(&status, &fp), Some(since), "{status}");
    assert_eq!(mock.records().len(), sends, "a stopped key sends nothing");
    p.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_stop_says_so_before_and_after_a_restart() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let dir = std::env::temp_dir().join(format!("ratewise-journal-op-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let journal = dir.join("journal.jsonl");
    let _ = std::fs::remove_file(&journal);
    let fp = fingerprint(KEY);
    let p = start(&mock.base_url(), &journal).await;
    // A key the proxy has seen (the admin refuses to stop one it never saw).
    assert_eq!(call_full(&p, &[]).await.0, 200);
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::post(format!("http://{}/stop?key={fp}", p.admin_addr))
        .header("authorization", p.app.admin.authorization())
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(client.request(req).await.unwrap().status(), 200);
    let (s, _, b) = call_full(&p, &[]).await;
    assert_eq!(s, 429);
    assert_eq!(
        b["error"]["details"]["error_code"], "ratewise_operator_stop",
        "{b}"
    );
    assert!(
        b["error"]["message"].as_str().unwrap().contains("operator"),
        "{b}"
    );
    p.shutdown().await;
    let p = start(&mock.base_url(), &journal).await;
    let (s2, _, b2) = call_full(&p, &[]).await;
    assert_eq!((s2, &b2), (s, &b), "the same answer after the restart");
    assert_eq!(mock.records().len(), 1, "only the call before the stop");
    p.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_outcome_names_the_callers_job_its_key_and_model() {
    let mut cfg = MockConfig::default();
    cfg.anthropic_limits.requests_per_minute = Some(100_000);
    cfg.latency.first_byte_ms = 1500;
    let mock = MockServer::start(cfg).await.unwrap();
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:0".into()),
        upstream: Some(mock.base_url()),
        ..Flags::default()
    };
    let config =
        ProxyConfig::from_toml(&flags, "[policy]\nsend_timeout_ms = 300\n", |_| None).unwrap();
    let p = ratewise_proxy::start(config).await.unwrap();
    let (s, h, _) = call_full(&p, &[("x-ratewise-job", "cut-by-timeout-1")]).await;
    assert_eq!(
        (s, h["x-ratewise-action"].to_str().unwrap()),
        (504, "hold_unknown")
    );
    assert_eq!(job_header(&h), "cut-by-timeout-1");
    let status: serde_json::Value = serde_json::from_str(&get(&p, "/status").await).unwrap();
    let u = &status["unknown_outcomes"][0];
    assert_eq!(u["job_id"], "cut-by-timeout-1", "{status}");
    assert_eq!(u["key"], fingerprint(KEY).as_str(), "{status}");
    assert_eq!(u["model"], "claude-sonnet-4-5", "{status}");
    assert!(!status.to_string().contains(KEY), "no key in /status");
    p.shutdown().await;
}

/// Issue #26: a caller that leaves after its send is a cancellation the
/// job machine is told. The send finishes and is accounted; its 429 makes
/// no retry — no further attempt upstream, no phantom send in `/metrics`,
/// no journal line for an attempt that was not made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_gone_after_its_send_makes_no_further_attempt() {
    let mut cfg = MockConfig::default();
    cfg.anthropic_limits.requests_per_minute = Some(100_000);
    cfg.latency.first_byte_ms = 300;
    let mock = MockServer::start(cfg).await.unwrap();
    let dir = std::env::temp_dir().join(format!("ratewise-caller-gone-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let journal = dir.join("journal.jsonl");
    let _ = std::fs::remove_file(&journal);
    let p = start(&mock.base_url(), &journal).await;
    // The first answer teaches the key's limits.
    assert_eq!(call(&p).await.0, 200);
    mock.clear_records();
    // Every answer from now on: a 429 asking for a second's wait.
    mock.set_faults(vec![ratewise_mock::FaultRule::always(
        ratewise_mock::Fault::RetryAfter {
            format: ratewise_mock::RetryAfterFormat::Seconds,
            secs: 1,
        },
    )]);
    let gone = tokio::time::timeout(std::time::Duration::from_millis(100), call(&p)).await;
    assert!(gone.is_err(), "the caller gave up first");
    // Long enough for the 429, its second's wait and two retries.
    tokio::time::sleep(std::time::Duration::from_millis(3_500)).await;
    assert_eq!(mock.records().len(), 1, "sent once, never again");
    let sends = p
        .app
        .metrics
        .sends
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(sends, 2, "the teaching call and the one send: no phantom");
    assert!(p.app.store.ledger().all_ended(), "nothing outstanding");
    let metrics = get(&p, "/metrics").await;
    assert!(metrics.contains("ratewise_sends_total 2"), "{metrics}");
    p.shutdown().await;
    let text = std::fs::read_to_string(&journal).unwrap();
    let attempts: Vec<(String, u64)> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "attempt_started")
        .map(|v| {
            (
                v["job_id"].as_str().unwrap_or("").to_owned(),
                v["attempt"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(attempts.len(), 2, "one start per send: {text}");
    assert!(attempts.iter().all(|(_, n)| *n == 1), "{text}");
    // Its one attempt ended on the 429, decided: no retry (the caller
    // left).
    assert!(
        text.contains(r#""cause":"rate_limited","action":"give_up""#),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

const KEY2: &str = "sk-ant-journal-OTHER";

async fn start_with(
    upstream: &str,
    journal: &std::path::Path,
    toml: &str,
) -> ratewise_proxy::Running {
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:1".into()),
        upstream: Some(upstream.into()),
        journal: Some(journal.to_owned()),
        ..Flags::default()
    };
    let mut config = ProxyConfig::from_toml(&flags, toml, |_| None).unwrap();
    config.admin = "127.0.0.1:0".parse().unwrap();
    ratewise_proxy::start(config).await.unwrap()
}

/// One call on `key`, naming its job when given: status and action.
async fn call_as(p: &ratewise_proxy::Running, key: &str, job: Option<&str>) -> (u16, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::post(format!("http://{}/v1/messages", p.addr))
        .header("content-type", "application/json")
        .header("x-api-key", key);
    if let Some(j) = job {
        req = req.header("x-ratewise-job", j);
    }
    let req = req
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#,
        )))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let action = resp
        .headers()
        .get("x-ratewise-action")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let status = resp.status().as_u16();
    resp.into_body().collect().await.unwrap();
    (status, action)
}

/// An admin call, with the token or without: status and body as JSON
/// (null when not JSON).
async fn admin(
    p: &ratewise_proxy::Running,
    method: &str,
    path: &str,
    token: bool,
) -> (u16, serde_json::Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", p.admin_addr));
    if token {
        req = req.header("authorization", p.app.admin.authorization());
    }
    let resp = client
        .request(req.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or_default())
}

/// The job ids `/status` lists as unknown outcomes.
async fn unknown_jobs(p: &ratewise_proxy::Running) -> Vec<String> {
    let (_, s) = admin(p, "GET", "/status", true).await;
    let mut v: Vec<String> = s["unknown_outcomes"]
        .as_array()
        .unwrap_or_else(|| panic!("{s}"))
        .iter()
        .map(|u| u["job_id"].as_str().unwrap().to_owned())
        .collect();
    v.sort();
    v
}

/// `ratewise_unknown_outcomes` in `/metrics`.
async fn unknown_gauge(p: &ratewise_proxy::Running) -> Option<f64> {
    let text = get(p, "/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix("ratewise_unknown_outcomes "))
        .map(|v| v.trim().parse().unwrap())
}

/// The log lines written on this thread while `f` runs (the proxy's
/// start logs from the caller's thread).
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Starts the proxy, with what its start logged.
async fn start_logged(
    upstream: &str,
    journal: &std::path::Path,
    toml: &str,
) -> (ratewise_proxy::Running, String) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    let p = {
        let _g = tracing::subscriber::set_default(subscriber);
        start_with(upstream, journal, toml).await
    };
    let text = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    (p, text)
}

/// Issue #38: an unknown outcome (a send with no answer: the upstream
/// stalls past the send timeout) is listed in `/status` and counted in
/// `ratewise_unknown_outcomes`, and logged at every start, across
/// restarts, until an operator acknowledges it — one job, then all; after
/// the acknowledgement and a restart it is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_outcome_is_kept_across_restarts_until_an_operator_acknowledges_it() {
    let mut cfg = MockConfig::default();
    cfg.anthropic_limits.requests_per_minute = Some(100_000);
    let mock = MockServer::start(cfg).await.unwrap();
    let dir = std::env::temp_dir().join(format!("ratewise-journal-ack-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let journal = dir.join("journal.jsonl");
    let _ = std::fs::remove_file(&journal);
    let toml = "[policy]\nsend_timeout_ms = 300\n";

    let p = start_with(&mock.base_url(), &journal, toml).await;
    assert_eq!(
        unknown_gauge(&p).await,
        Some(0.0),
        "the gauge is always there"
    );
    mock.set_faults(vec![ratewise_mock::FaultRule::always(
        ratewise_mock::Fault::Stall { ms: 1_500 },
    )]);
    for job in ["lost-1", "lost-2"] {
        assert_eq!(
            call_as(&p, KEY, Some(job)).await,
            (504, "hold_unknown".to_owned())
        );
    }
    mock.set_faults(Vec::new());
    assert_eq!(unknown_jobs(&p).await, ["lost-1", "lost-2"]);
    assert_eq!(unknown_gauge(&p).await, Some(2.0));
    p.shutdown().await;

    // Two restarts: still listed, counted and logged.
    for restart in 1..=2 {
        let (p, log) = start_logged(&mock.base_url(), &journal, toml).await;
        assert_eq!(
            unknown_jobs(&p).await,
            ["lost-1", "lost-2"],
            "restart {restart}"
        );
        assert_eq!(unknown_gauge(&p).await, Some(2.0), "restart {restart}");
        let summary = log
            .lines()
            .find(|l| l.contains("WARN") && l.contains("until acknowledged"))
            .unwrap_or_else(|| panic!("restart {restart}: {log}"));
        assert!(
            summary.contains("lost-1") && summary.contains("lost-2") && summary.contains("count=2"),
            "{summary}"
        );
        p.shutdown().await;
    }

    let p = start_with(&mock.base_url(), &journal, toml).await;
    // Behind the admin token, as every admin write.
    let (s, b) = admin(&p, "POST", "/unknown/ack?job=lost-1", false).await;
    assert_eq!(
        (s, b["error"]["type"].as_str()),
        (401, Some("token_required"))
    );
    // A bare POST acknowledges nothing; refusals in the admin's shape.
    let (s, b) = admin(&p, "POST", "/unknown/ack", true).await;
    assert_eq!(
        (s, b["error"]["type"].as_str()),
        (400, Some("job_required")),
        "{b}"
    );
    assert!(
        b["error"]["message"].as_str().unwrap().contains("all=true"),
        "{b}"
    );
    for (query, kind) in [
        ("job=lost-1&all=true", "query_invalid"),
        ("job=lost-1&job=lost-2", "query_invalid"),
        ("all=yes", "query_invalid"),
        ("job=no%20such/job", "job_invalid"),
    ] {
        let (s, b) = admin(&p, "POST", &format!("/unknown/ack?{query}"), true).await;
        assert_eq!(
            (s, b["error"]["type"].as_str()),
            (400, Some(kind)),
            "{query}: {b}"
        );
    }
    let (s, b) = admin(&p, "POST", "/unknown/ack?job=nobody", true).await;
    assert_eq!(
        (s, b["error"]["type"].as_str()),
        (404, Some("job_not_found")),
        "{b}"
    );
    let (s, b) = admin(&p, "GET", "/unknown/ack?all=true", true).await;
    assert_eq!(s, 405, "a write is a POST: {b}");
    assert_eq!(
        unknown_jobs(&p).await,
        ["lost-1", "lost-2"],
        "nothing acknowledged yet"
    );

    // One job.
    let (s, b) = admin(&p, "POST", "/unknown/ack?job=lost-1", true).await;
    assert_eq!(
        (s, &b),
        (200, &serde_json::json!({"acknowledged": ["lost-1"]}))
    );
    assert_eq!(unknown_jobs(&p).await, ["lost-2"]);
    assert_eq!(unknown_gauge(&p).await, Some(1.0));
    p.shutdown().await;
    let (p, log) = start_logged(&mock.base_url(), &journal, toml).await;
    assert_eq!(
        unknown_jobs(&p).await,
        ["lost-2"],
        "lost-1 stays acknowledged"
    );
    assert!(!log.contains("lost-1"), "{log}");
    // All.
    let (s, b) = admin(&p, "POST", "/unknown/ack?all=true", true).await;
    assert_eq!(
        (s, &b),
        (200, &serde_json::json!({"acknowledged": ["lost-2"]}))
    );
    assert!(unknown_jobs(&p).await.is_empty());
    assert_eq!(unknown_gauge(&p).await, Some(0.0));
    p.shutdown().await;

    let (p, log) = start_logged(&mock.base_url(), &journal, toml).await;
    assert!(unknown_jobs(&p).await.is_empty(), "gone after the restart");
    assert_eq!(unknown_gauge(&p).await, Some(0.0));
    assert!(!log.contains("outcome_unknown"), "{log}");
    p.shutdown().await;
    // Nothing live but what the key learned: the journal the restart
    // compacted holds its beliefs alone.
    assert_eq!(not_beliefs(&journal), "");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue #38: the journal no longer only grows. Past its threshold (a
/// small one here) the running proxy compacts it; a restart compacts it
/// to what is live — the operator's stop and the unknown outcome, kept —
/// a few hundred bytes after hundreds of requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_is_compacted_while_running_and_at_start_keeping_stops_and_unknown_outcomes() {
    let mut cfg = MockConfig::default();
    cfg.anthropic_limits.requests_per_minute = Some(100_000);
    let mock = MockServer::start(cfg).await.unwrap();
    let dir = std::env::temp_dir().join(format!("ratewise-journal-compact-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let journal = dir.join("journal.jsonl");
    let _ = std::fs::remove_file(&journal);
    let toml = "[policy]\nsend_timeout_ms = 300\n";
    const THRESHOLD: u64 = 8 * 1024;

    let p = start_with(&mock.base_url(), &journal, toml).await;
    let j = p.app.journal.clone().unwrap();
    j.set_compact_above(THRESHOLD);
    // An operator's stop on one key, an unknown outcome on the other.
    assert_eq!(call_as(&p, KEY, None).await.0, 200);
    let fp = fingerprint(KEY);
    let (s, _) = admin(&p, "POST", &format!("/stop?key={fp}"), true).await;
    assert_eq!(s, 200);
    mock.set_faults(vec![ratewise_mock::FaultRule::always(
        ratewise_mock::Fault::Stall { ms: 1_500 },
    )]);
    assert_eq!(
        call_as(&p, KEY2, Some("lost-c")).await,
        (504, "hold_unknown".to_owned())
    );
    mock.set_faults(Vec::new());
    // Hundreds of requests: about 300 bytes of journal each.
    let mut peak = 0;
    for _ in 0..400 {
        assert_eq!(call_as(&p, KEY2, None).await.0, 200);
        // The attempt's end line may still be on its way to the writer
        // when the answer has reached the caller: written first.
        j.sync();
        let len = std::fs::metadata(&journal).unwrap().len();
        assert_eq!(len, j.len(), "appends go to the file at the journal's path");
        peak = peak.max(len);
    }
    assert!(
        peak <= THRESHOLD,
        "compacted past its threshold: {peak} bytes"
    );
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(text.contains(&fp) && text.contains("lost-c"), "{text}");
    assert!(
        !text.contains(KEY) && !text.contains(KEY2),
        "no key in the journal"
    );
    p.shutdown().await;

    let p = start_with(&mock.base_url(), &journal, toml).await;
    // Only what is live: the stop, the unknown outcome, and one line of
    // what each key learned.
    let rest = not_beliefs(&journal);
    assert!(rest.len() < 1024, "only what is live: {rest}");
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(
        text.matches("\"event\":\"beliefs\"").count() <= 2,
        "one line per key: {text}"
    );
    assert_eq!(unknown_jobs(&p).await, ["lost-c"]);
    let (_, s) = admin(&p, "GET", "/status", true).await;
    let stop = s["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["fingerprint"] == fp.as_str())
        .map(|k| k["stop"]["cause"].clone());
    assert_eq!(stop, Some(serde_json::json!("operator")), "{s}");
    let sends = mock.records().len();
    assert_eq!(call_as(&p, KEY, None).await.0, 429);
    assert_eq!(mock.records().len(), sends, "the stopped key sends nothing");
    p.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `/status` entry of the key's one class.
fn class_of(status: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(status).unwrap();
    v["keys"][0]["classes"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_key_learned_is_remembered_across_a_restart_until_forgotten() {
    let mut cfg = MockConfig::default();
    cfg.anthropic_limits.requests_per_minute = Some(600);
    let mock = MockServer::start(cfg).await.unwrap();
    let dir =
        std::env::temp_dir().join(format!("ratewise-journal-remember-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let journal = dir.join("journal.jsonl");
    let _ = std::fs::remove_file(&journal);
    let fp = fingerprint(KEY);

    // A first run learns the key's stated limits from its answers.
    let p = start(&mock.base_url(), &journal).await;
    assert_eq!(call(&p).await.0, 200);
    let learned = class_of(&get(&p, "/status").await);
    assert_eq!(learned["limits"]["requests"], 600, "{learned}");
    assert!(learned["remembered"].is_null(), "learned live: {learned}");
    p.shutdown().await;
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(
        text.contains("\"event\":\"beliefs\"") && text.contains(&fp),
        "{text}"
    );
    assert!(!text.contains(KEY), "no key in the journal");

    // The restart starts from them, before any answer: shown remembered.
    let p = start(&mock.base_url(), &journal).await;
    let status = get(&p, "/status").await;
    let recalled = class_of(&status);
    assert_eq!(recalled["limits"]["requests"], 600, "{status}");
    assert_eq!(recalled["limit_sources"]["requests"], "stated", "{status}");
    assert!(recalled["remembered"]["age_s"].is_u64(), "{status}");

    // Forgotten: learned from nothing again, and after the next restart
    // too.
    let (code, body) = admin(&p, "POST", &format!("/forget?key={fp}"), true).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["forgot"], fp.as_str(), "{body}");
    let forgot = class_of(&get(&p, "/status").await);
    assert!(forgot["limits"]["requests"].is_null(), "{forgot}");
    let (code, _) = admin(&p, "POST", "/forget?key=fp-00000000000000ff", true).await;
    assert_eq!(code, 404, "a key never seen");
    p.shutdown().await;
    let p = start(&mock.base_url(), &journal).await;
    let status = get(&p, "/status").await;
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    let classes = &v["keys"][0]["classes"][0];
    assert!(
        classes.is_null() || classes["limits"]["requests"].is_null(),
        "nothing remembered after /forget: {status}"
    );
    p.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The journal's lines other than what keys learned (`beliefs`).
fn not_beliefs(journal: &std::path::Path) -> String {
    std::fs::read_to_string(journal)
        .unwrap()
        .lines()
        .filter(|l| !l.contains("\"event\":\"beliefs\""))
        .map(|l| format!("{l}\n"))
        .collect()
}
