//! Finding a batch again after its create call went unanswered (the
//! process died between the call and the store's write, or the
//! connection broke): never a second batch for the same jobs.
//!
//! * OpenAI keeps the `metadata` ratewise set on the batch
//!   (`{"ratewise_intent": nonce}`; "Set of 16 key-value pairs that can be
//!   attached to an object",
//!   <https://platform.openai.com/docs/api-reference/batch/create>): the
//!   batch whose metadata names the intent's nonce is the one.
//! * Anthropic batches carry no metadata
//!   (<https://docs.anthropic.com/en/api/creating-message-batches>): a
//!   candidate is a batch not known to the store, created within the
//!   intent's window (from the intent, less a clock skew, to the create
//!   call's timeout after it, plus the skew), with the intent's request
//!   count. One candidate is the batch; two or more, or a listing that
//!   could not reach back past the window, leave the jobs held as
//!   unknown; none, with the window fully listed, means no batch was
//!   created.

use super::api::{Api, ApiError, Remote};
use crate::input::Shape;
use crate::store::BatchRow;
use std::collections::HashSet;
use std::time::Duration;

/// Most listing pages read looking for one intent (100 batches each).
pub const MAX_PAGES: usize = 50;

/// What a search found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The batch.
    One(Remote),
    /// No batch was created for the intent.
    None,
    /// More than one batch could be it: its jobs are held as unknown.
    Ambiguous(Vec<String>),
    /// The listing could not be read far enough to rule batches out.
    Unsure(String),
}

/// The window in which an intent's batch was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Clocks may differ this much (ratewise's and the provider's).
    pub skew: Duration,
    /// The create call's longest run.
    pub call: Duration,
}

impl Window {
    /// Earliest and latest creation times (ms since the epoch) of the
    /// batch of an intent recorded at `intent_ms`.
    pub fn bounds(&self, intent_ms: i64) -> (i64, i64) {
        let skew = self.skew.as_millis() as i64;
        let call = self.call.as_millis() as i64;
        (
            intent_ms.saturating_sub(skew),
            intent_ms.saturating_add(call).saturating_add(skew),
        )
    }
}

/// The candidates among `listed` for the intent `row` (pure: see the
/// module). `known` are batch ids the store already holds (never a
/// candidate); `complete` says the listing reached back past the window.
pub fn match_intent(
    shape: Shape,
    row: &BatchRow,
    listed: &[Remote],
    known: &HashSet<String>,
    window: Window,
    complete: bool,
) -> Found {
    let candidates: Vec<&Remote> = match shape {
        Shape::OpenAi => listed
            .iter()
            .filter(|b| b.intent.as_deref() == Some(row.nonce.as_str()))
            .collect(),
        Shape::Anthropic => {
            let (from, to) = window.bounds(row.intent_ms);
            listed
                .iter()
                .filter(|b| !known.contains(&b.id))
                .filter(|b| b.counts.total == row.jobs)
                .filter(|b| b.created_ms.is_none_or(|t| (from..=to).contains(&t)))
                .collect()
        }
    };
    match candidates.as_slice() {
        [one] => Found::One((*one).clone()),
        [] if complete => Found::None,
        [] => Found::Unsure(format!(
            "the batch listing could not be read back past the intent ({MAX_PAGES} pages)"
        )),
        many => Found::Ambiguous(many.iter().map(|b| b.id.clone()).collect()),
    }
}

/// Lists the key's batches back past the intent's window and matches
/// them ([`match_intent`]).
pub async fn find(
    api: &Api,
    row: &BatchRow,
    known: &HashSet<String>,
    window: Window,
) -> Result<Found, ApiError> {
    let (from, _) = window.bounds(row.intent_ms);
    let mut listed = Vec::new();
    let mut after: Option<String> = None;
    let mut complete = false;
    for _ in 0..MAX_PAGES {
        let page = api.list(after.as_deref()).await?;
        let past = page
            .data
            .iter()
            .any(|b| b.created_ms.is_some_and(|t| t < from));
        listed.extend(page.data);
        if past || !page.has_more {
            complete = true;
            break;
        }
        match page.last_id {
            Some(id) => after = Some(id),
            None => break,
        }
    }
    Ok(match_intent(
        api.shape(),
        row,
        &listed,
        known,
        window,
        complete,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::api::{Phase, RemoteCounts};

    fn remote(id: &str, created_ms: i64, total: u64, intent: Option<&str>) -> Remote {
        Remote {
            id: id.into(),
            status: "in_progress".into(),
            phase: Phase::Running,
            counts: RemoteCounts {
                total,
                processing: total,
                ..RemoteCounts::default()
            },
            created_ms: Some(created_ms),
            intent: intent.map(str::to_owned),
            output_file_id: None,
            error_file_id: None,
            errors: None,
        }
    }

    fn row(intent_ms: i64, jobs: u64) -> BatchRow {
        BatchRow {
            nonce: "n1".into(),
            batch_id: None,
            shape: "anthropic".into(),
            model: None,
            endpoint: "/v1/messages".into(),
            state: "intent".into(),
            intent_ms,
            jobs,
            bytes: 0,
            cancel_ms: None,
        }
    }

    const W: Window = Window {
        skew: Duration::from_secs(60),
        call: Duration::from_secs(120),
    };

    #[test]
    fn openai_matches_the_nonce_only() {
        let listed = [
            remote("batch_a", 1_000, 3, Some("other")),
            remote("batch_b", 1_000, 9, Some("n1")),
        ];
        let f = match_intent(
            Shape::OpenAi,
            &row(1_000, 3),
            &listed,
            &HashSet::new(),
            W,
            true,
        );
        assert_eq!(f, Found::One(listed[1].clone()));
        let f = match_intent(
            Shape::OpenAi,
            &row(1_000, 3),
            &listed[..1],
            &HashSet::new(),
            W,
            true,
        );
        assert_eq!(f, Found::None);
    }

    #[test]
    fn anthropic_matches_time_and_count_and_holds_on_two() {
        let t = 10_000_000;
        let listed = vec![
            remote("msgbatch_far", t - 3_600_000, 3, None),
            remote("msgbatch_count", t + 1_000, 4, None),
            remote("msgbatch_it", t + 2_000, 3, None),
        ];
        let none = HashSet::new();
        assert_eq!(
            match_intent(Shape::Anthropic, &row(t, 3), &listed, &none, W, true),
            Found::One(listed[2].clone())
        );
        let mut two = listed.clone();
        two.push(remote("msgbatch_twin", t + 3_000, 3, None));
        assert!(matches!(
            match_intent(Shape::Anthropic, &row(t, 3), &two, &none, W, true),
            Found::Ambiguous(ids) if ids.len() == 2
        ));
        let known: HashSet<String> = ["msgbatch_twin".to_owned()].into();
        assert_eq!(
            match_intent(Shape::Anthropic, &row(t, 3), &two, &known, W, true),
            Found::One(listed[2].clone()),
            "a batch the store knows is ruled out"
        );
        assert_eq!(
            match_intent(Shape::Anthropic, &row(t, 5), &listed, &none, W, true),
            Found::None
        );
        assert!(matches!(
            match_intent(Shape::Anthropic, &row(t, 5), &listed, &none, W, false),
            Found::Unsure(_)
        ));
    }
}
