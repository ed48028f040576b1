//! Ordered results (I12): post-order by `childTaskIds`, emitted as early as
//! the order allows.

use super::forest::Forest;
use crate::model::TaskId;

/// An incremental walk over one tree that yields each terminal task exactly
/// once, in result order: each child's subtree in `childTaskIds` order, then
/// the parent.
///
/// Because children are append-only (I2) and a parent becomes terminal only
/// after its children (I4), a task is emitted only when everything before it
/// in the final order is known and terminal. Each call does amortized O(1)
/// work per task emitted.
///
/// # Examples
///
/// ```
/// use subtask::core::{Forest, RootOptions, ChildOptions, HandlerOutcome, ResultCursor};
/// use subtask::model::{JsonObject, Timestamp};
///
/// let mut f = Forest::default();
/// let t = Timestamp::from_millis(0);
/// let root = f.create_root(t, RootOptions::default()).unwrap();
/// f.start(t, root).unwrap();
/// let a = f.create_child(t, root, ChildOptions::default()).unwrap();
/// let b = f.create_child(t, root, ChildOptions::default()).unwrap();
/// f.start(t, a).unwrap();
/// f.start(t, b).unwrap();
/// let mut cursor = ResultCursor::new(root);
/// f.finish(t, b, HandlerOutcome::Returned(JsonObject::new())).unwrap();
/// assert_eq!(cursor.next_ready(&f), None); // `a` comes first and is still running
/// f.finish(t, a, HandlerOutcome::Returned(JsonObject::new())).unwrap();
/// assert_eq!(cursor.next_ready(&f), Some(a));
/// assert_eq!(cursor.next_ready(&f), Some(b));
/// ```
#[derive(Debug, Clone)]
pub struct ResultCursor {
    /// (task, index of the next child to visit).
    stack: Vec<(TaskId, usize)>,
}

impl ResultCursor {
    /// A cursor at the start of the tree rooted at `root`.
    pub fn new(root: TaskId) -> Self {
        ResultCursor {
            stack: vec![(root, 0)],
        }
    }

    /// The next task in result order if it is terminal now, else `None`
    /// (call again after the forest changes). Also `None` once finished or
    /// when the tree was deleted.
    pub fn next_ready(&mut self, forest: &Forest) -> Option<TaskId> {
        loop {
            let (id, i) = *self.stack.last()?;
            let Some(rec) = forest.task(id) else {
                // The tree was deleted: nothing more will come.
                self.stack.clear();
                return None;
            };
            if let Some(child) = rec.child(i) {
                if let Some(top) = self.stack.last_mut() {
                    top.1 += 1;
                }
                self.stack.push((child, 0));
                continue;
            }
            if rec.is_terminal() {
                self.stack.pop();
                return Some(id);
            }
            return None;
        }
    }

    /// `true` once the root itself was emitted (or the tree vanished).
    pub fn is_finished(&self) -> bool {
        self.stack.is_empty()
    }
}
