//! Principals: bearer tokens mapped to names, and the owner record (with its
//! live-task limit) of each principal.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::runtime::Owner;

/// Who is calling. Every task belongs to the principal that created its tree.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal(pub Arc<str>);

impl Principal {
    /// The single principal of a server without tokens.
    pub fn anonymous() -> Self {
        Principal(Arc::from("anonymous"))
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

/// What a caller may do: everything, unless an OAuth access token's scopes
/// say less (`docs/auth.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grants {
    /// Call tools and read its own tasks.
    pub tasks: bool,
    /// Steer, pause, resume and cancel its own tasks.
    pub control: bool,
    /// The web view and `/metrics`.
    pub observe: bool,
}

impl Grants {
    /// Everything: a caller without OAuth (no tokens, or a static token).
    pub const ALL: Grants = Grants {
        tasks: true,
        control: true,
        observe: true,
    };
}

/// Bearer tokens and the principal each one authenticates.
///
/// Tokens are kept as SHA-256 digests, so a lookup compares digests rather
/// than the secrets themselves.
#[derive(Debug, Clone, Default)]
pub struct TokenTable {
    by_digest: HashMap<[u8; 32], Principal>,
}

impl TokenTable {
    /// Parses a token file: one `TOKEN PRINCIPAL` pair per line; blank lines
    /// and lines starting with `#` are ignored.
    ///
    /// # Errors
    ///
    /// A line that is not two fields, or a token listed twice, with its line number.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut table = TokenTable::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [token, principal] = fields[..] else {
                return Err(format!("token file line {}: expected `TOKEN PRINCIPAL`", n + 1));
            };
            if table
                .by_digest
                .insert(digest(token), Principal(Arc::from(principal)))
                .is_some()
            {
                return Err(format!("token file line {}: token listed twice", n + 1));
            }
        }
        if table.by_digest.is_empty() {
            return Err("token file lists no tokens".to_owned());
        }
        Ok(table)
    }

    /// Adds a token.
    pub fn insert(&mut self, token: &str, principal: &str) {
        self.by_digest
            .insert(digest(token), Principal(Arc::from(principal)));
    }

    /// The principal a token authenticates.
    pub fn authenticate(&self, token: &str) -> Option<&Principal> {
        self.by_digest.get(&digest(token))
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// `true` when there are no tokens.
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The owner record of each principal, created on first use.
pub(crate) struct Owners {
    max_live: usize,
    by_name: Mutex<HashMap<Arc<str>, Arc<Owner>>>,
}

impl Owners {
    pub(crate) fn new(max_live: usize) -> Self {
        Owners {
            max_live,
            by_name: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn of(&self, principal: &Principal) -> Arc<Owner> {
        self.of_name(&principal.0)
    }

    /// Every principal's live tasks on this instance.
    #[cfg(feature = "postgres")]
    pub(crate) fn live_counts(&self) -> Vec<(String, i64)> {
        self.by_name
            .lock()
            .values()
            .map(|o| (o.name().to_owned(), i64::try_from(o.live()).unwrap_or(i64::MAX)))
            .collect()
    }

    /// Sets each principal's live tasks on the other cluster instances
    /// (absent: none).
    #[cfg(feature = "postgres")]
    pub(crate) fn set_elsewhere(&self, counts: &HashMap<String, usize>) {
        for (name, n) in counts {
            self.of_name(name).set_elsewhere(*n);
        }
        for (name, owner) in self.by_name.lock().iter() {
            if !counts.contains_key(&**name) {
                owner.set_elsewhere(0);
            }
        }
    }

    /// Every principal's owner record.
    #[cfg(feature = "postgres")]
    pub(crate) fn all(&self) -> Vec<Arc<Owner>> {
        self.by_name.lock().values().cloned().collect()
    }

    pub(crate) fn of_name(&self, name: &str) -> Arc<Owner> {
        let mut by_name = self.by_name.lock();
        if let Some(o) = by_name.get(name) {
            return o.clone();
        }
        let name: Arc<str> = name.into();
        let owner = Owner::new(name.clone(), self.max_live);
        by_name.insert(name, owner.clone());
        owner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_files_parse_and_authenticate() {
        let t = TokenTable::parse("# comment\n\nsecret-a alice\nsecret-b bob\n").unwrap();
        assert_eq!(t.authenticate("secret-a").unwrap().name(), "alice");
        assert_eq!(t.authenticate("secret-b").unwrap().name(), "bob");
        assert!(t.authenticate("secret-c").is_none());
        assert!(
            TokenTable::parse("only-one-field\n")
                .unwrap_err()
                .contains("line 1")
        );
        assert!(TokenTable::parse("a x\na y\n").unwrap_err().contains("twice"));
        assert!(TokenTable::parse("# nothing\n").is_err());
    }
}
