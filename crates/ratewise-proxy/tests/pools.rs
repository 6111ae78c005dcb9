//! `[[pools]]` in the proxy (issue #40), end to end against two mock
//! providers: a caller selects a pool by the key it presents; each job
//! goes to the member that can take it, rewritten for it; a capped member
//! gets nothing after its cap and `/status` shows why; an overloaded
//! member's jobs finish on the other; a key that selects no pool, with no
//! upstream, is a 401 in the provider's shape; the members' keys and the
//! caller's never leak.

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_mock::request::key_fingerprint as mock_fingerprint;
use ratewise_mock::{Fault, FaultRule, MockConfig, MockServer};
use ratewise_proxy::config::{Flags, ProxyConfig};
use ratewise_proxy::keys::fingerprint;
use ratewise_proxy::Running;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const BODY: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
const OPENAI_BODY: &str =
    r#"{"model":"gpt-4o","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every log line of this test binary, at debug (its tests share the
/// subscriber).
fn logs() -> &'static Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || writer.clone())
            .init();
        captured
    })
}

fn roomy() -> MockConfig {
    let mut cfg = MockConfig::default();
    cfg.anthropic_limits.requests_per_minute = Some(100_000);
    cfg.anthropic_limits.input_tokens_per_minute = Some(100_000_000);
    cfg.anthropic_limits.output_tokens_per_minute = Some(100_000_000);
    cfg.openai_limits.requests_per_minute = Some(100_000);
    cfg.openai_limits.tokens_per_minute = Some(100_000_000);
    cfg
}

/// One test's keys: the two members' real keys (each in an environment
/// variable of the test's own) and the key its callers present.
struct Keys {
    main: String,
    backup: String,
    main_env: String,
    backup_env: String,
    caller: String,
}

impl Keys {
    fn new(tag: &str) -> Keys {
        let keys = Keys {
            main: format!("sk-ant-REALMAIN-{tag}-5e1d7a"),
            backup: format!("sk-ant-REALBACKUP-{tag}-93c0b4"),
            main_env: format!("RATEWISE_POOLS_TEST_{}_MAIN", tag.to_uppercase()),
            backup_env: format!("RATEWISE_POOLS_TEST_{}_BACKUP", tag.to_uppercase()),
            caller: format!("sk-team-CALLER-{tag}-0a7f"),
        };
        std::env::set_var(&keys.main_env, &keys.main);
        std::env::set_var(&keys.backup_env, &keys.backup);
        keys
    }

    fn secrets(&self) -> [&str; 3] {
        [&self.main, &self.backup, &self.caller]
    }
}

/// A pool of `a` (weight `wa`) and `b` (weight `wb`) selected by
/// `keys.caller`.
fn pool_toml(name: &str, keys: &Keys, a: &MockServer, b: &MockServer, wa: u32, wb: u32) -> String {
    format!(
        r#"
[[pools]]
name = "{name}"
caller_key = "{caller}"
provider = "anthropic"
[[pools.members]]
upstream = "{ua}"
key_env = "{ea}"
weight = {wa}
[[pools.members]]
upstream = "{ub}"
key_env = "{eb}"
weight = {wb}
"#,
        caller = keys.caller,
        ua = a.base_url(),
        ea = keys.main_env,
        ub = b.base_url(),
        eb = keys.backup_env,
    )
}

/// A proxy with `toml`, `upstream` its `--upstream` (none: pools only),
/// both listeners on ephemeral ports, the members' keys read from the
/// environment.
async fn proxy(upstream: Option<&str>, toml: &str) -> Running {
    let _ = logs();
    let flags = Flags {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("127.0.0.1:1".into()),
        upstream: upstream.map(Into::into),
        ..Flags::default()
    };
    let mut config =
        ProxyConfig::from_toml(&flags, toml, |v| std::env::var(v).ok()).expect("config");
    config.admin = "127.0.0.1:0".parse().unwrap();
    ratewise_proxy::start(config).await.expect("proxy starts")
}

struct Answer {
    status: StatusCode,
    headers: http::HeaderMap,
    body: String,
}

impl Answer {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

async fn post(p: &Running, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::post(format!("http://{}{path}", p.addr))
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .request(req.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
        .await
        .expect("the proxy answers");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// One Anthropic call with the caller's key.
async fn message(p: &Running, key: &str) -> Answer {
    post(p, "/v1/messages", &[("x-api-key", key)], BODY).await
}

async fn admin(p: &Running, path: &str) -> String {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::get(format!("http://{}{path}", p.admin_addr))
        .header("authorization", p.app.admin.authorization())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

/// Waits until every reservation has ended (the last settles follow the
/// answers' ends); the bound only turns a hang into a failure.
async fn assert_clean(p: &Running) {
    for _ in 0..2_000 {
        if p.app.store.ledger().is_clean() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("reservations left: {:?}", p.app.store.ledger());
}

async fn pools_status(p: &Running) -> serde_json::Value {
    let status: serde_json::Value = serde_json::from_str(&admin(p, "/status").await).unwrap();
    status["pools"].clone()
}

/// (a) A spend cap on one member mid-run: every job is still done, on
/// the other; nothing reaches the capped member after the send that met
/// its cap; `/status` shows the member stopped with the answer's evidence,
/// and `/metrics` says so too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spend_cap_stops_one_member_and_every_job_is_done_on_the_other() {
    let keys = Keys::new("spend");
    let a = MockServer::start(roomy()).await.unwrap();
    let b = MockServer::start(roomy()).await.unwrap();
    let p = proxy(None, &pool_toml("claude", &keys, &a, &b, 1, 1)).await;
    for _ in 0..10 {
        let r = message(&p, &keys.caller).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert!(!a.records().is_empty() && !b.records().is_empty());
    a.set_spend_cap(Some(0.0));
    let before = a.records().len();
    for _ in 0..30 {
        let r = message(&p, &keys.caller).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    // One send at most met the cap; none went after it.
    let after: Vec<_> = a.records().into_iter().skip(before).collect();
    assert!(after.len() <= 1, "{after:?}");
    assert!(after.iter().all(|r| r.status != Some(200)), "{after:?}");
    let ok = |m: &MockServer| m.records().iter().filter(|r| r.status == Some(200)).count();
    assert_eq!(ok(&a) + ok(&b), 40);

    let pools = pools_status(&p).await;
    assert_eq!(pools[0]["name"], "claude");
    let members = &pools[0]["members"];
    assert_eq!(members[0]["key"], fingerprint(&keys.main).as_str());
    assert_eq!(members[1]["key"], fingerprint(&keys.backup).as_str());
    assert_eq!(members[0]["provider"], "anthropic");
    let stop = &members[0]["stopped"];
    assert_eq!(stop["cause"], "spend_cap", "{pools}");
    assert!(
        stop["status"].as_u64().is_some(),
        "the answer's status: {stop}"
    );
    assert!(members[1]["stopped"].is_null(), "{pools}");
    assert_eq!(
        members[1]["sends"].as_u64().unwrap() as usize,
        b.records().len()
    );

    let metrics = admin(&p, "/metrics").await;
    let series = |member: &str| {
        format!(
            "ratewise_pool_member_stopped{{pool=\"claude\",member=\"{}\",upstream=\"{}\"}}",
            fingerprint(member),
            a.base_url().trim_start_matches("http://")
        )
    };
    assert!(
        metrics.contains(&format!("{} 1", series(&keys.main))),
        "{metrics}"
    );
    assert!(
        metrics.contains("ratewise_pool_member_sends_total{pool=\"claude\""),
        "{metrics}"
    );
    assert!(metrics.contains("ratewise_pool_member_share{"), "{metrics}");
    assert_clean(&p).await;
    p.shutdown().await;
}

/// (b) One member answers 529 to everything: every job is done on the
/// other, with at most 1.1 sends per job, and none past its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overloaded_member_hands_every_job_to_the_other_in_time() {
    let keys = Keys::new("overload");
    let a = MockServer::start(roomy()).await.unwrap();
    let b = MockServer::start(roomy()).await.unwrap();
    a.set_faults(vec![FaultRule::always(Fault::Overloaded)]);
    let p = proxy(None, &pool_toml("claude", &keys, &a, &b, 1, 1)).await;
    let jobs = 40;
    let deadline = Duration::from_secs(20);
    let ms = deadline.as_millis().to_string();
    for _ in 0..jobs {
        let started = Instant::now();
        let r = post(
            &p,
            "/v1/messages",
            &[
                ("x-api-key", keys.caller.as_str()),
                ("x-ratewise-deadline-ms", ms.as_str()),
            ],
            BODY,
        )
        .await;
        // Answered, with a success, within the deadline it was given.
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.headers["x-ratewise-deadline-ms"], ms.as_str());
        assert!(started.elapsed() <= deadline, "{:?}", started.elapsed());
    }
    let (na, nb) = (a.records().len(), b.records().len());
    // The overloaded member was tried, and answered nothing but 529s.
    assert!(na >= 1);
    assert!(a.records().iter().all(|r| r.status == Some(529)));
    assert_eq!(nb, jobs);
    assert!(
        (na + nb) as f64 <= jobs as f64 * 1.1,
        "{} sends for {jobs} jobs",
        na + nb
    );
    let pools = pools_status(&p).await;
    assert_eq!(pools[0]["members"][1]["sends"], nb as u64);
    assert_clean(&p).await;
    p.shutdown().await;
}

/// (c) With no upstream, a key that selects no pool is a 401
/// `authentication_error` in the provider's shape (Anthropic's on its
/// path, OpenAI's on its), and nothing is sent; the pool's own key still
/// goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_selects_no_pool_is_a_401_in_the_providers_shape() {
    let keys = Keys::new("nomatch");
    let a = MockServer::start(roomy()).await.unwrap();
    let b = MockServer::start(roomy()).await.unwrap();
    let p = proxy(None, &pool_toml("claude", &keys, &a, &b, 1, 1)).await;
    assert!(p.app.config.upstreams.is_empty());

    let r = message(&p, "sk-ant-not-a-pool-key").await;
    assert_eq!(r.status, 401, "{}", r.body);
    let v = r.json();
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "authentication_error", "{v}");
    assert!(!r.body.contains("sk-ant-not-a-pool-key"), "{}", r.body);

    let r = post(
        &p,
        "/v1/chat/completions",
        &[("authorization", "Bearer sk-not-a-pool-key")],
        OPENAI_BODY,
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.body);
    let v = r.json();
    assert_eq!(v["error"]["type"], "authentication_error", "{v}");
    assert!(v["error"]["message"].is_string(), "{v}");
    assert!(v.get("type").is_none(), "OpenAI's shape: {v}");

    // No key at all: the same.
    let r = post(&p, "/v1/messages", &[], BODY).await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(a.records().is_empty() && b.records().is_empty());

    let r = message(&p, &keys.caller).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(a.records().len() + b.records().len(), 1);
    p.shutdown().await;
}

/// Beside an upstream, a key that selects no pool goes to the upstream as
/// it always has (with its own key), and the pool's key to the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_an_upstream_other_keys_go_to_it_unchanged() {
    let keys = Keys::new("beside");
    let a = MockServer::start(roomy()).await.unwrap();
    let b = MockServer::start(roomy()).await.unwrap();
    let up = MockServer::start(roomy()).await.unwrap();
    let p = proxy(
        Some(&up.base_url()),
        &pool_toml("claude", &keys, &a, &b, 1, 1),
    )
    .await;
    let own = "sk-ant-own-key-of-a-caller";
    let r = message(&p, own).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = message(&p, &keys.caller).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let seen = up.records();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].key, mock_fingerprint(own));
    assert_eq!(a.records().len() + b.records().len(), 1);
    p.shutdown().await;
}

/// (d) The members' real keys, read from the environment, never appear in
/// the logs (at debug), `/status`, `/metrics` or the journal — nor does
/// the caller's key — and the caller's key never reaches a provider: each
/// mock saw its own member's key only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_leaks_and_the_callers_key_never_reaches_a_provider() {
    let keys = Keys::new("leak");
    let a = MockServer::start(roomy()).await.unwrap();
    let b = MockServer::start(roomy()).await.unwrap();
    let journal =
        std::env::temp_dir().join(format!("ratewise-pools-leak-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&journal);
    let toml = format!(
        "journal = {:?}\n{}",
        journal.display().to_string(),
        pool_toml("leaky", &keys, &a, &b, 1, 1)
    );
    let p = proxy(None, &toml).await;
    for _ in 0..6 {
        assert_eq!(message(&p, &keys.caller).await.status, 200);
    }
    // A stop with its evidence, and a stream.
    a.set_spend_cap(Some(0.0));
    for _ in 0..4 {
        assert_eq!(message(&p, &keys.caller).await.status, 200);
    }
    let stream = BODY.replace("\"max_tokens\"", "\"stream\":true,\"max_tokens\"");
    let r = post(&p, "/v1/messages", &[("x-api-key", &keys.caller)], &stream).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // The caller's key in the other headers a caller may use.
    let r = post(
        &p,
        "/v1/messages",
        &[("authorization", &format!("Bearer {}", keys.caller))],
        BODY,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);

    let status = admin(&p, "/status").await;
    let metrics = admin(&p, "/metrics").await;
    p.shutdown().await;
    let journal_text = std::fs::read_to_string(&journal).unwrap_or_default();
    let _ = std::fs::remove_file(&journal);
    let logs = String::from_utf8(logs().0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains(&fingerprint(&keys.main)),
        "the members are named by fingerprint"
    );
    for (place, text) in [
        ("logs", &logs),
        ("/status", &status),
        ("/metrics", &metrics),
        ("the journal", &journal_text),
    ] {
        for secret in keys.secrets() {
            assert!(!text.contains(secret), "{secret} leaked into {place}");
        }
    }
    assert!(status.contains(&fingerprint(&keys.backup)), "{status}");
    // Each provider saw its member's key, and only it.
    let caller = mock_fingerprint(&keys.caller);
    for (m, key) in [(&a, &keys.main), (&b, &keys.backup)] {
        let recs = m.records();
        assert!(!recs.is_empty());
        for r in recs {
            assert_ne!(r.key, caller);
            assert_eq!(r.key, mock_fingerprint(key));
        }
    }
}

/// (e) With both members free, the jobs follow the weights, 70/30.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_share_the_jobs_between_free_members() {
    let keys = Keys::new("weights");
    let a = MockServer::start(roomy()).await.unwrap();
    let b = MockServer::start(roomy()).await.unwrap();
    let p = proxy(None, &pool_toml("claude", &keys, &a, &b, 70, 30)).await;
    let jobs = 50;
    for _ in 0..jobs {
        let r = message(&p, &keys.caller).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let (na, nb) = (a.records().len(), b.records().len());
    assert_eq!(na + nb, jobs);
    // 35/15 exactly at 70/30; a few either way.
    assert!((30..=40).contains(&na), "a {na} b {nb}");
    let pools = pools_status(&p).await;
    let members = &pools[0]["members"];
    assert_eq!(members[0]["weight"], 70);
    assert_eq!(members[0]["sends"], na as u64);
    let share = members[0]["share"].as_f64().unwrap();
    assert!((0.55..=0.85).contains(&share), "{share}");
    assert_clean(&p).await;
    p.shutdown().await;
}

/// A pool's configuration is checked at start: a variable that is not
/// set is named (never a key), and so is a pool whose name or caller key
/// another has.
#[test]
fn a_pool_that_cannot_be_built_is_named_at_start() {
    let env = |v: &str| {
        ["A", "B"]
            .contains(&v)
            .then(|| format!("secret-value-of-{v}"))
    };
    let member = |var: &str| {
        format!("[[pools.members]]\nupstream = \"http://127.0.0.1:9\"\nprovider = \"anthropic\"\nkey_env = \"{var}\"\n")
    };
    let pool = |name: &str, caller: &str, var: &str| {
        format!(
            "[[pools]]\nname = \"{name}\"\ncaller_key = \"{caller}\"\n{}",
            member(var)
        )
    };
    let flags = Flags::default();
    let err = |toml: String| {
        ProxyConfig::from_toml(&flags, &toml, env)
            .unwrap_err()
            .to_string()
    };
    let e = err(pool("p", "sk-caller-1", "UNSET_VAR"));
    assert!(e.contains("UNSET_VAR") && e.contains("\"p\""), "{e}");
    let e = err(pool("p", "sk-caller-1", "A") + &pool("p", "sk-caller-2", "B"));
    assert!(e.contains("two pools are named \"p\""), "{e}");
    let e = err(pool("p", "sk-caller-1", "A") + &pool("q", "sk-caller-1", "B"));
    assert!(e.contains("same caller_key"), "{e}");
    assert!(!e.contains("sk-caller-1"), "{e}");
    let e = err(format!("[[pools]]\nname = \"p\"\n{}", member("A")));
    assert!(e.contains("caller_key is required"), "{e}");
    for e in [
        err(pool("p", "sk-caller-1", "UNSET_VAR")),
        err(pool("p", "sk-caller-1", "A") + &pool("q", "sk-caller-1", "B")),
    ] {
        assert!(!e.contains("secret-value-of"), "{e}");
    }
    // Pools alone are enough: --upstream is optional.
    let c = ProxyConfig::from_toml(&flags, &pool("p", "sk-caller-1", "A"), env).unwrap();
    assert!(c.upstreams.is_empty());
    assert_eq!(c.pools.len(), 1);
    assert_eq!(c.pools[0].caller, fingerprint("sk-caller-1"));
    assert!(!format!("{c:?}").contains("secret-value-of"), "{c:?}");
    assert!(!format!("{c:?}").contains("sk-caller-1"));
}

/// Every member capped: the pool stops. The job that met the last cap
/// gets that answer; the next ones get the same answer at once, nothing
/// sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_members_are_all_stopped_answers_with_the_last_stop() {
    let keys = Keys::new("allcapped");
    let a = MockServer::start(roomy()).await.unwrap();
    let b = MockServer::start(roomy()).await.unwrap();
    let p = proxy(None, &pool_toml("claude", &keys, &a, &b, 1, 1)).await;
    assert_eq!(message(&p, &keys.caller).await.status, 200);
    a.set_spend_cap(Some(0.0));
    b.set_spend_cap(Some(0.0));
    let first = message(&p, &keys.caller).await;
    assert!(first.status.is_client_error(), "{}", first.body);
    assert_eq!(first.headers["x-ratewise-action"], "stop_queue");
    let sent = a.records().len() + b.records().len();
    // One send met each member's cap, no more.
    assert!(sent <= 3, "{sent}");
    for _ in 0..3 {
        let again = message(&p, &keys.caller).await;
        assert_eq!(again.status, first.status, "{}", again.body);
        assert_eq!(again.json()["error"]["type"], first.json()["error"]["type"]);
        assert_eq!(again.headers["x-ratewise-action"], "stop_queue");
    }
    assert_eq!(a.records().len() + b.records().len(), sent);
    let pools = pools_status(&p).await;
    for m in pools[0]["members"].as_array().unwrap() {
        assert_eq!(m["stopped"]["cause"], "spend_cap", "{pools}");
    }
    p.shutdown().await;
}

/// A member's stop is journaled with its evidence: after a restart on the
/// same journal, the capped member gets nothing (not even the one send
/// that would meet its cap again), `/status` still shows it stopped, and
/// an operator's `/resume` of its fingerprint brings it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_stop_survives_a_restart_and_an_operator_resumes_it() {
    let keys = Keys::new("restart");
    let a = MockServer::start(roomy()).await.unwrap();
    let b = MockServer::start(roomy()).await.unwrap();
    let journal = std::env::temp_dir().join(format!(
        "ratewise-pools-restart-{}.jsonl",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&journal);
    let toml = format!(
        "journal = {:?}\n{}",
        journal.display().to_string(),
        pool_toml("claude", &keys, &a, &b, 1, 1)
    );
    let p = proxy(None, &toml).await;
    a.set_spend_cap(Some(0.0));
    for _ in 0..6 {
        assert_eq!(message(&p, &keys.caller).await.status, 200);
    }
    let member = fingerprint(&keys.main);
    let pools = pools_status(&p).await;
    assert_eq!(pools[0]["members"][0]["stopped"]["cause"], "spend_cap");
    p.shutdown().await;

    let before = a.records().len();
    let p = proxy(None, &toml).await;
    for _ in 0..6 {
        assert_eq!(message(&p, &keys.caller).await.status, 200);
    }
    assert_eq!(
        a.records().len(),
        before,
        "nothing sent to the capped member"
    );
    let pools = pools_status(&p).await;
    let stop = &pools[0]["members"][0]["stopped"];
    assert_eq!(stop["cause"], "spend_cap", "{pools}");
    // Its evidence came back with it.
    assert!(stop["status"].as_u64().is_some(), "{pools}");
    assert!(stop["since_ms"].as_u64().is_some(), "{pools}");

    // The cap lifted at the provider; an operator resumes the member.
    a.set_spend_cap(None);
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::post(format!("http://{}/resume?key={member}", p.admin_addr))
        .header("authorization", p.app.admin.authorization())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    for _ in 0..6 {
        assert_eq!(message(&p, &keys.caller).await.status, 200);
    }
    assert!(a.records().len() > before, "the member is used again");
    let pools = pools_status(&p).await;
    assert!(pools[0]["members"][0]["stopped"].is_null(), "{pools}");
    p.shutdown().await;
    let _ = std::fs::remove_file(&journal);
}

/// An OpenAI pool: the SDK's bearer token selects it on OpenAI's path,
/// and each member gets its own bearer token, the caller's removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_pool_is_selected_by_the_bearer_token() {
    let keys = Keys::new("openai");
    let a = MockServer::start(roomy()).await.unwrap();
    let b = MockServer::start(roomy()).await.unwrap();
    let toml = pool_toml("gpt", &keys, &a, &b, 1, 1).replace("\"anthropic\"", "\"openai\"");
    let p = proxy(None, &toml).await;
    let bearer = format!("Bearer {}", keys.caller);
    for _ in 0..8 {
        let r = post(
            &p,
            "/v1/chat/completions",
            &[("authorization", bearer.as_str())],
            OPENAI_BODY,
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.json()["choices"].is_array(), "{}", r.body);
    }
    let caller = mock_fingerprint(&keys.caller);
    for (m, key) in [(&a, &keys.main), (&b, &keys.backup)] {
        let recs = m.records();
        assert!(!recs.is_empty());
        assert!(recs
            .iter()
            .all(|r| r.key == mock_fingerprint(key) && r.key != caller));
    }
    let pools = pools_status(&p).await;
    assert_eq!(pools[0]["members"][0]["provider"], "openai");
    p.shutdown().await;
}

/// A Gemini pool: the caller's key in the URL (`?key=`) selects it; it
/// leaves the URL, and each member gets its own `x-goog-api-key`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_pool_is_selected_by_the_key_in_the_url() {
    let keys = Keys::new("gemini");
    let mut cfg = roomy();
    cfg.gemini_limits.requests_per_minute = Some(100_000);
    cfg.gemini_limits.input_tokens_per_minute = Some(100_000_000);
    let a = MockServer::start(cfg.clone()).await.unwrap();
    let b = MockServer::start(cfg).await.unwrap();
    let toml = pool_toml("gem", &keys, &a, &b, 1, 1).replace("\"anthropic\"", "\"gemini\"");
    let p = proxy(None, &toml).await;
    let body = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":64}}"#;
    for _ in 0..6 {
        let path = format!(
            "/v1beta/models/gemini-2.5-flash:generateContent?key={}",
            keys.caller
        );
        let r = post(&p, &path, &[], body).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.json()["candidates"].is_array(), "{}", r.body);
    }
    let caller = mock_fingerprint(&keys.caller);
    for (m, key) in [(&a, &keys.main), (&b, &keys.backup)] {
        let recs = m.records();
        assert!(!recs.is_empty());
        assert!(recs
            .iter()
            .all(|r| r.key == mock_fingerprint(key) && r.key != caller));
    }
    p.shutdown().await;
}
