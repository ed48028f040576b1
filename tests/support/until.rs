//! Polling until a condition holds: the one helper every test uses for it
//! (included with `#[path = "support/until.rs"] mod until;`).

use std::time::Duration;

/// The longest a condition is waited for, on tokio's clock.
pub const LIMIT: Duration = Duration::from_secs(100);

/// Polls `f` every millisecond of tokio's clock until it holds. Under paused
/// time the clock moves on through the polls, so a test with
/// `start_paused` advances in steps of a millisecond.
///
/// # Panics
///
/// Naming `what`, when `f` still does not hold after [`LIMIT`].
pub async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
