//! The timer driver: fires TTL expiry and tree deletion at the forests'
//! deadlines (`TimerQueue`), and shuts the runtime down when the tokio
//! runtime it runs on goes away.

use std::time::Duration;

use crate::runtime::inner::Inner;

/// Shuts its runtime down when the timer driver's future is dropped while
/// the runtime lives: the tokio runtime it runs on is shutting down, and
/// with it every handler of this runtime.
struct ShutDownOnDrop(std::sync::Weak<Inner>);

impl Drop for ShutDownOnDrop {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            inner.shut_down();
        }
    }
}

/// Fires TTL expiry and tree deletion. One task per runtime; it holds only a
/// weak reference so dropping the last `Runtime` stops it.
pub(crate) async fn timer_driver(inner: std::sync::Weak<Inner>) {
    let _shut_down = ShutDownOnDrop(inner.clone());
    let Some(changed) = inner.upgrade().map(|s| s.timers.changed.clone()) else {
        return;
    };
    loop {
        let notified = changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let Some(strong) = inner.upgrade() else { return };
        let next = strong.timers.next();
        let sleep_until = next.map(|at| strong.clock.instant_of(at));
        drop(strong);
        match sleep_until {
            Some(when) => {
                tokio::select! {
                    () = tokio::time::sleep_until(when) => {}
                    () = &mut notified => continue,
                }
            }
            None => {
                // Wake periodically to notice a dropped runtime.
                tokio::select! {
                    () = &mut notified => continue,
                    () = tokio::time::sleep(Duration::from_secs(3600)) => continue,
                }
            }
        }
        let Some(strong) = inner.upgrade() else { return };
        let now = strong.now();
        for root in strong.timers.pop_due(now) {
            let Some(tree) = strong.tree_of(root) else {
                continue;
            };
            if strong.release_if_due(&tree) {
                continue;
            }
            // Re-arm with the forest's next deadline: it may hold later timers.
            let next = strong.with_tree(&tree, |st, now, _| {
                st.forest.handle_timeout(now);
                st.forest.next_deadline()
            });
            if let Some(next) = next {
                strong.timers.arm(next, root);
            }
        }
    }
}
