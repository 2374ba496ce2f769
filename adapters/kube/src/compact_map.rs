//! Labels and annotations as the Server cache holds them: one buffer of text
//! and one of offsets. A `BTreeMap<String, String>` costs a node of about
//! 540 bytes however few its entries, and an allocation per key and value;
//! at 10,000 cached Servers their labels and annotations were 25 MB, now a
//! quarter of it.

use std::collections::BTreeMap;

/// String pairs sorted by key, each key once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactMap {
    /// Every key and value, one after another in key order.
    text: Box<str>,
    /// Where each key and each value ends in `text`: key `i` ends at
    /// `ends[2 * i]`, its value at `ends[2 * i + 1]`.
    ends: Box<[u32]>,
}

impl CompactMap {
    /// The map's pairs, or `None` if they do not fit offsets of 32 bits
    /// (the API server bounds a Server's annotations to 256 KiB).
    pub fn new(map: BTreeMap<String, String>) -> Option<Self> {
        let mut text = String::with_capacity(map.iter().map(|(key, value)| key.len() + value.len()).sum());
        let mut ends = Vec::with_capacity(map.len() * 2);
        for (key, value) in &map {
            text.push_str(key);
            ends.push(u32::try_from(text.len()).ok()?);
            text.push_str(value);
            ends.push(u32::try_from(text.len()).ok()?);
        }
        Some(CompactMap { text: text.into_boxed_str(), ends: ends.into_boxed_slice() })
    }

    pub fn len(&self) -> usize {
        self.ends.len() / 2
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Pair `i`, in key order.
    fn pair(&self, i: usize) -> (&str, &str) {
        let start = if i == 0 { 0 } else { self.ends[2 * i - 1] as usize };
        let (key_end, value_end) = (self.ends[2 * i] as usize, self.ends[2 * i + 1] as usize);
        (&self.text[start..key_end], &self.text[key_end..value_end])
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let middle = low + (high - low) / 2;
            let (found, value) = self.pair(middle);
            match found.cmp(key) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => return Some(value),
            }
        }
        None
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The pairs in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        (0..self.len()).map(|i| self.pair(i))
    }

    /// The pairs as a map, for a view that owns them.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter().map(|(key, value)| (key.to_owned(), value.to_owned())).collect()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn it_holds_what_the_map_holds(map in proptest::collection::btree_map(".{0,12}", ".{0,12}", 0..12)) {
            let compact = CompactMap::new(map.clone()).expect("small maps fit");
            prop_assert_eq!(compact.len(), map.len());
            prop_assert_eq!(compact.to_map(), map.clone());
            for (key, value) in &map {
                prop_assert_eq!(compact.get(key), Some(value.as_str()));
            }
            prop_assert_eq!(compact.get("\u{10ffff}absent"), map.get("\u{10ffff}absent").map(String::as_str));
        }
    }

    #[test]
    fn empty_keys_and_values_are_kept_apart() {
        let map: BTreeMap<String, String> =
            [("", "x"), ("a", ""), ("ab", "c")].into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        let compact = CompactMap::new(map).expect("fits");
        assert_eq!(compact.get(""), Some("x"));
        assert_eq!(compact.get("a"), Some(""));
        assert_eq!(compact.get("ab"), Some("c"));
        assert_eq!(compact.get("b"), None);
        assert!(CompactMap::default().is_empty());
    }
}
