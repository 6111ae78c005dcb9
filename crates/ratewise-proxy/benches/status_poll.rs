//! Whether reading `/status` holds up the request path: p99 latency of a
//! normal proxied request (to an upstream on loopback that answers at
//! once) with 25,000 keys in the key table, while `/status` is polled back
//! to back, against the same with no polling; and the ratio.
//!
//! `cargo bench -p ratewise-proxy --bench status_poll` (about 20 s). A
//! plain binary that prints figures; nothing is asserted. The load, the
//! proxy, the poller and the upstream share this machine's cores, so
//! compare the rows of one run. `RATEWISE_BENCH_SECS` sets the seconds per
//! measurement (default 5), `RATEWISE_BENCH_KEYS` the keys (default
//! 25,000).

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use ratewise_core::admit::AdmitRequest;
use ratewise_proxy::config::{Flags, ProxyConfig};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const OK: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":12,"output_tokens":3}}"#;
const BODY: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;
/// Requests a second in the open loop.
const RATE: u32 = 200;

type Http = Client<HttpConnector, Full<Bytes>>;

fn client() -> Http {
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(256)
        .build(c)
}

async fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let _ = tcp.set_nodelay(true);
            tokio::spawn(async move {
                let svc = service_fn(|req: Request<Incoming>| async move {
                    let _ = req.into_body().collect().await;
                    Ok::<_, std::convert::Infallible>(
                        Response::builder()
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from_static(OK.as_bytes())))
                            .unwrap(),
                    )
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

async fn proxy(up: SocketAddr, keys: usize) -> ratewise_proxy::Running {
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:0".into()),
        upstream: Some(format!("http://{up}")),
        ..Flags::default()
    };
    let toml = format!(
        "[limits]\nrequests_per_minute = 1000000000\ninput_tokens_per_minute = 1000000000\noutput_tokens_per_minute = 1000000000\n\
         [key_table]\nmax_keys = {}\nidle_s = 86400\n",
        keys + 1000
    );
    let mut config = ProxyConfig::from_toml(&flags, &toml, |_| None).unwrap();
    config.layer.admission.ramp.warm_start = true;
    let p = ratewise_proxy::start(config).await.unwrap();
    // The table filled as callers' keys fill it: each key noted, its scope
    // made, one admission taken and given back.
    let now = p.app.layer.now();
    for i in 0..keys {
        let fp = p.app.keys.note(&format!("sk-ant-bench-key-{i}"));
        let mut c = p.app.store.lock();
        let t = c.target(&fp, "claude-sonnet-4-5");
        if let Some(r) = c.admit(&AdmitRequest::new(t), now).go() {
            c.release(r, now);
        }
    }
    p
}

async fn once(c: &Http, addr: SocketAddr) -> Duration {
    let t = Instant::now();
    let req = Request::post(format!("http://{addr}/v1/messages"))
        .header("content-type", "application/json")
        .header("x-api-key", "sk-ant-bench")
        .body(Full::new(Bytes::from_static(BODY.as_bytes())))
        .unwrap();
    let resp = c.request(req).await.expect("answer");
    assert!(resp.status().is_success(), "{}", resp.status());
    let _ = resp.into_body().collect().await;
    t.elapsed()
}

/// Open loop at [`RATE`]: latencies, sorted.
async fn open_loop(addr: SocketAddr, secs: u64) -> Vec<Duration> {
    let c = client();
    for _ in 0..50 {
        once(&c, addr).await;
    }
    let period = Duration::from_secs(1) / RATE;
    let n = u64::from(RATE) * secs;
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

/// Polls `/status` back to back until `stop`: (reads, total time, last
/// body's bytes).
async fn poll_status(
    p: Arc<ratewise_proxy::Running>,
    stop: Arc<AtomicBool>,
) -> (u64, Duration, usize) {
    let c = client();
    let auth = p.app.admin.authorization();
    let (mut n, mut took, mut size) = (0, Duration::ZERO, 0);
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let req = Request::get(format!("http://{}/status", p.admin_addr))
            .header("authorization", auth.as_str())
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = c.request(req).await.expect("status");
        assert!(resp.status().is_success(), "{}", resp.status());
        size = resp.into_body().collect().await.unwrap().to_bytes().len();
        took += t.elapsed();
        n += 1;
    }
    (n, took, size)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let secs: u64 = std::env::var("RATEWISE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let keys: usize = std::env::var("RATEWISE_BENCH_KEYS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(25_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let up = upstream().await;
        let p = Arc::new(proxy(up, keys).await);
        let table = p.app.store.lock().key_count();
        let quiet = open_loop(p.addr, secs).await;
        let stop = Arc::new(AtomicBool::new(false));
        let poller = tokio::spawn(poll_status(p.clone(), stop.clone()));
        let polled = open_loop(p.addr, secs).await;
        stop.store(true, Ordering::Relaxed);
        let (reads, took, size) = poller.await.unwrap();
        println!(
            "status_poll: {table} keys in the table, {RATE} req/s for {secs} s each, /status lists {} (status_max_keys)",
            p.app.config.admin_access.status_max_keys
        );
        println!("| run | p50 | p99 | max |");
        println!("|---|---|---|---|");
        for (name, v) in [("no polling", &quiet), ("/status polled back to back", &polled)] {
            println!(
                "| {name} | {:.3} ms | {:.3} ms | {:.3} ms |",
                ms(pct(v, 0.5)),
                ms(pct(v, 0.99)),
                ms(*v.last().unwrap())
            );
        }
        println!(
            "p99 polled / p99 quiet: {:.2}; /status: {reads} reads, {:.2} ms each, {size} bytes",
            ms(pct(&polled, 0.99)) / ms(pct(&quiet, 0.99)),
            ms(took) / reads.max(1) as f64
        );
    });
}
