//! An HTTPS upstream, checked against a test CA given as the upstream's
//! `ca_file`: the proxy talks TLS (rustls) to it; without the CA it
//! refuses the upstream's certificate and says so in the provider's shape.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use ratewise_proxy::config::{Flags, ProxyConfig};
use std::sync::Arc;
use tokio::net::TcpListener;

const OK: &str = r#"{"type":"message","content":[],"usage":{"input_tokens":3,"output_tokens":4}}"#;

/// A test CA and a certificate for `localhost` it signed: (CA PEM, cert
/// DER, key DER).
fn test_pki() -> (String, Vec<u8>, Vec<u8>) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "ratewise test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let cert = leaf.signed_by(&key, &ca_cert, &ca_key).unwrap();
    (ca_cert.pem(), cert.der().to_vec(), key.serialize_der())
}

/// A TLS upstream on loopback answering every request with a success.
async fn tls_upstream(cert: Vec<u8>, key: Vec<u8>) -> u16 {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![rustls::pki_types::CertificateDer::from(cert)],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = service_fn(|_req: Request<hyper::body::Incoming>| async {
                    Ok::<_, std::convert::Infallible>(
                        Response::builder()
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from_static(OK.as_bytes())))
                            .unwrap(),
                    )
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    port
}

async fn call(addr: std::net::SocketAddr) -> (http::StatusCode, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::post(format!("http://{addr}/v1/messages"))
        .header("content-type", "application/json")
        .header("x-api-key", "sk-ant-tls")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[]}"#,
        )))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn proxy_to(port: u16, ca_file: Option<&std::path::Path>) -> ratewise_proxy::Running {
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:1".into()),
        ..Flags::default()
    };
    let mut toml = format!("[[upstream]]\nurl = \"https://localhost:{port}\"\n");
    if let Some(ca) = ca_file {
        toml.push_str(&format!("ca_file = {:?}\n", ca.display().to_string()));
    }
    // A failed TLS handshake is a connect failure: do not wait long.
    toml.push_str("[policy]\nmax_attempts = 1\n");
    let mut config = ProxyConfig::from_toml(&flags, &toml, |_| None).unwrap();
    config.admin = "127.0.0.1:0".parse().unwrap();
    ratewise_proxy::start(config).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upstream_signed_by_the_configured_ca_is_reached() {
    let (ca_pem, cert, key) = test_pki();
    let port = tls_upstream(cert, key).await;
    let dir = std::env::temp_dir().join(format!("ratewise-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();

    let p = proxy_to(port, Some(&ca_file)).await;
    let (status, body) = call(p.addr).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("usage"));
    p.shutdown().await;

    // Without the CA the certificate is refused: no send, a clear answer.
    let p = proxy_to(port, None).await;
    let (status, body) = call(p.addr).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("\"type\":\"error\""), "{body}");
    p.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_ca_file_without_certificates_is_a_start_error() {
    let dir = std::env::temp_dir().join(format!("ratewise-tls-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("empty.pem");
    std::fs::write(&ca_file, "not a certificate").unwrap();
    let up = ratewise_proxy::config::Upstream {
        name: "x".into(),
        url: "https://localhost:1".into(),
        provider: None,
        provider_source: Default::default(),
        paths: vec![],
        ca_file: Some(ca_file),
        roots: ratewise_proxy::config::Roots::Webpki,
    };
    let Err(e) = ratewise_proxy::upstream::client(&up) else {
        panic!("a CA file without certificates is refused")
    };
    assert!(e.to_string().contains("no PEM certificate"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
