//! The two routes a user writes for issue #40's fallback channels, run as
//! their examples run them (`examples/pool_bedrock.rs`,
//! `examples/pool_vertex.rs`, included here): the Anthropic API first,
//! Bedrock or Vertex when it answers 529. Every call is done; the
//! fallback's mock verifies each request (Bedrock: the SigV4 signature in
//! full, with the member's secret; Vertex: the route, the Bearer token,
//! `anthropic_version` and no `model`); the direct member's key, and the
//! caller's, never reach the fallback; each attempt's record names the
//! member it went to.

#[allow(dead_code)]
#[path = "../examples/pool_bedrock.rs"]
mod pool_bedrock;
#[allow(dead_code)]
#[path = "../examples/pool_vertex.rs"]
mod pool_vertex;

use http::HeaderMap;
use ratewise_mock::{Fault, FaultRule, MockServer};
use serde_json::Value;
use std::time::{Duration, UNIX_EPOCH};

const DIRECT_KEY: &str = "sk-ant-DIRECT-REAL-KEY";
const VERTEX_TOKEN: &str = "ya29.VERTEX-OAUTH-TOKEN";

/// The upstream part of a member label (`host:port#fp-…`).
fn upstream_of(label: &str) -> &str {
    label.split('#').next().unwrap_or(label)
}

/// Whether any header value or the body holds `secret`.
fn carries(headers: &HeaderMap, body: &[u8], secret: &str) -> bool {
    headers
        .values()
        .any(|v| String::from_utf8_lossy(v.as_bytes()).contains(secret))
        || String::from_utf8_lossy(body).contains(secret)
}

fn overloaded(server: &MockServer) {
    server.set_faults(vec![FaultRule::always(Fault::Overloaded)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bedrock_fallback_is_signed_translated_and_finishes_every_job() {
    let creds = pool_bedrock::demo_credentials();
    let (direct, bedrock) = pool_bedrock::mocks(&creds).await.unwrap();
    let pool = pool_bedrock::pool(
        &direct.base_url(),
        DIRECT_KEY,
        &bedrock.base_url(),
        creds.clone(),
    )
    .unwrap();
    let labels: Vec<String> = pool.members().iter().map(|m| m.label()).collect();
    let (direct_label, bedrock_label) = (labels[0].clone(), labels[1].clone());
    assert_eq!(
        upstream_of(&direct_label),
        direct.base_url().trim_start_matches("http://")
    );
    assert_eq!(
        upstream_of(&bedrock_label),
        bedrock.base_url().trim_start_matches("http://")
    );
    assert!(!bedrock_label.contains(&creds.secret_access_key));
    let layer = pool_bedrock::layer(pool).unwrap();

    let (healthy, sent_healthy) = pool_bedrock::run(&layer, &["h1", "h2", "h3", "h4"])
        .await
        .unwrap();
    overloaded(&direct);
    let (fallback, sent_fallback) = pool_bedrock::run(&layer, &["o1", "o2", "o3", "o4"])
        .await
        .unwrap();

    // Every call done, with a text from either shape.
    for c in healthy.iter().chain(&fallback) {
        assert_eq!(c.status, Some(200), "{c:?}");
        assert!(!c.text.is_empty(), "{c:?}");
        for (member, _) in &c.attempts {
            let member = member.as_deref().expect("every attempt names its member");
            assert!(labels.iter().any(|l| l == member), "{member}");
        }
    }
    // With the API overloaded, each job ends on Bedrock after at most one
    // 529 from the API: a fallback is the next attempt, not a new loop.
    for c in &fallback {
        let (last, rest) = c.attempts.split_last().unwrap();
        assert_eq!(last, &(Some(bedrock_label.clone()), Some(200)), "{c:?}");
        assert!(rest.len() <= 1, "{c:?}");
        assert!(
            rest.iter()
                .all(|a| a == &(Some(direct_label.clone()), Some(529))),
            "{c:?}"
        );
    }
    assert!(
        fallback.iter().any(|c| c.attempts.len() == 2),
        "at least one job met the overload first: {fallback:?}"
    );

    // Each attempt's member is where its request went (one send each, in
    // order: the jobs ran one after the other).
    let attempts: Vec<String> = healthy
        .iter()
        .chain(&fallback)
        .flat_map(|c| c.attempts.iter().map(|(m, _)| m.clone().unwrap()))
        .collect();
    let sent: Vec<&pool_bedrock::Sent> = sent_healthy.iter().chain(&sent_fallback).collect();
    assert_eq!(attempts.len(), sent.len());
    for (member, s) in attempts.iter().zip(&sent) {
        assert_eq!(
            s.uri.authority().map(|a| a.as_str()),
            Some(upstream_of(member)),
            "{}",
            s.uri
        );
    }

    // What Bedrock got: a signed Converse request and no one else's key.
    let to_bedrock: Vec<_> = sent
        .iter()
        .filter(|s| s.uri.authority().map(|a| a.as_str()) == Some(upstream_of(&bedrock_label)))
        .collect();
    assert_eq!(to_bedrock.len(), bedrock.records().len());
    assert!(to_bedrock.len() >= fallback.len());
    for s in &to_bedrock {
        assert_eq!(
            s.uri.path(),
            "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse"
        );
        let auth = s.headers["authorization"].to_str().unwrap();
        assert!(
            auth.starts_with(&format!(
                "AWS4-HMAC-SHA256 Credential={}/",
                creds.access_key_id
            )),
            "{auth}"
        );
        assert!(auth.contains("/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date, Signature="));
        assert!(s.headers["authorization"].is_sensitive());
        assert!(s.headers.contains_key("x-amz-date"));
        for secret in [
            DIRECT_KEY,
            pool_bedrock::CALLER_KEY,
            &creds.secret_access_key,
        ] {
            assert!(
                !carries(&s.headers, &s.body, secret),
                "{secret} reached Bedrock"
            );
        }
        assert!(
            s.headers.get("x-api-key").is_none() && s.headers.get("anthropic-version").is_none()
        );
        let v: Value = serde_json::from_slice(&s.body).unwrap();
        assert!(
            v.get("model").is_none() && v.get("max_tokens").is_none(),
            "{v}"
        );
        assert_eq!(v["inferenceConfig"]["maxTokens"], 64);
        assert_eq!(v["system"][0]["text"], "Be brief.");
        assert_eq!(v["messages"][0]["role"], "user");
        assert!(v["messages"][0]["content"][0]["text"].is_string(), "{v}");
    }
    // The mock knows the member's secret: each of those requests passed a
    // full SigV4 verification (a bad one is a 403, see the mock's tests).
    assert!(bedrock.records().iter().all(|r| r.status == Some(200)));
    assert!(bedrock
        .records()
        .iter()
        .all(|r| r.model == pool_bedrock::BEDROCK_MODEL));

    // The layer's own account agrees: sends per member, the provider each
    // is read by, no member stopped (an overload is not a stop).
    let status = layer.pool_status().await.unwrap();
    assert_eq!(status.members[1].sends as usize, to_bedrock.len());
    assert_eq!(
        status.members[0].sends as usize,
        sent.len() - to_bedrock.len()
    );
    assert_eq!(
        (status.members[0].provider, status.members[1].provider),
        ("anthropic", "bedrock")
    );
    assert!(status.members.iter().all(|m| m.stopped.is_none()));

    // What the API got: its own key, never the caller's.
    let api_key = ratewise_mock::request::key_fingerprint(DIRECT_KEY);
    assert!(direct.records().iter().all(|r| r.key == api_key));
    for s in sent
        .iter()
        .filter(|s| s.uri.authority().map(|a| a.as_str()) == Some(upstream_of(&direct_label)))
    {
        assert_eq!(s.headers["x-api-key"], DIRECT_KEY);
        assert!(!carries(&s.headers, &s.body, pool_bedrock::CALLER_KEY));
    }
}

#[test]
fn the_bedrock_signer_matches_aws_vectors() {
    // AWS's SigV4 test suite, `get-vanilla`.
    let creds = pool_bedrock::AwsCredentials {
        access_key_id: "AKIDEXAMPLE".into(),
        secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
        session_token: None,
    };
    let mut h = HeaderMap::new();
    h.insert("host", "example.amazonaws.com".parse().unwrap());
    h.insert("x-amz-date", "20150830T123600Z".parse().unwrap());
    let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    assert_eq!(
        pool_bedrock::authorization("GET", "/", &h, empty, &creds, "us-east-1", "service").unwrap(),
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
         SignedHeaders=host;x-amz-date, \
         Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
    );
    // RFC 4231, test case 2.
    let mac = pool_bedrock::hmac_sha256(b"Jefe", b"what do ya want for nothing?");
    assert_eq!(
        mac[..4],
        [0x5b, 0xdc, 0xc1, 0x46],
        "HMAC-SHA256 of RFC 4231 case 2"
    );
    let at = |secs: u64| pool_bedrock::amz_date(UNIX_EPOCH + Duration::from_secs(secs));
    assert_eq!(at(1_440_938_160), "20150830T123600Z");
    assert_eq!(at(1_709_251_199), "20240229T235959Z");
    assert_eq!(at(951_868_800), "20000301T000000Z");
    assert_eq!(at(0), "19700101T000000Z");
}

#[test]
fn bodies_the_bedrock_route_cannot_translate_are_refused() {
    use serde_json::json;
    let ok = pool_bedrock::converse_body(&json!({"max_tokens": 5, "temperature": 0.5,
        "system": [{"type": "text", "text": "s"}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}))
    .unwrap();
    assert_eq!(
        ok["inferenceConfig"],
        json!({"maxTokens": 5, "temperature": 0.5})
    );
    assert_eq!(ok["system"], json!([{"text": "s"}]));
    for bad in [
        json!({"max_tokens": 5, "stream": true, "messages": []}),
        json!({"max_tokens": 5, "tools": [], "messages": []}),
        json!({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]}),
        json!({"max_tokens": 5}),
        json!([1]),
    ] {
        assert!(pool_bedrock::converse_body(&bad).is_err(), "{bad}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vertex_fallback_moves_the_model_adds_the_version_and_finishes_every_job() {
    let (direct, vertex) = pool_vertex::mocks().await.unwrap();
    let pool = pool_vertex::pool(
        &direct.base_url(),
        DIRECT_KEY,
        &vertex.base_url(),
        VERTEX_TOKEN,
    )
    .unwrap();
    let labels: Vec<String> = pool.members().iter().map(|m| m.label()).collect();
    let (direct_label, vertex_label) = (labels[0].clone(), labels[1].clone());
    assert!(!vertex_label.contains(VERTEX_TOKEN));
    let layer = pool_vertex::layer(pool).unwrap();

    let (healthy, sent_healthy) = pool_vertex::run(
        &layer,
        &[("h1", false), ("h2", true), ("h3", false), ("h4", false)],
    )
    .await
    .unwrap();
    overloaded(&direct);
    let (fallback, sent_fallback) = pool_vertex::run(
        &layer,
        &[("o1", false), ("o2", true), ("o3", false), ("o4", true)],
    )
    .await
    .unwrap();

    for c in healthy.iter().chain(&fallback) {
        assert_eq!(c.status, Some(200), "{c:?}");
        assert!(!c.text.is_empty(), "{c:?}");
        for (member, _) in &c.attempts {
            let member = member.as_deref().expect("every attempt names its member");
            assert!(labels.iter().any(|l| l == member), "{member}");
        }
    }
    for c in &fallback {
        let (last, rest) = c.attempts.split_last().unwrap();
        assert_eq!(last, &(Some(vertex_label.clone()), Some(200)), "{c:?}");
        assert!(rest.len() <= 1, "{c:?}");
        assert!(
            rest.iter()
                .all(|a| a == &(Some(direct_label.clone()), Some(529))),
            "{c:?}"
        );
    }
    // The streamed jobs came back as streams from `:streamRawPredict`.
    assert!(fallback
        .iter()
        .filter(|c| c.job == "o2" || c.job == "o4")
        .all(|c| c.streamed));

    let attempts: Vec<String> = healthy
        .iter()
        .chain(&fallback)
        .flat_map(|c| c.attempts.iter().map(|(m, _)| m.clone().unwrap()))
        .collect();
    let sent: Vec<&pool_vertex::Sent> = sent_healthy.iter().chain(&sent_fallback).collect();
    assert_eq!(attempts.len(), sent.len());
    for (member, s) in attempts.iter().zip(&sent) {
        assert_eq!(
            s.uri.authority().map(|a| a.as_str()),
            Some(upstream_of(member))
        );
    }

    let to_vertex: Vec<_> = sent
        .iter()
        .filter(|s| s.uri.authority().map(|a| a.as_str()) == Some(upstream_of(&vertex_label)))
        .collect();
    assert_eq!(to_vertex.len(), vertex.records().len());
    for s in &to_vertex {
        let v: Value = serde_json::from_slice(&s.body).unwrap();
        let method = if v["stream"] == true {
            "streamRawPredict"
        } else {
            "rawPredict"
        };
        assert_eq!(
            s.uri.path(),
            format!(
                "/v1/projects/demo-project/locations/us-east5/publishers/anthropic/models/{}:{method}",
                pool_vertex::VERTEX_MODEL
            )
        );
        assert_eq!(v["anthropic_version"], pool_vertex::ANTHROPIC_VERSION);
        assert!(v.get("model").is_none(), "{v}");
        assert_eq!(
            s.headers["authorization"],
            format!("Bearer {VERTEX_TOKEN}").as_str()
        );
        assert!(s.headers["authorization"].is_sensitive());
        assert!(
            s.headers.get("x-api-key").is_none() && s.headers.get("anthropic-version").is_none()
        );
        for secret in [DIRECT_KEY, pool_vertex::CALLER_KEY] {
            assert!(
                !carries(&s.headers, &s.body, secret),
                "{secret} reached Vertex"
            );
        }
    }
    // The mock refuses a body with `model` or without `anthropic_version`
    // (400) and a request without a Bearer token (401): all were answered.
    let recs = vertex.records();
    assert!(recs.iter().all(|r| r.status == Some(200)), "{recs:?}");
    assert!(recs.iter().all(|r| r.model == pool_vertex::VERTEX_MODEL));
    assert_eq!(
        recs.iter().filter(|r| r.stream).count(),
        to_vertex
            .iter()
            .filter(|s| String::from_utf8_lossy(&s.body).contains("\"stream\":true"))
            .count()
    );
    assert!(recs
        .iter()
        .all(|r| r.key == ratewise_mock::request::key_fingerprint(VERTEX_TOKEN)));
    let api_key = ratewise_mock::request::key_fingerprint(DIRECT_KEY);
    assert!(direct.records().iter().all(|r| r.key == api_key));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_source_that_fails_sends_nothing_to_vertex() {
    let (_direct, vertex) = pool_vertex::mocks().await.unwrap();
    let route = pool_vertex::VertexRoute::new(&vertex.base_url(), "p", "us-east5", || {
        Err::<String, ratewise_tower::BoxError>("no credentials".into())
    })
    .unwrap();
    let member = ratewise_tower::pool::PoolMember::new(route)
        .model(pool_vertex::MODEL, pool_vertex::VERTEX_MODEL);
    let label = member.label();
    let pool = ratewise_tower::pool::Pool::new().member(member);
    let layer = pool_vertex::layer(pool).unwrap();
    let (calls, sent) = pool_vertex::run(&layer, &[("t1", false)]).await.unwrap();
    // Each attempt is decided as a connection never made (no status) on
    // the member it was for, within the one retry budget.
    assert_eq!(calls[0].status, None, "{calls:?}");
    assert!(!calls[0].attempts.is_empty());
    assert!(calls[0].attempts.len() <= ratewise_tower::Policy::default().max_attempts as usize);
    assert!(calls[0]
        .attempts
        .iter()
        .all(|(m, status)| m.as_deref() == Some(label.as_str()) && status.is_none()));
    assert!(sent.is_empty());
    assert!(vertex.records().is_empty());
}
