//! One member of a pool: an upstream, its provider profile, the key it is
//! sent with (the admission scope), a weight and an optional model-name
//! mapping.

use crate::vocab::Provider;
use std::fmt;

/// A member's number in its [`Pool`](super::Pool), in the order it was
/// added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId(pub(crate) u16);

impl MemberId {
    /// Its index in [`Pool::members`](super::Pool::members).
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "m{}", self.0)
    }
}

/// One upstream and key of a pool.
///
/// `upstream` names where requests go (`api.anthropic.com`, a Bedrock
/// region, an OpenAI-compatible host): members with the same upstream
/// share its overload — a 529 from one holds them all — and "another
/// provider" means another upstream. `key` is the key's fingerprint or
/// label, as the store knows it: each member is admitted in its own
/// (key, model class) scope, with its own buckets, learned limits and
/// stops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Where its requests go.
    pub upstream: String,
    /// How its answers are read.
    pub provider: Provider,
    /// Its key's fingerprint or label: its admission scope.
    pub key: String,
    /// Its weight (at least 1): breaks ties between members that can go
    /// at once, and bounds its share of sends among them.
    pub weight: u32,
    /// Model names as the pool's callers say them → as this upstream
    /// names them (Bedrock's `anthropic.claude-…` ids, a host's aliases).
    pub models: Vec<(String, String)>,
}

impl Member {
    /// A member of weight 1 with no model mapping.
    pub fn new(upstream: impl Into<String>, provider: Provider, key: impl Into<String>) -> Self {
        Member {
            upstream: upstream.into(),
            provider,
            key: key.into(),
            weight: 1,
            models: Vec::new(),
        }
    }

    /// The same with weight `weight` (0 is taken as 1).
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight.max(1);
        self
    }

    /// The same, sending the pool's model `from` as `to`.
    pub fn model(mut self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.models.push((from.into(), to.into()));
        self
    }

    /// The name `model` has on this member's upstream: its mapping, or
    /// `model` itself.
    pub fn model_for<'a>(&'a self, model: &'a str) -> &'a str {
        self.models
            .iter()
            .find(|(from, _)| from == model)
            .map_or(model, |(_, to)| to.as_str())
    }

    /// Its weight, never 0.
    pub(crate) fn w(&self) -> u64 {
        u64::from(self.weight.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_map_per_member_and_default_to_themselves() {
        let m = Member::new("bedrock-us-east-1", Provider::Bedrock, "aws-1")
            .model("claude-sonnet-4-5", "anthropic.claude-sonnet-4-5-v1:0");
        assert_eq!(
            m.model_for("claude-sonnet-4-5"),
            "anthropic.claude-sonnet-4-5-v1:0"
        );
        assert_eq!(m.model_for("claude-haiku-4-5"), "claude-haiku-4-5");
    }

    #[test]
    fn a_zero_weight_counts_as_one() {
        let m = Member::new("u", Provider::Generic, "k").weight(0);
        assert_eq!(m.weight, 1);
        assert_eq!(m.w(), 1);
        assert_eq!(MemberId(2).to_string(), "m2");
        assert_eq!(MemberId(2).index(), 2);
    }
}
