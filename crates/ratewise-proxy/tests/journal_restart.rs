//! `--journal`: after a crash, attempts that started and never ended are
//! reported as unknown outcomes (once), and a stop survives the restart.

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
        writeln!(f, r#"{{"event":"attempt_started","job_id":"crashed-7","attempt":2,"at_ms":1796000000000}}"#).unwrap();
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
    let (code, action) = call(&p).await;
    assert_eq!(action, "stop_queue", "{code}");
    assert_eq!(mock.records().len(), sends, "a stopped key sends nothing");
    p.shutdown().await;

    // Reported once: the next start has no unknown outcome left.
    let p = start(&mock.base_url(), &journal).await;
    let status = get(&p, "/status").await;
    assert!(!status.contains("crashed-7"), "{status}");
    p.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
