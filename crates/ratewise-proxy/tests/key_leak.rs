//! A caller's key goes upstream and nowhere else. Gemini's key may travel
//! in the URL (`?key=…`), where a proxy that logs or keeps paths would
//! leak it: here it is sent with every kind of call (a success, a 429
//! retried, a stream, a billing stop and the stop replayed, a call to no
//! upstream), and so are keys in `x-goog-api-key` and Azure's `api-key`.
//! Then every place the proxy writes is read — its logs (at debug), the
//! journal, `/status`, `/metrics`, every answer's status, headers and body,
//! and, with Redis, every key and value under its prefix — and no key is
//! found in any of them, while the upstream did receive each.

mod support;

use ratewise_proxy::keys::fingerprint;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use support::{admin, gemini_body, post, Scripted, Upstream};

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

/// Every log line of this test binary (its tests share the subscriber).
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

/// The keys of one run: distinct per test, so two tests of this binary
/// running at once never see each other's.
struct Secrets {
    query: String,
    header: String,
    azure: String,
}

impl Secrets {
    fn new(tag: &str) -> Secrets {
        Secrets {
            // URL-safe, as Google's keys are.
            query: format!("AIzaSECRET-QUERY-{tag}-7f3a9c1e"),
            header: format!("AIzaSECRET-HEADER-{tag}-0b5d2e8f"),
            azure: format!("azureSECRET-APIKEY-{tag}-c4a16e02"),
        }
    }

    fn all(&self) -> [&str; 3] {
        [&self.query, &self.header, &self.azure]
    }
}

/// Everything the run left where someone could read it, by where.
struct Left {
    texts: Vec<(String, String)>,
}

impl Left {
    fn add(&mut self, place: impl Into<String>, text: impl Into<String>) {
        self.texts.push((place.into(), text.into()));
    }

    fn assert_holds_none_of(&self, secrets: &Secrets) {
        for (place, text) in &self.texts {
            for s in secrets.all() {
                assert!(
                    !text.contains(s),
                    "the key {s} leaked into {place}:\n{text}"
                );
                // Not even the part that makes it a secret, decoded or not.
                let core = &s[..s.len() - 9];
                assert!(!text.contains(core), "{core} leaked into {place}:\n{text}");
            }
        }
    }
}

/// Runs every kind of call with the three keys through a proxy (with a
/// journal, and with `redis` as its store when given); returns what it
/// left and the upstream.
async fn run(secrets: &Secrets, redis: Option<(&str, &str)>) -> (Left, Upstream) {
    let _ = logs();
    let up = Upstream::start().await;
    let journal = std::env::temp_dir().join(format!(
        "ratewise-key-leak-{}-{}.jsonl",
        std::process::id(),
        secrets.query.len() + secrets.header.len() + redis.map_or(0, |r| r.1.len())
    ));
    let _ = std::fs::remove_file(&journal);
    let mut toml = format!("journal = {:?}\n", journal.display().to_string());
    if let Some((url, prefix)) = redis {
        toml.push_str(&format!(
            "[redis]\nurl = \"{url}\"\nprefix = \"{prefix}\"\n"
        ));
    }
    // No --provider: the loopback host is unknown, and the paths say
    // whose API each call is (a Gemini path, an Azure deployment).
    let p = support::proxy(&up.url, None, &toml).await;
    let mut left = Left { texts: Vec::new() };
    let mut answers = Vec::new();

    // The key in the URL.
    let q = |path: &str| format!("{path}?key={}", secrets.query);
    let qs = |path: &str| format!("{path}?alt=sse&key={}", secrets.query);
    let gen = "/v1beta/models/gemini-2.5-flash:generateContent";
    let stream = "/v1beta/models/gemini-2.5-flash:streamGenerateContent";
    up.then(&[Scripted::Quota]);
    answers.push(post(&p, &q(gen), &[], &gemini_body("hi", Some(16))).await);
    answers.push(post(&p, &qs(stream), &[], &gemini_body("hi", Some(16))).await);
    answers.push(
        post(
            &p,
            &q(gen),
            &[("x-ratewise-upstream", "nope")],
            &gemini_body("hi", None),
        )
        .await,
    );
    // The key in x-goog-api-key: a 429 retried, then a success.
    let h = [("x-goog-api-key", secrets.header.as_str())];
    up.then(&[Scripted::Quota]);
    answers.push(post(&p, gen, &h, &gemini_body("hi", Some(16))).await);
    // Azure's api-key.
    let az = "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21";
    let a = [("api-key", secrets.azure.as_str())];
    let az_body = r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":8}"#;
    answers.push(post(&p, az, &a, az_body).await);
    // The URL's key stopped for billing: its evidence is kept (journal,
    // Redis), and replayed to the next call.
    up.then(&[Scripted::Billing]);
    answers.push(post(&p, &q(gen), &[], &gemini_body("hi", Some(16))).await);
    answers.push(post(&p, &q(gen), &[], &gemini_body("hi", Some(16))).await);

    let statuses: Vec<u16> = answers.iter().map(|a| a.status.as_u16()).collect();
    assert_eq!(
        statuses,
        [200, 200, 400, 200, 200, 400, 400],
        "{answers:#?}"
    );
    assert_eq!(answers[5].action(), "stop_queue");
    assert_eq!(answers[6].action(), "stop_queue");
    for (i, a) in answers.iter().enumerate() {
        left.add(format!("answer {i}"), a.text());
    }

    // What reached the upstream: each key, where its caller put it.
    let seen = up.seen();
    assert_eq!(seen.len(), 7, "{seen:#?}");
    let with_query: Vec<_> = seen
        .iter()
        .filter(|s| s.uri.contains(&secrets.query))
        .collect();
    assert_eq!(
        with_query.len(),
        4,
        "2 + the 429's retry + the billing stop"
    );
    assert!(with_query
        .iter()
        .any(|s| s.uri == format!("{stream}?alt=sse&key={}", secrets.query)));
    assert_eq!(
        seen.iter()
            .filter(|s| s
                .headers
                .get("x-goog-api-key")
                .is_some_and(|v| v == secrets.header.as_str()))
            .count(),
        2
    );
    assert_eq!(
        seen.iter()
            .filter(|s| s
                .headers
                .get("api-key")
                .is_some_and(|v| v == secrets.azure.as_str()))
            .count(),
        1
    );

    for path in ["/status", "/metrics", "/healthz"] {
        let (_, body) = admin(&p, "GET", path).await;
        left.add(path, body);
    }
    // Each key was seen as its own: its fingerprint, never itself.
    let (_, status) = admin(&p, "GET", "/status").await;
    for s in secrets.all() {
        assert!(status.contains(&fingerprint(s)), "{s}: {status}");
    }
    p.shutdown().await;
    left.add("journal", std::fs::read_to_string(&journal).unwrap());

    // An upstream that cannot be reached: the transport's error, in the
    // answer and the logs, names no key.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let gone = support::proxy(
        &format!("http://{closed}"),
        None,
        "[policy]\nmax_attempts = 1\n",
    )
    .await;
    let a = post(&gone, &q(gen), &[], &gemini_body("hi", Some(16))).await;
    assert!(a.status.is_server_error(), "{}", a.text());
    left.add("the answer of an unreachable upstream", a.text());
    gone.shutdown().await;
    let _ = std::fs::remove_file(&journal);
    (left, up)
}

fn log_text() -> String {
    String::from_utf8_lossy(&logs().0.lock().unwrap()).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_in_the_url_or_a_header_reaches_the_upstream_and_nothing_else() {
    let secrets = Secrets::new("mem");
    let (mut left, _up) = run(&secrets, None).await;
    let logs = log_text();
    // The paths were logged, their keys redacted.
    assert!(
        logs.contains("generateContent?key=REDACTED"),
        "the path is logged, redacted: {logs}"
    );
    assert!(logs.contains(&fingerprint(&secrets.query)), "{logs}");
    left.add("logs", logs);
    left.assert_holds_none_of(&secrets);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server"]
async fn a_key_in_the_url_never_reaches_redis() {
    let (url, _server) = ratewise_redis::testing::redis();
    let prefix = ratewise_redis::testing::prefix();
    let secrets = Secrets::new("redis");
    let (mut left, _up) = run(&secrets, Some((&url, &prefix))).await;
    // Every key under the prefix, and every value, whatever its type.
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        keys.iter()
            .any(|k| k.contains(&fingerprint(&secrets.query))),
        "the URL's key has its record, under its fingerprint: {keys:?}"
    );
    let mut dump = String::new();
    for k in &keys {
        dump.push_str(k);
        dump.push('\n');
        let kind: String = redis::cmd("TYPE")
            .arg(k)
            .query_async(&mut conn)
            .await
            .unwrap();
        let values: Vec<Vec<u8>> = match kind.as_str() {
            "string" => vec![redis::cmd("GET")
                .arg(k)
                .query_async(&mut conn)
                .await
                .unwrap()],
            "hash" => redis::cmd("HGETALL")
                .arg(k)
                .query_async(&mut conn)
                .await
                .unwrap(),
            "list" => redis::cmd("LRANGE")
                .arg(k)
                .arg(0)
                .arg(-1)
                .query_async(&mut conn)
                .await
                .unwrap(),
            "set" => redis::cmd("SMEMBERS")
                .arg(k)
                .query_async(&mut conn)
                .await
                .unwrap(),
            "zset" => redis::cmd("ZRANGE")
                .arg(k)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut conn)
                .await
                .unwrap(),
            "stream" => {
                let v: redis::Value = redis::cmd("XRANGE")
                    .arg(k)
                    .arg("-")
                    .arg("+")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                vec![format!("{v:?}").into_bytes()]
            }
            other => panic!("{k}: a Redis {other} this test cannot read"),
        };
        for v in values {
            dump.push_str(&String::from_utf8_lossy(&v));
            dump.push('\n');
        }
    }
    assert!(
        dump.contains("stop-note") && dump.contains("enable billing"),
        "the stop's evidence is in Redis: {dump}"
    );
    left.add("redis", dump);
    left.add("logs", log_text());
    left.assert_holds_none_of(&secrets);
}
