//! `cargo +nightly fuzz run bearer_tokens`: the body is `subtask::fuzzing::bearer_tokens`,
//! which `tests/fuzz_corpus.rs` also runs over the committed corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| subtask::fuzzing::bearer_tokens(data));
