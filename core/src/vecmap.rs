//! [`VecMap`]: an ordered map on a sorted `Vec`, for small collections.
//!
//! `BTreeMap<K, V>` compiles its node code (search, split, merge, steal, iterators: several
//! kilobytes of WebAssembly) once per key/value type. The core keeps a few small, bounded
//! collections (calls outliving their turn, standing desires, Worker calculations in flight,
//! handlers awaiting release) for which a sorted `Vec` gives the same ordered-map behaviour —
//! keyed lookup, ordered iteration, deterministic order — in a fraction of the code. Lookups
//! are binary searches; inserts and removals shift, so this is for collections of tens of
//! entries, not for registries that grow with the workload.

use std::borrow::Borrow;

/// An ordered map on a sorted `Vec` (see the module docs).
#[derive(Clone, Debug)]
pub struct VecMap<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        VecMap {
            entries: Vec::new(),
        }
    }
}

impl<K: Ord, V> VecMap<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.entries.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    /// The value at `key`.
    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &self.entries[i].1)
    }

    /// The value at `key`, mutably.
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &mut self.entries[i].1)
    }

    /// Whether `key` is present.
    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.find(key).is_ok()
    }

    /// Inserts or replaces; returns the replaced value.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.entries.insert(i, (key, value));
                None
            }
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| self.entries.remove(i).1)
    }

    /// The entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    /// The entries in key order, values mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.entries.iter_mut().map(|(k, v)| (&*k, v))
    }

    /// The value at `key`, inserted with `make` if absent.
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(&key) {
            Ok(i) => i,
            Err(i) => {
                self.entries.insert(i, (key, make()));
                i
            }
        };
        &mut self.entries[i].1
    }

    /// The smallest key.
    pub fn first_key(&self) -> Option<&K> {
        self.entries.first().map(|(k, _)| k)
    }

    /// Removes the entry with the smallest key.
    pub fn pop_first(&mut self) -> Option<(K, V)> {
        (!self.entries.is_empty()).then(|| self.entries.remove(0))
    }

    /// The values in key order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, v)| v)
    }

    /// The keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.iter().map(|(k, _)| k)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Takes every entry, in key order, leaving the map empty.
    pub fn take(&mut self) -> impl Iterator<Item = (K, V)> + use<K, V> {
        std::mem::take(&mut self.entries).into_iter()
    }
}

impl<K: Ord + Borrow<Q>, Q: Ord + ?Sized, V> std::ops::Index<&Q> for VecMap<K, V> {
    type Output = V;
    fn index(&self, key: &Q) -> &V {
        self.get(key).expect("no entry for the key")
    }
}

#[cfg(test)]
mod tests {
    use super::VecMap;

    #[test]
    fn behaves_as_an_ordered_map() {
        let mut m = VecMap::new();
        assert_eq!(m.insert("b".to_owned(), 2), None);
        assert_eq!(m.insert("a".to_owned(), 1), None);
        assert_eq!(m.insert("c".to_owned(), 3), None);
        assert_eq!(m.insert("b".to_owned(), 20), Some(2));
        assert_eq!(m.get("b"), Some(&20));
        assert!(m.contains_key("a") && !m.contains_key("z"));
        *m.get_mut("c").unwrap() += 1;
        assert_eq!(
            m.iter().map(|(k, v)| (k.as_str(), *v)).collect::<Vec<_>>(),
            [("a", 1), ("b", 20), ("c", 4)]
        );
        assert_eq!(m.remove("a"), Some(1));
        assert_eq!(m.remove("a"), None);
        assert_eq!(m.keys().cloned().collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(m["c"], 4);
        *m.get_or_insert_with("d".to_owned(), || 0) += 5;
        *m.get_or_insert_with("d".to_owned(), || 0) += 1;
        assert_eq!(m.values().copied().collect::<Vec<_>>(), [20, 4, 6]);
        assert_eq!(m.first_key().map(String::as_str), Some("b"));
        m.remove("d");
        assert_eq!(m.pop_first(), Some(("b".to_owned(), 20)));
        m.insert("b".to_owned(), 20);
        assert_eq!(m.len(), 2);
        assert_eq!(m.take().count(), 2);
        assert!(m.is_empty());
    }
}
