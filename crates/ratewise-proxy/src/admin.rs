//! The admin listener (`--admin`, loopback by default, never the callers'
//! port):
//!
//! * `GET /status` — per key fingerprint (with its last four characters)
//!   and model class: limits set or learned, bucket levels as of the moment
//!   of the read (refilled to then; with `--redis`, the shared record's),
//!   the capacity taken for each bucket, the margin learned from 429s the
//!   model did not expect and how many there were, advice where the
//!   provider's own rule binds (`max_tokens` reservations filling the
//!   output bucket), ramp, pause, stop with cause and since when; jobs in flight; attempts whose outcome
//!   is unknown (cut by a crash, or sent with no answer), kept across
//!   restarts until acknowledged; each pool (`[[pools]]`) with each
//!   member by upstream and key fingerprint: provider, weight, sends,
//!   share, its stop with the answer that stopped it, its upstream's
//!   overload hold (see [`crate::pools`]); each class's `queue`: per
//!   priority level and flow, the jobs waiting and how long the oldest
//!   has, what each was admitted lately as a share of the limit, the
//!   admission waits' p50 / p95, and what the head waits for (see
//!   [`queues`]);
//! * `POST /unknown/ack?job=ID` — acknowledges job `ID`'s unknown
//!   outcomes (every attempt of it); `POST /unknown/ack?all=true` — all of
//!   them listed. Journaled before they leave `/status` and
//!   `ratewise_unknown_outcomes`, so a restart no longer reports them.
//!   Answers `{"acknowledged": [job ids]}`; neither `job` nor `all=true`
//!   (a bare POST acknowledges nothing) is a 400 `job_required`, both or a
//!   query that cannot be read a 400 `query_invalid`, a malformed id a 400
//!   `job_invalid`; a job with no unknown outcome a 404 `job_not_found`; a
//!   journal that cannot be written a 500 `journal_error` (the outcomes
//!   stay listed);
//! * `POST /resume?key=FP` — lifts a key's stop;
//! * `POST /forget?key=FP` — drops what the key learned and what is
//!   remembered of it (stated limits, capacities, estimates): it is
//!   learned again from its next answers, here and after a restart (with
//!   `--redis`, for every replica). `[[key]]` limits stay. Answers
//!   `{"forgot": FP}`;
//! * `POST /stop?key=FP` — stops a key until resumed (`/status` says
//!   `operator`; its callers get a 429 coded `ratewise_operator_stop`);
//! * `GET /metrics` — Prometheus text (bucket levels as `/status` reads
//!   them, capacities, learned margins and surprises, unknown outcomes not
//!   acknowledged: `ratewise_unknown_outcomes`; each pool member's sends,
//!   share, weight, stop and overload hold, labelled by pool, member
//!   fingerprint and upstream: `ratewise_pool_member_*`);
//! * `GET /healthz` — `ok`; `degraded: <reason>` (still 200: the proxy
//!   serves) while the Redis store is unavailable and this process paces
//!   on its share of the limits; 503 `draining` once a shutdown began.
//!
//! Every call but `/healthz` must name this listener in `Host`, come from
//! no foreign page (`Origin`) and carry the admin token
//! (`Authorization: Bearer …`; `/metrics` without it when
//! `[admin] open_metrics`): see [`guard`], [`settings`], [`token`].
//!
//! Every error the admin API answers, a refusal or a request it cannot
//! act on, has one shape, `{"error": {"type": "…", "message": "…"}}`
//! (`application/json`): 400 `key_required`, `key_invalid`,
//! `query_invalid`; 401 `token_required`, `token_wrong`; 403
//! `origin_not_allowed`; 404 `key_not_found`, `not_found` (no such
//! endpoint); 405 `method_not_allowed`; 421 `host_not_allowed`; 500
//! `internal`.
//! A key is named by its fingerprint (`fp-` and 16 hex digits) or its
//! configured group; `/stop` and `/resume` of a key this process never
//! saw answer 404 (with `--redis`, a well-formed fingerprint goes to the
//! shared record: another replica may have seen it).
//!
//! `/status` takes what it shows under the store's lock in short holds
//! (the names, then the listed keys' snapshots) and formats outside it,
//! off the runtime's workers, so a read never holds up the request path
//! for long; it lists at most `[admin] status_max_keys` keys
//! (stopped ones first, then by fingerprint) and counts the rest;
//! `/status?key=FP` shows one.

use crate::App;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use http::{HeaderValue, StatusCode};
use ratewise_core::admit::{ScopeId, ScopeSnapshot, Store};
use ratewise_core::time::Now;
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

pub mod guard;
pub mod queues;
pub mod settings;
pub mod token;

/// The admin routes, behind the [`guard`].
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/healthz", get(crate::healthz))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/resume", post(resume))
        .route("/forget", post(forget))
        .route("/stop", post(stop))
        .route("/unknown/ack", post(ack_unknown))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(app.clone(), guarded))
        .with_state(app)
}

/// Refuses what the [`guard`] refuses, before any handler runs.
async fn guarded(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let authority = req.uri().authority().map(|a| a.as_str().to_owned());
    match app
        .admin
        .check(req.uri().path(), authority.as_deref(), req.headers())
    {
        Ok(()) => next.run(req).await,
        Err(r) => {
            // Neither the token nor what the caller sent is logged.
            tracing::warn!(reason = r.as_str(), "admin request refused");
            r.response()
        }
    }
}

#[derive(Deserialize)]
struct KeyQuery {
    key: Option<String>,
}

/// An admin error, in the one shape every admin error has:
/// `{"error": {"type": kind, "message": message}}`.
pub(crate) fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    json(
        status,
        serde_json::json!({"error": {"type": kind, "message": message}}),
    )
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such admin endpoint: GET /status, /metrics, /healthz; POST /stop?key=, /resume?key=, /forget?key=, /unknown/ack?job=|all=true",
    )
}

async fn method_not_allowed() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "not with this method: GET /status, /metrics, /healthz; POST /stop?key=, /resume?key=, /forget?key=, /unknown/ack?job=|all=true",
    )
}

/// A query that cannot be read (a key given twice, say).
fn bad_query() -> Response {
    error(
        StatusCode::BAD_REQUEST,
        "query_invalid",
        "the query cannot be read: give ?key=FINGERPRINT once (see GET /status)",
    )
}

fn json(status: StatusCode, v: serde_json::Value) -> Response {
    let mut r = (status, v.to_string()).into_response();
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// One value per bucket, named by its dimension.
fn per_dimension<T: serde::Serialize>(v: [T; 4]) -> serde_json::Value {
    let [requests, input_tokens, output_tokens, tokens] = v;
    serde_json::json!({
        "requests": requests, "input_tokens": input_tokens,
        "output_tokens": output_tokens, "tokens": tokens,
    })
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The scopes `ids` as the model has them at `now`, their buckets
/// refilled to that moment: from the store itself in one process, in one
/// hold of its lock; with `--redis`, from the shared record (one read per
/// scope, so another replica's takes show), or this process's view when
/// Redis does not answer.
async fn snapshots(app: &App, ids: Vec<ScopeId>, now: Now) -> Vec<ScopeSnapshot> {
    match &app.redis {
        None => {
            let mut c = app.store.lock();
            ids.into_iter()
                .filter_map(|id| c.snapshot(id, now))
                .collect()
        }
        Some(r) => {
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                if let Some(s) = Store::snapshot(r, id, now).await {
                    out.push(s);
                }
            }
            out
        }
    }
}

/// Which keys one `/status` lists: `only`, or up to `max` of all —
/// stopped ones first, then by name; and how many there are in all.
fn listed(app: &App, only: Option<&str>, max: usize) -> (Vec<String>, usize) {
    if let Some(k) = only {
        let c = app.store.lock();
        return if c.knows_key(k) {
            (vec![c.key_name(k).to_owned()], 1)
        } else {
            (Vec::new(), 0)
        };
    }
    // The names are copied in the hold; chosen outside it: the stopped,
    // then the first by name (a selection, then a sort of those alone).
    let names = app.store.lock().key_names();
    let total = names.len();
    // Listed first: the keys with a stop's evidence kept here (an order
    // only: whether a key is stopped is the store's word, read in its
    // snapshot below).
    let stopped: std::collections::HashSet<String> = app.stops.keys().into_iter().collect();
    let (mut first, mut rest): (Vec<String>, Vec<String>) =
        names.into_iter().partition(|n| stopped.contains(n));
    first.sort_unstable();
    first.truncate(max);
    let room = max - first.len();
    if rest.len() > room {
        if room > 0 {
            rest.select_nth_unstable(room);
        }
        rest.truncate(room);
    }
    rest.sort_unstable();
    first.append(&mut rest);
    (first, total)
}

async fn status(
    State(app): State<Arc<App>>,
    q: Result<Query<KeyQuery>, QueryRejection>,
) -> Response {
    let Ok(Query(q)) = q else {
        return bad_query();
    };
    let only = match key_of(&q) {
        None if q.key.is_some() => return no_key(),
        None => None,
        Some(k) if !valid_key(&app, &k) => return bad_key(),
        Some(k) => Some(k),
    };
    let now = app.layer.now();
    let max = app.config.admin_access.status_max_keys;
    let (names, total) = listed(&app, only.as_deref(), max);
    if only.is_some() && names.is_empty() {
        return unseen();
    }
    let ids: Vec<ScopeId> = {
        let c = app.store.lock();
        names.iter().flat_map(|n| c.scopes_of(n)).collect()
    };
    let scopes = snapshots(&app, ids, now).await;
    let pools = crate::pools::statuses(&app.pools).await;
    let queues = queues::by_scope(&app);
    // Formatting (most of a read's time with many keys) runs outside the
    // store's lock and off the runtime's workers, which the callers'
    // requests share.
    let app2 = app.clone();
    match tokio::task::spawn_blocking(move || {
        format_status(&app2, names, scopes, total, pools, queues, now)
    })
    .await
    {
        Ok(body) => json(StatusCode::OK, body),
        Err(_) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "status formatting failed",
        ),
    }
}

/// `/status`'s body from the snapshots taken.
fn format_status(
    app: &App,
    names: Vec<String>,
    scopes: Vec<ScopeSnapshot>,
    total: usize,
    pools: Vec<(String, ratewise_tower::pool::PoolStatus)>,
    queues: HashMap<(String, String), ratewise_tower::QueueStatus>,
    now: Now,
) -> serde_json::Value {
    let mut classes: HashMap<String, Vec<serde_json::Value>> = HashMap::new();
    // Whether a key is stopped, why and until when: the store's record
    // (every scope of a key shows the key's one stop).
    let mut stopped_in_store: HashMap<String, ratewise_core::admit::Stop> = HashMap::new();
    for s in scopes {
        let l = s.limits;
        if let Some(st) = s.stopped {
            stopped_in_store.entry(s.key.clone()).or_insert(st);
        }
        classes
            .entry(s.key.clone())
            .or_default()
            .push(serde_json::json!({
                "class": s.class,
                "limits": {
                    "requests": l.requests, "input_tokens": l.input_tokens,
                    "output_tokens": l.output_tokens, "tokens": l.tokens,
                },
                // Per dimension: whether the limit is configured, stated
                // by the provider's headers, or estimated from 429s alone
                // (and where an estimate stands: a cold lower bound, or
                // measured between two 429s).
                "limit_sources": per_dimension(s.sources.map(|x| x.map(|x| x.as_str()))),
                "estimates": per_dimension(s.estimates),
                // Paced on beliefs remembered from before a restart (the
                // journal, a stale shared record) until live evidence
                // replaces them: how long ago they were learned.
                "remembered": s.remembered.map(|age| serde_json::json!({
                    "age_s": age.as_secs(),
                })),
                "levels": per_dimension(s.levels),
                "capacities": per_dimension(s.capacities),
                "margins": per_dimension(s.margins),
                "surprises": per_dimension(s.surprises),
                "advice": s.advice(),
                "ramp_percent": f64::from(s.ramp_permille) / 10.0,
                "paused_for_ms": s.paused_until.map(|p| (p - now.instant).as_millis() as u64),
                "stopped": s.stopped.map(|st| serde_json::json!({
                    "cause": st.cause.as_str(),
                    "until_ms": st.until.map(unix_ms),
                })),
                // Per priority level and flow: what waits, for how long,
                // and what each was admitted lately ([priority]).
                "queue": queues.get(&(s.key.clone(), s.class.clone())).map(queues::json),
            }));
    }
    let key_list: Vec<serde_json::Value> = names
        .into_iter()
        .filter_map(|fp| {
            let classes = classes.remove(&fp)?;
            let stop = stopped_in_store
                .get(&fp)
                .map(|st| stop_json(st, app.stops.beside(&fp, st).as_ref()));
            Some(serde_json::json!({
                "fingerprint": fp,
                "last_four": app.keys.last_four_of(&fp),
                "stop": stop,
                "classes": classes,
            }))
        })
        .collect();
    let ledger = app.store.ledger();
    serde_json::json!({
            "keys_total": total,
            "keys_not_listed": total.saturating_sub(key_list.len()),
            "keys": key_list,
            "jobs_in_flight": app.metrics.in_flight.load(Ordering::Relaxed),
            "jobs_waiting": app.metrics.waiting.load(Ordering::Relaxed),
            "reservations_outstanding": ledger.outstanding.requests,
            "unknown_outcomes": *app.unknown.lock().unwrap_or_else(|p| p.into_inner()),
            "store": store_status(app),
            "pools": crate::pools::status_json(&pools, &app.stops),
    })
}

/// A key's stop in `/status`: the store's record (`stop`: its cause and
/// end), with the evidence kept beside it when it is of that stop — since
/// when, `operator` as the cause word of an operator's stop, and the
/// provider's answer that stopped it (status, error type and code,
/// request id; never its message). A stop this process has no evidence
/// of (made by another process sharing the store) is shown all the same,
/// `since_ms` then null.
fn stop_json(
    stop: &ratewise_core::admit::Stop,
    ev: Option<&crate::evidence::Evidence>,
) -> serde_json::Value {
    let answer = ev.and_then(|e| e.answer.as_ref()).map(|a| {
        serde_json::json!({
            "status": a.status,
            "error_type": a.error_type,
            "error_code": a.code,
            "request_id": a.request_id,
        })
    });
    serde_json::json!({
        "cause": ev.map_or(stop.cause.as_str(), |e| e.cause_word()),
        "since_ms": ev.map(|e| unix_ms(e.since)),
        "until_ms": stop.until.map(unix_ms),
        "answer": answer,
    })
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let now = app.layer.now();
    let ids = app.store.lock().scopes();
    let snaps = snapshots(&app, ids, now).await;
    let pools = crate::pools::statuses(&app.pools).await;
    let queues = queues::by_scope(&app);
    // Formatted off the runtime's workers, as `/status` is.
    let app2 = app.clone();
    let text = tokio::task::spawn_blocking(move || format_metrics(&app2, snaps, pools, queues))
        .await
        .unwrap_or_default();
    let mut r = text.into_response();
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

/// `/metrics`'s text from the snapshots taken.
fn format_metrics(
    app: &App,
    snaps: Vec<ScopeSnapshot>,
    pools: Vec<(String, ratewise_tower::pool::PoolStatus)>,
    queues: HashMap<(String, String), ratewise_tower::QueueStatus>,
) -> String {
    use ratewise_core::Dimension;
    const DIMENSIONS: [Dimension; 4] = [
        Dimension::Requests,
        Dimension::InputTokens,
        Dimension::OutputTokens,
        Dimension::Tokens,
    ];
    let mut gauges = Vec::new();
    for s in snaps {
        for (i, dim) in ["requests", "input_tokens", "output_tokens", "tokens"]
            .iter()
            .enumerate()
        {
            let labels = format!(
                "{{key=\"{}\",class=\"{}\",dimension=\"{dim}\"}}",
                crate::metrics::label(&s.key),
                crate::metrics::label(&s.class)
            );
            if let Some(level) = s.levels[i] {
                gauges.push((format!("ratewise_bucket_level{labels}"), level as f64));
            }
            if let (Some(limit), Some(source)) = (s.limits.get(DIMENSIONS[i]), s.sources[i]) {
                // One series per source, so a dashboard tells a limit the
                // provider stated from one estimated from its 429s.
                let labels = format!(
                    "{{key=\"{}\",class=\"{}\",dimension=\"{dim}\",source=\"{}\"}}",
                    crate::metrics::label(&s.key),
                    crate::metrics::label(&s.class),
                    source.as_str()
                );
                gauges.push((format!("ratewise_limit_per_minute{labels}"), limit as f64));
            }
            if let Some(margin) = s.margins[i] {
                gauges.push((format!("ratewise_bucket_margin{labels}"), margin as f64));
                gauges.push((
                    format!("ratewise_bucket_surprises_total{labels}"),
                    s.surprises[i] as f64,
                ));
            }
            if let Some(cap) = s.capacities[i] {
                gauges.push((format!("ratewise_bucket_capacity{labels}"), cap as f64));
            }
        }
    }
    if let Some(r) = &app.redis {
        let h = r.health();
        gauges.push((
            "ratewise_store_degraded".into(),
            f64::from(u8::from(h.degraded)),
        ));
        gauges.push((
            "ratewise_store_share".into(),
            f64::from(h.share_permille) / 1000.0,
        ));
        gauges.push(("ratewise_store_processes".into(), f64::from(h.peers)));
        gauges.push(("ratewise_store_writes_total".into(), h.writes as f64));
        gauges.push((
            "ratewise_store_refused_writes_total".into(),
            h.conflicts as f64,
        ));
        gauges.push(("ratewise_store_errors_total".into(), h.errors as f64));
    }
    crate::pools::gauges(&pools, &mut gauges);
    queues::gauges(&queues, &mut gauges);
    let unknown = app.unknown.lock().unwrap_or_else(|p| p.into_inner()).len();
    gauges.push(("ratewise_unknown_outcomes".into(), unknown as f64));
    gauges.push((
        "ratewise_priority_unknown_level_total".into(),
        app.unknown_levels
            .count
            .load(std::sync::atomic::Ordering::Relaxed) as f64,
    ));
    let ledger = app.store.ledger();
    gauges.push((
        "ratewise_tokens_charged{kind=\"input\"}".into(),
        ledger.charged.input as f64,
    ));
    gauges.push((
        "ratewise_tokens_charged{kind=\"output\"}".into(),
        ledger.charged.output as f64,
    ));
    app.metrics.render(&gauges)
}

/// Which store the keys' state lives in, and how it is doing.
fn store_status(app: &App) -> serde_json::Value {
    match &app.redis {
        None => serde_json::json!({"kind": "memory"}),
        Some(r) => {
            let h = r.health();
            serde_json::json!({
                "kind": "redis",
                "degraded": h.degraded,
                "share_percent": f64::from(h.share_permille) / 10.0,
                "processes": h.peers,
                "writes": h.writes,
                "refused_writes": h.conflicts,
                "errors": h.errors,
            })
        }
    }
}

/// The `?key=` of a request, a fingerprint lower-cased (as the proxy
/// files it); `None` when missing or empty.
fn key_of(q: &KeyQuery) -> Option<String> {
    q.key
        .as_deref()
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(|k| crate::keys::normalized(k).unwrap_or_else(|| k.to_owned()))
}

/// A key the admin API may name: a fingerprint as the proxy writes them,
/// or a configured group.
fn valid_key(app: &App, key: &str) -> bool {
    crate::keys::is_fingerprint(key)
        || app
            .config
            .layer
            .admission
            .key_groups
            .iter()
            .any(|(_, g)| g == key)
}

/// Whether this process has seen `key` — or, with `--redis`, whether it
/// may be in the shared record (another replica may have seen it).
fn seen(app: &App, key: &str) -> bool {
    app.redis.is_some()
        || app.store.lock().knows_key(key)
        || app.keys.last_four_of(key).is_some()
        || app.stops.get(key).is_some()
}

fn no_key() -> Response {
    error(
        StatusCode::BAD_REQUEST,
        "key_required",
        "give ?key=FINGERPRINT (see GET /status)",
    )
}

fn bad_key() -> Response {
    error(
        StatusCode::BAD_REQUEST,
        "key_invalid",
        "?key= is not a fingerprint (fp- and 16 lowercase hex digits, see GET /status) nor a configured group",
    )
}

fn unseen() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "key_not_found",
        "no such key: never seen by this proxy, or forgotten when idle",
    )
}

/// Why a `/stop` or `/resume` names no key it can act on.
enum KeyRefusal {
    Missing,
    Malformed,
    Unseen,
}

impl KeyRefusal {
    fn response(self) -> Response {
        match self {
            KeyRefusal::Missing => no_key(),
            KeyRefusal::Malformed => bad_key(),
            KeyRefusal::Unseen => unseen(),
        }
    }
}

/// The key a `/stop` or `/resume` names, checked.
fn named_key(app: &App, q: &KeyQuery) -> Result<String, KeyRefusal> {
    let key = key_of(q).ok_or(KeyRefusal::Missing)?;
    if !valid_key(app, &key) {
        return Err(KeyRefusal::Malformed);
    }
    if !seen(app, &key) {
        return Err(KeyRefusal::Unseen);
    }
    Ok(key)
}

/// Why a keyed POST (`/stop`, `/resume`, `/forget`) acts on no key.
enum Unkeyed {
    Query,
    Key(KeyRefusal),
}

impl Unkeyed {
    fn response(self) -> Response {
        match self {
            Unkeyed::Query => bad_query(),
            Unkeyed::Key(r) => r.response(),
        }
    }
}

/// The key a keyed POST names, checked.
fn keyed(app: &App, q: Result<Query<KeyQuery>, QueryRejection>) -> Result<String, Unkeyed> {
    let Ok(Query(q)) = q else {
        return Err(Unkeyed::Query);
    };
    named_key(app, &q).map_err(Unkeyed::Key)
}

async fn resume(
    State(app): State<Arc<App>>,
    q: Result<Query<KeyQuery>, QueryRejection>,
) -> Response {
    let key = match keyed(&app, q) {
        Ok(k) => k,
        Err(r) => return r.response(),
    };
    app.resume(&key).await;
    app.stops.forget(&key);
    if let Some(j) = &app.journal {
        j.resume(&key);
    }
    tracing::warn!(key = %key, "key resumed by an operator");
    json(StatusCode::OK, serde_json::json!({"resumed": key}))
}

async fn forget(
    State(app): State<Arc<App>>,
    q: Result<Query<KeyQuery>, QueryRejection>,
) -> Response {
    let key = match keyed(&app, q) {
        Ok(k) => k,
        Err(r) => return r.response(),
    };
    crate::memory::forget(&app, &key).await;
    tracing::warn!(key = %key, "what the key learned forgotten by an operator");
    json(StatusCode::OK, serde_json::json!({"forgot": key}))
}

async fn stop(State(app): State<Arc<App>>, q: Result<Query<KeyQuery>, QueryRejection>) -> Response {
    let key = match keyed(&app, q) {
        Ok(k) => k,
        Err(r) => return r.response(),
    };
    // Journaled, with its evidence, by `operator_stop`.
    app.operator_stop(&key).await;
    tracing::warn!(key = %key, "key stopped by an operator");
    json(StatusCode::OK, serde_json::json!({"stopped": key}))
}

#[derive(Deserialize)]
struct AckQuery {
    job: Option<String>,
    all: Option<String>,
}

/// Whether `j` reads as a job id the proxy writes (a caller's plain word,
/// a generated id, a `~n` suffix).
fn job_id_like(j: &str) -> bool {
    !j.is_empty()
        && j.len() <= 128
        && j.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-~".contains(&b))
}

/// `POST /unknown/ack?job=ID` or `?all=true`: see the module's docs.
async fn ack_unknown(
    State(app): State<Arc<App>>,
    q: Result<Query<AckQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let bad = |kind: &str, message: &str| error(StatusCode::BAD_REQUEST, kind, message);
    let Ok(Query(q)) = q else {
        return bad(
            "query_invalid",
            "the query cannot be read: give ?job=ID or ?all=true once",
        );
    };
    let job = q.job.as_deref().map(str::trim).filter(|j| !j.is_empty());
    let all = match q.all.as_deref().map(str::trim) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return bad("query_invalid", "all= is true or false"),
    };
    let job = match (job, all) {
        (Some(_), true) => return bad("query_invalid", "give ?job=ID or ?all=true, not both"),
        (None, false) => {
            return bad(
                "job_required",
                "give ?job=ID (see unknown_outcomes in GET /status) or ?all=true",
            )
        }
        (Some(j), false) if !job_id_like(j) => {
            return bad(
                "job_invalid",
                "?job= is not a job id (see unknown_outcomes in GET /status)",
            )
        }
        (job, _) => job.map(str::to_owned),
    };
    // The journal's writes block: off the runtime's workers.
    let app2 = app.clone();
    let one = job.clone();
    let done = tokio::task::spawn_blocking(move || app2.acknowledge_unknown(one.as_deref())).await;
    match done {
        Ok(Ok(jobs)) if jobs.is_empty() && job.is_some() => error(
            StatusCode::NOT_FOUND,
            "job_not_found",
            "no unknown outcome for this job (see unknown_outcomes in GET /status)",
        ),
        Ok(Ok(jobs)) => json(StatusCode::OK, serde_json::json!({"acknowledged": jobs})),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "an acknowledgement could not be journaled");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "journal_error",
                "the journal could not be written; the unknown outcomes not acknowledged stay listed",
            )
        }
        Err(_) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "the acknowledgement failed",
        ),
    }
}
