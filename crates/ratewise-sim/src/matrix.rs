//! The matrix of provider shapes (issue #47): the axes a provider differs
//! on, a covering set of cells over them, and each cell held to its
//! targets against the oracle.
//!
//! Every shape a bench runs passes; the next one, one axis away, may not.
//! So the simulator runs a **covering set** of cells: every pair of axis
//! values appears in at least one cell ([`standard`], built greedily from
//! a seed), and a seeded sample of the whole cross product ([`sample`]).
//! A cell is a [`Scenario`] like any other: the same cell runs black-box
//! through the proxy against the mock, whose configuration the scenario
//! maps to.
//!
//! The axes the simulator models today ([`Axis`]): dialect, what the
//! answers say (limits stated exactly, rounded as documented, biased, or
//! nothing but the 429 and its hint — `retry-after` or the message),
//! which limit binds, bucket capacity, answer latency, `max_tokens`
//! against the output bucket, others on the key, the callers' deadlines.
//! Not yet: Gemini's dialect, output charged only at the end, a fixed
//! per-minute window, a limit that moves mid-run (the mock has none of
//! them in the model the simulator runs).
//!
//! Targets ([`Cell::misses`]): every job done (a `give_up` while the
//! deadline could still be met is a job not done, and so is an answer
//! after the deadline); where limits are
//! stated, goodput ≥ 0.9 × the oracle's, ≤ 1 % of sends answered 429, ≤
//! 1.02 sends per done job; where nothing is stated, ≥ 0.85 ×, ≤ 3 %, ≤
//! 1.04; replicas with no shared store, ≤ 3 % answered 429. A cell is
//! excused where the oracle itself misses (it does not do every job): the
//! report counts them.

use crate::metrics::Report;
use crate::scenario::Scenario;
use crate::strategy::{simulate, Strategy};

/// One axis of the matrix and its values, by name.
#[derive(Debug, Clone, Copy)]
pub struct Axis {
    /// Its name, as a cell's label shows it.
    pub name: &'static str,
    /// Its values, as a cell's label shows them.
    pub values: &'static [&'static str],
}

/// The axes, in the order a cell's label lists them.
pub const AXES: [Axis; 8] = [
    Axis {
        name: "dialect",
        values: &["anthropic", "openai"],
    },
    Axis {
        name: "says",
        values: &["exact", "documented", "biased", "retry-after", "message"],
    },
    Axis {
        name: "binds",
        values: &["requests", "input", "output"],
    },
    Axis {
        name: "bucket",
        values: &["1s", "2s", "10s", "60s"],
    },
    Axis {
        name: "latency",
        values: &["0.2s", "2s", "10s"],
    },
    Axis {
        name: "max_tokens",
        values: &["10%", "50%", "120%"],
    },
    Axis {
        name: "others",
        values: &["none", "another-30%", "3-replicas"],
    },
    Axis {
        name: "deadline",
        values: &["none", "600s", "60s"],
    },
];

/// A cell: one value per axis (indices into [`AXES`]' values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cell(pub [u8; 8]);

/// Jobs per cell: enough for a minute or more of the binding limit.
pub const JOBS: u64 = 120;

impl Cell {
    fn value(&self, axis: usize) -> &'static str {
        AXES[axis].values[self.0[axis] as usize]
    }

    /// `dialect=anthropic says=exact ...`.
    pub fn label(&self) -> String {
        (0..AXES.len())
            .map(|a| format!("{}={}", AXES[a].name, self.value(a)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The cell a label names (`dialect=anthropic says=exact ...`, as
    /// [`label`](Self::label) writes it): every axis once, by name, in any
    /// order.
    ///
    /// ```
    /// use ratewise_sim::matrix::Cell;
    /// let c = Cell([1, 2, 0, 3, 1, 2, 0, 1]);
    /// assert_eq!(Cell::parse(&c.label()), Ok(c));
    /// assert!(Cell::parse("dialect=gemini").is_err());
    /// ```
    pub fn parse(label: &str) -> Result<Cell, String> {
        let mut v: [Option<u8>; 8] = [None; 8];
        for part in label.split_whitespace() {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: expected axis=value"))?;
            let a = AXES
                .iter()
                .position(|x| x.name == name)
                .ok_or_else(|| format!("{name:?}: no such axis ({})", axis_names()))?;
            let i = AXES[a]
                .values
                .iter()
                .position(|x| *x == value)
                .ok_or_else(|| format!("{name}={value}: one of {}", AXES[a].values.join(", ")))?;
            if v[a].replace(i as u8).is_some() {
                return Err(format!("{name} given twice"));
            }
        }
        let mut out = [0u8; 8];
        for (a, x) in v.iter().enumerate() {
            out[a] = x.ok_or_else(|| {
                format!("{} missing (every axis: {})", AXES[a].name, axis_names())
            })?;
        }
        Ok(Cell(out))
    }

    /// Whether the provider states its limits in this cell.
    pub fn stated(&self) -> bool {
        !matches!(self.value(1), "retry-after" | "message")
    }

    /// The cell as a scenario: limits set so the named one binds (the
    /// others ten times what the workload needs), the output bucket sized
    /// so `max_tokens` is the named share of it, and the rest mapped to
    /// the scenario's fields. OpenAI's "output" is its combined tokens
    /// per minute (input plus `max_tokens` at admission: it has no output
    /// limit of its own).
    pub fn scenario(&self, seed: u64) -> Scenario {
        let openai = self.value(0) == "openai";
        let cap: f64 = match self.value(3) {
            "1s" => 1.0,
            "2s" => 2.0,
            "10s" => 10.0,
            _ => 60.0,
        };
        // About 60 jobs a minute on the binding limit.
        let per_min = 60u64;
        let (input_avg, output_avg) = (850u64, 225u64);
        let ratio = match self.value(5) {
            "10%" => 0.1,
            "50%" => 0.5,
            _ => 1.2,
        };
        let binds = self.value(2);
        // The output (or combined) bucket's rate: binding, or sized so a
        // `max_tokens` of 1,024 is the named share of its capacity (never
        // under ten times what the workload needs, unless it binds).
        let out_rate = if binds == "output" || (openai && binds == "input") {
            // OpenAI's combined limit binds for either: input plus a
            // `max_tokens` of about 512 a job.
            per_min * if openai { input_avg + 512 } else { output_avg }
        } else {
            let sized = (1024.0 / ratio * 60.0 / cap) as u64;
            let need = per_min * 10 * if openai { input_avg + 1024 } else { output_avg };
            sized.max(need)
        };
        let out_capacity = out_rate as f64 * cap / 60.0;
        let max_tokens = ((ratio * out_capacity) as u64).clamp(16, 8192);
        let rpm = if binds == "requests" {
            per_min
        } else {
            per_min * 10
        };
        let itpm = if binds == "input" {
            per_min * input_avg
        } else {
            per_min * input_avg * 10
        };
        // The named latency is a typical answer's (225 output tokens);
        // the slowest, a whole `max_tokens`, is what a caller budgets for.
        let (base_ms, per_token) = match self.value(4) {
            "0.2s" => (150u64, 0.2),
            "2s" => (1_100, 4.0),
            _ => (8_900, 5.0),
        };
        let silent = match self.value(1) {
            "retry-after" => "retry_after",
            "message" => "message",
            _ => "off",
        };
        let limits = if openai {
            serde_json::json!({"requests_per_min": rpm, "tokens_per_min": out_rate, "capacity_seconds": cap})
        } else {
            serde_json::json!({"requests_per_min": rpm, "input_tokens_per_min": itpm, "output_tokens_per_min": out_rate, "capacity_seconds": cap})
        };
        // A caller with a deadline sends at 90 % of the binding limit (a
        // burst at a 60 s deadline is a queue no client can empty in
        // time); without one, everything at once.
        let arrival = match self.value(7) {
            "none" => serde_json::json!("burst"),
            _ => serde_json::json!({"per_sec": per_min as f64 * 0.9 / 60.0}),
        };
        let mut s = serde_json::json!({
            "name": self.label(),
            "provider": self.value(0),
            "seed": seed,
            "limits": limits,
            "jobs": {"count": JOBS, "arrival": arrival, "input_tokens": [200, 1500],
                     "max_tokens": max_tokens, "output_tokens": [50, 400]},
            "faults": {"count_rejected": openai},
            "silent": silent,
            "latency": {"base_ms": base_ms, "per_output_token_ms": per_token},
            "workers": 16,
            "warm": false,
        });
        match self.value(1) {
            "exact" => s["remaining_rounding"] = "exact".into(),
            "biased" => s["bias"] = serde_json::json!({"remaining_tokens_high": 400}),
            _ => {}
        }
        match self.value(6) {
            "another-30%" => {
                let bias = s["bias"].as_object().cloned().unwrap_or_default();
                let mut bias = serde_json::Value::Object(bias);
                bias["other_client_share"] = 0.3.into();
                s["bias"] = bias;
            }
            "3-replicas" => s["replicas"] = 3.into(),
            _ => {}
        }
        match self.value(7) {
            "600s" => s["deadline_ms"] = 600_000.into(),
            "60s" => s["deadline_ms"] = 60_000.into(),
            _ => {}
        }
        Scenario::from_json(&s.to_string()).expect("every cell is a valid scenario")
    }

    /// What this cell's ratewise run misses against its oracle's (empty:
    /// every target held).
    pub fn misses(&self, rw: &Report, oracle: &Report) -> Vec<String> {
        let stated = self.stated();
        let replicas = self.value(6) == "3-replicas";
        let (share, max_429, spj) = if stated && !replicas {
            (0.9, 0.01, 1.02)
        } else {
            (0.85, 0.03, 1.04)
        };
        let mut miss = Vec::new();
        // An answer after the caller's deadline reached nobody.
        let done = rw.jobs_done.saturating_sub(rw.jobs_late);
        if done < rw.jobs_total {
            miss.push(format!(
                "{} of {} jobs not done{}",
                rw.jobs_total - done,
                rw.jobs_total,
                if rw.jobs_late > 0 {
                    format!(" ({} answered after the deadline)", rw.jobs_late)
                } else {
                    String::new()
                }
            ));
        }
        let of = of_oracle(rw, oracle);
        if of < share {
            miss.push(format!("goodput {of:.3} of the oracle's < {share}"));
        }
        let s429 = share_429(rw);
        if s429 > max_429 {
            miss.push(format!(
                "{:.1} % answered 429 > {}",
                s429 * 100.0,
                max_429 * 100.0
            ));
        }
        if rw.jobs_done > 0 && rw.sends_per_done_job > spj * rw.min_sends_per_done_job {
            miss.push(format!(
                "{:.3} sends per done job > {spj}",
                rw.sends_per_done_job
            ));
        }
        miss
    }
}

fn of_oracle(rw: &Report, oracle: &Report) -> f64 {
    if oracle.goodput_ratio > 0.0 {
        rw.goodput_ratio / oracle.goodput_ratio
    } else {
        0.0
    }
}

fn share_429(r: &Report) -> f64 {
    if r.sends == 0 {
        0.0
    } else {
        r.sends_429 as f64 / r.sends as f64
    }
}

fn axis_names() -> String {
    AXES.iter().map(|a| a.name).collect::<Vec<_>>().join(", ")
}

/// Every pair of values of two axes.
fn pairs_of(c: &Cell) -> impl Iterator<Item = (usize, u8, usize, u8)> + '_ {
    (0..AXES.len()).flat_map(move |a| (a + 1..AXES.len()).map(move |b| (a, c.0[a], b, c.0[b])))
}

/// A covering set: every pair of axis values in at least one cell, built
/// greedily (each new cell the one of 64 random candidates that covers
/// the most pairs not yet covered), reproducible from `seed`.
pub fn standard(seed: u64) -> Vec<Cell> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut uncovered: std::collections::HashSet<_> = all_pairs().into_iter().collect();
    let mut cells = Vec::new();
    while !uncovered.is_empty() {
        // Start from an uncovered pair, so every round covers one at least.
        let &(a, va, b, vb) = uncovered.iter().min().expect("not empty");
        let mut best: Option<(usize, Cell)> = None;
        for _ in 0..64 {
            let mut c = random_cell(&mut rng);
            c.0[a] = va;
            c.0[b] = vb;
            let n = pairs_of(&c).filter(|p| uncovered.contains(p)).count();
            if best.is_none_or(|(m, _)| n > m) {
                best = Some((n, c));
            }
        }
        let (_, c) = best.expect("candidates");
        for p in pairs_of(&c).collect::<Vec<_>>() {
            uncovered.remove(&p);
        }
        cells.push(c);
    }
    cells
}

/// Every pair of values of two different axes.
fn all_pairs() -> Vec<(usize, u8, usize, u8)> {
    let mut out = Vec::new();
    for (a, ax) in AXES.iter().enumerate() {
        for (b, bx) in AXES.iter().enumerate().skip(a + 1) {
            for va in 0..ax.values.len() as u8 {
                for vb in 0..bx.values.len() as u8 {
                    out.push((a, va, b, vb));
                }
            }
        }
    }
    out
}

fn random_cell(rng: &mut fastrand::Rng) -> Cell {
    let mut v = [0u8; 8];
    for (a, x) in v.iter_mut().enumerate() {
        *x = rng.u8(..AXES[a].values.len() as u8);
    }
    Cell(v)
}

/// How many cells the whole cross product has.
pub fn cross_product_size() -> usize {
    AXES.iter().map(|a| a.values.len()).product()
}

/// `n` cells drawn from the whole cross product with `seed`.
pub fn sample(n: usize, seed: u64) -> Vec<Cell> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..n).map(|_| random_cell(&mut rng)).collect()
}

/// One cell's run: ratewise's report, the oracle's, and what missed.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The cell.
    pub cell: Cell,
    /// ratewise's run.
    pub ratewise: Report,
    /// The oracle's run.
    pub oracle: Report,
    /// Targets missed (empty: held).
    pub misses: Vec<String>,
    /// The oracle itself does not do every job: the cell is excused.
    pub excused: bool,
}

impl Outcome {
    /// ratewise's goodput against the oracle's.
    pub fn of_oracle(&self) -> f64 {
        of_oracle(&self.ratewise, &self.oracle)
    }

    /// Share of ratewise's sends answered 429.
    pub fn share_429(&self) -> f64 {
        share_429(&self.ratewise)
    }
}

/// Runs `cells` (each with the scenario seed `seed`), worst first: cells
/// missing a target before those that hold, then by goodput against the
/// oracle.
pub fn run(cells: &[Cell], seed: u64, progress: &mut dyn FnMut(usize, usize)) -> Vec<Outcome> {
    let mut out: Vec<Outcome> = Vec::with_capacity(cells.len());
    for (i, c) in cells.iter().enumerate() {
        let s = c.scenario(seed);
        let ratewise = simulate(&s, Strategy::Ratewise, &mut |_, _| {});
        let oracle = simulate(&s, Strategy::Oracle, &mut |_, _| {});
        let misses = c.misses(&ratewise, &oracle);
        let excused = oracle.jobs_done.saturating_sub(oracle.jobs_late) < oracle.jobs_total;
        out.push(Outcome {
            cell: *c,
            ratewise,
            oracle,
            misses,
            excused,
        });
        progress(i + 1, cells.len());
    }
    out.sort_by(|a, b| {
        let held = |o: &Outcome| o.misses.is_empty() || o.excused;
        held(a)
            .cmp(&held(b))
            .then(a.of_oracle().total_cmp(&b.of_oracle()))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_set_covers_every_pair_and_is_far_smaller_than_the_product() {
        let cells = standard(1);
        let mut seen = std::collections::HashSet::new();
        for c in &cells {
            seen.extend(pairs_of(c));
        }
        assert_eq!(seen.len(), all_pairs().len());
        assert!(cells.len() < 40, "{}", cells.len());
        assert!(cross_product_size() > 10 * cells.len());
        // Reproducible from its seed.
        assert_eq!(standard(1), cells);
    }

    #[test]
    fn every_cell_is_a_valid_scenario_whose_named_limit_binds() {
        for c in standard(3) {
            let s = c.scenario(1);
            assert!(s.validate().is_ok(), "{}", c.label());
            let binds = c.value(2);
            let openai = c.value(0) == "openai";
            let l = s.limits;
            match binds {
                "requests" => assert_eq!(l.requests_per_min, Some(60)),
                "input" if !openai => assert_eq!(l.input_tokens_per_min, Some(51_000)),
                _ => {}
            }
        }
    }

    #[test]
    fn a_cell_missing_its_targets_says_which() {
        let c = Cell([0; 8]);
        let s = c.scenario(1);
        let o = simulate(&s, Strategy::Oracle, &mut |_, _| {});
        let mut rw = o.clone();
        rw.jobs_done -= 1;
        rw.sends_429 = rw.sends / 10;
        let m = c.misses(&rw, &o);
        assert!(m.iter().any(|x| x.contains("not done")), "{m:?}");
        assert!(m.iter().any(|x| x.contains("answered 429")), "{m:?}");
        assert!(c.misses(&o, &o).is_empty());
    }
}
