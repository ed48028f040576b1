//! The bodies of the fuzz targets (feature `fuzzing`; not for library
//! users, and not part of the stable API).
//!
//! Each function takes the bytes libFuzzer generates, drives one part of
//! the crate with them and panics when a property breaks; returning means
//! the input was handled correctly. The `cargo fuzz` targets in `fuzz/` are
//! one line each around these functions, and `tests/fuzz_corpus.rs` runs
//! the same functions over every committed corpus and regression file on
//! the stable toolchain, so what the fuzzer checked is checked in CI
//! (`docs/fuzzing.md`).
//!
//! * [`server_entry`]: a sequence of HTTP requests (method, path, headers,
//!   body) into the axum router of [`server::http`](crate::server::http)
//!   with the demo tools and a few of the harness's own; every answer must
//!   be a well-formed JSON-RPC message (or a clear HTTP error), the store
//!   must hold exactly the live trees, and a valid client must still be
//!   served afterwards.
//! * [`stored_state`]: rows as the SQLite store reads them back, through
//!   the store's row decoding, tree assembly and [`Forest::restore`](crate::core::Forest::restore):
//!   a clear error or a tree that keeps every invariant, never a panic.
//! * [`bearer_tokens`]: any `Authorization` header through the OAuth
//!   resource server's check: no panic, only well-formed challenges, and a
//!   caller let through only with a token of the trusted issuer for this
//!   resource.
//! * [`client_answers`]: a scripted hostile server behind the client
//!   library (the HTTP transport's decoding without a socket): every walk
//!   ends, in a clear error or a checked tree, within its limits.
//!
//! Nothing here is compiled without the feature, and nothing outside this
//! module and the client's scripted transport exists for it.

mod auth;
mod client;
mod server;
mod store;
mod text;

pub use auth::bearer_tokens;
pub use client::client_answers;
pub use server::server_entry;
pub use store::stored_state;

/// A fuzz target's body: returns for a correctly handled input, panics otherwise.
pub type Body = fn(&[u8]);

/// Every target: its directory name under `fuzz/corpus/` and its body.
pub const TARGETS: [(&str, Body); 4] = [
    ("server_entry", server_entry),
    ("bearer_tokens", bearer_tokens),
    ("stored_state", stored_state),
    ("client_answers", client_answers),
];

/// A single-threaded tokio runtime with a paused clock: timers fire as soon
/// as nothing else can run, so poll intervals, backoffs and timeouts cost no
/// real time and a run does not depend on the machine's speed.
fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds")
}
