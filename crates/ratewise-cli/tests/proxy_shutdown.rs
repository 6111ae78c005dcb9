//! `ratewise proxy` shut down by a signal, as a process: a send still out
//! at the end of `--grace` is answered 504 `hold_unknown` and the exit code
//! says something was cut (3); `/healthz` answers 503 `draining` during
//! the grace; a second signal ends it at once (4). The upstream is a bare
//! listener that reads a request and never answers. And a proxy out of
//! descriptors says so and serves again once connections close.

#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const REQUEST: &str = "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-api-key: sk-ant-api03-test-TERM\r\ncontent-length: 2\r\n\r\n{}";

/// A proxy in front of an upstream that never answers; its callers' and
/// admin addresses.
fn proxy(grace: &str) -> (Child, SocketAddr, SocketAddr, mpsc::Receiver<TcpStream>) {
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = upstream.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in upstream.incoming().flatten() {
            // Read the request, answer nothing, keep it open.
            let mut s2 = s.try_clone().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s2.read(&mut buf);
            if tx.send(s).is_err() {
                return;
            }
        }
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_ratewise"))
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--grace",
            grace,
            "--upstream",
            &format!("http://{up}"),
        ])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut line = String::new();
    while Instant::now() < deadline {
        line.clear();
        if err.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(rest) = line.split("ratewise proxy on http://").nth(1) {
            let addr = rest.split_whitespace().next().unwrap().parse().unwrap();
            let admin = rest
                .split("(admin http://")
                .nth(1)
                .unwrap()
                .split(')')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            // Its log keeps flowing; nobody reads it but the pipe must not fill.
            std::thread::spawn(move || {
                let mut sink = String::new();
                while err.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
                    sink.clear();
                }
            });
            return (child, addr, admin, rx);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the proxy never said where it listens");
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

fn get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// Waits for `child`, at most `limit` (a bound against a hang).
fn exit_code(child: &mut Child, limit: Duration) -> Option<i32> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the proxy did not exit");
}

#[test]
fn a_send_out_at_the_end_of_the_grace_is_held_unknown_and_the_exit_code_says_so() {
    let (mut child, addr, admin, upstream) = proxy("1");
    let mut caller = TcpStream::connect(addr).unwrap();
    caller
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    caller.write_all(REQUEST.as_bytes()).unwrap();
    // On the wire: the upstream has it.
    let _held = upstream.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(get(admin, "/healthz").starts_with("HTTP/1.1 200"));
    signal(&child, "-TERM");
    // During the grace: the admin says draining; a new caller gets 503.
    let mut health = String::new();
    for _ in 0..100 {
        health = get(admin, "/healthz");
        if health.starts_with("HTTP/1.1 503") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(health.starts_with("HTTP/1.1 503"), "{health}");
    assert!(health.ends_with("draining\n"), "{health}");
    let mut late = TcpStream::connect(addr).unwrap();
    late.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    late.write_all(REQUEST.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = late.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    // The grace ends with the send still out.
    let mut answer = String::new();
    let _ = caller.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");
    assert!(
        answer.contains("x-ratewise-action: hold_unknown"),
        "{answer}"
    );
    assert_eq!(exit_code(&mut child, Duration::from_secs(30)), Some(3));
    assert!(
        upstream.try_recv().is_err(),
        "nothing more reached the upstream"
    );
}

#[test]
fn a_second_signal_exits_at_once() {
    let (mut child, addr, _admin, upstream) = proxy("600");
    let mut caller = TcpStream::connect(addr).unwrap();
    caller.write_all(REQUEST.as_bytes()).unwrap();
    let _held = upstream.recv_timeout(Duration::from_secs(20)).unwrap();
    signal(&child, "-TERM");
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "draining, not gone");
    signal(&child, "-INT");
    // Far less than the 600 s grace.
    assert_eq!(exit_code(&mut child, Duration::from_secs(30)), Some(4));
}

/// Out of descriptors (a limit far below the connection cap, set with
/// `prlimit`): the accept loop says so and keeps going — once connections
/// close, the proxy serves again.
#[test]
fn out_of_descriptors_is_logged_and_survived() {
    if Command::new("prlimit").arg("--version").output().is_err() {
        eprintln!("SKIPPED: prlimit (util-linux) is not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("ratewise-emfile-{}", std::process::id()));
    std::fs::write(&dir, "[bounds]\nmax_connections = 1000\n").unwrap();
    let mut child = Command::new("prlimit")
        .args(["--nofile=64:64", "--"])
        .arg(env!("CARGO_BIN_EXE_ratewise"))
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--upstream",
            "http://127.0.0.1:9",
            "--config",
        ])
        .arg(&dir)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel::<String>();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        let mut line = String::new();
        while err.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            if tx.send(std::mem::take(&mut line)).is_err() {
                return;
            }
        }
    });
    let mut addrs = None;
    while let Ok(line) = lines.recv_timeout(Duration::from_secs(20)) {
        if let Some(rest) = line.split("ratewise proxy on http://").nth(1) {
            let addr: SocketAddr = rest.split_whitespace().next().unwrap().parse().unwrap();
            let admin: SocketAddr = rest
                .split("(admin http://")
                .nth(1)
                .unwrap()
                .split(')')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            addrs = Some((addr, admin));
            break;
        }
    }
    let Some((addr, admin)) = addrs else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the proxy never said where it listens");
    };
    // More connections than it has descriptors for.
    let conns: Vec<TcpStream> = (0..100)
        .filter_map(|_| TcpStream::connect(addr).ok())
        .collect();
    let mut logged = false;
    while let Ok(line) = lines.recv_timeout(Duration::from_secs(20)) {
        if line.contains("out of file descriptors") {
            logged = true;
            break;
        }
    }
    drop(conns);
    let mut health = String::new();
    for _ in 0..200 {
        health = get(admin, "/healthz");
        if health.starts_with("HTTP/1.1 200") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(&child, "-TERM");
    let code = exit_code(&mut child, Duration::from_secs(30));
    let _ = std::fs::remove_file(&dir);
    assert!(logged, "EMFILE was logged");
    assert!(
        health.starts_with("HTTP/1.1 200"),
        "serving again: {health}"
    );
    assert_eq!(code, Some(0));
}
