//! The instances' logs in the scale-out test: every handler start and end
//! (tracing target `subtask::handler`, messages `handler started` and
//! `handler returned`, the task in field `task`) with the line's timestamp,
//! and the lines where an instance fenced itself (`this instance lost its
//! lease`) and where it registered again to rejoin (`registered again with
//! a new epoch`), read as the processes write them; and the checks made on
//! them: never two live handlers for one task (each incarnation of a
//! process, between a rejoin and the next fence, counts as a process of
//! its own), no handler after an instance's lease lapsed nor while it is
//! fenced, every steer acknowledged to an uninterrupted run of a completed
//! `fanout` node reported by it, and no error lines but the expected ones.
//!
//! Times are microseconds since the Unix epoch: the log lines' (tracing's
//! default format writes the wall clock in RFC 3339, UTC) and the test's
//! own records of its signals (`now_us`), on the same machine's clock.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::model::{Model, Tool, ids, status_of};

/// The wall clock now, in microseconds since the epoch.
pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// A time as `HH:MM:SS.mmm` (UTC), for messages.
pub fn clock(us: i64) -> String {
    let s = us.div_euclid(1_000_000);
    let ms = us.rem_euclid(1_000_000) / 1000;
    let day = s.rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}.{ms:03}", day / 3600, day % 3600 / 60, day % 60)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Started,
    Returned,
}

/// One `subtask::handler` event.
#[derive(Debug, Clone)]
pub struct Event {
    pub task: String,
    pub kind: Kind,
    pub at: i64,
}

/// What fences an instance, in its log.
pub const FENCED: &str = "this instance lost its lease";
/// What starts an instance's next incarnation, in its log.
pub const REGISTERED_AGAIN: &str = "registered again with a new epoch";
/// What ends its rejoining, in its log.
pub const REJOINED: &str = "rejoined the cluster";

/// A process's log, read incrementally as it grows.
#[derive(Debug)]
pub struct LogTail {
    path: PathBuf,
    offset: u64,
    partial: String,
    pub events: Vec<Event>,
    /// When it fenced itself ([`FENCED`]), in order.
    pub fences: Vec<i64>,
    /// When it registered again to rejoin ([`REGISTERED_AGAIN`]), in order.
    pub rejoins: Vec<i64>,
    /// Timestamp of the last line that had one.
    pub last_at: Option<i64>,
}

impl LogTail {
    pub fn new(path: &Path) -> LogTail {
        LogTail {
            path: path.to_owned(),
            offset: 0,
            partial: String::new(),
            events: Vec::new(),
            fences: Vec::new(),
            rejoins: Vec::new(),
            last_at: None,
        }
    }

    /// Reads what was appended since the last call (whole lines only).
    pub fn refresh(&mut self) {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return;
        };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = Vec::new();
        if f.read_to_end(&mut buf).is_err() {
            return;
        }
        self.offset += buf.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&buf));
        let Some(end) = self.partial.rfind('\n') else {
            return;
        };
        let whole: String = self.partial.drain(..=end).collect();
        for line in whole.lines() {
            let (at, event) = parse_line(line);
            if at.is_some() {
                self.last_at = at;
            }
            if let Some(e) = event {
                self.events.push(e);
            } else if let Some(at) = at {
                if line.contains(FENCED) {
                    self.fences.push(at);
                } else if line.contains(REGISTERED_AGAIN) {
                    self.rejoins.push(at);
                }
            }
        }
    }

    /// The tasks whose handler was running at `at` (started, not returned,
    /// by the events stamped no later than `at`), in the incarnation that
    /// ran then: a fence drops every handler of its incarnation.
    pub fn open_at(&self, at: i64) -> Vec<String> {
        let fenced = self
            .fences
            .iter()
            .copied()
            .filter(|&f| f <= at)
            .max()
            .unwrap_or(i64::MIN);
        let mut open: HashMap<&str, bool> = HashMap::new();
        for e in self.events.iter().filter(|e| e.at > fenced && e.at <= at) {
            open.insert(&e.task, e.kind == Kind::Started);
        }
        let mut v: Vec<String> = open
            .into_iter()
            .filter(|(_, o)| *o)
            .map(|(t, _)| t.to_owned())
            .collect();
        v.sort();
        v
    }

    /// Whether this log has a handler event for `task`.
    pub fn mentions(&self, task: &str) -> bool {
        self.events.iter().any(|e| e.task == task)
    }

    /// The first `handler started` of `task` stamped after `after`.
    pub fn started_after(&self, task: &str, after: i64) -> Option<i64> {
        self.events
            .iter()
            .find(|e| e.task == task && e.kind == Kind::Started && e.at > after)
            .map(|e| e.at)
    }
}

/// Removes ANSI escape sequences (`ESC [ ... letter`).
pub fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The line's timestamp, and the handler event it reports, if any.
pub fn parse_line(raw: &str) -> (Option<i64>, Option<Event>) {
    let line = strip_ansi(raw);
    let at = line.split_whitespace().next().and_then(parse_ts);
    let Some(at) = at else { return (None, None) };
    let Some(pos) = line.find("subtask::handler: ") else {
        return (Some(at), None);
    };
    let rest = &line[pos + "subtask::handler: ".len()..];
    let kind = if rest.starts_with("handler started") {
        Kind::Started
    } else if rest.starts_with("handler returned") {
        Kind::Returned
    } else {
        return (Some(at), None);
    };
    let task = rest
        .split_whitespace()
        .find_map(|f| f.strip_prefix("task="))
        .map(|v| v.trim_matches(|c| c == '"' || c == ',' || c == '}').to_owned());
    (Some(at), task.map(|task| Event { task, kind, at }))
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2026-11-24T05:32:09.123456Z` (or with an offset `±HH:MM`) as
/// microseconds since the epoch.
pub fn parse_ts(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut i = 19;
    let mut micros = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let digits = &s[start..i];
        let mut padded: String = digits.chars().take(6).collect();
        while padded.len() < 6 {
            padded.push('0');
        }
        micros = padded.parse().ok()?;
    }
    let offset_s = match b.get(i) {
        Some(b'Z') => 0,
        Some(&sign) if sign == b'+' || sign == b'-' => {
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            let o = oh * 3600 + om * 60;
            if sign == b'+' { o } else { -o }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset_s;
    Some(secs * 1_000_000 + micros)
}

// ----- the checks ------------------------------------------------------------------------

/// One incarnation of a process: from its start, or from when it registered
/// again after a fence, to its next fence (or its end).
pub struct Incarnation {
    pub name: String,
    pub events: Vec<Event>,
    /// When it fenced itself, if it did.
    pub fenced_at: Option<i64>,
    /// When its process registered again after that fence, if it did.
    pub next_at: Option<i64>,
}

/// A process's handler events by incarnation, and the violations of its
/// fences: a handler event while fenced (after a fence, before the process
/// registered again) is one.
pub fn incarnations(name: &str, log: &LogTail) -> (Vec<Incarnation>, Vec<String>) {
    let mut out = Vec::new();
    let mut v = Vec::new();
    let mut events = log.events.iter().peekable();
    let mut start = i64::MIN;
    let mut k = 0;
    loop {
        let fenced_at = log.fences.iter().copied().find(|&f| f >= start);
        let next_at = fenced_at.and_then(|f| log.rejoins.iter().copied().find(|&r| r >= f));
        let mut mine = Vec::new();
        while let Some(e) = events.peek() {
            if fenced_at.is_some_and(|f| e.at > f) {
                break;
            }
            mine.push((*e).clone());
            events.next();
        }
        if let Some(f) = fenced_at {
            while let Some(e) = events.peek() {
                if next_at.is_some_and(|r| e.at >= r) {
                    break;
                }
                v.push(format!(
                    "{name}: handler {:?} of task {} at {}, while fenced (since {}{})",
                    e.kind,
                    e.task,
                    clock(e.at),
                    clock(f),
                    next_at
                        .map(|r| format!(", until it registered again at {}", clock(r)))
                        .unwrap_or_default()
                ));
                events.next();
            }
        }
        out.push(Incarnation {
            name: if k == 0 {
                name.to_owned()
            } else {
                format!("{name}#{k}")
            },
            events: mine,
            fenced_at,
            next_at,
        });
        match next_at {
            Some(r) => {
                start = r;
                k += 1;
            }
            None => break,
        }
    }
    (out, v)
}

/// What the test knows about one process, for the handler checks.
pub struct ProcFacts<'a> {
    pub name: &'a str,
    pub events: &'a [Event],
    /// SIGKILL sent.
    pub killed_at: Option<i64>,
    /// SIGSTOP sent (held past the lease), and SIGCONT.
    pub stopped_at: Option<i64>,
    pub continued_at: Option<i64>,
    /// It exited without being killed: its last log line's time.
    pub exited_at: Option<i64>,
}

impl ProcFacts<'_> {
    /// Whether, at `at`, the process was dead, stopped or had exited.
    fn gone_at(&self, at: i64) -> Option<String> {
        if let Some(k) = self.killed_at
            && k <= at
        {
            return Some(format!("killed at {}", clock(k)));
        }
        if let Some(s) = self.stopped_at
            && s <= at
        {
            return Some(format!("stopped at {}", clock(s)));
        }
        if let Some(x) = self.exited_at
            && x <= at
        {
            return Some(format!("exited after {}", clock(x)));
        }
        None
    }
}

#[derive(Debug, Default)]
pub struct HandlerStats {
    pub runs: usize,
    /// Tasks whose handler ran on more than one process.
    pub moved: usize,
}

/// Never two live handlers for one task, across every process there was:
/// once a handler for a task started on one process, no other process logs
/// a handler event for it afterwards; a handler starts while another
/// process's is still open only when that process was dead, stopped past
/// its lease, or gone; one process never runs two at once; and a process
/// that was stopped past its lease logs no handler event after SIGCONT.
pub fn check_handlers(procs: &[ProcFacts<'_>]) -> (Vec<String>, HandlerStats) {
    let mut v = Vec::new();
    let mut stats = HandlerStats::default();
    // task -> process index -> its events, in the process's order.
    let mut by_task: HashMap<&str, Vec<(usize, Vec<&Event>)>> = HashMap::new();
    for (i, p) in procs.iter().enumerate() {
        for e in p.events {
            let slot = by_task.entry(e.task.as_str()).or_default();
            match slot.iter_mut().find(|(j, _)| *j == i) {
                Some((_, evs)) => evs.push(e),
                None => slot.push((i, vec![e])),
            }
            if e.kind == Kind::Started {
                stats.runs += 1;
            }
        }
        if let Some(c) = p.continued_at {
            for e in p.events.iter().filter(|e| e.at > c) {
                v.push(format!(
                    "{}: handler {:?} of task {} at {}, after SIGCONT at {} ended a stop past its lease \
                     (a handler never runs after its instance's lease lapsed)",
                    p.name,
                    e.kind,
                    e.task,
                    clock(e.at),
                    clock(c)
                ));
            }
        }
    }
    for (task, mut per) in by_task {
        // One process: never a second start while one is open.
        for (i, evs) in &per {
            let mut open: Option<i64> = None;
            for e in evs {
                match e.kind {
                    Kind::Started => {
                        if let Some(o) = open {
                            v.push(format!(
                                "{}: a second handler of task {task} started at {} while the one started at \
                                 {} had not returned",
                                procs[*i].name,
                                clock(e.at),
                                clock(o)
                            ));
                        }
                        open = Some(e.at);
                    }
                    Kind::Returned => open = None,
                }
            }
        }
        if per.len() < 2 {
            continue;
        }
        stats.moved += 1;
        per.sort_by_key(|(_, evs)| evs[0].at);
        for a in 0..per.len() {
            for b in a + 1..per.len() {
                let (pa, ea) = (&procs[per[a].0], &per[a].1);
                let (pb, eb) = (&procs[per[b].0], &per[b].1);
                let tb = eb[0].at;
                for e in ea.iter().filter(|e| e.at >= tb) {
                    v.push(format!(
                        "task {task}: {} logged handler {:?} at {} after a handler for it started on {} at {}",
                        pa.name,
                        e.kind,
                        clock(e.at),
                        pb.name,
                        clock(tb)
                    ));
                }
                let open_on_a = ea
                    .iter()
                    .rfind(|e| e.at < tb)
                    .is_some_and(|e| e.kind == Kind::Started);
                if open_on_a && pa.gone_at(tb).is_none() {
                    v.push(format!(
                        "two live handlers: task {task} started on {} at {} while its handler on {} (started \
                         at {}) was open and {} was neither killed, stopped nor gone",
                        pb.name,
                        clock(tb),
                        pa.name,
                        clock(ea.iter().rfind(|e| e.at < tb).map_or(0, |e| e.at)),
                        pa.name
                    ));
                }
            }
        }
    }
    v.sort();
    (v, stats)
}

/// One `tasks/steer` the clients sent.
#[derive(Debug, Clone)]
pub struct SteerRecord {
    pub task: String,
    pub message: String,
    pub sent_at: i64,
    /// When its acknowledgement arrived (`None`: refused or no answer).
    pub acked_at: Option<i64>,
}

/// Steers acknowledged this long before the handler returned must be in
/// its result. The `fanout` node takes its last checkpoint right before it
/// returns (nothing is awaited in between), so this only covers the
/// process being descheduled between its last checkpoint and the log line.
pub const STEER_MARGIN_US: i64 = 300_000;

/// Every steer acknowledged to a completed `fanout` task while the run that
/// completed it was under way on one process (sent after that handler
/// started, acknowledged before it returned, with [`STEER_MARGIN_US`] to
/// spare) is in the task's reported `steers`.
///
/// Why this is exact for `fanout`: a node collects steers at every
/// checkpoint and takes a last one after its children ended, right before
/// it returns; an acknowledged steer is queued for the task's next safe
/// point, so the run that was under way when it was acknowledged and that
/// went on to complete must report it. Steers acknowledged to an earlier
/// run (one lost with its instance) need not reach the run that completed
/// (a resumable root runs again from the start), and a steer that arrives
/// after the last checkpoint is legitimately never delivered: those are left
/// to the in-order, at-most-once check of `check_final`.
pub fn check_steers(
    model: &Model,
    logs: &[(&str, &[Event])],
    steers: &[SteerRecord],
) -> (Vec<String>, usize) {
    let mut v = Vec::new();
    let mut checked = 0;
    let mut by_task: HashMap<&str, Vec<&SteerRecord>> = HashMap::new();
    for s in steers.iter().filter(|s| s.acked_at.is_some()) {
        by_task.entry(s.task.as_str()).or_default().push(s);
    }
    for (task, sent) in by_task {
        let Some(t) = model.tasks.get(task) else { continue };
        let Some(tree) = model.trees.get(&t.root) else {
            continue;
        };
        let Some(snap) = &t.terminal else { continue };
        if tree.tool != Tool::Fanout || status_of(snap) != "completed" {
            continue;
        }
        // The run that completed: the last start of the task, anywhere,
        // and its return in the same process.
        let mut last: Option<(&str, usize, i64)> = None;
        for (name, events) in logs {
            for (k, e) in events.iter().enumerate() {
                if e.task == task && e.kind == Kind::Started && last.is_none_or(|(_, _, at)| e.at > at) {
                    last = Some((name, k, e.at));
                }
            }
        }
        let Some((name, k, started)) = last else { continue };
        let events = logs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, e)| *e)
            .unwrap_or(&[]);
        let Some(returned) = events[k + 1..]
            .iter()
            .find(|e| e.task == task && e.kind == Kind::Returned)
            .map(|e| e.at)
        else {
            continue;
        };
        let reported = ids(&snap["result"]["structuredContent"]["steers"]);
        for s in sent {
            let acked = s.acked_at.unwrap_or(i64::MAX);
            if s.sent_at <= started || acked.saturating_add(STEER_MARGIN_US) >= returned {
                continue;
            }
            checked += 1;
            if !reported.contains(&s.message) {
                v.push(format!(
                    "steer lost: {:?} to fanout task {task} was acknowledged at {} (sent {}), while its handler \
                     ran on {name} from {} to {}, yet the completed task reports steers {reported:?}",
                    s.message,
                    clock(acked),
                    clock(s.sent_at),
                    clock(started),
                    clock(returned)
                ));
            }
        }
    }
    (v, checked)
}

/// Panics and ERROR lines in a process's log, except `allowed` ones (the
/// expected lease loss of an instance that was stopped past its lease).
pub fn bad_lines(log: &Path, allowed: &[&str]) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(strip_ansi)
        .filter(|l| l.contains("panicked") || l.contains("ERROR"))
        .filter(|l| l.contains("panicked") || !allowed.iter().any(|a| l.contains(a)))
        .collect()
}

/// The time of the first line of `log` stamped after `after` that holds
/// every one of `needles`.
pub fn first_line(log: &Path, needles: &[&str], after: i64) -> Option<i64> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().find_map(|l| {
        let l = strip_ansi(l);
        let at = l.split_whitespace().next().and_then(parse_ts)?;
        (at > after && needles.iter().all(|n| l.contains(n))).then_some(at)
    })
}

/// The last `n` lines of a log, for messages.
pub fn tail(log: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<String> = text.lines().map(strip_ansi).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(parse_ts("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_ts("1970-01-01T00:00:01.5Z"), Some(1_500_000));
        assert_eq!(
            parse_ts("2026-11-24T05:32:09.123456Z"),
            Some(1_795_498_329_123_456)
        );
        assert_eq!(
            parse_ts("2026-11-24T06:32:09.123456+01:00"),
            parse_ts("2026-11-24T05:32:09.123456Z")
        );
        assert_eq!(parse_ts("INFO"), None);
    }

    #[test]
    fn handler_lines() {
        let l = "\u{1b}[2m2026-11-24T05:32:09.000001Z\u{1b}[0m \u{1b}[34mDEBUG\u{1b}[0m req{m=x}: \
                 subtask::handler: handler started task=5e1c0000-0000-4000-8000-000000000001";
        let (at, e) = parse_line(l);
        let e = e.unwrap();
        assert_eq!(at, parse_ts("2026-11-24T05:32:09.000001Z"));
        assert_eq!(e.kind, Kind::Started);
        assert_eq!(e.task, "5e1c0000-0000-4000-8000-000000000001");
        let (_, e) = parse_line(
            "2026-11-24T05:32:09.000001Z DEBUG subtask::handler: handler returned task=\"abc\" outcome=ok",
        );
        let e = e.unwrap();
        assert_eq!((e.kind, e.task.as_str()), (Kind::Returned, "abc"));
        assert!(
            parse_line("2026-11-24T05:32:09Z  INFO subtask::server: listening")
                .1
                .is_none()
        );
    }

    fn ev(task: &str, kind: Kind, at: i64) -> Event {
        Event {
            task: task.into(),
            kind,
            at,
        }
    }

    fn facts<'a>(name: &'a str, events: &'a [Event]) -> ProcFacts<'a> {
        ProcFacts {
            name,
            events,
            killed_at: None,
            stopped_at: None,
            continued_at: None,
            exited_at: None,
        }
    }

    #[test]
    fn handler_rules() {
        use Kind::{Returned, Started};
        // A handler moves from a killed process to another: fine.
        let a = [ev("x", Started, 10)];
        let b = [ev("x", Started, 50), ev("x", Returned, 60)];
        let killed = ProcFacts {
            killed_at: Some(20),
            ..facts("a", &a)
        };
        let (v, st) = check_handlers(&[killed, facts("b", &b)]);
        assert!(v.is_empty(), "{v:?}");
        assert_eq!((st.runs, st.moved), (2, 1));
        // ... while the first process was live: two live handlers.
        let (v, _) = check_handlers(&[facts("a", &a), facts("b", &b)]);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("two live handlers"), "{v:?}");
        // The first process logs for the task after SIGCONT, after the
        // second started it.
        let late = [ev("x", Started, 10), ev("x", Returned, 55)];
        let stopped = ProcFacts {
            stopped_at: Some(20),
            continued_at: Some(54),
            ..facts("a", &late)
        };
        let (v, _) = check_handlers(&[stopped, facts("b", &b)]);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v.iter().any(|x| x.contains("after SIGCONT")), "{v:?}");
        assert!(
            v.iter()
                .any(|x| x.contains("after a handler for it started on b")),
            "{v:?}"
        );
        // One process, two starts without a return.
        let twice = [ev("x", Started, 10), ev("x", Started, 20)];
        let (v, _) = check_handlers(&[facts("a", &twice)]);
        assert_eq!(v.len(), 1, "{v:?}");
        // A finished run, then another process: fine.
        let done = [ev("x", Started, 10), ev("x", Returned, 20)];
        let (v, _) = check_handlers(&[facts("a", &done), facts("b", &b)]);
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn steer_rule() {
        use crate::model::Source;
        use serde_json::json;
        let mut m = Model::default();
        m.add_tree("r", Tool::Fanout, json!({}));
        let done = json!({
            "taskId": "r", "status": "completed", "createdAt": "2026-11-24T05:32:09Z", "ttlMs": null,
            "lastUpdatedAt": "2026-11-24T05:32:09Z",
            "result": {"structuredContent": {"steers": ["a"]}}
        });
        m.observe(&done, Source::Ordered { sent: 1 });
        assert!(m.violations.is_empty(), "{:?}", m.violations);
        let logs = [ev("r", Kind::Started, 100), ev("r", Kind::Returned, 2_000_000)];
        let s = |message: &str, sent_at: i64, acked: i64| SteerRecord {
            task: "r".into(),
            message: message.into(),
            sent_at,
            acked_at: Some(acked),
        };
        let steers = [
            s("a", 200, 300),
            // Lost: acknowledged long before the handler returned.
            s("b", 400, 500),
            // Sent before the run started, or acknowledged at its end: not judged.
            s("c", 50, 300),
            s("d", 1_900_000, 1_950_000),
        ];
        let (v, checked) = check_steers(&m, &[("p", &logs)], &steers);
        assert_eq!(checked, 2);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("\"b\""), "{v:?}");
    }
}
