//! The process's TLS crypto provider (feature `oauth`).
//!
//! The `oauth` feature turns on reqwest's rustls without a crypto provider
//! of its own (`rustls-no-provider`: ring instead of aws-lc, which would
//! need cmake to build). rustls then needs a process-wide default
//! provider before any reqwest client is built, including clients that
//! never speak TLS (the client library's, an OTLP exporter's): every
//! place in this crate that builds one calls [`install_provider`] first,
//! and a program that builds its own reqwest clients next to this crate
//! should too.

/// Installs ring as rustls's process-wide provider, unless one is
/// installed already (then nothing changes). Cheap after the first call.
pub fn install_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
