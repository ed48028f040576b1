//! The other instances' notifications, received on a connection of their
//! own (`LISTEN` belongs to a session; `crate::store::postgres::listen`):
//! answers to the commands this instance passed on, commits of trees it
//! may be streaming, and commands for trees it holds.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Node;
use crate::store::postgres::listen::{Listener, Note};

/// Listens until `node` is stopped or lost (blocking; the
/// `subtask-listen` thread), reconnecting with backoff. After every
/// (re)connection everyone re-reads: whatever was notified while no
/// connection listened is not known.
pub(super) fn listen_loop(node: &Node) {
    let retries = || crate::retry::delays(Duration::from_millis(50), Duration::from_secs(1));
    let mut pauses = retries();
    while !node.stopped.load(Ordering::Acquire) && !node.is_lost.load(Ordering::Acquire) {
        let mut listener = match Listener::open(node.pool.connector()) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "listening for other instances failed; retrying");
                std::thread::sleep(pauses.next().unwrap_or(Duration::from_secs(1)));
                continue;
            }
        };
        pauses = retries();
        // Whatever was notified while no connection listened: everyone re-reads.
        for w in node.answers.lock().values() {
            w.notify_one();
        }
        let _ = node.changed.send(None);
        node.inbox.notify_one();
        node.worker_mail.notify_one();
        node.worker_tools.notify_one();
        while !node.stopped.load(Ordering::Acquire) && !listener.is_closed() {
            if let Err(e) = listener.deliver(Duration::from_millis(250), |note| dispatch(node, note)) {
                tracing::warn!(error = %e, "the notification connection broke; reconnecting");
            }
            // Makes a dead connection show as closed.
            if !listener.alive() {
                break;
            }
        }
    }
}

/// Wakes whoever waits for what `note` says.
fn dispatch(node: &Node, note: Note) {
    match note {
        Note::Answered(seqs) => {
            let answers = node.answers.lock();
            for seq in seqs {
                if let Some(w) = answers.get(&seq) {
                    w.notify_one();
                }
            }
        }
        Note::Changed(roots) => {
            let _ = node.changed.send(Some(Arc::new(roots)));
        }
        // The holder named by the requester, or none known: a holder
        // that is being taken over drains its inbox after the takeover.
        Note::Inbox(holder) => {
            if holder.is_none_or(|h| h == node.instance) {
                node.inbox.notify_one();
            }
        }
        Note::Workers => node.worker_tools.notify_one(),
        Note::Mail(to) => {
            if to == Some(node.instance) {
                node.worker_mail.notify_one();
            }
        }
    }
}
