//! `/status`'s `queue` of each key and class, and its `/metrics` series:
//! per priority level and flow, what waits and for how long, what each
//! was admitted lately as a share of the limit, and the admission waits'
//! p50 / p95; and what the head of the queue waits for (which bucket,
//! how much longer). Read from the layer's queues
//! ([`ratewise_tower::RetryLayer::queues`]): every layer of the proxy
//! waits in the same ones.

use crate::metrics::label;
use crate::App;
use ratewise_core::admit::WaitReason;
use ratewise_tower::QueueStatus;
use std::collections::HashMap;
use std::time::Duration;

/// Flows labelled by name in `/metrics` per level of a scope; the others
/// are summed under `other` (a label per tenant would be unbounded).
pub const MAX_FLOW_LABELS: usize = 16;

/// The queues by (key, class), as the store names their scopes.
pub fn by_scope(app: &App) -> HashMap<(String, String), QueueStatus> {
    let queues = app.layer.queues();
    let c = app.store.lock();
    queues
        .into_iter()
        .filter_map(|q| {
            let (key, class) = c.names_of(q.scope)?;
            Some(((key.to_owned(), class.to_owned()), q))
        })
        .collect()
}

fn ms(d: Option<Duration>) -> Option<u64> {
    d.map(|d| d.as_millis() as u64)
}

/// Each limit's share, by its dimension's name.
fn per_limit(v: [f64; 4]) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for (name, x) in ratewise_tower::QUEUE_DIMENSIONS.iter().zip(v) {
        m.insert((*name).to_owned(), ((x * 1000.0).round() / 1000.0).into());
    }
    m.into()
}

fn reason(r: WaitReason) -> String {
    match r {
        WaitReason::Bucket(d) => format!("bucket:{}", d.as_str()),
        WaitReason::Paused => "paused".into(),
        WaitReason::SpendInFlight => "spend_in_flight".into(),
        WaitReason::Probe => "probe".into(),
        WaitReason::Queue => "queue".into(),
        WaitReason::InFlight => "in_flight".into(),
        _ => "other".into(),
    }
}

/// One scope's queue in `/status`.
pub fn json(q: &QueueStatus) -> serde_json::Value {
    serde_json::json!({
        "head_waits_for": q.head_waits.map(|(r, left)| serde_json::json!({
            "reason": reason(r),
            "for_ms": left.as_millis() as u64,
        })),
        "levels": q.levels.iter().map(|l| serde_json::json!({
            "level": l.level,
            "waiting": l.waiting,
            "used_of_limit": (l.used_of_limit * 1000.0).round() / 1000.0,
            "used_of_each_limit": per_limit(l.used_of_each_limit),
            "wait_p50_ms": ms(l.wait_p50),
            "wait_p95_ms": ms(l.wait_p95),
            "flows": l.flows.iter().map(|f| serde_json::json!({
                "flow": f.flow,
                "waiting": f.waiting,
                "oldest_wait_ms": ms(f.oldest_wait),
                "weight": f.weight,
                "used_of_limit": (f.used_of_limit * 1000.0).round() / 1000.0,
                "used_of_each_limit": per_limit(f.used_of_each_limit),
                "wait_p50_ms": ms(f.wait_p50),
                "wait_p95_ms": ms(f.wait_p95),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// `/metrics`' queue series: per key, class, level and flow (at most
/// [`MAX_FLOW_LABELS`] flows by name per level, the rest summed as
/// `other`), the jobs waiting and the share of the limit used; per level,
/// the admission wait's quantiles.
pub fn gauges(queues: &HashMap<(String, String), QueueStatus>, out: &mut Vec<(String, f64)>) {
    let mut scopes: Vec<_> = queues.iter().collect();
    scopes.sort_by(|a, b| a.0.cmp(b.0));
    for ((key, class), q) in scopes {
        let (key, class) = (label(key), label(class));
        for l in &q.levels {
            let level = label(&l.level);
            let mut folded: HashMap<String, (f64, f64)> = HashMap::new();
            for (i, f) in l.flows.iter().enumerate() {
                let name = if i < MAX_FLOW_LABELS {
                    label(&f.flow)
                } else {
                    "other".to_owned()
                };
                let e = folded.entry(name).or_default();
                e.0 += f.waiting as f64;
                e.1 += f.used_of_limit;
            }
            let mut folded: Vec<_> = folded.into_iter().collect();
            folded.sort_by(|a, b| a.0.cmp(&b.0));
            for (flow, (waiting, used)) in folded {
                let labels = format!(
                    "{{key=\"{key}\",class=\"{class}\",level=\"{level}\",flow=\"{flow}\"}}"
                );
                out.push((format!("ratewise_queue_waiting{labels}"), waiting));
                out.push((format!("ratewise_queue_used_of_limit{labels}"), used));
            }
            for (dim, x) in ratewise_tower::QUEUE_DIMENSIONS
                .iter()
                .zip(l.used_of_each_limit)
            {
                out.push((
                    format!("ratewise_queue_admitted_share{{key=\"{key}\",class=\"{class}\",level=\"{level}\",dimension=\"{dim}\"}}"),
                    x,
                ));
            }
            for (q_name, v) in [("0.5", l.wait_p50), ("0.95", l.wait_p95)] {
                if let Some(v) = v {
                    out.push((
                        format!("ratewise_queue_wait_seconds{{key=\"{key}\",class=\"{class}\",level=\"{level}\",quantile=\"{q_name}\"}}"),
                        v.as_secs_f64(),
                    ));
                }
            }
        }
    }
}
