//! Steering and abort for chats that run inline (not durable): the run is known by id only
//! in this process and only while its request runs, like the reference's in-process active
//! run index. Nothing is journaled or checkpointed; a disconnect still cancels the turn.

use super::spec::{SteerMessage, SteerMode};
use super::state::Queued;
use crate::turn::control::RunControl;
use polpo_core::message::Message;
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, PoisonError};
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct Inbox {
    pending: Vec<SteerMessage>,
    seen: HashSet<String>,
    closed: bool,
}

/// An inline run's steering inbox and cancellation.
pub(crate) struct InlineRun {
    pub(crate) cancel: CancellationToken,
    /// The API client its session belongs to: steering and abort by run id reach it only
    /// from that client (or an admin).
    pub(crate) owner: Option<String>,
    inbox: Mutex<Inbox>,
}

impl InlineRun {
    pub(crate) fn new(cancel: CancellationToken, owner: Option<String>) -> Self {
        Self { cancel, owner, inbox: Mutex::default() }
    }

    fn lock(&self) -> MutexGuard<'_, Inbox> {
        self.inbox.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queue steering; a seen id is a duplicate; `None` once the run is finishing.
    pub(crate) fn queue(&self, steer: SteerMessage) -> Option<Queued> {
        let mut inbox = self.lock();
        if inbox.closed {
            return None;
        }
        if !inbox.seen.insert(steer.id.clone()) {
            return Some(Queued::Duplicate);
        }
        inbox.pending.push(steer);
        Some(Queued::Accepted)
    }

    /// See `RunState::deliver`: nothing taken while finishing closes the inbox.
    fn take(&self, pick: impl Fn(&SteerMessage) -> bool, finishing: bool) -> Vec<Message> {
        let mut inbox = self.lock();
        let (take, keep): (Vec<SteerMessage>, Vec<SteerMessage>) =
            std::mem::take(&mut inbox.pending).into_iter().partition(|s| pick(s));
        inbox.pending = keep;
        inbox.closed |= finishing && take.is_empty();
        take.into_iter().map(|s| s.message).collect()
    }
}

impl RunControl for InlineRun {
    fn take_steering(&self) -> Vec<Message> {
        self.take(|s| s.mode == SteerMode::Steer, false)
    }

    fn take_follow_ups(&self) -> Vec<Message> {
        self.take(|_| true, true)
    }
}
