//! The listeners' bounds, black-box over raw TCP: a slow header and an
//! idle keep-alive connection are closed at their (short, test-set)
//! timeouts while a request waiting for admission far longer is not, nor a
//! stream with long gaps between its events; at the connection cap the
//! connections idle longest make room for new ones, and only busy ones
//! hold new connections back (said in the logs); many large uploads stay
//! within the body-memory bound.

use ratewise_mock::{Fault, FaultRule, MockConfig, MockServer};
use ratewise_proxy::config::{Flags, ProxyConfig};
use ratewise_proxy::Running;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY: &str = "sk-ant-api03-test-BOUNDS";
const BODY: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;

/// Logs captured for the cap's warning (one subscriber for this binary).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logs() -> Captured {
    static LOGS: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let c = Captured::default();
        let w = c.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || w.clone())
            .init();
        c
    })
    .clone()
}

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
    config.admin = "127.0.0.1:0".parse().unwrap();
    ratewise_proxy::start(config).await.expect("proxy starts")
}

fn request(body: &str) -> String {
    format!(
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-api-key: {KEY}\r\nx-ratewise-deadline-ms: 600000\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Reads until the connection closes; `None` if it is still open after
/// `limit` (a bound against a hang, far above the timeouts tested).
async fn closed_within(s: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let read = tokio::time::timeout(limit, async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.ok().map(|()| got)
}

/// Reads one whole answer (headers and a `content-length` body).
async fn read_answer(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).await.expect("read");
        assert!(
            n > 0,
            "closed before a whole answer: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                return text;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_a_header_is_closed_at_the_header_read_timeout() {
    let mock = MockServer::start(roomy()).await.unwrap();
    // Idle connections may stay a minute; a head must come within 200 ms.
    let p = proxy(
        &mock.base_url(),
        "[bounds]\nheader_read_timeout_ms = 200\nidle_timeout_ms = 60000\n",
    )
    .await;
    let mut silent = TcpStream::connect(p.addr).await.unwrap();
    let mut slow = TcpStream::connect(p.addr).await.unwrap();
    slow.write_all(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-")
        .await
        .unwrap();
    assert!(
        closed_within(&mut slow, Duration::from_secs(20))
            .await
            .is_some(),
        "half a header: closed"
    );
    // The header timeout has passed; a connection that sent nothing is
    // idle, not late, and stays (its own bound is a minute).
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        closed_within(&mut silent, Duration::from_millis(100))
            .await
            .is_none(),
        "idle, under its own timeout: open"
    );
    silent.write_all(request(BODY).as_bytes()).await.unwrap();
    assert!(read_answer(&mut silent).await.starts_with("HTTP/1.1 200"));
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_but_a_waiting_job_is_not() {
    let mock = MockServer::start(roomy()).await.unwrap();
    // 600 requests a minute, ramping up from 10 %: once the first few are
    // through, a request waits about a second for admission — longer than
    // the idle timeout.
    let p = proxy(
        &mock.base_url(),
        "[limits]\nrequests = 600\n[bounds]\nheader_read_timeout_ms = 30000\nidle_timeout_ms = 300\n",
    )
    .await;

    // Connected, sends nothing.
    let mut silent = TcpStream::connect(p.addr).await.unwrap();

    // A request answered, then the connection left idle (keep-alive).
    let mut idle = TcpStream::connect(p.addr).await.unwrap();
    idle.write_all(request(BODY).as_bytes()).await.unwrap();
    let first = read_answer(&mut idle).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");

    // Requests until one waits for admission (the ramp may let a few
    // through at once).
    let mut waiting = None;
    for _ in 0..20 {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(request(BODY).as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        if p.app.metrics.waiting.load(Ordering::Relaxed) == 1 {
            waiting = Some(s);
            break;
        }
        assert!(read_answer(&mut s).await.starts_with("HTTP/1.1 200"));
    }
    let mut waiting = waiting.expect("a request waits for admission");
    let sent_before = mock.records().len();

    let limit = Duration::from_secs(20);
    let got = closed_within(&mut silent, limit).await;
    assert_eq!(
        got.as_deref(),
        Some(&b""[..]),
        "silent: closed, nothing written"
    );
    assert!(
        closed_within(&mut idle, limit).await.is_some(),
        "idle keep-alive: closed"
    );

    // The idle timeout has passed; the waiting job's connection is still
    // open and its caller gets its answer.
    let still_waiting = p.app.metrics.waiting.load(Ordering::Relaxed);
    let answer = read_answer(&mut waiting).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        still_waiting, 1,
        "it was waiting for admission while the others were closed"
    );
    assert_eq!(mock.records().len(), sent_before + 1);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_holds_new_connections_back_while_all_are_busy_and_says_so() {
    let logs = logs();
    let mock = MockServer::start(roomy()).await.unwrap();
    // The first two requests take 3 s upstream.
    mock.set_faults(vec![FaultRule::nth(Fault::Stall { ms: 3000 }, [1, 2])]);
    let p = proxy(
        &mock.base_url(),
        "[bounds]\nmax_connections = 2\nidle_timeout_ms = 60000\nheader_read_timeout_ms = 30000\n",
    )
    .await;
    let mut a = TcpStream::connect(p.addr).await.unwrap();
    let mut b = TcpStream::connect(p.addr).await.unwrap();
    a.write_all(request(BODY).as_bytes()).await.unwrap();
    b.write_all(request(BODY).as_bytes()).await.unwrap();
    until("two requests in progress", || {
        p.app.metrics.in_flight.load(Ordering::Relaxed) == 2
    })
    .await;

    // A third, while both have a request in progress: the kernel takes it
    // into the backlog; the proxy does not serve it, and closes neither.
    let mut c = TcpStream::connect(p.addr).await.unwrap();
    c.write_all(request(BODY).as_bytes()).await.unwrap();
    let mut buf = [0u8; 16];
    let early = tokio::time::timeout(Duration::from_millis(500), c.read(&mut buf)).await;
    assert!(
        early.is_err(),
        "beyond the cap, every connection busy: not served"
    );
    let text = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    assert!(text.contains("connection cap reached"), "{text}");

    // Both are answered; idle then, one is closed to admit the third.
    assert!(read_answer(&mut a).await.starts_with("HTTP/1.1 200"));
    assert!(read_answer(&mut b).await.starts_with("HTTP/1.1 200"));
    let answer = read_answer(&mut c).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(mock.records().len(), 3);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_above_the_cap_never_stall_a_new_request() {
    let mock = MockServer::start(roomy()).await.unwrap();
    // Idle connections would stay ten minutes: before, a request beyond
    // the cap waited for that.
    let p = proxy(
        &mock.base_url(),
        "[bounds]\nmax_connections = 4\nidle_timeout_ms = 600000\nheader_read_timeout_ms = 30000\n",
    )
    .await;
    // Two connections used once, idle between requests since.
    let mut used = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(request(BODY).as_bytes()).await.unwrap();
        assert!(read_answer(&mut s).await.starts_with("HTTP/1.1 200"));
        used.push(s);
    }
    // Four opened and never used: six idle connections against a cap of
    // four, all held open by this side.
    let mut fresh = Vec::new();
    for _ in 0..4 {
        fresh.push(TcpStream::connect(p.addr).await.unwrap());
    }
    // A new request is answered at once (the bound is against a hang:
    // the old behaviour waited the ten-minute idle timeout).
    let mut new = TcpStream::connect(p.addr).await.unwrap();
    new.write_all(request(BODY).as_bytes()).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(5), read_answer(&mut new))
        .await
        .expect("served while the idle connections are open");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // The ones closed to make room are the idle longest: the two used
    // first (idle since their answers), then the first never used.
    let limit = Duration::from_secs(5);
    for (i, s) in used.iter_mut().enumerate() {
        let got = closed_within(s, limit).await;
        assert_eq!(
            got.as_deref(),
            Some(&b""[..]),
            "used {i}: closed, nothing written"
        );
    }
    let got = closed_within(&mut fresh[0], limit).await;
    assert_eq!(got.as_deref(), Some(&b""[..]), "fresh 0: closed");
    // The others stay open and serve (nothing else would close them for
    // ten minutes).
    for (i, s) in fresh.iter_mut().enumerate().skip(1) {
        assert!(
            closed_within(s, Duration::from_millis(200)).await.is_none(),
            "fresh {i}: open"
        );
    }
    fresh[3].write_all(request(BODY).as_bytes()).await.unwrap();
    assert!(read_answer(&mut fresh[3]).await.starts_with("HTTP/1.1 200"));
    new.write_all(request(BODY).as_bytes()).await.unwrap();
    assert!(read_answer(&mut new).await.starts_with("HTTP/1.1 200"));
    assert_eq!(mock.records().len(), 5);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_large_uploads_stay_within_the_body_memory_bound() {
    let mock = MockServer::start(roomy()).await.unwrap();
    // The upstream takes its time: the bodies sent stay held meanwhile.
    mock.set_faults(vec![FaultRule::always(Fault::Stall { ms: 4000 })]);
    // Room for two 400 kB bodies at once, not three.
    let p = proxy(
        &mock.base_url(),
        "[bounds]\nmax_request_body = 500000\nmax_body_memory = 1000000\nbody_timeout_ms = 1000\n",
    )
    .await;
    let big = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(399_900)
    );
    let upload = |body: Option<&str>| {
        let head = format!(
            "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-api-key: {KEY}\r\ncontent-length: {}\r\n\r\n",
            big.len()
        );
        let body = body.map(str::to_owned);
        let addr = p.addr;
        async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(head.as_bytes()).await.unwrap();
            match body {
                Some(b) => s.write_all(b.as_bytes()).await.unwrap(),
                // The start of a body, never the rest.
                None => s.write_all(&[b'{'; 1000]).await.unwrap(),
            }
            s
        }
    };
    // Two whole uploads, held while their sends are out.
    let mut held = vec![upload(Some(&big)).await, upload(Some(&big)).await];
    let room = 1_000_000 - 2 * big.len();
    until("two bodies held", || {
        p.app.body_memory.available_permits() == room
    })
    .await;
    // Three more: no room. One of them chunked, its size unknown ahead:
    // held as it arrives, until there is no room for the next piece.
    let mut refused = Vec::new();
    for _ in 0..2 {
        refused.push(upload(None).await);
    }
    let mut chunked = TcpStream::connect(p.addr).await.unwrap();
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-api-key: {KEY}\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n",
        300_000
    );
    chunked.write_all(head.as_bytes()).await.unwrap();
    chunked.write_all(&[b'x'; 300_000]).await.unwrap();
    chunked.write_all(b"\r\n").await.unwrap();
    refused.push(chunked);
    for s in &mut refused {
        let answer = read_answer(s).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("overloaded_error"), "{answer}");
        assert!(answer.contains("max_body_memory"), "{answer}");
    }
    for s in &mut held {
        assert!(read_answer(s).await.starts_with("HTTP/1.1 200"));
    }
    assert_eq!(mock.records().len(), 2, "the refused ones were never sent");
    // All room is back.
    until("the bodies' room is back", || {
        p.app.body_memory.available_permits() == 1_000_000
    })
    .await;
    p.shutdown().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_with_gaps_longer_than_the_idle_timeout_is_not_idle() {
    let mut cfg = roomy();
    // 400 ms between deltas; the idle timeout is 300 ms.
    cfg.latency.per_output_token_ms = 400.0;
    let mock = MockServer::start(cfg).await.unwrap();
    let p = proxy(
        &mock.base_url(),
        "[bounds]\nidle_timeout_ms = 300\nheader_read_timeout_ms = 300\n",
    )
    .await;
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let head = request(body).replace("HTTP/1.1\r\n", "HTTP/1.1\r\nconnection: close\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let got = closed_within(&mut s, Duration::from_secs(30))
        .await
        .expect("the stream ends");
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("message_stop"), "streamed to its end: {text}");
    p.shutdown().await;
}
