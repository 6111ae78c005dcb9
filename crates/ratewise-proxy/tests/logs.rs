//! The proxy's logs carry no secrets and no bodies: not the caller's key
//! (only its fingerprint), not a cookie, not what was asked or answered.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_mock::{MockConfig, MockServer};
use ratewise_proxy::config::{Flags, ProxyConfig};
use std::io::Write;
use std::sync::{Arc, Mutex};

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

const KEY: &str = "sk-ant-api03-VERYSECRET-abcd";
const COOKIE: &str = "session=COOKIESECRET";
const PROMPT: &str = "PROMPTSECRET tell me";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_hold_fingerprints_never_keys_cookies_or_bodies() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .init();

    let mut cfg = MockConfig::default();
    cfg.anthropic_limits.requests_per_minute = Some(100_000);
    let mock = MockServer::start(cfg).await.unwrap();
    mock.set_spend_cap(Some(0.0));
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:1".into()),
        upstream: Some(mock.base_url()),
        ..Flags::default()
    };
    // `requests` is the old spelling of `requests_per_minute`: read, and
    // said at start.
    let mut config =
        ProxyConfig::from_toml(&flags, "[limits]\nrequests = 100000\n", |_| None).unwrap();
    assert_eq!(config.layer.admission.limits.requests, Some(100_000));
    config.admin = "127.0.0.1:0".parse().unwrap();
    let p = ratewise_proxy::start(config).await.unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let body = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{{"role":"user","content":"{PROMPT}"}}]}}"#
    );
    for auth in [
        ("x-api-key", KEY.to_owned()),
        ("authorization", format!("Bearer {KEY}")),
    ] {
        for _ in 0..2 {
            let req = Request::post(format!("http://{}/v1/messages", p.addr))
                .header("content-type", "application/json")
                .header(auth.0, auth.1.as_str())
                .header("cookie", COOKIE)
                .body(Full::new(Bytes::from(body.clone())))
                .unwrap();
            let resp = client.request(req).await.unwrap();
            resp.into_body().collect().await.unwrap();
        }
    }
    p.shutdown().await;
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("stop_queue"), "the run was logged: {logs}");
    let warned = logs
        .lines()
        .find(|l| l.contains("requests is the old spelling of requests_per_minute"))
        .unwrap_or_else(|| panic!("the old [limits] word is said at start: {logs}"));
    assert!(warned.contains("\"level\":\"WARN\""), "{warned}");
    assert!(
        logs.contains(&ratewise_proxy::keys::fingerprint(KEY)),
        "{logs}"
    );
    for secret in ["VERYSECRET", "COOKIESECRET", "PROMPTSECRET", "sk-ant-api03"] {
        assert!(!logs.contains(secret), "{secret} leaked into the logs");
    }
}
