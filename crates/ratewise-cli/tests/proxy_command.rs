//! `ratewise proxy` as a process: it starts with two flags, says where it
//! listens, sends nothing at start, refuses bad flags clearly, and exits 0
//! on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn ratewise() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ratewise"))
}

#[cfg(unix)]
#[test]
fn starts_with_two_flags_and_exits_cleanly_on_sigterm() {
    // The admin token is generated under XDG_STATE_HOME: a directory of
    // this test's own, never the user's.
    let state = std::env::temp_dir().join(format!("ratewise-cli-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let mut child = ratewise()
        .env("XDG_STATE_HOME", &state)
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--upstream",
            // Nothing listens here: nothing is sent at start.
            "http://127.0.0.1:9",
        ])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut line = String::new();
    let mut seen = String::new();
    while Instant::now() < deadline {
        line.clear();
        if err.read_line(&mut line).unwrap() == 0 {
            break;
        }
        seen.push_str(&line);
        if line.contains("ratewise proxy on http://127.0.0.1:") {
            break;
        }
    }
    assert!(
        seen.contains("ratewise proxy on http://127.0.0.1:"),
        "{seen}"
    );
    // The admin token: generated 0600, its path logged, never itself.
    let token_file = state.join("ratewise").join("admin-token");
    let token = std::fs::read_to_string(&token_file).expect("the token file");
    assert!(seen.contains("admin-token"), "{seen}");
    assert!(!seen.contains(token.trim()), "the token is never logged");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "exit {status:?}");
    let _ = std::fs::remove_dir_all(&state);
}

#[test]
fn bad_flags_are_refused_with_a_reason() {
    let out = ratewise()
        .args(["proxy", "--upstream", "ftp://example.invalid"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("http:// or https://"), "{err}");
    let out = ratewise().args(["proxy"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no upstream"));
}
