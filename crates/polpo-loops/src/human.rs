//! Human steps waiting for a person in this process ([`HumanDesk`]), and the answers stored with
//! runs resumed here. A waiting run is stored `awaiting_human` holding no lease; how an answer
//! reaches it on whichever server receives it is in `answers.rs`.

use crate::error::LoopError;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::oneshot;

/// A person's answer handed to the run waiting for it in this process.
pub(crate) struct Handed {
    /// The answer, valid against the step's schema.
    pub(crate) output: Value,
    /// Told whether the run stored the answer (`false`: it no longer waited, e.g. an answer
    /// stored elsewhere first).
    pub(crate) stored: oneshot::Sender<bool>,
}

/// What a human step gets from the desk.
pub(crate) enum Awaited {
    /// The answer stored with the run before it resumed here (given on another server).
    Stored(Value),
    /// The answer, once a person gives it here.
    Waiting(oneshot::Receiver<Handed>),
}

/// A suspended human step.
struct Waiting {
    owner: Option<String>,
    schema: Option<Value>,
    answer: oneshot::Sender<Handed>,
}

/// The human steps waiting now in this process, by loop run id (oldest first within a run),
/// and the answers stored with runs resumed here, by run id and step.
#[derive(Default)]
pub struct HumanDesk {
    waiting: Mutex<HashMap<String, Vec<Waiting>>>,
    stored: Mutex<HashMap<String, (String, Value)>>,
}

impl HumanDesk {
    /// Run `run_id` resumes with `output` stored as the answer of its human step `step`: that
    /// step takes it instead of waiting.
    pub(crate) fn answered(&self, run_id: &str, step: &str, output: Value) {
        lock(&self.stored).insert(run_id.to_owned(), (step.to_owned(), output));
    }

    /// The answer of run `run_id`'s step `step`: the one stored with the run, or the one a
    /// person gives here later (checked against `schema`); the run belongs to API client
    /// `owner`.
    pub(crate) fn wait(&self, run_id: &str, step: &str, owner: Option<String>, schema: Option<Value>) -> Awaited {
        {
            let mut stored = lock(&self.stored);
            if stored.get(run_id).is_some_and(|(s, _)| s == step) {
                let (_, output) = stored.remove(run_id).unwrap_or_default();
                return Awaited::Stored(output);
            }
        }
        let (answer, rx) = oneshot::channel();
        let mut waiting = lock(&self.waiting);
        // Steps of runs that went away (a client that disconnected) wait for nobody.
        waiting.retain(|_, queue| {
            queue.retain(|w| !w.answer.is_closed());
            !queue.is_empty()
        });
        waiting.entry(run_id.to_owned()).or_default().push(Waiting { owner, schema, answer });
        Awaited::Waiting(rx)
    }

    /// Forget a run's suspended steps and stored answer (it ended).
    pub(crate) fn forget(&self, run_id: &str) {
        lock(&self.waiting).remove(run_id);
        lock(&self.stored).remove(run_id);
    }

    /// Whether run `run_id` waits for a person in this process.
    pub fn is_waiting(&self, run_id: &str) -> bool {
        lock(&self.waiting).get(run_id).is_some_and(|q| q.iter().any(|w| !w.answer.is_closed()))
    }

    /// Hand `output` to the oldest human step of run `run_id` waiting in this process, checked
    /// against its schema first (an invalid answer leaves it waiting). `caller` is the API
    /// client answering (`None`: one that sees every run). `Ok(None)`: no step of that run
    /// waits here for that caller; else whether the run stored the answer.
    pub(crate) fn hand(
        &self,
        run_id: &str,
        caller: Option<&str>,
        output: Value,
    ) -> Result<Option<oneshot::Receiver<bool>>, LoopError> {
        let mut waiting = lock(&self.waiting);
        if let Some(queue) = waiting.get_mut(run_id) {
            queue.retain(|w| !w.answer.is_closed());
        }
        let visible = |q: &Vec<Waiting>| {
            q.first().is_some_and(|w| caller.is_none_or(|c| w.owner.as_deref().unwrap_or_default() == c))
        };
        let Some(queue) = waiting.get_mut(run_id).filter(|q| visible(q)) else { return Ok(None) };
        check(queue[0].schema.as_ref(), &output)?;
        let step = queue.remove(0);
        let (stored, rx) = oneshot::channel();
        // A run that went away meanwhile drops the answer: the caller stores it instead.
        let _ = step.answer.send(Handed { output, stored });
        Ok(Some(rx))
    }
}

/// `output` checked against a human step's `output.schema` (`None`: anything goes).
pub(crate) fn check(schema: Option<&Value>, output: &Value) -> Result<(), LoopError> {
    let Some(schema) = schema else { return Ok(()) };
    let validator = jsonschema::draft202012::new(schema)
        .map_err(|e| LoopError::HumanOutputInvalid(format!("the step's output.schema is invalid: {e}")))?;
    let problems: Vec<String> =
        validator.iter_errors(output).take(5).map(|e| format!("at `{}`: {e}", e.instance_path())).collect();
    if problems.is_empty() { Ok(()) } else { Err(LoopError::HumanOutputInvalid(problems.join("; "))) }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
