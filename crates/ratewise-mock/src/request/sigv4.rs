//! AWS Signature Version 4, as Bedrock checks it: the `Authorization`
//! header's shape (`AWS4-HMAC-SHA256 Credential=AKID/yyyymmdd/region/service/aws4_request,
//! SignedHeaders=…, Signature=<64 hex>`) and, given the secret of the
//! access key id, the signature itself: the canonical request, the string
//! to sign and the derived key, over HMAC-SHA256.
//!
//! Source: AWS, "Create a signed AWS API request"
//! (<https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html>).
//! The path of a service other than S3 is URI-encoded twice (a `%3A` the
//! client sent is signed as `%253A`). Pure functions: untrusted input
//! gives an error message, never a panic.

use http::HeaderMap;
use sha2::{Digest, Sha256};

/// The only algorithm accepted.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// The parts of a SigV4 `Authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization<'a> {
    /// The access key id (`Credential=` up to the first `/`).
    pub access_key_id: &'a str,
    /// The scope's date, `yyyymmdd`.
    pub date: &'a str,
    /// The scope's region.
    pub region: &'a str,
    /// The scope's service (`bedrock`).
    pub service: &'a str,
    /// `SignedHeaders`, lower case, in the order given.
    pub signed_headers: Vec<&'a str>,
    /// `Signature`: 64 lower-case hex digits.
    pub signature: &'a str,
}

/// Reads a SigV4 `Authorization` value, or says what is missing or
/// malformed (the message of Bedrock's `IncompleteSignatureException`).
///
/// ```
/// use ratewise_mock::request::sigv4::parse_authorization;
/// let value = format!(
///     "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/bedrock/aws4_request, \
///      SignedHeaders=host;x-amz-date, Signature={}", "0a".repeat(32));
/// let a = parse_authorization(&value).unwrap();
/// assert_eq!((a.access_key_id, a.region, a.service), ("AKID", "us-east-1", "bedrock"));
/// assert!(parse_authorization("AWS4-HMAC-SHA256 Credential=AKID/20260101").is_err());
/// ```
pub fn parse_authorization(value: &str) -> Result<Authorization<'_>, String> {
    let rest = value
        .strip_prefix(ALGORITHM)
        .filter(|r| r.starts_with(' '))
        .ok_or_else(|| format!("Unsupported Authorization Type: only {ALGORITHM} is accepted"))?;
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("Credential=") {
            credential = Some(v);
        } else if let Some(v) = part.strip_prefix("SignedHeaders=") {
            signed = Some(v);
        } else if let Some(v) = part.strip_prefix("Signature=") {
            signature = Some(v);
        }
    }
    let mut missing = Vec::new();
    for (name, v) in [
        ("Credential", credential),
        ("Signature", signature),
        ("SignedHeaders", signed),
    ] {
        if v.is_none_or(str::is_empty) {
            missing.push(format!("Authorization header requires '{name}' parameter."));
        }
    }
    let (Some(credential), Some(signed), Some(signature)) = (credential, signed, signature) else {
        return Err(missing.join(" "));
    };
    if !missing.is_empty() {
        return Err(missing.join(" "));
    }
    let scope: Vec<&str> = credential.split('/').collect();
    let [access_key_id, date, region, service, terminator] = scope[..] else {
        return Err(format!(
            "Credential should have 5 parts (AKID/yyyymmdd/region/service/aws4_request), not {}.",
            scope.len()
        ));
    };
    if access_key_id.is_empty() || !access_key_id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err("Credential's access key id is not one.".into());
    }
    if date.len() != 8 || !date.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("Credential's date '{date}' is not yyyymmdd."));
    }
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if !token(region) || !token(service) || terminator != "aws4_request" {
        return Err("Credential's scope is not region/service/aws4_request.".into());
    }
    let signed_headers: Vec<&str> = signed.split(';').collect();
    let well_formed = signed_headers.iter().all(|h| {
        !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    });
    if !well_formed || !signed_headers.windows(2).all(|w| w[0] < w[1]) {
        return Err(
            "SignedHeaders must be lower-case header names, sorted, separated by ';'.".into(),
        );
    }
    if signature.len() != 64
        || !signature
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err("Signature must be 64 lower-case hex digits.".into());
    }
    Ok(Authorization {
        access_key_id,
        date,
        region,
        service,
        signed_headers,
        signature,
    })
}

/// Whether `v` is an ISO 8601 basic UTC instant, `yyyymmddThhmmssZ`
/// (`x-amz-date`).
pub fn is_amz_date(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() == 16
        && b[8] == b'T'
        && b[15] == b'Z'
        && b[..8].iter().chain(&b[9..15]).all(u8::is_ascii_digit)
}

/// HMAC-SHA256 (RFC 2104) over [`sha2`].
///
/// ```
/// // RFC 4231, test case 2.
/// let mac = ratewise_mock::request::sigv4::hmac_sha256(b"Jefe", b"what do ya want for nothing?");
/// assert_eq!(ratewise_mock::request::sigv4::hex(&mac),
///     "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
/// ```
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(data)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `hex(sha256(data))`: the payload hash.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// SigV4's URI encoding: every byte but `A-Z a-z 0-9 - . _ ~` as `%XX`
/// (`/` kept when `keep_slash`).
pub fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'.' | b'_' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hexval = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hexval(b[i + 1]), hexval(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The canonical request: method, the path as sent encoded once more,
/// the sorted query, the signed headers (`name:value`, spaces collapsed),
/// their names, the payload hash.
pub fn canonical_request(
    method: &str,
    raw_path: &str,
    raw_query: &str,
    headers: &HeaderMap,
    signed_headers: &[&str],
    payload_hash: &str,
) -> String {
    let path = if raw_path.is_empty() { "/" } else { raw_path };
    let mut query: Vec<(String, String)> = raw_query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (
                uri_encode(&percent_decode(k), false),
                uri_encode(&percent_decode(v), false),
            )
        })
        .collect();
    query.sort();
    let query: Vec<String> = query.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut canonical_headers = String::new();
    for name in signed_headers {
        let values: Vec<String> = headers
            .get_all(*name)
            .iter()
            .map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        canonical_headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    format!(
        "{method}\n{}\n{}\n{canonical_headers}\n{}\n{payload_hash}",
        uri_encode(path, true),
        query.join("&"),
        signed_headers.join(";")
    )
}

/// The key derived from `secret` for one day, region and service.
pub fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
    let k = hmac_sha256(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k = hmac_sha256(&k, region.as_bytes());
    let k = hmac_sha256(&k, service.as_bytes());
    hmac_sha256(&k, b"aws4_request")
}

/// The signature of `canonical_request` at `amz_date` under the scope
/// `date/region/service/aws4_request`.
///
/// ```
/// use ratewise_mock::request::sigv4::{canonical_request, sha256_hex, signature};
/// // AWS's SigV4 test suite, `get-vanilla`.
/// let mut h = http::HeaderMap::new();
/// h.insert("host", "example.amazonaws.com".parse().unwrap());
/// h.insert("x-amz-date", "20150830T123600Z".parse().unwrap());
/// let cr = canonical_request("GET", "/", "", &h, &["host", "x-amz-date"], &sha256_hex(b""));
/// assert_eq!(
///     signature("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20150830T123600Z",
///         "20150830", "us-east-1", "service", &cr),
///     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
/// ```
pub fn signature(
    secret: &str,
    amz_date: &str,
    date: &str,
    region: &str,
    service: &str,
    canonical_request: &str,
) -> String {
    let string_to_sign = format!(
        "{ALGORITHM}\n{amz_date}\n{date}/{region}/{service}/aws4_request\n{}",
        sha256_hex(canonical_request.as_bytes())
    );
    hex(&hmac_sha256(
        &signing_key(secret, date, region, service),
        string_to_sign.as_bytes(),
    ))
}

/// Compares two strings in time independent of where they differ.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}
