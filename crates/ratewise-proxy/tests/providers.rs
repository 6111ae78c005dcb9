//! The providers' own paths and key headers through `ratewise proxy`, on
//! loopback against a small upstream (`support`): Gemini's native API (the
//! model in the path, `generationConfig.maxOutputTokens` reserved, `alt=sse`
//! streams, keys in `x-goog-api-key` or `?key=`, the proxy's own answers in
//! Google's error shape) and Azure OpenAI's deployments (the deployment as
//! the model, `api-key`).

mod support;

use ratewise_proxy::keys::fingerprint;
use support::{admin, gemini_body, post, proxy, until, Scripted, Upstream};

const GEMINI_KEY: &str = "AIzaSy-test-GEMINI-1";
const FLASH: &str = "/v1beta/models/gemini-2.5-flash:generateContent";

/// A class per Gemini model: `gemini-2.5-flash` may reserve 1,000 output
/// tokens a minute, `gemini-2.5-pro` 120,000 (2,000 a second),
/// `gemini-2.0-flash` anything.
const CLASSES: &str = r#"
[[class]]
name = "gemini-2.5-flash"
limits = { requests = 1000, input_tokens = 1000000, output_tokens = 1000 }
[[class]]
name = "gemini-2.5-pro"
limits = { requests = 1000, input_tokens = 100000000, output_tokens = 120000 }
"#;

fn google_shape(body: &str, status: u16, word: &str) {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{body}"));
    assert_eq!(v["error"]["code"], status, "{body}");
    assert_eq!(v["error"]["status"], word, "{body}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("ratewise:")),
        "{body}"
    );
}

/// The output tokens reserved now in `class` of the one key seen, as
/// `/status` shows the level of its `output_tokens` bucket.
async fn output_level(p: &ratewise_proxy::Running, class: &str) -> f64 {
    let (_, status) = admin(p, "GET", "/status").await;
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    let classes = v["keys"][0]["classes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let c = classes
        .iter()
        .find(|c| c["class"] == class)
        .unwrap_or_else(|| panic!("no class {class}: {status}"));
    c["levels"]["output_tokens"]
        .as_f64()
        .unwrap_or_else(|| panic!("{status}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_call_is_paced_by_the_model_in_its_path_and_its_max_output_tokens() {
    let up = Upstream::start().await;
    let journal = std::env::temp_dir().join(format!(
        "ratewise-providers-journal-{}-{}",
        std::process::id(),
        fastrand_u64()
    ));
    let toml = format!("journal = {:?}\n{CLASSES}", journal.display().to_string());
    let p = proxy(&up.url, Some("gemini"), &toml).await;
    let key = [("x-goog-api-key", GEMINI_KEY)];

    // Sent with the caller's own body (the layer read another) to the
    // caller's own path.
    let body = gemini_body("hello", Some(100));
    let a = post(&p, FLASH, &key, &body).await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert!(a.body.contains("candidates"), "{}", a.body);
    let seen = up.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].uri, FLASH);
    assert_eq!(
        seen[0].body,
        body.as_bytes(),
        "the caller's body went upstream as sent"
    );
    assert_eq!(seen[0].headers["x-goog-api-key"], GEMINI_KEY);

    // While a call is with the provider, its output reservation is out of
    // its model's bucket: maxOutputTokens, else 8,192.
    up.hold();
    let pro = "/v1beta/models/gemini-2.5-pro:generateContent";
    for (path, class, max, reserved) in [
        (FLASH, "gemini-2.5-flash", Some(300), 300.0),
        (pro, "gemini-2.5-pro", None, 8192.0),
    ] {
        if class == "gemini-2.5-pro" {
            // The class's first call: its bucket is made by it.
            up.release(1);
            let a = post(&p, pro, &key, &gemini_body("hello", Some(1))).await;
            assert_eq!(a.status, 200, "{}", a.text());
        }
        let before = output_level(&p, class).await;
        let n = up.seen().len();
        let addr = p.addr;
        let call = tokio::spawn(async move {
            let client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http::<http_body_util::Full<bytes::Bytes>>();
            let req = http::Request::post(format!("http://{addr}{path}"))
                .header("x-goog-api-key", GEMINI_KEY)
                .body(http_body_util::Full::new(bytes::Bytes::from(gemini_body(
                    "hello", max,
                ))))
                .unwrap();
            client.request(req).await.unwrap().status()
        });
        until("the call reached the provider", || up.seen().len() > n).await;
        let during = output_level(&p, class).await;
        eprintln!("{max:?}: {before} -> {during}");
        // What refilled between the two reads (2,000 a second at most) is
        // the only difference.
        let taken = before - during;
        assert!(
            taken <= reserved + 1.0 && taken >= reserved - 200.0,
            "{max:?}: {before} -> {during}, {reserved} reserved"
        );
        up.release(1);
        assert_eq!(call.await.unwrap(), 200);
    }

    // Another model: its own class.
    up.release(1);
    let a = post(
        &p,
        "/v1/models/gemini-2.0-flash:generateContent",
        &key,
        &gemini_body("hello", None),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text());

    // The journal names the models of the paths, and the key by its
    // fingerprint.
    let j = std::fs::read_to_string(&journal).unwrap();
    assert!(j.contains(r#""model":"gemini-2.5-flash""#), "{j}");
    assert!(j.contains(r#""model":"gemini-2.0-flash""#), "{j}");
    assert!(j.contains(&fingerprint(GEMINI_KEY)), "{j}");
    until("every reservation ended", || {
        p.app.store.ledger().is_clean()
    })
    .await;
    p.shutdown().await;
    let _ = std::fs::remove_file(&journal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_stream_goes_through_whole_and_settles_at_the_usage_it_reports() {
    let up = Upstream::start().await;
    let p = proxy(&up.url, Some("gemini"), CLASSES).await;
    let key = [("x-goog-api-key", GEMINI_KEY)];
    // The class's bucket is made by a first call (1 output token).
    assert_eq!(
        post(&p, FLASH, &key, &gemini_body("hi", Some(1)))
            .await
            .status,
        200
    );
    until("settled", || p.app.store.ledger().is_clean()).await;
    let before = output_level(&p, "gemini-2.5-flash").await;
    let path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse";
    let a = post(&p, path, &key, &gemini_body("hi", Some(64))).await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.headers["content-type"], "text/event-stream");
    assert_eq!(
        a.body,
        support::GEMINI_SSE,
        "the stream, as the provider sent it"
    );
    assert_eq!(up.seen()[1].uri, path);
    until("the stream's reservation settled", || {
        p.app.store.ledger().is_clean()
    })
    .await;
    // 64 were reserved; the stream's last chunk says 2 were generated
    // (`candidatesTokenCount`), read as Gemini's: 2 are charged (Gemini
    // charges no `maxOutputTokens`), not the 64.
    let after = output_level(&p, "gemini-2.5-flash").await;
    let charged = before - after;
    assert!((0.0..=4.0).contains(&charged), "{before} -> {after}");
    let (_, metrics) = admin(&p, "GET", "/metrics").await;
    assert!(
        metrics.contains("ratewise_answers_total{status=\"200\",cause=\"success\"} 2"),
        "the stream ended complete: {metrics}"
    );
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxys_own_answers_to_a_gemini_caller_are_in_googles_shape() {
    let up = Upstream::start().await;
    let p = proxy(&up.url, Some("gemini"), "").await;
    let key = [("x-goog-api-key", GEMINI_KEY)];
    assert_eq!(
        post(&p, FLASH, &key, &gemini_body("hi", Some(8)))
            .await
            .status,
        200
    );
    // An operator's stop: 429 RESOURCE_EXHAUSTED, nothing sent.
    let fp = fingerprint(GEMINI_KEY);
    assert_eq!(admin(&p, "POST", &format!("/stop?key={fp}")).await.0, 200);
    let a = post(&p, FLASH, &key, &gemini_body("hi", Some(8))).await;
    assert_eq!(a.status, 429, "{}", a.text());
    google_shape(&a.body, 429, "RESOURCE_EXHAUSTED");
    assert_eq!(a.action(), "stop_queue");
    assert_eq!(up.seen().len(), 1);
    // No such upstream: 400 INVALID_ARGUMENT.
    let a = post(&p, FLASH, &[("x-ratewise-upstream", "nope")], "{}").await;
    assert_eq!(a.status, 400);
    google_shape(&a.body, 400, "INVALID_ARGUMENT");
    // Shutting down: 503 UNAVAILABLE.
    p.app.drain.start();
    let a = post(&p, FLASH, &key, &gemini_body("hi", Some(8))).await;
    assert_eq!(a.status, 503, "{}", a.text());
    google_shape(&a.body, 503, "UNAVAILABLE");
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_host_reads_a_gemini_path_as_gemini_with_its_query_key() {
    let up = Upstream::start().await;
    // No --provider: 127.0.0.1 is no provider's host.
    let p = proxy(&up.url, None, "").await;
    let path = format!("{FLASH}?key={GEMINI_KEY}");
    up.then(&[Scripted::Quota]);
    let a = post(&p, &path, &[], &gemini_body("hi", Some(8))).await;
    assert_eq!(a.status, 200, "retried after Google's 429: {}", a.text());
    let seen = up.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.uri == path), "{seen:?}");
    let (_, status) = admin(&p, "GET", "/status").await;
    assert!(status.contains(&fingerprint(GEMINI_KEY)), "{status}");
    assert!(!status.contains("anonymous"), "{status}");
    // Billing stops the key; the next call gets Google's answer replayed.
    up.then(&[Scripted::Billing]);
    let a = post(&p, &path, &[], &gemini_body("hi", Some(8))).await;
    assert_eq!(a.status, 400, "{}", a.text());
    assert_eq!(a.action(), "stop_queue");
    let b = post(&p, &path, &[], &gemini_body("hi", Some(8))).await;
    assert_eq!(b.action(), "stop_queue", "{}", b.text());
    assert_eq!(b.body, support::GEMINI_BILLING);
    assert_eq!(up.seen().len(), 3, "nothing sent once stopped");
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_azure_deployment_is_the_model_and_api_key_the_key() {
    const AZURE_KEY: &str = "azure-test-KEY-0001";
    let up = Upstream::start().await;
    let classes = r#"
[[class]]
name = "gpt-4o-prod"
limits = { requests = 1000, input_tokens = 1000000, output_tokens = 120000 }
"#;
    let p = proxy(&up.url, Some("azure"), classes).await;
    let path = "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21";
    let body = |max: u32| {
        format!(r#"{{"messages":[{{"role":"user","content":"hi"}}],"max_tokens":{max}}}"#)
    };
    let key = [("api-key", AZURE_KEY)];
    let a = post(&p, path, &key, &body(5)).await;
    assert_eq!(a.status, 200, "{}", a.text());
    let seen = up.seen();
    assert_eq!(seen[0].uri, path);
    assert_eq!(seen[0].headers["api-key"], AZURE_KEY);
    // While a call is with the provider, its body's max_tokens is out of
    // the deployment's bucket.
    up.hold();
    let before = output_level(&p, "gpt-4o-prod").await;
    let addr = p.addr;
    let call = tokio::spawn(async move {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<http_body_util::Full<bytes::Bytes>>();
        let req = http::Request::post(format!("http://{addr}{path}"))
            .header("api-key", AZURE_KEY)
            .body(http_body_util::Full::new(bytes::Bytes::from(body(700))))
            .unwrap();
        client.request(req).await.unwrap().status()
    });
    until("the call reached the provider", || up.seen().len() == 2).await;
    let taken = before - output_level(&p, "gpt-4o-prod").await;
    assert!((500.0..=701.0).contains(&taken), "{taken}");
    up.release(2);
    assert_eq!(call.await.unwrap(), 200);
    // Embeddings under another deployment.
    let a = post(
        &p,
        "/openai/deployments/embed-small/embeddings?api-version=2024-10-21",
        &key,
        r#"{"input":"hi"}"#,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text());
    let (_, status) = admin(&p, "GET", "/status").await;
    assert!(status.contains(&fingerprint(AZURE_KEY)), "{status}");
    assert!(status.contains(r#""class":"gpt-4o-prod""#), "{status}");
    // The proxy's own answers are OpenAI's shape.
    let a = post(&p, path, &[("x-ratewise-upstream", "nope")], "{}").await;
    assert_eq!(a.status, 400);
    let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error", "{}", a.body);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geminis_openai_compatible_path_is_answered_in_openais_shape() {
    const KEY: &str = "AIzaSy-test-COMPAT-1";
    let up = Upstream::start().await;
    let p = proxy(&up.url, Some("gemini"), "").await;
    let path = "/v1beta/openai/chat/completions";
    let body = r#"{"model":"gemini-2.5-flash","messages":[{"role":"user","content":"hi"}],"max_tokens":8}"#;
    let bearer = format!("Bearer {KEY}");
    let key = [("authorization", bearer.as_str())];
    let a = post(&p, path, &key, body).await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(up.seen()[0].body, body.as_bytes());
    let fp = fingerprint(KEY);
    assert_eq!(admin(&p, "POST", &format!("/stop?key={fp}")).await.0, 200);
    let a = post(&p, path, &key, body).await;
    assert_eq!(a.status, 429, "{}", a.text());
    let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    assert!(v["error"]["type"].is_string(), "{}", a.body);
    assert!(
        v["error"].get("status").is_none(),
        "OpenAI's shape: {}",
        a.body
    );
    assert_eq!(up.seen().len(), 1);
    p.shutdown().await;
}

fn fastrand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish()
}

/// Issue #47: Azure's daily quota, whose only hint is "Please retry after
/// 86400 seconds" in the message, was retried in 1.6 s. Its wait is past
/// the caller's deadline (the proxy's default): the provider said when, so
/// the job is handed back for then — a 429 in the provider's shape with
/// that `retry-after` and `x-ratewise-action: defer` — and nothing more is
/// sent (without a deadline the core defers it too: the fixture
/// `azure-429-retry-after-a-day-in-the-message`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_azure_daily_quota_in_the_message_is_never_retried_short() {
    let up = Upstream::start().await;
    let p = proxy(&up.url, Some("azure"), "").await;
    let path = "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21";
    up.then(&[Scripted::AzureDay]);
    let a = post(
        &p,
        path,
        &[("api-key", "azure-test-KEY-0002")],
        r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":5}"#,
    )
    .await;
    assert_eq!(a.status, 429, "{}", a.text());
    assert_eq!(a.action(), "defer", "{}", a.text());
    assert_eq!(a.headers["x-should-retry"], "false");
    let after: u64 = a.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((86_300..=86_400).contains(&after), "retry-after {after}");
    // In Azure's (OpenAI's) shape, so the SDK raises its RateLimitError.
    let body: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    assert!(body["error"]["message"].is_string(), "{body}");
    // Ended at once, on its answer: a short retry would have been sent
    // within the test (the old reading: 1.6 s).
    tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
    assert_eq!(up.seen().len(), 1, "no short retry");
    p.shutdown().await;
}
