//! Many workloads on one key: a request's `x-ratewise-priority` puts it
//! ahead of lower levels waiting on the same key, its `x-ratewise-flow`
//! names its tenant, and neither header reaches the upstream. With
//! `[priority] header = false` the same requests wait first come, first
//! served.

mod support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use support::{post, until, Upstream};

const KEY: &str = "sk-ant-priority-test";

fn body(tag: &str) -> String {
    format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{{"role":"user","content":"{tag}"}}]}}"#
    )
}

/// One request held at the upstream (the key's one slot in flight), five
/// bulk requests queued behind it, then an interactive one; the slot is
/// freed once: which request does the upstream see next?
async fn next_after_a_queue_of_bulk(toml: &str) -> (String, Vec<support::Seen>, String, String) {
    let up = Upstream::start().await;
    let p = Arc::new(support::proxy(&up.url, Some("anthropic"), toml).await);
    up.hold();
    let send = |tag: String, level: &'static str| {
        let p = p.clone();
        tokio::spawn(async move {
            let headers = [
                ("x-api-key", KEY),
                ("anthropic-version", "2023-06-01"),
                ("x-ratewise-priority", level),
                ("x-ratewise-flow", "tenant-a"),
            ];
            post(&p, "/v1/messages", &headers, &body(&tag)).await
        })
    };
    let mut calls = vec![send("first".into(), "bulk")];
    until("the first request reaches the upstream", || {
        up.seen().len() == 1
    })
    .await;
    for i in 0..5 {
        calls.push(send(format!("bulk-{i}"), "bulk"));
    }
    let waiting = || p.app.metrics.waiting.load(Ordering::SeqCst);
    until("five bulk requests wait", || waiting() == 5).await;
    calls.push(send("interactive".into(), "interactive"));
    until("the interactive request waits too", || waiting() == 6).await;
    let (_, status) = support::admin(&p, "GET", "/status").await;
    let (_, metrics) = support::admin(&p, "GET", "/metrics").await;
    up.release(1);
    until("the next request reaches the upstream", || {
        up.seen().len() == 2
    })
    .await;
    let next = String::from_utf8_lossy(&up.seen()[1].body).into_owned();
    up.release(100);
    for c in calls {
        assert_eq!(c.await.unwrap().status, 200);
    }
    (next, up.seen(), status, metrics)
}

#[tokio::test]
async fn an_interactive_request_passes_the_bulk_requests_queued_on_its_key() {
    let (next, seen, status, metrics) =
        next_after_a_queue_of_bulk("[limits]\nin_flight = 1\n").await;
    assert!(next.contains("interactive"), "sent next: {next}");
    // What waited, as /status and /metrics showed it: per level and flow,
    // and what the head waited for (the key's one slot in flight).
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let queue = &status["keys"][0]["classes"][0]["queue"];
    let level = |name: &str| {
        queue["levels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["level"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(level("bulk")["waiting"], 5, "{queue}");
    assert_eq!(level("interactive")["waiting"], 1, "{queue}");
    assert_eq!(level("bulk")["flows"][0]["flow"], "tenant-a", "{queue}");
    for dim in ["requests", "input_tokens", "output_tokens", "tokens"] {
        assert!(
            level("bulk")["used_of_each_limit"][dim].is_number(),
            "{queue}"
        );
    }
    // The one request out is also the cold key's probe: either says why.
    let why = queue["head_waits_for"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(["in_flight", "probe"].contains(&why), "{queue}");
    assert!(
        metrics.contains("level=\"bulk\",flow=\"tenant-a\"} 5"),
        "{metrics}"
    );
    assert_eq!(seen.len(), 7);
    for s in &seen {
        assert!(
            s.headers.get("x-ratewise-priority").is_none()
                && s.headers.get("x-ratewise-flow").is_none(),
            "ratewise's own headers never go upstream: {:?}",
            s.headers
        );
    }
}

#[tokio::test]
async fn with_the_headers_off_the_queue_is_first_come_first_served() {
    let (next, seen, _, _) =
        next_after_a_queue_of_bulk("[limits]\nin_flight = 1\n[priority]\nheader = false\n").await;
    assert!(next.contains("bulk-0"), "sent next: {next}");
    assert!(seen
        .iter()
        .all(|s| s.headers.get("x-ratewise-priority").is_none()));
}

#[tokio::test]
async fn a_level_the_proxy_does_not_know_is_the_default_and_counted() {
    let up = Upstream::start().await;
    let p = support::proxy(&up.url, Some("anthropic"), "").await;
    let headers = [
        ("x-api-key", KEY),
        ("anthropic-version", "2023-06-01"),
        ("x-ratewise-priority", "urgent"),
    ];
    assert_eq!(
        post(&p, "/v1/messages", &headers, &body("x")).await.status,
        200
    );
    let (_, metrics) = support::admin(&p, "GET", "/metrics").await;
    assert!(
        metrics.contains("ratewise_priority_unknown_level_total 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_pools_level_must_be_one_of_the_levels() {
    let flags = ratewise_proxy::config::Flags::default();
    let toml = r#"
[[pools]]
name = "nightly"
caller_key = "sk-nightly"
level = "whenever"
provider = "anthropic"
[[pools.members]]
upstream = "http://127.0.0.1:1"
key_env = "K"
"#;
    let e = ratewise_proxy::config::ProxyConfig::from_toml(&flags, toml, |_| Some("k".into()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("nightly") && e.contains("whenever"), "{e}");
}
