//! What a pooled layer shows of its members: share, sends, stop and its
//! evidence, overload hold.

use super::driven::PoolShared;
use super::MemberStopped;
use crate::State;
use ratewise_core::{Now, Provider};
use serde::Serialize;
use std::sync::atomic::Ordering;

/// A pooled layer's members as they are now ([`RetryLayer::pool_status`](crate::RetryLayer::pool_status)).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct PoolStatus {
    /// Each member, in the order they were added.
    pub members: Vec<MemberStatus>,
}

/// One member as it is now. Names its key by fingerprint only.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct MemberStatus {
    /// Its upstream (host and port, or a route's own name).
    pub upstream: String,
    /// Its key's fingerprint.
    pub key: String,
    /// How its answers are read.
    pub provider: &'static str,
    /// Its weight.
    pub weight: u32,
    /// Sends made to it since the layer was made.
    pub sends: u64,
    /// Its part of the pool's recent sends (0 to 1; 0 before any send).
    pub share: f64,
    /// When its key is stopped: why, with the answer that stopped it when
    /// one was seen.
    pub stopped: Option<StopStatus>,
    /// Milliseconds its upstream is still held for an overload.
    pub overload_held_ms: Option<u64>,
}

/// A member's stop as a status page shows it.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct StopStatus {
    /// What stopped it (`spend_cap`, `billing`, `authentication`, ...).
    pub cause: &'static str,
    /// The answer's status, when an answer stopped it.
    pub status: Option<u16>,
    /// The answer's error type.
    pub error_type: Option<String>,
    /// The answer's error code.
    pub error_code: Option<String>,
    /// The answer's request id.
    pub request_id: Option<String>,
}

impl StopStatus {
    fn of(e: &MemberStopped) -> Self {
        StopStatus {
            cause: e.cause.as_str(),
            status: e.status,
            error_type: e.error_type.clone(),
            error_code: e.error_code.clone(),
            request_id: e.request_id.clone(),
        }
    }
}

impl PoolStatus {
    pub(crate) async fn of(shared: &PoolShared, state: &dyn State, now: Now) -> PoolStatus {
        let model = shared
            .last_model
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let ids: Vec<_> = shared.core().ids().collect();
        let mut members = Vec::with_capacity(shared.members.len());
        for (i, (m, id)) in shared.members.iter().zip(ids).enumerate() {
            let core = &m.member;
            let target = state.target(&core.key, &model).await;
            let stop = state
                .snapshot(target.scope, now)
                .await
                .and_then(|s| s.stopped);
            let (share, evidence, held) = {
                let pool = shared.core();
                let shares = pool.shares();
                let share = match shares.total() {
                    0 => 0.0,
                    t => shares.of(id) as f64 / t as f64,
                };
                let evidence = pool.stop_evidence(id).cloned();
                let held = pool.overload_held(&core.upstream, now.instant);
                (share, evidence, held)
            };
            let stopped = stop.map(|s| match evidence.filter(|e| e.cause == s.cause) {
                Some(e) => StopStatus::of(&e),
                None => StopStatus {
                    cause: s.cause.as_str(),
                    status: None,
                    error_type: None,
                    error_code: None,
                    request_id: None,
                },
            });
            members.push(MemberStatus {
                upstream: core.upstream.clone(),
                key: core.key.clone(),
                provider: Provider::as_str(core.provider),
                weight: core.weight,
                sends: shared.sends[i].load(Ordering::Relaxed),
                share,
                stopped,
                overload_held_ms: held.map(|h| (h - now.instant).as_millis() as u64),
            });
        }
        PoolStatus { members }
    }
}
