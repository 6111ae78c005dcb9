//! Shared by the agreement tests (`real.rs`, `shipped_real.rs`).

use ratewise_real::agree::{self, Check};

/// True when every compared figure agrees but those named in `except`,
/// which the calling test bounds on its own (and names why).
pub fn agrees_but_for(checks: &[Check], except: &[&str]) -> bool {
    let judged: Vec<Check> = checks
        .iter()
        .filter(|c| !except.contains(&c.figure))
        .cloned()
        .collect();
    agree::agrees(&judged)
}
