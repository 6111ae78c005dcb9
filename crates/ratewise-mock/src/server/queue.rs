//! DeepSeek's concurrency limit ([`CompatibleConfig::concurrency`]): per
//! key, at most N requests in flight (from admission to the end of the
//! answer); more wait in arrival order rather than being refused, as
//! DeepSeek documents.
//!
//! [`CompatibleConfig::concurrency`]: crate::CompatibleConfig::concurrency

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Every key's gate, and the most requests ever in flight on one key.
#[derive(Debug, Default)]
pub(super) struct Gates {
    keys: Mutex<HashMap<String, Arc<Gate>>>,
    peak: AtomicU64,
}

/// One key's slots.
#[derive(Debug)]
pub(super) struct Gate {
    slots: Arc<Semaphore>,
    in_flight: AtomicU64,
}

/// A request in flight; the slot is free again when it is dropped.
#[derive(Debug)]
pub(super) struct Slot {
    gate: Arc<Gate>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.gate.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What [`Gates::try_enter`] found.
pub(super) enum Entry {
    /// A slot was free.
    Entered(Slot),
    /// Every slot is taken: wait on this gate.
    Wait(Arc<Gate>),
    /// Too many keys to track another: no limit for this one.
    Untracked,
}

impl Gates {
    /// A slot of `key`'s gate (of `limit` slots) if one is free now.
    pub(super) fn try_enter(&self, key: &str, limit: u64, max_keys: usize) -> Entry {
        let gate = {
            let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
            match keys.get(key) {
                Some(g) => g.clone(),
                None if keys.len() >= max_keys => return Entry::Untracked,
                None => {
                    let n = limit.min(Semaphore::MAX_PERMITS as u64) as usize;
                    let g = Arc::new(Gate {
                        slots: Arc::new(Semaphore::new(n)),
                        in_flight: AtomicU64::new(0),
                    });
                    keys.insert(key.to_string(), g.clone());
                    g
                }
            }
        };
        match gate.slots.clone().try_acquire_owned() {
            Ok(permit) => Entry::Entered(self.admit(gate, permit)),
            Err(_) => Entry::Wait(gate),
        }
    }

    /// Waits for a slot of `gate` (in arrival order).
    pub(super) async fn enter(&self, gate: Arc<Gate>) -> Option<Slot> {
        let permit = gate.slots.clone().acquire_owned().await.ok()?;
        Some(self.admit(gate, permit))
    }

    fn admit(&self, gate: Arc<Gate>, permit: OwnedSemaphorePermit) -> Slot {
        let n = gate.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        self.peak.fetch_max(n, Ordering::AcqRel);
        Slot {
            gate,
            _permit: permit,
        }
    }

    /// The most requests one key ever had in flight at once.
    pub(super) fn peak(&self) -> u64 {
        self.peak.load(Ordering::Acquire)
    }
}
