//! What `ratewise proxy` adds on the wire, side by side with a bare hyper
//! pass-through proxy in the same run, against an upstream on loopback that
//! answers at once:
//!
//! * open loop at a fixed rate (1,000 requests/s): latency p50 / p99 of
//!   each path, and what each proxy adds over calling the upstream
//!   directly;
//! * closed loop, 64 concurrent callers: the most requests per second;
//! * the ratewise proxy with its journal off and on;
//! * the journal's floor: the bare pass-through awaiting the journal's
//!   attempt line before each send, nothing else of the proxy (what the
//!   journal alone costs, whatever the proxy does around it).
//!
//! `cargo bench -p ratewise-proxy --bench overhead` (about 50 s). A plain
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
///
/// With `journal`, the journal's floor: each send first waits for an
/// attempt line to be on disk through the proxy's own journal (its writer
/// thread, group commit), as the proxy's sends do — and nothing else of
/// the proxy. A lower bound of what the journal costs: the end line the
/// proxy also queues is left out.
async fn bare(up: SocketAddr, journal: Option<std::path::PathBuf>) -> SocketAddr {
    let c = client();
    let journal = journal.map(|path| {
        let (journal, _) = ratewise_proxy::journal::FileJournal::open(&path).unwrap();
        Arc::new(journal)
    });
    let n = Arc::new(std::sync::atomic::AtomicU64::new(0));
    serve(move |req: Request<Incoming>| {
        let (c, journal, n) = (c.clone(), journal.clone(), n.clone());
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
            if let Some(journal) = &journal {
                let id = n
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    .to_string();
                journal
                    .attempt_started_async(&id, 1, std::time::SystemTime::now(), None)
                    .await
                    .unwrap();
            }
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

/// This process's CPU time so far (user and system, every thread), from
/// `/proc/self/stat`; `None` where there is none (not Linux).
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command's closing parenthesis; utime and stime
    // are the 14th and 15th of the line, in clock ticks (100 a second).
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// Closed loop: `callers` each send the next request when the last one
/// is answered; requests per second, and the CPU time the whole process
/// (callers, proxy and upstream) spent per request.
async fn closed_loop(addr: SocketAddr, callers: usize, secs: u64) -> (f64, Option<Duration>) {
    let c = client();
    for _ in 0..50 {
        once(&c, addr).await;
    }
    let end = Instant::now() + Duration::from_secs(secs);
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    let t0 = Instant::now();
    let cpu0 = cpu_time();
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
    let n = done.load(std::sync::atomic::Ordering::Relaxed);
    let cpu = match (cpu0, cpu_time()) {
        (Some(a), Some(b)) if n > 0 => Some(b.saturating_sub(a) / n as u32),
        _ => None,
    };
    (n as f64 / t0.elapsed().as_secs_f64(), cpu)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One path's figures.
struct Row {
    name: &'static str,
    p50: Duration,
    p99: Duration,
    /// The best closed-loop rate over the rounds.
    rps: f64,
    /// The process's CPU time per request in that round.
    cpu: Option<Duration>,
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let secs = env_number("RATEWISE_BENCH_SECS", 3);
    // The closed loop's concurrent callers.
    let callers = env_number("RATEWISE_BENCH_CALLERS", 64).max(1) as usize;
    let rounds = env_number("RATEWISE_BENCH_ROUNDS", 3).max(1);
    // For a profile of one path: `RATEWISE_BENCH_ONLY=journal` runs the
    // row of that name, else the rows whose names contain it, closed loop
    // only.
    let only = std::env::var("RATEWISE_BENCH_ONLY").ok();
    // With it, `RATEWISE_BENCH_COUNT=N` sends N requests one after the
    // other on that row and prints nothing (a count of instructions).
    let count = std::env::var("RATEWISE_BENCH_COUNT")
        .ok()
        .and_then(|s| s.parse::<u64>().ok());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let up = upstream().await;
        let bare_addr = bare(up, None).await;
        let journal = std::env::temp_dir().join(format!("ratewise-bench-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&journal);
        let floor_journal = std::env::temp_dir().join(format!("ratewise-bench-floor-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&floor_journal);
        let floor = bare(up, Some(floor_journal.clone())).await;
        let rw = ratewise(up, None).await;
        let rwj = ratewise(up, Some(journal.clone())).await;
        let paths = [
            ("direct (no proxy)", up),
            ("bare hyper pass-through", bare_addr),
            ("bare + journal start line", floor),
            ("ratewise proxy", rw.addr),
            ("ratewise proxy + journal", rwj.addr),
        ];
        // Each mode ends here, so the proxies shut down and their files go.
        'run: {
            if let (Some(only), Some(n)) = (&only, count) {
                // Sequential requests, nothing timed: under `valgrind
                // --tool=callgrind`, the instructions a request costs (the
                // difference of two counts), which no other load on the
                // machine changes.
                let c = client();
                for (_, addr) in paths.iter().filter(|(name, _)| name == only) {
                    for _ in 0..n {
                        once(&c, *addr).await;
                    }
                }
                break 'run;
            }
            if let Some(only) = only {
                let exact = paths.iter().any(|(n, _)| *n == only);
                let chosen = paths
                    .iter()
                    .filter(|(n, _)| if exact { *n == only } else { n.contains(only.as_str()) });
                for (name, addr) in chosen {
                    let (rps, cpu) = closed_loop(*addr, callers, secs).await;
                    println!("{name}: {rps:.0} req/s, {:.1} µs CPU per request", cpu.map_or(f64::NAN, us));
                }
                break 'run;
            }
            println!("open loop at 1000 requests/s for {secs} s; then closed loop, {callers} callers, {rounds} rounds of {secs} s taking turns (the best round kept)");
            let mut rows: Vec<Row> = Vec::new();
            for (name, addr) in paths {
                let lat = open_loop(addr, 1000, secs).await;
                let (p50, p99) = (pct(&lat, 0.5), pct(&lat, 0.99));
                rows.push(Row { name, p50, p99, rps: 0.0, cpu: None });
            }
            // Taking turns, so a burst of load from elsewhere on this machine
            // falls on every path alike.
            for _ in 0..rounds {
                for (row, (_, addr)) in rows.iter_mut().zip(paths) {
                    let (rps, cpu) = closed_loop(addr, callers, secs).await;
                    if rps > row.rps {
                        row.rps = rps;
                        row.cpu = cpu;
                    }
                }
            }
            println!("| path | p50 ms | p99 ms | added p50 ms | added p99 ms | closed-loop req/s | CPU µs per request | added CPU µs |");
            println!("|---|---|---|---|---|---|---|---|");
            let (base_p50, base_p99, base_cpu) = (rows[0].p50, rows[0].p99, rows[0].cpu);
            for r in &rows {
                let added_cpu = match (r.cpu, base_cpu) {
                    (Some(c), Some(b)) => us(c.saturating_sub(b)),
                    _ => f64::NAN,
                };
                println!(
                    "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.0} | {:.1} | {:.1} |",
                    r.name,
                    ms(r.p50),
                    ms(r.p99),
                    ms(r.p50.saturating_sub(base_p50)),
                    ms(r.p99.saturating_sub(base_p99)),
                    r.rps,
                    r.cpu.map_or(f64::NAN, us),
                    added_cpu,
                );
            }
            let bare = &rows[1];
            for r in &rows[2..] {
                println!(
                    "{}: {:.2}x the bare pass-through's requests/s; added p99 {:.3} ms (vs bare {:.3} ms)",
                    r.name,
                    r.rps / bare.rps,
                    ms(r.p99.saturating_sub(base_p99)),
                    ms(bare.p99.saturating_sub(base_p99)),
                );
            }
        }
        rw.shutdown().await;
        rwj.shutdown().await;
        for path in [&journal, &floor_journal] {
            let _ = std::fs::remove_file(path);
            let mut token = path.as_os_str().to_owned();
            token.push(".admin-token");
            let _ = std::fs::remove_file(token);
        }
    });
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
