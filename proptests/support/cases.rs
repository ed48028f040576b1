//! How many cases a property runs: its default for `cargo test` in debug,
//! or `PROPTEST_CASES` for a deeper pass; and the fixed-seed runner of the
//! coverage tests. Shared by every property test.
//!
//! The properties draw their cases from proptest's generator, seeded afresh
//! on every run (`PROPTEST_RNG_SEED` fixes it). The other tests and the
//! benchmarks use `tests/support/seed.rs`.

#![allow(dead_code)]

use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// `PROPTEST_CASES` when set, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A config with [`cases`], no failure files, and at most `max_shrink_iters`
/// shrink steps (lower where each step replays something expensive).
pub fn proptest_config(default: u32, max_shrink_iters: u32) -> Config {
    Config {
        failure_persistence: None,
        max_shrink_iters,
        ..Config::with_cases(cases(default))
    }
}

/// A runner with proptest's fixed seed, for the tests that check what a
/// fixed set of generated cases exercises: the same cases on every run.
pub fn fixed_seed_runner() -> TestRunner {
    TestRunner::new_with_rng(
        Config::default(),
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    )
}
