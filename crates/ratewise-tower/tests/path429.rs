//! A 429's path, read from a real run: the crate docs ("A 429's path
//! through the code") must name exactly the source files that run.
//!
//! `one_429_then_a_200` sends one request through `RetryLayer` over
//! hyper-util's client to a server on loopback (this file's, plain TCP)
//! that answers the first send with an Anthropic `rate_limit_error` 429
//! (`retry-after: 1`) and the next with a 200. Natively it checks just
//! that. Under callgrind (`--instr-atstart=no`) the server opens the
//! window — `CALLGRIND_START_INSTRUMENTATION` — right after it has
//! written the 429, and closes it — `CALLGRIND_STOP_INSTRUMENTATION` —
//! when the next request's first bytes reach it. Instrumentation is one
//! switch for the whole process (unlike `CALLGRIND_TOGGLE_COLLECT`, which
//! is per thread), and the run is on one runtime thread, so nothing of
//! the client runs between the write and the switch: the window holds
//! exactly what a 429 runs from its arrival to the job's next send,
//! including the wait for the retry's delay and the admission after it.
//!
//! `the_docs_name_every_file_a_429_crosses` runs that test under
//! `valgrind --tool=callgrind`, takes every source file under
//! `crates/ratewise-*/src/` that executed an instruction in the window
//! (the `fl=`/`fi=`/`fe=` files of callgrind's output with a cost line),
//! and compares that set with the files the docs name and the count they
//! state. It keeps no list of its own: when the code moves, the docs
//! follow. Run it with
//! `cargo test -p ratewise-tower --test path429 -- --include-ignored`;
//! it needs valgrind (under `CI=true` a missing valgrind fails it).
#![forbid(unsafe_code)]

mod docs_section;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_tower::{Attempts, Policy, RetryLayer};
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower::{Layer, ServiceExt};

/// Set for the run under valgrind: the window must really open.
const TRACED: &str = "RATEWISE_PATH429_TRACED";

const RATE_LIMITED: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
const MESSAGE: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":4}}"#;

fn answer(status: &str, headers: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{headers}content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// One connection: each request read whole (head and `content-length`
/// body), answered by its number among all the server's requests.
async fn serve(mut stream: TcpStream, requests: Arc<AtomicUsize>) {
    let mut buf = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if buf.is_empty() && requests.load(Ordering::SeqCst) == 1 {
            // The next request reaches the server: the window closes.
            crabgrind::callgrind::stop_instrumentation();
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().expect("content-length"));
        if buf.len() < head_end + 4 + length {
            continue;
        }
        buf.drain(..head_end + 4 + length);
        let first = requests.fetch_add(1, Ordering::SeqCst) == 0;
        if first {
            let bytes = answer("429 Too Many Requests", "retry-after: 1\r\n", RATE_LIMITED);
            stream.write_all(&bytes).await.expect("write the 429");
            // The 429 is written: the window opens. One runtime thread:
            // the client cannot have read it yet.
            crabgrind::callgrind::start_instrumentation();
        } else {
            let bytes = answer("200 OK", "", MESSAGE);
            stream.write_all(&bytes).await.expect("write the 200");
        }
    }
}

#[test]
fn one_429_then_a_200() {
    if std::env::var_os(TRACED).is_some() {
        assert_ne!(
            crabgrind::run_mode(),
            crabgrind::RunMode::Native,
            "{TRACED} is set but this is not running under valgrind"
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = requests.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                tokio::spawn(serve(stream, counted.clone()));
            }
        });
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let service = RetryLayer::new(Policy::default()).layer(client);
        let request = http::Request::post(format!("http://{addr}/v1/messages"))
            .header("content-type", "application/json")
            .header("x-api-key", "sk-ant-path429")
            .header("anthropic-version", "2023-06-01")
            .body(Full::new(Bytes::from_static(
                br#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#,
            )))
            .unwrap();
        let response = service.oneshot(request).await.expect("answered");
        assert_eq!(response.status(), 200);
        let attempts = response.extensions().get::<Attempts>().expect("attempts");
        assert_eq!(attempts.0.len(), 2, "{attempts:?}");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, MESSAGE.as_bytes());
        assert_eq!(requests.load(Ordering::SeqCst), 2);
    });
}

/// The workspace's source files (`crates/ratewise-*/src/...`, from the
/// root) that ran an instruction in a callgrind output, with their
/// instruction counts (the first event). A cost line is filed under the
/// last `fl=`, `fi=` or `fe=` (callgrind writes one whenever the file
/// changes, inlined code included).
fn files_that_ran(out: &str, root: &str) -> BTreeMap<String, u64> {
    let prefix = format!("{root}/crates/ratewise-");
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut current = String::new();
    let mut ran: BTreeMap<String, u64> = BTreeMap::new();
    for line in out.lines() {
        if let Some((key, value)) = line.split_once('=') {
            // File names share one compression table: "(id) name" defines
            // id, "(id)" refers to it.
            if matches!(key, "fl" | "fi" | "fe" | "cfl" | "cfi") {
                let name = match value.strip_prefix('(').and_then(|v| v.split_once(')')) {
                    Some((id, "")) => names.get(id).cloned().expect("a defined file id"),
                    Some((id, name)) => {
                        let name = name.trim().to_string();
                        names.insert(id.to_string(), name.clone());
                        name
                    }
                    None => value.to_string(),
                };
                if matches!(key, "fl" | "fi" | "fe") {
                    current = name;
                }
            }
            continue;
        }
        // A cost line (`--compress-pos=no`): the source line, then the
        // events (Ir first). Line 0 is code the compiler made up (drop
        // glue, generic std code placed in a crate's unit): no line of the
        // file it is filed under ran.
        let mut fields = line.split_whitespace();
        let Some(Ok(line_no)) = fields.next().map(str::parse::<u64>) else {
            continue;
        };
        let ir: u64 = fields.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        if line_no == 0 || ir == 0 {
            continue;
        }
        if let Some(rest) = current.strip_prefix(&prefix) {
            if rest
                .split_once('/')
                .is_some_and(|(_, p)| p.starts_with("src/"))
            {
                *ran.entry(format!("crates/ratewise-{rest}")).or_default() += ir;
            }
        }
    }
    ran
}

fn valgrind_found() -> bool {
    let found = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "valgrind is not installed: under CI=true this test fails rather than skips \
             (.ci/run installs it)"
        );
        eprintln!("valgrind is not installed: the 429's path is not traced");
    }
    found
}

#[test]
#[ignore = "needs valgrind"]
fn the_docs_name_every_file_a_429_crosses() {
    if !valgrind_found() {
        return;
    }
    // One file per run (runs at once do not share one); kept when the
    // test fails, for `callgrind_annotate`.
    let out_dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("path429");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out_file = out_dir.join(format!("callgrind.out.{}", std::process::id()));
    let started = std::time::Instant::now();
    let run = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--instr-atstart=no")
        .arg("--compress-pos=no")
        .arg("--compress-strings=no")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(std::env::current_exe().unwrap())
        .args(["one_429_then_a_200", "--exact", "--test-threads=1"])
        .env(TRACED, "1")
        .output()
        .expect("valgrind runs");
    let took = started.elapsed();
    assert!(
        run.status.success(),
        "the traced run failed ({}):\n{}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let out = std::fs::read_to_string(&out_file).expect("callgrind's output");
    eprintln!("callgrind's output: {}", out_file.display());
    let root = docs_section::root();
    let ran = files_that_ran(&out, root.to_str().unwrap());
    eprintln!(
        "a 429's path: {} files ran in the window (traced in {:.1} s):",
        ran.len(),
        took.as_secs_f64()
    );
    for (file, ir) in &ran {
        eprintln!("  {ir:>10} Ir  {file}");
    }
    assert!(
        ran.contains_key("crates/ratewise-core/src/classify/mod.rs"),
        "the window never saw the 429 classified: was it opened?"
    );
    let derived: BTreeSet<String> = ran.keys().cloned().collect();
    let named = docs_section::named_files();
    let omitted: Vec<_> = derived.difference(&named).collect();
    let extra: Vec<_> = named.difference(&derived).collect();
    assert!(
        omitted.is_empty() && extra.is_empty(),
        "the docs' \"A 429's path through the code\" (crates/ratewise-tower/src/lib.rs) \
         is not the path that ran:\n  omitted (ran, not named): {omitted:#?}\n  \
         extra (named, did not run): {extra:#?}"
    );
    assert_eq!(
        docs_section::stated_count(),
        derived.len(),
        "the docs state a count other than the {} files that ran",
        derived.len()
    );
    let _ = std::fs::remove_file(&out_file);
}
