//! Token usage as providers report it, and what counts toward each bucket.

use serde::{Deserialize, Serialize};

/// Token usage of one request, in Anthropic's terms (OpenAI's
/// `prompt_tokens` / `completion_tokens` map to `input_tokens` /
/// `output_tokens`; its `cached_tokens` are a part of `prompt_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Uncached input tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Generated tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens written to the prompt cache.
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    /// Input tokens read from the prompt cache.
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

impl Usage {
    /// Input tokens that count toward the input-tokens-per-minute limit:
    /// `input_tokens + cache_creation_input_tokens`. Cache reads do not
    /// count (Anthropic's documented rule for current models).
    pub const fn rate_limited_input(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_creation_input_tokens)
    }

    /// Every input token billed: `input_tokens +
    /// cache_creation_input_tokens + cache_read_input_tokens`, saturating
    /// (provider numbers are untrusted: a huge one never wraps).
    ///
    /// ```
    /// use ratewise_core::Usage;
    /// let u = Usage { input_tokens: 10, cache_creation_input_tokens: 2, cache_read_input_tokens: u64::MAX, ..Usage::default() };
    /// assert_eq!(u.billed_input(), u64::MAX);
    /// ```
    pub const fn billed_input(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_creation_input_tokens)
            .saturating_add(self.cache_read_input_tokens)
    }

    /// Everything billed, for the spend window: all input (cache reads
    /// included) plus output.
    pub const fn total_tokens(&self) -> u64 {
        self.billed_input().saturating_add(self.output_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::Usage;

    #[test]
    fn billed_input_adds_cache_writes_and_reads_and_saturates() {
        let u = Usage {
            input_tokens: 10,
            output_tokens: 40,
            cache_creation_input_tokens: 2,
            cache_read_input_tokens: 3,
        };
        assert_eq!(u.billed_input(), 15);
        assert_eq!(u.total_tokens(), 55);
        let huge = Usage {
            input_tokens: 1,
            output_tokens: u64::MAX,
            cache_creation_input_tokens: u64::MAX,
            cache_read_input_tokens: u64::MAX,
        };
        assert_eq!(huge.billed_input(), u64::MAX);
        assert_eq!(huge.total_tokens(), u64::MAX);
    }
}
