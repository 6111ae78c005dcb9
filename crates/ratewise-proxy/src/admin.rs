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
//!   is unknown (cut by a crash before the last start, or sent with no
//!   answer since);
//! * `POST /resume?key=FP` — lifts a key's stop;
//! * `POST /stop?key=FP` — stops a key (cause `user_limit`) until resumed;
//! * `GET /metrics` — Prometheus text (bucket levels as `/status` reads
//!   them, capacities, learned margins and surprises);
//! * `GET /healthz` — `ok`.

use crate::App;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use http::{HeaderValue, StatusCode};
use ratewise_core::admit::{ScopeSnapshot, Store};
use ratewise_core::time::Now;
use ratewise_core::Cause;
use serde::Deserialize;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

/// The admin routes.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/healthz", get(crate::healthz))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/resume", post(resume))
        .route("/stop", post(stop))
        .with_state(app)
}

#[derive(Deserialize)]
struct KeyQuery {
    key: Option<String>,
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

/// Every scope as the model has it at `now`, its buckets refilled to that
/// moment: from the store itself in one process; with `--redis`, from the
/// shared record (one read per scope, so another replica's takes show),
/// or this process's view when Redis does not answer.
async fn snapshots(app: &App, now: Now) -> Vec<ScopeSnapshot> {
    let ids = app.store.lock().scopes();
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

async fn status(State(app): State<Arc<App>>) -> Response {
    let now = app.layer.now();
    let scopes = snapshots(&app, now).await;
    // A stop another process lifted (through Redis) is not shown.
    let stops: Vec<_> = app
        .stops
        .all()
        .into_iter()
        .filter(|(k, _, _)| scopes.iter().any(|s| s.key == *k && s.stopped.is_some()))
        .collect();
    let mut keys: std::collections::BTreeMap<String, Vec<serde_json::Value>> = Default::default();
    for s in scopes {
        let l = s.limits;
        keys.entry(s.key.clone())
            .or_default()
            .push(serde_json::json!({
                "class": s.class,
                "limits": {
                    "requests": l.requests, "input_tokens": l.input_tokens,
                    "output_tokens": l.output_tokens, "tokens": l.tokens,
                },
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
            }));
    }
    let seen = app.keys.all();
    let key_list: Vec<serde_json::Value> = keys
        .into_iter()
        .map(|(fp, classes)| {
            let last4 = seen.iter().find(|(f, _)| *f == fp).map(|(_, l)| l.clone());
            let stop = stops.iter().find(|(k, _, _)| *k == fp).map(|(_, c, since)| {
                serde_json::json!({"cause": c.as_str(), "since_ms": unix_ms(*since)})
            });
            serde_json::json!({
                "fingerprint": fp,
                "last_four": last4,
                "stop": stop,
                "classes": classes,
            })
        })
        .collect();
    let ledger = app.store.ledger();
    json(
        StatusCode::OK,
        serde_json::json!({
            "keys": key_list,
            "jobs_in_flight": app.metrics.in_flight.load(Ordering::Relaxed),
            "jobs_waiting": app.metrics.waiting.load(Ordering::Relaxed),
            "reservations_outstanding": ledger.outstanding.requests,
            "unknown_outcomes": *app.unknown.lock().unwrap_or_else(|p| p.into_inner()),
            "store": store_status(&app),
        }),
    )
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let now = app.layer.now();
    let mut gauges = Vec::new();
    for s in snapshots(&app, now).await {
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
    let ledger = app.store.ledger();
    gauges.push((
        "ratewise_tokens_charged{kind=\"input\"}".into(),
        ledger.charged.input as f64,
    ));
    gauges.push((
        "ratewise_tokens_charged{kind=\"output\"}".into(),
        ledger.charged.output as f64,
    ));
    let mut r = app.metrics.render(&gauges).into_response();
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
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

/// The `?key=` of a request; `None` when missing or empty.
fn key_of(q: &KeyQuery) -> Option<String> {
    q.key
        .as_deref()
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
}

fn no_key() -> Response {
    json(
        StatusCode::BAD_REQUEST,
        serde_json::json!({"error": "give ?key=FINGERPRINT (see GET /status)"}),
    )
}

async fn resume(State(app): State<Arc<App>>, Query(q): Query<KeyQuery>) -> Response {
    let Some(key) = key_of(&q) else {
        return no_key();
    };
    app.layer.resume(&key).await;
    app.stops.forget(&key);
    if let Some(j) = &app.journal {
        j.resume(&key);
    }
    tracing::warn!(key = %key, "key resumed by an operator");
    json(StatusCode::OK, serde_json::json!({"resumed": key}))
}

async fn stop(State(app): State<Arc<App>>, Query(q): Query<KeyQuery>) -> Response {
    let Some(key) = key_of(&q) else {
        return no_key();
    };
    app.operator_stop(&key).await;
    if let Some(j) = &app.journal {
        j.stop(&key, Cause::UserLimit, None);
    }
    tracing::warn!(key = %key, "key stopped by an operator");
    json(StatusCode::OK, serde_json::json!({"stopped": key}))
}
