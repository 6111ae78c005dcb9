//! The stable vocabulary shared by the decision table, the CLI's JSON and
//! the fixtures: what happened ([`Cause`]), who is affected ([`Scope`]),
//! which ceiling was hit ([`Dimension`]) and which provider spoke
//! ([`Provider`]). Every name serialises to the snake_case word used in
//! `DESIGN.md`.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! vocabulary {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $word:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The word used in `DESIGN.md`, the fixtures and the CLI's JSON.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }

            /// Reads the vocabulary word back; `None` for anything else.
            pub fn from_word(word: &str) -> Option<Self> {
                match word {
                    $($word => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

vocabulary! {
    /// What happened.
    Cause {
        /// A 2xx answer.
        Success => "success",
        /// A per-minute ceiling (requests or tokens) was hit.
        RateLimited => "rate_limited",
        /// The request *rate of increase* was too sharp (OpenAI `slow_down`).
        AccelerationLimited => "acceleration_limited",
        /// A spend cap, exhausted quota or credits: money stops everything.
        SpendCap => "spend_cap",
        /// A billing error (HTTP 402).
        Billing => "billing",
        /// A usage or spend limit the user set on themselves was reached.
        UserLimit => "user_limit",
        /// The request is malformed; it must change.
        InvalidRequest => "invalid_request",
        /// The request is larger than any limit allows; waiting cannot help.
        RequestTooLarge => "request_too_large",
        /// The model or endpoint does not exist.
        NotFound => "not_found",
        /// The key was refused.
        Authentication => "authentication",
        /// The key may not use this model or feature.
        Permission => "permission",
        /// The provider as a whole is overloaded (529, 503 overloaded).
        Overloaded => "overloaded",
        /// A transient server failure (500, 502, 503, 504).
        ServerError => "server_error",
        /// The server timed out (408, Anthropic 504 `timeout_error`).
        Timeout => "timeout",
        /// A conflicting concurrent request (409).
        Conflict => "conflict",
        /// The request never left: connect refused, DNS or TLS failure.
        ConnectFailed => "connect_failed",
        /// Sent, no answer: it may have been generated and billed.
        OutcomeUnknown => "outcome_unknown",
        /// A committed stream failed part-way.
        MidStream => "mid_stream",
        /// A shape nobody recognises.
        Unknown => "unknown",
    }
}

impl Cause {
    /// Money or credentials: the whole key must stop, whatever the headers say.
    pub const fn is_money(self) -> bool {
        matches!(self, Cause::SpendCap | Cause::Billing | Cause::UserLimit)
    }

    /// Causes that are worth retrying under the default policy.
    pub const fn is_retryable(self) -> bool {
        matches!(
            self,
            Cause::RateLimited
                | Cause::AccelerationLimited
                | Cause::Overloaded
                | Cause::ServerError
                | Cause::Timeout
                | Cause::Conflict
                | Cause::ConnectFailed
        )
    }

    /// Throttling causes back off from a larger base than transient ones.
    pub(crate) const fn is_throttling(self) -> bool {
        matches!(self, Cause::RateLimited | Cause::AccelerationLimited)
    }
}

vocabulary! {
    /// Who is affected by a cause.
    Scope {
        /// This job only.
        Request => "request",
        /// Jobs on the same key and model-class bucket.
        Bucket => "bucket",
        /// Every job on this key, organisation or project.
        Key => "key",
        /// The provider as a whole.
        Provider => "provider",
    }
}

vocabulary! {
    /// Which ceiling, when known.
    Dimension {
        /// Requests per minute.
        Requests => "requests",
        /// Input tokens per minute.
        InputTokens => "input_tokens",
        /// Output tokens per minute.
        OutputTokens => "output_tokens",
        /// Combined tokens per minute (where a provider publishes one).
        Tokens => "tokens",
    }
}

vocabulary! {
    /// Whose rules read the response.
    Provider {
        /// Anthropic Messages API.
        Anthropic => "anthropic",
        /// OpenAI (Chat Completions, Responses).
        Openai => "openai",
        /// The Gemini API (Google's `google.rpc.Status` errors, no
        /// rate-limit headers).
        Gemini => "gemini",
        /// Amazon Bedrock's runtime (`x-amzn-ErrorType` exceptions, no
        /// rate-limit headers).
        Bedrock => "bedrock",
        /// Azure OpenAI (OpenAI's envelope; `error.code` `"429"`, daily
        /// quotas in "retry after N seconds", `api-key` auth).
        Azure => "azure",
        /// Groq (OpenAI's envelope; `x-ratelimit-*-requests` count requests
        /// per day, `*-tokens` tokens per minute).
        Groq => "groq",
        /// Mistral (a flat `{"object":"error"}` envelope; per-minute and
        /// per-month `x-ratelimit-*-minute` / `-month` headers).
        Mistral => "mistral",
        /// DeepSeek (OpenAI's envelope; 402 balance, 503 overload,
        /// requests in flight limited per account).
        Deepseek => "deepseek",
        /// OpenRouter (OpenAI's envelope; 402 credits, an upstream's
        /// errors in `error.metadata`, errors inside 200 answers).
        Openrouter => "openrouter",
        /// xAI (OpenAI's envelope, with a string `error`; a 429 for money).
        Xai => "xai",
        /// Any API that follows RFC 9110 alone.
        Generic => "generic",
    }
}

impl Provider {
    /// Whose error envelope and message phrasing the provider speaks:
    /// the OpenAI-compatible APIs read as [`Provider::Openai`] before
    /// their own rules; every other provider is its own dialect.
    ///
    /// ```
    /// use ratewise_core::Provider;
    /// assert_eq!(Provider::Groq.dialect(), Provider::Openai);
    /// assert_eq!(Provider::Gemini.dialect(), Provider::Gemini);
    /// ```
    pub const fn dialect(self) -> Provider {
        match self {
            Provider::Azure
            | Provider::Groq
            | Provider::Mistral
            | Provider::Deepseek
            | Provider::Openrouter
            | Provider::Xai => Provider::Openai,
            other => other,
        }
    }

    /// The provider whose public API is served at `host` (a URL's host,
    /// without port), by the documented API hostnames; `None` for any
    /// other host (a proxy, a gateway, a self-hosted server: say which
    /// profile applies instead).
    ///
    /// ```
    /// use ratewise_core::Provider;
    /// assert_eq!(Provider::from_host("generativelanguage.googleapis.com"), Some(Provider::Gemini));
    /// assert_eq!(Provider::from_host("my-res.openai.azure.com"), Some(Provider::Azure));
    /// assert_eq!(Provider::from_host("127.0.0.1"), None);
    /// ```
    pub fn from_host(host: &str) -> Option<Provider> {
        // Read on every job whose provider is not configured: compared in
        // place, case-insensitively, without an allocation.
        let host = host.trim_end_matches('.');
        let ends_with = |suffix: &str| {
            host.len() >= suffix.len()
                && host.as_bytes()[host.len() - suffix.len()..]
                    .eq_ignore_ascii_case(suffix.as_bytes())
        };
        let is = |name: &str| {
            ends_with(name)
                && (host.len() == name.len()
                    || host.as_bytes()[host.len() - name.len() - 1] == b'.')
        };
        let provider = if is("api.anthropic.com") {
            Provider::Anthropic
        } else if is("api.openai.com") {
            Provider::Openai
        } else if is("generativelanguage.googleapis.com") {
            Provider::Gemini
        } else if is("openai.azure.com") || is("services.ai.azure.com") {
            Provider::Azure
        } else if is("api.groq.com") {
            Provider::Groq
        } else if is("api.mistral.ai") {
            Provider::Mistral
        } else if is("api.deepseek.com") {
            Provider::Deepseek
        } else if is("openrouter.ai") {
            Provider::Openrouter
        } else if is("api.x.ai") {
            Provider::Xai
        } else if host.len() >= 15
            && host.as_bytes()[..15].eq_ignore_ascii_case(b"bedrock-runtime")
            && ends_with(".amazonaws.com")
        {
            Provider::Bedrock
        } else {
            return None;
        };
        Some(provider)
    }
}

vocabulary! {
    /// Why a retryable failure is not retried.
    GiveUpReason {
        /// The job's attempts are spent.
        Attempts => "attempts",
        /// The next send could not be answered before the deadline.
        Deadline => "deadline",
        /// The queue-wide retry budget is spent.
        RetryBudget => "retry_budget",
        /// The server said not to (`x-should-retry: false`).
        ServerDeclined => "server_declined",
        /// Its caller went away (a driver's cancellation): nothing more
        /// is sent for it.
        Cancelled => "cancelled",
    }
}

vocabulary! {
    /// What to do next, without its parameters (see [`crate::Action`]).
    ActionKind {
        /// Success; reconcile usage.
        Done => "done",
        /// Send again not before a delay.
        Retry => "retry",
        /// Hand the job back until an instant; no attempt burned.
        Defer => "defer",
        /// Stop sending for the whole scope.
        StopQueue => "stop_queue",
        /// Not retryable; the request or configuration must change.
        Fail => "fail",
        /// An unknown or malformed shape: look at it, no blind retry.
        Inspect => "inspect",
        /// Retryable, but a bound is spent.
        GiveUp => "give_up",
        /// Sent, no answer: keep the worst-case cost reserved.
        HoldUnknown => "hold_unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_read_by_whole_labels_in_any_case() {
        let cases = [
            ("api.anthropic.com", Some(Provider::Anthropic)),
            ("API.Anthropic.COM.", Some(Provider::Anthropic)),
            ("eu.api.anthropic.com", Some(Provider::Anthropic)),
            ("evilapi.anthropic.com", None),
            ("api.anthropic.com.example", None),
            ("anthropic.com", None),
            ("My-Res.OpenAI.Azure.com", Some(Provider::Azure)),
            ("x.services.ai.azure.com", Some(Provider::Azure)),
            (
                "Bedrock-Runtime.us-east-1.amazonaws.com",
                Some(Provider::Bedrock),
            ),
            ("bedrock.us-east-1.amazonaws.com", None),
            ("bedrock-runtime", None),
            ("", None),
            (".", None),
            ("é.api.x.ai", Some(Provider::Xai)),
            ("ééé", None),
        ];
        for (host, want) in cases {
            assert_eq!(Provider::from_host(host), want, "{host}");
        }
    }

    #[test]
    fn words_round_trip_through_serde_and_from_word() {
        for c in Cause::ALL {
            let json = serde_json::to_string(c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert_eq!(Cause::from_word(c.as_str()), Some(*c));
        }
        assert_eq!(
            ActionKind::from_word("stop_queue"),
            Some(ActionKind::StopQueue)
        );
        assert_eq!(Scope::from_word("nope"), None);
    }

    #[test]
    fn money_is_never_retryable() {
        for c in Cause::ALL {
            assert!(!(c.is_money() && c.is_retryable()), "{c}");
        }
    }
}
