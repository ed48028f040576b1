//! `task_status`'s page and `task_wait`'s text: a tree's tasks in
//! SEP-2268 result order, their outcomes as a model reads them (excerpts
//! that say what was left out), and the cursor of the next page.

use std::collections::HashMap;
use std::fmt::Write as _;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::{EXCERPT_CHARS, PAGE_CHARS, PAGE_TASKS};
use crate::model::{DetailedTask, JsonObject, TaskId, TaskPayload, TaskStatus};
use crate::server::access::SubtreeNode;

/// `text` cut to `max` characters, saying how much was left out.
pub(super) fn excerpt(text: &str, max: usize) -> String {
    let mut chars = text.char_indices();
    match chars.nth(max) {
        None => text.to_owned(),
        Some((cut, _)) => {
            let rest = text[cut..].chars().count();
            format!("{}… ({rest} more characters)", &text[..cut])
        }
    }
}

/// The text of a tool result's content items.
pub(super) fn result_text(result: &JsonObject) -> String {
    let texts: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|c| c.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    if texts.is_empty() {
        result
            .get("structuredContent")
            .map(ToString::to_string)
            .unwrap_or_default()
    } else {
        texts.join("\n")
    }
}

/// A task's outcome as a model reads it: its result's text, its error.
fn outcome_of(snap: &DetailedTask) -> (Option<String>, Option<String>) {
    match snap.payload() {
        TaskPayload::Completed { result } => (Some(result_text(result)), None),
        TaskPayload::Failed { error } => (None, Some(format!("{} (error {})", error.message, error.code))),
        _ => (None, None),
    }
}

/// `task_status`'s cursor: the task and how many entries were shown.
fn encode_cursor(task: TaskId, offset: usize) -> String {
    URL_SAFE_NO_PAD.encode(format!("task-status:{task}:{offset}"))
}

pub(super) fn decode_cursor(raw: &str) -> Option<(TaskId, usize)> {
    let bytes = URL_SAFE_NO_PAD.decode(raw).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (task, offset) = text.strip_prefix("task-status:")?.split_once(':')?;
    Some((task.parse().ok()?, offset.parse().ok()?))
}

/// The tasks under `top` (itself included) in SEP-2268 result order: each
/// child's subtree in `childTaskIds` order, then the parent.
fn result_order(nodes: &HashMap<TaskId, SubtreeNode>, top: TaskId) -> Vec<(TaskId, usize)> {
    let mut out = Vec::with_capacity(nodes.len());
    // (task, depth, children visited)
    let mut stack: Vec<(TaskId, usize, bool)> = vec![(top, 0, false)];
    while let Some((id, depth, visited)) = stack.pop() {
        let Some(node) = nodes.get(&id) else { continue };
        if visited {
            out.push((id, depth));
            continue;
        }
        stack.push((id, depth, true));
        stack.extend(node.children.iter().rev().map(|c| (*c, depth + 1, false)));
    }
    out
}

/// `task_status`'s answer (text, structured content) for the subtree of
/// `top` in `nodes`, listing from `offset`; `snapshot` reads a listed
/// task's outcome from the same reading as `nodes`. `None` when `top` is
/// not in `nodes`.
pub(super) fn status_page(
    nodes: &HashMap<TaskId, SubtreeNode>,
    id: TaskId,
    offset: usize,
    snapshot: &dyn Fn(TaskId) -> Option<DetailedTask>,
) -> Option<(String, Value)> {
    let top = nodes.get(&id)?;
    let order = result_order(nodes, id);
    let total = order.len();
    let mut counts: Vec<(TaskStatus, usize)> = TaskStatus::ALL.iter().map(|s| (*s, 0)).collect();
    for (tid, _) in &order {
        if let Some(c) = counts.iter_mut().find(|(s, _)| *s == nodes[tid].status) {
            c.1 += 1;
        }
    }
    let mut text = format!("Task {id} is {}", top.status.as_str());
    // A message that only repeats the status ("paused") says nothing more.
    if let Some(m) = top.message.as_ref().filter(|m| m.as_str() != top.status.as_str()) {
        let _ = write!(text, ": {}", excerpt(m, EXCERPT_CHARS));
    }
    let tally: Vec<String> = counts
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| format!("{n} {}", s.as_str()))
        .collect();
    let _ = write!(
        text,
        ".\nIt has {total} task{} with its subtasks: {}.",
        if total == 1 { "" } else { "s" },
        tally.join(", ")
    );
    let mut listed = String::new();
    let mut entries = Vec::new();
    let mut next = offset;
    for (n, (tid, depth)) in order.iter().enumerate().skip(offset) {
        if entries.len() == PAGE_TASKS || listed.len() >= PAGE_CHARS {
            break;
        }
        let node = &nodes[tid];
        let (result, error) = snapshot(*tid).as_ref().map(outcome_of).unwrap_or_default();
        let result = result.map(|r| excerpt(&r, EXCERPT_CHARS));
        let error = error.map(|e| excerpt(&e, EXCERPT_CHARS));
        let message = node.message.as_deref().map(|m| excerpt(m, EXCERPT_CHARS));
        let indent = "  ".repeat(*depth);
        let mut line = format!(
            "{}. {indent}[{}] {}{}",
            n + 1,
            node.status.as_str(),
            node.id,
            if node.id == id { " (this task)" } else { "" }
        );
        if let Some(r) = &result {
            let _ = write!(line, "\n{indent}   result: {r}");
        } else if let Some(e) = &error {
            let _ = write!(line, "\n{indent}   error: {e}");
        } else if let Some(m) = &message {
            let _ = write!(line, "\n{indent}   {m}");
        }
        listed.push_str(&line);
        listed.push('\n');
        entries.push(json!({
            "taskId": node.id,
            "parentTaskId": node.parent,
            "depth": depth,
            "status": node.status.as_str(),
            "statusMessage": message,
            "result": result,
            "error": error,
        }));
        next = n + 1;
    }
    if entries.is_empty() {
        let _ = write!(text, "\nNothing more to list: the cursor is past the last task.");
    } else {
        let _ = write!(
            text,
            "\nTasks {}-{} of {total}, in the order the final answer puts them together (each subtask before \
             the task that waits for it):\n{listed}",
            offset + 1,
            next
        );
    }
    let next_cursor = (next < total).then(|| encode_cursor(id, next));
    match &next_cursor {
        Some(c) => {
            let _ = write!(
                text,
                "More tasks follow: call task_status with taskId \"{id}\" and cursor \"{c}\"."
            );
        }
        None if top.status == TaskStatus::Paused => {
            let _ = write!(
                text,
                "The task is paused, keeping its state: task_resume continues it, task_cancel ends it."
            );
        }
        None if top.status.is_terminal() => {
            let _ = write!(text, "The task has ended; task_wait returns its whole result.");
        }
        None => {
            let _ = write!(
                text,
                "The task is still running: task_wait waits for its result; task_steer, task_pause and \
                 task_cancel act on it or on any subtask listed here."
            );
        }
    }
    let counts: serde_json::Map<String, Value> = counts
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| (s.as_str().to_owned(), json!(n)))
        .collect();
    let structured = json!({
        "taskId": id,
        "status": top.status.as_str(),
        "statusMessage": top.message,
        "total": total,
        "counts": counts,
        "tasks": entries,
        "nextCursor": next_cursor,
    });
    Some((text, structured))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_say_what_was_left_out() {
        assert_eq!(excerpt("short", 10), "short");
        assert_eq!(excerpt("abcdef", 3), "abc… (3 more characters)");
        assert_eq!(excerpt("ééé", 1), "é… (2 more characters)");
    }

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let t = TaskId::random();
        assert_eq!(decode_cursor(&encode_cursor(t, 25)), Some((t, 25)));
        for bad in ["", "x", &URL_SAFE_NO_PAD.encode("task-status:1:2")] {
            assert_eq!(decode_cursor(bad), None, "{bad}");
        }
    }

    #[test]
    fn result_order_is_children_first_in_order() {
        let ids: Vec<TaskId> = (0..5).map(|_| TaskId::random()).collect();
        // 0 -> [1, 2], 1 -> [3, 4]
        let node = |i: usize, parent: Option<usize>, children: &[usize]| SubtreeNode {
            id: ids[i],
            parent: parent.map(|p| ids[p]),
            status: TaskStatus::Working,
            message: None,
            children: children.iter().map(|c| ids[*c]).collect(),
        };
        let nodes: HashMap<TaskId, SubtreeNode> = [
            node(0, None, &[1, 2]),
            node(1, Some(0), &[3, 4]),
            node(2, Some(0), &[]),
            node(3, Some(1), &[]),
            node(4, Some(1), &[]),
        ]
        .into_iter()
        .map(|n| (n.id, n))
        .collect();
        let order: Vec<usize> = result_order(&nodes, ids[0])
            .iter()
            .map(|(id, _)| ids.iter().position(|x| x == id).unwrap())
            .collect();
        assert_eq!(order, [3, 4, 1, 2, 0]);
    }
}
