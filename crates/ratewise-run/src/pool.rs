//! A run through a pool: `[[pools]]` tables in `--config`, several keys'
//! limits spent by one file (issue #40).
//!
//! ```toml
//! [[pools]]
//! name = "claude"
//! provider = "anthropic"
//! [[pools.members]]
//! upstream = "https://api.anthropic.com"
//! key_env = "ANTHROPIC_KEY_MAIN"       # the key is read from the environment
//! weight = 70
//! [[pools.members]]
//! upstream = "https://api.anthropic.com"
//! key_env = "ANTHROPIC_KEY_BACKUP"
//! weight = 30
//! ```
//!
//! Each table is read by the tower layer's own reader
//! ([`PoolSpec`], the one `ratewise proxy --config` reads): one pool is
//! used, the only one or the one `--pool NAME` names; with none the run
//! is a run of one key, as it always was. The run's layer is built with
//! [`Builder::pool`](ratewise_tower::Builder::pool): every attempt goes to
//! the member that can admit it soonest, rewritten for it (URL, key,
//! model), each member paced under its own key's fingerprint.
//!
//! A pool replaces the run's one key and upstream: `--upstream`, and
//! `upstream` or `api_key` in the config (or [`Run::api_key`](crate::Run::api_key)),
//! beside a pool are refused ([`PoolError::Conflict`]); the environment's
//! `OPENAI_API_KEY` / `ANTHROPIC_API_KEY` is not read. The batch APIs are
//! per key: `--via batch` and `--via auto` are refused
//! ([`PoolError::Via`]), and so is a store with batches still open at the
//! provider ([`PoolError::OpenBatches`]). A member's `caller_key` is the
//! proxy's and is not used here.
//!
//! A spend cap, billing or credentials answer stops its member, not the
//! run: the jobs go on with the other members. The run stops when every
//! member is stopped, and its stop names each member's cause.

use crate::batch::Via;
use crate::input::Shape;
use ratewise_tower::pool::{MemberStatus, Pool, PoolSpec, PoolStatus, SpecError};
use serde::Serialize;
use std::fmt;

/// Why the config's pool could not be used. Nothing was sent; none shows
/// a key (a member is named by its number, a key by its variable).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolError {
    /// `--pool NAME` names no `[[pools]]` table of the config.
    Unknown {
        /// The name asked for.
        name: String,
        /// The config's pools.
        known: Vec<String>,
    },
    /// The config has several pools and no `--pool` says which.
    Ambiguous {
        /// The config's pools.
        names: Vec<String>,
    },
    /// Two pools of the config have one name.
    Duplicate {
        /// The name.
        name: String,
    },
    /// The pool's table could not become a pool (a key variable not set,
    /// an unknown provider, a bad upstream).
    Spec(SpecError),
    /// A setting the pool replaces was given too.
    Conflict {
        /// The pool.
        pool: String,
        /// The setting (`--upstream`, `upstream in --config`, ...).
        setting: &'static str,
    },
    /// `--via batch` or `--via auto` with a pool: the batch APIs are per
    /// key.
    Via {
        /// The pool.
        pool: String,
        /// The path asked for.
        via: Via,
    },
    /// A member whose API is not the input's format (an OpenAI-compatible
    /// member for Anthropic lines).
    Dialect {
        /// The pool.
        pool: String,
        /// The member's number, from 1.
        member: usize,
        /// Its provider.
        provider: &'static str,
        /// The input's format.
        shape: &'static str,
    },
    /// The store has batches open at the provider from an earlier
    /// `--via batch|auto` run: they are polled with the key that made
    /// them, so the run goes on without the pool.
    OpenBatches {
        /// The pool.
        pool: String,
    },
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::Unknown { name, known } if known.is_empty() => write!(
                f,
                "--pool {name:?}: the config has no [[pools]] table; nothing was sent"
            ),
            PoolError::Unknown { name, known } => write!(
                f,
                "--pool {name:?}: no such pool in the config (it has {}); nothing was sent",
                quoted(known)
            ),
            PoolError::Ambiguous { names } => write!(
                f,
                "the config has {} pools ({}): say which with --pool NAME; nothing was sent",
                names.len(),
                quoted(names)
            ),
            PoolError::Duplicate { name } => write!(
                f,
                "the config has two pools named {name:?}; nothing was sent"
            ),
            PoolError::Spec(e) => write!(f, "{e}; nothing was sent"),
            PoolError::Conflict { pool, setting } => write!(
                f,
                "{setting} conflicts with pool {pool:?}: its members name their upstreams and keys \
                 (key_env); drop one of the two; nothing was sent"
            ),
            PoolError::Via { pool, via } => write!(
                f,
                "--via {} conflicts with pool {pool:?}: the batch APIs are per key, a pool's jobs \
                 go directly (--via direct); nothing was sent",
                via.as_str()
            ),
            PoolError::Dialect {
                pool,
                member,
                provider,
                shape,
            } => write!(
                f,
                "pool {pool:?} member {member}: its provider ({provider}) does not take the input's \
                 {shape} format; nothing was sent"
            ),
            PoolError::OpenBatches { pool } => write!(
                f,
                "the store has batches open at the provider from an earlier run, polled with the key \
                 that made them: finish them without pool {pool:?} (the same command without it), then \
                 run with the pool; nothing was sent"
            ),
        }
    }
}

impl std::error::Error for PoolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PoolError::Spec(e) => Some(e),
            _ => None,
        }
    }
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A pooled run's members as the run ended: each one's upstream, key
/// fingerprint, sends, share and stop (with the answer that stopped it).
#[derive(Debug, Clone, Serialize)]
pub struct PoolReport {
    /// The pool's name.
    pub name: String,
    /// Its members, in the config's order.
    pub members: Vec<MemberStatus>,
}

impl PoolReport {
    /// Each member in words: `host:port#fp-…` with its sends and, when
    /// stopped, its cause.
    pub fn in_words(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                let stop = match &m.stopped {
                    Some(s) => match s.status {
                        Some(code) => format!(", stopped: {} (HTTP {code})", s.cause),
                        None => format!(", stopped: {}", s.cause),
                    },
                    None => String::new(),
                };
                format!("{}#{} {} send(s){stop}", m.upstream, m.key, m.sends)
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The pool the run uses: the one `name` (`--pool`) names, else the only
/// one; none when the config has none and no name is given.
pub fn select<'a>(
    pools: &'a [PoolSpec],
    name: Option<&str>,
) -> Result<Option<&'a PoolSpec>, PoolError> {
    let names: Vec<String> = pools.iter().map(|p| p.name.clone()).collect();
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Err(PoolError::Duplicate { name: n.clone() });
        }
    }
    match name {
        Some(wanted) => pools
            .iter()
            .find(|p| p.name == wanted)
            .map(Some)
            .ok_or_else(|| PoolError::Unknown {
                name: wanted.to_owned(),
                known: names,
            }),
        None => match pools {
            [] => Ok(None),
            [one] => Ok(Some(one)),
            _ => Err(PoolError::Ambiguous { names }),
        },
    }
}

/// Checks each member speaks the input's format.
pub(crate) fn check_dialect(name: &str, pool: &Pool, shape: Shape) -> Result<(), PoolError> {
    for (i, m) in pool.members().iter().enumerate() {
        let provider = m.core().provider;
        if provider.dialect() != shape.provider() {
            return Err(PoolError::Dialect {
                pool: name.to_owned(),
                member: i + 1,
                provider: provider.as_str(),
                shape: shape.as_str(),
            });
        }
    }
    Ok(())
}

/// Whether every member of `status` is stopped.
pub(crate) fn all_stopped(status: &PoolStatus) -> bool {
    !status.members.is_empty() && status.members.iter().all(|m| m.stopped.is_some())
}

/// Each member and its stop, for a stop line: `host:port#fp-…` and the
/// cause (with the answer's status), never a key.
pub(crate) fn members_in_words(status: &PoolStatus) -> String {
    status
        .members
        .iter()
        .map(|m| {
            let label = format!("{}#{}", m.upstream, m.key);
            match &m.stopped {
                Some(s) => match s.status {
                    Some(code) => format!("{label} {} (HTTP {code})", s.cause),
                    None => format!("{label} {}", s.cause),
                },
                None => format!("{label} sending"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The cause every member was stopped for, when it is one.
pub(crate) fn common_cause(status: &PoolStatus) -> Option<ratewise_core::Cause> {
    let mut causes = status
        .members
        .iter()
        .map(|m| m.stopped.as_ref().map(|s| s.cause));
    let first = causes.next()??;
    causes
        .all(|c| c == Some(first))
        .then(|| ratewise_core::Cause::from_word(first).unwrap_or(ratewise_core::Cause::Unknown))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> PoolSpec {
        serde_json::from_value(serde_json::json!({
            "name": name,
            "members": [{"upstream": "http://127.0.0.1:1", "key_env": "K", "provider": "anthropic"}]
        }))
        .unwrap()
    }

    #[test]
    fn one_pool_is_used_several_need_a_name() {
        let pools = [spec("a"), spec("b")];
        assert_eq!(select(&[], None).unwrap(), None);
        assert_eq!(select(&pools[..1], None).unwrap().unwrap().name, "a");
        assert_eq!(select(&pools, Some("b")).unwrap().unwrap().name, "b");
        let e = select(&pools, None).unwrap_err();
        assert!(matches!(e, PoolError::Ambiguous { .. }), "{e}");
        assert!(e.to_string().contains("--pool"), "{e}");
        let e = select(&pools, Some("c")).unwrap_err();
        assert!(e.to_string().contains("\"a\", \"b\""), "{e}");
        let e = select(&[], Some("c")).unwrap_err();
        assert!(e.to_string().contains("no [[pools]]"), "{e}");
        let e = select(&[spec("a"), spec("a")], Some("a")).unwrap_err();
        assert_eq!(e, PoolError::Duplicate { name: "a".into() });
    }

    #[test]
    fn a_member_of_another_format_is_refused() {
        let s: PoolSpec = serde_json::from_value(serde_json::json!({
            "name": "p",
            "members": [
                {"upstream": "http://127.0.0.1:1", "key_env": "K", "provider": "anthropic"},
                {"upstream": "http://127.0.0.1:2", "key_env": "K", "provider": "groq"}
            ]
        }))
        .unwrap();
        let pool = s.build(|_| Some("sk-secret".into())).unwrap();
        let e = check_dialect("p", &pool, Shape::Anthropic).unwrap_err();
        assert!(matches!(e, PoolError::Dialect { member: 2, .. }), "{e}");
        assert!(!e.to_string().contains("sk-secret"));
        let openai: PoolSpec = serde_json::from_value(serde_json::json!({
            "name": "p",
            "members": [
                {"upstream": "http://127.0.0.1:1", "key_env": "K", "provider": "azure"},
                {"upstream": "http://127.0.0.1:2", "key_env": "K", "provider": "groq"}
            ]
        }))
        .unwrap();
        let pool = openai.build(|_| Some("k".into())).unwrap();
        assert!(check_dialect("p", &pool, Shape::OpenAi).is_ok());
    }
}
