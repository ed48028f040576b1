//! Task identifiers.
//!
//! A [`TaskId`] is a `Copy` newtype over 128 bits, of which 122 come from the
//! operating system's random number generator (a UUID version 4). Ids are never
//! derived from time or counters, so a task id can double as a bearer handle
//! (tasks extension, "Task ID unguessability").

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The identifier of one task, unique across the process and unguessable.
///
/// On the wire it is the hyphenated lowercase UUID form
/// (`786512e2-9e0d-44bd-8f29-789f320fe840`).
///
/// # Examples
///
/// ```
/// use subtask::model::TaskId;
/// let id = TaskId::random();
/// let parsed: TaskId = id.to_string().parse().unwrap();
/// assert_eq!(id, parsed);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId {
    // Two u64 halves rather than a u128: 8-byte alignment keeps
    // `Option<TaskId>` at 24 bytes inside every task record.
    hi: u64,
    lo: u64,
}

impl TaskId {
    /// A fresh id with 122 random bits from the OS RNG (UUID v4). The OS
    /// bytes are fetched 4 KiB at a time per thread, so an id costs no
    /// system call; they are never reused.
    pub fn random() -> Self {
        use std::cell::RefCell;
        const BUF: usize = 4096;
        thread_local! {
            static POOL: RefCell<(Box<[u8; BUF]>, usize)> = RefCell::new((Box::new([0; BUF]), BUF));
        }
        let bytes: [u8; 16] = POOL.with(|p| {
            let mut p = p.borrow_mut();
            if p.1 + 16 > BUF {
                getrandom::fill(&mut p.0[..]).expect("the OS random number generator is available");
                p.1 = 0;
            }
            let at = p.1;
            p.1 += 16;
            let mut out = [0u8; 16];
            out.copy_from_slice(&p.0[at..at + 16]);
            // Used bytes are wiped so they cannot leak later.
            p.0[at..at + 16].fill(0);
            out
        });
        TaskId::from_u128(uuid::Builder::from_random_bytes(bytes).into_uuid().as_u128())
    }

    /// The id as a 128-bit integer (for hashing, sharding, storage keys).
    pub fn as_u128(self) -> u128 {
        (u128::from(self.hi) << 64) | u128::from(self.lo)
    }

    /// Rebuilds an id from [`TaskId::as_u128`]. Only for storage round-trips:
    /// new ids must come from [`TaskId::random`].
    pub fn from_u128(value: u128) -> Self {
        TaskId {
            hi: (value >> 64) as u64,
            lo: value as u64,
        }
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = uuid::Uuid::encode_buffer();
        f.write_str(
            uuid::Uuid::from_u128(self.as_u128())
                .hyphenated()
                .encode_lower(&mut buf),
        )
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskId({self})")
    }
}

/// Error returned when a string is not a task id (a hyphenated UUID).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseTaskIdError;

impl fmt::Display for ParseTaskIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("task id is not a hyphenated uuid")
    }
}

impl std::error::Error for ParseTaskIdError {}

impl FromStr for TaskId {
    type Err = ParseTaskIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // Only the canonical 36-character hyphenated form is accepted, so one
        // task has exactly one spelling on the wire.
        if s.len() != 36 {
            return Err(ParseTaskIdError);
        }
        uuid::Uuid::try_parse(s)
            .map(|u| TaskId::from_u128(u.as_u128()))
            .map_err(|_| ParseTaskIdError)
    }
}

impl Serialize for TaskId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut buf = uuid::Uuid::encode_buffer();
        serializer.serialize_str(
            uuid::Uuid::from_u128(self.as_u128())
                .hyphenated()
                .encode_lower(&mut buf),
        )
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = TaskId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a task id (hyphenated uuid string)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<TaskId, E> {
                v.parse()
                    .map_err(|_| E::custom(format_args!("invalid task id {v:?}: expected a hyphenated uuid")))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_are_version_4_and_distinct() {
        let a = TaskId::random();
        let b = TaskId::random();
        assert_ne!(a, b);
        let u = uuid::Uuid::from_u128(a.as_u128());
        assert_eq!(u.get_version_num(), 4);
    }

    #[test]
    fn display_parse_round_trip() {
        let id: TaskId = "786512e2-9e0d-44bd-8f29-789f320fe840".parse().unwrap();
        assert_eq!(id.to_string(), "786512e2-9e0d-44bd-8f29-789f320fe840");
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            "\"786512e2-9e0d-44bd-8f29-789f320fe840\""
        );
    }

    #[test]
    fn non_canonical_spellings_are_rejected() {
        for bad in [
            "",
            "task-1",
            "786512e29e0d44bd8f29789f320fe840",
            "{786512e2-9e0d-44bd-8f29-789f320fe840}",
            "786512e2-9e0d-44bd-8f29-789f320fe84g",
        ] {
            assert!(bad.parse::<TaskId>().is_err(), "{bad}");
        }
        let err = serde_json::from_str::<TaskId>("\"nope\"").unwrap_err();
        assert!(err.to_string().contains("invalid task id"), "{err}");
        assert!(serde_json::from_str::<TaskId>("42").is_err());
    }
}

/// Hasher for [`TaskId`] keys. Ids are random, so mixing two words with a
/// multiply is enough; attackers cannot choose ids that exist.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = self.0.rotate_left(29) ^ n;
    }
}

/// A `HashMap` keyed by task id with [`IdHasher`].
pub type IdMap<V> = HashMap<TaskId, V, BuildHasherDefault<IdHasher>>;
