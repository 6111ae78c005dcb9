//! `ratewise proxy --provider`: what each upstream is read as, said at
//! start (from the flag, from its host, or generic for an unknown host),
//! and a word that is no provider refused with the list of those that are.
//! Nothing is sent at start, so a provider's real host may be named.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn ratewise() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ratewise"))
}

/// Starts the proxy with `args`, returns its stderr up to the line that
/// says where it listens, and stops it.
#[cfg(unix)]
fn start_log(tag: &str, args: &[&str]) -> String {
    let state = std::env::temp_dir().join(format!(
        "ratewise-cli-providers-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&state);
    let mut child = ratewise()
        .env("XDG_STATE_HOME", &state)
        .args(["proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .args(args)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = String::new();
    let mut line = String::new();
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
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    assert!(status.success(), "exit {status:?}: {seen}");
    let _ = std::fs::remove_dir_all(&state);
    seen
}

#[cfg(unix)]
#[test]
fn the_start_log_says_what_the_upstream_is_read_as_and_why() {
    let log = start_log(
        "host",
        &["--upstream", "https://generativelanguage.googleapis.com"],
    );
    assert!(
        log.contains(
            "upstream https://generativelanguage.googleapis.com read as gemini (from its host)"
        ),
        "{log}"
    );
    let log = start_log(
        "flag",
        &["--upstream", "http://127.0.0.1:9", "--provider", "azure"],
    );
    assert!(
        log.contains("upstream http://127.0.0.1:9 read as azure (--provider)"),
        "{log}"
    );
    let log = start_log("unknown", &["--upstream", "http://127.0.0.1:9"]);
    assert!(
        log.contains("upstream http://127.0.0.1:9 read as generic (unknown host:")
            && log.contains("say --provider"),
        "{log}"
    );
    let log = start_log(
        "auto",
        &["--upstream", "https://api.mistral.ai", "--provider", "auto"],
    );
    assert!(log.contains("read as mistral (from its host)"), "{log}");
}

#[test]
fn a_word_that_is_no_provider_is_refused_with_the_list() {
    let out = ratewise()
        .args([
            "proxy",
            "--upstream",
            "http://127.0.0.1:9",
            "--provider",
            "acme",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--provider") && err.contains("acme"), "{err}");
    for word in [
        "anthropic",
        "openai",
        "gemini",
        "azure",
        "xai",
        "generic",
        "auto",
    ] {
        assert!(err.contains(word), "{word}: {err}");
    }
    let out = ratewise()
        .args(["proxy", "--provider", "gemini"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--upstream"));
}
