//! How tasks look on a terminal: status colours, icons, progress bars,
//! durations, one line per task of a tree.

use std::io::IsTerminal;

use subtask::client::{PartialResult, TaskNode, TaskOutcome, TaskTree};
use subtask::model::{DetailedTask, JsonObject, TaskId, TaskPayload, TaskStatus, Timestamp};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// Spinner frames for live tasks.
const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// Whether to write ANSI colours to stdout: a terminal, and `NO_COLOR`
/// unset or empty (<https://no-color.org>).
pub(crate) fn color_stdout() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// `s` in the colour of `status` (when `color`), padded to `width` terminal columns.
pub(crate) fn paint_status(status: Option<TaskStatus>, color: bool, width: usize) -> String {
    let word = status.map_or("unknown", TaskStatus::as_str);
    let padded = pad(word, width);
    if !color {
        return padded;
    }
    let code = match status {
        Some(TaskStatus::Working) => "36",       // cyan
        Some(TaskStatus::InputRequired) => "33", // yellow
        Some(TaskStatus::Paused) => "35",        // magenta
        Some(TaskStatus::Completed) => "32",     // green
        Some(TaskStatus::Failed) => "31",        // red
        Some(TaskStatus::Cancelled) => "90",     // grey
        None => "2",
    };
    format!("\x1b[{code}m{padded}\x1b[0m")
}

/// The icon of a status; live tasks spin with `frame`.
pub(crate) fn icon(status: Option<TaskStatus>, frame: usize) -> char {
    match status {
        None => '·',
        Some(TaskStatus::Working) => SPINNER[frame % SPINNER.len()],
        Some(TaskStatus::InputRequired) => '?',
        Some(TaskStatus::Paused) => '‖',
        Some(TaskStatus::Completed) => '✓',
        Some(TaskStatus::Failed) => '✗',
        Some(TaskStatus::Cancelled) => '⊘',
    }
}

/// `1.2s`, `42s`, `3m05s`, `2h03m`.
pub(crate) fn duration(ms: u64) -> String {
    let s = ms / 1000;
    if s < 10 {
        format!("{}.{}s", s, (ms % 1000) / 100)
    } else if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s / 60) % 60)
    }
}

/// The first 8 characters of an id.
pub(crate) fn short(id: TaskId) -> String {
    id.to_string()[..8].to_owned()
}

/// How many terminal columns `s` takes: CJK and emoji two, combining
/// marks none (Unicode's East Asian Width, as terminals draw it).
pub(crate) fn columns(s: &str) -> usize {
    s.width()
}

/// `s` padded with spaces on the right to `width` columns.
pub(crate) fn pad(s: &str, width: usize) -> String {
    let fill = width.saturating_sub(columns(s));
    let mut out = String::with_capacity(s.len() + fill);
    out.push_str(s);
    out.extend(std::iter::repeat_n(' ', fill));
    out
}

/// At most `width` terminal columns of `s` (an ellipsis marks a cut; a
/// wide character that would straddle the edge is cut whole).
pub(crate) fn truncate(s: &str, width: usize) -> String {
    if columns(s) <= width {
        return s.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let room = width - 1; // the ellipsis takes one
    let mut used = 0;
    let mut out = String::new();
    for c in s.chars() {
        used += c.width().unwrap_or(0);
        if used > room {
            break;
        }
        out.push(c);
    }
    out.push('…');
    out
}

/// One line of text: newlines and tabs become spaces.
pub(crate) fn one_line(s: &str) -> String {
    s.split(['\n', '\r', '\t'])
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The text of a `CallToolResult`: its text contents joined, else its
/// structured content as JSON.
pub(crate) fn result_text(result: &JsonObject) -> String {
    let texts: Vec<&str> = result
        .get("content")
        .and_then(|c| c.as_array())
        .map(|items| {
            items
                .iter()
                .filter(|i| i["type"] == "text")
                .filter_map(|i| i["text"].as_str())
                .collect()
        })
        .unwrap_or_default();
    if !texts.is_empty() {
        return texts.join("\n");
    }
    result
        .get("structuredContent")
        .map(|v| v.to_string())
        .unwrap_or_else(|| serde_json::Value::Object(result.as_map().clone()).to_string())
}

/// Milliseconds a task has run: to its last update when terminal, else to `now`.
fn elapsed(node: &TaskNode, now: Timestamp) -> Option<u64> {
    let t = node.task()?;
    let end = if t.status.is_terminal() {
        t.last_updated_at
    } else {
        now
    };
    Some(end.millis_since(t.created_at))
}

/// `[######----] 3/5` for a task with children: how many are terminal.
fn progress(tree: &TaskTree, node: &TaskNode) -> String {
    let total = node.children().len();
    if total == 0 {
        return String::new();
    }
    let done = node
        .children()
        .iter()
        .filter(|c| tree.get(**c).is_some_and(TaskNode::is_terminal))
        .count();
    const BAR: usize = 10;
    let filled = done * BAR / total;
    format!(
        "[{}{}] {done}/{total}",
        "#".repeat(filled),
        "-".repeat(BAR - filled)
    )
}

/// One line per task of `tree` in pre-order, at most `max_rows` of them,
/// indented by depth, each at most `width` visible columns: icon, status,
/// short id, progress, elapsed, message.
pub(crate) fn tree_lines(
    tree: &TaskTree,
    now: Timestamp,
    frame: usize,
    width: usize,
    color: bool,
    max_rows: usize,
) -> Vec<String> {
    const STATUS: usize = 14;
    tree.pre_order()
        .take(max_rows)
        .map(|node| {
            let status = node.status();
            let indent = "  ".repeat(node.depth() as usize);
            let bar = progress(tree, node);
            let time = elapsed(node, now).map(duration).unwrap_or_default();
            let mut message = node
                .task()
                .and_then(|t| t.status_message.clone())
                .map(|m| one_line(&m))
                .unwrap_or_default();
            if let Some(inputs) = node.input_requests() {
                let keys: Vec<&str> = inputs.keys().map(String::as_str).collect();
                message = format!("needs input: {} {message}", keys.join(", "));
            }
            let head = format!("{indent}{} ", icon(status, frame));
            let tail = format!(" {} {bar:<16} {time:>6}  {message}", short(node.id()));
            let visible = columns(&head) + STATUS;
            let tail = truncate(&tail, width.saturating_sub(visible));
            format!("{head}{}{tail}", paint_status(status, color, STATUS))
                .trim_end()
                .to_owned()
        })
        .collect()
}

/// Counts of each status in `tree`, e.g. `7 tasks: 2 working, 5 completed`.
pub(crate) fn summary(tree: &TaskTree) -> String {
    let mut counts = [0usize; TaskStatus::ALL.len()];
    let (mut total, mut unknown) = (0, 0);
    for node in tree.pre_order() {
        total += 1;
        match node.status() {
            Some(s) => {
                if let Some(i) = TaskStatus::ALL.iter().position(|x| *x == s) {
                    counts[i] += 1;
                }
            }
            None => unknown += 1,
        }
    }
    let mut parts: Vec<String> = TaskStatus::ALL
        .iter()
        .zip(counts)
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| format!("{n} {s}"))
        .collect();
    if unknown > 0 {
        parts.push(format!("{unknown} not yet seen"));
    }
    format!("{total} tasks: {}", parts.join(", "))
}

/// A partial result as one human line (the root's with its full text).
pub(crate) fn partial_line(p: &PartialResult, root: Option<TaskId>, color: bool) -> String {
    let id = p.task_id.map(short).unwrap_or_else(|| "-".repeat(8));
    let parent = p
        .parent_task_id
        .filter(|_| p.task_id != root)
        .map(|p| format!(" (in {})", short(p)))
        .unwrap_or_default();
    let body = match &p.outcome {
        TaskOutcome::Completed(r) if p.task_id == root => format!("\n{}", result_text(r)),
        TaskOutcome::Completed(r) => format!("  {}", truncate(&one_line(&result_text(r)), 120)),
        TaskOutcome::Failed(e) => format!("  {} ({})", e.message, e.code),
        TaskOutcome::Cancelled => String::new(),
    };
    format!(
        "{} {} {id}{parent}{body}",
        icon(Some(p.status()), 0),
        paint_status(Some(p.status()), color, 9).trim_end()
    )
}

/// A task in detail, for `subtask get` without `--tree`.
pub(crate) fn detail(task: &DetailedTask, color: bool) -> String {
    let t = task.task();
    let mut out = format!("task      {}\n", t.task_id);
    let status = paint_status(Some(t.status), color, 0);
    match &t.status_message {
        Some(m) => out.push_str(&format!("status    {status}: {}\n", one_line(m))),
        None => out.push_str(&format!("status    {status}\n")),
    }
    if let Some(p) = t.parent_task_id {
        out.push_str(&format!("parent    {p}\n"));
    }
    if !t.child_task_ids.is_empty() {
        out.push_str(&format!("children  {}\n", t.child_task_ids.len()));
        for c in &t.child_task_ids {
            out.push_str(&format!("          {c}\n"));
        }
    }
    let age = Timestamp::now().millis_since(t.created_at);
    out.push_str(&format!("created   {} ({} ago)\n", t.created_at, duration(age)));
    out.push_str(&format!("updated   {}\n", t.last_updated_at));
    if let Some(ttl) = t.ttl_ms {
        out.push_str(&format!("ttl       {}\n", duration(ttl)));
    }
    match task.payload() {
        TaskPayload::InputRequired { input_requests } => {
            for (key, req) in input_requests {
                let msg = req
                    .get("params")
                    .and_then(|p| p.get("message"))
                    .and_then(|m| m.as_str())
                    .unwrap_or("");
                out.push_str(&format!("input     {key}: {}\n", one_line(msg)));
            }
        }
        TaskPayload::Completed { result } => out.push_str(&format!("result\n{}\n", result_text(result))),
        TaskPayload::Failed { error } => {
            out.push_str(&format!("error     {} ({})\n", error.message, error.code))
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(1234), "1.2s");
        assert_eq!(duration(42_000), "42s");
        assert_eq!(duration(185_000), "3m05s");
        assert_eq!(duration(7_380_000), "2h03m");
    }

    #[test]
    fn truncation_keeps_short_text() {
        assert_eq!(truncate("héllo", 5), "héllo");
        assert_eq!(truncate("héllo world", 5), "héll…");
        assert_eq!(one_line("a\nb\tc"), "a b c");
    }

    #[test]
    fn statuses_are_padded_and_coloured_only_when_asked() {
        assert_eq!(paint_status(Some(TaskStatus::Failed), false, 8), "failed  ");
        assert_eq!(
            paint_status(Some(TaskStatus::Failed), true, 8),
            "\x1b[31mfailed  \x1b[0m"
        );
    }

    /// Cuts and widths are in terminal columns: CJK and emoji take two,
    /// combining marks none.
    #[test]
    fn truncation_counts_terminal_columns() {
        // Fits: 4 columns (4 characters would not be cut either).
        assert_eq!(truncate("漢字", 4), "漢字");
        // 8 columns into 5: two characters (4 columns) and the ellipsis.
        assert_eq!(truncate("漢字漢字", 5), "漢字…");
        assert_eq!(truncate("👍👍👍", 4), "👍…");
        // 3 columns in 5 characters: nothing to cut.
        assert_eq!(truncate("e\u{301}te\u{301}", 3), "e\u{301}te\u{301}");
        assert_eq!(truncate("e\u{301}te\u{301}x", 3), "e\u{301}t…");
        for (s, w) in [("漢字漢字", 5), ("a漢字", 4), ("👍👍👍", 4), ("x", 0)] {
            assert!(columns(&truncate(s, w)) <= w, "{s:?} into {w}");
        }
        assert_eq!(pad("漢字", 6), "漢字  ");
        assert_eq!(pad("e\u{301}", 3), "e\u{301}  ");
        assert_eq!(pad("漢字漢字", 6), "漢字漢字");
    }
}
