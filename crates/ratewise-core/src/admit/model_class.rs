//! Which models share a bucket: a prefix table, with defaults that follow
//! the providers' published sharing, overridable by the user.
//!
//! Anthropic shares one limit across versions of a model family (e.g. the
//! Opus 4.x limit covers Opus 4 and 4.1; Sonnet 4.x covers Sonnet 4 and
//! 4.5); OpenAI limits per model, with dated snapshots sharing their base
//! model's limit. The longest matching prefix wins; a model no entry
//! matches is its own class.

/// A prefix → class table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelClasses {
    entries: Vec<(String, String)>,
}

/// The default sharing table: `(model name prefix, class)`.
pub(crate) const DEFAULT_CLASSES: &[(&str, &str)] = &[
    // Anthropic: families share one bucket across versions and dates.
    ("claude-opus-4", "claude-opus-4"),
    ("claude-sonnet-4", "claude-sonnet-4"),
    ("claude-haiku-4", "claude-haiku-4"),
    ("claude-3-7-sonnet", "claude-3-7-sonnet"),
    ("claude-3-5-sonnet", "claude-3-5-sonnet"),
    ("claude-3-5-haiku", "claude-3-5-haiku"),
    ("claude-3-opus", "claude-3-opus"),
    ("claude-3-haiku", "claude-3-haiku"),
    // OpenAI: dated snapshots share the base model's limit.
    ("gpt-4o-mini", "gpt-4o-mini"),
    ("gpt-4o", "gpt-4o"),
    ("gpt-4.1-nano", "gpt-4.1-nano"),
    ("gpt-4.1-mini", "gpt-4.1-mini"),
    ("gpt-4.1", "gpt-4.1"),
    ("gpt-5-nano", "gpt-5-nano"),
    ("gpt-5-mini", "gpt-5-mini"),
    ("gpt-5", "gpt-5"),
    ("o1-mini", "o1-mini"),
    ("o1", "o1"),
    ("o3-mini", "o3-mini"),
    ("o3", "o3"),
    ("o4-mini", "o4-mini"),
];

impl Default for ModelClasses {
    fn default() -> Self {
        ModelClasses {
            entries: DEFAULT_CLASSES
                .iter()
                .map(|(p, c)| ((*p).to_owned(), (*c).to_owned()))
                .collect(),
        }
    }
}

impl ModelClasses {
    /// An empty table: every model is its own class.
    pub fn empty() -> Self {
        ModelClasses {
            entries: Vec::new(),
        }
    }

    /// Adds or replaces the class of a prefix (a user override).
    ///
    /// ```
    /// use ratewise_core::admit::ModelClasses;
    /// let mut t = ModelClasses::default();
    /// assert_eq!(t.class_of("claude-sonnet-4-5-20250929"), "claude-sonnet-4");
    /// t.set("claude-sonnet-4-5", "sonnet-4.5-own");
    /// assert_eq!(t.class_of("claude-sonnet-4-5-20250929"), "sonnet-4.5-own");
    /// assert_eq!(t.class_of("my-model"), "my-model");
    /// ```
    pub fn set(&mut self, prefix: impl Into<String>, class: impl Into<String>) {
        let prefix = prefix.into();
        let class = class.into();
        match self.entries.iter_mut().find(|(p, _)| *p == prefix) {
            Some(e) => e.1 = class,
            None => self.entries.push((prefix, class)),
        }
    }

    /// The class of a model: the longest matching prefix's class, else the
    /// model name itself.
    pub fn class_of<'a>(&'a self, model: &'a str) -> &'a str {
        self.entries
            .iter()
            .filter(|(p, _)| model.starts_with(p.as_str()))
            .max_by_key(|(p, _)| p.len())
            .map(|(_, c)| c.as_str())
            .unwrap_or(model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_published_sharing() {
        let t = ModelClasses::default();
        assert_eq!(t.class_of("claude-opus-4-1-20250805"), "claude-opus-4");
        assert_eq!(t.class_of("claude-opus-4-20250514"), "claude-opus-4");
        assert_eq!(t.class_of("claude-sonnet-4-20250514"), "claude-sonnet-4");
        assert_eq!(t.class_of("gpt-4o-mini-2024-07-18"), "gpt-4o-mini");
        assert_eq!(t.class_of("gpt-4o-2024-08-06"), "gpt-4o");
        assert_eq!(t.class_of("o1-mini"), "o1-mini");
        assert_eq!(ModelClasses::empty().class_of("gpt-4o"), "gpt-4o");
    }
}
