//! A pool whose fallback is Claude on Vertex AI: the Anthropic API first,
//! the same model on Vertex when the API is overloaded (issue #40). One
//! job keeps one deadline and one retry budget across both; each
//! attempt's record names its member.
//!
//! [`VertexRoute`] is the [`MemberRoute`] a user writes for Vertex. Its
//! API is Anthropic's Messages API with two differences
//! (<https://platform.claude.com/docs/en/api/claude-on-vertex-ai>), and
//! the route makes them for each attempt that goes to Vertex:
//!
//! * the model leaves the body for the path:
//!   `/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict`,
//!   or `:streamRawPredict` for a body with `"stream": true` (the answer
//!   is then Anthropic's server-sent events); the model is the member's
//!   name for the job's model ([`PoolMember::model`]:
//!   `claude-sonnet-4-5` → `claude-sonnet-4-5@20250929`);
//! * the body gains `"anthropic_version": "vertex-2023-10-16"` (and the
//!   `anthropic-version` header goes);
//! * the caller's credentials (`x-api-key`, `authorization`, …) go and
//!   `Authorization: Bearer <token>` comes from a [`TokenSource`]: the
//!   user's OAuth provider. `prepare` is synchronous, so a real source
//!   hands out a token it keeps fresh in the background (refreshed before
//!   its expiry, e.g. from `gcloud auth print-access-token` or a service
//!   account's JWT exchange) rather than fetching one per request; a
//!   closure `|| Ok(token)` is one. An error from it sends nothing.
//!
//! Its answers are Anthropic's (the provider is [`Provider::Anthropic`]),
//! so the caller reads the same shape whichever member finished the job.
//! Vertex's quotas are per project, region and model, not per token: the
//! member is paced under a fingerprint of its project and region, and its
//! upstream (Vertex's host) is not the API's, so an overload of one moves
//! jobs to the other.
//!
//! `main` starts two mock providers in this process (the Anthropic API and
//! a Vertex that checks the route, the token and the body), runs three
//! calls while both are healthy, then makes the API answer every request
//! `529 overloaded` and runs three more (one of them streamed): each
//! finishes on Vertex.
//!
//! ```text
//! cargo run -p ratewise-tower --example pool_vertex
//! ```

use bytes::Bytes;
use http::header::{HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST};
use http::request::Parts;
use http::{HeaderMap, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewise_mock::{Fault, FaultRule, MockConfig, MockServer};
use ratewise_tower::pool::{HttpRoute, MemberRoute, Pool, PoolMember};
use ratewise_tower::{Attempts, BoxError, JobId, KeyLabel, Provider, RetryLayer};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

/// The model callers name.
pub const MODEL: &str = "claude-sonnet-4-5";
/// Vertex's name for [`MODEL`].
pub const VERTEX_MODEL: &str = "claude-sonnet-4-5@20250929";
/// The only `anthropic_version` Vertex takes.
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// Where a Vertex member's OAuth access tokens come from.
pub trait TokenSource: Send + Sync + 'static {
    /// A token valid now.
    fn token(&self) -> Result<String, BoxError>;
}

impl<F> TokenSource for F
where
    F: Fn() -> Result<String, BoxError> + Send + Sync + 'static,
{
    fn token(&self) -> Result<String, BoxError> {
        self()
    }
}

/// A Claude on Vertex AI member.
pub struct VertexRoute {
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    project: String,
    region: String,
    tokens: Arc<dyn TokenSource>,
    label: String,
}

impl VertexRoute {
    /// Vertex at `base` (`https://us-east5-aiplatform.googleapis.com`,
    /// `https://aiplatform.googleapis.com` for `global`), `project`'s
    /// quota in `region`, with tokens from `tokens`.
    pub fn new(
        base: &str,
        project: &str,
        region: &str,
        tokens: impl TokenSource,
    ) -> Result<Self, BoxError> {
        let uri: Uri = base.parse()?;
        let (Some(scheme), Some(authority)) = (uri.scheme().cloned(), uri.authority().cloned())
        else {
            return Err(format!("{base:?} needs a scheme and a host").into());
        };
        let word = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if !word(project) || !word(region) {
            return Err(format!("{project:?} / {region:?}: not a project and a region").into());
        }
        Ok(VertexRoute {
            scheme,
            authority,
            label: KeyLabel::fingerprint(&format!("vertex:{project}:{region}"))
                .as_str()
                .to_owned(),
            project: project.to_owned(),
            region: region.to_owned(),
            tokens: Arc::new(tokens),
        })
    }
}

/// The headers a caller's credentials may come in; none reaches Vertex.
const CREDENTIALS: [&str; 4] = ["authorization", "x-api-key", "api-key", "x-goog-api-key"];

impl MemberRoute for VertexRoute {
    fn upstream(&self) -> &str {
        self.authority.as_str()
    }

    fn provider(&self) -> Provider {
        Provider::Anthropic
    }

    fn key_label(&self) -> String {
        self.label.clone()
    }

    fn prepare(&self, parts: &mut Parts, body: &mut Bytes, model: &str) -> Result<(), BoxError> {
        let mut value: serde_json::Map<String, Value> = serde_json::from_slice(body)?;
        value.remove("model");
        value.insert("anthropic_version".into(), ANTHROPIC_VERSION.into());
        let stream = value.get("stream").and_then(Value::as_bool) == Some(true);
        if model.is_empty()
            || !model
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._@".contains(&b))
        {
            return Err(format!("{model:?} is not a Vertex model name").into());
        }
        let method = if stream {
            "streamRawPredict"
        } else {
            "rawPredict"
        };
        let path = format!(
            "/v1/projects/{}/locations/{}/publishers/anthropic/models/{model}:{method}",
            self.project, self.region
        );
        let mut token = HeaderValue::from_str(&format!("Bearer {}", self.tokens.token()?))?;
        token.set_sensitive(true);
        parts.uri = Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path)
            .build()?;
        for name in CREDENTIALS {
            parts.headers.remove(name);
        }
        for name in [HOST, CONTENT_LENGTH] {
            parts.headers.remove(name);
        }
        parts.headers.remove("anthropic-version");
        parts.headers.insert(AUTHORIZATION, token);
        *body = Bytes::from(serde_json::to_vec(&value)?);
        Ok(())
    }
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
    /// The answer's text (a stream's deltas joined).
    pub text: String,
    /// The answer was a stream.
    pub streamed: bool,
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

/// The pool: the Anthropic API (`direct_key`) first by weight, Vertex
/// (`token`, a fixed OAuth token here) as the fallback.
pub fn pool(
    direct_base: &str,
    direct_key: &str,
    vertex_base: &str,
    token: &str,
) -> Result<Pool, BoxError> {
    let token = token.to_owned();
    let vertex = VertexRoute::new(vertex_base, "demo-project", "us-east5", move || {
        Ok::<_, BoxError>(token.clone())
    })?;
    Ok(Pool::new()
        .member(PoolMember::new(HttpRoute::anthropic(direct_base, direct_key)?).weight(3))
        .member(PoolMember::new(vertex).model(MODEL, VERTEX_MODEL).weight(1)))
}

/// Sends `jobs` (`(id, stream)`) through `layer`, one after the other,
/// over a client that keeps a copy of every request it sends.
pub async fn run(
    layer: &RetryLayer,
    jobs: &[(&str, bool)],
) -> Result<(Vec<Call>, Vec<Sent>), BoxError> {
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
    for (job, stream) in jobs {
        let body = json!({"model": MODEL, "max_tokens": 64, "stream": stream,
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
                let streamed = resp
                    .headers()
                    .get(CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with("text/event-stream"));
                let bytes = resp.into_body().collect().await?.to_bytes();
                Call {
                    job: job.to_string(),
                    status: Some(status),
                    attempts: records
                        .unwrap_or_default()
                        .into_iter()
                        .map(|r| (r.member, r.status))
                        .collect(),
                    text: if streamed {
                        stream_text(&bytes)
                    } else {
                        text_of(&bytes)
                    },
                    streamed,
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
                streamed: false,
            },
        };
        calls.push(call);
    }
    let sent = std::mem::take(&mut *sent.lock().unwrap_or_else(|e| e.into_inner()));
    Ok((calls, sent))
}

/// The text of an Anthropic `message`.
pub fn text_of(body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    v.get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect()
}

/// The text of an Anthropic stream: its `text_delta`s joined.
pub fn stream_text(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .filter_map(|v| {
            v.pointer("/delta/text")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect()
}

/// The two mock providers of the demo: the API and Vertex, both with
/// limits far above the demo's (the layer learns the API's from its
/// headers, and a tight one would make Vertex the sooner member).
pub async fn mocks() -> Result<(MockServer, MockServer), BoxError> {
    let mut roomy = MockConfig::default();
    roomy.anthropic_limits.requests_per_minute = Some(10_000);
    roomy.anthropic_limits.input_tokens_per_minute = Some(10_000_000);
    roomy.anthropic_limits.output_tokens_per_minute = Some(10_000_000);
    Ok((
        MockServer::start(roomy.clone()).await?,
        MockServer::start(roomy).await?,
    ))
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
        let kind = if c.streamed { "stream" } else { "json" };
        let text = c.text.get(..40).unwrap_or(&c.text);
        println!("  {} -> {:?} ({kind}): {text:?}", c.job, c.status);
        for (i, (member, status)) in c.attempts.iter().enumerate() {
            let member = member.as_deref().unwrap_or("?");
            println!("      attempt {}: {member} answered {status:?}", i + 1);
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let (direct, vertex) = mocks().await?;
    let pool = pool(
        &direct.base_url(),
        "sk-ant-direct-demo",
        &vertex.base_url(),
        "ya29.demo-token",
    )?;
    for m in pool.members() {
        println!("member {} ({:?})", m.label(), m.core().provider);
    }
    let layer = layer(pool)?;

    println!("both healthy:");
    let (calls, _) = run(&layer, &[("a1", false), ("a2", false), ("a3", false)]).await?;
    print(&calls);

    println!("the Anthropic API answers 529 to everything:");
    direct.set_faults(vec![FaultRule::always(Fault::Overloaded)]);
    let (calls, _) = run(&layer, &[("b1", false), ("b2", true), ("b3", false)]).await?;
    print(&calls);
    println!(
        "Vertex answered {} request(s); the API got {}",
        vertex.records().len(),
        direct.records().len()
    );
    Ok(())
}
