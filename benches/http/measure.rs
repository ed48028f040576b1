//! Measurement helpers: the window, CPU of threads, percentiles, tallies.

#[allow(unused_imports)]
use super::*;

pub(crate) fn window() -> Duration {
    let ms = std::env::var("SUBTASK_HTTP_WINDOW_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    Duration::from_millis(ms)
}

pub(crate) fn only() -> Option<String> {
    std::env::var("SUBTASK_HTTP_ONLY").ok().filter(|s| !s.is_empty())
}

pub(crate) fn runs(part: &str) -> bool {
    only().is_none_or(|o| o == part)
}

pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// On-CPU time of this process's threads whose name starts with one of
/// `prefixes` (`/proc/self/task/<tid>/schedstat`, first field, in ns).
pub(crate) fn threads_cpu(prefixes: &[&str]) -> Duration {
    let mut ns = 0u64;
    let tasks = std::fs::read_dir("/proc/self/task").expect("read /proc/self/task");
    for entry in tasks.flatten() {
        let dir = entry.path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue; // the thread ended meanwhile
        };
        let comm = comm.trim_end();
        if !prefixes.iter().any(|p| comm.starts_with(p)) {
            continue;
        }
        if let Ok(stat) = std::fs::read_to_string(dir.join("schedstat")) {
            ns += stat
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .expect("schedstat's first field");
        }
    }
    Duration::from_nanos(ns)
}

/// User and kernel CPU ticks (`/proc/self/task/<tid>/stat`, utime and
/// stime, 1/100 s each) of the threads `threads_cpu` counts: the share of
/// a server's CPU spent in the kernel (its socket calls and wake-ups).
pub(crate) fn threads_ticks(prefixes: &[&str]) -> (u64, u64) {
    let (mut user, mut sys) = (0, 0);
    let tasks = std::fs::read_dir("/proc/self/task").expect("read /proc/self/task");
    for entry in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ...`: the name may hold spaces, so split after ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !prefixes.iter().any(|p| stat[open + 1..close].starts_with(p)) {
            continue;
        }
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // Fields 14 and 15 of the line; the rest starts at field 3.
        user += fields[11].parse::<u64>().expect("utime");
        sys += fields[12].parse::<u64>().expect("stime");
    }
    (user, sys)
}

pub(crate) fn percentile(sorted: &[u32], p: f64) -> u32 {
    assert!(!sorted.is_empty(), "no latencies recorded");
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// What one workload measured on one server, summed over its rounds.
#[derive(Default)]
pub(crate) struct Tally {
    /// Operations done (tasks created and seen completed, or gets).
    pub(crate) ops: u64,
    /// HTTP requests sent (every `tools/call` and `tasks/get`).
    pub(crate) requests: u64,
    pub(crate) elapsed: Duration,
    pub(crate) cpu: Duration,
    /// The load generator's CPU over the same windows.
    pub(crate) client_cpu: Duration,
    /// The server's user and kernel ticks over the same windows.
    pub(crate) ticks: (u64, u64),
    pub(crate) latencies_us: Vec<u32>,
    pub(crate) rounds: Vec<f64>,
}

impl Tally {
    pub(crate) fn add(&mut self, w: Window) {
        self.rounds.push(w.ops as f64 / w.elapsed.as_secs_f64());
        self.ops += w.ops;
        self.requests += w.requests;
        self.elapsed += w.elapsed;
        self.cpu += w.cpu;
        self.client_cpu += w.client_cpu;
        self.ticks.0 += w.ticks.0;
        self.ticks.1 += w.ticks.1;
        self.latencies_us.extend(w.latencies_us);
    }

    pub(crate) fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    /// Server CPU per 1,000 requests, in ms.
    pub(crate) fn cpu_per_1k_ms(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e3 / (self.requests as f64 / 1e3)
    }

    /// The share of the server's CPU spent in the kernel, in percent.
    pub(crate) fn kernel_percent(&self) -> f64 {
        let (user, sys) = self.ticks;
        100.0 * sys as f64 / (user + sys).max(1) as f64
    }

    /// The load generator's CPU per 1,000 requests, in ms.
    pub(crate) fn client_cpu_per_1k_ms(&self) -> f64 {
        self.client_cpu.as_secs_f64() * 1e3 / (self.requests as f64 / 1e3)
    }

    pub(crate) fn p(&mut self, p: f64) -> u32 {
        self.latencies_us.sort_unstable();
        percentile(&self.latencies_us, p)
    }

    pub(crate) fn rounds(&self) -> String {
        self.rounds
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
