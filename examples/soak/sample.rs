//! The server's memory and file descriptors, sampled from `/proc/<pid>`
//! every few seconds into `metrics.csv`, and the rules the soak applies to
//! them.
//!
//! Rules (also in `scripts/soak.sh` and `docs/performance.md`):
//!
//! * **Warm-up** is the first `max(20% of the load, TTL + deletion grace +
//!   60 s)`: by then the retained set (finished trees are kept until
//!   `createdAt + TTL + grace`) has reached its steady size.
//! * **RSS**: the median of the last `max(6, 10%)` samples of the load is
//!   at most 10% above the median of the first `max(6, 10%)` samples after
//!   warm-up (the baseline). Not applied when warm-up is more than half the
//!   load (a run too short to say anything about growth).
//! * **File descriptors**: the same medians, last ≤ baseline × 1.25 + 16
//!   (connections come and go with the clients), and at rest after the run
//!   (every client gone) at most 8 more than at rest before it.

use std::fs::File;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// One reading of `/proc/<pid>`.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Seconds since the soak started.
    pub t: f64,
    /// `rest-before`, `load`, `drain`, `final-check`, `rest-after`.
    pub phase: &'static str,
    /// `VmRSS`.
    pub rss_kib: u64,
    /// `VmHWM` (peak RSS).
    pub hwm_kib: u64,
    /// Entries of `/proc/<pid>/fd`.
    pub fds: u64,
    /// `Threads`.
    pub threads: u64,
    /// CPU time the server used so far (user + system), in seconds.
    pub cpu_s: f64,
    /// Trees created so far.
    pub trees: u64,
    /// Requests the soak sent so far.
    pub requests: u64,
}

/// CPU seconds (user + system) of `pid`, from `/proc/<pid>/stat` (in
/// `USER_HZ`, 100 per second on Linux).
pub fn read_cpu(pid: u32) -> std::io::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of stat(5); here 11 and 12.
    Ok((ticks(11) + ticks(12)) as f64 / 100.0)
}

/// Reads `(rss, hwm, threads, fds)` of `pid`.
pub fn read_proc(pid: u32) -> std::io::Result<(u64, u64, u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count() as u64;
    Ok((field("VmRSS:"), field("VmHWM:"), field("Threads:"), fds))
}

/// Samples in the background and on demand.
#[derive(Clone)]
pub struct Sampler {
    pid: u32,
    started: Instant,
    phase: Arc<Mutex<&'static str>>,
    samples: Arc<Mutex<Vec<Sample>>>,
    csv: Arc<Mutex<File>>,
    counts: Arc<dyn Fn() -> (u64, u64) + Send + Sync>,
}

impl Sampler {
    /// A sampler of `pid` writing to `csv`; `counts` gives (trees, requests).
    pub fn new(
        pid: u32,
        started: Instant,
        mut csv: File,
        counts: Arc<dyn Fn() -> (u64, u64) + Send + Sync>,
    ) -> std::io::Result<Self> {
        writeln!(csv, "t_s,phase,rss_kib,hwm_kib,fds,threads,cpu_s,trees,requests")?;
        Ok(Sampler {
            pid,
            started,
            phase: Arc::new(Mutex::new("rest-before")),
            samples: Arc::default(),
            csv: Arc::new(Mutex::new(csv)),
            counts,
        })
    }

    /// Sets the phase later samples are labelled with.
    pub fn phase(&self, phase: &'static str) {
        *self.phase.lock() = phase;
    }

    /// Takes one sample now.
    pub fn sample(&self) -> std::io::Result<Sample> {
        let (rss_kib, hwm_kib, threads, fds) = read_proc(self.pid)?;
        let cpu_s = read_cpu(self.pid)?;
        let (trees, requests) = (self.counts)();
        let s = Sample {
            t: self.started.elapsed().as_secs_f64(),
            phase: *self.phase.lock(),
            rss_kib,
            hwm_kib,
            fds,
            threads,
            cpu_s,
            trees,
            requests,
        };
        let _ = writeln!(
            self.csv.lock(),
            "{:.1},{},{},{},{},{},{:.2},{},{}",
            s.t,
            s.phase,
            s.rss_kib,
            s.hwm_kib,
            s.fds,
            s.threads,
            s.cpu_s,
            s.trees,
            s.requests
        );
        self.samples.lock().push(s.clone());
        Ok(s)
    }

    /// Samples every `every` until the returned handle is aborted; a
    /// failed read (the server is gone) is reported once through `gone`.
    pub fn spawn(
        &self,
        every: Duration,
        gone: impl Fn(String) + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                if let Err(e) = me.sample() {
                    gone(format!("cannot read /proc/{}: {e} (the server is gone?)", me.pid));
                    return;
                }
            }
        })
    }

    /// Every sample so far.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().clone()
    }
}

fn median(mut v: Vec<u64>) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

/// The rules' verdict: lines for the summary, and failures.
pub struct Verdict {
    /// Figures.
    pub lines: Vec<String>,
    /// Broken rules (each fails the soak).
    pub failures: Vec<String>,
}

/// Applies the memory and descriptor rules to the samples.
///
/// `load` is the load phase (seconds since start, from, to); `warmup_s` its
/// warm-up; `rest_before` / `rest_after` the at-rest samples.
pub fn judge(
    samples: &[Sample],
    load: (f64, f64),
    warmup_s: f64,
    rss_limit_pct: f64,
    rest_before: Option<&Sample>,
    rest_after: Option<&Sample>,
) -> Verdict {
    let mut lines = Vec::new();
    let mut failures = Vec::new();
    let during: Vec<&Sample> = samples.iter().filter(|s| s.phase == "load").collect();
    let Some(first) = during.first() else {
        failures.push("no sample was taken during the load".to_owned());
        return Verdict { lines, failures };
    };
    let max_rss = during.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    if let (Some(a), Some(b)) = (during.first(), during.last())
        && b.t > a.t
    {
        lines.push(format!(
            "server cpu: {:.0} s in {:.0} s of load ({:.0}% of one core; user + system from /proc/<pid>/stat)",
            b.cpu_s - a.cpu_s,
            b.t - a.t,
            (b.cpu_s - a.cpu_s) / (b.t - a.t) * 100.0
        ));
    }
    let max_fds = during.iter().map(|s| s.fds).max().unwrap_or(0);
    let post: Vec<&&Sample> = during.iter().filter(|s| s.t >= load.0 + warmup_s).collect();
    let k = (post.len() / 10).max(6);
    let rule_applies = warmup_s <= (load.1 - load.0) / 2.0 && post.len() >= 2 * k;
    let mib = |kib: u64| kib as f64 / 1024.0;
    if post.len() < k {
        lines.push(format!(
            "rss: first={:.1} MiB, max={:.1} MiB; fds: first={}, max={max_fds}; too few samples after \
             the warm-up of {warmup_s:.0} s for the growth rules (run longer)",
            mib(first.rss_kib),
            mib(max_rss),
            first.fds
        ));
        if warmup_s <= (load.1 - load.0) / 2.0 {
            failures.push("too few samples after the warm-up to apply the RSS rule".to_owned());
        }
        rest_rule(rest_before, rest_after, &mut lines, &mut failures);
        return Verdict { lines, failures };
    }
    let baseline_rss = median(post[..k].iter().map(|s| s.rss_kib).collect());
    let last_rss = median(post[post.len() - k..].iter().map(|s| s.rss_kib).collect());
    let baseline_fds = median(post[..k].iter().map(|s| s.fds).collect());
    let last_fds = median(post[post.len() - k..].iter().map(|s| s.fds).collect());
    let growth = (last_rss as f64 / baseline_rss.max(1) as f64 - 1.0) * 100.0;
    let (b0, b1) = (post[0].t - load.0, post[k - 1].t - load.0);
    let (l0, l1) = (post[post.len() - k].t - load.0, post[post.len() - 1].t - load.0);
    lines.push(format!(
        "rss: first={:.1} MiB, baseline={:.1} MiB (median of {k} samples at {b0:.0}-{b1:.0} s), \
         last={:.1} MiB (median of {k} samples at {l0:.0}-{l1:.0} s), max={:.1} MiB; growth {growth:+.1}% \
         (limit {rss_limit_pct:.0}%; warm-up {warmup_s:.0} s)",
        mib(first.rss_kib),
        mib(baseline_rss),
        mib(last_rss),
        mib(max_rss)
    ));
    // Information: the least-squares slope of RSS over trees created after
    // warm-up (a leak per tree shows here long before it reaches 10%).
    let n = post.len() as f64;
    let (mx, my) = (
        post.iter().map(|s| s.trees as f64).sum::<f64>() / n,
        post.iter().map(|s| s.rss_kib as f64).sum::<f64>() / n,
    );
    let sxx: f64 = post.iter().map(|s| (s.trees as f64 - mx).powi(2)).sum();
    let sxy: f64 = post
        .iter()
        .map(|s| (s.trees as f64 - mx) * (s.rss_kib as f64 - my))
        .sum();
    if sxx > 0.0 {
        lines.push(format!(
            "rss slope after warm-up: {:+.1} KiB per 1,000 trees created ({} trees in that window)",
            sxy / sxx * 1000.0,
            post[post.len() - 1].trees - post[0].trees
        ));
    }
    if !rule_applies {
        lines.push(format!(
            "rss rule not applied: the warm-up ({warmup_s:.0} s) is more than half of the load \
             ({:.0} s); run longer to judge growth",
            load.1 - load.0
        ));
    } else if growth > rss_limit_pct {
        failures.push(format!(
            "RSS grew {growth:.1}% after warm-up ({:.1} -> {:.1} MiB), more than {rss_limit_pct:.0}%",
            mib(baseline_rss),
            mib(last_rss)
        ));
    }
    let fd_limit = (baseline_fds as f64 * 1.25).ceil() as u64 + 16;
    lines.push(format!(
        "fds: first={}, baseline={baseline_fds}, last={last_fds} (limit {fd_limit}), max={max_fds}",
        first.fds
    ));
    if rule_applies && last_fds > fd_limit {
        failures.push(format!(
            "open file descriptors grew from {baseline_fds} to {last_fds} after warm-up (limit {fd_limit})"
        ));
    }
    rest_rule(rest_before, rest_after, &mut lines, &mut failures);
    Verdict { lines, failures }
}

/// At rest after the run (every client gone), at most 8 more descriptors
/// than at rest before it.
fn rest_rule(
    rest_before: Option<&Sample>,
    rest_after: Option<&Sample>,
    lines: &mut Vec<String>,
    failures: &mut Vec<String>,
) {
    match (rest_before, rest_after) {
        (Some(b), Some(a)) if a.fds > b.fds + 8 => failures.push(format!(
            "the server holds {} file descriptors at rest after the run, {} before it",
            a.fds, b.fds
        )),
        (Some(_), Some(_)) => {}
        _ => failures.push("no at-rest sample before or after the run".to_owned()),
    }
    if let (Some(b), Some(a)) = (rest_before, rest_after) {
        let mib = |kib: u64| kib as f64 / 1024.0;
        lines.push(format!(
            "at rest: before the load rss={:.1} MiB fds={} threads={}; after it rss={:.1} MiB fds={} \
             threads={}, peak (VmHWM)={:.1} MiB",
            mib(b.rss_kib),
            b.fds,
            b.threads,
            mib(a.rss_kib),
            a.fds,
            a.threads,
            mib(a.hwm_kib)
        ));
    }
}
