//! Amazon Bedrock's runtime errors: the exception's name in the
//! `x-amzn-ErrorType` header (`ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/`)
//! and a flat body, `{"message": "Too many tokens, please wait before
//! trying again."}` (`Message` in some services). No rate-limit headers.
//!
//! Source (as issue #36 cites it and from memory of the page; not re-read
//! when this was written): docs.aws.amazon.com, Bedrock runtime API
//! reference, `InvokeModel` / `Converse` errors: `ThrottlingException`
//! (429), `ModelNotReadyException` (429, "retry"), `ServiceUnavailableException`
//! (503), `ModelTimeoutException` (408), `InternalServerException` (500),
//! `ModelErrorException` (424), `ValidationException` (400),
//! `AccessDeniedException` (403), `ResourceNotFoundException` (404),
//! `ServiceQuotaExceededException` (400).

use crate::parse::body::ErrorFields;
use crate::parse::body::{MAX_BODY_PREFIX, MAX_MESSAGE_LEN};
use crate::vocab::Cause;
use http::HeaderMap;
use serde::Deserialize;

/// The header that names the exception.
pub(crate) const ERROR_TYPE: &str = "x-amzn-errortype";

/// A Bedrock error: the exception's name and the body's message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct BedrockError {
    /// `ThrottlingException`, without the header's `:namespace` part.
    pub kind: Option<String>,
    /// The body's `message` (or `Message`), clipped.
    pub message: Option<String>,
}

impl BedrockError {
    /// The fields the code table reads: the exception's name stands in for
    /// `error.type`.
    pub(crate) fn fields(&self) -> ErrorFields<'_> {
        ErrorFields {
            error_type: self.kind.as_deref(),
            code: None,
            message: self.message.as_deref(),
        }
    }
}

/// Reads the exception's name from the header and the message from the
/// body; `None` when neither says anything.
pub(crate) fn read(headers: &HeaderMap, body: &[u8]) -> Option<BedrockError> {
    let kind = headers
        .get(ERROR_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(':').next().unwrap_or("").trim())
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .map(str::to_owned);
    let bytes = &body[..body.len().min(MAX_BODY_PREFIX)];
    let message = serde_json::from_slice::<Flat>(bytes)
        .ok()
        .and_then(|f| f.message.or(f.upper))
        .map(|m| crate::parse::clip(&m, MAX_MESSAGE_LEN).to_owned());
    (kind.is_some() || message.is_some()).then_some(BedrockError { kind, message })
}

/// The exception's name → cause; `None` for a name not documented.
pub(crate) fn cause_of_kind(kind: &str) -> Option<Cause> {
    Some(match kind {
        "ThrottlingException" => Cause::RateLimited,
        // "The model specified is not ready to serve inference requests.
        // The AWS SDK will automatically retry": transient.
        "ModelNotReadyException" | "ServiceUnavailableException" => Cause::Overloaded,
        "ModelTimeoutException" => Cause::Timeout,
        "InternalServerException" | "ModelErrorException" => Cause::ServerError,
        "ValidationException" => Cause::InvalidRequest,
        // "Your request exceeds the service quota for your account ... You
        // can resubmit your request later": a quota to wait out.
        "ServiceQuotaExceededException" => Cause::RateLimited,
        "AccessDeniedException" => Cause::Permission,
        "UnrecognizedClientException" => Cause::Authentication,
        // SigV4 refused (a wrong secret, a malformed or missing signature):
        // the credentials are at fault, not this request — the key stops
        // (in a pool, that member) until a human fixes them.
        "InvalidSignatureException"
        | "IncompleteSignatureException"
        | "MissingAuthenticationTokenException" => Cause::Authentication,
        "ResourceNotFoundException" => Cause::NotFound,
        _ => return None,
    })
}

#[derive(Deserialize)]
struct Flat {
    #[serde(default)]
    message: Option<String>,
    #[serde(default, rename = "Message")]
    upper: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_refusals_are_the_credentials_fault() {
        for kind in [
            "InvalidSignatureException",
            "IncompleteSignatureException",
            "MissingAuthenticationTokenException",
            "UnrecognizedClientException",
        ] {
            assert_eq!(cause_of_kind(kind), Some(Cause::Authentication), "{kind}");
        }
    }

    #[test]
    fn the_header_names_the_exception_and_the_body_says_why() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-amzn-ErrorType",
            "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"
                .parse()
                .unwrap(),
        );
        let e = read(
            &h,
            br#"{"message":"Too many tokens, please wait before trying again."}"#,
        )
        .unwrap();
        assert_eq!(e.kind.as_deref(), Some("ThrottlingException"));
        assert_eq!(
            cause_of_kind(e.kind.as_deref().unwrap()),
            Some(Cause::RateLimited)
        );
        assert!(e.message.unwrap().starts_with("Too many tokens"));
        assert_eq!(read(&HeaderMap::new(), b"<html>"), None);
        assert_eq!(
            read(&HeaderMap::new(), br#"{"Message":"m"}"#)
                .unwrap()
                .message
                .as_deref(),
            Some("m")
        );
        assert_eq!(cause_of_kind("SomethingNewException"), None);
    }
}
