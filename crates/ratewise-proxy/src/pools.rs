//! Pools (`[[pools]]` in `--config`): several upstreams and keys used as
//! one logical key, selected by the key a caller presents.
//!
//! ```toml
//! [[pools]]
//! name = "claude"
//! caller_key = "sk-team-claude"        # what the SDK sends as its API key
//! provider = "anthropic"
//! [[pools.members]]
//! upstream = "https://api.anthropic.com"
//! key_env = "ANTHROPIC_KEY_MAIN"       # the real key, read from the environment
//! weight = 70
//! [[pools.members]]
//! upstream = "https://api.anthropic.com"
//! key_env = "ANTHROPIC_KEY_BACKUP"
//! weight = 30
//! ```
//!
//! A caller whose key — read as [`caller_key`](crate::keys::caller_key)
//! reads it for the path's provider — is a pool's `caller_key` goes
//! through that pool's layer ([`ratewise_tower::pool`]): each attempt to
//! the member that can take it soonest, rewritten for it (its URL, its
//! key, its model name). The caller's key is never sent upstream and is
//! never paced under: the members' keys are, each under its own
//! fingerprint. A key that selects no pool goes to the upstreams as
//! before; with no upstream configured, it is answered 401
//! (`authentication_error`) in the provider's shape.
//!
//! Each pool has its own layer (its own waiting queues) sharing the
//! store, clock and journal of the others, and one client that reaches
//! every member (HTTPS with Mozilla's roots, or HTTP). Its jobs are
//! named `pool:NAME` in the journal: the member of every attempt is in
//! the attempt's record. A member's stop is kept and journaled under its
//! fingerprint with the answer's evidence (see
//! [`metrics::Hook`](crate::metrics::Hook)), so a restart holds it and
//! `/resume?key=FP` lifts it, as any key's.

use crate::answer::StopAnswers;
use crate::upstream::Marking;
use ratewise_tower::pool::PoolStatus;
use ratewise_tower::RetryLayer;

/// One pool as the proxy serves it.
pub struct PoolRoute {
    /// Its name.
    pub name: String,
    /// The fingerprint of its callers' key.
    pub caller: String,
    /// Its layer: the configuration's, with the pool.
    pub layer: RetryLayer,
    /// The client its members are reached with.
    pub client: Marking,
    /// Its callers as one tenant of the key's queue.
    pub workload: crate::priority::PoolWorkload,
}

impl PoolRoute {
    /// How its jobs are named where a key's fingerprint would be (the
    /// journal's attempt lines, a stop's kept answer): `pool:NAME`. Never
    /// a key of the store: nothing is paced under it.
    pub fn label(&self) -> String {
        format!("pool:{}", self.name)
    }
}

/// The pool whose callers present the key of fingerprint `fp`.
pub fn find(pools: &[PoolRoute], fp: &str) -> Option<usize> {
    pools.iter().position(|p| p.caller == fp)
}

/// Every pool's members as they are now, by pool name.
pub async fn statuses(pools: &[PoolRoute]) -> Vec<(String, PoolStatus)> {
    let mut out = Vec::with_capacity(pools.len());
    for p in pools {
        if let Some(s) = p.layer.pool_status().await {
            out.push((p.name.clone(), s));
        }
    }
    out
}

/// `/status`'s `pools`: each pool with each member by upstream and key
/// fingerprint — provider, weight, sends, share of the pool's recent
/// sends, its stop with the answer that stopped it, how long its upstream
/// is still held for an overload. A stop's `since_ms` — and, for a stop
/// read back from the journal after a restart, the answer's status, type,
/// code and request id — come from the evidence the proxy keeps
/// (`stops`).
pub fn status_json(pools: &[(String, PoolStatus)], stops: &StopAnswers) -> serde_json::Value {
    serde_json::Value::Array(
        pools
            .iter()
            .map(|(name, s)| {
                let members: Vec<serde_json::Value> = s
                    .members
                    .iter()
                    .map(|m| {
                        let mut v = serde_json::to_value(m).unwrap_or_default();
                        // The member's stop is the store's; the evidence
                        // kept here is attached when it is of that stop.
                        let kept = stops.get(&m.key).filter(|k| {
                            m.stopped
                                .as_ref()
                                .is_some_and(|s| s.cause == k.cause.as_str())
                        });
                        if let (Some(stop), Some(kept)) =
                            (v.get_mut("stopped").filter(|x| x.is_object()), kept)
                        {
                            stop["since_ms"] = crate::evidence::ms(kept.since).into();
                            if let (true, Some(a)) = (stop["status"].is_null(), &kept.answer) {
                                stop["status"] = a.status.into();
                                stop["error_type"] = a.error_type.clone().into();
                                stop["error_code"] = a.code.clone().into();
                                stop["request_id"] = a.request_id.clone().into();
                            }
                        }
                        v
                    })
                    .collect();
                serde_json::json!({
                    "name": name,
                    "members": members,
                })
            })
            .collect(),
    )
}

/// `/metrics`' series for the pools' members, labelled by pool, member
/// (its key's fingerprint) and upstream.
pub fn gauges(pools: &[(String, PoolStatus)], out: &mut Vec<(String, f64)>) {
    use crate::metrics::label;
    for (name, s) in pools {
        for m in &s.members {
            let labels = format!(
                "{{pool=\"{}\",member=\"{}\",upstream=\"{}\"}}",
                label(name),
                label(&m.key),
                label(&m.upstream)
            );
            out.push((
                format!("ratewise_pool_member_sends_total{labels}"),
                m.sends as f64,
            ));
            out.push((format!("ratewise_pool_member_share{labels}"), m.share));
            out.push((
                format!("ratewise_pool_member_weight{labels}"),
                f64::from(m.weight),
            ));
            out.push((
                format!("ratewise_pool_member_stopped{labels}"),
                f64::from(u8::from(m.stopped.is_some())),
            ));
            out.push((
                format!("ratewise_pool_member_overload_held_seconds{labels}"),
                m.overload_held_ms.map_or(0.0, |ms| ms as f64 / 1000.0),
            ));
        }
    }
}
