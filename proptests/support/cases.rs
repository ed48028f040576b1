//! How many cases a property runs: its default for `cargo test` in debug,
//! or `PROPTEST_CASES` for a deeper pass. Shared by every property test.

#![allow(dead_code)]

use proptest::test_runner::Config;

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
