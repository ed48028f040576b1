//! How a task's input book holds its keys and outstanding requests: small
//! sorted vectors, each request as the JSON text of its object.
//!
//! A request waits as long as its client takes to answer, often minutes,
//! and a parsed `serde_json` map is about seventeen times its text (189
//! bytes of an `elicitation/create` form take 3,160 bytes as five B-tree
//! leaves), so the book keeps the text and parses it only when a snapshot
//! shows it (`tasks/get` of an `input_required` task). The store's encoding
//! is unchanged: a request is written as the same JSON object, and keys as
//! the same sorted array. Nothing here looks inside a request.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::model::{InputRequests, JsonObject};

/// A task's outstanding input requests, by key, each kept as the JSON text
/// of its request object (see the module documentation). Sorted by key.
///
/// Serialized as a JSON object of the requests, as a
/// `BTreeMap<String, JsonObject>` is.
///
/// # Examples
///
/// ```
/// use subtask::core::{Forest, RootOptions};
/// use subtask::model::{JsonObject, Timestamp};
///
/// let mut forest = Forest::default();
/// let t0 = Timestamp::from_millis(1_000);
/// let id = forest.create_root(t0, RootOptions::default()).unwrap();
/// forest.start(t0, id).unwrap();
/// let request: JsonObject = serde_json::from_str(r#"{"method": "elicitation/create"}"#).unwrap();
/// forest.request_input(t0, id, "q".into(), request.clone()).unwrap();
/// let pending = forest.task(id).unwrap().outstanding_inputs();
/// assert_eq!(pending.text("q"), Some(r#"{"method":"elicitation/create"}"#));
/// assert_eq!(pending.to_requests()["q"], request);
/// ```
#[derive(Debug, Clone, Default)]
pub struct PendingInputs(Vec<(Box<str>, Box<RawValue>)>);

impl PendingInputs {
    /// An empty set (a `const` for the shared empty book).
    pub(crate) const fn new() -> Self {
        PendingInputs(Vec::new())
    }

    /// How many requests are outstanding.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| (**k).cmp(key))
    }

    /// Whether a request under `key` is outstanding.
    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// The keys, sorted.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.0.iter().map(|(k, _)| &**k)
    }

    /// The JSON text of the request under `key`.
    pub fn text(&self, key: &str) -> Option<&str> {
        self.find(key).ok().map(|i| self.0[i].1.get())
    }

    /// The requests as the wire shows them (each text parsed again).
    pub fn to_requests(&self) -> InputRequests {
        self.0
            .iter()
            .map(|(k, raw)| (k.to_string(), parse_object(raw)))
            .collect()
    }

    /// Adds `request` under `key` (a key not yet used, I9), as its text.
    pub(crate) fn insert(&mut self, key: Box<str>, request: &JsonObject) {
        let raw = serde_json::value::to_raw_value(request).expect("a JSON object always serializes");
        match self.find(&key) {
            Ok(i) => self.0[i].1 = raw,
            Err(i) => self.0.insert(i, (key, raw)),
        }
        if self.0.len() == 1 {
            // One request (the common case) holds its one entry, not four.
            self.0.shrink_to_fit();
        }
    }

    /// Removes the request under `key`: whether it was outstanding.
    pub(crate) fn remove(&mut self, key: &str) -> bool {
        match self.find(key) {
            Ok(i) => {
                self.0.remove(i);
                if self.0.is_empty() {
                    self.0 = Vec::new();
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Removes every request.
    pub(crate) fn clear(&mut self) {
        self.0 = Vec::new();
    }
}

/// A request's object again. The text was written from an object (or read
/// back from the store as one, [`PendingInputs`]'s `Deserialize`).
fn parse_object(raw: &RawValue) -> JsonObject {
    serde_json::from_str(raw.get()).expect("an input request is the text of a JSON object")
}

impl PartialEq for PendingInputs {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|((k1, r1), (k2, r2))| k1 == k2 && r1.get() == r2.get())
    }
}

/// The same requests as `other` (compared as parsed objects).
impl PartialEq<InputRequests> for PendingInputs {
    fn eq(&self, other: &InputRequests) -> bool {
        self.0.len() == other.len()
            && self
                .0
                .iter()
                .zip(other)
                .all(|((k1, r1), (k2, r2))| **k1 == **k2 && parse_object(r1) == *r2)
    }
}

impl Serialize for PendingInputs {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, raw)| (&**k, &**raw)))
    }
}

impl<'de> Deserialize<'de> for PendingInputs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = std::collections::BTreeMap::<String, JsonObject>::deserialize(deserializer)?;
        let mut pending = PendingInputs::new();
        for (k, request) in &map {
            pending.insert(k.as_str().into(), request);
        }
        Ok(pending)
    }
}

/// The keys a task ever used for input requests (I9), sorted.
///
/// Serialized as a JSON array of strings, as a `BTreeSet<String>` is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsedKeys(Vec<Box<str>>);

impl UsedKeys {
    /// An empty set (a `const` for the shared empty book).
    pub(crate) const fn new() -> Self {
        UsedKeys(Vec::new())
    }

    /// Whether `key` was used.
    pub fn contains(&self, key: &str) -> bool {
        self.0.binary_search_by(|k| (**k).cmp(key)).is_ok()
    }

    /// How many keys were used.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The keys, sorted.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.0.iter().map(|k| &**k)
    }

    /// Marks `key` used.
    pub(crate) fn insert(&mut self, key: Box<str>) {
        if let Err(i) = self.0.binary_search(&key) {
            self.0.insert(i, key);
            if self.0.len() == 1 {
                self.0.shrink_to_fit();
            }
        }
    }

    /// Keeps only the keys `keep` accepts.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.0.retain(|k| keep(k));
    }
}

impl Serialize for UsedKeys {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|k| &**k))
    }
}

impl<'de> Deserialize<'de> for UsedKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut keys = Vec::<Box<str>>::deserialize(deserializer)?;
        keys.sort_unstable();
        keys.dedup();
        Ok(UsedKeys(keys))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(json: &str) -> JsonObject {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn requests_are_kept_as_text_sorted_and_encoded_as_a_map() {
        let mut p = PendingInputs::default();
        p.insert("b".into(), &object(r#"{"y": [1, {"z": true}]}"#));
        p.insert("a".into(), &object(r#"{"x": "1"}"#));
        assert_eq!(p.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(p.text("b"), Some(r#"{"y":[1,{"z":true}]}"#));
        let as_map: InputRequests = [
            ("a".to_owned(), object(r#"{"x": "1"}"#)),
            ("b".to_owned(), object(r#"{"y": [1, {"z": true}]}"#)),
        ]
        .into_iter()
        .collect();
        assert_eq!(p, as_map);
        assert_eq!(p.to_requests(), as_map);
        // The same JSON as the map it replaces, both ways.
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(json, serde_json::to_string(&as_map).unwrap());
        assert_eq!(serde_json::from_str::<PendingInputs>(&json).unwrap(), p);
        assert!(serde_json::from_str::<PendingInputs>(r#"{"a": [1]}"#).is_err());
        assert!(p.remove("a"));
        assert!(!p.remove("a"));
        assert!(!p.contains_key("a") && p.contains_key("b"));
        p.clear();
        assert!(p.is_empty());
    }

    #[test]
    fn used_keys_stay_sorted_and_unique_and_encode_as_a_set_would() {
        let mut u = UsedKeys::default();
        for k in ["k2", "k1", "k2"] {
            u.insert(k.into());
        }
        assert_eq!(u.iter().collect::<Vec<_>>(), ["k1", "k2"]);
        let set: std::collections::BTreeSet<String> = ["k1".to_owned(), "k2".to_owned()].into();
        let json = serde_json::to_string(&u).unwrap();
        assert_eq!(json, serde_json::to_string(&set).unwrap());
        assert_eq!(
            serde_json::from_str::<UsedKeys>(r#"["k2","k1","k1"]"#).unwrap(),
            u
        );
        u.retain(|k| k == "k2");
        assert!(u.contains("k2") && !u.contains("k1"));
    }
}
