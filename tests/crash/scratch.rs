//! What the fault tests (`tests/crash.rs`, `tests/scale_out.rs`) share
//! around their rounds: a scratch directory kept when the test fails, and
//! the failure report that names the seed to replay.

use std::path::PathBuf;
use std::sync::Mutex;

use crate::model::Model;

/// A fresh directory, removed at the end unless the test failed (then it is
/// kept, and named, for a look at the database and the server logs).
pub struct Scratch(pub PathBuf, &'static str);

impl Scratch {
    /// A directory `subtask-<tag>-…` for the test named `test`.
    pub fn new(tag: &str, test: &'static str) -> Scratch {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!("subtask-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir, test)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}: kept {} (database and server logs)", self.1, self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Fails the test `test` with every violation recorded so far, naming the
/// seed and the variable (`seed_var`) that replays it.
pub fn fail_on_violations(model: &Mutex<Model>, test: &str, seed_var: &str, seed: u64, when: &str) {
    let m = model.lock().unwrap();
    if m.violations.is_empty() {
        return;
    }
    let shown: Vec<&String> = m.violations.iter().take(40).collect();
    panic!(
        "{test} failed {when} (seed {seed}; replay with {seed_var}={seed}): {} violation(s):\n{}",
        m.violations.len(),
        shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
    );
}
