//! What a request is expected to cost before it is sent.
//!
//! Input: an explicit estimate (a `count_tokens` result) when the caller has
//! one, else a byte heuristic of **one token per 4 bytes, rounded up**
//! ([`input_from_bytes`]), the usual rule of thumb for English text and JSON
//! with both providers' tokenizers. Output: pluggable through
//! [`OutputEstimator`]; the default [`MaxTokens`] reserves `max_tokens`,
//! mirroring Anthropic's documented OTPM accounting (charged at `max_tokens`
//! when a request starts, corrected at its end).

/// Input tokens estimated from a request body's size: `ceil(bytes / 4)`.
pub const fn input_from_bytes(bytes: u64) -> u64 {
    bytes.div_ceil(4)
}

/// Reserves output tokens for a request.
pub trait OutputEstimator: std::fmt::Debug + Send + Sync {
    /// Output tokens to reserve for a request with this `max_tokens` (if
    /// given) and input estimate.
    fn output_estimate(&self, max_tokens: Option<u64>, input_estimate: u64) -> u64;
}

/// Reserves `max_tokens` (or `default` when the request sets none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxTokens {
    /// Reserved when a request carries no `max_tokens`.
    pub default: u64,
}

impl Default for MaxTokens {
    fn default() -> Self {
        MaxTokens { default: 4096 }
    }
}

impl OutputEstimator for MaxTokens {
    fn output_estimate(&self, max_tokens: Option<u64>, _input: u64) -> u64 {
        max_tokens.unwrap_or(self.default)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_token_per_four_bytes_rounded_up() {
        assert_eq!(super::input_from_bytes(9), 3);
        assert_eq!(super::input_from_bytes(8), 2);
        assert_eq!(super::input_from_bytes(0), 0);
    }
}
