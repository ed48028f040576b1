//! `cargo +nightly fuzz run client_answers`: the body is `subtask::fuzzing::client_answers`,
//! which `tests/fuzz_corpus.rs` also runs over the committed corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| subtask::fuzzing::client_answers(data));
