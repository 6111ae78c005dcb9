//! The cloud channels of Claude over loopback: Bedrock's SigV4 checked as
//! Bedrock checks it (its shape always, its signature when the mock knows
//! the secret), and Claude on Vertex AI's route, token and body rules in
//! front of the Messages surface. Every refusal is read back through
//! ratewise-core's profile, which must not retry it.

mod common;
use common::*;
use http::{HeaderMap, StatusCode};
use ratewise_core::classify::{classify_response, Classification, ResponseView};
use ratewise_core::{Cause, Provider};
use ratewise_mock::request::sigv4;
use ratewise_mock::{BedrockConfig, Limits, MockConfig, MockServer};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::SystemTime;

const CONVERSE: &str = "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse";
const AKID: &str = "AKIDMOCKEXAMPLE";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const AMZ_DATE: &str = "20260102T030405Z";

fn classify(p: Provider, r: &Reply) -> Classification {
    classify_response(
        p,
        &ResponseView {
            status: StatusCode::from_u16(r.status).unwrap(),
            headers: &r.headers,
            body: &r.body,
        },
        SystemTime::now(),
    )
}

fn host(s: &MockServer) -> String {
    s.base_url().trim_start_matches("http://").to_owned()
}

fn converse_body() -> Vec<u8> {
    serde_json::to_vec(
        &json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}],
        "inferenceConfig": {"maxTokens": 20}}),
    )
    .unwrap()
}

/// The headers of a request to `path` signed with `secret` (`x-amz-date`,
/// `host`, `content-type` signed), as (name, value) pairs.
fn signed(
    s: &MockServer,
    path: &str,
    body: &[u8],
    akid: &str,
    secret: &str,
) -> Vec<(String, String)> {
    let mut h = HeaderMap::new();
    h.insert("content-type", "application/json".parse().unwrap());
    h.insert("host", host(s).parse().unwrap());
    h.insert("x-amz-date", AMZ_DATE.parse().unwrap());
    let names = ["content-type", "host", "x-amz-date"];
    let cr = sigv4::canonical_request("POST", path, "", &h, &names, &sigv4::sha256_hex(body));
    let sig = sigv4::signature(
        secret,
        AMZ_DATE,
        &AMZ_DATE[..8],
        "us-east-1",
        "bedrock",
        &cr,
    );
    vec![
        ("host".into(), host(s)),
        ("x-amz-date".into(), AMZ_DATE.into()),
        (
            "authorization".into(),
            format!(
                "AWS4-HMAC-SHA256 Credential={akid}/{}/us-east-1/bedrock/aws4_request, SignedHeaders={}, Signature={sig}",
                &AMZ_DATE[..8],
                names.join(";")
            ),
        ),
    ]
}

async fn send(s: &MockServer, path: &str, body: Vec<u8>, headers: &[(String, String)]) -> Reply {
    let extra: Vec<(&str, &str)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    post_raw(s, path, "", body, &extra).await
}

/// `headers` with `name` set to `value` (added, or replacing).
fn with(headers: &[(String, String)], name: &str, value: &str) -> Vec<(String, String)> {
    let mut h: Vec<(String, String)> = headers.iter().filter(|(n, _)| n != name).cloned().collect();
    h.push((name.into(), value.into()));
    h
}

fn auth_of(headers: &[(String, String)]) -> String {
    headers
        .iter()
        .find(|(n, _)| n == "authorization")
        .map(|(_, v)| v.clone())
        .unwrap()
}

fn assert_exception(r: &Reply, status: u16, kind: &str) {
    assert_eq!(r.status, status, "{}", r.text());
    let header = r.header("x-amzn-errortype").unwrap_or_default();
    assert!(header.starts_with(kind), "{header}");
    assert!(r.json()["message"].is_string(), "{}", r.text());
    // Never retried: every signature refusal is the credentials' fault
    // (ratewise-core stops the key — in a pool, that member).
    let c = classify(Provider::Bedrock, r);
    assert_eq!(c.cause, Cause::Authentication, "{kind}: {c:?}");
}

#[test]
fn sigv4_matches_known_vectors() {
    // AWS's SigV4 test suite, `get-vanilla`.
    let mut h = HeaderMap::new();
    h.insert("host", "example.amazonaws.com".parse().unwrap());
    h.insert("x-amz-date", "20150830T123600Z".parse().unwrap());
    let cr = sigv4::canonical_request(
        "GET",
        "/",
        "",
        &h,
        &["host", "x-amz-date"],
        &sigv4::sha256_hex(b""),
    );
    assert_eq!(
        sigv4::signature(
            SECRET,
            "20150830T123600Z",
            "20150830",
            "us-east-1",
            "service",
            &cr
        ),
        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
    );
    // A Converse request, computed independently (Python's hmac/hashlib,
    // the path quoted once more as botocore does for every service but
    // S3: `%3A` is signed as `%253A`).
    let mut h = HeaderMap::new();
    h.insert("content-type", "application/json".parse().unwrap());
    h.insert(
        "host",
        "bedrock-runtime.us-east-1.amazonaws.com".parse().unwrap(),
    );
    h.insert("x-amz-date", AMZ_DATE.parse().unwrap());
    let cr = sigv4::canonical_request(
        "POST",
        CONVERSE,
        "",
        &h,
        &["content-type", "host", "x-amz-date"],
        &sigv4::sha256_hex(br#"{"messages":[]}"#),
    );
    assert!(cr.contains("v1%253A0"), "{cr}");
    assert_eq!(
        sigv4::signature(SECRET, AMZ_DATE, "20260102", "us-east-1", "bedrock", &cr),
        "663ddd65b03a7249602e254d0d0856b7152231c05065b092f35374d151c4c98f"
    );
}

#[tokio::test]
async fn bedrock_sigv4_shape_is_checked_without_a_secret() {
    let s = MockServer::start(MockConfig::default()).await.unwrap();
    let good = signed(&s, CONVERSE, &converse_body(), AKID, "any secret");
    // Shape only: any well-formed signature passes, a Bearer token too.
    let ok = send(&s, CONVERSE, converse_body(), &good).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    let bearer = [(
        "authorization".to_owned(),
        "Bearer bedrock-api-key".to_owned(),
    )];
    assert_eq!(
        send(&s, CONVERSE, converse_body(), &bearer).await.status,
        200
    );

    // No Authorization: 403 MissingAuthenticationTokenException.
    let none = send(&s, CONVERSE, converse_body(), &[]).await;
    assert_exception(&none, 403, "MissingAuthenticationTokenException");
    assert_eq!(none.json()["message"], "Missing Authentication Token");

    // Malformed: 400 IncompleteSignatureException, naming what is wrong.
    let auth = auth_of(&good);
    let sig_at = auth.find(", Signature=").unwrap();
    let cases = [
        (auth[..sig_at].to_string(), "'Signature'"),
        (auth.replace("Signature=", "Signature=0"), "64"),
        (auth.replace("/aws4_request", ""), "5 parts"),
        (
            auth.replace("AWS4-HMAC-SHA256", "AWS4-HMAC-SHA1"),
            "AWS4-HMAC-SHA256",
        ),
        (
            auth.replace(
                "content-type;host;x-amz-date",
                "host;content-type;x-amz-date",
            ),
            "sorted",
        ),
        (
            auth.replace("content-type;host;x-amz-date", "content-type;x-amz-date"),
            "'host'",
        ),
    ];
    for (bad, says) in cases {
        let r = send(
            &s,
            CONVERSE,
            converse_body(),
            &with(&good, "authorization", &bad),
        )
        .await;
        assert_exception(&r, 400, "IncompleteSignatureException");
        assert!(r.text().contains(says), "{bad}: {}", r.text());
    }
    let no_date: Vec<_> = good
        .iter()
        .filter(|(n, _)| n != "x-amz-date")
        .cloned()
        .collect();
    let r = send(&s, CONVERSE, converse_body(), &no_date).await;
    assert_exception(&r, 400, "IncompleteSignatureException");
    assert!(r.text().contains("X-Amz-Date"), "{}", r.text());
    let r = send(
        &s,
        CONVERSE,
        converse_body(),
        &with(&good, "x-amz-date", "2026-01-02T03:04:05Z"),
    )
    .await;
    assert_exception(&r, 400, "IncompleteSignatureException");

    // Well formed but not holding: 403 InvalidSignatureException.
    let wrong_service = with(&good, "authorization", &auth.replace("/bedrock/", "/s3/"));
    let r = send(&s, CONVERSE, converse_body(), &wrong_service).await;
    assert_exception(&r, 403, "InvalidSignatureException");
    assert!(r.text().contains("'bedrock'"), "{}", r.text());
    let r = send(
        &s,
        CONVERSE,
        converse_body(),
        &with(&good, "x-amz-date", "20260103T030405Z"),
    )
    .await;
    assert_exception(&r, 403, "InvalidSignatureException");
    assert!(
        r.text().contains("Date in Credential scope"),
        "{}",
        r.text()
    );
    let unsent = auth.replace(
        "content-type;host;x-amz-date",
        "content-type;host;x-amz-date;x-amz-target",
    );
    let r = send(
        &s,
        CONVERSE,
        converse_body(),
        &with(&good, "authorization", &unsent),
    )
    .await;
    assert_exception(&r, 403, "InvalidSignatureException");
    let r = send(
        &s,
        CONVERSE,
        converse_body(),
        &with(&good, "x-amz-content-sha256", &"0".repeat(64)),
    )
    .await;
    assert_exception(&r, 403, "InvalidSignatureException");

    // Refusals are recorded, with no key.
    let recs = s.records();
    assert_eq!(recs.iter().filter(|r| r.status == Some(200)).count(), 2);
    assert!(recs
        .iter()
        .filter(|r| r.status != Some(200))
        .all(|r| r.cause == Cause::Authentication && r.key.is_empty()));
}

#[tokio::test]
async fn bedrock_sigv4_signatures_are_verified_with_a_known_secret() {
    let cfg = MockConfig {
        bedrock: BedrockConfig {
            sigv4_secrets: BTreeMap::from([(AKID.to_owned(), SECRET.to_owned())]),
        },
        ..MockConfig::default()
    };
    let s = MockServer::start(cfg).await.unwrap();
    let good = signed(&s, CONVERSE, &converse_body(), AKID, SECRET);
    let ok = send(&s, CONVERSE, converse_body(), &good).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.json()["output"]["message"]["role"], "assistant");
    // The same signature with a content hash that agrees still holds.
    let hashed = with(
        &good,
        "x-amz-content-sha256",
        &sigv4::sha256_hex(&converse_body()),
    );
    assert_eq!(
        send(&s, CONVERSE, converse_body(), &hashed).await.status,
        200
    );

    // Signed with another secret: 403 InvalidSignatureException, Bedrock's words.
    let forged = signed(&s, CONVERSE, &converse_body(), AKID, "not-the-secret");
    let r = send(&s, CONVERSE, converse_body(), &forged).await;
    assert_exception(&r, 403, "InvalidSignatureException");
    assert_eq!(
        r.json()["message"],
        ratewise_mock::request::bedrock::SIGNATURE_MISMATCH
    );
    // The body changed after signing.
    let mut other = converse_body();
    other.insert(1, b' ');
    let r = send(&s, CONVERSE, other, &good).await;
    assert_exception(&r, 403, "InvalidSignatureException");
    // Another model than the one signed.
    let r = send(
        &s,
        "/model/anthropic.claude-3-haiku-20240307-v1%3A1/converse",
        converse_body(),
        &good,
    )
    .await;
    assert_exception(&r, 403, "InvalidSignatureException");
    // An access key id the mock has no secret for.
    let stranger = signed(&s, CONVERSE, &converse_body(), "AKIDSTRANGER", SECRET);
    let r = send(&s, CONVERSE, converse_body(), &stranger).await;
    assert_exception(&r, 403, "UnrecognizedClientException");
    assert_eq!(
        r.json()["message"],
        "The security token included in the request is invalid."
    );
    assert_eq!(classify(Provider::Bedrock, &r).cause, Cause::Authentication);
    let recs = s.records();
    assert_eq!(recs.iter().filter(|r| r.status == Some(200)).count(), 2);
    assert_eq!(recs[0].model, "anthropic.claude-3-haiku-20240307-v1:0");
    assert!(
        !recs[0].key.contains(AKID),
        "fingerprinted: {}",
        recs[0].key
    );
    assert!(!format!(
        "{:?}",
        MockConfig {
            bedrock: BedrockConfig {
                sigv4_secrets: BTreeMap::from([(AKID.to_owned(), SECRET.to_owned())])
            },
            ..MockConfig::default()
        }
    )
    .contains(SECRET));
}

// ------------------------------------------------------------- Vertex AI

const PROJECT_PATH: &str = "/v1/projects/my-project/locations/us-east5/publishers/anthropic/models";
const TOKEN: &str = "ya29.mock-oauth-token";

fn vertex_path(model: &str, stream: bool) -> String {
    let method = if stream {
        "streamRawPredict"
    } else {
        "rawPredict"
    };
    format!("{PROJECT_PATH}/{model}:{method}")
}

fn vertex_body(max_tokens: u64, stream: bool) -> Value {
    json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": max_tokens, "stream": stream,
        "messages": [{"role": "user", "content": "hello there"}]})
}

async fn vertex(s: &MockServer, path: &str, token: &str, body: &Value) -> Reply {
    let auth = format!("Bearer {token}");
    let extra: Vec<(&str, &str)> = if token.is_empty() {
        vec![]
    } else {
        vec![("authorization", auth.as_str())]
    };
    post(s, path, "", body, &extra).await
}

#[tokio::test]
async fn vertex_raw_predict_answers_as_the_messages_api_under_its_limits() {
    let cfg = MockConfig {
        anthropic_limits: Limits {
            requests_per_minute: Some(2),
            ..Limits::default()
        },
        ..MockConfig::default()
    };
    let s = MockServer::start(cfg).await.unwrap();
    let model = "claude-sonnet-4-5@20250929";
    let r = vertex(
        &s,
        &vertex_path(model, false),
        TOKEN,
        &vertex_body(64, false),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (v["type"].as_str(), v["model"].as_str()),
        (Some("message"), Some(model))
    );
    assert!(v["content"][0]["text"].is_string());
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
    // Vertex states no limits in headers.
    assert!(
        !r.headers
            .keys()
            .any(|k| k.as_str().starts_with("anthropic-ratelimit")),
        "{:?}",
        r.headers
    );
    // `:streamRawPredict`: Anthropic's server-sent events.
    let r = vertex(&s, &vertex_path(model, true), TOKEN, &vertex_body(64, true)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let frames = r.frames();
    assert!(frames[0].contains("message_start"), "{frames:?}");
    assert!(
        frames.last().unwrap().contains("message_stop"),
        "{frames:?}"
    );
    // The third request of the minute: Anthropic's 429, paced under the
    // token's fingerprint with Anthropic's limits.
    let r = vertex(
        &s,
        &vertex_path(model, false),
        TOKEN,
        &vertex_body(64, false),
    )
    .await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    assert!(r.header("retry-after").is_some());
    assert_eq!(classify(Provider::Anthropic, &r).cause, Cause::RateLimited);
    // Another token has buckets of its own.
    let r = vertex(
        &s,
        &vertex_path(model, false),
        "ya29.other",
        &vertex_body(64, false),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let recs = s.records();
    assert!(recs
        .iter()
        .all(|r| r.provider == Provider::Anthropic && r.model == model));
    assert_eq!(recs[0].key, recs[2].key);
    assert_ne!(recs[0].key, recs[3].key);
    assert!(!recs[0].key.contains("ya29"));
    assert!(recs[1].stream);
}

#[tokio::test]
async fn vertex_requires_a_bearer_token_and_a_vertex_body() {
    let s = MockServer::start(MockConfig::default()).await.unwrap();
    let path = vertex_path("claude-haiku-4-5@20251001", false);
    // No token, or Anthropic's own header: Google's 401.
    for r in [
        vertex(&s, &path, "", &vertex_body(8, false)).await,
        post(&s, &path, "sk-ant-direct", &vertex_body(8, false), &[]).await,
    ] {
        assert_eq!(r.status, 401, "{}", r.text());
        assert_eq!(r.json()["error"]["status"], "UNAUTHENTICATED");
        assert_eq!(
            classify(Provider::Anthropic, &r).cause,
            Cause::Authentication
        );
    }
    // A model in the body, no anthropic_version, another version: 400.
    let mut with_model = vertex_body(8, false);
    with_model["model"] = json!("claude-haiku-4-5");
    let mut without_version = vertex_body(8, false);
    without_version
        .as_object_mut()
        .unwrap()
        .remove("anthropic_version");
    let mut bedrock_version = vertex_body(8, false);
    bedrock_version["anthropic_version"] = json!("bedrock-2023-05-31");
    for (body, says) in [
        (with_model, "model"),
        (without_version, "anthropic_version"),
        (bedrock_version, "vertex-2023-10-16"),
    ] {
        let r = vertex(&s, &path, TOKEN, &body).await;
        assert_eq!(r.status, 400, "{}", r.text());
        let v = r.json();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(says),
            "{v}"
        );
        assert_eq!(
            classify(Provider::Anthropic, &r).cause,
            Cause::InvalidRequest
        );
    }
    let recs = s.records();
    assert_eq!(recs.len(), 5);
    assert!(recs.iter().all(|r| r.status != Some(200)));
}
