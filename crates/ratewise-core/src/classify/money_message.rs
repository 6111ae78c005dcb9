//! Workspace-internal: used by ratewise's own crates; not part of the public API and not covered by semver.
//! (The money-message reader behind [`classify_response`](super::classify_response).)
//!
//! Money said only in words: an error message that says a usage or spend
//! limit the user set was reached, a provider quota or tier cap was crossed,
//! or the credit balance ran out.
//!
//! Providers say some of these only in prose. Anthropic answers a spend
//! limit you set with `400 invalid_request_error` and "You have reached your
//! specified API usage limits" (organisation) or "… your specified workspace
//! API usage limits" (workspace), followed by when access resumes; "Your
//! credit balance is too low …" has come as a 400 too; and its tier's
//! monthly cap carries `error.details.error_code` only on the Messages API,
//! so elsewhere a `429 rate_limit_error` whose message says so is the only
//! evidence. OpenAI's `insufficient_quota` family is coded, but proxies and
//! OpenAI-compatible services pass on the sentence without the code.
//!
//! # The rule
//!
//! Reading one sentence misses the variants (scope words, punctuation, case,
//! line breaks); reading loosely stops a whole key over a request error,
//! which only a human undoes. So the rule reads *meaning*, over words rather
//! than characters: three cues must all hold, and no veto word may appear.
//!
//! 1. **Words.** ASCII letters and digits, lowercased; every other byte
//!    separates words, so `max_tokens`, `per-minute` and
//!    `thinking.budget_tokens` read as `max tokens`, `per minute`,
//!    `thinking budget tokens`. Only the first 512 bytes are read;
//!    nothing is allocated.
//! 2. **A money limit is named:** `usage limit(s)`, `usage threshold`,
//!    `spend limit`, `spending limit`, `spend cap`, `hard limit` (OpenAI's
//!    "Billing hard limit"), `budget`, `quota`, `credit balance`.
//! 3. **It is said to be reached:** `reached`, `exceeded`, `crossed`,
//!    `exhausted`, `hit`, `too low`.
//! 4. **It belongs to the caller:** `you`, `your`, `specified`, `account`,
//!    `billing`, `workspace`, `organization` / `organisation` / `org`,
//!    `project`, `api key`.
//!
//! The veto wins over everything: **the message describes the
//! request or a rate**, not money — `rate limit(s)` / `rate limited`,
//! `per minute` / `per min`, `tpm` / `rpm` / `itpm` / `otpm`, `max tokens`,
//! `budget tokens` (extended thinking), `prompt`, `context`, `too large`,
//! `too long`, `maximum allowed`. Those are the words of `max_tokens: N >
//! M, which is the maximum allowed …`, `prompt is too long: N tokens > M
//! maximum`, OpenAI's `context_length_exceeded`, "Request too large … on
//! tokens per min (TPM)" and every per-minute 429 — several of which also
//! say "your organization", "exceeded" or "current usage", which is why no
//! single cue is enough. Google's per-minute "Quota exceeded for quota
//! metric '… requests per minute' … for consumer 'project_number:…'" has
//! all three cues: only the veto keeps it from stopping a key.
//!
//! Which money, once all hold: a credit balance is [`Cause::Billing`]; a
//! `quota` or the `tier` is the provider's allowance, [`Cause::SpendCap`]
//! (as OpenAI's `insufficient_quota` code and Anthropic's tier cap are);
//! anything else is a limit the user set, [`Cause::UserLimit`]. All three
//! stop the key ([`crate::vocab::Cause::is_money`]).
//!
//! The vocabulary comes from the providers' documented and observed
//! phrasings, kept with their sources in
//! `crates/ratewise-core/tests/corpus/self_set_limits.json`, next to the
//! request errors and rate limits that must not match; the corpus test runs
//! both through [`crate::classify::classify_response`].
//!
//! Structured codes still decide first (see [`super::codes`]): this rule is
//! only asked when the fields name nothing, a plain invalid request, or a
//! bare rate-limit type without a refining code.
//!
//! ```
//! use ratewise_core::classify::money_message::{read, LimitOwner};
//! use ratewise_core::Cause;
//!
//! let m = read("You have reached your specified workspace API usage limits. \
//!               You will regain access on 2026-12-01 at 00:00 UTC.").unwrap();
//! assert_eq!((m.cause, m.names), (Cause::UserLimit, Some(LimitOwner::Workspace)));
//! // A request error that mentions a limit is not money.
//! assert_eq!(read("max_tokens: 200000 > 64000, which is the maximum allowed \
//!                  number of output tokens for claude-opus-4-5"), None);
//! ```

use crate::vocab::Cause;

/// Only this much of a message is read, in bytes.
pub(crate) const SCAN_LIMIT: usize = 512;

/// Longest cue word (`organisation`); longer words are never cues.
const WORD: usize = 12;

/// Whose limit a message names, the narrowest one it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitOwner {
    /// The organisation (Anthropic's tier cap names it; its self-set
    /// organisation limit says only "your specified API usage limits").
    Organization,
    /// An Anthropic workspace.
    Workspace,
    /// An OpenAI project.
    Project,
    /// One API key.
    ApiKey,
}

impl LimitOwner {
    /// The word used in explanations.
    pub const fn as_str(self) -> &'static str {
        match self {
            LimitOwner::Organization => "organization",
            LimitOwner::Workspace => "workspace",
            LimitOwner::Project => "project",
            LimitOwner::ApiKey => "api key",
        }
    }
}

/// What a message said about money.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoneyMessage {
    /// [`Cause::UserLimit`], [`Cause::SpendCap`] or [`Cause::Billing`].
    pub cause: Cause,
    /// Whose limit, when the message names one.
    pub names: Option<LimitOwner>,
}

impl MoneyMessage {
    /// Why the classifier chose this cause, in one sentence.
    pub const fn explain(self) -> &'static str {
        match (self.cause, self.names) {
            (Cause::Billing, _) => "message says the credit balance ran out",
            (Cause::SpendCap, _) => "message says the provider's quota or tier cap was reached",
            (_, Some(LimitOwner::Workspace)) => {
                "message says a workspace usage or spend limit was reached"
            }
            (_, Some(LimitOwner::Project)) => {
                "message says a project usage or spend limit was reached"
            }
            (_, Some(LimitOwner::ApiKey)) => {
                "message says an API key usage or spend limit was reached"
            }
            (_, Some(LimitOwner::Organization)) => {
                "message says an organization usage or spend limit was reached"
            }
            (_, None) => "message says a self-set usage or spend limit was reached",
        }
    }
}

/// Reads a provider's error message for money (see the module docs for the
/// rule). `None`: the message does not say money ran out.
pub fn read(message: &str) -> Option<MoneyMessage> {
    let cues = Cues::scan(message);
    if !(cues.limit && cues.reached && cues.owner) || cues.veto {
        return None;
    }
    let cause = if cues.credit {
        Cause::Billing
    } else if cues.provider_set {
        Cause::SpendCap
    } else {
        Cause::UserLimit
    };
    Some(MoneyMessage {
        cause,
        names: cues.names,
    })
}

/// The cues found in one message.
#[derive(Debug, Default)]
struct Cues {
    /// A money limit is named.
    limit: bool,
    /// ... said to be reached.
    reached: bool,
    /// ... and the caller's.
    owner: bool,
    /// The message describes the request or a rate.
    veto: bool,
    /// The limit is a credit balance.
    credit: bool,
    /// The limit is the provider's (a quota, the tier).
    provider_set: bool,
    /// The narrowest owner named.
    names: Option<LimitOwner>,
}

impl Cues {
    /// One pass over the words of the message's head.
    fn scan(message: &str) -> Cues {
        let head = crate::parse::clip(message, SCAN_LIMIT).as_bytes();
        let mut cues = Cues::default();
        let (mut prev, mut prev_len) = ([0u8; WORD], 0);
        for raw in head
            .split(|b| !b.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            // Lowercased into a small buffer; a longer word is no cue (it
            // still ends the pair before it).
            let mut word = [0u8; WORD];
            let len = if raw.len() <= WORD {
                for (d, s) in word.iter_mut().zip(raw) {
                    *d = s.to_ascii_lowercase();
                }
                raw.len()
            } else {
                0
            };
            cues.word(&prev[..prev_len], &word[..len]);
            (prev, prev_len) = (word, len);
        }
        cues
    }

    /// Records what one word (after `prev`) says.
    fn word(&mut self, prev: &[u8], w: &[u8]) {
        match w {
            // Reached.
            b"reached" | b"exceeded" | b"crossed" | b"exhausted" | b"hit" => self.reached = true,
            b"low" if prev == b"too" => self.reached = true,
            // Owner.
            b"you" | b"your" | b"specified" | b"account" | b"billing" => self.owner = true,
            b"workspace" => self.owned(LimitOwner::Workspace),
            b"project" => self.owned(LimitOwner::Project),
            b"organization" | b"organisation" | b"org" => self.owned(LimitOwner::Organization),
            b"key" if prev == b"api" => self.owned(LimitOwner::ApiKey),
            // Money limits, and the rate limit that is not one.
            b"limit" | b"limits" if matches!(prev, b"usage" | b"spend" | b"spending" | b"hard") => {
                self.limit = true
            }
            b"limit" | b"limits" | b"limited" if prev == b"rate" => self.veto = true,
            b"threshold" if prev == b"usage" => self.limit = true,
            b"cap" if matches!(prev, b"spend" | b"spending") => self.limit = true,
            b"balance" if prev == b"credit" => {
                self.limit = true;
                self.credit = true;
            }
            b"quota" => {
                self.limit = true;
                self.provider_set = true;
            }
            b"tier" => self.provider_set = true,
            b"budget" => self.limit = true,
            // The request's shape, or a rate.
            b"tokens" if matches!(prev, b"max" | b"budget") => self.veto = true,
            b"minute" | b"min" if prev == b"per" => self.veto = true,
            b"large" | b"long" if prev == b"too" => self.veto = true,
            b"allowed" if prev == b"maximum" => self.veto = true,
            b"tpm" | b"rpm" | b"itpm" | b"otpm" | b"prompt" | b"context" => self.veto = true,
            _ => {}
        }
    }

    /// An owner word: the narrowest named wins (a workspace, project or key
    /// over the organisation that holds it).
    fn owned(&mut self, owner: LimitOwner) {
        self.owner = true;
        self.names = match (self.names, owner) {
            (None | Some(LimitOwner::Organization), o) => Some(o),
            (narrow, _) => narrow,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPECIFIED: &str = "You have reached your specified API usage limits. You will regain access on 2026-12-01 at 00:00 UTC.";

    #[test]
    fn each_cue_is_needed() {
        assert_eq!(read(SPECIFIED).map(|m| m.cause), Some(Cause::UserLimit));
        // Without the money limit, the state, the owner: nothing.
        assert_eq!(read("You have reached your specified API limits."), None);
        assert_eq!(read("Your specified API usage limits apply."), None);
        assert_eq!(read("The API usage limits were reached."), None);
        // With a veto: nothing, however much else is there.
        assert_eq!(
            read("You have reached your API usage limits: tokens per minute."),
            None
        );
    }

    #[test]
    fn words_not_characters() {
        for m in [
            "YOU HAVE REACHED YOUR SPECIFIED API USAGE LIMITS",
            "You\n    have reached your specified API usage-limits!!",
            "you have reached your specified api usage limits",
        ] {
            assert_eq!(read(m).map(|m| m.cause), Some(Cause::UserLimit), "{m}");
        }
        // Parts of words are not words.
        assert_eq!(read("Yourself reachedness usagelimits"), None);
    }

    #[test]
    fn which_money() {
        let r = |m| read(m).map(|m| (m.cause, m.names));
        assert_eq!(
            r("Your credit balance is too low to access the Anthropic API."),
            Some((Cause::Billing, None))
        );
        assert_eq!(
            r("You exceeded your current quota, please check your plan and billing details."),
            Some((Cause::SpendCap, None))
        );
        assert_eq!(
            r("You have reached your API usage limits: your organization has crossed its monthly API usage threshold, set based on your organization's API tier."),
            Some((Cause::SpendCap, Some(LimitOwner::Organization)))
        );
        assert_eq!(
            r("Billing hard limit has been reached"),
            Some((Cause::UserLimit, None))
        );
        assert_eq!(
            r("Your organization's project has exceeded its spend limit."),
            Some((Cause::UserLimit, Some(LimitOwner::Project)))
        );
    }

    #[test]
    fn long_words_and_long_messages_are_safe() {
        let long = "x".repeat(10_000);
        assert_eq!(read(&long), None);
        // A cue past the scanned head is not read.
        let late = format!("{} {SPECIFIED}", "word ".repeat(SCAN_LIMIT));
        assert_eq!(read(&late), None);
        // Multi-byte characters at the cut are no problem.
        let m = format!("{SPECIFIED}{}", "é".repeat(SCAN_LIMIT));
        assert_eq!(read(&m).map(|m| m.cause), Some(Cause::UserLimit));
    }

    #[test]
    fn explanations_name_the_owner() {
        let m = read("You have reached your specified workspace API usage limits.").unwrap();
        assert_eq!(
            m.explain(),
            "message says a workspace usage or spend limit was reached"
        );
        assert_eq!(LimitOwner::Workspace.as_str(), "workspace");
    }
}
