//! Post-turn memory learning (`memory.learning` of an agent): after a turn is committed, a
//! job goes into the durable outbox; an [`Extractor`] turns the job's visible text into
//! proposed items; they become reviewable [`MemoryCandidate`]s, and in `automatic` mode the
//! deterministic [`policy`](Learner::judge) applies those it accepts and leaves the rest pending.
//!
//! Only a committed, successful, top-level chat or channel turn of a trusted user is learnt
//! from, and only its visible text (the user's message and the final answer): never hidden
//! reasoning, tool payloads, loop steps, failed turns or turns waiting on a client tool or an
//! ask-user answer ([`Learner::committed`] decides). Nothing picks an extractor silently: a
//! host that wants learning gives one ([`ModelExtractor`] is the built-in one).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt as _;
use polpo_core::config::agent::Learning;
use polpo_core::config::enums::{LearningMode, LearningSurface};
use polpo_core::message::Message;
use polpo_core::redact::Redactor;
use polpo_llm::{ModelEvent, ModelProvider, ModelRequest, ToolChoice};
use polpo_store::{
    CandidateStatus, Clock, LearningJob, LearningStore, MemoryCandidate, MemoryFilter, MemoryScope, NewMemoryItem,
    ScopeKind, SourceTurn, StoreError,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{Memory, MemoryError};

/// Most visible turn text (user message plus answer) an extractor sees, in characters.
pub const MAX_TURN_TEXT: usize = 64_000;
/// Most candidates one turn proposes.
pub const MAX_CANDIDATES_PER_TURN: usize = 20;
/// Largest content the automatic policy applies, in bytes (bigger ones wait for a person).
pub const MAX_AUTOMATIC_CONTENT: usize = 1000;
/// The revision of the deterministic policy below: part of every job's idempotency key.
pub const POLICY_REVISION: &str = "1";
/// Kinds learnt when `memory.learning.kinds` is not set.
pub const DEFAULT_KINDS: [&str; 4] = ["fact", "preference", "style", "open_thread"];
/// Failed attempts after which a job stays in the outbox untried until the next restart.
pub const MAX_ATTEMPTS: u32 = 5;
/// How long the built-in extractor waits for the model.
const EXTRACTION_TIMEOUT: Duration = Duration::from_secs(60);
/// Most answer bytes read from the model.
const MAX_EXTRACTION_OUTPUT: usize = 64 * 1024;
/// Actor of the policy's audit entries.
const POLICY_ACTOR: &str = "policy";

/// One item an extractor proposes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ProposedItem {
    /// One of the kinds the agent learns.
    pub kind: String,
    /// What to remember.
    pub content: String,
}

/// Why extraction failed (the job stays in the outbox and is retried).
#[derive(Debug, thiserror::Error)]
#[error("memory extraction failed: {0}")]
pub struct ExtractError(pub String);

/// Turns a committed turn's visible text into proposed memory items: the port a host fills.
#[async_trait]
pub trait Extractor: Send + Sync {
    /// Names this extractor's behaviour; a new revision learns from a turn again.
    fn revision(&self) -> &str;

    /// Items worth remembering from `job`, of the `kinds` given only.
    async fn extract(&self, job: &LearningJob, kinds: &[String]) -> Result<Vec<ProposedItem>, ExtractError>;
}

/// The model that extracts for an agent: its own model chain, resolved by the host.
pub type ModelFor = dyn Fn(&str) -> Result<Arc<dyn ModelProvider>, String> + Send + Sync;

/// The built-in extractor: asks the agent's own model for JSON items through a strict
/// `json_schema` response format, bounded in input, output and time.
pub struct ModelExtractor {
    model_for: Arc<ModelFor>,
}

impl ModelExtractor {
    /// Extract with the model `model_for` resolves for each agent.
    pub fn new(model_for: Arc<ModelFor>) -> Self {
        ModelExtractor { model_for }
    }
}

#[async_trait]
impl Extractor for ModelExtractor {
    fn revision(&self) -> &str {
        "model-1"
    }

    async fn extract(&self, job: &LearningJob, kinds: &[String]) -> Result<Vec<ProposedItem>, ExtractError> {
        let provider = (self.model_for)(&job.agent).map_err(ExtractError)?;
        let system = format!(
            "You extract durable memory about the user from one chat turn. Propose only what the user \
             said about themselves or asked to be remembered, never what the assistant claims, and \
             nothing secret. Kinds: {}. Answer in JSON: {{\"items\":[{{\"kind\":…,\"content\":…}}]}}, \
             at most {MAX_CANDIDATES_PER_TURN} items, an empty list when nothing is worth remembering.",
            kinds.join(", ")
        );
        let turn = format!("User: {}\n\nAssistant: {}", job.user_text, job.answer);
        let item = json!({"type": "object", "additionalProperties": false, "required": ["kind", "content"],
            "properties": {"kind": {"type": "string", "enum": kinds}, "content": {"type": "string"}}});
        let schema = json!({"type": "object", "additionalProperties": false, "required": ["items"],
            "properties": {"items": {"type": "array", "items": item}}});
        let request = ModelRequest {
            model: String::new(),
            messages: Arc::new(vec![Message::system(system), Message::user(turn)]),
            tools: Vec::new(),
            tool_choice: ToolChoice::None,
            response_format: Some(
                json!({"type": "json_schema", "json_schema": {"name": "memory_candidates", "strict": true, "schema": schema}}),
            ),
            reasoning: None,
            max_output_tokens: Some(2048),
            temperature: None,
        };
        let text = tokio::time::timeout(EXTRACTION_TIMEOUT, answer_text(provider.as_ref(), request))
            .await
            .map_err(|_| ExtractError("the model did not answer in time".into()))??;
        #[derive(Deserialize)]
        struct Items {
            items: Vec<ProposedItem>,
        }
        let items: Items = serde_json::from_str(text.trim())
            .map_err(|e| ExtractError(format!("the model's answer is not the asked JSON: {e}")))?;
        Ok(items.items)
    }
}

async fn answer_text(provider: &dyn ModelProvider, request: ModelRequest) -> Result<String, ExtractError> {
    let mut stream = provider.stream(request).await.map_err(|e| ExtractError(e.to_string()))?;
    let mut text = String::new();
    while let Some(event) = stream.next().await {
        if let ModelEvent::TextDelta(t) = event.map_err(|e| ExtractError(e.to_string()))? {
            text.push_str(&t);
            if text.len() > MAX_EXTRACTION_OUTPUT {
                return Err(ExtractError("the model's answer is too long".into()));
            }
        }
    }
    Ok(text)
}

/// A turn the runtime committed, as learning sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedTurn {
    /// The agent.
    pub agent: String,
    /// The trusted user (the authenticated caller), `None` when there is none.
    pub user: Option<String>,
    /// Where the turn is stored.
    pub turn: SourceTurn,
    /// The learning surface it came from; `None` for tasks, loops, schedules.
    pub surface: Option<LearningSurface>,
    /// The turn ran as a step of a loop.
    pub nested: bool,
    /// It ended with a final answer (not failed, not handing tool calls back, not asking the
    /// user).
    pub answered: bool,
    /// The user's visible text of this turn.
    pub user_text: String,
    /// The final visible answer.
    pub answer: String,
}

/// What learning says about a turn or a candidate, for the host to publish.
#[derive(Debug, Clone, PartialEq)]
pub enum LearningEvent {
    /// A candidate was created or applied (`memory:candidate`).
    Candidate {
        /// `created` or `applied`.
        action: &'static str,
        /// The candidate after the change.
        candidate: Box<MemoryCandidate>,
    },
    /// Learning could not do its job for a turn (`memory:warning`).
    Warning {
        /// The agent.
        agent: String,
        /// Stable code.
        code: &'static str,
        /// What happened.
        message: String,
    },
}

impl LearningEvent {
    /// The bus event's name and data: ids, kind and status, never the content.
    pub fn to_bus(&self) -> (&'static str, Value) {
        match self {
            LearningEvent::Candidate { action, candidate } => (
                "memory:candidate",
                json!({"action": action, "candidateId": candidate.id, "agent": candidate.agent,
                    "kind": candidate.kind, "status": candidate.status.as_str(), "memoryId": candidate.memory_id,
                    "sessionId": candidate.source_turn.session_id, "runId": candidate.source_turn.run_id}),
            ),
            LearningEvent::Warning { agent, code, message } => {
                ("memory:warning", json!({"agent": agent, "code": code, "message": message}))
            }
        }
    }
}

/// A review decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Accept (and apply) the candidate.
    Approve,
    /// Refuse it for good.
    Reject,
}

/// Reading the current `memory.learning` of an agent (the project may be reloaded).
pub type LearningConfigOf = dyn Fn(&str) -> Option<Learning> + Send + Sync;
/// Where learning events go.
pub type LearningEvents = dyn Fn(LearningEvent) + Send + Sync;

/// Learning over one store: the outbox, extraction, candidates and their review.
#[derive(Clone)]
pub struct Learner {
    store: LearningStore,
    memory: Memory,
    extractor: Arc<dyn Extractor>,
    redactor: Redactor,
    clock: Arc<dyn Clock>,
    config: Arc<LearningConfigOf>,
    events: Arc<LearningEvents>,
}

impl std::fmt::Debug for Learner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Learner").field("extractor", &self.extractor.revision()).finish_non_exhaustive()
    }
}

/// The learning settings of one agent, resolved.
struct Settings {
    mode: LearningMode,
    surfaces: Vec<LearningSurface>,
    kinds: Vec<String>,
}

fn settings(learning: Option<Learning>) -> Option<Settings> {
    let learning = learning?;
    let mode = learning.mode.unwrap_or(LearningMode::Off);
    if mode == LearningMode::Off {
        return None;
    }
    let surfaces = learning.surfaces.unwrap_or_else(|| vec![LearningSurface::Chat]);
    let kinds = match learning.kinds {
        Some(kinds) => kinds.iter().map(|k| k.as_str().to_owned()).collect(),
        None => DEFAULT_KINDS.iter().map(|k| (*k).to_owned()).collect(),
    };
    Some(Settings { mode, surfaces, kinds })
}

impl Learner {
    /// Learning into `memory`, with jobs and candidates in `store`, extracting with
    /// `extractor`; `config` reads an agent's current `memory.learning`, `events` publishes.
    pub fn new(
        store: LearningStore,
        memory: Memory,
        extractor: Arc<dyn Extractor>,
        clock: Arc<dyn Clock>,
        config: Arc<LearningConfigOf>,
        events: Arc<LearningEvents>,
    ) -> Self {
        Learner { store, memory, extractor, redactor: Redactor::new(), clock, config, events }
    }

    /// Cut these secrets out of candidates (the vault's values); a candidate that held one is
    /// never applied without a person.
    pub fn with_redactor(mut self, redactor: Redactor) -> Self {
        self.redactor = redactor;
        self
    }

    /// The candidates and the outbox.
    pub fn store(&self) -> &LearningStore {
        &self.store
    }

    /// Whether `agent` learns at all now (`memory.learning.mode` other than `off`): a host
    /// asks before it gathers a turn's text for [`Learner::committed`].
    pub fn learns(&self, agent: &str) -> bool {
        settings((self.config)(agent)).is_some()
    }

    /// Called once the runtime durably committed `turn`: when the turn is one to learn from,
    /// its job is written to the outbox (durably, before this returns) and returned for the
    /// caller to [`process`](Learner::process). `None`: nothing to learn.
    pub async fn committed(&self, turn: CommittedTurn) -> Result<Option<LearningJob>, MemoryError> {
        let Some(settings) = settings((self.config)(&turn.agent)) else { return Ok(None) };
        let on_surface = turn.surface.is_some_and(|s| settings.surfaces.contains(&s));
        let visible = !turn.answer.trim().is_empty() && !turn.user_text.trim().is_empty();
        if !on_surface || turn.nested || !turn.answered || !visible {
            return Ok(None);
        }
        let Some(user) = turn.user.filter(|u| !u.is_empty()) else {
            self.warn(&turn.agent, "memory_learning_untrusted", "the turn has no authenticated user: nothing learnt");
            return Ok(None);
        };
        // Vault values are cut before the text is kept in the outbox or shown to the extractor.
        let redact = |t: &str| self.redactor.redact_text(t);
        let (user_text, answer) = bounded(&redact(&turn.user_text), &redact(&turn.answer));
        let job = LearningJob {
            id: LearningJob::key(&turn.turn.run_id, self.extractor.revision(), POLICY_REVISION),
            agent: turn.agent,
            user,
            turn: turn.turn,
            user_text,
            answer,
            extractor_revision: self.extractor.revision().to_owned(),
            policy_revision: POLICY_REVISION.to_owned(),
            attempts: 0,
            last_error: None,
            revision: 1,
        };
        Ok(self.store.enqueue(&job).await?.then_some(job))
    }

    /// Process every job left in the outbox (a restart after a crash, a failed attempt):
    /// returns how many were done.
    pub async fn drain(&self) -> usize {
        self.drain_where(|_| true).await
    }

    /// Process again the jobs whose earlier attempts failed (the model was down, say), and
    /// only those: a job never attempted is being extracted right after its turn, and taking
    /// it here too would ask the model twice. A host calls this now and then, so a failed
    /// turn is learnt from without waiting for a restart. Returns how many were done.
    pub async fn retry_failed(&self) -> usize {
        self.drain_where(|job| job.attempts > 0).await
    }

    async fn drain_where(&self, take: impl Fn(&LearningJob) -> bool) -> usize {
        let mut done = 0;
        match self.store.pending(100).await {
            Ok(jobs) => {
                for job in jobs.into_iter().filter(|j| j.attempts < MAX_ATTEMPTS && take(j)) {
                    done += usize::from(self.process(job).await);
                }
            }
            Err(e) => tracing::warn!(error = %e, "the memory learning outbox cannot be read"),
        }
        done
    }

    /// Extract from `job`, store its candidates (the same ids on a retry, so none twice), let
    /// the policy apply what it accepts in `automatic` mode, then take the job out of the
    /// outbox. A failure leaves the job for a later [`drain`](Learner::drain); `true` when done.
    pub async fn process(&self, job: LearningJob) -> bool {
        match self.try_process(&job).await {
            Ok(()) => true,
            Err(e) => {
                self.warn(&job.agent, "memory_learning_failed", &format!("{e}; the turn stays queued"));
                if let Err(e) = self.store.failed(&job, &e).await {
                    tracing::warn!(job = %job.id, error = %e, "a failed learning attempt was not recorded");
                }
                false
            }
        }
    }

    async fn try_process(&self, job: &LearningJob) -> Result<(), String> {
        // The agent may have turned learning off (or been removed) since: the job is dropped.
        let Some(settings) = settings((self.config)(&job.agent)) else {
            self.store.done(&job.id).await.map_err(|e| e.to_string())?;
            return Ok(());
        };
        let proposed = self.extractor.extract(job, &settings.kinds).await.map_err(|e| e.to_string())?;
        let scope = MemoryScope::of(ScopeKind::User, &job.user);
        let mut index = 0;
        for item in proposed.into_iter().take(MAX_CANDIDATES_PER_TURN) {
            let raw = item.content.trim();
            let content = self.redactor.redact_text(raw);
            let secretless = content == raw;
            if !settings.kinds.contains(&item.kind) || content.is_empty() {
                continue;
            }
            let mut candidate = MemoryCandidate {
                id: job.candidate_id(index),
                agent: job.agent.clone(),
                scope: scope.clone(),
                kind: item.kind,
                content: content.chars().take(polpo_store::memory::MAX_MEMORY_CONTENT / 4).collect(),
                source_turn: job.turn.clone(),
                status: CandidateStatus::Pending,
                memory_id: None,
                reviewer: None,
                audit: Vec::new(),
                revision: 0,
                created_at: self.clock.now(),
                updated_at: self.clock.now(),
            };
            index += 1;
            let actor = format!("extractor:{}", job.extractor_revision);
            candidate.audit(self.clock.now(), "proposed", &actor, None);
            let Some(stored) = self.store.propose(&candidate).await.map_err(|e| e.to_string())? else { continue };
            self.publish(LearningEvent::Candidate { action: "created", candidate: Box::new(stored.clone()) });
            if settings.mode == LearningMode::Automatic {
                self.automatic(stored, secretless).await.map_err(|e| e.to_string())?;
            }
        }
        self.store.done(&job.id).await.map_err(|e| e.to_string())?;
        Ok(())
    }

    /// The deterministic policy of `automatic` mode: apply a candidate of an allowed kind
    /// (checked at proposal), small, free of secrets and not a duplicate of an item of its
    /// scope; otherwise leave it pending with the reason in its audit trail.
    async fn automatic(&self, candidate: MemoryCandidate, secretless: bool) -> Result<(), MemoryError> {
        match self.judge(&candidate, secretless).await? {
            None => {
                self.apply(&candidate.agent, &candidate.id, POLICY_ACTOR, Some(candidate.revision)).await?;
            }
            Some(reason) => {
                let mut held = candidate.clone();
                held.audit(self.clock.now(), "policy_held", POLICY_ACTOR, Some(reason));
                self.store.save(&held, candidate.revision).await?;
            }
        }
        Ok(())
    }

    /// Why the policy holds `candidate` for a person, or `None` to apply it.
    async fn judge(&self, candidate: &MemoryCandidate, secretless: bool) -> Result<Option<String>, MemoryError> {
        if !secretless {
            return Ok(Some("it held a secret value (redacted)".into()));
        }
        if candidate.content.len() > MAX_AUTOMATIC_CONTENT {
            return Ok(Some(format!("it is longer than {MAX_AUTOMATIC_CONTENT} bytes")));
        }
        let filter = MemoryFilter { scopes: vec![candidate.scope.clone()], kinds: vec![candidate.kind.clone()] };
        let wanted = normalized(&candidate.content);
        let similar = self.memory.store.search_memory_lexical(&filter, &candidate.content, 20).await?;
        Ok(similar
            .iter()
            .find(|s| normalized(&s.item.content) == wanted)
            .map(|s| format!("it repeats memory item {}", s.item.id)))
    }

    /// Decide `agent`'s candidate `id` as `reviewer` (at `expected_revision` when given):
    /// `approve` applies it at once (its memory item is created), `reject` closes it.
    pub async fn decide(
        &self,
        agent: &str,
        id: &str,
        decision: Decision,
        reviewer: &str,
        reason: Option<String>,
        expected_revision: Option<u64>,
    ) -> Result<MemoryCandidate, MemoryError> {
        let current = self.candidate(agent, id, expected_revision).await?;
        let (status, action) = match decision {
            Decision::Approve => (CandidateStatus::Approved, "approved"),
            Decision::Reject => (CandidateStatus::Rejected, "rejected"),
        };
        let allowed = match decision {
            Decision::Approve => current.status == CandidateStatus::Pending,
            Decision::Reject => matches!(current.status, CandidateStatus::Pending | CandidateStatus::Approved),
        };
        if !allowed {
            return Err(StoreError::Conflict(format!(
                "candidate `{id}` is {} and cannot be {action}",
                current.status.as_str()
            ))
            .into());
        }
        let mut next = current.clone();
        next.status = status;
        next.reviewer = Some(reviewer.to_owned());
        next.audit(self.clock.now(), action, reviewer, reason);
        let saved = self.store.save(&next, current.revision).await?;
        match decision {
            Decision::Approve => Ok(self.apply(agent, id, reviewer, Some(saved.revision)).await?.0),
            Decision::Reject => Ok(saved),
        }
    }

    /// Turn an approved candidate (or, for the policy, a pending one) into a memory item in
    /// its scope; applying again returns the same item. Returns the candidate and the item id.
    pub async fn apply(
        &self,
        agent: &str,
        id: &str,
        actor: &str,
        expected_revision: Option<u64>,
    ) -> Result<(MemoryCandidate, String), MemoryError> {
        let current = self.candidate(agent, id, expected_revision).await?;
        let ready = current.status == CandidateStatus::Approved
            || (actor == POLICY_ACTOR && current.status == CandidateStatus::Pending);
        if current.status == CandidateStatus::Applied {
            let memory_id = current.memory_id.clone().unwrap_or_default();
            return Ok((current, memory_id));
        }
        if !ready {
            return Err(StoreError::Conflict(format!(
                "candidate `{id}` is {}; only an approved candidate is applied",
                current.status.as_str()
            ))
            .into());
        }
        // The item's id comes from the candidate's, so a retried apply finds its item.
        let memory_id = format!("mem-{}", current.id.trim_start_matches("mc-"));
        let new = NewMemoryItem {
            id: Some(memory_id.clone()),
            scope: current.scope.clone(),
            kind: current.kind.clone(),
            content: current.content.clone(),
            source: format!("learning:{}", current.agent),
        };
        match self.memory.create(new).await {
            Ok(written) => {
                for w in written.warnings {
                    self.warn(agent, "memory_learning_embedding", &w.message);
                }
            }
            Err(MemoryError::Store(StoreError::Conflict(_))) => {}
            Err(e) => return Err(e),
        }
        let mut next = current.clone();
        next.status = CandidateStatus::Applied;
        next.memory_id = Some(memory_id.clone());
        if actor == POLICY_ACTOR {
            next.reviewer = Some(POLICY_ACTOR.into());
        }
        next.audit(self.clock.now(), if actor == POLICY_ACTOR { "policy_applied" } else { "applied" }, actor, None);
        let saved = self.store.save(&next, current.revision).await?;
        self.publish(LearningEvent::Candidate { action: "applied", candidate: Box::new(saved.clone()) });
        Ok((saved, memory_id))
    }

    /// `agent`'s candidate `id`, checked against `expected_revision`.
    pub async fn candidate(
        &self,
        agent: &str,
        id: &str,
        expected_revision: Option<u64>,
    ) -> Result<MemoryCandidate, MemoryError> {
        let current = self
            .store
            .get(agent, id)
            .await?
            .ok_or_else(|| StoreError::NotFound { kind: "memory candidate", id: id.to_owned() })?;
        if let Some(expected) = expected_revision
            && expected != current.revision
        {
            return Err(StoreError::Conflict(format!(
                "candidate `{id}` is at revision {}, not {expected}",
                current.revision
            ))
            .into());
        }
        Ok(current)
    }

    fn warn(&self, agent: &str, code: &'static str, message: &str) {
        tracing::warn!(agent, code, "{message}");
        self.publish(LearningEvent::Warning { agent: agent.to_owned(), code, message: message.to_owned() });
    }

    fn publish(&self, event: LearningEvent) {
        (self.events)(event);
    }
}

/// The visible text of a turn, cut to [`MAX_TURN_TEXT`] characters together (the user's
/// message keeps at least half).
fn bounded(user_text: &str, answer: &str) -> (String, String) {
    let user: String = user_text.chars().take(MAX_TURN_TEXT / 2).collect();
    let left = MAX_TURN_TEXT - user.chars().count();
    (user, answer.chars().take(left).collect())
}

/// Content compared for duplicates: lower case, words separated by one space.
fn normalized(content: &str) -> String {
    content.split_whitespace().map(str::to_lowercase).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_text_is_bounded_and_duplicates_compare_loosely() {
        let (u, a) = bounded(&"u".repeat(MAX_TURN_TEXT), &"a".repeat(MAX_TURN_TEXT));
        assert_eq!((u.chars().count(), a.chars().count()), (MAX_TURN_TEXT / 2, MAX_TURN_TEXT / 2));
        let (u, a) = bounded("hi", &"a".repeat(MAX_TURN_TEXT));
        assert_eq!(u.len() + a.len(), MAX_TURN_TEXT);
        assert_eq!(normalized("  Prefers   TABS\n"), "prefers tabs");
    }

    #[test]
    fn learning_is_off_unless_a_mode_says_otherwise() {
        assert!(settings(None).is_none());
        assert!(settings(Some(Learning::default())).is_none());
        let on = settings(Some(Learning { mode: Some(LearningMode::Suggest), ..Default::default() })).unwrap();
        assert_eq!(on.surfaces, vec![LearningSurface::Chat]);
        assert_eq!(on.kinds, DEFAULT_KINDS.to_vec());
    }
}
