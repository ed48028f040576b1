//! The task table of a forest: records stored densely in creation order
//! (an arena), found by id through an index.
//!
//! Walks over a tree (cancel, pause, settling, result order) follow the
//! slots stored in each record (`parent_slot`, each child's slot) and never
//! hash an id: cancelling a 100,000-task subtree touches the records in
//! creation order instead of probing a hash table 100,000 times.

use super::forest::IdMap;
use super::record::TaskRecord;
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

/// Records by slot, and an id index.
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskTable {
    /// By slot; `None` once the task's tree was deleted (slots are not reused).
    records: Vec<Option<TaskRecord>>,
    /// Id to slot, built once the table outgrows [`SCAN_MAX`].
    index: IdMap<Slot>,
    /// Records that are `Some`.
    len: usize,
}

impl TaskTable {
    /// Number of records (deleted ones excluded).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot of `id`, in O(1).
    pub(crate) fn slot_of(&self, id: &TaskId) -> Option<Slot> {
        if self.records.len() <= SCAN_MAX {
            self.records
                .iter()
                .position(|r| r.as_ref().is_some_and(|r| r.id == *id))
                .map(|i| Slot(i as u32))
        } else {
            self.index.get(id).copied()
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
        self.records.get(slot.index())?.as_ref()
    }

    pub(crate) fn at_mut(&mut self, slot: Slot) -> Option<&mut TaskRecord> {
        self.records.get_mut(slot.index())?.as_mut()
    }

    /// The slot the next inserted record gets.
    pub(crate) fn next_slot(&self) -> Slot {
        Slot(u32::try_from(self.records.len()).expect("fewer than 2^32 tasks in one forest"))
    }

    /// Appends a record (its id must be new) and returns its slot.
    pub(crate) fn insert(&mut self, rec: TaskRecord) -> Slot {
        let slot = self.next_slot();
        if self.records.len() == SCAN_MAX {
            // Outgrowing the linear scan: index every record so far.
            for (i, r) in self.records.iter().enumerate() {
                if let Some(r) = r {
                    self.index.insert(r.id, Slot(i as u32));
                }
            }
        }
        if self.records.len() >= SCAN_MAX {
            self.index.insert(rec.id, slot);
        }
        if self.records.capacity() == 0 {
            // A one-task tree keeps exactly one record's worth.
            self.records.reserve_exact(1);
        }
        self.records.push(Some(rec));
        self.len += 1;
        slot
    }

    /// Removes the record in `slot` (its slot stays taken).
    pub(crate) fn remove(&mut self, slot: Slot) -> Option<TaskRecord> {
        let rec = self.records.get_mut(slot.index())?.take()?;
        self.index.remove(&rec.id);
        self.len -= 1;
        if self.len == 0 {
            // Nothing left: free the index (the tombstones keep slot numbers).
            self.index = IdMap::default();
        }
        Some(rec)
    }

    /// Every record with its slot, in creation order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Slot, &TaskRecord)> + '_ {
        self.records
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().map(|r| (Slot(i as u32), r)))
    }

    /// Every record, in creation order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &TaskRecord> + '_ {
        self.records.iter().flatten()
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
