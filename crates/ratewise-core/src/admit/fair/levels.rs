//! Priority levels: an ordered set of names, highest first, each lower
//! level with the minimum share it keeps however busy the levels above it
//! are.

/// A priority level: its index in its [`Levels`], `0` the highest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LevelId(pub(crate) u8);

impl LevelId {
    /// Its index in its [`Levels`] (`0`: the highest level).
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// The minimum share a lower level keeps by default: 10 % of what is
/// admitted (of the binding limit, while the limit binds). Enough that a
/// batch makes steady progress under a permanent interactive flood, small
/// enough that interactive latency barely moves.
pub const DEFAULT_MIN_SHARE: f64 = 0.10;

/// The most levels a [`Levels`] holds: levels are a handful of names, and
/// a config that lists more is cut here rather than allocating per name.
pub const MAX_LEVELS: usize = 16;

/// The priority levels of a queue, highest first, and the minimum share
/// (the floor) each keeps of what is admitted while it has work waiting.
///
/// The default is `interactive`, `default`, `bulk`, with `default` the
/// level of a job that names none (or names a level not in the set), and
/// 10 % kept by each level below the top.
///
/// ```
/// use ratewise_core::admit::fair::Levels;
///
/// let levels = Levels::default();
/// let bulk = levels.level("bulk").unwrap();
/// assert_eq!(levels.name(bulk), "bulk");
/// assert_eq!(levels.min_share(bulk), 0.10);
/// // An unknown name is the default level: a typo never becomes a
/// // priority nobody configured.
/// assert_eq!(levels.level_or_default(Some("urgent")), levels.default_level());
///
/// let custom = Levels::new(["realtime", "batch"]).with_min_share("batch", 0.25);
/// assert_eq!(custom.min_share(custom.level("batch").unwrap()), 0.25);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Levels {
    names: Vec<String>,
    min_share: Vec<f64>,
    default: LevelId,
}

impl Default for Levels {
    fn default() -> Self {
        Levels::new(["interactive", "default", "bulk"])
    }
}

impl Levels {
    /// Levels named `names`, highest first (duplicates dropped, at most
    /// [`MAX_LEVELS`]; none at all gives one level, `default`). Each level
    /// below the top keeps [`DEFAULT_MIN_SHARE`]; the default level is the
    /// one named `default` if any, else the middle one.
    pub fn new<I, S>(names: I) -> Levels
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut v: Vec<String> = Vec::new();
        for n in names {
            let n = n.into();
            if v.len() < MAX_LEVELS && !v.contains(&n) {
                v.push(n);
            }
        }
        if v.is_empty() {
            v.push("default".to_owned());
        }
        let min_share = (0..v.len())
            .map(|i| if i == 0 { 0.0 } else { DEFAULT_MIN_SHARE })
            .collect();
        let default = v.iter().position(|n| n == "default").unwrap_or(v.len() / 2);
        Levels {
            names: v,
            min_share,
            default: LevelId(default as u8),
        }
    }

    /// The same levels with `level`'s minimum share set to `share`
    /// (clamped to `0..=1`; `0`: strict priority below the levels above).
    /// An unknown name changes nothing.
    #[must_use]
    pub fn with_min_share(mut self, level: &str, share: f64) -> Levels {
        if let Some(id) = self.level(level) {
            self.min_share[id.index()] = if share.is_finite() {
                share.clamp(0.0, 1.0)
            } else {
                0.0
            };
        }
        self
    }

    /// The same levels with `level` the default (the level of a job that
    /// names none). An unknown name changes nothing.
    #[must_use]
    pub fn with_default(mut self, level: &str) -> Levels {
        if let Some(id) = self.level(level) {
            self.default = id;
        }
        self
    }

    /// The level named `name`.
    pub fn level(&self, name: &str) -> Option<LevelId> {
        self.names
            .iter()
            .position(|n| n == name)
            .map(|i| LevelId(i as u8))
    }

    /// The level named `name`, or the default level when the name is
    /// absent or unknown.
    pub fn level_or_default(&self, name: Option<&str>) -> LevelId {
        name.and_then(|n| self.level(n)).unwrap_or(self.default)
    }

    /// The level of a job that names none.
    pub fn default_level(&self) -> LevelId {
        self.default
    }

    /// The name of `level` (the default level's for an id from another
    /// set that is out of range).
    pub fn name(&self, level: LevelId) -> &str {
        self.names
            .get(level.index())
            .unwrap_or(&self.names[self.default.index()])
    }

    /// The minimum share `level` keeps while it has work waiting.
    pub fn min_share(&self, level: LevelId) -> f64 {
        self.min_share.get(level.index()).copied().unwrap_or(0.0)
    }

    /// How many levels there are.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Never: there is always at least one level.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The levels, highest first.
    pub fn iter(&self) -> impl Iterator<Item = LevelId> {
        (0..self.names.len()).map(|i| LevelId(i as u8))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_set_is_interactive_default_bulk() {
        let l = Levels::default();
        let names: Vec<&str> = l.iter().map(|i| l.name(i)).collect();
        assert_eq!(names, ["interactive", "default", "bulk"]);
        assert_eq!(l.name(l.default_level()), "default");
        // The top level needs no floor: nothing is above it.
        assert_eq!(l.min_share(l.level("interactive").unwrap()), 0.0);
        assert_eq!(l.min_share(l.level("default").unwrap()), 0.10);
    }

    #[test]
    fn configured_levels_drop_duplicates_and_never_are_empty() {
        let l = Levels::new(["a", "a", "b"]);
        assert_eq!(l.len(), 2);
        assert_eq!(l.name(l.default_level()), "b", "the middle one");
        let none = Levels::new(Vec::<String>::new());
        assert_eq!(none.len(), 1);
        assert_eq!(none.name(none.default_level()), "default");
        let many = Levels::new((0..100).map(|i| i.to_string()));
        assert_eq!(many.len(), MAX_LEVELS);
    }

    #[test]
    fn min_share_and_default_are_configurable_by_name() {
        let l = Levels::default()
            .with_min_share("bulk", 2.0)
            .with_min_share("nope", 0.5)
            .with_default("bulk");
        assert_eq!(l.min_share(l.level("bulk").unwrap()), 1.0);
        assert_eq!(l.name(l.default_level()), "bulk");
        assert_eq!(l.level_or_default(None), l.level("bulk").unwrap());
    }
}
