//! What the stores keep: sessions and their messages, runs with their event journal,
//! checkpoints and leases, and the effect ledger. Plain data shared by every backend, plus the
//! few rules every backend must apply the same way (ids, titles, reasoning size, run states).

use chrono::{DateTime, Utc};
use polpo_core::message::{Message, Role, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock::IdGen;
use crate::error::StoreError;

/// Longest id (session, run) a store accepts; ids become file names in the file backend.
pub const MAX_ID_LEN: usize = 128;
/// Longest effect key a store accepts.
pub const MAX_EFFECT_KEY_LEN: usize = 512;
/// Reasoning text kept per message; the rest is cut and `reasoning_truncated` is set.
pub const MAX_REASONING_BYTES: usize = 64 * 1024;
/// Largest run-event payload (serialized JSON), as in the reference run stream.
pub const MAX_EVENT_BYTES: usize = 256 * 1024;
/// Most events one `append_events` call takes, as in the reference run stream.
pub const MAX_EVENT_BATCH: usize = 256;
/// Title length (characters) derived from the first user message.
pub const TITLE_CHARS: usize = 60;
/// Longest title a caller may set explicitly (characters).
pub const MAX_TITLE_CHARS: usize = 1000;
/// Largest session metadata object (serialized).
pub const MAX_METADATA_BYTES: usize = 64 * 1024;
/// Largest single message (serialized, attachments included).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Largest checkpoint state (serialized).
pub const MAX_CHECKPOINT_BYTES: usize = 64 * 1024 * 1024;

/// A conversation with one agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// Stable id.
    pub id: String,
    /// The agent the session talks to.
    pub agent: String,
    /// Given at creation, else the first 60 characters of the first user message.
    pub title: String,
    /// The end user the session belongs to, when the caller knows one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Free-form caller metadata (a JSON object).
    #[serde(default)]
    pub metadata: Value,
    /// The API client that created the session (a key id derived from its digest, never the
    /// key), so that another client's key cannot read or continue it; `None` for sessions
    /// created without a key (local-only mode) or before owners were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// When the session was created.
    pub created_at: DateTime<Utc>,
    /// When a message was last appended or the session last changed.
    pub updated_at: DateTime<Utc>,
    /// Number of stored messages.
    pub message_count: u64,
    /// Bumped on every change; pass it back as `expected_revision` to detect a concurrent writer.
    pub revision: u64,
}

/// What a caller supplies to create a session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewSession {
    /// Use this id instead of a generated one (import, idempotent create).
    pub id: Option<String>,
    /// The agent.
    pub agent: String,
    /// An explicit title; `None` derives it from the first user message.
    pub title: Option<String>,
    /// The end user.
    pub user: Option<String>,
    /// Caller metadata; `Null` is stored as `{}`.
    pub metadata: Value,
    /// The API client creating it (see [`Session::owner`]).
    #[serde(default)]
    pub owner: Option<String>,
}

/// A change to a session's title or metadata.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionPatch {
    /// New title.
    pub title: Option<String>,
    /// New metadata (replaces the old object).
    pub metadata: Option<Value>,
}

/// Which sessions to list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionFilter {
    /// Only this agent's sessions.
    pub agent: Option<String>,
    /// Only this user's sessions.
    pub user: Option<String>,
    /// Only sessions this API client owns (see [`Session::owner`]).
    pub owner: Option<String>,
}

/// A message to append to a session: the runtime message plus what the store keeps beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    /// The message itself.
    pub message: Message,
    /// Model reasoning shown alongside (cut to 64 KiB).
    pub reasoning: Option<String>,
    /// The turn this message belongs to.
    pub turn_id: Option<String>,
    /// Tokens the model call that produced this message used.
    pub usage: Option<Usage>,
}

impl NewMessage {
    /// A message with nothing beside it.
    pub fn new(message: Message) -> Self {
        Self { message, reasoning: None, turn_id: None, usage: None }
    }
}

/// A message as stored: the runtime message plus id, position and time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredMessage {
    /// Store-assigned id.
    pub id: String,
    /// The session.
    pub session_id: String,
    /// 1-based position in the session; the order messages were appended in.
    pub seq: u64,
    /// When it was appended.
    pub ts: DateTime<Utc>,
    /// The message (role, content, tool calls …), flattened into this object.
    #[serde(flatten)]
    pub message: Message,
    /// Model reasoning, at most 64 KiB of UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// True when `reasoning` was cut to fit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reasoning_truncated: bool,
    /// The turn this message belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// Token usage of the model call that produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// The result of an append: the session after it, and the messages as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct MessagesAppended {
    /// The session with its new count, revision and (maybe) title.
    pub session: Session,
    /// The appended messages, in order.
    pub messages: Vec<StoredMessage>,
}

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Executing (or waiting to be resumed after a crash).
    Running,
    /// Finished with an answer.
    Completed,
    /// Finished with an error.
    Failed,
    /// Stopped on request.
    Aborted,
    /// Waiting for input (ask-user, approval) and may resume.
    Paused,
}

impl RunStatus {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Aborted => "aborted",
            RunStatus::Paused => "paused",
        }
    }

    /// Parse the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [RunStatus::Running, RunStatus::Completed, RunStatus::Failed, RunStatus::Aborted, RunStatus::Paused]
            .into_iter()
            .find(|st| st.as_str() == s)
    }

    /// Completed, failed and aborted runs never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, RunStatus::Completed | RunStatus::Failed | RunStatus::Aborted)
    }

    /// Check a status change against the run state machine.
    pub fn check_transition(self, to: RunStatus) -> Result<(), StoreError> {
        if self.is_terminal() && self != to {
            return Err(StoreError::InvalidTransition { from: self.as_str().into(), to: to.as_str().into() });
        }
        Ok(())
    }
}

/// One execution of an agent (a chat turn, a task, a loop step).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// Stable id.
    pub id: String,
    /// The agent that runs.
    pub agent: String,
    /// The session the run belongs to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Current status.
    pub status: RunStatus,
    /// When the run was created.
    pub created_at: DateTime<Utc>,
    /// Last status change or event.
    pub updated_at: DateTime<Utc>,
    /// Why it failed, for failed runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Bumped on every status change, for `expected_revision`.
    pub revision: u64,
    /// Sequence number of the last journal event (0 when none).
    pub last_seq: u64,
}

/// What a caller supplies to create a run (it starts `running`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewRun {
    /// Use this id instead of a generated one.
    pub id: Option<String>,
    /// The agent.
    pub agent: String,
    /// The session, if any.
    pub session_id: Option<String>,
}

impl NewRun {
    /// The run as every backend first stores it: `running`, revision 1, no events yet. One
    /// place for this rule so the file and SQL backends cannot drift apart.
    pub fn into_run(self, now: DateTime<Utc>, ids: &dyn IdGen) -> Result<Run, StoreError> {
        Ok(Run {
            id: id_or_new("run", self.id, ids)?,
            agent: self.agent,
            session_id: self.session_id,
            status: RunStatus::Running,
            created_at: now,
            updated_at: now,
            error: None,
            revision: 1,
            last_seq: 0,
        })
    }
}

/// Which runs to list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    /// Only this agent's runs.
    pub agent: Option<String>,
    /// Only runs of this session.
    pub session_id: Option<String>,
    /// Only runs in this status.
    pub status: Option<RunStatus>,
}

/// One entry of a run's append-only journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunEvent {
    /// The run.
    pub run_id: String,
    /// 1-based, gap-free, assigned by the store.
    #[serde(rename = "sequence")]
    pub seq: u64,
    /// Event type (`run.started`, `tool.completed` …).
    #[serde(rename = "type")]
    pub event_type: String,
    /// Event payload.
    pub data: Value,
    /// When it was appended.
    pub created_at: DateTime<Utc>,
}

/// An event to append to a run's journal.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRunEvent {
    /// Event type (`run.started`, `output.text.delta` …).
    pub event_type: String,
    /// Event payload (≤ 256 KiB serialized).
    pub data: Value,
}

impl NewRunEvent {
    /// An event of `event_type` carrying `data`.
    pub fn new(event_type: impl Into<String>, data: Value) -> Self {
        Self { event_type: event_type.into(), data }
    }
}

/// Check a batch of run events (size of the batch and of each event) and return each event's
/// serialized payload.
pub(crate) fn encode_event_batch(events: &[NewRunEvent]) -> Result<Vec<String>, StoreError> {
    if events.is_empty() || events.len() > MAX_EVENT_BATCH {
        return Err(StoreError::Invalid(format!("append 1-{MAX_EVENT_BATCH} events at a time")));
    }
    events.iter().map(|e| encode_event_data(&e.event_type, &e.data)).collect()
}

/// The latest resumable state of a run, taken after journal event `seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// The run.
    pub run_id: String,
    /// The journal position the state reflects.
    pub seq: u64,
    /// The engine's state, opaque to the store.
    pub state: Value,
    /// When it was written.
    pub created_at: DateTime<Utc>,
}

/// Who is executing a run, until when. A crashed owner stops renewing; after expiry another
/// process may take the run over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// The run.
    pub run_id: String,
    /// The holder (process or worker id).
    pub owner: String,
    /// When the lease lapses unless renewed.
    pub expires_at: DateTime<Utc>,
    /// The fencing token: grows with every grant of the run's lease (never with a renewal), so
    /// a holder that lost the lease — paused past its expiry while another process took the
    /// run — is refused by every write that carries its lease ([`RunStore`]'s `*_fenced`
    /// methods), however late it wakes up.
    ///
    /// [`RunStore`]: crate::RunStore
    #[serde(default)]
    pub generation: u64,
}

/// Whether an effect's outcome is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EffectStatus {
    /// Intent recorded, outcome not (the effect may or may not have happened).
    Pending,
    /// Outcome recorded.
    Done,
}

impl EffectStatus {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EffectStatus::Pending => "pending",
            EffectStatus::Done => "done",
        }
    }

    /// Parse the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(EffectStatus::Pending),
            "done" => Some(EffectStatus::Done),
            _ => None,
        }
    }
}

/// One side effect (a write tool call) recorded under an idempotency key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Effect {
    /// The idempotency key (e.g. `run id + tool call id`).
    pub key: String,
    /// Pending or done.
    pub status: EffectStatus,
    /// The recorded outcome, once done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// When the intent was recorded.
    pub created_at: DateTime<Utc>,
    /// When the outcome was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<DateTime<Utc>>,
}

/// What recording an intent tells the caller.
#[derive(Debug, Clone, PartialEq)]
pub enum EffectClaim {
    /// First time this key is seen: the caller may perform the effect, then record its result.
    Fresh,
    /// An earlier attempt recorded its intent but no outcome: it may have happened. Do not
    /// perform it blindly again.
    Pending(Effect),
    /// The effect already happened; here is its outcome. Do not perform it again.
    Done(Effect),
}

/// A revisioned JSON document in a named collection: the storage of tasks, missions,
/// approvals, schedules, loop runs and other state whose typed shape lives in the engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The collection (`tasks`, `missions`, `approvals` …).
    pub collection: String,
    /// The id within the collection.
    pub id: String,
    /// 1 at creation, bumped on every write; pass it back as `expected_revision`.
    pub revision: u64,
    /// The document.
    pub value: Value,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was last written.
    pub updated_at: DateTime<Utc>,
}

/// Largest record value (serialized).
pub const MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;

/// What a write expects of the record's current state.
pub(crate) fn check_record_write(collection: &str, id: &str, value: &Value) -> Result<(), StoreError> {
    check_record_ids(collection, id)?;
    check_size("record", value, MAX_RECORD_BYTES)
}

/// A record write's collection and id, checked before they name a file or a row.
pub(crate) fn check_record_ids(collection: &str, id: &str) -> Result<(), StoreError> {
    validate_id("collection", collection)?;
    validate_id("record", id)
}

/// A record's value as the compact JSON text a SQL store binds, refused as
/// [`check_record_write`] refuses it once it passes [`MAX_RECORD_BYTES`]: one serialisation
/// measures and writes it (not one to measure, then one to write), and stops at the bound.
pub(crate) fn record_text(value: &Value) -> Result<String, StoreError> {
    let mut text = Budget { left: MAX_RECORD_BYTES, out: Vec::new() };
    bounded("record", value, MAX_RECORD_BYTES, &mut text)?;
    // serde_json writes only UTF-8.
    String::from_utf8(text.out).map_err(|e| StoreError::Invalid(e.to_string()))
}

/// The record after a write over `current` (None: it does not exist), honouring
/// `expected_revision` (`Some(0)`: must not exist yet; `Some(n)`: must be at revision n).
pub(crate) fn next_record(
    current: Option<&Record>,
    collection: &str,
    id: &str,
    value: Value,
    expected_revision: Option<u64>,
    now: DateTime<Utc>,
) -> Result<Record, StoreError> {
    let actual = current.map_or(0, |r| r.revision);
    if let Some(expected) = expected_revision
        && expected != actual
    {
        return Err(StoreError::stale_revision("record", &format!("{collection}/{id}"), expected, actual));
    }
    Ok(Record {
        collection: collection.to_owned(),
        id: id.to_owned(),
        revision: actual + 1,
        value,
        created_at: current.map_or(now, |r| r.created_at),
        updated_at: now,
    })
}

/// What importing a record (`polpo db copy`) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportOutcome {
    /// The record was written.
    Imported,
    /// An identical record was already there (a re-run of the copy).
    AlreadyPresent,
}

/// An imported session must be whole: its messages numbered 1..=n and counted in the header.
pub(crate) fn check_session_import(session: &Session, messages: &[StoredMessage]) -> Result<(), StoreError> {
    validate_id("session", &session.id)?;
    let numbered = messages.iter().zip(1u64..).all(|(m, seq)| m.seq == seq && m.session_id == session.id);
    if !numbered || session.message_count != messages.len() as u64 {
        return Err(StoreError::Invalid(format!(
            "session `{}` import is not whole (messages 1..=messageCount)",
            session.id
        )));
    }
    Ok(())
}

/// An imported run must be whole: its events numbered 1..=last_seq.
pub(crate) fn check_run_import(
    run: &Run,
    events: &[RunEvent],
    checkpoint: Option<&Checkpoint>,
) -> Result<(), StoreError> {
    validate_id("run", &run.id)?;
    let numbered = events.iter().zip(1u64..).all(|(e, seq)| e.seq == seq && e.run_id == run.id);
    let checkpoint_ok = checkpoint.is_none_or(|c| c.run_id == run.id);
    if !numbered || run.last_seq != events.len() as u64 || !checkpoint_ok {
        return Err(StoreError::Invalid(format!("run `{}` import is not whole (events 1..=lastSeq)", run.id)));
    }
    Ok(())
}

/// A re-run of an import finds what it wrote; anything else under the same id is a conflict.
pub(crate) fn same_import<T: PartialEq>(
    kind: &str,
    id: &str,
    existing: &T,
    incoming: &T,
) -> Result<ImportOutcome, StoreError> {
    if existing == incoming {
        Ok(ImportOutcome::AlreadyPresent)
    } else {
        Err(StoreError::Conflict(format!("{kind} `{id}` already exists with different content")))
    }
}

/// Check an id before it names a row or a directory: 1–128 of `[A-Za-z0-9._-]`, not starting
/// with a dot.
pub fn validate_id(kind: &str, id: &str) -> Result<(), StoreError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && !id.starts_with('.')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!("{kind} id must be 1-{MAX_ID_LEN} of [A-Za-z0-9._-], not starting with '.'")))
    }
}

/// Check an effect idempotency key.
pub(crate) fn validate_effect_key(key: &str) -> Result<(), StoreError> {
    if key.is_empty() || key.len() > MAX_EFFECT_KEY_LEN {
        return Err(StoreError::Invalid(format!("effect key must be 1-{MAX_EFFECT_KEY_LEN} bytes")));
    }
    Ok(())
}

/// The caller's id, or a fresh one from `ids`.
pub(crate) fn id_or_new(kind: &str, id: Option<String>, ids: &dyn IdGen) -> Result<String, StoreError> {
    let id = id.unwrap_or_else(|| ids.next_id());
    validate_id(kind, &id)?;
    Ok(id)
}

/// A session as created: metadata normalised to an object, no messages yet. Public for a
/// caller that needs the session before it writes it with its first messages
/// (`SessionStore::create_session_with_messages`, given the id this one got).
pub fn session_from_new(new: NewSession, now: DateTime<Utc>, ids: &dyn IdGen) -> Result<Session, StoreError> {
    let id = id_or_new("session", new.id, ids)?;
    let metadata = normalise_metadata(new.metadata)?;
    Ok(Session {
        id,
        agent: new.agent,
        title: new.title.map(check_title).transpose()?.unwrap_or_default(),
        user: new.user,
        metadata,
        owner: new.owner,
        created_at: now,
        updated_at: now,
        message_count: 0,
        revision: 1,
    })
}

/// `Null` → `{}`; anything else must be an object of bounded size.
fn normalise_metadata(metadata: Value) -> Result<Value, StoreError> {
    match metadata {
        Value::Null => Ok(Value::Object(Default::default())),
        Value::Object(_) => {
            check_size("session metadata", &metadata, MAX_METADATA_BYTES)?;
            Ok(metadata)
        }
        _ => Err(StoreError::Invalid("metadata must be a JSON object".into())),
    }
}

fn check_title(title: String) -> Result<String, StoreError> {
    if title.chars().count() > MAX_TITLE_CHARS {
        return Err(StoreError::Invalid(format!("title longer than {MAX_TITLE_CHARS} characters")));
    }
    Ok(title)
}

/// Refuse a value whose JSON form exceeds `limit` bytes.
pub(crate) fn check_size<T: Serialize>(what: &str, value: &T, limit: usize) -> Result<(), StoreError> {
    bounded(what, value, limit, &mut Budget { left: limit, out: std::io::sink() })
}

/// `value` serialised into `budget`, refused once it passes `limit` bytes.
fn bounded<T: Serialize, W: std::io::Write>(
    what: &str,
    value: &T,
    limit: usize,
    budget: &mut Budget<W>,
) -> Result<(), StoreError> {
    match serde_json::to_writer(budget, value) {
        Ok(()) => Ok(()),
        Err(e) if e.is_io() => Err(StoreError::Invalid(format!("{what} exceeds {limit} bytes"))),
        Err(e) => Err(StoreError::Invalid(e.to_string())),
    }
}

/// Bytes a serialisation may still write, and where they go: the size check counts them into
/// a sink instead of building the serialised copy (every write would make one more, of the
/// whole value, just to measure it), a SQL write keeps them as the text it binds; an oversized
/// value stops at the limit rather than being serialised whole.
struct Budget<W> {
    left: usize,
    out: W,
}

impl<W: std::io::Write> std::io::Write for Budget<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.left = self.left.checked_sub(buf.len()).ok_or_else(|| std::io::Error::other("over the size limit"))?;
        self.out.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Apply a title/metadata change to a session.
pub(crate) fn apply_patch(session: &mut Session, patch: SessionPatch, now: DateTime<Utc>) -> Result<(), StoreError> {
    if let Some(title) = patch.title {
        session.title = check_title(title)?;
    }
    if let Some(metadata) = patch.metadata {
        session.metadata = normalise_metadata(metadata)?;
    }
    session.revision += 1;
    session.updated_at = now;
    Ok(())
}

/// Turn appended messages into stored ones, numbering them after `after_seq`, and update the
/// session (count, revision, time, and a title from the first user message if it has none).
pub(crate) fn apply_append(
    session: &mut Session,
    messages: Vec<NewMessage>,
    now: DateTime<Utc>,
    ids: &dyn IdGen,
) -> Result<Vec<StoredMessage>, StoreError> {
    if messages.is_empty() {
        return Err(StoreError::Invalid("no messages to append".into()));
    }
    for m in &messages {
        check_size("message", &m.message, MAX_MESSAGE_BYTES)?;
    }
    let stored: Vec<StoredMessage> = messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let (reasoning, reasoning_truncated) = cap_reasoning(m.reasoning);
            StoredMessage {
                id: format!("msg_{}", ids.next_id()),
                session_id: session.id.clone(),
                seq: session.message_count + i as u64 + 1,
                ts: now,
                message: m.message,
                reasoning,
                reasoning_truncated,
                turn_id: m.turn_id,
                usage: m.usage,
            }
        })
        .collect();
    title_from_first_user(session, &stored);
    session.message_count += stored.len() as u64;
    session.revision += 1;
    session.updated_at = now;
    Ok(stored)
}

/// An untitled session takes its title from the first user message appended to it.
fn title_from_first_user(session: &mut Session, appended: &[StoredMessage]) {
    if session.title.is_empty()
        && let Some(first_user) = appended.iter().find(|m| m.message.role == Role::User)
    {
        session.title = first_user.message.text_content().chars().take(TITLE_CHARS).collect();
    }
}

/// Bring a session header written before `appended` (messages found in its journal beyond the
/// header's count) up to date, as `apply_append` would have. The batches are not recorded, so
/// the revision moves by one per message: never less than the acknowledged revision (a
/// conditional write from before a crash conflicts rather than silently applying), but possibly
/// more.
pub(crate) fn reconcile_appended(session: &mut Session, appended: &[StoredMessage]) {
    title_from_first_user(session, appended);
    session.message_count += appended.len() as u64;
    session.revision += appended.len() as u64;
    if let Some(last) = appended.last() {
        session.updated_at = session.updated_at.max(last.ts);
    }
}

/// Cut reasoning to [`MAX_REASONING_BYTES`] on a character boundary.
fn cap_reasoning(reasoning: Option<String>) -> (Option<String>, bool) {
    match reasoning {
        Some(mut r) if r.len() > MAX_REASONING_BYTES => {
            let mut cut = MAX_REASONING_BYTES;
            while !r.is_char_boundary(cut) {
                cut -= 1;
            }
            r.truncate(cut);
            (Some(r), true)
        }
        other => (other, false),
    }
}

/// Check a run-event payload's size and return its serialized form.
fn encode_event_data(event_type: &str, data: &Value) -> Result<String, StoreError> {
    if event_type.is_empty() || event_type.len() > 128 {
        return Err(StoreError::Invalid("event type must be 1-128 bytes".into()));
    }
    let text = serde_json::to_string(data).map_err(|e| StoreError::Invalid(e.to_string()))?;
    if text.len() > MAX_EVENT_BYTES {
        return Err(StoreError::Invalid(format!("run event payload exceeds {MAX_EVENT_BYTES} bytes")));
    }
    Ok(text)
}

/// Check `expected_revision` against the current one.
pub(crate) fn check_revision(kind: &str, id: &str, expected: Option<u64>, actual: u64) -> Result<(), StoreError> {
    match expected {
        Some(e) if e != actual => Err(StoreError::stale_revision(kind, id, e, actual)),
        _ => Ok(()),
    }
}

/// Recording an effect's result twice is fine when it is the same result.
pub(crate) fn same_result(effect: Effect, result: &Value) -> Result<Effect, StoreError> {
    if effect.result.as_ref() == Some(result) {
        Ok(effect)
    } else {
        Err(StoreError::Conflict(format!("effect `{}` already has a different result", effect.key)))
    }
}

/// A new lease may be granted when nobody holds one, it has expired, or the caller holds it.
pub(crate) fn lease_grantable(current: Option<&Lease>, owner: &str, now: DateTime<Utc>) -> Result<(), StoreError> {
    match current {
        Some(l) if l.owner != owner && l.expires_at > now => {
            Err(StoreError::LeaseHeld { run_id: l.run_id.clone(), owner: l.owner.clone(), expires_at: l.expires_at })
        }
        _ => Ok(()),
    }
}

/// A write carrying `fence` may go ahead only while the run's lease generation is still the
/// fence's: otherwise another process took the run over since (`lease_lost`). No fence: an
/// unfenced write (an operator's, or a store without leases in play).
pub(crate) fn check_fence(run_id: &str, fence: Option<&Lease>, generation: u64) -> Result<(), StoreError> {
    match fence {
        Some(f) if f.run_id != run_id || f.generation != generation => {
            Err(StoreError::LeaseLost { run_id: run_id.to_owned(), owner: f.owner.clone() })
        }
        _ => Ok(()),
    }
}

/// Lease time-to-live as a chrono duration, refusing zero and absurd values.
pub(crate) fn lease_ttl(ttl: std::time::Duration) -> Result<chrono::Duration, StoreError> {
    chrono::Duration::from_std(ttl)
        .ok()
        .filter(|d| *d > chrono::Duration::zero() && *d <= chrono::Duration::days(7))
        .ok_or_else(|| StoreError::Invalid("lease ttl must be between 1 ms and 7 days".into()))
}

/// The first lease of a run created leased (`RunStore::create_leased_run`): generation 1,
/// lapsing `ttl` after the run's creation. Every backend builds it here, so they agree.
pub(crate) fn first_lease(run: &Run, owner: &str, ttl: chrono::Duration) -> Lease {
    Lease { run_id: run.id.clone(), owner: owner.to_owned(), expires_at: run.created_at + ttl, generation: 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_is_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_REASONING_BYTES);
        let (r, cut) = cap_reasoning(Some(long));
        let r = r.unwrap();
        assert!(cut);
        assert!(r.len() <= MAX_REASONING_BYTES && r.len() > MAX_REASONING_BYTES - 4);
        assert_eq!(cap_reasoning(Some("short".into())), (Some("short".into()), false));
    }

    #[test]
    fn a_value_is_refused_one_byte_past_its_size_limit() {
        let value = serde_json::json!({"text": "x".repeat(100)});
        let len = serde_json::to_vec(&value).unwrap().len();
        check_size("record", &value, len).unwrap();
        let err = check_size("record", &value, len - 1).unwrap_err();
        assert_eq!(err.to_string(), format!("invalid input: record exceeds {} bytes", len - 1));
    }

    #[test]
    fn ids_that_could_escape_a_directory_are_refused() {
        for bad in ["", "..", ".hidden", "a/b", "a b", &"x".repeat(129)] {
            assert_eq!(validate_id("run", bad).unwrap_err().code(), "invalid_input", "{bad}");
        }
        validate_id("run", "run_01.A-b").unwrap();
    }

    #[test]
    fn terminal_runs_do_not_come_back() {
        RunStatus::Running.check_transition(RunStatus::Paused).unwrap();
        RunStatus::Paused.check_transition(RunStatus::Running).unwrap();
        assert_eq!(RunStatus::Completed.check_transition(RunStatus::Running).unwrap_err().code(), "invalid_transition");
    }
}
