//! The one seeded random generator of the tests and the benchmarks, and
//! the one way to take its seed from the environment.
//!
//! A test that draws random choices takes its seed from [`from_env`]: the
//! variable when it is set (decimal or `0x` hex), otherwise a fresh seed
//! from the clock and the process id. Either way the seed is printed (the
//! test harness shows it when the test fails), with the line that replays
//! the run. [`Rng`] is splitmix64: tiny, fast, and the same numbers on every
//! platform and build, so a seed replays the same choices.
//!
//! The variables:
//!
//! * `CRASH_SEED` — `tests/crash.rs`: kill moments and triggers, tool
//!   arguments, client actions (`CRASH_ROUNDS` and `CRASH_TRIGGER`, which
//!   are not seeds, are read there).
//! * `SCALE_SEED` — `tests/scale_out.rs`: fault kinds, moments, targets and
//!   restart ids, tool arguments, client actions (`SCALE_ROUNDS` and
//!   `SCALE_FAULT` are read there).
//! * `SUBTASK_SEED` — `tests/client.rs`: the third finish order of
//!   `results_come_in_tree_order_while_tasks_finish_in_random_order` (the
//!   first two are fixed).
//!
//! The benchmarks (`benches/engine.rs` includes this file with
//! `#[path = "../tests/support/seed.rs"]`) use fixed seeds, so every run
//! measures the same workload. The property tests draw from proptest's own
//! generator instead (`PROPTEST_RNG_SEED` fixes it, `PROPTEST_CASES` sets
//! the number of cases; `proptests/support/cases.rs`).

#![allow(dead_code)]

/// splitmix64: a small deterministic generator.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose numbers depend only on `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (`lo` when empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next_u64() % (hi - lo)
        }
    }

    /// Uniform in `0..n`.
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64) / ((1u64 << 53) as f64) < p
    }

    /// One of `items`, `None` when there are none.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            Some(&items[self.range(0, items.len() as u64) as usize])
        }
    }

    /// Shuffles `v` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }

    /// A new generator seeded from this one, for a task of its own.
    pub fn fork(&mut self) -> Rng {
        Rng(self.next_u64())
    }
}

/// The seed in the environment variable `var`, or a fresh one; printed
/// with the line that replays it.
///
/// # Panics
///
/// If `var` is set but is not a `u64` (decimal or `0x` hex).
pub fn from_env(var: &str) -> u64 {
    let seed = env_u64(var).unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("the clock is after 1970")
            .as_nanos() as u64;
        nanos ^ (u64::from(std::process::id()) << 32)
    });
    println!("seed {seed} (replay with {var}={seed})");
    seed
}

/// The `u64` in the environment variable `name` (decimal or `0x` hex), if
/// it is set.
///
/// # Panics
///
/// If it is set but is not a `u64`.
pub fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("{name}={v:?}: {e}")))
}
