//! The task table of a forest: records stored densely in creation order
//! (an arena), found by id through an index.
//!
//! Walks over a tree (cancel, pause, settling, result order) follow the
//! slots stored in each record (`parent_slot`, each child's slot) and never
//! hash an id: cancelling a 100,000-task subtree touches the records in
//! creation order instead of probing a hash table 100,000 times.

use super::record::TaskRecord;
use crate::model::IdMap;
use crate::model::TaskId;

/// A task's place in its forest: its index in creation order. A forest
/// never reuses a slot, so a slot names one task for the forest's life and
/// gives O(1) access to it without hashing its id
/// ([`Forest::task_at`](super::Forest::task_at)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot(pub(crate) u32);

impl Slot {
    /// The slot as an index (creation order within the forest).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Tables of at most this many records are searched linearly: a small tree
/// (most trees are a single task) holds no hash index at all.
const SCAN_MAX: usize = 8;

/// Records per chunk. The first chunk grows like a vector (one record for
/// a one-task tree); later chunks are allocated whole, so a large tree
/// never copies its records into a twice larger buffer and wastes at most
/// one partly filled chunk.
const CHUNK: usize = 512;

/// What only a tree of more than [`SCAN_MAX`] tasks has, boxed together:
/// its id index and its records after the first chunk.
#[derive(Debug, Clone, Default)]
struct Large {
    /// Slots from `CHUNK` on, `CHUNK` per vector.
    rest: Vec<Vec<Option<TaskRecord>>>,
    /// Id to slot, built once the table outgrows [`SCAN_MAX`].
    index: IdMap<Slot>,
}

/// Records by slot, and an id index.
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskTable {
    /// Slots `0..CHUNK`; `None` once the task's tree was deleted (slots are
    /// not reused).
    first: Vec<Option<TaskRecord>>,
    /// The id index and the slots from `CHUNK` on, once the table outgrows
    /// [`SCAN_MAX`] (one box for both: most trees never have either, and
    /// every tree keeps 8 bytes here, not 16).
    large: Option<Box<Large>>,
    /// Records that are `Some`.
    len: u32,
}

impl TaskTable {
    /// Number of records (deleted ones excluded).
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of slots handed out (deleted records included).
    fn slots(&self) -> usize {
        match self
            .large
            .as_deref()
            .and_then(|l| l.rest.last().map(|last| (l.rest.len(), last.len())))
        {
            None => self.first.len(),
            Some((chunks, last)) => CHUNK * chunks + last,
        }
    }

    fn entry(&self, slot: Slot) -> Option<&Option<TaskRecord>> {
        let i = slot.index();
        if i < CHUNK {
            self.first.get(i)
        } else {
            self.large.as_deref()?.rest.get(i / CHUNK - 1)?.get(i % CHUNK)
        }
    }

    fn entry_mut(&mut self, slot: Slot) -> Option<&mut Option<TaskRecord>> {
        let i = slot.index();
        if i < CHUNK {
            self.first.get_mut(i)
        } else {
            self.large
                .as_deref_mut()?
                .rest
                .get_mut(i / CHUNK - 1)?
                .get_mut(i % CHUNK)
        }
    }

    /// The slot of `id`, in O(1).
    pub(crate) fn slot_of(&self, id: &TaskId) -> Option<Slot> {
        if self.slots() <= SCAN_MAX {
            self.first
                .iter()
                .position(|r| r.as_ref().is_some_and(|r| r.id == *id))
                .map(|i| Slot(i as u32))
        } else {
            self.large.as_deref()?.index.get(id).copied()
        }
    }

    pub(crate) fn get(&self, id: &TaskId) -> Option<&TaskRecord> {
        self.at(self.slot_of(id)?)
    }

    pub(crate) fn contains_key(&self, id: &TaskId) -> bool {
        self.slot_of(id).is_some()
    }

    /// The record in `slot`, `None` if its tree was deleted.
    pub(crate) fn at(&self, slot: Slot) -> Option<&TaskRecord> {
        self.entry(slot)?.as_ref()
    }

    pub(crate) fn at_mut(&mut self, slot: Slot) -> Option<&mut TaskRecord> {
        self.entry_mut(slot)?.as_mut()
    }

    /// The slot the next inserted record gets.
    pub(crate) fn next_slot(&self) -> Slot {
        Slot(u32::try_from(self.slots()).expect("fewer than 2^32 tasks in one forest"))
    }

    /// Appends a record (its id must be new) and returns its slot.
    pub(crate) fn insert(&mut self, rec: TaskRecord) -> Slot {
        let slot = self.next_slot();
        let n = slot.index();
        if n == SCAN_MAX {
            // Outgrowing the linear scan: index every record so far.
            let index = &mut self.large.get_or_insert_with(Box::default).index;
            for (i, r) in self.first.iter().enumerate() {
                if let Some(r) = r {
                    index.insert(r.id, Slot(i as u32));
                }
            }
        }
        if n >= SCAN_MAX {
            self.large
                .get_or_insert_with(Box::default)
                .index
                .insert(rec.id, slot);
        }
        if n < CHUNK {
            if self.first.capacity() == 0 {
                // A one-task tree keeps exactly one record's worth.
                self.first.reserve_exact(1);
            }
            self.first.push(Some(rec));
        } else {
            let rest = &mut self.large.get_or_insert_with(Box::default).rest;
            if n.is_multiple_of(CHUNK) {
                rest.push(Vec::with_capacity(CHUNK));
            }
            rest.last_mut().expect("a chunk was just added").push(Some(rec));
        }
        self.len += 1;
        slot
    }

    /// Removes the record in `slot` (its slot stays taken).
    pub(crate) fn remove(&mut self, slot: Slot) -> Option<TaskRecord> {
        let rec = self.entry_mut(slot)?.take()?;
        if let Some(large) = self.large.as_mut() {
            large.index.remove(&rec.id);
        }
        self.len -= 1;
        if self.len == 0
            && let Some(large) = self.large.as_mut()
        {
            // Nothing left: free the index (the tombstones keep slot numbers).
            large.index = IdMap::default();
        }
        Some(rec)
    }

    /// Every record with its slot, in creation order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Slot, &TaskRecord)> + '_ {
        self.first
            .iter()
            .chain(self.large.iter().flat_map(|l| l.rest.iter()).flatten())
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().map(|r| (Slot(i as u32), r)))
    }

    /// Every record, in creation order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &TaskRecord> + '_ {
        self.first
            .iter()
            .chain(self.large.iter().flat_map(|l| l.rest.iter()).flatten())
            .flatten()
    }
}

impl std::ops::Index<Slot> for TaskTable {
    type Output = TaskRecord;

    fn index(&self, slot: Slot) -> &TaskRecord {
        self.at(slot).expect("a slot named by a live record resolves")
    }
}

impl std::ops::IndexMut<Slot> for TaskTable {
    fn index_mut(&mut self, slot: Slot) -> &mut TaskRecord {
        self.at_mut(slot).expect("a slot named by a live record resolves")
    }
}

impl std::ops::Index<&TaskId> for TaskTable {
    type Output = TaskRecord;

    fn index(&self, id: &TaskId) -> &TaskRecord {
        self.get(id).expect("an id validated by the command resolves")
    }
}

#[cfg(test)]
mod tests {
    use crate::core::{ChildOptions, Forest, HandlerOutcome, RootOptions, Slot};
    use crate::model::{JsonObject, Timestamp};

    /// Across the linear-scan limit and several chunk boundaries, every id
    /// finds its slot, every slot its record, in creation order; deleting a
    /// tree leaves the other tree's slots intact.
    #[test]
    fn slots_survive_scan_limit_chunk_boundaries_and_deletion() {
        let t = Timestamp::from_millis(1_000);
        let mut f = Forest::default();
        let small = f.create_root(t, RootOptions::default()).unwrap();
        let root = f.create_root(t, RootOptions::default()).unwrap();
        f.start(t, root).unwrap();
        let kids: Vec<_> = (0..2 * super::CHUNK + 7)
            .map(|_| f.create_child(t, root, ChildOptions::default()).unwrap())
            .collect();
        let all: Vec<_> = [small, root].into_iter().chain(kids.iter().copied()).collect();
        for (i, id) in all.iter().enumerate() {
            let slot = f.slot_of(*id).expect("every id has a slot");
            assert_eq!(slot, Slot(i as u32), "slots follow creation order");
            assert_eq!(f.task_at(slot).map(|r| r.id()), Some(*id));
        }
        assert_eq!(f.ids().collect::<Vec<_>>(), all);
        f.check_invariants().unwrap();
        // Finish and delete the big tree: its slots become tombstones.
        for &k in &kids {
            f.start(t, k).unwrap();
            f.finish(t, k, HandlerOutcome::Returned(JsonObject::new()))
                .unwrap();
        }
        f.finish(t, root, HandlerOutcome::Returned(JsonObject::new()))
            .unwrap();
        f.delete_tree(t, root).unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(f.slot_of(small), Some(Slot(0)));
        assert!(f.slot_of(kids[700]).is_none());
        assert!(f.task_at(Slot(700)).is_none());
        // New tasks take new slots, never a deleted one's.
        f.start(t, small).unwrap();
        let late = f.create_child(t, small, ChildOptions::default()).unwrap();
        assert_eq!(f.slot_of(late), Some(Slot(all.len() as u32)));
        f.check_invariants().unwrap();
    }
}
