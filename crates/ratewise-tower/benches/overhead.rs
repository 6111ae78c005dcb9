//! Layer overhead versus the bare client on loopback.
//!
//! A tiny in-process hyper server answers every request with 200 and a
//! small JSON body carrying `usage`. The same hyper-util client sends N
//! sequential requests bare and through `RetryLayer`, in alternating
//! rounds of the same run; the report gives µs per request for each, the
//! difference (the layer's overhead: buffering, admission, classification,
//! metering, tracing spans without a subscriber) and the ratio. Target:
//! under 5 µs added per request (the median); the bench exits 1 above it.
//! Runs in a few seconds: `cargo bench -p ratewise-tower --bench overhead`.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use ratewise_core::Provider;
use ratewise_tower::RetryLayer;
use std::convert::Infallible;
use std::time::{Duration, Instant};
use tower::{Layer, Service, ServiceExt};

const BODY: &[u8] = br#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":12,"output_tokens":5}}"#;
const REQUEST: &[u8] = br#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}"#;

async fn serve() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let svc = service_fn(|req: Request<hyper::body::Incoming>| async move {
                    let _ = req.into_body().collect().await;
                    Ok::<_, Infallible>(
                        Response::builder()
                            .header("content-type", "application/json")
                            .header("request-id", "req_bench")
                            .body(Full::new(Bytes::from_static(BODY)))
                            .unwrap(),
                    )
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

fn request(url: &str) -> Request<Full<Bytes>> {
    Request::post(url)
        .header("content-type", "application/json")
        .header("x-api-key", "sk-bench")
        .body(Full::new(Bytes::from_static(REQUEST)))
        .unwrap()
}

async fn round<S>(svc: &mut S, url: &str, n: usize) -> Duration
where
    S: Service<Request<Full<Bytes>>>,
    S::Response: IntoBody,
    S::Error: std::fmt::Debug,
{
    let start = Instant::now();
    for _ in 0..n {
        let resp = svc.ready().await.unwrap().call(request(url)).await.unwrap();
        resp.drain().await;
    }
    start.elapsed()
}

trait IntoBody {
    async fn drain(self);
}

impl<B> IntoBody for Response<B>
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    async fn drain(self) {
        let _ = self.into_body().collect().await.unwrap();
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let addr = serve().await;
        let url = format!("http://{addr}/v1/messages");
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let mut bare = client.clone();
        let mut layered = RetryLayer::builder()
            .provider(Provider::Anthropic)
            .build()
            .unwrap()
            .layer(client);

        let n = 2_000;
        let rounds = 9;
        // Warm up connections and caches.
        round(&mut bare, &url, 500).await;
        round(&mut layered, &url, 500).await;
        let mut bare_us = Vec::new();
        let mut layered_us = Vec::new();
        let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
        for r in 0..rounds {
            // Alternate which goes first, so drift in machine load is shared.
            if r % 2 == 0 {
                bare_us.push(per(round(&mut bare, &url, n).await));
                layered_us.push(per(round(&mut layered, &url, n).await));
            } else {
                layered_us.push(per(round(&mut layered, &url, n).await));
                bare_us.push(per(round(&mut bare, &url, n).await));
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v[v.len() / 2]
        };
        let b = median(&mut bare_us);
        let l = median(&mut layered_us);
        let (bmin, lmin) = (bare_us[0], layered_us[0]);
        println!("layer overhead on loopback ({rounds} rounds x {n} sequential requests, medians)");
        println!("  bare client      {b:8.2} µs/request");
        println!("  with RetryLayer  {l:8.2} µs/request");
        println!(
            "  added            {:8.2} µs/request (target < 5 µs)",
            l - b
        );
        println!("  ratio            {:8.3}", l / b);
        println!(
            "  (best rounds: bare {bmin:.2} µs, layered {lmin:.2} µs, added {:.2} µs)",
            lmin - bmin
        );
        if l - b >= MAX_ADDED_US {
            eprintln!(
                "FAIL: the layer added {:.2} µs/request, target under {MAX_ADDED_US} µs",
                l - b
            );
            std::process::exit(1);
        }
    });
}

/// Target: median µs the layer adds per request.
const MAX_ADDED_US: f64 = 5.0;
