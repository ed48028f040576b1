//! A principal that owns trees: its limit on live tasks and its list of
//! trees in creation order (for `tasks/list` and the web view).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::error::RuntimeError;
use super::tree::TreeCell;
use crate::model::TaskId;

/// A principal that owns trees, with a limit on its live (non-terminal)
/// tasks and the list of its trees in creation order (for `tasks/list`).
///
/// Lock order: a tree's lock may be held while taking the list's lock
/// (a deleted tree leaves the list under its own lock), never the reverse.
#[derive(Debug)]
pub struct Owner {
    name: Arc<str>,
    live: AtomicUsize,
    /// Live tasks of this principal on other cluster instances, as they
    /// last published them (counted against the limit).
    elsewhere: AtomicUsize,
    max_live: usize,
    trees: Mutex<OwnedTrees>,
}

/// An owner's trees by list position (a position is never reused), and
/// each root's position, so that a deleted tree leaves the list.
#[derive(Debug, Default)]
struct OwnedTrees {
    last: u64,
    by_position: BTreeMap<u64, Weak<TreeCell>>,
    position_of: HashMap<TaskId, u64>,
}

impl Owner {
    /// A principal allowed `max_live` non-terminal tasks at once.
    pub fn new(name: impl Into<Arc<str>>, max_live: usize) -> Arc<Owner> {
        Arc::new(Owner {
            name: name.into(),
            live: AtomicUsize::new(0),
            elsewhere: AtomicUsize::new(0),
            max_live,
            trees: Mutex::new(OwnedTrees::default()),
        })
    }

    /// Appends a tree to the owner's list.
    pub(crate) fn enlist(&self, tree: &Arc<TreeCell>) {
        let mut trees = self.trees.lock();
        trees.last += 1;
        let position = trees.last;
        trees.by_position.insert(position, Arc::downgrade(tree));
        trees.position_of.insert(tree.root, position);
    }

    /// Removes a deleted tree from the list.
    pub(crate) fn delist(&self, root: TaskId) {
        let mut trees = self.trees.lock();
        if let Some(position) = trees.position_of.remove(&root) {
            trees.by_position.remove(&position);
        }
    }

    #[cfg(feature = "server")]
    /// Up to `max` listed trees from `position` on, in list order.
    pub(crate) fn trees_from(&self, position: u64, max: usize) -> Vec<(u64, Weak<TreeCell>)> {
        self.trees
            .lock()
            .by_position
            .range(position..)
            .take(max)
            .map(|(p, t)| (*p, t.clone()))
            .collect()
    }

    /// Up to `max` listed trees before `position`, newest first.
    #[cfg(feature = "ui")]
    pub(crate) fn trees_before(&self, position: u64, max: usize) -> Vec<(u64, Weak<TreeCell>)> {
        self.trees
            .lock()
            .by_position
            .range(..position)
            .rev()
            .take(max)
            .map(|(p, t)| (*p, t.clone()))
            .collect()
    }

    /// The principal's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Non-terminal tasks it owns now.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// The limit on live tasks.
    pub fn max_live(&self) -> usize {
        self.max_live
    }

    /// Counts `n` live tasks recovered after a restart (not limited: they
    /// existed before).
    pub(crate) fn force_reserve(&self, n: usize) {
        self.live.fetch_add(n, Ordering::AcqRel);
    }

    /// Reserves one live task, or says the limit is reached.
    pub(crate) fn try_reserve(&self) -> Result<(), RuntimeError> {
        let before = self.live.fetch_add(1, Ordering::AcqRel);
        if before + self.elsewhere.load(Ordering::Relaxed) >= self.max_live {
            self.live.fetch_sub(1, Ordering::AcqRel);
            return Err(RuntimeError::TooManyLiveTasks { max: self.max_live });
        }
        Ok(())
    }

    /// Sets the live tasks this principal has on other cluster instances.
    #[cfg(all(feature = "server", feature = "postgres"))]
    pub(crate) fn set_elsewhere(&self, n: usize) {
        self.elsewhere.store(n, Ordering::Relaxed);
    }

    pub(crate) fn release(&self) {
        let _ = self
            .live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1));
    }
}
