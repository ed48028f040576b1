//! `subtask watch`: the live tree of a task.
//!
//! On a terminal the tree is redrawn in place (one line per task, indented
//! by depth, coloured status, status message, elapsed time, a progress bar
//! for tasks with children and a spinner for live ones) until the root is
//! terminal. Elsewhere (a pipe, a file) it prints one line per change, or
//! one JSON object per change with `--json`.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use serde_json::json;
use subtask::client::{Client, ClientError, TreeWatch, WatchEvent};
use subtask::model::{TaskId, TaskStatus, Timestamp};

use super::{EXIT_USAGE, exit_for, render};

/// Redraws of the live view per second (spinners and clocks move).
const FRAME: Duration = Duration::from_millis(120);

/// Watches the tree under `root` until its root ends; returns the exit code.
pub(crate) async fn watch(client: &Client, root: TaskId, json: bool) -> Result<u8, ClientError> {
    let watch = client.watch(root);
    let status = if std::io::stdout().is_terminal() && !json {
        live(watch).await?
    } else {
        lines(watch, json).await?
    };
    Ok(status.map_or(EXIT_USAGE, exit_for))
}

/// The in-place view.
async fn live(mut watch: TreeWatch) -> Result<Option<TaskStatus>, ClientError> {
    let root = watch.root();
    let color = render::color_stdout();
    let mut screen = Screen::default();
    let mut ticker = tokio::time::interval(FRAME);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut frame = 0usize;
    let mut status = None;
    let ended = loop {
        tokio::select! {
            e = watch.next() => match e {
                None => break Ok(()),
                Some(Ok(WatchEvent::Result(r))) if r.task_id == Some(root) => status = Some(r.status()),
                Some(Ok(_)) => {}
                Some(Err(e)) => break Err(e),
            },
            _ = ticker.tick() => {
                frame += 1;
                screen.draw(&watch, frame, color);
            }
        }
    };
    screen.draw(&watch, frame, color);
    let tree = watch.tree();
    if let Some(s) = status {
        let took = tree
            .get(root)
            .and_then(|n| n.task())
            .map(|t| render::duration(t.last_updated_at.millis_since(t.created_at)))
            .unwrap_or_default();
        println!("task {root} {s} after {took}");
    }
    ended.map(|()| status)
}

/// What the live view last drew, to draw over it.
#[derive(Default)]
struct Screen {
    drawn: usize,
}

impl Screen {
    fn draw(&mut self, watch: &TreeWatch, frame: usize, color: bool) {
        let (width, height) =
            terminal_size::terminal_size().map_or((100, 30), |(w, h)| (w.0 as usize, h.0 as usize));
        // One column spare, so no line ever wraps and breaks the redraw.
        let width = width.saturating_sub(1).max(20);
        let tree = watch.tree();
        let mut lines = vec![render::truncate(
            &format!("subtask watch {}  {}", watch.root(), render::summary(tree)),
            width,
        )];
        let room = height.saturating_sub(2).max(2);
        let mut rows = render::tree_lines(tree, Timestamp::now(), frame, width, color, room);
        let total = tree.len();
        if total > room {
            rows.truncate(room - 1);
            rows.push(format!("… and {} more tasks", total - (room - 1)));
        }
        lines.extend(rows);
        let mut out = String::new();
        if self.drawn > 0 {
            out.push_str(&format!("\r\x1b[{}A", self.drawn));
        }
        for line in &lines {
            out.push_str(line);
            out.push_str("\x1b[K\n");
        }
        out.push_str("\x1b[J");
        self.drawn = lines.len();
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(out.as_bytes());
        let _ = stdout.flush();
    }
}

/// One line (or JSON object) per change; a line equal to the task's last
/// one (only a timestamp moved) is not repeated. The root's final line comes
/// last, after every subtask's.
async fn lines(mut watch: TreeWatch, json: bool) -> Result<Option<TaskStatus>, ClientError> {
    let root = watch.root();
    let mut status = None;
    let mut root_end = None;
    let mut last: std::collections::HashMap<TaskId, String> = std::collections::HashMap::new();
    while let Some(e) = watch.next().await {
        match e? {
            WatchEvent::Changed(id) => {
                let Some(node) = watch.tree().get(id) else {
                    continue;
                };
                let Some(task) = node.task() else { continue };
                let (line, seen) = if json {
                    let mut v = serde_json::to_value(task).unwrap_or_else(|_| json!({}));
                    v["depth"] = json!(node.depth());
                    if let Some(inputs) = node.input_requests() {
                        v["inputRequests"] = serde_json::to_value(inputs).unwrap_or_default();
                    }
                    let line = v.to_string();
                    if let Some(o) = v.as_object_mut() {
                        o.remove("lastUpdatedAt");
                    }
                    (line, v.to_string())
                } else {
                    let message = task
                        .status_message
                        .as_deref()
                        .map(render::one_line)
                        .unwrap_or_default();
                    let line = format!(
                        "{}{} {} {message}",
                        "  ".repeat(node.depth() as usize),
                        task.task_id,
                        task.status
                    )
                    .trim_end()
                    .to_owned();
                    (line.clone(), line)
                };
                if id == root && task.status.is_terminal() {
                    root_end = Some(line);
                } else if last.get(&id) != Some(&seen) {
                    println!("{line}");
                    last.insert(id, seen);
                }
            }
            WatchEvent::Result(r) if r.task_id == Some(root) => status = Some(r.status()),
            WatchEvent::Result(_) => {}
            _ => {}
        }
    }
    if let Some(line) = root_end {
        println!("{line}");
    }
    Ok(status)
}
