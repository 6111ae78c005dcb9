//! Workspace-internal: used by ratewise's own crates; not part of the public API and not covered by semver.
//! (The fuzz targets' reference reader, behind the `fixtures` feature.)

use super::{parse_error_serde, prefix, ProviderError, Unreadable};

/// [`parse_error_body`](super::parse_error_body) without the envelope fast path: serde_json alone.
/// The reference the fast path must agree with on every input; the
/// `error_body` fuzz target compares the two. Not for production use:
/// behind the `fixtures` feature.
pub fn parse_error_body_reference(body: &[u8]) -> Result<ProviderError, Unreadable> {
    let (bytes, truncated) = prefix(body)?;
    parse_error_serde(bytes, truncated).map(|e| e.to_owned_error())
}
