//! A pool as a configuration file writes it (`[[pools]]` in `ratewise
//! proxy --config` and `ratewise run --config`): one reader for both.

use super::{HttpRoute, Pool, PoolMember};
use ratewise_core::Provider;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// One `[[pools]]` table.
///
/// ```
/// use ratewise_tower::pool::PoolSpec;
///
/// let spec: PoolSpec = serde_json::from_value(serde_json::json!({
///     "name": "claude",
///     "caller_key": "sk-team-claude",
///     "provider": "anthropic",
///     "members": [
///         { "upstream": "https://api.anthropic.com", "key_env": "KEY_MAIN", "weight": 70 },
///         { "upstream": "https://api.anthropic.com", "key_env": "KEY_BACKUP", "weight": 30 }
///     ]
/// })).unwrap();
/// let env = |name: &str| Some(format!("secret-of-{name}"));
/// let pool = spec.build(env).unwrap();
/// assert_eq!(pool.members().len(), 2);
/// assert_eq!(pool.members()[0].core().weight, 70);
/// // A variable that is not set is an error that names it (never a value).
/// let err = spec.build(|_| None).unwrap_err();
/// assert!(err.to_string().contains("KEY_MAIN"));
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PoolSpec {
    /// Its name (status pages, logs).
    pub name: String,
    /// The key a caller presents to be routed to this pool (the proxy):
    /// what its SDK sends as its API key. Never sent upstream.
    #[serde(default)]
    pub caller_key: Option<String>,
    /// Every member's provider, unless the member says its own: a word
    /// of [`Provider`] (`anthropic`, `openai`, `azure`, ...). Without
    /// either, the upstream's host decides.
    #[serde(default)]
    pub provider: Option<String>,
    /// Its members.
    pub members: Vec<MemberSpec>,
    /// Its callers as one tenant of the key's queue (the proxy): their
    /// priority level unless their `x-ratewise-priority` names one
    /// (default: the default level). See [`crate::Workload`].
    #[serde(default)]
    pub level: Option<String>,
    /// Its callers' flow's weight within their level (default 1): a pool
    /// of weight 2 gets twice the tokens of a pool of weight 1 while both
    /// wait. Not a member's `weight` (how a pool spreads its jobs).
    #[serde(default)]
    pub weight: Option<u32>,
    /// The share of what is admitted its callers keep while they have work
    /// waiting, in `[0, 1)` (default none).
    #[serde(default)]
    pub floor: Option<f64>,
}

/// One `[[pools.members]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct MemberSpec {
    /// Its base URL (`https://api.anthropic.com`, an Azure endpoint).
    pub upstream: String,
    /// The environment variable holding its key (the key itself is never
    /// written in a configuration file).
    pub key_env: String,
    /// Its provider, when not the pool's.
    #[serde(default)]
    pub provider: Option<String>,
    /// Its weight (default 1).
    #[serde(default)]
    pub weight: Option<u32>,
    /// Model names as callers say them → as this upstream names them (an
    /// Azure deployment, a Bedrock id).
    #[serde(default)]
    pub models: BTreeMap<String, String>,
    /// Azure OpenAI's `api-version` (default `2024-10-21`).
    #[serde(default)]
    pub api_version: Option<String>,
}

/// Why a [`PoolSpec`] could not become a [`Pool`]. Names the pool, the
/// member and the variable; never a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError(String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SpecError {}

fn provider_word(word: &str) -> Option<Provider> {
    Provider::from_word(&word.trim().to_ascii_lowercase())
}

impl PoolSpec {
    /// The pool, each member's key read through `env` (a variable's
    /// value, `std::env::var(..).ok()` in a program).
    pub fn build(&self, env: impl Fn(&str) -> Option<String>) -> Result<Pool, SpecError> {
        let name = &self.name;
        if name.trim().is_empty() {
            return Err(SpecError("a pool needs a name".into()));
        }
        if self.members.is_empty() {
            return Err(SpecError(format!("pool {name:?} has no members")));
        }
        if self
            .caller_key
            .as_deref()
            .is_some_and(|k| k.trim().is_empty())
        {
            return Err(SpecError(format!("pool {name:?}: caller_key is empty")));
        }
        let pool_provider = match &self.provider {
            Some(w) => Some(provider_word(w).ok_or_else(|| {
                SpecError(format!("pool {name:?}: provider {w:?} is not a provider"))
            })?),
            None => None,
        };
        let mut pool = Pool::new();
        for (i, m) in self.members.iter().enumerate() {
            let at = format!("pool {name:?} member {}", i + 1);
            let provider =
                match &m.provider {
                    Some(w) => Some(provider_word(w).ok_or_else(|| {
                        SpecError(format!("{at}: provider {w:?} is not a provider"))
                    })?),
                    None => pool_provider,
                };
            let provider = provider
                .or_else(|| {
                    m.upstream
                        .parse::<http::Uri>()
                        .ok()
                        .and_then(|u| u.host().and_then(Provider::from_host))
                })
                .ok_or_else(|| {
                    SpecError(format!(
                        "{at}: say its provider (the host of {:?} is not a known API)",
                        m.upstream
                    ))
                })?;
            let key = env(&m.key_env)
                .filter(|k| !k.trim().is_empty())
                .ok_or_else(|| {
                    SpecError(format!(
                        "{at}: the environment variable {} (key_env) is not set",
                        m.key_env
                    ))
                })?;
            let route =
                HttpRoute::for_provider(provider, &m.upstream, &key, m.api_version.as_deref())
                    .map_err(|e| SpecError(format!("{at}: {e}")))?;
            let mut member = PoolMember::new(route).weight(m.weight.unwrap_or(1));
            for (from, to) in &m.models {
                member = member.model(from, to);
            }
            pool = pool.member(member);
        }
        Ok(pool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(members: serde_json::Value) -> PoolSpec {
        serde_json::from_value(serde_json::json!({"name": "p", "members": members})).unwrap()
    }

    #[test]
    fn providers_come_from_the_member_the_pool_or_the_host() {
        let s = spec(serde_json::json!([
            {"upstream": "https://api.openai.com", "key_env": "A"},
            {"upstream": "http://127.0.0.1:1", "key_env": "B", "provider": "azure",
             "models": {"gpt-4o": "gpt4o-prod"}, "api_version": "2024-06-01"}
        ]));
        let pool = s.build(|_| Some("k".into())).unwrap();
        assert_eq!(pool.members()[0].core().provider, Provider::Openai);
        assert_eq!(pool.members()[1].core().provider, Provider::Azure);
        assert_eq!(pool.members()[1].core().model_for("gpt-4o"), "gpt4o-prod");
        let unknown = spec(serde_json::json!([{"upstream": "http://127.0.0.1:1", "key_env": "A"}]));
        let e = unknown.build(|_| Some("k".into())).unwrap_err();
        assert!(e.to_string().contains("say its provider"), "{e}");
    }

    #[test]
    fn errors_name_the_variable_never_the_key() {
        let s = spec(serde_json::json!([
            {"upstream": "not a url", "key_env": "A", "provider": "openai"}
        ]));
        let e = s
            .build(|_| Some("sk-secret".into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("member 1") && !e.contains("sk-secret"), "{e}");
        let e = spec(serde_json::json!([])).build(|_| None).unwrap_err();
        assert!(e.to_string().contains("no members"));
        let bad: Result<PoolSpec, _> = serde_json::from_value(serde_json::json!({
            "name": "p", "members": [], "colour": "red"
        }));
        assert!(bad.is_err());
    }
}
