//! The providers' batch APIs: a bounded store of files and batches whose
//! items the mock processes in the background on its provider clock.
//!
//! * **OpenAI** (`/v1/files`, `/v1/batches`): a JSONL input file of
//!   `{custom_id, method: "POST", url, body}` lines, validated when the
//!   batch leaves `validating` (one model, at most 50 000 requests, `url`
//!   equal to the batch's endpoint, unique `custom_id`s; a file breaking
//!   any of these makes the batch `failed` with `errors.data`), then
//!   `in_progress` → `completed` (or `expired`, or `cancelling` →
//!   `cancelled`), with an output file of the successes and an error file
//!   of the rest.
//! * **Anthropic** (`/v1/messages/batches`): `{requests: [{custom_id,
//!   params}]}`, `in_progress` → `ended` (or `canceling` → `ended`), results
//!   as JSONL once ended.
//!
//! Items are processed oldest batch first at
//! [`BatchConfig::items_per_second`] (provider time): an item the direct
//! API would refuse (e.g. no `max_tokens` for Anthropic) ends errored in the
//! provider's format, a success is the message or completion the direct
//! path renders (with `usage`), priced at [`BatchConfig::discount`] of the
//! model's price. Items still pending [`BatchConfig::window_seconds`]
//! after the batch was created expire. Batch items take nothing from the
//! per-minute buckets; their cost counts toward the spend cap.
//!
//! The store is pure (no IO): the server calls [`BatchStore::advance`]
//! with the provider time, and renders what the store returns.

use crate::clock::TimeScale;
use crate::config::{BatchConfig, MockConfig, OutputRange};
use crate::model::ProviderModel;
use crate::render::{self, RenderCtx};
use crate::request;
use crate::tokens::{self, fnv1a};
use http::HeaderMap;
use ratewise_core::time::format_rfc3339;
use ratewise_core::{Instant, Provider};
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

/// Most requests in one OpenAI batch input file (documented).
pub const OPENAI_MAX_REQUESTS: usize = 50_000;
/// Most requests in one Anthropic Message Batch (documented).
pub const ANTHROPIC_MAX_REQUESTS: usize = 100_000;
/// Most OpenAI metadata pairs, and the longest key and value (documented).
pub const OPENAI_METADATA: (usize, usize, usize) = (16, 64, 512);
/// The endpoints OpenAI documents for batches.
pub const OPENAI_ENDPOINTS: &[&str] = &[
    "/v1/responses",
    "/v1/chat/completions",
    "/v1/embeddings",
    "/v1/completions",
    "/v1/moderations",
];
/// The endpoint the mock serves in a batch (the others are refused at
/// create time: the mock renders chat completions only).
pub const OPENAI_SERVED_ENDPOINT: &str = "/v1/chat/completions";

/// Where a batch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// OpenAI only: the input file is being validated.
    Validating,
    /// Items are being processed.
    InProgress,
    /// A cancel was asked; the items in progress still finish.
    Canceling,
    /// Every item ended (OpenAI `completed`; Anthropic `ended`).
    Completed,
    /// OpenAI only: the input file failed validation.
    Failed,
    /// The window ended first (OpenAI `expired`; Anthropic `ended`).
    Expired,
    /// Cancelled (OpenAI `cancelled`; Anthropic `ended`).
    Cancelled,
}

impl Phase {
    /// Processing is over.
    pub fn ended(self) -> bool {
        matches!(
            self,
            Phase::Completed | Phase::Failed | Phase::Expired | Phase::Cancelled
        )
    }
}

/// What became of one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemState {
    /// Not processed yet.
    Pending,
    /// Answered 200.
    Succeeded,
    /// Refused as the direct API would.
    Errored,
    /// Cancelled before it was processed.
    Canceled,
    /// Not processed before the window ended.
    Expired,
}

#[derive(Debug, Clone)]
struct Item {
    custom_id: String,
    /// The request body (OpenAI `body`, Anthropic `params`), serialized.
    body: Vec<u8>,
    state: ItemState,
    status: u16,
    /// The response body (a success or the error).
    result: Vec<u8>,
    request_id: String,
}

/// Counts of a batch's items by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ItemCounts {
    /// Not processed yet.
    pub processing: u64,
    /// Succeeded.
    pub succeeded: u64,
    /// Errored.
    pub errored: u64,
    /// Cancelled.
    pub canceled: u64,
    /// Expired.
    pub expired: u64,
}

impl ItemCounts {
    fn add(&mut self, s: ItemState, n: u64) {
        match s {
            ItemState::Pending => self.processing += n,
            ItemState::Succeeded => self.succeeded += n,
            ItemState::Errored => self.errored += n,
            ItemState::Canceled => self.canceled += n,
            ItemState::Expired => self.expired += n,
        }
    }
}

/// A batch as the Rust API and `GET /mock/batches` show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchSummary {
    /// `batch_…` or `msgbatch_…`.
    pub id: String,
    /// Which API.
    pub provider: Provider,
    /// The key's label or fingerprint.
    pub key: String,
    /// Where it is.
    pub phase: Phase,
    /// Items by state.
    pub counts: ItemCounts,
    /// What its items cost so far, USD (discounted).
    pub usd: f64,
    /// Provider-time milliseconds since the server started, at creation.
    pub created_ms: u64,
}

#[derive(Debug, Clone)]
struct Batch {
    seq: u64,
    id: String,
    provider: Provider,
    key: String,
    created: Instant,
    ready: Instant,
    expires: Instant,
    phase: Phase,
    items: Vec<Item>,
    /// The first item not processed yet.
    next: usize,
    /// Items at and after this index are not processed (cancelled).
    stop: usize,
    endpoint: String,
    input_file_id: String,
    completion_window: String,
    metadata: Value,
    /// OpenAI validation errors (`errors.data`).
    errors: Vec<Value>,
    output_file_id: Option<String>,
    error_file_id: Option<String>,
    in_progress_at: Option<Instant>,
    cancelling_at: Option<Instant>,
    ended_at: Option<Instant>,
    last_done: Instant,
    usd: f64,
    bytes: usize,
}

impl Batch {
    fn counts(&self) -> ItemCounts {
        let mut c = ItemCounts::default();
        for it in &self.items {
            c.add(it.state, 1);
        }
        c
    }
}

/// A stored file (OpenAI Files API).
#[derive(Debug, Clone)]
struct StoredFile {
    id: String,
    bytes: Vec<u8>,
    filename: String,
    purpose: String,
    created: Instant,
}

/// A refusal, rendered by the server in the provider's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// HTTP status.
    pub status: u16,
    /// Message.
    pub message: String,
}

fn refuse(status: u16, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        message: message.into(),
    }
}

/// Totals over every batch item processed so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct BatchTotals {
    /// Items by final state (never `processing`).
    pub items: ItemCounts,
    /// Batches created.
    pub batches: u64,
}

/// The files and batches of both providers, bounded by [`BatchConfig`].
#[derive(Debug)]
pub struct BatchStore {
    cfg: BatchConfig,
    seed: u64,
    output: OutputRange,
    scale: TimeScale,
    /// Wall time at provider time zero.
    wall_origin: SystemTime,
    files: HashMap<String, StoredFile>,
    batches: Vec<Batch>,
    /// Provider time the processor has worked up to.
    cursor: Instant,
    counter: u64,
    bytes: usize,
    totals: BatchTotals,
}

impl BatchStore {
    /// An empty store; `wall_origin` is the wall time at provider time zero.
    pub fn new(config: &MockConfig, wall_origin: SystemTime) -> Self {
        BatchStore {
            cfg: config.batch,
            seed: config.seed,
            output: config.output_tokens,
            scale: TimeScale::new(config.seconds_per_minute),
            wall_origin,
            files: HashMap::new(),
            batches: Vec::new(),
            cursor: Instant::ZERO,
            counter: 0,
            bytes: 0,
            totals: BatchTotals::default(),
        }
    }

    /// The settings in use.
    pub fn config(&self) -> BatchConfig {
        self.cfg
    }

    /// Totals so far.
    pub fn totals(&self) -> BatchTotals {
        self.totals
    }

    /// Every batch, oldest first.
    pub fn summaries(&self) -> Vec<BatchSummary> {
        self.batches
            .iter()
            .map(|b| BatchSummary {
                id: b.id.clone(),
                provider: b.provider,
                key: b.key.clone(),
                phase: b.phase,
                counts: b.counts(),
                usd: b.usd,
                created_ms: b.created.since_origin().as_millis() as u64,
            })
            .collect()
    }

    /// Whether some batch is still being processed.
    pub fn busy(&self) -> bool {
        self.batches.iter().any(|b| !b.phase.ended())
    }

    fn wall(&self, t: Instant) -> SystemTime {
        self.wall_origin + self.scale.to_real(t.since_origin())
    }

    fn unix(&self, t: Instant) -> u64 {
        self.wall(t)
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }

    fn rfc3339(&self, t: Instant) -> String {
        format_rfc3339(self.wall(t))
    }

    fn next_id(&mut self, what: &[u8]) -> u64 {
        self.counter += 1;
        fnv1a(fnv1a(self.seed, what), &self.counter.to_le_bytes())
    }

    fn secs(x: f64) -> Duration {
        Duration::try_from_secs_f64(x.max(0.0)).unwrap_or(Duration::MAX)
    }

    // ----- files -------------------------------------------------------

    /// Stores an uploaded file: the file object, or why not.
    pub fn upload(
        &mut self,
        filename: &str,
        purpose: &str,
        bytes: Vec<u8>,
        now: Instant,
    ) -> Result<Value, Refusal> {
        if purpose.is_empty() {
            return Err(refuse(400, "Missing required parameter: 'purpose'."));
        }
        if bytes.len() > self.cfg.max_file_bytes {
            return Err(refuse(
                413,
                format!(
                    "File is too large: {} bytes; the limit is {} bytes.",
                    bytes.len(),
                    self.cfg.max_file_bytes
                ),
            ));
        }
        if self.files.len() >= self.cfg.max_files
            || self.bytes.saturating_add(bytes.len()) > self.cfg.max_store_bytes
        {
            return Err(refuse(
                400,
                "File storage limit reached for this organization.",
            ));
        }
        let h = self.next_id(b"file");
        let id = format!("file-{}", render::base62(h, 22));
        self.bytes += bytes.len();
        let f = StoredFile {
            id: id.clone(),
            bytes,
            filename: request::truncate(filename, 256),
            purpose: request::truncate(purpose, 64),
            created: now,
        };
        let v = self.file_json(&f);
        self.files.insert(id, f);
        Ok(v)
    }

    fn file_json(&self, f: &StoredFile) -> Value {
        json!({"id": f.id, "object": "file", "bytes": f.bytes.len(),
            "created_at": self.unix(f.created), "filename": f.filename,
            "purpose": f.purpose, "status": "processed", "status_details": Value::Null})
    }

    /// A file object.
    pub fn file(&self, id: &str) -> Option<Value> {
        self.files.get(id).map(|f| self.file_json(f))
    }

    /// A file's bytes.
    pub fn file_content(&self, id: &str) -> Option<&[u8]> {
        self.files.get(id).map(|f| f.bytes.as_slice())
    }

    /// Deletes a file: OpenAI's deletion object, or `None` if unknown.
    pub fn delete_file(&mut self, id: &str) -> Option<Value> {
        let f = self.files.remove(id)?;
        self.bytes = self.bytes.saturating_sub(f.bytes.len());
        Some(json!({"id": id, "object": "file", "deleted": true}))
    }

    fn store_output(&mut self, batch_id: &str, kind: &str, bytes: Vec<u8>, now: Instant) -> String {
        let h = self.next_id(b"file");
        let id = format!("file-{}", render::base62(h, 22));
        self.bytes += bytes.len();
        self.files.insert(
            id.clone(),
            StoredFile {
                id: id.clone(),
                bytes,
                filename: format!("{batch_id}_{kind}.jsonl"),
                purpose: "batch_output".into(),
                created: now,
            },
        );
        id
    }

    /// Makes room for one more batch: forgets the oldest ended one (and
    /// its output files) when full; `false` when none has ended.
    fn make_room(&mut self) -> bool {
        if self.batches.len() < self.cfg.max_batches {
            return true;
        }
        let Some(i) = self.batches.iter().position(|b| b.phase.ended()) else {
            return false;
        };
        let b = self.batches.remove(i);
        self.bytes = self.bytes.saturating_sub(b.bytes);
        for id in [b.output_file_id, b.error_file_id].into_iter().flatten() {
            self.delete_file(&id);
        }
        true
    }

    fn too_many(&self) -> Refusal {
        refuse(
            429,
            format!(
                "Too many batches in progress (the mock keeps at most {}).",
                self.cfg.max_batches
            ),
        )
    }

    // ----- OpenAI --------------------------------------------------------

    /// `POST /v1/batches`: the batch object, or the 4xx. The file is
    /// validated when the batch leaves `validating`.
    pub fn create_openai(
        &mut self,
        body: &Value,
        key: &str,
        now: Instant,
    ) -> Result<Value, Refusal> {
        let obj = body
            .as_object()
            .ok_or_else(|| refuse(400, "The body must be a JSON object."))?;
        let field = |name: &str| obj.get(name).and_then(Value::as_str);
        let input_file_id = field("input_file_id")
            .ok_or_else(|| refuse(400, "Missing required parameter: 'input_file_id'."))?;
        let endpoint = field("endpoint")
            .ok_or_else(|| refuse(400, "Missing required parameter: 'endpoint'."))?;
        let window = field("completion_window")
            .ok_or_else(|| refuse(400, "Missing required parameter: 'completion_window'."))?;
        if !OPENAI_ENDPOINTS.contains(&endpoint) {
            return Err(refuse(
                400,
                format!(
                    "Invalid value: '{}'. Supported values are: {}.",
                    request::truncate(endpoint, 64),
                    OPENAI_ENDPOINTS.join(", ")
                ),
            ));
        }
        if endpoint != OPENAI_SERVED_ENDPOINT {
            return Err(refuse(
                400,
                format!("The mock serves batches for {OPENAI_SERVED_ENDPOINT} only."),
            ));
        }
        if window != "24h" {
            return Err(refuse(
                400,
                format!(
                    "Invalid value: '{}'. Supported values are: '24h'.",
                    request::truncate(window, 16)
                ),
            ));
        }
        let metadata = match obj.get("metadata") {
            None | Some(Value::Null) => Value::Null,
            Some(Value::Object(m)) => {
                let (pairs, klen, vlen) = OPENAI_METADATA;
                if m.len() > pairs {
                    return Err(refuse(400, format!("Invalid 'metadata': too many properties. Expected an object with at most {pairs} properties, but got an object with {} properties instead.", m.len())));
                }
                for (k, v) in m {
                    let Some(v) = v.as_str() else {
                        return Err(refuse(
                            400,
                            format!(
                                "Invalid type for 'metadata.{}': expected a string.",
                                request::truncate(k, klen)
                            ),
                        ));
                    };
                    if k.chars().count() > klen || v.chars().count() > vlen {
                        return Err(refuse(400, format!("Invalid 'metadata': keys are at most {klen} characters and values at most {vlen}.")));
                    }
                }
                Value::Object(m.clone())
            }
            Some(_) => {
                return Err(refuse(
                    400,
                    "Invalid type for 'metadata': expected an object.",
                ))
            }
        };
        let Some(file) = self.files.get(input_file_id) else {
            return Err(refuse(
                404,
                format!(
                    "No such File object: {}",
                    request::truncate(input_file_id, 64)
                ),
            ));
        };
        let (items, errors) = parse_openai_file(&file.bytes, endpoint);
        if !self.make_room() {
            return Err(self.too_many());
        }
        let h = self.next_id(b"batch");
        let id = format!("batch_{h:016x}{:016x}", fnv1a(h, b"batch"));
        let b = Batch {
            seq: self.counter,
            id,
            provider: Provider::Openai,
            key: key.to_string(),
            created: now,
            ready: now + Self::secs(self.cfg.validating_seconds),
            expires: now + Self::secs(self.cfg.window_seconds),
            phase: Phase::Validating,
            stop: items.len(),
            items,
            next: 0,
            endpoint: endpoint.to_string(),
            input_file_id: input_file_id.to_string(),
            completion_window: window.to_string(),
            metadata,
            errors,
            output_file_id: None,
            error_file_id: None,
            in_progress_at: None,
            cancelling_at: None,
            ended_at: None,
            last_done: now,
            usd: 0.0,
            bytes: 0,
        };
        let v = self.openai_json(&b);
        self.batches.push(b);
        self.totals.batches += 1;
        Ok(v)
    }

    fn openai_json(&self, b: &Batch) -> Value {
        let c = b.counts();
        let at = |t: Option<Instant>| t.map(|t| self.unix(t));
        let ended = |p: Phase| if b.phase == p { at(b.ended_at) } else { None };
        let errors = if b.errors.is_empty() {
            Value::Null
        } else {
            json!({"object": "list", "data": b.errors})
        };
        json!({
            "id": b.id, "object": "batch", "endpoint": b.endpoint, "errors": errors,
            "input_file_id": b.input_file_id, "completion_window": b.completion_window,
            "status": openai_status(b.phase),
            "output_file_id": b.output_file_id, "error_file_id": b.error_file_id,
            "created_at": self.unix(b.created),
            "in_progress_at": at(b.in_progress_at),
            "expires_at": self.unix(b.expires),
            "finalizing_at": if matches!(b.phase, Phase::Completed) { at(b.ended_at) } else { None },
            "completed_at": ended(Phase::Completed),
            "failed_at": ended(Phase::Failed),
            "expired_at": ended(Phase::Expired),
            "cancelling_at": at(b.cancelling_at),
            "cancelled_at": ended(Phase::Cancelled),
            "request_counts": {"total": b.items.len(), "completed": c.succeeded, "failed": c.errored},
            "metadata": b.metadata,
        })
    }

    fn find(&self, provider: Provider, id: &str) -> Option<usize> {
        self.batches
            .iter()
            .position(|b| b.provider == provider && b.id == id)
    }

    /// `GET /v1/batches/{id}` / `GET /v1/messages/batches/{id}`.
    pub fn get(&self, provider: Provider, id: &str, base_url: &str) -> Option<Value> {
        let b = &self.batches[self.find(provider, id)?];
        Some(self.render(b, base_url))
    }

    fn render(&self, b: &Batch, base_url: &str) -> Value {
        match b.provider {
            Provider::Openai => self.openai_json(b),
            _ => self.anthropic_json(b, base_url),
        }
    }

    /// Cancels a batch: the batch object (`cancelling` / `canceling`), or
    /// the 4xx (unknown: 404; already ended or cancelling: 400).
    pub fn cancel(
        &mut self,
        provider: Provider,
        id: &str,
        now: Instant,
        base_url: &str,
    ) -> Result<Value, Refusal> {
        let Some(i) = self.find(provider, id) else {
            return Err(refuse(
                404,
                format!("No batch found with id '{}'.", request::truncate(id, 64)),
            ));
        };
        let finishes = self.cfg.cancel_finishes as usize;
        let b = &mut self.batches[i];
        if b.phase.ended() || b.phase == Phase::Canceling {
            return Err(refuse(
                400,
                format!("Cannot cancel a batch with status '{}'.", status_name(b)),
            ));
        }
        // Validating: nothing is in progress yet.
        let keep = if b.phase == Phase::Validating {
            0
        } else {
            finishes
        };
        b.stop = b.items.len().min(b.next + keep);
        for it in &mut b.items[b.stop..] {
            if it.state == ItemState::Pending {
                it.state = ItemState::Canceled;
                self.totals.items.add(ItemState::Canceled, 1);
            }
        }
        b.phase = Phase::Canceling;
        b.cancelling_at = Some(now);
        let b = &self.batches[i];
        Ok(self.render(b, base_url))
    }

    /// `GET /v1/batches` (newest first, `after` a batch id, `limit` 1–100).
    pub fn list_openai(&self, limit: usize, after: Option<&str>) -> Value {
        let all: Vec<&Batch> = self
            .batches
            .iter()
            .rev()
            .filter(|b| b.provider == Provider::Openai)
            .collect();
        let start = match after {
            Some(a) => all
                .iter()
                .position(|b| b.id == a)
                .map_or(all.len(), |i| i + 1),
            None => 0,
        };
        let limit = limit.clamp(1, 100);
        let page: Vec<&Batch> = all.iter().skip(start).take(limit).copied().collect();
        let has_more = start + page.len() < all.len();
        json!({"object": "list",
            "data": page.iter().map(|b| self.openai_json(b)).collect::<Vec<_>>(),
            "first_id": page.first().map(|b| b.id.clone()),
            "last_id": page.last().map(|b| b.id.clone()),
            "has_more": has_more})
    }

    // ----- Anthropic -----------------------------------------------------

    /// `POST /v1/messages/batches`: the batch, or the 4xx. Each request's
    /// `params` are validated when it is processed (an invalid one ends
    /// errored), as Anthropic documents.
    pub fn create_anthropic(
        &mut self,
        body: &Value,
        raw_len: usize,
        key: &str,
        now: Instant,
        base_url: &str,
    ) -> Result<Value, Refusal> {
        let requests = body
            .get("requests")
            .and_then(Value::as_array)
            .ok_or_else(|| refuse(400, "requests: Field required"))?;
        if requests.is_empty() {
            return Err(refuse(
                400,
                "requests: List should have at least 1 item after validation, not 0",
            ));
        }
        if requests.len() > ANTHROPIC_MAX_REQUESTS {
            return Err(refuse(400, format!("requests: List should have at most {ANTHROPIC_MAX_REQUESTS} items after validation, not {}", requests.len())));
        }
        if let Some(extra) = body
            .as_object()
            .and_then(|o| o.keys().find(|k| *k != "requests"))
        {
            return Err(refuse(
                400,
                format!(
                    "{}: Extra inputs are not permitted",
                    request::truncate(extra, 64)
                ),
            ));
        }
        let mut seen = HashSet::new();
        let mut items = Vec::with_capacity(requests.len());
        for (i, r) in requests.iter().enumerate() {
            let cid = r
                .get("custom_id")
                .and_then(Value::as_str)
                .ok_or_else(|| refuse(400, format!("requests.{i}.custom_id: Field required")))?;
            if !valid_custom_id(cid) {
                return Err(refuse(400, format!("requests.{i}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")));
            }
            if !seen.insert(cid) {
                return Err(refuse(400, format!("Duplicate custom_id: '{cid}'. Each request in a batch must have a unique custom_id.")));
            }
            let params = r
                .get("params")
                .filter(|p| p.is_object())
                .ok_or_else(|| refuse(400, format!("requests.{i}.params: Field required")))?;
            items.push(new_item(
                cid,
                serde_json::to_vec(params).unwrap_or_default(),
            ));
        }
        if self.bytes.saturating_add(raw_len) > self.cfg.max_store_bytes {
            return Err(refuse(
                413,
                "Batch storage limit reached for this organization.",
            ));
        }
        if !self.make_room() {
            return Err(self.too_many());
        }
        let h = self.next_id(b"msgbatch");
        let id = format!("msgbatch_01{}", render::base62(h, 22));
        self.bytes += raw_len;
        let b = Batch {
            seq: self.counter,
            id,
            provider: Provider::Anthropic,
            key: key.to_string(),
            created: now,
            ready: now,
            expires: now + Self::secs(self.cfg.window_seconds),
            phase: Phase::InProgress,
            stop: items.len(),
            items,
            next: 0,
            endpoint: String::new(),
            input_file_id: String::new(),
            completion_window: String::new(),
            metadata: Value::Null,
            errors: Vec::new(),
            output_file_id: None,
            error_file_id: None,
            in_progress_at: Some(now),
            cancelling_at: None,
            ended_at: None,
            last_done: now,
            usd: 0.0,
            bytes: raw_len,
        };
        let v = self.anthropic_json(&b, base_url);
        self.batches.push(b);
        self.totals.batches += 1;
        Ok(v)
    }

    fn anthropic_json(&self, b: &Batch, base_url: &str) -> Value {
        let c = b.counts();
        let status = match b.phase {
            Phase::Canceling => "canceling",
            p if p.ended() => "ended",
            _ => "in_progress",
        };
        let ended = b.phase.ended();
        json!({
            "id": b.id, "type": "message_batch", "processing_status": status,
            "request_counts": {"processing": c.processing, "succeeded": c.succeeded,
                "errored": c.errored, "canceled": c.canceled, "expired": c.expired},
            "ended_at": b.ended_at.map(|t| self.rfc3339(t)),
            "created_at": self.rfc3339(b.created),
            "expires_at": self.rfc3339(b.expires),
            "archived_at": Value::Null,
            "cancel_initiated_at": b.cancelling_at.map(|t| self.rfc3339(t)),
            "results_url": ended.then(|| format!("{base_url}/v1/messages/batches/{}/results", b.id)),
        })
    }

    /// `GET /v1/messages/batches` (newest first; `after_id`: the page
    /// after that batch, i.e. older; `before_id`: the page before it,
    /// newer; `limit` 1–1000, default 20).
    pub fn list_anthropic(
        &self,
        limit: usize,
        before_id: Option<&str>,
        after_id: Option<&str>,
        base_url: &str,
    ) -> Value {
        let all: Vec<&Batch> = self
            .batches
            .iter()
            .rev()
            .filter(|b| b.provider == Provider::Anthropic)
            .collect();
        let limit = limit.clamp(1, 1000);
        let (page, has_more): (Vec<&Batch>, bool) = match (before_id, after_id) {
            (Some(bid), _) => {
                let end = all.iter().position(|b| b.id == bid).unwrap_or(0);
                let start = end.saturating_sub(limit);
                (all[start..end].to_vec(), start > 0)
            }
            (None, a) => {
                let start = a.map_or(0, |a| {
                    all.iter()
                        .position(|b| b.id == a)
                        .map_or(all.len(), |i| i + 1)
                });
                let page: Vec<&Batch> = all.iter().skip(start).take(limit).copied().collect();
                let more = start + page.len() < all.len();
                (page, more)
            }
        };
        json!({
            "data": page.iter().map(|b| self.anthropic_json(b, base_url)).collect::<Vec<_>>(),
            "has_more": has_more,
            "first_id": page.first().map(|b| b.id.clone()),
            "last_id": page.last().map(|b| b.id.clone()),
        })
    }

    /// `GET /v1/messages/batches/{id}/results`: the JSONL, or the 4xx
    /// (unknown: 404; not ended yet: 400).
    pub fn anthropic_results(&self, id: &str) -> Result<Vec<u8>, Refusal> {
        let Some(i) = self.find(Provider::Anthropic, id) else {
            return Err(refuse(
                404,
                format!("No batch found with id '{}'.", request::truncate(id, 64)),
            ));
        };
        let b = &self.batches[i];
        if !b.phase.ended() {
            return Err(refuse(400, format!("Results for Message Batch {} are not available yet: its processing has not ended.", b.id)));
        }
        let mut out = Vec::new();
        for it in &b.items {
            let result = match it.state {
                ItemState::Succeeded => json!({"type": "succeeded",
                    "message": serde_json::from_slice::<Value>(&it.result).unwrap_or(Value::Null)}),
                ItemState::Errored => json!({"type": "errored",
                    "error": serde_json::from_slice::<Value>(&it.result).unwrap_or(Value::Null)}),
                ItemState::Canceled => json!({"type": "canceled"}),
                ItemState::Expired | ItemState::Pending => json!({"type": "expired"}),
            };
            let line = json!({"custom_id": it.custom_id, "result": result});
            out.extend_from_slice(&serde_json::to_vec(&line).unwrap_or_default());
            out.push(b'\n');
        }
        Ok(out)
    }

    /// `DELETE /v1/messages/batches/{id}` (ended batches only).
    pub fn delete_anthropic(&mut self, id: &str) -> Result<Value, Refusal> {
        let Some(i) = self.find(Provider::Anthropic, id) else {
            return Err(refuse(
                404,
                format!("No batch found with id '{}'.", request::truncate(id, 64)),
            ));
        };
        if !self.batches[i].phase.ended() {
            return Err(refuse(
                400,
                "A Message Batch must end before it can be deleted; cancel it first.",
            ));
        }
        let b = self.batches.remove(i);
        self.bytes = self.bytes.saturating_sub(b.bytes);
        Ok(json!({"id": b.id, "type": "message_batch_deleted"}))
    }

    // ----- processing ----------------------------------------------------

    /// Processes what is due by provider time `now`: starts validated
    /// batches, processes items (oldest batch first, one every
    /// `1 / items_per_second`), expires what the window left, ends
    /// batches. Costs go to `model`'s spend (no bucket is charged).
    pub fn advance(&mut self, now: Instant, model: &mut ProviderModel) {
        // validating → in_progress / failed
        for b in &mut self.batches {
            if b.phase == Phase::Validating && b.ready <= now {
                if b.errors.is_empty() {
                    b.phase = Phase::InProgress;
                    b.in_progress_at = Some(b.ready);
                } else {
                    b.phase = Phase::Failed;
                    b.ended_at = Some(b.ready);
                }
            }
        }
        let rate = self.cfg.items_per_second;
        let per_item = if rate.is_finite() && rate > 0.0 {
            Some(Self::secs(1.0 / rate))
        } else {
            None
        };
        if let Some(per_item) = per_item {
            loop {
                let pick = self
                    .batches
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| {
                        matches!(b.phase, Phase::InProgress | Phase::Canceling)
                            && b.next < b.stop
                            && b.ready <= now
                            && b.expires > self.cursor.max(b.ready)
                    })
                    .min_by_key(|(_, b)| (b.ready, b.seq))
                    .map(|(i, _)| i);
                let Some(bi) = pick else { break };
                let start = self.cursor.max(self.batches[bi].ready);
                let t = start + per_item;
                if t > now {
                    break;
                }
                if t > self.batches[bi].expires {
                    // Not done in time: the rest of it waits for expiry.
                    self.batches[bi].stop = self.batches[bi].next;
                    continue;
                }
                self.process(bi, t, model);
                self.cursor = t;
            }
        }
        // expiry and the end of batches
        let mut ends = Vec::new();
        for (i, b) in self.batches.iter_mut().enumerate() {
            if !matches!(b.phase, Phase::InProgress | Phase::Canceling) {
                continue;
            }
            let pending = b.items.iter().any(|it| it.state == ItemState::Pending);
            if pending && b.expires <= now {
                for it in &mut b.items {
                    if it.state == ItemState::Pending {
                        it.state = ItemState::Expired;
                        self.totals.items.add(ItemState::Expired, 1);
                    }
                }
                b.phase = Phase::Expired;
                b.ended_at = Some(b.expires);
                ends.push(i);
            } else if !pending {
                let end = b.last_done.max(b.cancelling_at.unwrap_or(b.last_done));
                b.phase = if b.phase == Phase::Canceling {
                    Phase::Cancelled
                } else {
                    Phase::Completed
                };
                b.ended_at = Some(end);
                ends.push(i);
            }
        }
        for i in ends {
            if self.batches[i].provider == Provider::Openai {
                self.write_openai_files(i);
            }
        }
    }

    fn process(&mut self, bi: usize, t: Instant, model: &mut ProviderModel) {
        let wall = self.wall(t);
        let (seed, output, discount) = (self.seed, self.output, self.cfg.discount);
        let b = &mut self.batches[bi];
        let provider = b.provider;
        let n = b.next;
        b.next += 1;
        b.last_done = t;
        let ctx_seed = fnv1a(seed, b.id.as_bytes());
        let it = &mut b.items[n];
        let mut ctx = RenderCtx::new(provider, "", ctx_seed, n as u64 + 1, wall);
        it.request_id = ctx.request_id.clone();
        match request::parse_request(provider, &it.body, &HeaderMap::new()) {
            Err(msg) => {
                let r = render::render_status_error(&ctx, 400, &msg);
                it.status = r.status;
                it.result = r.body;
                it.state = ItemState::Errored;
            }
            Ok(p) => {
                let out =
                    tokens::output_tokens_for(seed, &it.body, output.min, output.max, p.max_tokens);
                ctx.model = p.model.clone();
                it.result = render::success_body(&ctx, p.input_tokens, out, p.max_tokens);
                it.status = 200;
                it.state = ItemState::Succeeded;
                let usd = model.price_of(&p.model).cost(p.input_tokens, out) * discount.max(0.0);
                model.add_batch_cost(usd);
                b.usd += usd;
            }
        }
        let state = b.items[n].state;
        self.totals.items.add(state, 1);
    }

    fn write_openai_files(&mut self, i: usize) {
        let b = &self.batches[i];
        if b.phase == Phase::Failed {
            return;
        }
        let (mut ok, mut err) = (Vec::new(), Vec::new());
        for (n, it) in b.items.iter().enumerate() {
            let rid = format!(
                "batch_req_{:016x}{:016x}",
                fnv1a(self.seed, b.id.as_bytes()),
                n
            );
            let line = match it.state {
                ItemState::Succeeded | ItemState::Errored => {
                    json!({"id": rid, "custom_id": it.custom_id,
                    "response": {"status_code": it.status, "request_id": it.request_id,
                        "body": serde_json::from_slice::<Value>(&it.result).unwrap_or(Value::Null)},
                    "error": Value::Null})
                }
                ItemState::Canceled => {
                    json!({"id": rid, "custom_id": it.custom_id, "response": Value::Null,
                    "error": {"code": "batch_cancelled", "message": "The batch was cancelled before this request executed."}})
                }
                ItemState::Expired | ItemState::Pending => {
                    json!({"id": rid, "custom_id": it.custom_id, "response": Value::Null,
                    "error": {"code": "batch_expired", "message": "The request could not be executed before the completion window ended."}})
                }
            };
            let dest = if it.state == ItemState::Succeeded {
                &mut ok
            } else {
                &mut err
            };
            dest.extend_from_slice(&serde_json::to_vec(&line).unwrap_or_default());
            dest.push(b'\n');
        }
        let (id, end) = (b.id.clone(), b.ended_at.unwrap_or(b.last_done));
        let out = (!ok.is_empty()).then(|| self.store_output(&id, "output", ok, end));
        let errf = (!err.is_empty()).then(|| self.store_output(&id, "error", err, end));
        let b = &mut self.batches[i];
        b.output_file_id = out;
        b.error_file_id = errf;
    }
}

fn new_item(custom_id: &str, body: Vec<u8>) -> Item {
    Item {
        custom_id: custom_id.to_string(),
        body,
        state: ItemState::Pending,
        status: 0,
        result: Vec::new(),
        request_id: String::new(),
    }
}

fn openai_status(p: Phase) -> &'static str {
    match p {
        Phase::Validating => "validating",
        Phase::InProgress => "in_progress",
        Phase::Canceling => "cancelling",
        Phase::Completed => "completed",
        Phase::Failed => "failed",
        Phase::Expired => "expired",
        Phase::Cancelled => "cancelled",
    }
}

fn status_name(b: &Batch) -> &'static str {
    match b.provider {
        Provider::Openai => openai_status(b.phase),
        _ => match b.phase {
            Phase::Canceling => "canceling",
            p if p.ended() => "ended",
            _ => "in_progress",
        },
    }
}

/// Anthropic's `custom_id` pattern, `^[a-zA-Z0-9_-]{1,64}$`.
pub fn valid_custom_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

fn line_error(code: &str, line: usize, message: String, param: Option<&str>) -> Value {
    json!({"code": code, "line": line, "message": message, "param": param})
}

/// Reads an OpenAI batch input file: its items, and the validation
/// errors that fail the batch (empty when it is valid). Reports at most
/// 100 errors.
fn parse_openai_file(bytes: &[u8], endpoint: &str) -> (Vec<Item>, Vec<Value>) {
    let mut items = Vec::new();
    let mut errors = Vec::new();
    let mut ids = HashSet::new();
    let mut model: Option<String> = None;
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l))
        .collect();
    if lines.is_empty() {
        errors.push(line_error(
            "empty_file",
            0,
            "The batch input file is empty.".into(),
            None,
        ));
        return (items, errors);
    }
    if lines.len() > OPENAI_MAX_REQUESTS {
        errors.push(line_error(
            "too_many_requests",
            0,
            format!(
                "The batch input file has {} requests; the limit is {OPENAI_MAX_REQUESTS}.",
                lines.len()
            ),
            None,
        ));
        return (items, errors);
    }
    for (n, line) in lines {
        if errors.len() >= 100 {
            break;
        }
        let v: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(_) => {
                errors.push(line_error(
                    "invalid_json_line",
                    n,
                    "This line is not parseable as valid JSON.".into(),
                    None,
                ));
                continue;
            }
        };
        let cid = v.get("custom_id").and_then(Value::as_str);
        let method = v.get("method").and_then(Value::as_str);
        let url = v.get("url").and_then(Value::as_str);
        let body = v.get("body").and_then(Value::as_object);
        let (Some(cid), Some(body)) = (cid, body) else {
            errors.push(line_error(
                "missing_required_parameter",
                n,
                "Each line needs 'custom_id', 'method', 'url' and 'body'.".into(),
                None,
            ));
            continue;
        };
        if method != Some("POST") {
            errors.push(line_error(
                "invalid_method",
                n,
                "The only supported method is 'POST'.".into(),
                Some("method"),
            ));
            continue;
        }
        if url != Some(endpoint) {
            errors.push(line_error(
                "mismatched_endpoint",
                n,
                format!("The url of every request must be the batch's endpoint, '{endpoint}'."),
                Some("url"),
            ));
            continue;
        }
        if !ids.insert(cid.to_string()) {
            errors.push(line_error("duplicate_custom_id", n, format!("The custom_id '{}' is used by more than one request; custom_ids must be unique.", request::truncate(cid, 64)), Some("custom_id")));
            continue;
        }
        let m = body.get("model").and_then(Value::as_str).unwrap_or("");
        match &model {
            None => model = Some(m.to_string()),
            Some(first) if first != m => {
                errors.push(line_error("mismatched_model", n, format!("The model '{}' differs from '{}' on an earlier line: a batch input file may only include requests to a single model.", request::truncate(m, 64), request::truncate(first, 64)), Some("body.model")));
                continue;
            }
            Some(_) => {}
        }
        items.push(new_item(
            cid,
            serde_json::to_vec(&Value::Object(Map::clone(body))).unwrap_or_default(),
        ));
    }
    (items, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_ids_follow_anthropics_pattern() {
        assert!(valid_custom_id("a-b_C9"));
        assert!(!valid_custom_id(""));
        assert!(!valid_custom_id("a b"));
        assert!(!valid_custom_id(&"x".repeat(65)));
    }

    fn store(rate: f64, window: f64) -> (BatchStore, ProviderModel) {
        let cfg = MockConfig {
            batch: BatchConfig {
                items_per_second: rate,
                window_seconds: window,
                ..BatchConfig::default()
            },
            ..MockConfig::default()
        };
        (
            BatchStore::new(&cfg, SystemTime::UNIX_EPOCH),
            ProviderModel::new(&cfg),
        )
    }

    fn requests(n: usize) -> Value {
        let reqs: Vec<Value> = (0..n)
            .map(|i| {
                json!({"custom_id": format!("r{i}"), "params": {"model": "claude-sonnet-4-5",
                "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}})
            })
            .collect();
        json!({ "requests": reqs })
    }

    #[test]
    fn items_are_processed_at_the_configured_rate_and_expire_at_the_window() {
        // 2 items per second, a 2-second window: items end at 0.5, 1, 1.5
        // and 2 s; the other 6 expire when the window ends.
        let (mut st, mut model) = store(2.0, 2.0);
        let b = st
            .create_anthropic(&requests(10), 0, "k", Instant::ZERO, "")
            .unwrap();
        let id = b["id"].as_str().unwrap().to_string();
        st.advance(Instant::from_millis(1_000), &mut model);
        let v = st.get(Provider::Anthropic, &id, "").unwrap();
        assert_eq!(v["request_counts"]["succeeded"], 2);
        assert_eq!(v["processing_status"], "in_progress");
        st.advance(Instant::from_millis(60_000), &mut model);
        let v = st.get(Provider::Anthropic, &id, "").unwrap();
        assert_eq!(v["processing_status"], "ended");
        assert_eq!(v["request_counts"]["succeeded"], 4);
        assert_eq!(v["request_counts"]["expired"], 6);
        assert_eq!(v["ended_at"], v["expires_at"]);
        // the bucket state is untouched; the spend is not
        assert_eq!(model.requests_seen(), 0);
        assert!(model.usd_batch() > 0.0 && model.usd_direct() == 0.0);
    }

    #[test]
    fn batches_are_processed_oldest_first() {
        let (mut st, mut model) = store(1.0, 86_400.0);
        let a = st
            .create_anthropic(&requests(2), 0, "k", Instant::ZERO, "")
            .unwrap();
        let b = st
            .create_anthropic(&requests(2), 0, "k", Instant::ZERO, "")
            .unwrap();
        st.advance(Instant::from_millis(2_000), &mut model);
        let count = |st: &BatchStore, v: &Value| {
            st.get(Provider::Anthropic, v["id"].as_str().unwrap(), "")
                .unwrap()["request_counts"]["succeeded"]
                .clone()
        };
        assert_eq!(count(&st, &a), 2);
        assert_eq!(count(&st, &b), 0);
        st.advance(Instant::from_millis(4_000), &mut model);
        assert_eq!(count(&st, &b), 2);
    }

    #[test]
    fn a_file_mixing_models_fails_validation() {
        let f = b"{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"m1\",\"messages\":[]}}\n{\"custom_id\":\"b\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"m2\",\"messages\":[]}}\n";
        let (items, errors) = parse_openai_file(f, "/v1/chat/completions");
        assert_eq!(items.len(), 1);
        assert_eq!(errors[0]["code"], "mismatched_model");
        assert_eq!(errors[0]["line"], 2);
    }
}
