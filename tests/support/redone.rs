//! Counts what a server's log says its handlers ran (the debug lines of
//! `subtask::journal`: `RUST_LOG=info,subtask::journal=debug`), and finds
//! finished work that ran again: a step that ran after it had been
//! recorded, or a task whose handler started after a client had seen the
//! task completed. Logs are fed in the order the processes ran.

use std::collections::{HashMap, HashSet};

/// The log filter that makes a server write the lines read here.
pub const RUST_LOG: &str = "info,subtask::journal=debug";

/// What the logs fed so far showed.
#[derive(Debug, Default)]
pub struct Redone {
    /// Steps made durable, by (task, sequence number).
    recorded: HashSet<(String, u64)>,
    /// Handler starts by task.
    pub starts: HashMap<String, u64>,
    /// Handler starts that were re-runs after a stop.
    pub reruns: u64,
    /// Steps that ran (live), were recorded, were replayed.
    pub steps_run: u64,
    /// Steps recorded.
    pub steps_recorded: u64,
    /// Steps replayed from the journal instead of running.
    pub steps_replayed: u64,
    /// Steps that ran again although they had been recorded: must be none.
    pub steps_redone: Vec<String>,
    /// Tasks seen completed whose handler started again: must be none.
    pub tasks_redone: Vec<String>,
}

fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {name}="))? + name.len() + 2;
    let rest = &line[at..];
    Some(rest.split_whitespace().next().unwrap_or("").trim_matches('"'))
}

impl Redone {
    /// Reads the logs of processes that ran at the same time (a cluster),
    /// their lines merged in time order (one machine, one clock).
    pub fn feed_merged(&mut self, logs: &[std::path::PathBuf], name: &str) {
        let mut lines: Vec<String> = logs
            .iter()
            .flat_map(|l| {
                std::fs::read_to_string(l)
                    .unwrap_or_default()
                    .lines()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .filter(|l| l.starts_with("20"))
            .collect();
        lines.sort();
        self.feed(&lines.join("\n"), &HashSet::new(), name);
    }

    /// Reads one process's log. `completed` holds the tasks a client had
    /// seen completed before this process started.
    pub fn feed(&mut self, log: &str, completed: &HashSet<String>, name: &str) {
        for line in log.lines() {
            let Some(at) = line.find("subtask::journal: ") else {
                continue;
            };
            let what = &line[at..];
            let Some(task) = field(what, "task") else { continue };
            let task = task.to_owned();
            if what.contains("handler starts") {
                *self.starts.entry(task.clone()).or_default() += 1;
                if field(what, "rerun") == Some("true") {
                    self.reruns += 1;
                }
                if completed.contains(&task) {
                    self.tasks_redone
                        .push(format!("{name}: task {task} was completed, yet: {line}"));
                }
                continue;
            }
            let Some(seq) = field(what, "seq").and_then(|s| s.parse::<u64>().ok()) else {
                continue;
            };
            if what.contains("step runs") {
                self.steps_run += 1;
                if self.recorded.contains(&(task.clone(), seq)) {
                    self.steps_redone.push(format!(
                        "{name}: step {seq} of task {task} was recorded, yet: {line}"
                    ));
                }
            } else if what.contains("step recorded") {
                self.steps_recorded += 1;
                self.recorded.insert((task, seq));
            } else if what.contains("step replayed") {
                self.steps_replayed += 1;
            }
        }
    }

    /// One line for a report.
    pub fn summary(&self) -> String {
        format!(
            "{} handler starts ({} re-runs after a stop), {} steps run, {} recorded, {} replayed; \
             finished work redone: {} steps, {} tasks",
            self.starts.values().sum::<u64>(),
            self.reruns,
            self.steps_run,
            self.steps_recorded,
            self.steps_replayed,
            self.steps_redone.len(),
            self.tasks_redone.len()
        )
    }
}
