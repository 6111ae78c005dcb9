//! Workspace-internal: used by ratewise's own crates; not part of the public API and not covered by semver.
//! (The provider code tables behind [`classify_response`](super::classify_response).)
//!
//! Provider error codes → [`Cause`]: the body's structured code is read
//! before headers and status (DESIGN principle 1).
//!
//! These functions know nothing of HTTP status: they say what a provider's
//! `type` / `code` / `error_code` means, or `None` when the provider has not
//! documented it. The classifier combines that with the status; the
//! streaming crate uses the same mapping for in-band `error` events.

use super::money_message::{self, MoneyMessage};
use crate::vocab::{Cause, Provider};

/// OpenAI codes (in `code` or `type`) that mean money has run out.
pub(crate) const OPENAI_MONEY_CODES: &[&str] = &[
    "insufficient_quota",
    "credit_balance_exhausted",
    "project_spend_limit_exceeded",
    "organization_spend_limit_exceeded",
    "organization_usage_limit_exceeded",
    "billing_hard_limit_reached",
    "billing_not_active",
];

/// Anthropic's `error.details.error_code` for the monthly spend cap.
pub(crate) const ANTHROPIC_SPEND_CAP_CODE: &str = "enforced_spend_limit_reached";

/// Anthropic `error.details.error_code`s that mean money, as the official
/// SDK (anthropic-python 2.14, `_error_classes.py`) maps them: the monthly
/// cap and a contract's cap (429), a linked organisation's cap or billing
/// (402).
pub(crate) const ANTHROPIC_MONEY_CODES: &[(&str, Cause)] = &[
    (ANTHROPIC_SPEND_CAP_CODE, Cause::SpendCap),
    ("contract_spend_limit_reached", Cause::SpendCap),
    ("linked_organization_spend_limit_reached", Cause::Billing),
    ("linked_organization_billing_unavailable", Cause::Billing),
];

/// Anthropic's acceleration ("ramp") limit: the rate rose too fast.
pub(crate) const ANTHROPIC_RAMP_CODE: &str = "ramp_limit_exceeded";

pub use crate::parse::body::ErrorFields;

/// The cause a provider's error fields name, or `None` when the fields are
/// absent or unknown to this version of ratewise.
///
/// Codes first: a structured code or a specific type decides. Where the
/// fields only say "invalid request", name a bare rate-limit type with no
/// refining code, or name nothing known, the message may still say money ran
/// out ([`money_message`]): Anthropic answers a self-set spend limit as a 400
/// `invalid_request_error`, and its tier cap outside the Messages API as a
/// `rate_limit_error` without `details.error_code`.
pub fn cause_of_error(provider: Provider, fields: ErrorFields<'_>) -> Option<Cause> {
    read_error(provider, fields).map(|r| r.cause)
}

/// What the error fields decided, and the message reading when the message
/// decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ErrorReading {
    /// The cause.
    pub cause: Cause,
    /// `Some` when the message, not a code, named the cause.
    pub said: Option<MoneyMessage>,
}

/// [`cause_of_error`], keeping whether the message decided.
pub(super) fn read_error(provider: Provider, fields: ErrorFields<'_>) -> Option<ErrorReading> {
    let coded = match provider.dialect() {
        Provider::Anthropic => anthropic(fields),
        Provider::Openai => openai(fields),
        // `error.status`, read into the type's place by `google`.
        Provider::Gemini => fields.error_type.and_then(super::google::cause_of_status),
        // The exception's name, read into the type's place by `bedrock`.
        Provider::Bedrock => fields.error_type.and_then(super::bedrock::cause_of_kind),
        // The generic profile follows RFC 9110 alone: bodies prove nothing.
        _ => return None,
    };
    // Only a generic class is open to the message; a code that names
    // anything else (money, ramp, overload, a rate-limit code) stands.
    let open = match coded {
        None | Some(Cause::InvalidRequest) => true,
        // Gemini's every quota 429 says "You exceeded your current quota,
        // please check your plan and billing details", per minute or per
        // day: OpenAI's words for money, not Google's (its money answers
        // are `FAILED_PRECONDITION` and billing pages).
        Some(Cause::RateLimited) => {
            fields.code.is_none() && !matches!(provider, Provider::Gemini | Provider::Bedrock)
        }
        Some(_) => false,
    };
    if open {
        if let Some(said) = fields.message.and_then(money_message::read) {
            return Some(ErrorReading {
                cause: said.cause,
                said: Some(said),
            });
        }
    }
    coded.map(|cause| ErrorReading { cause, said: None })
}

fn anthropic(f: ErrorFields<'_>) -> Option<Cause> {
    if let Some(code) = f.code {
        if let Some((_, cause)) = ANTHROPIC_MONEY_CODES.iter().find(|(c, _)| *c == code) {
            return Some(*cause);
        }
        if code == ANTHROPIC_RAMP_CODE {
            return Some(Cause::AccelerationLimited);
        }
        // A 429 whose refining code we do not know may be money: no guess.
        if f.error_type == Some("rate_limit_error") {
            return None;
        }
    }
    let cause = match f.error_type? {
        // A self-set spend limit is a 400 `invalid_request_error` too: the
        // message is read by `read_error`.
        "invalid_request_error" => Cause::InvalidRequest,
        "authentication_error" => Cause::Authentication,
        "permission_error" => Cause::Permission,
        "not_found_error" => Cause::NotFound,
        "request_too_large" => Cause::RequestTooLarge,
        "rate_limit_error" => Cause::RateLimited,
        "api_error" => Cause::ServerError,
        "overloaded_error" => Cause::Overloaded,
        "billing_error" => Cause::Billing,
        "timeout_error" => Cause::Timeout,
        _ => return None,
    };
    Some(cause)
}

fn openai(f: ErrorFields<'_>) -> Option<Cause> {
    let is_money = |s: Option<&str>| s.is_some_and(|s| OPENAI_MONEY_CODES.contains(&s));
    // Money first, in either field: a Retry-After never overrides a billing code.
    if is_money(f.code) || is_money(f.error_type) {
        return Some(Cause::SpendCap);
    }
    // Mistral: "Service tier capacity exceeded for this model." is
    // transient capacity, though typed `invalid_request_error`
    // (docs.mistral.ai; issue #36).
    if f.message
        .is_some_and(|m| crate::parse::contains_ignore_ascii_case(m, "tier capacity exceeded"))
    {
        return Some(Cause::Overloaded);
    }
    if let Some(code) = f.code {
        return openai_code(code, f.message);
    }
    match f.error_type? {
        "server_error" | "api_error" => Some(Cause::ServerError),
        "invalid_request_error" => Some(Cause::InvalidRequest),
        "authentication_error" => Some(Cause::Authentication),
        "permission_error" | "insufficient_permissions" => Some(Cause::Permission),
        "not_found_error" => Some(Cause::NotFound),
        "tokens" | "requests" | "rate_limit_error" => Some(Cause::RateLimited),
        "service_unavailable_error" => Some(Cause::Overloaded),
        _ => None,
    }
}

fn openai_code(code: &str, message: Option<&str>) -> Option<Cause> {
    let cause = match code {
        "rate_limit_exceeded" => {
            if message.is_some_and(|m| crate::parse::message::too_large_for_limit(m).is_some()) {
                Cause::RequestTooLarge
            } else {
                Cause::RateLimited
            }
        }
        // Azure OpenAI writes the status as the code (learn.microsoft.com,
        // Azure OpenAI quotas); Mistral's rate limit is `"1300"` with
        // `type: rate_limited` (docs.mistral.ai).
        "429" | "1300" => Cause::RateLimited,
        // Azure OpenAI's content filter: the prompt must change.
        "content_filter" => Cause::InvalidRequest,
        "slow_down" => Cause::AccelerationLimited,
        "server_is_overloaded" | "engine_overloaded" => Cause::Overloaded,
        "server_error" | "internal_error" => Cause::ServerError,
        "invalid_api_key" | "invalid_authentication" | "account_deactivated" => {
            Cause::Authentication
        }
        "model_not_found" | "unknown_url" => Cause::NotFound,
        "context_length_exceeded" | "string_above_max_length" => Cause::RequestTooLarge,
        "invalid_request_error"
        | "invalid_value"
        | "missing_required_parameter"
        | "unsupported_parameter"
        | "invalid_type" => Cause::InvalidRequest,
        "unsupported_country_region_territory" | "model_not_allowed" => Cause::Permission,
        "timeout" | "request_timeout" => Cause::Timeout,
        _ => return None,
    };
    Some(cause)
}

/// The `google.rpc.Code` name a Google API answers an HTTP `status` with
/// (the `"status"` of its error body): one table for every crate that
/// writes Google's errors (the mock's Gemini, the proxy's own answers on
/// Gemini's paths).
///
/// `google/rpc/code.proto` maps each code to one HTTP status; read
/// backwards, a status maps to the code listed first for it in Google's
/// API design guide (`400` → `INVALID_ARGUMENT`, `409` → `ABORTED`, `500`
/// → `INTERNAL`). Statuses the mapping does not name take the nearest
/// code: `402` (billing) `FAILED_PRECONDITION`, `408` `DEADLINE_EXCEEDED`,
/// `413` and `422` (a request the server will not take as it is)
/// `INVALID_ARGUMENT`, `502` and `529` (an upstream or the service
/// overloaded, worth retrying) `UNAVAILABLE`, any other `5xx` `INTERNAL`,
/// any other `4xx` `FAILED_PRECONDITION`.
///
/// ```
/// use ratewise_core::classify::codes::google_status;
/// assert_eq!(google_status(429), "RESOURCE_EXHAUSTED");
/// assert_eq!(google_status(502), "UNAVAILABLE");
/// assert_eq!(google_status(422), "INVALID_ARGUMENT");
/// ```
pub fn google_status(status: u16) -> &'static str {
    match status {
        400 | 413 | 422 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        402 => "FAILED_PRECONDITION",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        408 | 504 => "DEADLINE_EXCEEDED",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        502 | 503 | 529 => "UNAVAILABLE",
        s if s >= 500 => "INTERNAL",
        _ => "FAILED_PRECONDITION",
    }
}

/// Does a message say a usage or spend limit the user set was reached?
/// Anthropic: "You have reached your specified (workspace) API usage
/// limits." The rule is [`money_message::read`]; this is its
/// [`Cause::UserLimit`] answer.
#[cfg(test)]
fn says_self_set_limit(message: &str) -> bool {
    money_message::read(message).is_some_and(|m| m.cause == Cause::UserLimit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f<'a>(t: Option<&'a str>, c: Option<&'a str>, m: Option<&'a str>) -> ErrorFields<'a> {
        ErrorFields {
            error_type: t,
            code: c,
            message: m,
        }
    }

    #[test]
    fn anthropic_spend_cap_code_beats_rate_limit_type() {
        let fields = f(
            Some("rate_limit_error"),
            Some(ANTHROPIC_SPEND_CAP_CODE),
            None,
        );
        assert_eq!(
            cause_of_error(Provider::Anthropic, fields),
            Some(Cause::SpendCap)
        );
    }

    #[test]
    fn anthropic_details_codes_refine_the_type() {
        let rl = Some("rate_limit_error");
        let a = |code| cause_of_error(Provider::Anthropic, f(rl, Some(code), None));
        assert_eq!(a("contract_spend_limit_reached"), Some(Cause::SpendCap));
        assert_eq!(a("ramp_limit_exceeded"), Some(Cause::AccelerationLimited));
        assert_eq!(a("some_future_code"), None);
        let billing = f(
            Some("billing_error"),
            Some("linked_organization_spend_limit_reached"),
            None,
        );
        assert_eq!(
            cause_of_error(Provider::Anthropic, billing),
            Some(Cause::Billing)
        );
        // Outside 429s the type still decides when the code is new.
        let invalid = f(
            Some("invalid_request_error"),
            Some("tool_name_conflict"),
            None,
        );
        assert_eq!(
            cause_of_error(Provider::Anthropic, invalid),
            Some(Cause::InvalidRequest)
        );
    }

    #[test]
    fn openai_money_in_either_field() {
        for (t, c) in [
            (Some("insufficient_quota"), None),
            (Some("x"), Some("credit_balance_exhausted")),
            (None, Some("organization_usage_limit_exceeded")),
        ] {
            assert_eq!(
                cause_of_error(Provider::Openai, f(t, c, None)),
                Some(Cause::SpendCap)
            );
        }
    }

    #[test]
    fn openai_unknown_code_is_unknown_even_with_known_type() {
        let fields = f(Some("rate_limit_error"), Some("brand_new"), None);
        assert_eq!(cause_of_error(Provider::Openai, fields), None);
    }

    #[test]
    fn self_set_limit_phrase() {
        assert!(says_self_set_limit(
            "You have reached your specified API usage limits. You will regain access on 2026-12-01 at 00:00 UTC."
        ));
        assert!(!says_self_set_limit("messages: field required"));
    }

    #[test]
    fn codes_win_and_only_generic_classes_read_the_message() {
        const QUOTA: &str =
            "You exceeded your current quota, please check your plan and billing details.";
        const TIER: &str = "You have reached your API usage limits: your organization has crossed its monthly API usage threshold, set based on your organization's API tier.";
        let a = |t, c, m| cause_of_error(Provider::Anthropic, f(t, c, m));
        let o = |t, c, m| cause_of_error(Provider::Openai, f(t, c, m));
        // A specific code or type stands whatever the message says.
        assert_eq!(
            o(Some("tokens"), Some("rate_limit_exceeded"), Some(QUOTA)),
            Some(Cause::RateLimited)
        );
        assert_eq!(
            a(Some("overloaded_error"), None, Some(TIER)),
            Some(Cause::Overloaded)
        );
        assert_eq!(
            a(
                Some("rate_limit_error"),
                Some(ANTHROPIC_RAMP_CODE),
                Some(TIER)
            ),
            Some(Cause::AccelerationLimited)
        );
        assert_eq!(
            o(
                Some("invalid_request_error"),
                Some("billing_hard_limit_reached"),
                None
            ),
            Some(Cause::SpendCap)
        );
        // A bare rate-limit type, a plain invalid request or nothing known:
        // the message may say money.
        assert_eq!(
            a(Some("rate_limit_error"), None, Some(TIER)),
            Some(Cause::SpendCap)
        );
        assert_eq!(
            a(Some("rate_limit_error"), Some("future_code"), Some(TIER)),
            Some(Cause::SpendCap)
        );
        assert_eq!(
            o(None, Some("future_code"), Some(QUOTA)),
            Some(Cause::SpendCap)
        );
        assert_eq!(
            o(
                Some("invalid_request_error"),
                None,
                Some("Billing hard limit has been reached")
            ),
            Some(Cause::UserLimit)
        );
        // ... and otherwise the class stands.
        assert_eq!(
            a(Some("rate_limit_error"), None, Some("Rate limited")),
            Some(Cause::RateLimited)
        );
        assert_eq!(o(None, Some("future_code"), Some("x")), None);
        // The generic profile reads no body at all.
        assert_eq!(
            cause_of_error(Provider::Generic, f(None, None, Some(QUOTA))),
            None
        );
    }

    #[test]
    fn generic_reads_no_body() {
        let fields = f(Some("overloaded_error"), None, None);
        assert_eq!(cause_of_error(Provider::Generic, fields), None);
    }
}
