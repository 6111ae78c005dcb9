//! `ratewise proxy --journal`, as a process killed with SIGKILL: a send
//! on the wire when the process dies is an unknown outcome after the
//! restart — and after the next one, the journal compacted in between —
//! until an operator acknowledges it (`POST /unknown/ack`); then it is
//! gone, and the journal holds nothing. The upstream is a bare listener
//! that reads a request and never answers.

#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const REQUEST: &str = "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-api-key: sk-ant-api03-test-KILL\r\nx-ratewise-job: killed-1\r\ncontent-length: 2\r\n\r\n{}";

struct Proxy {
    child: Child,
    addr: SocketAddr,
    admin: SocketAddr,
    /// The upstream's connections, each holding a request it never answers.
    upstream: mpsc::Receiver<TcpStream>,
    /// What the proxy logged before it said where it listens.
    start_log: String,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A proxy with `journal`, in front of an upstream that never answers.
fn proxy(journal: &Path) -> Proxy {
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = upstream.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in upstream.incoming().flatten() {
            let mut s2 = s.try_clone().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s2.read(&mut buf);
            if tx.send(s).is_err() {
                return;
            }
        }
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_ratewise"))
        .args(["proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .arg("--journal")
        .arg(journal)
        .args(["--upstream", &format!("http://{up}")])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut log = String::new();
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
            std::thread::spawn(move || {
                let mut sink = String::new();
                while err.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
                    sink.clear();
                }
            });
            return Proxy {
                child,
                addr,
                admin,
                upstream: rx,
                start_log: log,
            };
        }
        log.push_str(&line);
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the proxy never said where it listens: {log}");
}

/// An admin call with the token (read from `<journal>.admin-token`):
/// status and body.
fn admin(p: &Proxy, journal: &Path, method: &str, path: &str) -> (u16, String) {
    let mut token_path = journal.as_os_str().to_owned();
    token_path.push(".admin-token");
    let token = std::fs::read_to_string(token_path).unwrap();
    let mut s = TcpStream::connect(p.admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        p.admin,
        token.trim()
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (status, body)
}

/// The job ids `/status` lists as unknown outcomes.
fn unknown_jobs(p: &Proxy, journal: &Path) -> Vec<String> {
    let (status, body) = admin(p, journal, "GET", "/status");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["unknown_outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["job_id"].as_str().unwrap().to_owned())
        .collect()
}

fn kill9(p: &mut Proxy) {
    let ok = Command::new("kill")
        .args(["-KILL", &p.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let _ = p.child.wait();
}

#[test]
fn a_send_cut_by_sigkill_is_an_unknown_outcome_until_acknowledged() {
    let dir = std::env::temp_dir().join(format!("ratewise-cli-journal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let journal = dir.join("journal.jsonl");

    let mut p = proxy(&journal);
    let mut caller = TcpStream::connect(p.addr).unwrap();
    caller.write_all(REQUEST.as_bytes()).unwrap();
    // On the wire: the upstream has it. Then the process is killed.
    let _held = p.upstream.recv_timeout(Duration::from_secs(20)).unwrap();
    kill9(&mut p);
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(
        text.contains(r#""event":"attempt_started","job_id":"killed-1""#),
        "{text}"
    );
    assert!(!text.contains("attempt_ended"), "{text}");
    assert!(
        !text.contains("sk-ant-api03-test-KILL"),
        "no key in the journal"
    );

    // Two restarts, the second after a crash too: listed, logged, and the
    // journal compacted to that one line.
    for restart in 1..=2 {
        let mut p = proxy(&journal);
        assert_eq!(
            unknown_jobs(&p, &journal),
            ["killed-1"],
            "restart {restart}"
        );
        assert!(
            p.start_log.lines().any(|l| l.contains("WARN")
                && l.contains("until acknowledged")
                && l.contains("killed-1")),
            "restart {restart}: {}",
            p.start_log
        );
        let text = std::fs::read_to_string(&journal).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.starts_with(r#"{"event":"outcome_unknown","job_id":"killed-1""#),
            "{text}"
        );
        kill9(&mut p);
    }

    let p = proxy(&journal);
    let (status, body) = admin(&p, &journal, "POST", "/unknown/ack?job=killed-1");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""acknowledged":["killed-1"]"#), "{body}");
    assert!(unknown_jobs(&p, &journal).is_empty());
    drop(p);

    let p = proxy(&journal);
    assert!(
        unknown_jobs(&p, &journal).is_empty(),
        "gone after the restart"
    );
    assert!(!p.start_log.contains("killed-1"), "{}", p.start_log);
    assert_eq!(
        std::fs::metadata(&journal).unwrap().len(),
        0,
        "nothing live"
    );
    drop(p);
    let _ = std::fs::remove_dir_all(&dir);
}
