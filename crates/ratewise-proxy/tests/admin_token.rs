//! The admin token generated at first start: into a file only its user
//! can read, beside the journal; its path is logged, the token never is —
//! not at start, not when a request with it (or a wrong one) is refused.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
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

async fn get(addr: std::net::SocketAddr, path: &str, auth: &str, host: &str) -> u16 {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::get(format!("http://{addr}{path}"))
        .header("authorization", auth)
        .header("host", host)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let s = resp.status().as_u16();
    resp.into_body().collect().await.unwrap();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_file_is_made_0600_and_the_token_never_logged() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .init();
    let dir = std::env::temp_dir().join(format!("ratewise-admin-token-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let journal = dir.join("journal.jsonl");
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:1".into()),
        upstream: Some("http://127.0.0.1:9".into()),
        journal: Some(journal.clone()),
        ..Flags::default()
    };
    let mut config = ProxyConfig::from_toml(&flags, "", |_| None).unwrap();
    config.admin = "127.0.0.1:0".parse().unwrap();
    let p = ratewise_proxy::start(config.clone()).await.unwrap();
    let path = dir.join("journal.jsonl.admin-token");
    let token = std::fs::read_to_string(&path)
        .expect("the token file")
        .trim()
        .to_owned();
    assert_eq!(token, p.app.admin.token());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
    let host = p.admin_addr.to_string();
    let bearer = format!("Bearer {token}");
    assert_eq!(get(p.admin_addr, "/status", &bearer, &host).await, 200);
    // Refusals with the right token (wrong Host) and a near miss.
    assert_eq!(
        get(p.admin_addr, "/status", &bearer, "evil.example").await,
        421
    );
    let near = format!("Bearer {token}0");
    assert_eq!(get(p.admin_addr, "/stop?key=x", &near, &host).await, 401);
    p.shutdown().await;

    // A restart reads the same token back.
    let p = ratewise_proxy::start(config).await.unwrap();
    assert_eq!(p.app.admin.token(), token);
    p.shutdown().await;

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("admin token generated"), "{logs}");
    assert!(
        logs.contains("journal.jsonl.admin-token"),
        "the path is logged: {logs}"
    );
    assert!(logs.contains("admin request refused"), "{logs}");
    assert!(!logs.contains(&token), "the token is never logged: {logs}");
    assert!(!logs.contains(&token[..16]), "nor a part of it: {logs}");
    let _ = std::fs::remove_dir_all(&dir);
}
