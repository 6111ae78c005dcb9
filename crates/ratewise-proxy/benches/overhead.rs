//! What `ratewise proxy` adds on the wire, side by side with a bare hyper
//! pass-through proxy in the same run, against an upstream on loopback that
//! answers at once:
//!
//! * open loop at a fixed rate (1,000 requests/s): latency p50 / p99 of
//!   each path, and what each proxy adds over calling the upstream
//!   directly;
//! * closed loop, 64 concurrent callers: the most requests per second;
//! * the ratewise proxy with its journal off and on.
//!
//! `cargo bench -p ratewise-proxy --bench overhead` (about 40 s). A plain
//! binary that prints figures; nothing is asserted. Everything shares this
//! machine's cores (load, proxies and upstream), so compare the rows of
//! one run, not runs of different machines. `RATEWISE_BENCH_SECS` sets the
//! seconds per measurement (default 4).

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use ratewise_proxy::config::{Flags, ProxyConfig};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

// The allocator the `ratewise` binary ships with.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const OK: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":12,"output_tokens":3}}"#;
const BODY: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;

type Http = Client<HttpConnector, Full<Bytes>>;

fn client() -> Http {
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(256)
        .build(c)
}

/// Serves `f` on an ephemeral loopback port.
async fn serve<F, Fut>(f: F) -> SocketAddr
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let _ = tcp.set_nodelay(true);
            let f = f.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let f = f.clone();
                    async move { Ok::<_, std::convert::Infallible>(f(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

/// The upstream: answers every request at once, like a provider with room.
async fn upstream() -> SocketAddr {
    serve(|req: Request<Incoming>| async move {
        let _ = req.into_body().collect().await;
        Response::builder()
            .header("content-type", "application/json")
            .header("request-id", "req_bench")
            .body(Full::new(Bytes::from_static(OK.as_bytes())))
            .unwrap()
    })
    .await
}

/// The bare pass-through: forwards each request with a pooled hyper-util
/// client and returns the answer, nothing else.
async fn bare(up: SocketAddr) -> SocketAddr {
    let c = client();
    serve(move |req: Request<Incoming>| {
        let c = c.clone();
        async move {
            let (mut parts, body) = req.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            let pq = parts
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned();
            parts.uri = format!("http://{up}{pq}").parse().unwrap();
            parts.headers.remove(http::header::HOST);
            let resp = c
                .request(Request::from_parts(parts, Full::new(body)))
                .await
                .unwrap();
            let (parts, body) = resp.into_parts();
            Response::from_parts(parts, Full::new(body.collect().await.unwrap().to_bytes()))
        }
    })
    .await
}

async fn ratewise(up: SocketAddr, journal: Option<std::path::PathBuf>) -> ratewise_proxy::Running {
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:0".into()),
        upstream: Some(format!("http://{up}")),
        journal,
        ..Flags::default()
    };
    // Limits far above the load: pacing never binds, so the figures are
    // the proxy's own cost.
    let toml =
        "[limits]\nrequests_per_minute = 1000000000\ninput_tokens_per_minute = 1000000000\noutput_tokens_per_minute = 1000000000\n";
    let mut config = ProxyConfig::from_toml(&flags, toml, |_| None).unwrap();
    config.layer.admission.ramp.warm_start = true;
    ratewise_proxy::start(config).await.unwrap()
}

fn request(addr: SocketAddr) -> Request<Full<Bytes>> {
    Request::post(format!("http://{addr}/v1/messages"))
        .header("content-type", "application/json")
        .header("x-api-key", "sk-ant-bench")
        .body(Full::new(Bytes::from_static(BODY.as_bytes())))
        .unwrap()
}

async fn once(c: &Http, addr: SocketAddr) -> Duration {
    let t = Instant::now();
    let resp = c.request(request(addr)).await.expect("answer");
    assert!(resp.status().is_success(), "{}", resp.status());
    let _ = resp.into_body().collect().await;
    t.elapsed()
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Open loop: one request every 1/rate, whatever the answers do.
async fn open_loop(addr: SocketAddr, rate: u32, secs: u64) -> Vec<Duration> {
    let c = client();
    // Warm the pool.
    for _ in 0..50 {
        once(&c, addr).await;
    }
    let period = Duration::from_secs(1) / rate;
    let n = rate as u64 * secs;
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(n as usize);
    for i in 0..n {
        tokio::time::sleep_until(start + period * i as u32).await;
        let c = c.clone();
        tasks.push(tokio::spawn(async move { once(&c, addr).await }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out.sort();
    out
}

/// Closed loop: `callers` each send the next request when the last one
/// is answered; requests per second.
async fn closed_loop(addr: SocketAddr, callers: usize, secs: u64) -> f64 {
    let c = client();
    for _ in 0..50 {
        once(&c, addr).await;
    }
    let end = Instant::now() + Duration::from_secs(secs);
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    let t0 = Instant::now();
    for _ in 0..callers {
        let c = c.clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                once(&c, addr).await;
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.load(std::sync::atomic::Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let secs: u64 = std::env::var("RATEWISE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let up = upstream().await;
        let bare = bare(up).await;
        let journal = std::env::temp_dir().join(format!("ratewise-bench-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&journal);
        let rw = ratewise(up, None).await;
        let rwj = ratewise(up, Some(journal.clone())).await;
        let paths = [
            ("direct (no proxy)", up),
            ("bare hyper pass-through", bare),
            ("ratewise proxy", rw.addr),
            ("ratewise proxy + journal", rwj.addr),
        ];
        println!("open loop at 1000 requests/s for {secs} s, then closed loop with 64 callers for {secs} s");
        println!("| path | p50 ms | p99 ms | added p50 ms | added p99 ms | closed-loop req/s |");
        println!("|---|---|---|---|---|---|");
        let mut base = (Duration::ZERO, Duration::ZERO);
        let mut rows = Vec::new();
        for (name, addr) in paths {
            let lat = open_loop(addr, 1000, secs).await;
            let (p50, p99) = (pct(&lat, 0.5), pct(&lat, 0.99));
            if name.starts_with("direct") {
                base = (p50, p99);
            }
            let rps = closed_loop(addr, 64, secs).await;
            println!(
                "| {name} | {:.3} | {:.3} | {:.3} | {:.3} | {:.0} |",
                ms(p50),
                ms(p99),
                ms(p50.saturating_sub(base.0)),
                ms(p99.saturating_sub(base.1)),
                rps
            );
            rows.push((name, p99.saturating_sub(base.1), rps));
        }
        let bare_rps = rows[1].2;
        for (name, added_p99, rps) in &rows[2..] {
            println!(
                "{name}: {:.2}x the bare pass-through's requests/s; added p99 {:.3} ms (vs bare {:.3} ms)",
                rps / bare_rps,
                ms(*added_p99),
                ms(rows[1].1)
            );
        }
        rw.shutdown().await;
        rwj.shutdown().await;
        let _ = std::fs::remove_file(&journal);
    });
}
