//! The money-message corpus (`tests/corpus/self_set_limits.json`): provider
//! phrasings of self-set usage / spend limits, quotas and credit balances
//! (positive), and request errors and rate limits that merely mention a
//! limit (negative), each with its source.
//!
//! Every entry is run end to end — body built in the provider's envelope,
//! `classify_response`, `decide` — as a decision case: every positive stops
//! the key with the expected cause, every negative keeps its documented class
//! and is never money (a false positive stops a whole key until a human
//! resumes it).

use ratewise_core::case::Case;
use ratewise_core::classify::codes::{cause_of_error, ErrorFields};
use ratewise_core::classify::money_message::{self, LimitOwner};
use ratewise_core::{Cause, Provider};
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeSet;

const CORPUS: &str = include_str!("corpus/self_set_limits.json");

#[derive(Debug, Deserialize)]
struct Corpus {
    now: String,
    positive: Vec<Entry>,
    negative: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    id: String,
    provider: String,
    status: u16,
    error_type: Option<String>,
    code: Option<String>,
    message: String,
    #[serde(default)]
    headers: Vec<(String, String)>,
    now: Option<String>,
    /// Positives only: the owner the message names (`null`: none).
    #[serde(default)]
    names: Option<String>,
    expect: serde_json::Value,
    source: Vec<String>,
    #[allow(dead_code)]
    note: Option<String>,
}

impl Entry {
    fn provider(&self) -> Provider {
        Provider::from_word(&self.provider).unwrap_or_else(|| panic!("{}: provider", self.id))
    }

    /// The error body in the provider's envelope.
    fn body(&self) -> String {
        match self.provider() {
            Provider::Anthropic => {
                let mut error = json!({"type": self.error_type, "message": self.message});
                if let Some(code) = &self.code {
                    error["details"] = json!({ "error_code": code });
                }
                json!({"type": "error", "error": error, "request_id": "req_corpus"}).to_string()
            }
            Provider::Openai => json!({"error": {
                "message": self.message,
                "type": self.error_type,
                "param": null,
                "code": self.code,
            }})
            .to_string(),
            _ => panic!("{}: the corpus is of provider messages", self.id),
        }
    }

    fn case(&self, default_now: &str) -> Case {
        let case = json!({
            "name": self.id,
            "provider": self.provider,
            "now": self.now.as_deref().unwrap_or(default_now),
            "response": {"status": self.status, "headers": self.headers, "body": self.body()},
            "expect": self.expect,
        });
        Case::from_json(&case.to_string()).unwrap_or_else(|e| panic!("{}: {e}", self.id))
    }

    fn fields(&self, with_message: bool) -> ErrorFields<'_> {
        ErrorFields {
            error_type: self.error_type.as_deref(),
            code: self.code.as_deref(),
            message: with_message.then_some(self.message.as_str()),
        }
    }
}

fn corpus() -> Corpus {
    serde_json::from_str(CORPUS).expect("the corpus is valid JSON of the expected shape")
}

/// Runs one entry as a decision case over several jitter seeds; returns the
/// explanation's cause and notes, or why it failed.
fn run(e: &Entry, now: &str) -> Result<(Cause, Vec<String>), String> {
    let case = e.case(now);
    let mut last = None;
    for seed in 0..16 {
        let got = case
            .evaluate(&mut fastrand::Rng::with_seed(seed))
            .map_err(|err| format!("{}: {err}", e.id))?;
        case.expect
            .check(&got)
            .map_err(|why| format!("{} (seed {seed}): {}", e.id, why.join("; ")))?;
        last = Some((got.cause, got.notes));
    }
    last.ok_or_else(|| format!("{}: not run", e.id))
}

fn owner_word(o: Option<LimitOwner>) -> Option<&'static str> {
    o.map(LimitOwner::as_str)
}

#[test]
fn every_positive_stops_the_key_with_its_cause() {
    let c = corpus();
    let mut failures = Vec::new();
    for e in &c.positive {
        let (cause, notes) = match run(e, &c.now) {
            Ok(got) => got,
            Err(why) => {
                failures.push(why);
                continue;
            }
        };
        if !cause.is_money() {
            failures.push(format!("{}: {cause} is not money", e.id));
        }
        // The message alone says money, and names the owner the corpus says.
        match money_message::read(&e.message) {
            None => failures.push(format!("{}: the message rule does not read it", e.id)),
            Some(m) => {
                if owner_word(m.names) != e.names.as_deref() {
                    failures.push(format!(
                        "{}: names {:?}, corpus says {:?}",
                        e.id,
                        owner_word(m.names),
                        e.names
                    ));
                }
                // The explanation says what decided: the code where a code
                // says money, else the message.
                let coded =
                    cause_of_error(e.provider(), e.fields(false)).is_some_and(Cause::is_money);
                let want = if coded {
                    format!("body error code says {cause}")
                } else {
                    m.explain().to_owned()
                };
                if !notes.contains(&want) {
                    failures.push(format!("{}: no note {want:?} in {notes:?}", e.id));
                }
            }
        }
        // In-band stream errors use the same mapping.
        let in_band = cause_of_error(e.provider(), e.fields(true));
        if in_band != Some(cause) && e.status != 402 {
            failures.push(format!("{}: cause_of_error says {in_band:?}", e.id));
        }
    }
    assert!(failures.is_empty(), "positives:\n{}", failures.join("\n"));
}

#[test]
fn every_negative_keeps_its_class_and_is_never_money() {
    let c = corpus();
    let mut failures = Vec::new();
    for e in &c.negative {
        match run(e, &c.now) {
            Err(why) => failures.push(why),
            Ok((cause, _)) if cause.is_money() => {
                failures.push(format!("{}: {cause} would stop the key", e.id));
            }
            Ok(_) => {}
        }
        if let Some(m) = money_message::read(&e.message) {
            failures.push(format!("{}: the message rule reads {m:?}", e.id));
        }
        if let Some(cause) = cause_of_error(e.provider(), e.fields(true)).filter(|c| c.is_money()) {
            failures.push(format!("{}: cause_of_error says {cause}", e.id));
        }
    }
    assert!(failures.is_empty(), "negatives:\n{}", failures.join("\n"));
}

#[test]
fn the_corpus_covers_every_scope_and_money_cause_with_sources() {
    let c = corpus();
    assert!(c.positive.len() >= 15 && c.negative.len() >= 15);
    let mut ids = BTreeSet::new();
    for e in c.positive.iter().chain(&c.negative) {
        assert!(ids.insert(e.id.as_str()), "duplicate id {}", e.id);
        assert!(
            !e.source.is_empty() && e.source.iter().all(|s| !s.trim().is_empty()),
            "{}: every phrase has a source",
            e.id
        );
    }
    let names: BTreeSet<_> = c
        .positive
        .iter()
        .filter_map(|e| e.names.as_deref())
        .collect();
    for scope in ["organization", "workspace", "project"] {
        assert!(names.contains(scope), "no positive names the {scope}");
    }
    let causes: BTreeSet<_> = c
        .positive
        .iter()
        .filter_map(|e| e.expect["cause"].as_str())
        .collect();
    for cause in ["user_limit", "spend_cap", "billing"] {
        assert!(causes.contains(cause), "no positive is {cause}");
    }
    for p in ["anthropic", "openai"] {
        assert!(c.positive.iter().any(|e| e.provider == p));
        assert!(c.negative.iter().any(|e| e.provider == p));
    }
}

#[test]
fn positives_are_read_by_meaning_not_by_spelling() {
    for e in &corpus().positive {
        let want = money_message::read(&e.message);
        // Case, line breaks and punctuation between words do not matter.
        let shouted = e.message.to_uppercase();
        let wrapped = e.message.replace(' ', "\n   ");
        let dashed = e.message.replace(' ', " - ");
        for variant in [shouted, wrapped, dashed] {
            assert_eq!(money_message::read(&variant), want, "{}: {variant:?}", e.id);
        }
    }
}

#[test]
fn a_request_shape_word_vetoes_every_positive() {
    // Precision first: a message that also describes the request's size or a
    // rate is not read as money, whatever else it says.
    for e in &corpus().positive {
        for tail in [
            " Please reduce the prompt length.",
            " (tokens per minute)",
            " max_tokens: 8192 > 4096",
            " This is a rate limit.",
        ] {
            let m = format!("{}{tail}", e.message);
            assert_eq!(money_message::read(&m), None, "{}: {m:?}", e.id);
        }
    }
}
