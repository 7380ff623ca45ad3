//! Human steps waiting for a person, in memory: a run suspends on its step until
//! [`HumanDesk::answer`] supplies output valid against the step's `output.schema`.

use crate::error::LoopError;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::oneshot;

/// A suspended human step.
struct Waiting {
    owner: Option<String>,
    schema: Option<Value>,
    answer: oneshot::Sender<Value>,
}

/// The human steps waiting now, by loop run id (oldest first within a run).
#[derive(Default)]
pub struct HumanDesk {
    waiting: Mutex<HashMap<String, Vec<Waiting>>>,
}

impl HumanDesk {
    /// Suspend until a person answers run `run_id`'s step whose answer must match `schema`;
    /// the run belongs to API client `owner`.
    pub(crate) fn wait(&self, run_id: &str, owner: Option<String>, schema: Option<Value>) -> oneshot::Receiver<Value> {
        let (answer, rx) = oneshot::channel();
        let mut waiting = self.lock();
        // Steps of runs that went away (a client that disconnected) wait for nobody.
        waiting.retain(|_, queue| {
            queue.retain(|w| !w.answer.is_closed());
            !queue.is_empty()
        });
        waiting.entry(run_id.to_owned()).or_default().push(Waiting { owner, schema, answer });
        rx
    }

    /// Forget a run's suspended steps (it ended).
    pub(crate) fn forget(&self, run_id: &str) {
        self.lock().remove(run_id);
    }

    /// Whether run `run_id` waits for a person.
    pub fn is_waiting(&self, run_id: &str) -> bool {
        self.lock().get(run_id).is_some_and(|q| q.iter().any(|w| !w.answer.is_closed()))
    }

    /// Answer the oldest waiting human step of run `run_id` with `output`, checked against the
    /// step's schema first (an invalid answer leaves the step waiting). `caller` is the API
    /// client answering (`None`: one that sees every run); another client's run is not found.
    pub fn answer(&self, run_id: &str, caller: Option<&str>, output: Value) -> Result<(), LoopError> {
        let mut waiting = self.lock();
        if let Some(queue) = waiting.get_mut(run_id) {
            queue.retain(|w| !w.answer.is_closed());
        }
        let visible = |q: &Vec<Waiting>| {
            q.first().is_some_and(|w| caller.is_none_or(|c| w.owner.as_deref().unwrap_or_default() == c))
        };
        let queue =
            waiting.get_mut(run_id).filter(|q| visible(q)).ok_or_else(|| LoopError::RunNotFound(run_id.to_owned()))?;
        if let Some(schema) = &queue[0].schema {
            let validator = jsonschema::draft202012::new(schema)
                .map_err(|e| LoopError::HumanOutputInvalid(format!("the step's output.schema is invalid: {e}")))?;
            let problems: Vec<String> =
                validator.iter_errors(&output).take(5).map(|e| format!("at `{}`: {e}", e.instance_path())).collect();
            if !problems.is_empty() {
                return Err(LoopError::HumanOutputInvalid(problems.join("; ")));
            }
        }
        let step = queue.remove(0);
        // A run that went away meanwhile drops the answer; that is its own failure, not ours.
        let _ = step.answer.send(output);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Waiting>>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}
