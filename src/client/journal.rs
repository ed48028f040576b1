//! Persisted task ids: a client records the tasks it creates and when they
//! finish, so that a new process can resume following the unfinished ones
//! (the tasks extension: "clients SHOULD persist task IDs").
//!
//! The journal is an append-only file of JSON lines, written with one
//! `write` per line in append mode. It is local and trusted; malformed lines
//! (a torn last line after a crash) are skipped when read.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};

use super::ClientError;
use crate::model::{TaskId, TaskStatus, Timestamp};

/// A file of created and finished task ids.
///
/// # Examples
///
/// ```
/// use subtask::client::TaskJournal;
/// use subtask::model::{TaskId, TaskStatus};
///
/// let path = std::env::temp_dir().join(format!("journal-doc-{}", TaskId::random()));
/// let journal = TaskJournal::new(&path);
/// let (a, b) = (TaskId::random(), TaskId::random());
/// journal.created(a, "fanout").unwrap();
/// journal.created(b, "fanout").unwrap();
/// journal.finished(a, TaskStatus::Completed).unwrap();
/// assert_eq!(TaskJournal::new(&path).unfinished().unwrap(), [b]);
/// # std::fs::remove_file(path).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct TaskJournal {
    path: PathBuf,
    write: Arc<Mutex<()>>,
}

impl TaskJournal {
    /// A journal in the file at `path` (created on the first record).
    pub fn new(path: impl AsRef<Path>) -> Self {
        TaskJournal {
            path: path.as_ref().to_owned(),
            write: Arc::new(Mutex::new(())),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn append(&self, line: Value) -> Result<(), ClientError> {
        let mut text = line.to_string();
        text.push('\n');
        let _one_writer = self.write.lock();
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| {
                ClientError::Config(format!(
                    "cannot write the task journal {}: {e}",
                    self.path.display()
                ))
            })
    }

    /// Records that task `id` was created by a call of `tool`.
    ///
    /// # Errors
    ///
    /// [`ClientError::Config`] when the file cannot be written.
    pub fn created(&self, id: TaskId, tool: &str) -> Result<(), ClientError> {
        self.append(json!({"event": "created", "taskId": id, "tool": tool, "at": Timestamp::now()}))
    }

    /// Records that task `id` ended with `status`.
    ///
    /// # Errors
    ///
    /// [`ClientError::Config`] when the file cannot be written.
    pub fn finished(&self, id: TaskId, status: TaskStatus) -> Result<(), ClientError> {
        self.append(json!({"event": "finished", "taskId": id, "status": status, "at": Timestamp::now()}))
    }

    /// Tasks recorded as created and not as finished, oldest first. A
    /// missing file has none.
    ///
    /// # Errors
    ///
    /// [`ClientError::Config`] when the file exists but cannot be read.
    pub fn unfinished(&self) -> Result<Vec<TaskId>, ClientError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(ClientError::Config(format!(
                    "cannot read the task journal {}: {e}",
                    self.path.display()
                )));
            }
        };
        let mut created = Vec::new();
        let mut finished = HashSet::new();
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let Some(id) = v["taskId"].as_str().and_then(|s| s.parse::<TaskId>().ok()) else {
                continue;
            };
            match v["event"].as_str() {
                Some("created") if !created.contains(&id) => created.push(id),
                Some("finished") => {
                    finished.insert(id);
                }
                _ => {}
            }
        }
        created.retain(|id| !finished.contains(id));
        Ok(created)
    }
}
