//! A task's timeline: when it entered each stage of its life (queued for a
//! slot, waiting for dependencies, running, paused, waiting for input,
//! awaiting children, ended), for the web view's timeline
//! (`docs/operations.md`).
//!
//! The forest records it in its command plumbing (`Forest::end`), from the
//! state each command leaves a task in, at the command's `now`: it reads no
//! clock of its own and changes no decision of the lifecycle. It must not
//! grow without bound: a task keeps its first 15 changes and its latest
//! one ([`TIMELINE_MARKS`] in all), and counts the changes it dropped
//! between them (a task paused and resumed 10,000 times holds 16 marks).
//!
//! A finished task's timeline is stored with its terminal state (at most
//! 16 marks, once): a finished tree keeps it across a restart, in the
//! SQLite file once the runtime let it go, and on another cluster
//! instance. A live task's is not stored (it would grow every state
//! write): restored from a store, or read by another instance from the
//! database, it starts with one [`Stage::Unrecorded`] mark at its creation.

/// At most this many marks per task: the first `TIMELINE_MARKS - 1`
/// changes, then the latest one (with the count of changes dropped before
/// it). 16 marks are 128 bytes.
pub const TIMELINE_MARKS: usize = 16;

/// A stage of a task's life as its timeline shows it. Derived from the
/// task's state, never stored twice: pause wins over input, input over
/// the handler's own state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Stage {
    /// Created, its handler not started: waiting for a scheduler slot.
    Queued,
    /// Not started: waiting for its `after` dependencies to end.
    Dependencies,
    /// Its handler runs (also with a pause requested, until its next safe point).
    Running,
    /// Paused.
    Paused,
    /// Waiting for input (`input_required`).
    Input,
    /// Awaiting its children: its handler waits on a subtask's outcome, or
    /// returned and the task completes once its children end.
    Children,
    /// Terminal (completed, failed or cancelled).
    Ended,
    /// Not recorded here: what happened before a restart, or in another
    /// cluster instance (timelines are not stored).
    Unrecorded,
}

impl Stage {
    /// Every stage, in the order of their discriminants.
    pub const ALL: [Stage; 8] = [
        Stage::Queued,
        Stage::Dependencies,
        Stage::Running,
        Stage::Paused,
        Stage::Input,
        Stage::Children,
        Stage::Ended,
        Stage::Unrecorded,
    ];

    /// The stage's name in the web view's JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Queued => "queued",
            Stage::Dependencies => "dependencies",
            Stage::Running => "running",
            Stage::Paused => "paused",
            Stage::Input => "input",
            Stage::Children => "children",
            Stage::Ended => "ended",
            Stage::Unrecorded => "unrecorded",
        }
    }
}

/// One change of stage: the stage entered and when, in milliseconds after
/// the task's creation (saturating at `u32::MAX`, 49 days). 8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    at_ms: u32,
    elided: u16,
    stage: Stage,
}

impl Mark {
    /// The stage entered.
    pub fn stage(self) -> Stage {
        self.stage
    }

    /// When, in milliseconds after the task's creation.
    pub fn at_ms(self) -> u32 {
        self.at_ms
    }

    /// Changes of stage dropped between the previous mark and this one
    /// (non-zero only on the last mark of a full timeline; saturating).
    pub fn elided(self) -> u16 {
        self.elided
    }
}

/// The marks of one task, oldest first. Empty (no allocation) until the
/// task first leaves [`Stage::Queued`]; then a buffer of 2, 4, 8 and at
/// most [`TIMELINE_MARKS`] slots, so a task that starts and ends allocates
/// once (16 bytes). 16 bytes inline.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timeline {
    /// Used slots first, then `None`s (the spare capacity).
    slots: Box<[Option<Mark>]>,
}

impl Timeline {
    /// A timeline that knows nothing before `at_ms`: a task restored from
    /// a store or read from another instance's rows.
    pub(crate) fn unrecorded() -> Timeline {
        let mut t = Timeline::default();
        t.push(Stage::Unrecorded, 0);
        t
    }

    /// The marks, oldest first. An empty timeline means queued since creation.
    pub fn marks(&self) -> impl ExactSizeIterator<Item = Mark> + '_ {
        self.slots[..self.len()]
            .iter()
            .map(|m| m.expect("used slots come first"))
    }

    /// Number of marks.
    pub fn len(&self) -> usize {
        self.slots
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.slots.len())
    }

    /// `true` when no mark was recorded (queued since creation).
    pub fn is_empty(&self) -> bool {
        self.slots.first().is_none_or(Option::is_none)
    }

    /// The stage the task is in: the last mark's, [`Stage::Queued`] when none.
    pub fn current(&self) -> Stage {
        self.slots
            .iter()
            .rev()
            .find_map(|m| m.map(Mark::stage))
            .unwrap_or(Stage::Queued)
    }

    /// Records that the task entered `stage` at `at_ms` after its creation.
    /// A full timeline replaces its last mark and counts the one it drops.
    pub(crate) fn push(&mut self, stage: Stage, at_ms: u64) {
        let mark = Mark {
            at_ms: u32::try_from(at_ms).unwrap_or(u32::MAX),
            elided: 0,
            stage,
        };
        let len = self.len();
        if len < self.slots.len() {
            self.slots[len] = Some(mark);
            return;
        }
        if len == TIMELINE_MARKS {
            let last = &mut self.slots[len - 1];
            let elided = last.map_or(0, |m| m.elided).saturating_add(1);
            *last = Some(Mark { elided, ..mark });
            return;
        }
        let mut grown = vec![None; (len * 2).clamp(2, TIMELINE_MARKS)];
        grown[..len].copy_from_slice(&self.slots);
        grown[len] = Some(mark);
        self.slots = grown.into_boxed_slice();
    }
}

impl Timeline {
    /// The marks as stored with a terminal state: `[stage, at_ms]`, or
    /// `[stage, at_ms, elided]` when changes were dropped before it.
    pub(crate) fn to_stored(&self) -> Vec<Vec<u32>> {
        self.marks()
            .map(|m| {
                let mut v = vec![m.stage as u32, m.at_ms];
                if m.elided > 0 {
                    v.push(u32::from(m.elided));
                }
                v
            })
            .collect()
    }

    /// A timeline from its stored marks ([`Timeline::to_stored`]).
    ///
    /// # Errors
    ///
    /// An unknown stage, a mark of another shape, or more than
    /// [`TIMELINE_MARKS`] marks.
    pub(crate) fn from_stored(marks: &[Vec<u32>]) -> Result<Timeline, String> {
        if marks.len() > TIMELINE_MARKS {
            return Err(format!("a timeline of {} marks", marks.len()));
        }
        let mut slots = Vec::with_capacity(marks.len());
        for m in marks {
            let (stage, at_ms, elided) = match m.as_slice() {
                [s, at] => (*s, *at, 0),
                [s, at, e] => (*s, *at, *e),
                other => return Err(format!("a timeline mark {other:?}")),
            };
            let stage = *Stage::ALL
                .get(stage as usize)
                .ok_or_else(|| format!("a timeline stage {stage}"))?;
            slots.push(Some(Mark {
                at_ms,
                elided: u16::try_from(elided).unwrap_or(u16::MAX),
                stage,
            }));
        }
        Ok(Timeline {
            slots: slots.into_boxed_slice(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_timeline_reads_back_and_bad_ones_are_refused() {
        let mut t = Timeline::default();
        for i in 0..40u64 {
            t.push(Stage::ALL[(i % 7) as usize], i * 10);
        }
        let stored = t.to_stored();
        assert_eq!(stored.len(), TIMELINE_MARKS);
        assert_eq!(
            stored.last().map(Vec::len),
            Some(3),
            "the last mark counts what it dropped"
        );
        assert_eq!(Timeline::from_stored(&stored).unwrap(), t);
        assert_eq!(Timeline::from_stored(&[]).unwrap(), Timeline::default());
        for bad in [
            vec![vec![9, 0]],
            vec![vec![1]],
            vec![vec![1, 2, 3, 4]],
            vec![vec![0, 0]; 17],
        ] {
            assert!(Timeline::from_stored(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_timeline_grows_in_powers_of_two_and_keeps_its_first_marks_and_its_last() {
        let mut t = Timeline::default();
        assert!(t.is_empty());
        assert_eq!(t.current(), Stage::Queued);
        t.push(Stage::Running, 3);
        assert_eq!(t.slots.len(), 2);
        t.push(Stage::Ended, 9);
        assert_eq!(t.slots.len(), 2, "a task that starts and ends allocates once");
        assert_eq!(t.current(), Stage::Ended);
        let mut t = Timeline::default();
        for i in 0..10_000u64 {
            t.push(if i % 2 == 0 { Stage::Paused } else { Stage::Running }, i);
        }
        assert_eq!(t.len(), TIMELINE_MARKS);
        assert_eq!(t.slots.len(), TIMELINE_MARKS);
        let marks: Vec<Mark> = t.marks().collect();
        assert_eq!(marks[14].at_ms(), 14);
        assert_eq!(marks[14].elided(), 0);
        let last = marks[15];
        assert_eq!((last.stage(), last.at_ms()), (Stage::Running, 9_999));
        assert_eq!(last.elided(), 10_000 - 16, "every overwritten change is counted");
    }

    #[test]
    fn offsets_saturate_at_49_days() {
        let mut t = Timeline::default();
        t.push(Stage::Running, u64::MAX);
        assert_eq!(t.marks().next().unwrap().at_ms(), u32::MAX);
        assert_eq!(std::mem::size_of::<Mark>(), 8);
        assert_eq!(std::mem::size_of::<Option<Mark>>(), 8);
        assert_eq!(std::mem::size_of::<Timeline>(), 16);
    }

    use crate::core::{ChildOptions, Forest, HandlerOutcome, RootOptions};
    use crate::model::{JsonObject, TaskId, Timestamp};

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(1_000_000 + ms)
    }

    fn marks(f: &Forest, id: TaskId) -> Vec<(Stage, u32)> {
        f.task(id)
            .unwrap()
            .timeline()
            .marks()
            .map(|m| (m.stage(), m.at_ms()))
            .collect()
    }

    #[test]
    fn a_tasks_timeline_follows_what_happened_to_it() {
        let mut f = Forest::default();
        let root = f.create_root(at(0), RootOptions::default()).unwrap();
        assert_eq!(marks(&f, root), vec![], "queued since creation: nothing recorded");
        f.start(at(5), root).unwrap();
        let a = f.create_child(at(10), root, ChildOptions::default()).unwrap();
        let b = f.create_child(at(10), root, ChildOptions::default()).unwrap();
        f.await_dependencies(at(10), b, Some("queued: waiting for 1 dependencies".into()))
            .unwrap();
        f.start(at(12), a).unwrap();
        // The root awaits its first child.
        f.enter_wait(at(20), root).unwrap();
        f.request_input(at(30), a, "k".into(), JsonObject::new()).unwrap();
        let _ = f.pause(at(40), a).unwrap();
        f.resume(at(50), a).unwrap();
        let mut answer = crate::model::InputResponses::new();
        answer.insert("k".into(), JsonObject::new());
        f.answer_input(at(60), a, answer).unwrap();
        f.finish(at(70), a, HandlerOutcome::Returned(JsonObject::new()))
            .unwrap();
        // The driver sees `a` end and releases `b` at that command's time.
        f.dependencies_met(f.slot_of(b).unwrap());
        let _ = f.leave_wait(at(72), root).unwrap();
        f.start(at(75), b).unwrap();
        f.finish(at(90), root, HandlerOutcome::Returned(JsonObject::new()))
            .unwrap();
        f.finish(at(100), b, HandlerOutcome::Returned(JsonObject::new()))
            .unwrap();
        use Stage::*;
        assert_eq!(
            marks(&f, root),
            vec![
                (Running, 5),
                (Children, 20),
                (Running, 72),
                (Children, 90),
                (Ended, 100)
            ]
        );
        assert_eq!(
            marks(&f, a),
            vec![
                (Running, 2),
                (Input, 20),
                (Paused, 30),
                (Input, 40),
                (Running, 50),
                (Ended, 60)
            ]
        );
        assert_eq!(
            marks(&f, b),
            vec![(Dependencies, 0), (Queued, 60), (Running, 65), (Ended, 90)]
        );
    }

    #[test]
    fn a_child_created_under_a_paused_parent_starts_paused_and_a_cancel_ends_it() {
        let mut f = Forest::default();
        let root = f.create_root(at(0), RootOptions::default()).unwrap();
        f.start(at(0), root).unwrap();
        let _ = f.pause(at(3), root).unwrap();
        let c = f.create_child(at(4), root, ChildOptions::default()).unwrap();
        assert_eq!(marks(&f, c), vec![(Stage::Paused, 0)]);
        let _ = f.cancel(at(9), root).unwrap();
        assert_eq!(marks(&f, c), vec![(Stage::Paused, 0), (Stage::Ended, 5)]);
        // The root's handler unwinds.
        f.finish(at(9), root, HandlerOutcome::Aborted).unwrap();
        assert_eq!(marks(&f, root).last(), Some(&(Stage::Ended, 9)));
    }

    #[test]
    fn pausing_a_task_10000_times_keeps_16_marks_and_counts_the_rest() {
        let mut f = Forest::default();
        // Not started: each pause takes effect at once.
        let root = f.create_root(at(0), RootOptions::default()).unwrap();
        for i in 0..10_000 {
            let _ = f.pause(at(2 * i + 1), root).unwrap();
            f.resume(at(2 * i + 2), root).unwrap();
        }
        let t = f.task(root).unwrap().timeline();
        assert_eq!(t.len(), TIMELINE_MARKS);
        let last = t.marks().last().unwrap();
        assert_eq!((last.stage(), last.at_ms()), (Stage::Queued, 20_000));
        assert_eq!(
            t.marks().next().map(|m| (m.stage(), m.at_ms())),
            Some((Stage::Paused, 1))
        );
        // 20,000 changes, of which 16 are kept.
        assert_eq!(usize::from(last.elided()), 20_000 - TIMELINE_MARKS);
    }
}
