//! Letting finished trees go (`RuntimeConfig::release_finished_after`;
//! `docs/durability.md`, "Finished trees"): once a tree's root is terminal,
//! every change of the tree is durable and the grace has passed, the tree
//! leaves memory. The store, which answers for such trees
//! ([`TaskStore::finished`](crate::store::TaskStore::finished)), keeps it
//! until its deletion time and deletes it then.
//!
//! It rides on the tree's deletion in the core ([`Forest::delete_tree`]):
//! the same effect takes the tree out of the index, its owner's list and
//! the counts, and wakes whatever waits on it; only its write differs
//! ([`WriteOp::Release`](crate::store::WriteOp::Release) instead of a
//! deletion). The check runs on the timer armed when the root finished,
//! so no clock is read and nothing is scanned on the hot path.
//!
//! [`Forest::delete_tree`]: crate::core::Forest::delete_tree

use std::sync::Arc;

use crate::runtime::inner::Inner;
use crate::runtime::tree::TreeCell;

/// How long after the store's durable watermark is checked again, when a
/// due tree's last change is not durable yet.
const NOT_DURABLE_RETRY_MS: u64 = 20;

impl Inner {
    /// The grace in ms before a finished tree leaves memory; `None` when
    /// finished trees stay (not configured, or the store does not answer
    /// for them).
    pub(crate) fn release_grace(&self) -> Option<u64> {
        let grace = self.config.release_finished_after?;
        if !self.store.as_ref()?.lets_finished_go() {
            return None;
        }
        Some(u64::try_from(grace.as_millis()).unwrap_or(u64::MAX))
    }

    /// Whether finished trees are let go ([`Inner::release_grace`]) on a
    /// store that marks them as they end ([`WriteOp::Ended`]): the mark is
    /// written with the root's terminal state (or, for a tree that had
    /// ended before a restart, as it is loaded), and nothing when the
    /// tree leaves memory.
    ///
    /// [`WriteOp::Ended`]: crate::store::WriteOp::Ended
    pub(crate) fn marks_ended(&self) -> bool {
        self.release_grace().is_some() && self.store.as_ref().is_some_and(|s| s.marks_ended())
    }

    /// Lets `tree` go if it is finished, durable and past its grace;
    /// returns whether it did. A tree that is finished but not yet due (or
    /// not yet durable) is checked again when it is.
    pub(crate) fn release_if_due(self: &Arc<Self>, tree: &Arc<TreeCell>) -> bool {
        let Some(grace) = self.release_grace() else {
            return false;
        };
        let Some(store) = self.store.clone() else {
            return false;
        };
        let mut later = None;
        let released = self.with_tree(tree, |st, now, post| {
            let Some(root) = st.forest.task(tree.root) else {
                return false;
            };
            if !root.is_terminal() {
                return false;
            }
            let due = root.last_updated_at().saturating_add(grace);
            if now < due {
                later = Some(due);
                return false;
            }
            match store.is_durable(st.durable.ticket) {
                Ok(true) => {}
                Ok(false) => {
                    later = Some(now.saturating_add(NOT_DURABLE_RETRY_MS));
                    return false;
                }
                // A failed store keeps nothing more: the tree stays here.
                Err(_) => return false,
            }
            post.release = Some(st.forest.next_deadline().map(|t| t.as_millis()));
            st.forest.delete_tree(now, tree.root).is_ok()
        });
        if let Some(at) = later {
            self.timers.arm(at, tree.root);
        }
        released
    }
}
