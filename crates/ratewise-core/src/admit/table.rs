//! Numbered entries that can be removed without renumbering the others:
//! the controller's keys and scopes. A number is never handed out twice
//! while its entry lives, and a removed entry's number is not reused until
//! the counter wraps (2³² creations later), so a [`ScopeId`](super::ScopeId)
//! held by a waiting job whose key was forgotten finds nothing rather than
//! another key's scope.
//!
//! A `BTreeMap` rather than a hash map: iteration in creation order, the
//! same in every run (the simulator's reproducibility), and no hasher
//! seeded from the operating system.

use std::collections::BTreeMap;

/// Entries by number.
#[derive(Debug, Clone)]
pub(crate) struct Table<T> {
    entries: BTreeMap<u32, T>,
    next: u32,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            entries: BTreeMap::new(),
            next: 0,
        }
    }
}

impl<T> Table<T> {
    /// Adds an entry; returns its number.
    pub(crate) fn push(&mut self, v: T) -> u32 {
        // Past a wrap, skip numbers still in use.
        while self.entries.contains_key(&self.next) {
            self.next = self.next.wrapping_add(1);
        }
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        self.entries.insert(id, v);
        id
    }

    pub(crate) fn get(&self, id: usize) -> Option<&T> {
        self.entries.get(&u32::try_from(id).ok()?)
    }

    pub(crate) fn get_mut(&mut self, id: usize) -> Option<&mut T> {
        self.entries.get_mut(&u32::try_from(id).ok()?)
    }

    pub(crate) fn remove(&mut self, id: u32) -> Option<T> {
        self.entries.remove(&id)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The numbers in use, oldest first (until the counter wraps).
    pub(crate) fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries.keys().copied()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.entries.values()
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.entries.values_mut()
    }
}

/// Indexing by number, as a `Vec` is indexed: the controller keeps every
/// number it indexes with alive (a key and its scopes go together).
impl<T> std::ops::Index<usize> for Table<T> {
    type Output = T;
    fn index(&self, id: usize) -> &T {
        self.get(id).expect("a live entry")
    }
}

impl<T> std::ops::IndexMut<usize> for Table<T> {
    fn index_mut(&mut self, id: usize) -> &mut T {
        self.get_mut(id).expect("a live entry")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_number_is_not_handed_out_again() {
        let mut t = Table::default();
        let a = t.push("a");
        let b = t.push("b");
        assert_eq!(t.remove(a), Some("a"));
        let c = t.push("c");
        assert!(c != a && c != b);
        assert_eq!(t.get(a as usize), None);
        assert_eq!(t[c as usize], "c");
        assert_eq!(t.ids().collect::<Vec<_>>(), vec![b, c]);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn past_a_wrap_live_numbers_are_skipped() {
        let mut t = Table::default();
        let zero = t.push(0);
        t.next = u32::MAX;
        assert_eq!(t.push(1), u32::MAX);
        let after = t.push(2);
        assert_ne!(after, zero);
        assert_eq!(t.len(), 3);
    }
}
