//! The `ratewise-mock` binary: prints its address first, serves the config.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

#[test]
fn binary_prints_its_address_and_serves() {
    let dir = std::env::temp_dir().join(format!("ratewise-mock-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("mock.json");
    std::fs::write(&cfg, r#"{"billing_error": true}"#).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ratewise-mock"))
        .args(["--config", cfg.to_str().unwrap(), "--addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: std::net::SocketAddr = line.trim().parse().expect("first line is the address");
    assert!(addr.ip().is_loopback() && addr.port() != 0);

    let body = r#"{"model":"m","max_tokens":5,"messages":[]}"#;
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    write!(
        tcp,
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    tcp.read_to_string(&mut resp).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(resp.starts_with("HTTP/1.1 402"), "{resp}");
    assert!(resp.contains("billing_error"));
}

#[test]
fn binary_rejects_a_bad_config() {
    let dir = std::env::temp_dir().join(format!("ratewise-mock-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("bad.json");
    std::fs::write(&cfg, r#"{"no_such_field": 1}"#).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ratewise-mock"))
        .args(["--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no_such_field"));
}

#[cfg(unix)]
#[test]
fn binary_prints_a_spend_summary_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ratewise-mock"))
        .args(["--addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: std::net::SocketAddr = line.trim().parse().unwrap();
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[]}"#;
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    write!(
        tcp,
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    tcp.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(child.wait().unwrap().success());
    let json = err
        .lines()
        .find_map(|l| l.strip_prefix("ratewise-mock summary: "))
        .unwrap_or_else(|| panic!("no summary in {err}"));
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(v["requests"], 1);
    assert!(v["usd_direct"].as_f64().unwrap() > 0.0);
    assert_eq!(v["usd_batch"], 0.0);
}
