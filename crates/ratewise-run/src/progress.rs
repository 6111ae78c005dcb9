//! What the run tells a person (a bar on a terminal) or a script (one JSON
//! object per second on stdout, then a summary).
//!
//! The ETA comes from the pacing model, not from the recent rate: the
//! tokens and requests still to send over the limits the layer paces with
//! (learned from the provider's headers or configured), the largest of
//! them — the binding one — is the time left.

use crate::queue::Rates;
use crate::store::Counts;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ratewise_core::admit::ScopeSnapshot;
use serde::Serialize;
use std::io::Write;
use std::time::Duration;

/// One progress report.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Jobs done.
    pub done: u64,
    /// Jobs in the store.
    pub total: u64,
    /// Failed (the request must change).
    pub failed: u64,
    /// Expired before a send.
    pub expired: u64,
    /// Held: sent, outcome unknown.
    pub held: u64,
    /// Stopped.
    pub stopped: u64,
    /// Sends in this run.
    pub sends: u64,
    /// Of them, answered 429.
    pub answered_429: u64,
    /// Input tokens the provider reported in the last minute.
    pub input_tokens_per_min: u64,
    /// Output tokens the provider reported in the last minute.
    pub output_tokens_per_min: u64,
    /// The limits paced with (per minute), per scope: `key/class` →
    /// `{requests, input_tokens, output_tokens, tokens}`.
    pub limits: serde_json::Value,
    /// The dimension the ETA is bound by (`requests`, `input_tokens`,
    /// `output_tokens`, `tokens`), when limits are known.
    pub binding: Option<&'static str>,
    /// Tokens charged to the budget.
    pub budget_spent: u64,
    /// Seconds left, from the pacing model; none before a limit is known.
    pub eta_s: Option<u64>,
    /// Seconds since the run began.
    pub elapsed_s: f64,
}

impl Status {
    /// The report of the queue's state.
    pub fn from_parts(
        counts: &Counts,
        sends: u64,
        answered_429: u64,
        spent: u64,
        rates: &Rates,
        snapshots: &[ScopeSnapshot],
        elapsed: Duration,
    ) -> Status {
        let (i, o) = rates.last_minute();
        let mut limits = serde_json::Map::new();
        // The tightest known limit of each dimension over the scopes.
        let mut tightest: [Option<u64>; 4] = [None; 4];
        for s in snapshots {
            let l = s.limits;
            limits.insert(
                format!("{}/{}", s.key, s.class),
                serde_json::json!({
                    "requests": l.requests, "input_tokens": l.input_tokens,
                    "output_tokens": l.output_tokens, "tokens": l.tokens,
                }),
            );
            for (slot, v) in
                tightest
                    .iter_mut()
                    .zip([l.requests, l.input_tokens, l.output_tokens, l.tokens])
            {
                if let Some(v) = v.filter(|v| *v > 0) {
                    *slot = Some(slot.map_or(v, |s| s.min(v)));
                }
            }
        }
        let left_jobs = counts.pending + counts.sending;
        // Output: the caps scaled by how much of them answers used so far.
        let out_left = if rates.output_capped > 0 {
            (counts.remaining_output as f64 * rates.output_used as f64 / rates.output_capped as f64)
                as u64
        } else {
            counts.remaining_output
        };
        let needs = [
            ("requests", left_jobs),
            ("input_tokens", counts.remaining_input),
            ("output_tokens", out_left),
            ("tokens", counts.remaining_input + out_left),
        ];
        let mut eta: Option<(f64, &'static str)> = None;
        for ((name, need), limit) in needs.into_iter().zip(tightest) {
            if let Some(per_min) = limit {
                let minutes = need as f64 / per_min as f64;
                if eta.is_none_or(|(m, _)| minutes > m) {
                    eta = Some((minutes, name));
                }
            }
        }
        Status {
            done: counts.done,
            total: counts.total,
            failed: counts.failed,
            expired: counts.expired,
            held: counts.held,
            stopped: counts.stopped,
            sends,
            answered_429,
            input_tokens_per_min: i,
            output_tokens_per_min: o,
            limits: serde_json::Value::Object(limits),
            binding: eta.map(|(_, n)| n),
            budget_spent: spent,
            eta_s: if left_jobs == 0 {
                Some(0)
            } else {
                eta.map(|(m, _)| (m * 60.0).ceil() as u64)
            },
            elapsed_s: (elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
        }
    }
}

/// Where progress goes (`--progress`).
pub enum Progress {
    /// Nothing.
    Off,
    /// One JSON object per line on stdout.
    Json,
    /// indicatif's bar on stderr.
    Bar(ProgressBar),
}

impl Progress {
    /// `auto`: a bar when stderr is a terminal, else nothing.
    pub fn auto() -> Progress {
        let target = ProgressDrawTarget::stderr();
        if target.is_hidden() {
            return Progress::Off;
        }
        let bar = ProgressBar::with_draw_target(Some(0), target);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} done  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Progress::Bar(bar)
    }

    /// A report.
    pub fn tick(&mut self, s: &Status) {
        match self {
            Progress::Off => {}
            Progress::Json => {
                let mut v = serde_json::to_value(s).unwrap_or_default();
                v["event"] = "progress".into();
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{v}");
                let _ = out.flush();
            }
            Progress::Bar(bar) => {
                bar.set_length(s.total);
                bar.set_position(s.done + s.failed + s.expired + s.held + s.stopped);
                bar.set_message(format!(
                    "{} failed, {} held, {} sends, {} × 429, eta {}",
                    s.failed,
                    s.held,
                    s.sends,
                    s.answered_429,
                    s.eta_s.map_or("?".into(), |e| format!("{e}s")),
                ));
            }
        }
    }

    /// The last report: `summary` extended with the exit code and more.
    pub fn finish(&mut self, summary: serde_json::Value) {
        match self {
            Progress::Off => {}
            Progress::Json => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{summary}");
                let _ = out.flush();
            }
            Progress::Bar(bar) => bar.finish_and_clear(),
        }
    }
}
