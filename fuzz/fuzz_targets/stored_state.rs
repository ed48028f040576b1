//! `cargo +nightly fuzz run stored_state`: the body is `subtask::fuzzing::stored_state`,
//! which `tests/fuzz_corpus.rs` also runs over the committed corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| subtask::fuzzing::stored_state(data));
