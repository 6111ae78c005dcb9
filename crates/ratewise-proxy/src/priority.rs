//! Many workloads on one key: each request's priority level and flow.
//!
//! A request's **level** is its `x-ratewise-priority` header (honoured by
//! default, so an SDK's `default_headers` is all an application adds;
//! `[priority] header = false` turns the headers off for an operator who
//! serves callers it does not trust), else its pool's `level`, else the
//! default level. A level the proxy does not know is the default level,
//! counted (`ratewise_priority_unknown_level_total`) and logged once per
//! name. Its **flow** (the tenant it shares fairly within its level) is
//! its pool's (a pool's callers are one tenant), else its
//! `x-ratewise-flow` header, else its key's fingerprint. A flow's weight
//! and floor are its pool's, else `[priority.weights]` and
//! `[priority.floors]`. Neither header is sent upstream.
//!
//! The layer's queue orders the waiting jobs by these (see
//! [`ratewise_tower::Workload`]): the higher level first, each lower
//! level keeping its minimum share; flows of a level by cost, in
//! proportion to their weights; oldest first within a flow.

use ratewise_tower::{Levels, Workload};
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A request's priority level, by name (`interactive`, `default`, `bulk`
/// unless `[priority] levels` says otherwise).
pub const PRIORITY_HEADER: &str = "x-ratewise-priority";

/// A request's flow: the tenant it shares its level's capacity with
/// others by (a pool's callers are their pool's flow whatever they send).
pub const FLOW_HEADER: &str = "x-ratewise-flow";

/// The longest flow name taken from a header; a longer one is cut (flows
/// are names, and a caller's header is not trusted to be short).
pub const MAX_FLOW_NAME: usize = 64;

/// Unknown level names logged (each once); past it they are only counted.
const MAX_LOGGED_UNKNOWN: usize = 16;

/// `[priority]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PriorityFile {
    header: Option<bool>,
    levels: Option<Vec<String>>,
    default: Option<String>,
    #[serde(default)]
    min_share: BTreeMap<String, f64>,
    #[serde(default)]
    weights: BTreeMap<String, u32>,
    #[serde(default)]
    floors: BTreeMap<String, f64>,
}

/// What `[priority]` says, checked: whether the headers are read, and
/// each flow's weight and floor. (The levels are the layer's:
/// [`ratewise_tower::Config::levels`].)
#[derive(Debug, Clone)]
pub struct PrioritySettings {
    /// Whether `x-ratewise-priority` and `x-ratewise-flow` are read
    /// (`header`, default true). Removed before the upstream either way.
    pub header: bool,
    /// Weights by flow name (`[priority.weights]`, default 1).
    pub weights: BTreeMap<String, u32>,
    /// Floors by flow name (`[priority.floors]`): the share of what is
    /// admitted a flow keeps while it has work waiting.
    pub floors: BTreeMap<String, f64>,
}

impl Default for PrioritySettings {
    fn default() -> Self {
        PrioritySettings {
            header: true,
            weights: BTreeMap::new(),
            floors: BTreeMap::new(),
        }
    }
}

/// A share in `[0, 1)` (`what` names it in the error).
fn share(what: &str, v: f64) -> Result<f64, String> {
    if v.is_finite() && (0.0..1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{what} = {v}: a share is at least 0 and below 1"))
    }
}

impl PriorityFile {
    /// The levels and the settings, or why not (the error names the key).
    pub(crate) fn read(self) -> Result<(Levels, PrioritySettings), String> {
        let mut levels = match &self.levels {
            None => Levels::default(),
            Some(names) => {
                let names: Vec<&str> = names.iter().map(|n| n.trim()).collect();
                if names.is_empty() || names.iter().any(|n| n.is_empty()) {
                    return Err("priority.levels: name each level, highest first".into());
                }
                if names.len() > ratewise_core::admit::fair::MAX_LEVELS {
                    return Err(format!(
                        "priority.levels: at most {} levels",
                        ratewise_core::admit::fair::MAX_LEVELS
                    ));
                }
                let unique: HashSet<&str> = names.iter().copied().collect();
                if unique.len() != names.len() {
                    return Err("priority.levels: a level is named twice".into());
                }
                Levels::new(names)
            }
        };
        if let Some(d) = &self.default {
            if levels.level(d).is_none() {
                return Err(format!(
                    "priority.default = {d:?}: not one of priority.levels"
                ));
            }
            levels = levels.with_default(d);
        }
        for (name, v) in &self.min_share {
            if levels.level(name).is_none() {
                return Err(format!(
                    "priority.min_share.{name}: not one of priority.levels"
                ));
            }
            levels = levels.with_min_share(name, share(&format!("priority.min_share.{name}"), *v)?);
        }
        for (flow, w) in &self.weights {
            if *w == 0 {
                return Err(format!(
                    "priority.weights.{flow} = 0: a weight is at least 1"
                ));
            }
        }
        for (flow, v) in &self.floors {
            share(&format!("priority.floors.{flow}"), *v)?;
        }
        Ok((
            levels,
            PrioritySettings {
                header: self.header.unwrap_or(true),
                weights: self.weights,
                floors: self.floors,
            },
        ))
    }
}

/// A pool's callers as one tenant: the pool's `level`, `weight` and
/// `floor` (from its `[[pools]]` table).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolWorkload {
    /// Its flow: the pool's name.
    pub flow: String,
    /// Its callers' level unless their header names one.
    pub level: Option<String>,
    /// Its flow's weight (default 1).
    pub weight: Option<u32>,
    /// Its flow's floor.
    pub floor: Option<f64>,
}

/// Unknown level names, counted and each logged once.
#[derive(Debug, Default)]
pub struct UnknownLevels {
    /// Requests that named a level the proxy does not know.
    pub count: AtomicU64,
    logged: Mutex<HashSet<String>>,
}

impl UnknownLevels {
    fn seen(&self, name: &str) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
        if logged.len() < MAX_LOGGED_UNKNOWN && logged.insert(name.to_owned()) {
            let name: String = name.chars().take(MAX_FLOW_NAME).collect();
            tracing::warn!(level = %name, header = PRIORITY_HEADER,
                "a request named a priority level this proxy does not know: it waits at the default level (said once per name)");
        }
    }
}

/// [`PRIORITY_HEADER`] and [`FLOW_HEADER`], never sent upstream.
static PRIORITY_HEADERS: [http::HeaderName; 2] = [
    http::HeaderName::from_static(PRIORITY_HEADER),
    http::HeaderName::from_static(FLOW_HEADER),
];

/// A header's value as text, trimmed and cut to `max` characters; `None`
/// when absent, empty or not text.
fn header_text(h: &http::HeaderMap, name: &str, max: usize) -> Option<String> {
    let v = h.get(name)?.to_str().ok()?.trim();
    (!v.is_empty()).then(|| v.chars().take(max).collect())
}

/// The request's workload (see the module docs), its priority headers
/// removed from `headers` either way. `pool`: its pool's, when it goes to
/// one. `None` flow: the key's fingerprint (the layer's default).
pub fn workload(
    headers: &mut http::HeaderMap,
    settings: &PrioritySettings,
    levels: &Levels,
    pool: Option<&PoolWorkload>,
    unknown: &UnknownLevels,
) -> Workload {
    let asked_level = header_text(headers, PRIORITY_HEADER, MAX_FLOW_NAME);
    let asked_flow = header_text(headers, FLOW_HEADER, MAX_FLOW_NAME);
    crate::forward::remove_present(headers, &PRIORITY_HEADERS);
    let (asked_level, asked_flow) = if settings.header {
        (asked_level, asked_flow)
    } else {
        (None, None)
    };
    let level = match asked_level {
        Some(l) if levels.level(&l).is_some() => Some(l),
        Some(l) => {
            unknown.seen(&l);
            None
        }
        None => None,
    }
    .or_else(|| pool.and_then(|p| p.level.clone()));
    let flow = match pool {
        Some(p) => Some(p.flow.clone()),
        None => asked_flow,
    };
    let (weight, floor) = match &flow {
        Some(f) => (
            pool.and_then(|p| p.weight)
                .or_else(|| settings.weights.get(f).copied()),
            pool.and_then(|p| p.floor)
                .or_else(|| settings.floors.get(f).copied()),
        ),
        None => (None, None),
    };
    Workload {
        level: level.map(|l| l.as_str().into()),
        flow: flow.map(|f| f.as_str().into()),
        weight: weight.unwrap_or(1).max(1),
        floor: floor.unwrap_or(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn read(toml_text: &str) -> Result<(Levels, PrioritySettings), String> {
        toml::from_str::<PriorityFile>(toml_text)
            .map_err(|e| e.to_string())?
            .read()
    }

    #[test]
    fn the_headers_name_level_and_flow_and_never_go_upstream() {
        let (levels, settings) = read("weights = { tenant-a = 3 }").unwrap();
        let mut h = headers(&[
            ("x-ratewise-priority", "bulk"),
            ("x-ratewise-flow", "tenant-a"),
            ("x-api-key", "sk-ant-x"),
        ]);
        let w = workload(&mut h, &settings, &levels, None, &UnknownLevels::default());
        assert_eq!(w.level.as_deref(), Some("bulk"));
        assert_eq!(w.flow.as_deref(), Some("tenant-a"));
        assert_eq!(w.weight, 3);
        assert!(h.get(PRIORITY_HEADER).is_none() && h.get(FLOW_HEADER).is_none());
        assert!(h.get("x-api-key").is_some());
    }

    #[test]
    fn an_unknown_level_is_the_default_counted() {
        let (levels, settings) = read("").unwrap();
        let unknown = UnknownLevels::default();
        for _ in 0..3 {
            let mut h = headers(&[("x-ratewise-priority", "urgent")]);
            let w = workload(&mut h, &settings, &levels, None, &unknown);
            assert_eq!(w.level, None, "the default level");
        }
        assert_eq!(unknown.count.load(Ordering::Relaxed), 3);
        assert_eq!(unknown.logged.lock().unwrap().len(), 1, "logged once");
    }

    #[test]
    fn with_the_headers_off_they_are_removed_and_ignored() {
        let (levels, settings) = read("header = false").unwrap();
        let mut h = headers(&[
            ("x-ratewise-priority", "interactive"),
            ("x-ratewise-flow", "me"),
        ]);
        let w = workload(&mut h, &settings, &levels, None, &UnknownLevels::default());
        assert_eq!((w.level, w.flow), (None, None));
        assert!(h.is_empty());
    }

    #[test]
    fn a_pool_is_its_callers_flow_and_its_level_unless_they_name_one() {
        let (levels, settings) = read("").unwrap();
        let pool = PoolWorkload {
            flow: "nightly".into(),
            level: Some("bulk".into()),
            weight: Some(2),
            floor: Some(0.2),
        };
        let mut h = headers(&[("x-ratewise-flow", "someone-else")]);
        let w = workload(
            &mut h,
            &settings,
            &levels,
            Some(&pool),
            &UnknownLevels::default(),
        );
        assert_eq!(w.level.as_deref(), Some("bulk"));
        assert_eq!(w.flow.as_deref(), Some("nightly"));
        assert_eq!((w.weight, w.floor), (2, 0.2));
        let mut h = headers(&[("x-ratewise-priority", "interactive")]);
        let w = workload(
            &mut h,
            &settings,
            &levels,
            Some(&pool),
            &UnknownLevels::default(),
        );
        assert_eq!(w.level.as_deref(), Some("interactive"));
    }

    #[test]
    fn a_flow_name_is_bounded() {
        let (levels, settings) = read("").unwrap();
        let long = "f".repeat(10_000);
        let mut h = headers(&[("x-ratewise-flow", &long)]);
        let w = workload(&mut h, &settings, &levels, None, &UnknownLevels::default());
        assert_eq!(w.flow.unwrap().len(), MAX_FLOW_NAME);
    }

    #[test]
    fn the_table_is_checked_and_its_errors_name_the_key() {
        let (levels, _) = read(
            "levels = [\"realtime\", \"batch\"]\ndefault = \"batch\"\nmin_share = { batch = 0.25 }",
        )
        .unwrap();
        let batch = levels.level("batch").unwrap();
        assert_eq!(levels.default_level(), batch);
        assert_eq!(levels.min_share(batch), 0.25);
        for (text, says) in [
            ("default = \"urgent\"", "priority.default"),
            ("levels = []", "priority.levels"),
            ("levels = [\"a\", \"a\"]", "named twice"),
            ("min_share = { nope = 0.1 }", "priority.min_share.nope"),
            ("min_share = { bulk = 1.5 }", "priority.min_share.bulk"),
            ("weights = { a = 0 }", "priority.weights.a"),
            ("floors = { a = -0.1 }", "priority.floors.a"),
        ] {
            let e = read(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
        assert!(
            read("colour = \"red\"").is_err(),
            "an unknown key is an error"
        );
    }
}
