//! The providers' batch APIs, as documented, over the run's [`Client`].
//!
//! OpenAI (<https://platform.openai.com/docs/api-reference/batch>):
//! `POST /v1/files` (multipart, `purpose=batch`) → `{id}`;
//! `POST /v1/batches {input_file_id, endpoint, completion_window: "24h",
//! metadata}`; `GET /v1/batches/{id}`; `POST /v1/batches/{id}/cancel`;
//! `GET /v1/batches?limit=&after=` (`{data, has_more, last_id}`, newest
//! first); `GET /v1/files/{id}/content` for the output and error files.
//! `Authorization: Bearer`.
//!
//! Anthropic (<https://docs.anthropic.com/en/api/creating-message-batches>):
//! `POST /v1/messages/batches {requests: [{custom_id, params}]}`;
//! `GET /v1/messages/batches/{id}`; `POST …/{id}/cancel`;
//! `GET /v1/messages/batches?limit=&after_id=`; `GET …/{id}/results`
//! (JSONL). `x-api-key` and `anthropic-version: 2023-06-01`.
//!
//! The key goes in a header and nowhere else: no error, log or record
//! here carries a request.

use super::plan::{request_line, Planned};
use crate::input::Shape;
use crate::Client;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use serde_json::Value;
use std::time::Duration;

/// Largest JSON answer read (a batch object, a page of 100 of them).
const MAX_JSON: usize = 16 * 1024 * 1024;

/// Largest result line read: a longer one is skipped (its job gets no
/// result and is held as unknown). 64 MiB is far above any message either
/// provider returns.
pub const MAX_RESULT_LINE: usize = 64 * 1024 * 1024;

/// Most bytes of an error answer's body kept (for a person and the
/// classifier).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Why a call to the batch API did not give what was asked.
#[derive(Debug)]
pub enum ApiError {
    /// Not sent: the connection could not be made.
    NotSent(String),
    /// Sent, no answer (the connection broke, the call timed out): what
    /// it did at the provider is unknown.
    NoAnswer(String),
    /// An answer other than 2xx (body bounded).
    Status {
        /// The status.
        status: StatusCode,
        /// Its headers.
        headers: Box<HeaderMap>,
        /// Its body, at most 64 KiB.
        body: Bytes,
    },
    /// A 2xx answer that could not be read.
    Unreadable(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::NotSent(e) => write!(f, "not sent: {e}"),
            ApiError::NoAnswer(e) => write!(f, "sent, no answer: {e}"),
            ApiError::Status { status, body, .. } => write!(
                f,
                "answered {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(512)])
            ),
            ApiError::Unreadable(e) => write!(f, "an answer that could not be read: {e}"),
        }
    }
}

impl std::error::Error for ApiError {}

/// Where a batch is, in both providers' words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Validating, in progress, finalizing.
    Running,
    /// A cancel was asked; in-progress items may still finish.
    Cancelling,
    /// Ended (OpenAI: completed, failed, expired, cancelled; Anthropic:
    /// `ended`): its results can be read.
    Ended,
}

/// A batch's request counts, in one vocabulary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteCounts {
    /// Requests in the batch.
    pub total: u64,
    /// Succeeded (OpenAI `completed`).
    pub succeeded: u64,
    /// Errored (OpenAI `failed`).
    pub errored: u64,
    /// Expired (Anthropic).
    pub expired: u64,
    /// Canceled (Anthropic).
    pub canceled: u64,
    /// Not ended yet.
    pub processing: u64,
}

/// A batch as the provider shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// `batch_…` / `msgbatch_…`.
    pub id: String,
    /// The provider's own status word (`in_progress`, `ended`, ...).
    pub status: String,
    /// [`Remote::status`] in one vocabulary.
    pub phase: Phase,
    /// Its counts.
    pub counts: RemoteCounts,
    /// When the provider created it (ms since the epoch).
    pub created_ms: Option<i64>,
    /// OpenAI: `metadata.ratewise_intent`, the nonce ratewise set.
    pub intent: Option<String>,
    /// OpenAI: the output file.
    pub output_file_id: Option<String>,
    /// OpenAI: the error file.
    pub error_file_id: Option<String>,
    /// OpenAI: the batch's `errors` (a failed validation), as text.
    pub errors: Option<String>,
}

/// One page of a batch listing.
#[derive(Debug, Clone)]
pub struct Page {
    /// The batches, newest first.
    pub data: Vec<Remote>,
    /// Whether there are more.
    pub has_more: bool,
    /// The cursor of the next page.
    pub last_id: Option<String>,
}

fn str_of(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_owned)
}

fn u64_of(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

/// Reads a batch object of `shape`.
pub fn parse_remote(shape: Shape, v: &Value) -> Option<Remote> {
    let id = str_of(v, "id")?;
    let rc = v.get("request_counts").cloned().unwrap_or(Value::Null);
    Some(match shape {
        Shape::OpenAi => {
            let status = str_of(v, "status")?;
            let phase = match status.as_str() {
                "completed" | "failed" | "expired" | "cancelled" => Phase::Ended,
                "cancelling" => Phase::Cancelling,
                _ => Phase::Running,
            };
            let (total, completed, failed) = (
                u64_of(&rc, "total"),
                u64_of(&rc, "completed"),
                u64_of(&rc, "failed"),
            );
            Remote {
                id,
                phase,
                counts: RemoteCounts {
                    total,
                    succeeded: completed,
                    errored: failed,
                    processing: total.saturating_sub(completed.saturating_add(failed)),
                    ..RemoteCounts::default()
                },
                created_ms: v
                    .get("created_at")
                    .and_then(Value::as_i64)
                    .map(|s| s.saturating_mul(1000)),
                intent: v
                    .get("metadata")
                    .and_then(|m| m.get("ratewise_intent"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                output_file_id: str_of(v, "output_file_id"),
                error_file_id: str_of(v, "error_file_id"),
                errors: v
                    .get("errors")
                    .filter(|e| !e.is_null())
                    .map(|e| e.to_string().chars().take(2048).collect()),
                status,
            }
        }
        Shape::Anthropic => {
            let status = str_of(v, "processing_status")?;
            let phase = match status.as_str() {
                "ended" => Phase::Ended,
                "canceling" => Phase::Cancelling,
                _ => Phase::Running,
            };
            let c = RemoteCounts {
                succeeded: u64_of(&rc, "succeeded"),
                errored: u64_of(&rc, "errored"),
                expired: u64_of(&rc, "expired"),
                canceled: u64_of(&rc, "canceled"),
                processing: u64_of(&rc, "processing"),
                total: 0,
            };
            Remote {
                id,
                phase,
                counts: RemoteCounts {
                    total: c.succeeded + c.errored + c.expired + c.canceled + c.processing,
                    ..c
                },
                created_ms: v
                    .get("created_at")
                    .and_then(Value::as_str)
                    .and_then(ratewise_core::time::parse_rfc3339)
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_millis() as i64),
                intent: None,
                output_file_id: None,
                error_file_id: None,
                errors: None,
                status,
            }
        }
    })
}

/// The batch API of one provider, one key.
#[derive(Clone)]
pub struct Api {
    client: Client,
    upstream: String,
    api_key: String,
    shape: Shape,
    timeout: Duration,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("upstream", &self.upstream)
            .field("shape", &self.shape)
            .field("api_key", &"<redacted>")
            .finish()
    }
}

impl Api {
    /// The batch API of `shape` at `upstream` (no trailing slash), each
    /// call bounded by `timeout`.
    pub fn new(
        client: Client,
        shape: Shape,
        upstream: impl Into<String>,
        api_key: impl Into<String>,
        timeout: Duration,
    ) -> Api {
        Api {
            client,
            upstream: upstream.into().trim_end_matches('/').to_owned(),
            api_key: api_key.into(),
            shape,
            timeout,
        }
    }

    /// The shape it speaks.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Bytes,
    ) -> Result<Request<Full<Bytes>>, ApiError> {
        let mut b = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.upstream))
            .header(http::header::CONTENT_TYPE, content_type);
        b = self.shape.authenticate(b, &self.api_key);
        // A key that cannot be a header value (a newline in it) fails
        // here, as an error that does not name it.
        b.body(Full::new(body)).map_err(|_| {
            ApiError::NotSent("the upstream or the API key is not valid in a request".into())
        })
    }

    /// Sends; an answer's head, or why none.
    async fn send(
        &self,
        req: Request<Full<Bytes>>,
    ) -> Result<http::Response<hyper::body::Incoming>, ApiError> {
        match tokio::time::timeout(self.timeout, self.client.request(req)).await {
            Err(_) => Err(ApiError::NoAnswer(format!(
                "no answer within {:?}",
                self.timeout
            ))),
            Ok(Err(e)) if e.is_connect() => Err(ApiError::NotSent(e.to_string())),
            Ok(Err(e)) => Err(ApiError::NoAnswer(e.to_string())),
            Ok(Ok(resp)) => Ok(resp),
        }
    }

    /// A 2xx answer as it is; any other as [`ApiError::Status`], its
    /// body read up to a bound.
    async fn success(
        &self,
        resp: http::Response<hyper::body::Incoming>,
    ) -> Result<http::Response<hyper::body::Incoming>, ApiError> {
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let headers = Box::new(resp.headers().clone());
        let body = read_bounded(resp.into_body(), MAX_ERROR_BODY, self.timeout).await;
        Err(ApiError::Status {
            status,
            headers,
            body,
        })
    }

    /// A call with a JSON answer.
    async fn json(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Bytes,
    ) -> Result<Value, ApiError> {
        let resp = self
            .send(self.request(method, path, content_type, body)?)
            .await?;
        let resp = self.success(resp).await?;
        let bytes = tokio::time::timeout(
            self.timeout,
            Limited::new(resp.into_body(), MAX_JSON).collect(),
        )
        .await
        .map_err(|_| ApiError::NoAnswer("the answer's body did not come in time".into()))?
        .map_err(|e| ApiError::NoAnswer(format!("the answer's body was cut: {e}")))?
        .to_bytes();
        serde_json::from_slice(&bytes).map_err(|e| ApiError::Unreadable(e.to_string()))
    }

    fn remote(&self, v: &Value) -> Result<Remote, ApiError> {
        parse_remote(self.shape, v).ok_or_else(|| ApiError::Unreadable("not a batch object".into()))
    }

    /// Uploads an OpenAI batch input file (a failure here creates no
    /// batch: at worst an unused file).
    async fn upload(&self, planned: &Planned, nonce: &str) -> Result<String, ApiError> {
        let boundary = format!("ratewise-{nonce}");
        let mut body = Vec::with_capacity(planned.bytes as usize + 512);
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
                 --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"ratewise-{nonce}.jsonl\"\r\n\
                 Content-Type: application/jsonl\r\n\r\n"
            )
            .as_bytes(),
        );
        for job in &planned.jobs {
            body.extend_from_slice(&request_line(Shape::OpenAi, job));
            body.push(b'\n');
        }
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let v = self
            .json(
                Method::POST,
                "/v1/files",
                &format!("multipart/form-data; boundary={boundary}"),
                body.into(),
            )
            .await?;
        str_of(&v, "id").ok_or_else(|| ApiError::Unreadable("no file id".into()))
    }

    /// Creates the batch of `planned`, tagged with `nonce` where the
    /// provider keeps tags (OpenAI `metadata`). [`ApiError::NotSent`] and
    /// [`ApiError::Status`] mean no batch was created; [`ApiError::NoAnswer`]
    /// and [`ApiError::Unreadable`] that one may have been.
    pub async fn create(&self, planned: &Planned, nonce: &str) -> Result<Remote, ApiError> {
        let v = match self.shape {
            Shape::OpenAi => {
                let file = match self.upload(planned, nonce).await {
                    // The upload is not the batch: whatever happened to it,
                    // no batch was created.
                    Err(ApiError::NoAnswer(e)) | Err(ApiError::Unreadable(e)) => {
                        return Err(ApiError::NotSent(format!("the input file's upload: {e}")))
                    }
                    other => other?,
                };
                let body = serde_json::json!({
                    "input_file_id": file,
                    "endpoint": planned.endpoint,
                    "completion_window": "24h",
                    "metadata": {"ratewise_intent": nonce},
                });
                self.json(
                    Method::POST,
                    "/v1/batches",
                    "application/json",
                    body.to_string().into(),
                )
                .await?
            }
            Shape::Anthropic => {
                let mut body = Vec::with_capacity(planned.bytes as usize + 16);
                body.extend_from_slice(b"{\"requests\":[");
                for (i, job) in planned.jobs.iter().enumerate() {
                    if i > 0 {
                        body.push(b',');
                    }
                    body.extend_from_slice(&request_line(Shape::Anthropic, job));
                }
                body.extend_from_slice(b"]}");
                self.json(
                    Method::POST,
                    "/v1/messages/batches",
                    "application/json",
                    body.into(),
                )
                .await?
            }
        };
        self.remote(&v)
    }

    fn batch_path(&self, id: &str) -> String {
        let id: String = id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
            .collect();
        match self.shape {
            Shape::OpenAi => format!("/v1/batches/{id}"),
            Shape::Anthropic => format!("/v1/messages/batches/{id}"),
        }
    }

    /// The batch now.
    pub async fn get(&self, id: &str) -> Result<Remote, ApiError> {
        let v = self
            .json(
                Method::GET,
                &self.batch_path(id),
                "application/json",
                Bytes::new(),
            )
            .await?;
        self.remote(&v)
    }

    /// Asks the provider to cancel it.
    pub async fn cancel(&self, id: &str) -> Result<Remote, ApiError> {
        let path = format!("{}/cancel", self.batch_path(id));
        let v = self
            .json(Method::POST, &path, "application/json", Bytes::new())
            .await?;
        self.remote(&v)
    }

    /// A page of the key's batches, newest first, after the cursor.
    pub async fn list(&self, after: Option<&str>) -> Result<Page, ApiError> {
        let base = match self.shape {
            Shape::OpenAi => "/v1/batches?limit=100",
            Shape::Anthropic => "/v1/messages/batches?limit=100",
        };
        let path = match after {
            Some(a) => {
                let a: String = a
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
                    .collect();
                match self.shape {
                    Shape::OpenAi => format!("{base}&after={a}"),
                    Shape::Anthropic => format!("{base}&after_id={a}"),
                }
            }
            None => base.to_owned(),
        };
        let v = self
            .json(Method::GET, &path, "application/json", Bytes::new())
            .await?;
        let data = v
            .get("data")
            .and_then(Value::as_array)
            .ok_or_else(|| ApiError::Unreadable("a listing with no data".into()))?
            .iter()
            .filter_map(|b| parse_remote(self.shape, b))
            .collect();
        Ok(Page {
            data,
            has_more: v.get("has_more").and_then(Value::as_bool).unwrap_or(false),
            last_id: str_of(&v, "last_id"),
        })
    }

    /// Streams the lines of a result file (OpenAI: `GET
    /// /v1/files/{id}/content`; Anthropic: the batch's results, always
    /// at the upstream — a `results_url` elsewhere would be sent the
    /// key), each line at most [`MAX_RESULT_LINE`] bytes (a longer one is
    /// skipped). `file` is the OpenAI file id, ignored for Anthropic.
    pub async fn each_result_line(
        &self,
        batch_id: &str,
        file: Option<&str>,
        f: &mut (dyn FnMut(&[u8]) -> Result<(), crate::store::StoreError> + Send),
    ) -> Result<Result<(), crate::store::StoreError>, ApiError> {
        let path = match (self.shape, file) {
            (Shape::OpenAi, Some(file)) => {
                let file: String = file
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
                    .collect();
                format!("/v1/files/{file}/content")
            }
            (Shape::OpenAi, None) => return Ok(Ok(())),
            (Shape::Anthropic, _) => format!("{}/results", self.batch_path(batch_id)),
        };
        let resp = self
            .send(self.request(Method::GET, &path, "application/json", Bytes::new())?)
            .await?;
        let resp = self.success(resp).await?;
        let mut body = resp.into_body();
        let mut buf: Vec<u8> = Vec::new();
        let mut skipping = false;
        loop {
            let frame = match tokio::time::timeout(self.timeout, body.frame()).await {
                Err(_) => return Err(ApiError::NoAnswer("the results stalled".into())),
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    return Err(ApiError::NoAnswer(format!("the results were cut: {e}")))
                }
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let mut rest: &[u8] = &data;
            while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
                if skipping {
                    skipping = false;
                } else {
                    buf.extend_from_slice(&rest[..nl]);
                    if let Err(e) = f(&buf) {
                        return Ok(Err(e));
                    }
                }
                buf.clear();
                rest = &rest[nl + 1..];
            }
            if !skipping {
                buf.extend_from_slice(rest);
                if buf.len() > MAX_RESULT_LINE {
                    buf = Vec::new();
                    skipping = true;
                }
            }
        }
        if !skipping && !buf.is_empty() {
            if let Err(e) = f(&buf) {
                return Ok(Err(e));
            }
        }
        Ok(Ok(()))
    }
}

async fn read_bounded(body: hyper::body::Incoming, max: usize, timeout: Duration) -> Bytes {
    let mut body = body;
    let mut out = Vec::new();
    while out.len() < max {
        match tokio::time::timeout(timeout, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Ok(d) = frame.into_data() {
                    let take = d.len().min(max - out.len());
                    out.extend_from_slice(&d[..take]);
                }
            }
            _ => break,
        }
    }
    out.into()
}
