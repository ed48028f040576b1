//! `cargo +nightly fuzz run server_entry`: the body is `subtask::fuzzing::server_entry`,
//! which `tests/fuzz_corpus.rs` also runs over the committed corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| subtask::fuzzing::server_entry(data));
