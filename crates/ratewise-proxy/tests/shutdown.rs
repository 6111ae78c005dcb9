//! The shutdown, in process (the binary's SIGTERM is in ratewise-cli's
//! tests): every caller is answered — jobs waiting 503 at once, sends in
//! flight their upstream's answer — nothing is sent after the signal that
//! was not already on the wire (retries included), new requests get 503
//! with `connection: close`, `/healthz` says `draining`; what is still on
//! the wire at the end of the grace is answered 504 `hold_unknown` and
//! journaled as an unknown outcome, a stream gets an `error` event.

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_mock::{Fault, FaultRule, MockConfig, MockServer, RetryAfterFormat};
use ratewise_proxy::config::{Flags, ProxyConfig};
use ratewise_proxy::Running;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

const KEY: &str = "sk-ant-api03-test-SHUTDOWN";
const BODY: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
const STREAM: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

fn roomy() -> MockConfig {
    let mut cfg = MockConfig::default();
    cfg.anthropic_limits.requests_per_minute = Some(100_000);
    cfg.anthropic_limits.input_tokens_per_minute = Some(100_000_000);
    cfg.anthropic_limits.output_tokens_per_minute = Some(100_000_000);
    cfg
}

async fn proxy(upstream: &str, toml: &str, grace: Duration) -> Running {
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:1".into()),
        upstream: Some(upstream.into()),
        ..Flags::default()
    };
    let mut config = ProxyConfig::from_toml(&flags, toml, |_| None).expect("config");
    config.admin = "127.0.0.1:0".parse().unwrap();
    config.grace = grace;
    ratewise_proxy::start(config).await.expect("proxy starts")
}

#[derive(Debug)]
struct Answer {
    status: StatusCode,
    headers: http::HeaderMap,
    body: String,
}

async fn call(addr: SocketAddr, body: &'static str) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::post(format!("http://{addr}/v1/messages"))
        .header("content-type", "application/json")
        .header("x-api-key", KEY)
        .header("x-ratewise-deadline-ms", "600000")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap();
    let resp = client.request(req).await.expect("the proxy answers");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("a whole body").to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

async fn healthz(admin: SocketAddr) -> (StatusCode, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let resp = client
        .get(format!("http://{admin}/healthz").parse().unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..4_000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("never happened: {what}");
}

fn assert_shutting_down(a: &Answer) {
    assert_eq!(a.status, 503, "{a:?}");
    assert!(a.body.contains("shutting down"), "{a:?}");
    assert!(
        a.body.contains(r#""type":"error""#),
        "Anthropic's shape: {a:?}"
    );
    assert!(a.headers.contains_key("retry-after"), "{a:?}");
    assert_eq!(a.headers["connection"], "close", "{a:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_caller_is_answered_and_nothing_new_is_sent() {
    let mut cfg = roomy();
    // The send in flight takes a while.
    cfg.latency.first_byte_ms = 1500;
    let mock = MockServer::start(cfg).await.unwrap();
    // 20 requests a minute, ramping from 10 %: after the first, jobs wait
    // about 30 s for admission.
    let p = proxy(
        &mock.base_url(),
        "[limits]\nrequests = 20\n",
        Duration::from_secs(30),
    )
    .await;
    let (addr, admin, app) = (p.addr, p.admin_addr, p.app.clone());
    assert_eq!(healthz(admin).await, (StatusCode::OK, "ok\n".into()));

    let in_flight = tokio::spawn(call(addr, BODY));
    until("the first reached the upstream", || {
        mock.records().len() == 1
    })
    .await;
    let waiting: Vec<_> = (0..3).map(|_| tokio::spawn(call(addr, BODY))).collect();
    until("three wait for admission", || {
        app.metrics.waiting.load(Ordering::Relaxed) == 3
    })
    .await;

    let stopping = tokio::spawn(p.shutdown());
    until("draining", || app.drain.is_draining()).await;
    // The waiting ones: 503 at once — before the send in flight is back.
    for w in waiting {
        assert_shutting_down(&w.await.unwrap());
    }
    assert!(!in_flight.is_finished(), "the send in flight is still out");
    // New requests during the grace: 503, connection: close; the admin
    // answers, draining.
    assert_shutting_down(&call(addr, BODY).await);
    assert_eq!(
        healthz(admin).await,
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n".into())
    );
    // The one in flight: its upstream's answer.
    let a = in_flight.await.unwrap();
    assert_eq!(a.status, 200, "{a:?}");
    let stopped = stopping.await.unwrap();
    assert_eq!(stopped.cut, 0);
    assert_eq!(mock.records().len(), 1, "nothing sent after the signal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_is_not_sent_after_the_signal() {
    let mock = MockServer::start(roomy()).await.unwrap();
    // The first send gets a 429 that asks for 5 s: the job waits to retry.
    mock.set_faults(vec![FaultRule::nth(
        Fault::RetryAfter {
            format: RetryAfterFormat::Seconds,
            secs: 5,
        },
        [1],
    )]);
    let p = proxy(&mock.base_url(), "", Duration::from_secs(30)).await;
    let (addr, app) = (p.addr, p.app.clone());
    let job = tokio::spawn(call(addr, BODY));
    until("the first send reached the upstream", || {
        mock.records().len() == 1
    })
    .await;
    until("it waits to retry", || app.drain.wire.on_wire() == 0).await;
    let stopped = p.shutdown().await;
    assert_shutting_down(&job.await.unwrap());
    assert_eq!(stopped.cut, 0);
    // Longer than the retry's wait: still one send.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(mock.records().len(), 1, "the retry was never sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_on_the_wire_at_the_end_of_the_grace_is_held_unknown() {
    let mock = MockServer::start(roomy()).await.unwrap();
    mock.set_faults(vec![FaultRule::always(Fault::Stall { ms: 20_000 })]);
    let dir = std::env::temp_dir().join(format!("ratewise-shutdown-{}", std::process::id()));
    let _ = std::fs::remove_file(&dir);
    let toml = format!("journal = {:?}\n", dir.display().to_string());
    let p = proxy(&mock.base_url(), &toml, Duration::from_millis(300)).await;
    let addr = p.addr;
    let job = tokio::spawn(call(addr, BODY));
    until("on the wire", || mock.records().len() == 1).await;
    let stopped = p.shutdown().await;
    let a = job.await.unwrap();
    assert_eq!(a.status, 504, "{a:?}");
    assert_eq!(a.headers["x-ratewise-action"], "hold_unknown", "{a:?}");
    assert!(a.body.contains("outcome is unknown"), "{a:?}");
    assert_eq!(stopped.cut, 1);
    let journal = std::fs::read_to_string(&dir).unwrap();
    let ended = journal
        .lines()
        .find(|l| l.contains("attempt_ended"))
        .unwrap_or_else(|| panic!("{journal}"));
    assert!(ended.contains("outcome_unknown"), "{journal}");
    assert!(ended.contains("hold_unknown"), "{journal}");
    let _ = std::fs::remove_file(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_at_the_end_of_the_grace_gets_an_error_event() {
    let mut cfg = roomy();
    // A slow stream: many tokens, a while between deltas.
    cfg.latency.per_output_token_ms = 100.0;
    let mock = MockServer::start(cfg).await.unwrap();
    let p = proxy(&mock.base_url(), "", Duration::from_millis(500)).await;
    let addr = p.addr;
    let stream = tokio::spawn(call(addr, STREAM));
    until("on the wire", || mock.records().len() == 1).await;
    // Committed: the first events are out.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopped = p.shutdown().await;
    let a = stream.await.unwrap();
    assert_eq!(a.status, 200);
    assert!(a.body.contains("message_start"), "{}", a.body);
    assert!(
        !a.body.contains("message_stop"),
        "cut before its end: {}",
        a.body
    );
    // The provider's error event, last, and a clean end (the body was
    // read whole).
    let last = a.body.trim_end().rsplit("\n\n").next().unwrap();
    assert!(last.starts_with("event: error\ndata: "), "{}", a.body);
    assert!(last.contains(r#""type":"api_error""#), "{}", a.body);
    assert_eq!(stopped.cut, 1);
}

/// Two jobs when the drain starts: one on the wire, one whose request the
/// client still holds waiting for a connection (its upstream takes the TCP
/// connection and never answers the TLS handshake). The waiting one
/// reached nothing: it is answered "not sent" at once — before the one on
/// the wire is back — its reservation given back and its attempt
/// journaled as ended, so no restart reads it as an unknown outcome. The
/// one on the wire runs on and gets its answer; nothing is cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_waiting_for_a_connection_at_the_signal_is_answered_not_sent() {
    let mut cfg = roomy();
    // The send on the wire takes a while.
    cfg.latency.first_byte_ms = 2000;
    let mock = MockServer::start(cfg).await.unwrap();
    // An upstream that never completes a connection.
    let held = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let held_port = held.local_addr().unwrap().port();
    let (hello_tx, hello_rx) = tokio::sync::oneshot::channel();
    let holder = tokio::spawn(async move {
        let (mut sock, _) = held.accept().await.unwrap();
        // The client's TLS hello: it is connecting. Never answered.
        let mut buf = [0u8; 512];
        let n = tokio::io::AsyncReadExt::read(&mut sock, &mut buf)
            .await
            .unwrap();
        let _ = hello_tx.send(n);
        std::future::pending::<()>().await;
        drop(sock);
    });
    let journal = std::env::temp_dir().join(format!(
        "ratewise-shutdown-connecting-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&journal);
    let toml = format!(
        "journal = {:?}\n[[upstream]]\nname = \"held\"\nurl = \"https://127.0.0.1:{held_port}\"\n",
        journal.display().to_string()
    );
    let p = proxy(&mock.base_url(), &toml, Duration::from_secs(15)).await;
    let (addr, app) = (p.addr, p.app.clone());

    let on_the_wire = tokio::spawn(call(addr, BODY));
    until("the first reached the upstream", || {
        mock.records().len() == 1
    })
    .await;
    let connecting = tokio::spawn(async move {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let req = Request::post(format!("http://{addr}/v1/messages"))
            .header("content-type", "application/json")
            // A key of its own: not admitted behind the first.
            .header("x-api-key", "sk-ant-api03-test-SHUTDOWN-HELD")
            .header("x-ratewise-deadline-ms", "600000")
            .header("x-ratewise-upstream", "held")
            .body(Full::new(Bytes::from_static(BODY.as_bytes())))
            .unwrap();
        let resp = client.request(req).await.expect("the proxy answers");
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("a whole body").to_bytes();
        Answer {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    });
    let hello = tokio::time::timeout(Duration::from_secs(20), hello_rx)
        .await
        .expect("the second connects")
        .unwrap();
    assert!(hello > 0);
    assert_eq!(app.drain.wire.on_wire(), 1, "only the first is on the wire");

    let stopping = tokio::spawn(p.shutdown());
    let a = connecting.await.unwrap();
    assert_shutting_down(&a);
    assert!(
        !on_the_wire.is_finished(),
        "answered before the send on the wire is back"
    );
    let a = on_the_wire.await.unwrap();
    assert_eq!(a.status, 200, "{a:?}");
    let stopped = stopping.await.unwrap();
    assert_eq!(stopped.cut, 0, "nothing was cut");
    assert_eq!(mock.records().len(), 1);
    let recovered = ratewise_proxy::journal::recover(&journal).unwrap();
    assert!(
        recovered.unknown.is_empty(),
        "no unknown outcome after a restart: {:?}\n{}",
        recovered.unknown,
        std::fs::read_to_string(&journal).unwrap_or_default()
    );
    let text = std::fs::read_to_string(&journal).unwrap();
    assert_eq!(text.matches("attempt_started").count(), 2, "{text}");
    assert_eq!(text.matches("attempt_ended").count(), 2, "{text}");
    holder.abort();
    let _ = std::fs::remove_file(&journal);
}
