//! Reasoning summaries kept beside the assistant message they belong to.
//!
//! Providers stream reasoning as [`RunEvent::ReasoningDelta`] during a model call; the call's
//! assistant message follows as [`RunEvent::MessageAppended`]. The log pairs the two so the
//! session stores the summary as the message's `reasoning` (the store cuts it at 64 KiB and
//! sets `reasoningTruncated`). It is never part of [`Message`], so it never goes back to the
//! model with the history.

use crate::events::RunEvent;
use polpo_core::message::{Message, Role};
use polpo_store::{MAX_REASONING_BYTES, NewMessage};

/// Reasoning per appended message of one run, in append order.
#[derive(Debug, Default)]
pub(crate) struct ReasoningLog {
    /// Reasoning of the model call in progress (bounded: the store keeps 64 KiB anyway).
    pending: String,
    /// One entry per `MessageAppended`, in order.
    per_message: Vec<Option<String>>,
}

impl ReasoningLog {
    /// Follow one event of the run.
    pub(crate) fn observe(&mut self, event: &RunEvent) {
        match event {
            RunEvent::TurnStarted { .. } => self.pending.clear(),
            // Past the cap one more byte is enough for the store to mark it truncated.
            RunEvent::ReasoningDelta { text } if self.pending.len() <= MAX_REASONING_BYTES => {
                self.pending.push_str(text)
            }
            RunEvent::MessageAppended { message } => {
                let reasoning = (message.role == Role::Assistant && !self.pending.is_empty())
                    .then(|| std::mem::take(&mut self.pending));
                self.per_message.push(reasoning);
            }
            _ => {}
        }
    }

    /// The run's messages (in the order they were appended) ready to store, each with its
    /// reasoning.
    pub(crate) fn attach(&mut self, produced: Vec<Message>) -> impl Iterator<Item = NewMessage> {
        let reasoning = std::mem::take(&mut self.per_message);
        produced
            .into_iter()
            .zip(reasoning.into_iter().chain(std::iter::repeat(None)))
            .map(|(message, reasoning)| NewMessage { reasoning, ..NewMessage::new(message) })
    }
}
