//! Notes: the reasons behind a classification or a decision, kept as data
//! and formatted only when someone reads them.
//!
//! Classifying and deciding happen on every response; reading the reasons
//! happens when a person or a log asks. So a note is a small value (a
//! static sentence, or the numbers of a sentence) and [`Note`]'s `Display`
//! writes the sentence: no allocation on the hot path.

use crate::parse::body::Unreadable;
use crate::parse::retry_after::HintSource;
use crate::parse::{Rejected, FOREVER};
use crate::vocab::Cause;
use std::borrow::Cow;
use std::fmt;
use std::time::{Duration, SystemTime};

/// One reason, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Note {
    /// A sentence.
    Text(Cow<'static, str>),
    /// The body's structured code named the cause.
    BodyCode(Cause),
    /// The body could not be read as a provider error.
    BodyUnreadable(Unreadable),
    /// The status decided the cause (`generic`: under the RFC 9110 profile).
    StatusDecides {
        /// HTTP status.
        status: u16,
        /// The cause it means.
        cause: Cause,
        /// Whether the generic profile applied.
        generic: bool,
    },
    /// A 429 or 400 without a known code on a provider that sends codes.
    CodeNeeded(u16),
    /// The wait hint used.
    Hint {
        /// Where it came from.
        source: HintSource,
        /// The wait.
        wait: Duration,
    },
    /// A hint present but rejected.
    RejectedHint {
        /// Where it came from.
        source: HintSource,
        /// Why.
        reason: Rejected,
    },
    /// Jitter added above a hint.
    Jitter(Duration),
    /// Backoff without a hint.
    Backoff {
        /// Throttling (floored) or transient (full jitter).
        throttling: bool,
        /// The attempt that failed.
        attempt: u32,
        /// The window the delay was drawn from.
        window: Duration,
    },
    /// The job's attempts are spent.
    AttemptsSpent {
        /// Sends made.
        attempts: u32,
        /// The policy's maximum.
        max: u32,
    },
    /// A stop, until a known time or until a human resumes.
    StoppedUntil(Option<SystemTime>),
    /// Admission could come only after the last moment to send within the
    /// job's deadline: the job ends with nothing sent, and the answer says
    /// when it could have gone.
    TooLate {
        /// When it could have been sent.
        earliest: SystemTime,
        /// The wait that would have taken.
        wait: Duration,
    },
    /// A wait longer than the inline limit: the job is handed back.
    Deferred {
        /// The wait: the job's waits in line in total, had it waited.
        wait: Duration,
        /// The inline limit.
        limit: Duration,
    },
}

impl From<&'static str> for Note {
    fn from(s: &'static str) -> Self {
        Note::Text(Cow::Borrowed(s))
    }
}

impl From<String> for Note {
    fn from(s: String) -> Self {
        Note::Text(Cow::Owned(s))
    }
}

/// `8 s`, `1.146 s`, `84 ms`.
pub(crate) struct Human(pub Duration);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d >= FOREVER {
            f.write_str("longer than any deadline")
        } else if d < Duration::from_secs(1) {
            write!(f, "{} ms", d.as_millis())
        } else if d.subsec_millis() == 0 {
            write!(f, "{} s", d.as_secs())
        } else {
            write!(f, "{:.3} s", d.as_secs_f64())
        }
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Text(s) => f.write_str(s),
            Note::BodyCode(cause) => write!(f, "body error code says {cause}"),
            Note::BodyUnreadable(u) => write!(f, "body unreadable ({})", u.as_str()),
            Note::StatusDecides {
                status,
                cause,
                generic,
            } => {
                if *generic {
                    write!(f, "generic profile: status {status} decides: {cause}")
                } else {
                    write!(f, "status {status} decides: {cause}")
                }
            }
            Note::CodeNeeded(status) => write!(
                f,
                "a {status} means different things by its code, and the code is missing or unknown"
            ),
            Note::Hint { source, wait } => write!(f, "{}: {}", source.as_str(), Human(*wait)),
            Note::RejectedHint { source, reason } => {
                write!(f, "{} rejected ({reason}): not used", source.as_str())
            }
            Note::Jitter(d) => write!(f, "jitter +{} ms", d.as_millis()),
            Note::Backoff {
                throttling,
                attempt,
                window,
            } => write!(
                f,
                "no hint: {} backoff after attempt {attempt} (window {})",
                if *throttling {
                    "throttling"
                } else {
                    "full-jitter"
                },
                Human(*window)
            ),
            Note::AttemptsSpent { attempts, max } => {
                write!(f, "{attempts} of {max} attempts spent")
            }
            Note::StoppedUntil(Some(t)) => {
                write!(f, "stopped until {}", crate::time::format_rfc3339(*t))
            }
            Note::StoppedUntil(None) => f.write_str("stopped until a human resumes"),
            Note::TooLate { earliest, wait } => write!(
                f,
                "it could be sent in {} (at {}), after the last moment its deadline allows: nothing sent",
                Human(*wait),
                crate::time::format_rfc3339(*earliest)
            ),
            Note::Deferred { wait, limit } => write!(
                f,
                "wait {} exceeds the inline limit {}: hand the job back",
                Human(*wait),
                Human(*limit)
            ),
        }
    }
}
