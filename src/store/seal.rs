//! Task state sealed at rest (`docs/encryption.md`): a [`Keyring`] read
//! from a key file, and the sealing of every stored value that can hold
//! user data (a task's state, a tree's launch, journal entries, a cluster's
//! inbox commands and answers, worker news between instances) with
//! XChaCha20-Poly1305 (HChaCha20 from `chacha20`, then ring's ChaCha20-Poly1305).
//!
//! A sealed value is text: `sealed:v1:<key id>:<base64 of nonce ‖ ciphertext ‖ tag>`,
//! with a 192-bit nonce per value (a random per-process prefix and a counter). Its associated data names the
//! column it belongs in and the id of the task (tree, or instance) it
//! belongs to, plus a number where a row has one (a journal entry's place,
//! an inbox row's sequence number): a sealed value copied into another
//! row or column does not open there. A value that does not start with
//! `sealed:` is a clear one (written before a key was configured; no
//! stored JSON starts so); it is read as it is.

use std::borrow::Cow;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::aead::{Aad as RingAad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};

use super::StoreError;

/// What every sealed value starts with.
pub(crate) const SEALED: &str = "sealed:";
/// The prefix of a value sealed in this format version.
const PREFIX: &str = "sealed:v1:";
/// Nonce and tag lengths.
const NONCE: usize = 24;
const TAG: usize = 16;
/// What a key's check value seals (`Keyring::check`).
const CHECK: &str = "subtask key check";

/// The keys a store seals and opens values with: the first is the
/// current key (every new value is sealed with it), the others are only
/// for reading values sealed before a rotation.
///
/// Built from a key file's text ([`Keyring::parse`]): one key per line,
/// `KEY_ID BASE64_KEY` (a 32-byte key in standard base64; the id is 1 to
/// 64 of `A-Z a-z 0-9 . _ -`), blank lines and lines starting with `#`
/// ignored. Its `Debug` shows the ids, never the keys.
pub struct Keyring {
    keys: Vec<Key>,
}

/// One key. XChaCha20-Poly1305 with the nonce `prefix ‖ counter` is
/// ChaCha20-Poly1305 (RFC 8439) under the subkey HChaCha20(key, prefix)
/// with the nonce `0⁴ ‖ counter` (draft-irtf-cfrg-xchacha §2.3): HChaCha20
/// comes from the `chacha20` crate (ring has no XChaCha), the AEAD from
/// ring, whose assembly seals a task's state about six times faster than
/// the RustCrypto one (0.3 against 1.9 µs for 116 bytes, measured here).
struct Key {
    id: String,
    /// The key itself, to derive the subkey of another process's prefix.
    key: chacha20::Key,
    /// The subkey of this process's prefix ([`nonce_prefix`]), derived
    /// once: every value this process seals uses it.
    sealer: LessSafeKey,
}

impl Key {
    /// ChaCha20-Poly1305 under the subkey of `prefix`.
    fn aead(key: &chacha20::Key, prefix: &[u8; 16]) -> LessSafeKey {
        let subkey = chacha20::hchacha::<chacha20::R20>(key, prefix.into());
        LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &subkey).expect("a 32-byte key"))
    }
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("ids", &self.ids().collect::<Vec<_>>())
            .finish()
    }
}

/// A key file that cannot be used: what is wrong and on which line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyringError(String);

impl fmt::Display for KeyringError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KeyringError {}

/// Which stored column a value belongs in (part of its associated data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) enum Column {
    /// A task's state (`tasks.state`, `subtask_tasks.state`).
    State,
    /// A tree's launch (the tool call that runs it again), on its root's row.
    Launch,
    /// A journal entry (durable execution).
    Journal,
    /// A command in a cluster's inbox.
    Command,
    /// The answer to a command in a cluster's inbox.
    Answer,
    /// Worker news passed between cluster instances.
    Mail,
    /// A key's check value (`Keyring::check`).
    Check,
}

impl Column {
    fn name(self) -> &'static [u8] {
        match self {
            Column::State => b"state",
            Column::Launch => b"launch",
            Column::Journal => b"journal",
            Column::Command => b"command",
            Column::Answer => b"answer",
            Column::Mail => b"mail",
            Column::Check => b"check",
        }
    }
}

/// Where a sealed value belongs: its column, the id of the task (tree,
/// instance) whose row it is on, and the row's number where it has one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    pub(crate) column: Column,
    pub(crate) id: u128,
    pub(crate) n: i64,
}

impl Place {
    /// `column` of the row of `id`.
    pub(crate) fn new(column: Column, id: u128) -> Place {
        Place { column, id, n: 0 }
    }

    /// `column` of row `n` of `id` (a journal entry, an inbox row).
    pub(crate) fn nth(column: Column, id: u128, n: i64) -> Place {
        Place { column, id, n }
    }

    /// The associated data: a fixed layout, so that no two places share it.
    fn aad(self) -> Aad {
        let name = self.column.name();
        let mut aad = Aad {
            bytes: [0; AAD_MAX],
            len: 0,
        };
        for part in [
            b"subtask-seal-v1\0".as_slice(),
            name,
            &[0],
            &self.id.to_be_bytes(),
            &self.n.to_be_bytes(),
        ] {
            aad.bytes[aad.len..aad.len + part.len()].copy_from_slice(part);
            aad.len += part.len();
        }
        aad
    }
}

/// The longest associated data: the tag, the longest column name and its
/// terminator, the id, the row number.
const AAD_MAX: usize = 16 + 8 + 1 + 16 + 8;

/// A place's associated data, on the stack (it is built for every value
/// sealed or opened).
struct Aad {
    bytes: [u8; AAD_MAX],
    len: usize,
}

impl Aad {
    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// A value's nonce is this process's prefix ([`nonce_prefix`]) and then
/// [`next_counter`]: unique within the process without a system call per
/// value (a `getrandom` per seal cost more than the cipher on the store's
/// writer thread); two processes collide only if they draw the same
/// 128-bit prefix.
///
/// The prefix: 16 random bytes drawn once per process from the operating
/// system.
fn nonce_prefix() -> &'static [u8; 16] {
    use std::sync::OnceLock;
    static PREFIX: OnceLock<[u8; 16]> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let mut p = [0u8; 16];
        getrandom::fill(&mut p).expect("the operating system's random source failed");
        p
    })
}

/// The ChaCha20-Poly1305 nonce of the XChaCha nonce `prefix ‖ counter`
/// under the prefix's subkey: `0⁴ ‖ counter`.
fn inner_nonce(counter: &[u8; 8]) -> Nonce {
    let mut nonce = [0u8; 12];
    nonce[4..].copy_from_slice(counter);
    Nonce::assume_unique_for_key(nonce)
}

/// The 64-bit counter part of a fresh nonce (see [`nonce_prefix`]).
fn next_counter() -> [u8; 8] {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    COUNTER.fetch_add(1, Ordering::Relaxed).to_be_bytes()
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl Keyring {
    /// Reads a key file's text (see [`Keyring`]).
    ///
    /// # Errors
    ///
    /// A line that is not `KEY_ID BASE64_KEY`, an id with other characters
    /// or longer than 64, a key that is not base64 of 32 bytes, an id given
    /// twice, or no key at all. The message names the line, never a key.
    pub fn parse(text: &str) -> Result<Keyring, KeyringError> {
        let mut keys: Vec<Key> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |what: &str| KeyringError(format!("line {}: {what}", n + 1));
            let mut parts = line.split_whitespace();
            let (Some(id), Some(key), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(bad("expected `KEY_ID BASE64_KEY`"));
            };
            if !valid_id(id) {
                return Err(bad(&format!(
                    "key id {id:?}: use 1 to 64 of A-Z, a-z, 0-9, '.', '_', '-'"
                )));
            }
            if keys.iter().any(|k| k.id == id) {
                return Err(bad(&format!("key id {id:?} is given twice")));
            }
            let bytes = STANDARD
                .decode(key)
                .map_err(|_| bad(&format!("the key of {id:?} is not base64")))?;
            let bytes: [u8; 32] = bytes.as_slice().try_into().map_err(|_| {
                bad(&format!(
                    "the key of {id:?} is {} bytes; a key is 32 random bytes (`head -c 32 /dev/urandom | base64`)",
                    bytes.len()
                ))
            })?;
            let key = bytes.into();
            keys.push(Key {
                id: id.to_owned(),
                sealer: Key::aead(&key, nonce_prefix()),
                key,
            });
        }
        if keys.is_empty() {
            return Err(KeyringError("no key in the key file".into()));
        }
        Ok(Keyring { keys })
    }

    /// The id of the current key: the one new values are sealed with.
    pub fn current(&self) -> &str {
        &self.keys[0].id
    }

    /// Every key id, the current one first.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.id.as_str())
    }

    /// Whether `id` is one of these keys.
    pub fn has(&self, id: &str) -> bool {
        self.keys.iter().any(|k| k.id == id)
    }

    /// `plain` sealed with the current key for `place`.
    pub(crate) fn seal(&self, place: Place, plain: &str) -> String {
        self.seal_with(&self.keys[0], place, plain)
    }

    fn seal_with(&self, key: &Key, place: Place, plain: &str) -> String {
        let counter = next_counter();
        let mut buf = Vec::with_capacity(NONCE + plain.len() + TAG);
        buf.extend_from_slice(nonce_prefix());
        buf.extend_from_slice(&counter);
        buf.extend_from_slice(plain.as_bytes());
        // The XChaCha nonce `prefix ‖ counter`, through the subkey of this
        // process's prefix (`Key`).
        let tag = key
            .sealer
            .seal_in_place_separate_tag(
                inner_nonce(&counter),
                RingAad::from(place.aad().as_slice()),
                &mut buf[NONCE..],
            )
            .expect("a value fits ChaCha20-Poly1305");
        buf.extend_from_slice(tag.as_ref());
        let mut out = String::with_capacity(PREFIX.len() + key.id.len() + 1 + buf.len().div_ceil(3) * 4);
        out.push_str(PREFIX);
        out.push_str(&key.id);
        out.push(':');
        STANDARD.encode_string(&buf, &mut out);
        out
    }

    /// The key id a sealed value names (`None` for a clear value or one
    /// not in this format).
    pub(crate) fn key_of(text: &str) -> Option<&str> {
        let rest = text.strip_prefix(PREFIX)?;
        rest.split_once(':').map(|(id, _)| id)
    }

    /// Whether `text` is sealed with the current key.
    pub(crate) fn is_current(&self, text: &str) -> bool {
        Keyring::key_of(text) == Some(self.current())
    }

    /// Opens a value sealed for `place`.
    fn open_sealed(&self, place: Place, text: &str) -> Result<String, StoreError> {
        let what = || format!("a sealed {}", String::from_utf8_lossy(place.column.name()));
        let rest = text.strip_prefix(PREFIX).ok_or_else(|| {
            StoreError::Corrupt(format!("{}: unknown sealed format (newer subtask?)", what()))
        })?;
        let (id, b64) = rest
            .split_once(':')
            .ok_or_else(|| StoreError::Corrupt(format!("{}: no key id", what())))?;
        let key = self.keys.iter().find(|k| k.id == id).ok_or_else(|| {
            StoreError::Key(format!(
                "{} is sealed with key {id:?}, which the key file does not have (keys: {})",
                what(),
                self.ids().collect::<Vec<_>>().join(", ")
            ))
        })?;
        let mut buf = STANDARD
            .decode(b64)
            .map_err(|e| StoreError::Corrupt(format!("{}: {e}", what())))?;
        if buf.len() < NONCE + TAG {
            return Err(StoreError::Corrupt(format!("{}: too short", what())));
        }
        let prefix: [u8; 16] = buf[..16].try_into().expect("16 bytes");
        let counter: [u8; 8] = buf[16..NONCE].try_into().expect("8 bytes");
        // This process's values open with the subkey it keeps; another
        // process's need the subkey of their prefix.
        let other;
        let aead = if &prefix == nonce_prefix() {
            &key.sealer
        } else {
            other = Key::aead(&key.key, &prefix);
            &other
        };
        let plain_len = aead
            .open_in_place(
                inner_nonce(&counter),
                RingAad::from(place.aad().as_slice()),
                &mut buf[NONCE..],
            )
            .map_err(|_| {
                StoreError::Key(format!(
                    "{} does not open with key {id:?}: a different key with the same id, or a value moved or altered",
                    what()
                ))
            })?
            .len();
        buf.truncate(NONCE + plain_len);
        buf.drain(..NONCE);
        String::from_utf8(buf).map_err(|_| StoreError::Corrupt(format!("{}: not UTF-8", what())))
    }

    /// The check value of key `id` (sealed with that key; `None` when the
    /// keyring does not have it): stored once per key id, so that a later
    /// start finds out a wrong key before it reads or writes anything.
    pub(crate) fn check(&self, id: &str) -> Option<String> {
        let key = self.keys.iter().find(|k| k.id == id)?;
        Some(self.seal_with(key, Place::new(Column::Check, 0), CHECK))
    }

    /// Verifies a stored check value of key `id`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Key`]: the keyring has no key `id`, or its key is not
    /// the one the check value was sealed with.
    pub(crate) fn verify(&self, id: &str, check: &str) -> Result<(), StoreError> {
        if !self.has(id) {
            return Err(StoreError::Key(format!(
                "the database holds values sealed with key {id:?}, which the key file does not have (it has {}); add that key to the file (after the current one)",
                self.ids().collect::<Vec<_>>().join(", ")
            )));
        }
        match self.open_sealed(Place::new(Column::Check, 0), check) {
            Ok(v) if v == CHECK => Ok(()),
            _ => Err(StoreError::Key(format!(
                "the key {id:?} in the key file is not the key the database's values were sealed with under that id"
            ))),
        }
    }
}

/// What a re-encryption did (`SqliteStore::reencrypt`,
/// `PostgresStore::reencrypt`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reencrypted {
    /// Values sealed again with the current key (clear values and values
    /// under older keys; values already under the current key are left).
    pub values: u64,
    /// The key ids whose check values were removed: nothing in the
    /// database is sealed with them any more, and they may be taken out of
    /// the key file.
    pub retired: Vec<String>,
}

/// `text` sealed again with the current key when it is clear or sealed
/// with another key (`None` when it already is under the current key).
///
/// # Errors
///
/// As [`open`].
pub(crate) fn reseal(keys: &Keyring, place: Place, text: &str) -> Result<Option<String>, StoreError> {
    if keys.is_current(text) {
        // Opened anyway: a value under the current key that does not open
        // is reported here rather than at the next start.
        open(Some(keys), place, text)?;
        return Ok(None);
    }
    let plain = open(Some(keys), place, text)?;
    Ok(Some(keys.seal(place, &plain)))
}

/// `text` sealed with `keys`' current key for `place`, or `text` as it is
/// when there are no keys (no copy).
#[cfg(feature = "sqlite")]
pub(crate) fn seal<'a>(keys: Option<&Keyring>, place: Place, text: &'a str) -> Cow<'a, str> {
    match keys {
        None => Cow::Borrowed(text),
        // Sealed already, before it reached the writer (a task's state is
        // sealed in `SqliteStore::submit`; no clear stored value starts so).
        Some(_) if text.starts_with(SEALED) => Cow::Borrowed(text),
        Some(k) => Cow::Owned(k.seal(place, text)),
    }
}

/// A stored value opened: a sealed one with `keys` (its associated data
/// must be `place`'s), a clear one as it is (no copy).
///
/// # Errors
///
/// A sealed value under a key id the keyring lacks, or that does not open
/// ([`StoreError::Key`]); a damaged one, or a sealed one without keys
/// ([`StoreError::Corrupt`]).
pub(crate) fn open<'a>(
    keys: Option<&Keyring>,
    place: Place,
    text: &'a str,
) -> Result<Cow<'a, str>, StoreError> {
    if !text.starts_with(SEALED) {
        return Ok(Cow::Borrowed(text));
    }
    match keys {
        Some(k) => k.open_sealed(place, text).map(Cow::Owned),
        // A database with sealed values is refused at open without keys
        // (its check values); a sealed value in one that has none is damage.
        None => Err(StoreError::Corrupt(format!(
            "a stored {} is sealed, and the database has no encryption key",
            String::from_utf8_lossy(place.column.name())
        ))),
    }
}

/// [`open`] of an owned value: the same `String` back when it is clear.
pub(crate) fn open_owned(keys: Option<&Keyring>, place: Place, text: String) -> Result<String, StoreError> {
    if !text.starts_with(SEALED) {
        return Ok(text);
    }
    open(keys, place, &text).map(Cow::into_owned)
}

/// Whether the key ids a database has check values for (`stored`, with
/// their check values) fit `keys`: every stored id must be in the keyring
/// with the same key, and a database with any sealed values needs keys.
/// Returns the current key's id when the database has no check value for
/// it yet (to be stored before anything is sealed with it; a read-only key
/// the database does not know sealed nothing in it, and gets none).
///
/// # Errors
///
/// [`StoreError::Key`], naming the key id that is missing or wrong.
pub(crate) fn verify_keys(
    keys: Option<&Keyring>,
    stored: &[(String, String)],
) -> Result<Vec<String>, StoreError> {
    let Some(keys) = keys else {
        if stored.is_empty() {
            return Ok(Vec::new());
        }
        return Err(StoreError::Key(format!(
            "the database holds values sealed with key {}; start with the key file (--encryption-keys) that has it",
            stored
                .iter()
                .map(|(id, _)| format!("{id:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    for (id, check) in stored {
        keys.verify(id, check)?;
    }
    let current = keys.current();
    Ok(if stored.iter().any(|(s, _)| s == current) {
        Vec::new()
    } else {
        vec![current.to_owned()]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(text: &str) -> Keyring {
        Keyring::parse(text).unwrap()
    }

    const K1: &str = "k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K1_OTHER: &str = "k1 HwECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K2: &str = "k2 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

    /// What ring and the subkey (`Key`) write is exactly what RustCrypto's
    /// XChaCha20-Poly1305 writes for the same key, nonce and data, and a
    /// value sealed so by another process (another prefix) opens.
    #[test]
    fn the_subkey_shortcut_is_xchacha20_poly1305() {
        use chacha20poly1305::aead::AeadInOut;
        use chacha20poly1305::{KeyInit, XChaCha20Poly1305, XNonce};
        let keys = ring(K1);
        let place = Place::nth(Column::Journal, 7, 3);
        let plain = "{\"secret\":\"x\"}".repeat(9);
        let sealed = keys.seal(place, &plain);
        let b64 = sealed.strip_prefix("sealed:v1:k1:").unwrap();
        let raw = STANDARD.decode(b64).unwrap();
        let (nonce, rest) = raw.split_at(NONCE);
        assert_eq!(&nonce[..16], nonce_prefix());
        let key: [u8; 32] = STANDARD
            .decode("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
            .unwrap()
            .try_into()
            .unwrap();
        let mut buf = plain.clone().into_bytes();
        let tag = XChaCha20Poly1305::new(&key.into())
            .encrypt_inout_detached(
                &XNonce::try_from(nonce).unwrap(),
                place.aad().as_slice(),
                buf.as_mut_slice().into(),
            )
            .unwrap();
        buf.extend_from_slice(&tag);
        assert_eq!(rest, buf.as_slice());
        assert_eq!(open(Some(&keys), place, &sealed).unwrap(), plain);

        // Sealed by RustCrypto under another prefix, as another process
        // would: it opens, and not in another place.
        let other = [9u8; 16]
            .iter()
            .chain(&[0, 0, 0, 0, 0, 0, 0, 42])
            .copied()
            .collect::<Vec<u8>>();
        let mut buf = plain.clone().into_bytes();
        let tag = XChaCha20Poly1305::new(&key.into())
            .encrypt_inout_detached(
                &XNonce::try_from(other.as_slice()).unwrap(),
                place.aad().as_slice(),
                buf.as_mut_slice().into(),
            )
            .unwrap();
        let mut raw = other;
        raw.extend_from_slice(&buf);
        raw.extend_from_slice(&tag);
        let theirs = format!("sealed:v1:k1:{}", STANDARD.encode(&raw));
        assert_eq!(open(Some(&keys), place, &theirs).unwrap(), plain);
        assert!(open(Some(&keys), Place::nth(Column::Journal, 7, 4), &theirs).is_err());
    }

    #[test]
    fn a_value_opens_only_in_its_place_and_with_its_key() {
        let k = ring(K1);
        let p = Place::new(Column::State, 7);
        let s = k.seal(p, "{\"secret\":1}");
        assert!(s.starts_with("sealed:v1:k1:"), "{s}");
        assert!(!s.contains("secret"));
        assert_eq!(open(Some(&k), p, &s).unwrap(), "{\"secret\":1}");
        assert!(matches!(
            open(Some(&k), Place::new(Column::State, 8), &s),
            Err(StoreError::Key(_))
        ));
        assert!(matches!(
            open(Some(&k), Place::new(Column::Launch, 7), &s),
            Err(StoreError::Key(_))
        ));
        assert!(matches!(
            open(Some(&k), Place::nth(Column::State, 7, 1), &s),
            Err(StoreError::Key(_))
        ));
        assert!(matches!(
            open(Some(&ring(K1_OTHER)), p, &s),
            Err(StoreError::Key(_))
        ));
        assert!(matches!(open(None, p, &s), Err(StoreError::Corrupt(_))));
        // Two seals of one value differ (random nonces).
        assert_ne!(s, k.seal(p, "{\"secret\":1}"));
        // A clear value is read as it is.
        assert_eq!(open(Some(&k), p, "{}").unwrap(), "{}");
    }

    #[test]
    fn rotation_reads_old_values_and_seals_new_ones_with_the_first_key() {
        let old = ring(K1);
        let p = Place::new(Column::Journal, 1);
        let s = old.seal(p, "x");
        let both = ring(&format!("# rotated\n{K2}\n\n{K1}\n"));
        assert_eq!(both.current(), "k2");
        assert_eq!(open(Some(&both), p, &s).unwrap(), "x");
        assert!(both.seal(p, "x").starts_with("sealed:v1:k2:"));
        let e = open(Some(&ring(K2)), p, &s).unwrap_err();
        assert!(e.to_string().contains("\"k1\""), "{e}");
    }

    #[test]
    fn check_values_find_a_wrong_or_missing_key() {
        let k = ring(K1);
        let check = k.check("k1").unwrap();
        assert_eq!(
            verify_keys(Some(&k), &[("k1".into(), check.clone())]).unwrap(),
            Vec::<String>::new()
        );
        assert!(verify_keys(Some(&ring(K1_OTHER)), &[("k1".into(), check.clone())]).is_err());
        let e = verify_keys(Some(&ring(K2)), &[("k1".into(), check.clone())]).unwrap_err();
        assert!(e.to_string().contains("\"k1\""), "{e}");
        assert!(verify_keys(None, &[("k1".into(), check)]).is_err());
        assert_eq!(verify_keys(Some(&k), &[]).unwrap(), vec!["k1".to_owned()]);
    }

    #[test]
    fn key_files_are_checked_line_by_line() {
        assert!(Keyring::parse("").is_err());
        assert!(Keyring::parse("# only a comment\n").is_err());
        assert!(Keyring::parse("k1").is_err());
        assert!(Keyring::parse("k1 AAAA").is_err());
        assert!(Keyring::parse("k/1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").is_err());
        assert!(Keyring::parse(&format!("{K1}\n{K1_OTHER}")).is_err());
        let e = Keyring::parse(&format!("{K1}\nk2 !!")).unwrap_err();
        assert!(e.to_string().starts_with("line 2"), "{e}");
        assert!(!format!("{:?}", ring(K1)).contains("AAEC"));
    }
}
