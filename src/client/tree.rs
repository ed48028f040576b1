//! The client's mirror of one task tree, checked against the rules a server
//! must keep, and the ordered walk over its results (I12).
//!
//! Every snapshot the server sends (a `tasks/get` answer or a
//! `notifications/tasks`) goes through [`TaskTree::observe`], which checks
//! it before anything is believed:
//!
//! 1. a snapshot older than the one held (by `lastUpdatedAt`) is dropped as
//!    stale: polls and notifications travel on different connections and may
//!    arrive out of order;
//! 2. `parentTaskId` never changes, and names the task whose `childTaskIds`
//!    listed it (SEP-2268);
//! 3. `childTaskIds` only appends: the list seen before stays its prefix;
//! 4. a terminal task stays as it is (status and children);
//! 5. a new child id is not the task itself, not an ancestor (a cycle) and
//!    not already in the tree (a duplicate), checked on a petgraph graph of
//!    the tree;
//! 6. the tree stays within [`ClientLimits`]: tasks, depth, children per task.
//!
//! Memory is bounded by the limits: a node keeps the task's metadata, and a
//! terminal payload only until its partial result has been handed out.

use std::collections::{HashMap, HashSet};

use petgraph::algo::{all_simple_paths, has_path_connecting};
use petgraph::graphmap::DiGraphMap;
use serde_json::{Value, json};

use super::{ClientLimits, Violation};
use crate::model::{
    DetailedTask, InputRequests, Task, TaskId, TaskOutcome, TaskPayload, TaskStatus, complete_result,
};

/// The outcome of a followed task's terminal payload (`None` while it is
/// live). A 2026-07-28 result always carries `resultType: "complete"`: it is
/// added when a server left it out of a task's inlined result.
pub(crate) fn outcome_of(payload: &TaskPayload) -> Option<TaskOutcome> {
    match TaskOutcome::of_payload(payload)? {
        TaskOutcome::Completed(result) => Some(TaskOutcome::Completed(complete_result(result))),
        other => Some(other),
    }
}

/// One partial result of a tree, in result order (I12): each child's
/// subtree in `childTaskIds` order, then the parent.
#[derive(Debug, Clone, PartialEq)]
pub struct PartialResult {
    /// The task; `None` only when the server answered a call at once,
    /// without a task.
    pub task_id: Option<TaskId>,
    /// Its parent, as the task reports it.
    pub parent_task_id: Option<TaskId>,
    /// How it ended.
    pub outcome: TaskOutcome,
}

impl PartialResult {
    /// The terminal status.
    pub fn status(&self) -> TaskStatus {
        self.outcome.status()
    }

    /// The line `subtask call --stream --json` prints:
    /// `{"taskId", "parentTaskId", "status", "result" | "error"}`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "taskId": self.task_id,
            "parentTaskId": self.parent_task_id,
            "status": self.status().as_str(),
        });
        match &self.outcome {
            TaskOutcome::Completed(r) => v["result"] = r.to_value(),
            TaskOutcome::Failed(e) => v["error"] = serde_json::to_value(e).unwrap_or(Value::Null),
            TaskOutcome::Cancelled => {}
        }
        v
    }
}

/// What the client knows about one task of a tree.
#[derive(Debug, Clone)]
pub struct TaskNode {
    id: TaskId,
    named_by: Option<TaskId>,
    depth: u32,
    task: Option<Task>,
    input_requests: Option<InputRequests>,
    outcome: Option<TaskOutcome>,
    emitted: bool,
    pub(crate) not_found: u32,
    pub(crate) inputs_presented: usize,
}

impl TaskNode {
    fn new(id: TaskId, named_by: Option<TaskId>, depth: u32) -> Self {
        TaskNode {
            id,
            named_by,
            depth,
            task: None,
            input_requests: None,
            outcome: None,
            emitted: false,
            not_found: 0,
            inputs_presented: 0,
        }
    }

    /// The task id.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// The task whose `childTaskIds` named this one (`None` for the root of
    /// the tree being walked).
    pub fn named_by(&self) -> Option<TaskId> {
        self.named_by
    }

    /// Levels below the root of the walk.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// The latest metadata, `None` until the task was first retrieved.
    pub fn task(&self) -> Option<&Task> {
        self.task.as_ref()
    }

    /// The latest status, `None` until the task was first retrieved.
    pub fn status(&self) -> Option<TaskStatus> {
        self.task.as_ref().map(|t| t.status)
    }

    /// The children in `childTaskIds` order.
    pub fn children(&self) -> &[TaskId] {
        self.task.as_ref().map_or(&[], |t| t.child_task_ids.as_slice())
    }

    /// The outstanding input requests while the task is `input_required`.
    pub fn input_requests(&self) -> Option<&InputRequests> {
        self.input_requests.as_ref()
    }

    /// How the task ended, while that is held: from the snapshot that showed
    /// it terminal until its partial result is handed out (a snapshot walk,
    /// [`Client::get_tree`](super::Client::get_tree), hands out none).
    pub fn outcome(&self) -> Option<&TaskOutcome> {
        self.outcome.as_ref()
    }

    /// Whether the latest status is terminal.
    pub fn is_terminal(&self) -> bool {
        self.status().is_some_and(TaskStatus::is_terminal)
    }
}

/// What one snapshot did to the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Observed {
    /// Not a task of this tree: ignored.
    Unknown,
    /// Older than what the tree holds: ignored.
    Stale,
    /// Nothing visible changed.
    Unchanged,
    /// The task changed; these children are new.
    Changed {
        /// Children that were not in the tree before.
        new_children: Vec<TaskId>,
    },
}

/// The client's checked mirror of a task tree rooted at one task.
#[derive(Debug)]
pub struct TaskTree {
    root: TaskId,
    nodes: HashMap<TaskId, TaskNode>,
    graph: DiGraphMap<TaskId, ()>,
    limits: ClientLimits,
    /// Result order walk: (task, index of the next child to visit).
    cursor: Vec<(TaskId, usize)>,
}

impl TaskTree {
    /// A tree that knows only its root.
    pub(crate) fn new(root: TaskId, limits: ClientLimits) -> Self {
        let mut graph = DiGraphMap::new();
        graph.add_node(root);
        let mut nodes = HashMap::new();
        nodes.insert(root, TaskNode::new(root, None, 0));
        TaskTree {
            root,
            nodes,
            graph,
            limits,
            cursor: vec![(root, 0)],
        }
    }

    /// The root of the walk.
    pub fn root(&self) -> TaskId {
        self.root
    }

    /// A task of the tree.
    pub fn get(&self, id: TaskId) -> Option<&TaskNode> {
        self.nodes.get(&id)
    }

    pub(crate) fn get_mut(&mut self, id: TaskId) -> Option<&mut TaskNode> {
        self.nodes.get_mut(&id)
    }

    /// Tasks known (retrieved or only named so far).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the tree knows only its root, not yet retrieved.
    pub fn is_empty(&self) -> bool {
        self.nodes.len() == 1 && self.nodes[&self.root].task.is_none()
    }

    /// The tasks in pre-order (a parent, then each child's subtree in
    /// `childTaskIds` order): the order of a tree view.
    pub fn depth_first(&self) -> Vec<&TaskNode> {
        self.pre_order().collect()
    }

    /// [`TaskTree::depth_first`] as a lazy iterator (a view that shows the
    /// first rows only walks that far).
    pub fn pre_order(&self) -> impl Iterator<Item = &TaskNode> + '_ {
        let mut stack = vec![self.root];
        std::iter::from_fn(move || {
            while let Some(id) = stack.pop() {
                if let Some(node) = self.nodes.get(&id) {
                    stack.extend(node.children().iter().rev());
                    return Some(node);
                }
            }
            None
        })
    }

    /// `true` once the root's result has been handed out.
    pub fn is_finished(&self) -> bool {
        self.cursor.is_empty()
    }

    /// Checks one snapshot and takes it in (see the module docs).
    ///
    /// # Errors
    ///
    /// The [`Violation`] the snapshot shows; the tree is unchanged then.
    pub(crate) fn observe(&mut self, snapshot: DetailedTask) -> Result<Observed, Violation> {
        let (new, payload) = snapshot.into_parts();
        let id = new.task_id;
        let Some(node) = self.nodes.get(&id) else {
            return Ok(Observed::Unknown);
        };
        let known = match &node.task {
            None => 0,
            Some(prev) => {
                let regress = new.child_task_ids.len() < prev.child_task_ids.len()
                    || (prev.status.is_terminal() && !new.status.is_terminal());
                if new.last_updated_at < prev.last_updated_at
                    || (regress && new.last_updated_at == prev.last_updated_at)
                {
                    return Ok(Observed::Stale);
                }
                if new.parent_task_id != prev.parent_task_id {
                    return Err(Violation::ParentChanged {
                        task: id,
                        before: prev.parent_task_id,
                        after: new.parent_task_id,
                    });
                }
                let seen = prev.child_task_ids.len();
                if let Some(position) =
                    (0..seen).find(|&i| new.child_task_ids.get(i) != Some(&prev.child_task_ids[i]))
                {
                    return Err(Violation::ChildrenNotAppendOnly {
                        task: id,
                        seen,
                        position,
                    });
                }
                if prev.status.is_terminal()
                    && (new.status != prev.status || new.child_task_ids.len() != seen)
                {
                    return Err(Violation::TerminalChanged {
                        task: id,
                        before: prev.status,
                        after: new.status,
                    });
                }
                seen
            }
        };
        if let Some(named_by) = node.named_by
            && new.parent_task_id != Some(named_by)
        {
            return Err(Violation::ParentMismatch {
                child: id,
                named_by,
                claims: new.parent_task_id,
            });
        }
        let fresh = &new.child_task_ids[known..];
        self.check_children(node, &new, fresh)?;

        // Checked: take it in.
        let depth = node.depth;
        let fresh: Vec<TaskId> = fresh.to_vec();
        for &c in &fresh {
            self.graph.add_edge(id, c, ());
            self.nodes.insert(c, TaskNode::new(c, Some(id), depth + 1));
        }
        let node = self.nodes.get_mut(&id).expect("checked above");
        let inputs = match &payload {
            TaskPayload::InputRequired { input_requests } => Some(input_requests.clone()),
            _ => None,
        };
        let changed = node.task.as_ref() != Some(&new) || node.input_requests != inputs;
        if !node.emitted {
            node.outcome = outcome_of(&payload);
        }
        node.input_requests = inputs;
        node.task = Some(new);
        Ok(if changed {
            Observed::Changed { new_children: fresh }
        } else {
            Observed::Unchanged
        })
    }

    /// The checks on the children a snapshot adds (rules 5 and 6).
    fn check_children(&self, node: &TaskNode, new: &Task, fresh: &[TaskId]) -> Result<(), Violation> {
        let id = new.task_id;
        if fresh.is_empty() {
            return Ok(());
        }
        if new.child_task_ids.len() > self.limits.max_children {
            return Err(Violation::TooManyChildren {
                task: id,
                limit: self.limits.max_children,
            });
        }
        if node.depth + 1 > self.limits.max_depth {
            return Err(Violation::TooDeep {
                task: fresh[0],
                limit: self.limits.max_depth,
            });
        }
        if self.nodes.len() + fresh.len() > self.limits.max_tasks {
            return Err(Violation::TooManyTasks {
                limit: self.limits.max_tasks,
            });
        }
        let mut batch: HashSet<TaskId> = HashSet::with_capacity(fresh.len());
        for &c in fresh {
            if c == id {
                return Err(Violation::Cycle { path: vec![id, id] });
            }
            if self.graph.contains_node(c) {
                // Already in the tree: an ancestor closes a cycle, anything
                // else is named twice.
                if has_path_connecting(&self.graph, c, id, None) {
                    let mut path: Vec<TaskId> = all_simple_paths::<Vec<TaskId>, _, std::hash::RandomState>(
                        &self.graph,
                        c,
                        id,
                        0,
                        None,
                    )
                    .next()
                    .unwrap_or_else(|| vec![c, id]);
                    path.push(c);
                    return Err(Violation::Cycle { path });
                }
                return Err(Violation::DuplicateId {
                    id: c,
                    first_parent: self.nodes.get(&c).and_then(|n| n.named_by).unwrap_or(id),
                    second_parent: id,
                });
            }
            if !batch.insert(c) {
                return Err(Violation::DuplicateId {
                    id: c,
                    first_parent: id,
                    second_parent: id,
                });
            }
        }
        Ok(())
    }

    /// The next partial result in result order if everything before it is
    /// known and terminal, else `None` (call again after the tree changed).
    pub(crate) fn next_result(&mut self) -> Option<PartialResult> {
        loop {
            let &(id, i) = self.cursor.last()?;
            let node = self.nodes.get(&id)?;
            if let Some(&child) = node.children().get(i) {
                if let Some(top) = self.cursor.last_mut() {
                    top.1 += 1;
                }
                self.cursor.push((child, 0));
                continue;
            }
            if !node.is_terminal() {
                return None;
            }
            self.cursor.pop();
            let node = self.nodes.get_mut(&id)?;
            let outcome = node.outcome.take()?;
            node.emitted = true;
            node.input_requests = None;
            return Some(PartialResult {
                task_id: Some(id),
                parent_task_id: node.task.as_ref().and_then(|t| t.parent_task_id),
                outcome,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{JsonObject, Timestamp};

    fn id(n: u128) -> TaskId {
        TaskId::from_u128(0x4000_0000_0000_4000_8000_0000_0000_0000 | n)
    }

    fn snap(
        task: TaskId,
        parent: Option<TaskId>,
        children: &[TaskId],
        status: TaskStatus,
        at: u64,
    ) -> DetailedTask {
        let payload = match status {
            TaskStatus::Completed => TaskPayload::Completed {
                result: JsonObject::from_value(json!({"n": task.to_string()})).unwrap(),
            },
            TaskStatus::Cancelled => TaskPayload::Cancelled,
            _ => TaskPayload::Working,
        };
        DetailedTask::new(
            Task {
                task_id: task,
                status,
                status_message: None,
                created_at: Timestamp::from_millis(0),
                last_updated_at: Timestamp::from_millis(at),
                ttl_ms: None,
                poll_interval_ms: None,
                parent_task_id: parent,
                child_task_ids: children.to_vec(),
            },
            payload,
        )
    }

    fn tree() -> TaskTree {
        TaskTree::new(id(1), ClientLimits::default())
    }

    #[test]
    fn a_completed_outcome_is_a_complete_call_tool_result() {
        // A server that follows the text's example and leaves resultType out.
        let t = snap(id(1), None, &[], TaskStatus::Completed, 1);
        let Some(TaskOutcome::Completed(r)) = outcome_of(t.payload()) else {
            panic!()
        };
        assert_eq!(r["resultType"], "complete");
        assert_eq!(r["n"], id(1).to_string());
        // One that sends it keeps it as sent.
        let sent = JsonObject::from_value(json!({"resultType": "complete", "content": []})).unwrap();
        let payload = TaskPayload::Completed { result: sent.clone() };
        assert_eq!(outcome_of(&payload), Some(TaskOutcome::Completed(sent)));
    }

    #[test]
    fn results_come_in_post_order_whatever_order_tasks_finish_in() {
        let mut t = tree();
        let (r, a, b, a1) = (id(1), id(2), id(3), id(4));
        t.observe(snap(r, None, &[a, b], TaskStatus::Working, 1)).unwrap();
        t.observe(snap(a, Some(r), &[a1], TaskStatus::Working, 1))
            .unwrap();
        t.observe(snap(b, Some(r), &[], TaskStatus::Completed, 2))
            .unwrap();
        assert_eq!(t.next_result(), None);
        t.observe(snap(a1, Some(a), &[], TaskStatus::Completed, 3))
            .unwrap();
        assert_eq!(t.next_result().unwrap().task_id, Some(a1));
        assert_eq!(t.next_result(), None);
        t.observe(snap(a, Some(r), &[a1], TaskStatus::Completed, 4))
            .unwrap();
        t.observe(snap(r, None, &[a, b], TaskStatus::Completed, 5))
            .unwrap();
        let order: Vec<_> = std::iter::from_fn(|| t.next_result())
            .map(|p| p.task_id.unwrap())
            .collect();
        assert_eq!(order, [a, b, r]);
        assert!(t.is_finished());
    }

    #[test]
    fn stale_snapshots_are_dropped_and_regressions_are_violations() {
        let mut t = tree();
        let (r, a, b) = (id(1), id(2), id(3));
        t.observe(snap(r, None, &[a, b], TaskStatus::Working, 10))
            .unwrap();
        assert_eq!(
            t.observe(snap(r, None, &[a], TaskStatus::Working, 9)),
            Ok(Observed::Stale)
        );
        assert_eq!(
            t.observe(snap(r, None, &[a], TaskStatus::Working, 10)),
            Ok(Observed::Stale)
        );
        assert_eq!(
            t.observe(snap(r, None, &[a], TaskStatus::Working, 11)),
            Err(Violation::ChildrenNotAppendOnly {
                task: r,
                seen: 2,
                position: 1
            })
        );
        assert_eq!(
            t.observe(snap(r, None, &[b, a], TaskStatus::Working, 11)),
            Err(Violation::ChildrenNotAppendOnly {
                task: r,
                seen: 2,
                position: 0
            })
        );
        t.observe(snap(r, None, &[a, b], TaskStatus::Cancelled, 12))
            .unwrap();
        assert!(matches!(
            t.observe(snap(r, None, &[a, b], TaskStatus::Working, 13)),
            Err(Violation::TerminalChanged { .. })
        ));
    }

    #[test]
    fn cycles_duplicates_and_wrong_parents_are_caught() {
        let mut t = tree();
        let (r, a, b, c) = (id(1), id(2), id(3), id(4));
        assert_eq!(
            t.observe(snap(r, None, &[r], TaskStatus::Working, 1)),
            Err(Violation::Cycle { path: vec![r, r] })
        );
        t.observe(snap(r, None, &[a, b], TaskStatus::Working, 1)).unwrap();
        t.observe(snap(a, Some(r), &[c], TaskStatus::Working, 1)).unwrap();
        assert_eq!(
            t.observe(snap(c, Some(a), &[r], TaskStatus::Working, 1)),
            Err(Violation::Cycle {
                path: vec![r, a, c, r]
            })
        );
        assert_eq!(
            t.observe(snap(b, Some(r), &[c], TaskStatus::Working, 1)),
            Err(Violation::DuplicateId {
                id: c,
                first_parent: a,
                second_parent: b
            })
        );
        assert_eq!(
            t.observe(snap(b, Some(a), &[], TaskStatus::Working, 1)),
            Err(Violation::ParentMismatch {
                child: b,
                named_by: r,
                claims: Some(a)
            })
        );
        let d = id(5);
        assert!(matches!(
            t.observe(snap(b, Some(r), &[d, d], TaskStatus::Working, 1)),
            Err(Violation::DuplicateId { .. })
        ));
    }

    #[test]
    fn limits_bound_the_tree() {
        let limits = ClientLimits {
            max_tasks: 4,
            max_depth: 1,
            max_children: 2,
            ..ClientLimits::default()
        };
        let mut t = TaskTree::new(id(1), limits);
        let (r, a, b, c) = (id(1), id(2), id(3), id(4));
        assert!(matches!(
            t.observe(snap(r, None, &[a, b, c], TaskStatus::Working, 1)),
            Err(Violation::TooManyChildren { .. })
        ));
        t.observe(snap(r, None, &[a, b], TaskStatus::Working, 1)).unwrap();
        assert!(matches!(
            t.observe(snap(a, Some(r), &[c], TaskStatus::Working, 1)),
            Err(Violation::TooDeep { .. })
        ));
    }
}
