//! A pool whose fallback signs and translates: Claude on the Anthropic API
//! first, the same model on Amazon Bedrock when the API is overloaded
//! (issue #40). One job keeps one deadline and one retry budget across
//! both; each attempt's record names its member.
//!
//! [`BedrockRoute`] is the [`MemberRoute`] a user writes for Bedrock's
//! `Converse` API. For each attempt that goes to Bedrock it:
//!
//! * translates the Anthropic Messages body the caller wrote into a
//!   `Converse` body ([`converse_body`]): `messages` with `content` as
//!   `[{"text": …}]`, `system` as `[{"text": …}]`, `max_tokens` →
//!   `inferenceConfig.maxTokens` (and `temperature`, `top_p`,
//!   `stop_sequences`); a body it cannot translate (tool use, images, a
//!   `"stream": true` — `ConverseStream` is AWS's binary event stream) is
//!   an error, so nothing is sent to Bedrock for it;
//! * sends it to `/model/{Bedrock model id}/converse`: the model id is the
//!   member's name for the job's model ([`PoolMember::model`]);
//! * drops every caller header but `accept`, `accept-encoding` and
//!   `user-agent` (the caller's and the other members' keys never reach
//!   AWS) and signs the request with SigV4 ([`authorization`]: HMAC-SHA256
//!   over `sha2`, scope `yyyymmdd/region/bedrock/aws4_request`, signed
//!   `content-type`, `host`, `x-amz-content-sha256`, `x-amz-date` and, with
//!   temporary credentials, `x-amz-security-token`);
//! * is read by [`Provider::Bedrock`]'s rules (`ThrottlingException`,
//!   `ServiceUnavailableException`, …), and paced under the access key
//!   id's fingerprint.
//!
//! **The answer keeps Bedrock's shape.** A route rewrites the request, not
//! the answer: a job that finishes on Bedrock hands the caller a
//! `Converse` answer (`output.message.content[].text`, `stopReason`,
//! `usage.inputTokens` / `outputTokens`), one that finishes on the API an
//! Anthropic `message`. Callers of a mixed pool read both ([`text_of`]
//! does); the layer itself reads each by its member's provider.
//!
//! `main` starts two mock providers in this process (the Anthropic API
//! and a Bedrock that verifies every signature with the member's secret),
//! runs three calls while both are healthy, then makes the API answer
//! every request `529 overloaded` and runs three more: each of those
//! finishes on Bedrock, after at most one attempt on the API (the
//! overload holds the API's upstream for the next jobs).
//!
//! ```text
//! cargo run -p ratewise-tower --example pool_bedrock
//! ```

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use http::request::Parts;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_mock::{BedrockConfig, Fault, FaultRule, MockConfig, MockServer};
use ratewise_tower::pool::{HttpRoute, MemberRoute, Pool, PoolMember};
use ratewise_tower::{Attempts, BoxError, JobId, KeyLabel, Provider, RetryLayer};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tower::{Layer, Service, ServiceExt};

/// The model callers name, and Bedrock's id for it.
pub const MODEL: &str = "claude-sonnet-4-5";
/// Bedrock's model id of [`MODEL`].
pub const BEDROCK_MODEL: &str = "anthropic.claude-sonnet-4-5-20250929-v1:0";

/// An AWS access key. `Debug` shows the access key id only.
#[derive(Clone)]
pub struct AwsCredentials {
    /// The access key id (`AKIA…`, `ASIA…`).
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The session token of temporary credentials (STS, an assumed role).
    pub session_token: Option<String>,
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// A Bedrock `Converse` member: the body translated, the request signed.
pub struct BedrockRoute {
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    region: String,
    credentials: AwsCredentials,
    label: String,
}

impl BedrockRoute {
    /// Bedrock's runtime at `base` (`https://bedrock-runtime.us-east-1.amazonaws.com`)
    /// in `region`, signed with `credentials`.
    pub fn new(base: &str, region: &str, credentials: AwsCredentials) -> Result<Self, BoxError> {
        let uri: Uri = base.parse()?;
        let (Some(scheme), Some(authority)) = (uri.scheme().cloned(), uri.authority().cloned())
        else {
            return Err(format!("{base:?} needs a scheme and a host").into());
        };
        if region.is_empty()
            || !region
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(format!("{region:?} is not a region").into());
        }
        Ok(BedrockRoute {
            scheme,
            authority,
            region: region.to_owned(),
            // Paced under the access key id's fingerprint (never the secret).
            label: KeyLabel::fingerprint(&credentials.access_key_id)
                .as_str()
                .to_owned(),
            credentials,
        })
    }
}

/// The caller headers a Bedrock request keeps; every other one (keys,
/// `anthropic-version`, cookies) is dropped.
const KEPT: [HeaderName; 3] = [
    http::header::ACCEPT,
    http::header::ACCEPT_ENCODING,
    http::header::USER_AGENT,
];

impl MemberRoute for BedrockRoute {
    fn upstream(&self) -> &str {
        self.authority.as_str()
    }

    fn provider(&self) -> Provider {
        Provider::Bedrock
    }

    fn key_label(&self) -> String {
        self.label.clone()
    }

    fn prepare(&self, parts: &mut Parts, body: &mut Bytes, model: &str) -> Result<(), BoxError> {
        let caller: Value = serde_json::from_slice(body)?;
        let converse = serde_json::to_vec(&converse_body(&caller)?)?;
        let path = format!("/model/{}/converse", encode_segment(model));
        parts.uri = Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path.as_str())
            .build()?;
        let mut headers = HeaderMap::new();
        for name in KEPT {
            if let Some(v) = parts.headers.get(&name) {
                headers.insert(name, v.clone());
            }
        }
        let payload_hash = hex(&Sha256::digest(&converse));
        let mut signed = HeaderMap::new();
        signed.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        signed.insert(HOST, HeaderValue::from_str(self.authority.as_str())?);
        signed.insert(
            "x-amz-content-sha256",
            HeaderValue::from_str(&payload_hash)?,
        );
        signed.insert(
            "x-amz-date",
            HeaderValue::from_str(&amz_date(SystemTime::now()))?,
        );
        if let Some(token) = &self.credentials.session_token {
            let mut v = HeaderValue::from_str(token)?;
            v.set_sensitive(true);
            signed.insert("x-amz-security-token", v);
        }
        let auth = authorization(
            "POST",
            &path,
            &signed,
            &payload_hash,
            &self.credentials,
            &self.region,
            "bedrock",
        )?;
        let mut auth = HeaderValue::from_str(&auth)?;
        auth.set_sensitive(true);
        headers.extend(signed);
        headers.insert(AUTHORIZATION, auth);
        parts.headers = headers;
        *body = Bytes::from(converse);
        Ok(())
    }
}

/// An Anthropic Messages body as a Bedrock `Converse` body, or why it
/// cannot be one (a block other than text, tools, a stream).
pub fn converse_body(messages: &Value) -> Result<Value, BoxError> {
    let obj = messages
        .as_object()
        .ok_or("the body is not a JSON object")?;
    for field in ["tools", "tool_choice"] {
        if obj.contains_key(field) {
            return Err(format!("`{field}` is not translated by this route").into());
        }
    }
    if obj.get("stream").and_then(Value::as_bool) == Some(true) {
        return Err("a stream cannot go to Converse (ConverseStream is not HTTP SSE)".into());
    }
    let mut out = Map::new();
    let mut converse_messages = Vec::new();
    for m in obj
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("`messages` is missing")?
    {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or("a message without a role")?;
        converse_messages.push(json!({"role": role, "content": text_blocks(m.get("content"))?}));
    }
    out.insert("messages".into(), Value::Array(converse_messages));
    if let Some(system) = obj.get("system") {
        out.insert("system".into(), Value::Array(text_blocks(Some(system))?));
    }
    let mut config = Map::new();
    for (from, to) in [
        ("max_tokens", "maxTokens"),
        ("temperature", "temperature"),
        ("top_p", "topP"),
        ("stop_sequences", "stopSequences"),
    ] {
        if let Some(v) = obj.get(from) {
            config.insert(to.into(), v.clone());
        }
    }
    if !config.is_empty() {
        out.insert("inferenceConfig".into(), Value::Object(config));
    }
    Ok(Value::Object(out))
}

/// Anthropic content (a string, or text blocks) as Converse's `[{"text": …}]`.
fn text_blocks(content: Option<&Value>) -> Result<Vec<Value>, BoxError> {
    match content {
        Some(Value::String(s)) => Ok(vec![json!({ "text": s })]),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(
                |b| match (b.get("type").and_then(Value::as_str), b.get("text")) {
                    (Some("text"), Some(Value::String(t))) => Ok(json!({ "text": t })),
                    (kind, _) => Err(format!(
                        "a {:?} block is not translated by this route",
                        kind.unwrap_or("?")
                    )
                    .into()),
                },
            )
            .collect(),
        _ => Err("content must be a string or text blocks".into()),
    }
}

/// A path segment as AWS SDKs send it (`:` as `%3A`).
fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// SigV4's `Authorization` for a request whose signed headers are all of
/// `signed` (names lower case, as `http` keeps them) and whose body hashes
/// to `payload_hash`: the canonical request (the path as sent encoded once
/// more, as for every service but S3; no query), the string to sign, the
/// key derived from the secret for the day, region and service.
pub fn authorization(
    method: &str,
    path: &str,
    signed: &HeaderMap,
    payload_hash: &str,
    credentials: &AwsCredentials,
    region: &str,
    service: &str,
) -> Result<String, BoxError> {
    let amz_date = signed
        .get("x-amz-date")
        .and_then(|v| v.to_str().ok())
        .filter(|d| d.len() == 16)
        .ok_or("x-amz-date is missing")?;
    let date = &amz_date[..8];
    let mut names: Vec<&str> = signed.keys().map(HeaderName::as_str).collect();
    names.sort_unstable();
    let mut canonical_headers = String::new();
    for name in &names {
        let values: Vec<&str> = signed
            .get_all(*name)
            .iter()
            .map(|v| v.to_str().map(str::trim))
            .collect::<Result<_, _>>()?;
        canonical_headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    let signed_names = names.join(";");
    let canonical_request = format!(
        "{method}\n{}\n\n{canonical_headers}\n{signed_names}\n{payload_hash}",
        encode_path(path)
    );
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical_request.as_bytes()))
    );
    let key = [date, region, service, "aws4_request"].iter().fold(
        format!("AWS4{}", credentials.secret_access_key).into_bytes(),
        |key, part| hmac_sha256(&key, part.as_bytes()).to_vec(),
    );
    Ok(format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_names}, Signature={}",
        credentials.access_key_id,
        hex(&hmac_sha256(&key, string_to_sign.as_bytes()))
    ))
}

/// The canonical URI: the path encoded again, `/` kept.
fn encode_path(path: &str) -> String {
    path.split('/')
        .map(encode_segment)
        .collect::<Vec<_>>()
        .join("/")
}

/// HMAC-SHA256 (RFC 2104).
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let inner = Sha256::new()
        .chain_update(block.map(|b| b ^ 0x36))
        .chain_update(data)
        .finalize();
    Sha256::new()
        .chain_update(block.map(|b| b ^ 0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `yyyymmddThhmmssZ` (UTC) of `t`.
pub fn amz_date(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    // Days to a civil date (H. Hinnant's algorithm).
    let z = (secs / 86_400) as i64 + 719_468;
    let (era, doe) = (z.div_euclid(146_097), z.rem_euclid(146_097));
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let s = secs % 86_400;
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        s / 3600,
        s % 3600 / 60,
        s % 60
    )
}

// ------------------------------------------------------------ the demo

/// One call as `run` saw it.
#[derive(Debug)]
pub struct Call {
    /// Its job id.
    pub job: String,
    /// The final HTTP status (`None`: no answer).
    pub status: Option<u16>,
    /// Each attempt: its member's label and the status it got.
    pub attempts: Vec<(Option<String>, Option<u16>)>,
    /// The answer's text, read from either shape.
    pub text: String,
}

/// One request as it left the layer for a member: what a test inspects.
/// Kept in memory, never printed (its headers hold credentials).
pub struct Sent {
    /// Where it went.
    pub uri: Uri,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body.
    pub body: Bytes,
}

/// The caller's key: any value (the pool's members send their own). It
/// must reach no member.
pub const CALLER_KEY: &str = "sk-caller-placeholder";

/// The pool: the Anthropic API (`direct_key`) first by weight, Bedrock
/// (`credentials`) as the fallback.
pub fn pool(
    direct_base: &str,
    direct_key: &str,
    bedrock_base: &str,
    credentials: AwsCredentials,
) -> Result<Pool, BoxError> {
    Ok(Pool::new()
        .member(PoolMember::new(HttpRoute::anthropic(direct_base, direct_key)?).weight(3))
        .member(
            PoolMember::new(BedrockRoute::new(bedrock_base, "us-east-1", credentials)?)
                .model(MODEL, BEDROCK_MODEL)
                .weight(1),
        ))
}

/// Sends `jobs` through `layer`, one after the other, over a client that
/// keeps a copy of every request it sends.
pub async fn run(layer: &RetryLayer, jobs: &[&str]) -> Result<(Vec<Call>, Vec<Sent>), BoxError> {
    let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let log = sent.clone();
    let spy = tower::service_fn(move |req: Request<Full<Bytes>>| {
        let (client, log) = (client.clone(), log.clone());
        async move {
            let (parts, body) = req.into_parts();
            let body = body.collect().await?.to_bytes();
            log.lock().unwrap_or_else(|e| e.into_inner()).push(Sent {
                uri: parts.uri.clone(),
                headers: parts.headers.clone(),
                body: body.clone(),
            });
            let resp = client
                .request(Request::from_parts(parts, Full::new(body)))
                .await?;
            Ok::<_, BoxError>(resp)
        }
    });
    let mut svc = layer.layer(spy);
    let mut calls = Vec::new();
    for job in jobs {
        let body = json!({"model": MODEL, "max_tokens": 64, "system": "Be brief.",
            "messages": [{"role": "user", "content": format!("Say hello ({job}).")}]});
        let mut req = Request::post("http://pool.invalid/v1/messages")
            .header(CONTENT_TYPE, "application/json")
            .header("anthropic-version", "2023-06-01")
            .header("x-api-key", CALLER_KEY)
            .body(Full::new(Bytes::from(serde_json::to_vec(&body)?)))?;
        req.extensions_mut().insert(JobId::new(*job));
        let call = match svc.ready().await?.call(req).await {
            Ok(resp) => {
                let records = resp.extensions().get::<Attempts>().map(|a| a.0.clone());
                let status = resp.status().as_u16();
                let bytes = resp.into_body().collect().await?.to_bytes();
                Call {
                    job: job.to_string(),
                    status: Some(status),
                    attempts: records
                        .unwrap_or_default()
                        .into_iter()
                        .map(|r| (r.member, r.status))
                        .collect(),
                    text: text_of(&bytes),
                }
            }
            Err(e) => Call {
                job: job.to_string(),
                status: e.attempts().last().and_then(|r| r.status),
                attempts: e
                    .attempts()
                    .iter()
                    .map(|r| (r.member.clone(), r.status))
                    .collect(),
                text: String::new(),
            },
        };
        calls.push(call);
    }
    let sent = std::mem::take(&mut *sent.lock().unwrap_or_else(|e| e.into_inner()));
    Ok((calls, sent))
}

/// The text of an answer in either shape: Anthropic's `content[].text`,
/// or Converse's `output.message.content[].text`.
pub fn text_of(body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let content = v
        .pointer("/output/message/content")
        .or_else(|| v.get("content"))
        .and_then(Value::as_array);
    content
        .into_iter()
        .flatten()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect()
}

/// The two mock providers of the demo: the API, and a Bedrock that knows
/// `credentials`' secret (so it verifies each signature in full).
pub async fn mocks(credentials: &AwsCredentials) -> Result<(MockServer, MockServer), BoxError> {
    // Limits far above the demo's: the layer learns them from the API's
    // headers, and a tight one would make Bedrock the sooner member.
    let mut api = MockConfig::default();
    api.anthropic_limits.requests_per_minute = Some(10_000);
    api.anthropic_limits.input_tokens_per_minute = Some(10_000_000);
    api.anthropic_limits.output_tokens_per_minute = Some(10_000_000);
    let direct = MockServer::start(api).await?;
    let bedrock = MockServer::start(MockConfig {
        bedrock: BedrockConfig {
            sigv4_secrets: BTreeMap::from([(
                credentials.access_key_id.clone(),
                credentials.secret_access_key.clone(),
            )]),
        },
        ..MockConfig::default()
    })
    .await?;
    Ok((direct, bedrock))
}

/// The demo's AWS key (the mock's, not a real one).
pub fn demo_credentials() -> AwsCredentials {
    AwsCredentials {
        access_key_id: "AKIDMOCKPOOLDEMO".into(),
        secret_access_key: "mock-secret-access-key".into(),
        session_token: None,
    }
}

/// The layer over `pool`: a 30 s deadline per job.
pub fn layer(pool: Pool) -> Result<RetryLayer, BoxError> {
    Ok(RetryLayer::builder()
        .deadline(Duration::from_secs(30))
        .pool(pool)
        .build()?)
}

fn print(calls: &[Call]) {
    for c in calls {
        println!(
            "  {} -> {:?}: {:?}",
            c.job,
            c.status,
            c.text.get(..40).unwrap_or(&c.text)
        );
        for (i, (member, status)) in c.attempts.iter().enumerate() {
            println!(
                "      attempt {}: {} answered {status:?}",
                i + 1,
                member.as_deref().unwrap_or("?")
            );
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let credentials = demo_credentials();
    let (direct, bedrock) = mocks(&credentials).await?;
    let pool = pool(
        &direct.base_url(),
        "sk-ant-direct-demo",
        &bedrock.base_url(),
        credentials,
    )?;
    for m in pool.members() {
        println!("member {} ({:?})", m.label(), m.core().provider);
    }
    let layer = layer(pool)?;

    println!("both healthy:");
    let (calls, _) = run(&layer, &["a1", "a2", "a3"]).await?;
    print(&calls);

    println!("the Anthropic API answers 529 to everything:");
    direct.set_faults(vec![FaultRule::always(Fault::Overloaded)]);
    let (calls, _) = run(&layer, &["b1", "b2", "b3"]).await?;
    print(&calls);
    let verified = bedrock
        .records()
        .iter()
        .filter(|r| r.status == Some(200))
        .count();
    println!(
        "Bedrock verified and answered {verified} signed request(s); the API got {}",
        direct.records().len()
    );
    Ok(())
}
