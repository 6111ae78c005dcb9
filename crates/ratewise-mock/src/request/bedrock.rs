//! Reading a Bedrock `Converse` request: the route
//! (`/model/{modelId}/converse`), the caller ([`authenticate`]: a SigV4
//! `Authorization` checked as Bedrock checks it — its shape always, its
//! signature when the mock knows the access key's secret — or a Bedrock
//! API key as a Bearer token) and the body's fields (`messages`, `system`,
//! `inferenceConfig.maxTokens`). Pure functions; untrusted input gives
//! `None` or the error's message, never a panic.

use super::sigv4::{self, Authorization};
use super::{header_str, truncate, ParsedRequest};
use crate::tokens::{self, INPUT_TOKENS_HEADER};
use http::HeaderMap;
use serde_json::Value;
use std::collections::BTreeMap;

/// `maxTokens` of a request that sets none (**a choice**: Bedrock's
/// default is the model's own maximum).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// The model of a `POST /model/{modelId}/converse` path (`%3A` decoded to
/// `:`, at most 256 bytes); `None` for any other path.
///
/// ```
/// use ratewise_mock::request::bedrock::route;
/// assert_eq!(route("/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse").as_deref(),
///     Some("anthropic.claude-3-haiku-20240307-v1:0"));
/// assert_eq!(route("/model//converse"), None);
/// assert_eq!(route("/model/m/converse-stream"), None);
/// ```
pub fn route(path: &str) -> Option<String> {
    let model = path.strip_prefix("/model/")?.strip_suffix("/converse")?;
    let model = model.replace("%3A", ":").replace("%3a", ":");
    (!model.is_empty() && !model.contains('/')).then(|| truncate(&model, 256))
}

/// The caller as it claims to be, nothing checked: a SigV4
/// `Authorization`'s access key id (`Credential=AKID/…`), else a Bearer
/// token (Bedrock API keys). The server uses [`authenticate`].
pub fn api_key(h: &HeaderMap) -> Option<&str> {
    let auth = header_str(h, "authorization")?;
    if let Some(rest) = auth.strip_prefix("AWS4-HMAC-SHA256") {
        let cred = rest.split_once("Credential=")?.1;
        let akid = cred.split(['/', ',']).next()?.trim();
        return (!akid.is_empty()).then_some(akid);
    }
    auth.strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|k| !k.is_empty())
}

/// Why a Bedrock request is refused before the model sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    /// No `Authorization` at all: 403 `MissingAuthenticationTokenException`.
    Missing,
    /// A SigV4 `Authorization` or `x-amz-date` that is malformed or lacks
    /// a part: 400 `IncompleteSignatureException`.
    Incomplete(String),
    /// A well-formed signature that does not hold (wrong service or date
    /// in the scope, a signed header not sent, a payload hash or a
    /// signature that differs): 403 `InvalidSignatureException`.
    Invalid(String),
    /// An access key id the mock has no secret for, when it has some: 403
    /// `UnrecognizedClientException`.
    Unrecognized,
}

/// The message of a signature that does not match (Bedrock's words).
pub const SIGNATURE_MISMATCH: &str = "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.";

impl AuthFailure {
    /// The answer's status.
    pub fn status(&self) -> u16 {
        match self {
            AuthFailure::Incomplete(_) => 400,
            _ => 403,
        }
    }

    /// The exception named in `x-amzn-ErrorType`.
    pub fn kind(&self) -> &'static str {
        match self {
            AuthFailure::Missing => "MissingAuthenticationTokenException",
            AuthFailure::Incomplete(_) => "IncompleteSignatureException",
            AuthFailure::Invalid(_) => "InvalidSignatureException",
            AuthFailure::Unrecognized => "UnrecognizedClientException",
        }
    }

    /// The body's `message`.
    pub fn message(&self) -> &str {
        match self {
            AuthFailure::Missing => "Missing Authentication Token",
            AuthFailure::Incomplete(m) | AuthFailure::Invalid(m) => m,
            AuthFailure::Unrecognized => "The security token included in the request is invalid.",
        }
    }
}

/// The caller of a Bedrock request, checked as Bedrock checks it: a
/// Bearer token (a Bedrock API key) as it is; a SigV4 `Authorization`'s
/// shape ([`sigv4::parse_authorization`]: `Credential=AKID/yyyymmdd/region/bedrock/aws4_request`,
/// sorted `SignedHeaders` naming `host` and `x-amz-date`, a 64-hex
/// `Signature`), an `x-amz-date` of the credential's day, every signed
/// header sent, an `x-amz-content-sha256` (if sent) equal to the body's
/// hash; and, when `secrets` (access key id → secret access key) is not
/// empty, the signature itself. Not checked: the region, the clock skew
/// (tests sign fixed dates), a session token.
pub fn authenticate<'a>(
    method: &str,
    raw_path: &str,
    raw_query: &str,
    h: &'a HeaderMap,
    body: &[u8],
    secrets: &BTreeMap<String, String>,
) -> Result<&'a str, AuthFailure> {
    let auth = header_str(h, "authorization")
        .filter(|a| !a.is_empty())
        .ok_or(AuthFailure::Missing)?;
    if let Some(token) = auth.strip_prefix("Bearer ") {
        let token = token.trim();
        return if token.is_empty() {
            Err(AuthFailure::Missing)
        } else {
            Ok(token)
        };
    }
    let a = sigv4::parse_authorization(auth).map_err(AuthFailure::Incomplete)?;
    check_signature(&a, method, raw_path, raw_query, h, body, secrets)?;
    Ok(a.access_key_id)
}

fn check_signature(
    a: &Authorization<'_>,
    method: &str,
    raw_path: &str,
    raw_query: &str,
    h: &HeaderMap,
    body: &[u8],
    secrets: &BTreeMap<String, String>,
) -> Result<(), AuthFailure> {
    let amz_date = header_str(h, "x-amz-date").ok_or_else(|| {
        AuthFailure::Incomplete(
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header."
                .into(),
        )
    })?;
    if !sigv4::is_amz_date(amz_date) {
        return Err(AuthFailure::Incomplete(
            "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"".into(),
        ));
    }
    for required in ["host", "x-amz-date"] {
        if !a.signed_headers.contains(&required) {
            return Err(AuthFailure::Incomplete(format!(
                "'{required}' must be a 'SignedHeader' in the AWS Authorization."
            )));
        }
    }
    if a.service != "bedrock" {
        return Err(AuthFailure::Invalid(
            "Credential should be scoped to correct service: 'bedrock'.".into(),
        ));
    }
    if &amz_date[..8] != a.date {
        return Err(AuthFailure::Invalid(format!(
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '{}' != '{}', from '{amz_date}'.",
            a.date,
            &amz_date[..8]
        )));
    }
    if let Some(name) = a.signed_headers.iter().find(|n| !h.contains_key(**n)) {
        return Err(AuthFailure::Invalid(format!(
            "The signed header '{name}' is not in the request."
        )));
    }
    let payload_hash = sigv4::sha256_hex(body);
    if header_str(h, "x-amz-content-sha256").is_some_and(|v| !v.eq_ignore_ascii_case(&payload_hash))
    {
        return Err(AuthFailure::Invalid(
            "The provided 'x-amz-content-sha256' header does not match what was computed.".into(),
        ));
    }
    if secrets.is_empty() {
        return Ok(());
    }
    let secret = secrets
        .get(a.access_key_id)
        .ok_or(AuthFailure::Unrecognized)?;
    let canonical = sigv4::canonical_request(
        method,
        raw_path,
        raw_query,
        h,
        &a.signed_headers,
        &payload_hash,
    );
    let expected = sigv4::signature(secret, amz_date, a.date, a.region, a.service, &canonical);
    if sigv4::same(&expected, a.signature) {
        Ok(())
    } else {
        Err(AuthFailure::Invalid(SIGNATURE_MISMATCH.into()))
    }
}

/// The fields of a `Converse` body, or the `ValidationException`'s message.
pub fn parse(body: &[u8], h: &HeaderMap, model: &str) -> Result<ParsedRequest, String> {
    let v: Value = serde_json::from_slice(body).map_err(|_| {
        "Malformed input request, please reformat your input and try again.".to_string()
    })?;
    let obj = v
        .as_object()
        .ok_or("Malformed input request, please reformat your input and try again.")?;
    if !obj.get("messages").is_some_and(Value::is_array) {
        return Err("The model returned the following errors: messages: field required".into());
    }
    let max_tokens = match obj.get("inferenceConfig").and_then(|c| c.get("maxTokens")) {
        None => DEFAULT_MAX_TOKENS,
        Some(m) => m
            .as_u64()
            .filter(|m| *m > 0)
            .ok_or("1 validation error detected: Value at 'inferenceConfig.maxTokens' failed to satisfy constraint: Member must have value greater than or equal to 1")?,
    };
    let input_tokens = header_str(h, INPUT_TOKENS_HEADER)
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| tokens::estimate_input_tokens_of(&v, &["system", "messages"]));
    Ok(ParsedRequest {
        model: model.to_string(),
        max_tokens,
        stream: false,
        include_usage: false,
        input_tokens,
    })
}
