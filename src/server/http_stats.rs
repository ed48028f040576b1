//! What the HTTP endpoint counts for operators (`/metrics`): requests by
//! JSON-RPC method and HTTP status, and the SSE streams open now.
//!
//! One relaxed atomic add per request into a fixed table (method × status
//! code), and one per stream opened and closed; the method label comes from
//! a fixed list, so a client cannot grow the label set.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};

use crate::model::Method;

/// The JSON-RPC method of a request to `/mcp`, from a fixed list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RpcMethod(u8);

/// The first index of a named method in [`METHOD_NAMES`].
const FIRST_NAMED: usize = 4;

/// The label of each [`RpcMethod`], by index: four for what is not a
/// request of a known method, then every [`Method`] in [`Method::ALL`]'s
/// order, by its wire name.
const METHOD_NAMES: [&str; FIRST_NAMED + Method::ALL.len()] = {
    let mut names = [""; FIRST_NAMED + Method::ALL.len()];
    names[0] = "none";
    names[1] = "other";
    names[2] = "notification";
    names[3] = "response";
    let mut i = 0;
    while i < Method::ALL.len() {
        names[FIRST_NAMED + i] = Method::ALL[i].as_str();
        i += 1;
    }
    names
};

impl RpcMethod {
    /// No JSON-RPC message was read: refused before the body (Host,
    /// Origin, token, method, media type, size) or not JSON-RPC.
    pub(crate) const NONE: RpcMethod = RpcMethod(0);
    /// A request whose method is not in the list.
    pub(crate) const OTHER: RpcMethod = RpcMethod(1);
    /// A notification (any method).
    pub(crate) const NOTIFICATION: RpcMethod = RpcMethod(2);
    /// A response or error sent by the client (answers to a legacy stream's
    /// input requests).
    pub(crate) const RESPONSE: RpcMethod = RpcMethod(3);

    /// A request of `method` (parsed once by the pipeline), or
    /// [`RpcMethod::OTHER`] for a method the server does not know.
    pub(crate) fn of_method(method: Option<Method>) -> RpcMethod {
        match method {
            Some(m) => RpcMethod((FIRST_NAMED + m.index()) as u8),
            None => RpcMethod::OTHER,
        }
    }

    /// The request method `name`, or [`RpcMethod::OTHER`].
    #[cfg(test)]
    pub(crate) fn of(name: &str) -> RpcMethod {
        RpcMethod::of_method(Method::from_name(name))
    }

    /// The label value.
    pub(crate) fn name(self) -> &'static str {
        METHOD_NAMES[usize::from(self.0)]
    }
}

/// HTTP status codes counted exactly (100..=599); anything else counts as 0.
const CODES: usize = 500;

/// The endpoint's counters.
pub(crate) struct HttpStats {
    /// Requests by method and status: `[method * CODES + (status - 100)]`.
    requests: Box<[AtomicU64]>,
    /// Requests with a status outside 100..=599 (none are sent today).
    odd_status: AtomicU64,
    open_streams: Arc<AtomicUsize>,
}

impl Default for HttpStats {
    fn default() -> Self {
        HttpStats {
            requests: (0..METHOD_NAMES.len() * CODES)
                .map(|_| AtomicU64::new(0))
                .collect(),
            odd_status: AtomicU64::new(0),
            open_streams: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl std::fmt::Debug for HttpStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpStats")
            .field("open_streams", &self.open_streams())
            .finish_non_exhaustive()
    }
}

impl HttpStats {
    /// Counts one request answered with `status`.
    pub(crate) fn answered(&self, method: RpcMethod, status: u16) {
        match usize::from(status).checked_sub(100).filter(|c| *c < CODES) {
            Some(c) => {
                self.requests[usize::from(method.0) * CODES + c].fetch_add(1, Ordering::Relaxed);
            }
            None => {
                self.odd_status.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Every non-zero count: (method label, status, requests).
    #[cfg(any(feature = "metrics", test))]
    pub(crate) fn requests(&self) -> Vec<(&'static str, u16, u64)> {
        self.requests
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let n = n.load(Ordering::Relaxed);
                (n > 0).then(|| (METHOD_NAMES[i / CODES], (i % CODES + 100) as u16, n))
            })
            .collect()
    }

    /// SSE streams open now (`/mcp` and the web view's live trees).
    pub(crate) fn open_streams(&self) -> usize {
        self.open_streams.load(Ordering::Relaxed)
    }

    /// `items` (an SSE response's messages or events), counted as an open
    /// stream until it is dropped (the stream ended, the client went away,
    /// or the server shut down).
    pub(crate) fn track_stream<T: Send + 'static>(
        &self,
        items: BoxStream<'static, T>,
    ) -> BoxStream<'static, T> {
        self.open_streams.fetch_add(1, Ordering::Relaxed);
        Tracked {
            inner: items,
            _open: OpenStream(self.open_streams.clone()),
        }
        .boxed()
    }
}

/// Counts one open stream until dropped.
struct OpenStream(Arc<AtomicUsize>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A stream counted while it lives.
struct Tracked<T> {
    inner: BoxStream<'static, T>,
    _open: OpenStream,
}

impl<T> Stream for Tracked<T> {
    type Item = T;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<T>> {
        self.inner.poll_next_unpin(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_outside_the_list_are_other_and_counts_land_by_method_and_status() {
        assert_eq!(RpcMethod::of("tasks/get").name(), "tasks/get");
        assert_eq!(
            RpcMethod::of("subscriptions/listen").name(),
            "subscriptions/listen"
        );
        assert_eq!(RpcMethod::of("evil/\"label").name(), "other");
        let s = HttpStats::default();
        s.answered(RpcMethod::of("tools/call"), 200);
        s.answered(RpcMethod::of("tools/call"), 200);
        s.answered(RpcMethod::NONE, 401);
        s.answered(RpcMethod::OTHER, 599);
        s.answered(RpcMethod::OTHER, 600);
        assert_eq!(
            s.requests(),
            vec![("none", 401, 1), ("other", 599, 1), ("tools/call", 200, 2)]
        );
    }

    #[test]
    fn a_tracked_stream_counts_until_dropped() {
        let s = HttpStats::default();
        let a = s.track_stream(futures::stream::empty::<String>().boxed());
        let b = s.track_stream(futures::stream::empty::<String>().boxed());
        assert_eq!(s.open_streams(), 2);
        drop(a);
        assert_eq!(s.open_streams(), 1);
        drop(b);
        assert_eq!(s.open_streams(), 0);
    }
}
