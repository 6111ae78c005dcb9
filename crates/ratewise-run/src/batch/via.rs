//! Which path a job takes: one request each ([`Via::Direct`]), the
//! provider's batch API at half price ([`Via::Batch`]), or per job by its
//! deadline ([`Via::Auto`], [`route`]).

use std::time::Duration;

/// The batch window both providers give a batch: OpenAI's
/// `completion_window` "24h" ("Currently only `24h` is supported",
/// <https://platform.openai.com/docs/api-reference/batch/create>);
/// Anthropic's Message Batches end each request not processed within 24
/// hours as `expired`
/// (<https://docs.anthropic.com/en/docs/build-with-claude/batch-processing>).
pub const BATCH_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// What [`route`] adds to [`BATCH_WINDOW`] by default: time to create the
/// batch, poll it and download its results.
pub const DEFAULT_MARGIN: Duration = Duration::from_secs(3600);

/// How a run sends its jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Via {
    /// One request each through the paced tower layer.
    #[default]
    Direct,
    /// The provider's batch API.
    Batch,
    /// Per job: the batch API when its deadline leaves room for the batch
    /// window, else direct ([`route`]).
    Auto,
}

/// A `--via` value that is none of `direct`, `batch`, `auto`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseViaError(pub String);

impl std::fmt::Display for ParseViaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} is not one of direct, batch, auto", self.0)
    }
}

impl std::error::Error for ParseViaError {}

impl std::str::FromStr for Via {
    type Err = ParseViaError;
    fn from_str(s: &str) -> Result<Via, ParseViaError> {
        match s.trim() {
            "direct" => Ok(Via::Direct),
            "batch" => Ok(Via::Batch),
            "auto" => Ok(Via::Auto),
            other => Err(ParseViaError(other.chars().take(64).collect())),
        }
    }
}

impl Via {
    /// The name [`Via::from_str`](std::str::FromStr) reads.
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Direct => "direct",
            Via::Batch => "batch",
            Via::Auto => "auto",
        }
    }
}

/// The path one job takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// One request.
    Direct,
    /// Inside a batch.
    Batch,
}

/// The path of a job first seen at `first_seen_ms` with `deadline` (from
/// first seen), at `now_ms`: under [`Via::Auto`], the batch API when the
/// time left is at least `window + margin` (the batch may take its whole
/// window, then it is polled and downloaded), else direct. A pure
/// function: no clock, no I/O.
pub fn route(
    via: Via,
    first_seen_ms: i64,
    deadline: Duration,
    now_ms: i64,
    window: Duration,
    margin: Duration,
) -> Route {
    match via {
        Via::Direct => Route::Direct,
        Via::Batch => Route::Batch,
        Via::Auto => {
            let deadline_ms = first_seen_ms
                .saturating_add(i64::try_from(deadline.as_millis()).unwrap_or(i64::MAX));
            let left_ms = deadline_ms.saturating_sub(now_ms);
            let needed = window.saturating_add(margin).as_millis();
            if left_ms > 0 && left_ms as u128 >= needed {
                Route::Batch
            } else {
                Route::Direct
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: u64 = 3600;

    fn auto(deadline_h: u64, age_h: u64) -> Route {
        let now = 1_000_000_000_000;
        let first_seen = now - (age_h * H * 1000) as i64;
        route(
            Via::Auto,
            first_seen,
            Duration::from_secs(deadline_h * H),
            now,
            BATCH_WINDOW,
            DEFAULT_MARGIN,
        )
    }

    #[test]
    fn auto_batches_only_when_the_window_and_margin_fit() {
        assert_eq!(auto(48, 0), Route::Batch);
        assert_eq!(auto(25, 0), Route::Batch, "exactly window + margin");
        assert_eq!(auto(24, 0), Route::Direct, "no room for the margin");
        assert_eq!(auto(50, 24), Route::Batch);
        assert_eq!(
            auto(48, 30),
            Route::Direct,
            "its deadline counts from first seen"
        );
        assert_eq!(auto(1, 5), Route::Direct, "past its deadline");
    }

    #[test]
    fn direct_and_batch_are_what_they_say() {
        let r = |via| route(via, 0, Duration::ZERO, 10, BATCH_WINDOW, DEFAULT_MARGIN);
        assert_eq!(r(Via::Direct), Route::Direct);
        assert_eq!(r(Via::Batch), Route::Batch);
    }

    #[test]
    fn via_parses_its_three_names() {
        assert_eq!("batch".parse::<Via>(), Ok(Via::Batch));
        assert_eq!(" auto ".parse::<Via>(), Ok(Via::Auto));
        assert_eq!("direct".parse::<Via>(), Ok(Via::Direct));
        assert!("fast".parse::<Via>().is_err());
        assert_eq!(Via::Auto.as_str(), "auto");
    }
}
