//! `GET /api/v1/openapi.json`: an OpenAPI 3.1 document of the whole HTTP API, generated from
//! [`ROUTES`], one row per operation.
//!
//! Adding a route means adding its `.route(…)` in `app.rs` and one row here; a test reads every
//! `.route(…)` in this crate's sources and fails when one has no row, and an HTTP test requests
//! every row and fails when the router does not know it. So the document and the router cannot
//! drift apart silently.

use axum::Json;
use serde_json::{Map, Value, json};

/// Management routes are mounted under both prefixes, as the reference (`/api/v1`, local) and
/// Polpo Cloud (`/v1`) do.
pub const BOTH: &[&str] = &["/api/v1", "/v1"];
/// The OpenAI-compatible surface lives under `/v1` only.
pub const V1: &[&str] = &["/v1"];
/// The dashboard's static files live at the root, outside the API prefixes.
pub const ROOT: &[&str] = &[""];

/// What a successful response body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// The component schema, bare (OpenAI wire, hook capabilities).
    Raw(&'static str),
    /// `{ok:true, data: <schema>}`, the management envelope.
    Envelope(&'static str),
    /// A server-sent event stream or JSON, depending on the request's `stream` flag.
    JsonOrSse(&'static str),
    /// A server-sent event stream only.
    Sse,
    /// A static file of this media type (the dashboard).
    Asset(&'static str),
}

/// One operation of the API.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// Lower-case HTTP method, as OpenAPI spells it.
    pub method: &'static str,
    /// Prefixes the route is mounted under.
    pub prefixes: &'static [&'static str],
    /// Paths under each prefix (axum syntax, `{param}`); the first is canonical, the others aliases.
    pub paths: &'static [&'static str],
    /// Unique id of the canonical operation.
    pub id: &'static str,
    /// Group in the document.
    pub tag: &'static str,
    /// One line.
    pub summary: &'static str,
    /// `false` for the few routes that need no API key.
    pub auth: bool,
    /// Query parameters: name and description.
    pub query: &'static [(&'static str, &'static str)],
    /// Request body schema, if any.
    pub request: Option<&'static str>,
    /// Success status.
    pub status: u16,
    /// Success body.
    pub response: Body,
}

const fn op(
    method: &'static str,
    prefixes: &'static [&'static str],
    paths: &'static [&'static str],
    id: &'static str,
    tag: &'static str,
    summary: &'static str,
) -> Route {
    Route {
        method,
        prefixes,
        paths,
        id,
        tag,
        summary,
        auth: true,
        query: &[],
        request: None,
        status: 200,
        response: Body::Raw("Object"),
    }
}

impl Route {
    const fn open(self) -> Self {
        Self { auth: false, ..self }
    }
    const fn query(self, query: &'static [(&'static str, &'static str)]) -> Self {
        Self { query, ..self }
    }
    const fn request(self, schema: &'static str) -> Self {
        Self { request: Some(schema), ..self }
    }
    const fn returns(self, status: u16, response: Body) -> Self {
        Self { status, response, ..self }
    }

    /// Every concrete path of this operation (prefix × path).
    pub fn full_paths(&self) -> impl Iterator<Item = String> + '_ {
        self.prefixes.iter().flat_map(move |p| self.paths.iter().map(move |path| format!("{p}{path}")))
    }
}

const AGENTS: &[&str] = &["/agents"];
const AGENT: &[&str] = &["/agents/{id}"];
const SESSIONS: &[&str] = &["/chat/sessions", "/sessions"];
const SESSION: &[&str] = &["/chat/sessions/{id}", "/sessions/{id}"];
const SESSION_MESSAGES: &[&str] = &["/chat/sessions/{id}/messages", "/sessions/{id}/messages"];
const SESSIONS_IMPORT: &[&str] = &["/chat/sessions/import", "/sessions/import"];
const TEAMS: &[&str] = &["/agents/teams"];
const TEAM: &[&str] = &["/agents/team"];
const TEAM_BY_NAME: &[&str] = &["/agents/teams/{name}"];
const VAULT_ENTRIES: &[&str] = &["/vault/entries"];
const VAULT_ENTRY: &[&str] = &["/vault/entries/{agent}/{service}"];

/// Every route the server mounts.
pub const ROUTES: &[Route] = &[
    op("get", BOTH, &["/health"], "health", "system", "Liveness, version and uptime.").open().returns(200, Body::Envelope("Health")),
    op("post", V1, &["/chat/completions"], "createChatCompletion", "chat", "OpenAI-compatible chat with an agent (`agent` or `model: \"agent/<id>\"`); `stream: true` answers with SSE chunks and `[DONE]`.")
        .request("ChatCompletionRequest")
        .returns(200, Body::JsonOrSse("ChatCompletion")),
    op("get", V1, &["/models"], "listModels", "chat", "Agents (as `agent/<id>` and `<id>`) and model profiles, as OpenAI models.").returns(200, Body::Raw("ModelList")),
    op("get", BOTH, &["/hooks/capabilities"], "hookCapabilities", "system", "The runtime hooks contract this host implements.").returns(200, Body::Raw("Object")),
    op("get", BOTH, &["/openapi.json"], "openapi", "system", "This document.").returns(200, Body::Raw("Object")),
    op("post", ROOT, &["/mcp"], "mcp", "mcp", "MCP (streamable HTTP, JSON-RPC): each agent is a tool `ask_<agent>` taking `prompt` and an optional `sessionId`.").request("Object").returns(200, Body::Raw("Object")),
    op("get", BOTH, &["/events"], "events", "events", "SSE: live runtime events (session, run, tool, task) with ids; `Last-Event-ID` (or `?after=`) resumes.")
        .query(&[("after", "resume after this event id"), ("filter", "event-name globs, comma-separated or repeated")])
        .returns(200, Body::Sse),
    op("get", BOTH, &["/workers"], "listWorkers", "system", "Admin: the servers holding running runs' leases, each with its run count and newest lease expiry.").returns(200, Body::Envelope("Object")),
    op("get", BOTH, &["/runs/{id}"], "getRun", "runs", "A run: status, agent, session, last sequence number; while paused, `pause` (`{code, detail}` of its latest `run.paused`: for an unconfirmed effect the call itself — `tool`, `arguments` with secrets redacted, `key`, `startedAt`).").returns(200, Body::Envelope("Object")),
    op("get", BOTH, &["/runs/{id}/events"], "runEvents", "runs", "SSE: the run's journal after `Last-Event-ID` (or `?after=N`), then live, until the run completes, fails or is cancelled (open through a pause and its reconciliation).")
        .query(&[("after", "resume after this sequence number")])
        .returns(200, Body::Sse),
    op("post", BOTH, &["/runs/{id}/steer"], "steerRun", "runs", "Add information to a running run, or queue a follow-up.").request("Object").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/runs/{id}/abort"], "abortRun", "runs", "Cancel the run's model call and tools.").request("Object").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/runs/{id}/reconcile"], "reconcileRun", "runs", "Decide an effect a crash left unconfirmed and resume the paused run: `{key, outcome, result?}` with `applied` (it happened; `result` is what the model sees), `not_applied` (it did not: the call runs now, once, under the same effect key, through policy, hooks and schema) or `skip` (do not run it; the model is told).")
        .request("Object")
        .returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/loop-runs/{id}/human"], "answerLoopHuman", "loops", "Answer a Project Loop run's waiting human step with `{output}` (valid against the step's `output.schema`); the run goes on. 404 `loop_run_not_found` when no step of that run waits.")
        .request("Object")
        .returns(200, Body::Envelope("Object")),
    op("get", BOTH, &["/loop-runs"], "listLoopRuns", "loops", "Stored Project Loop runs, newest first (`{loopRuns, nextCursor}`), without context and trace; a client key sees its own.")
        .query(&[("status", "running, awaiting_human, awaiting_approval, approval_approved, approval_rejected, completed, failed or cancelled"), ("limit", "1..=200, default 50"), ("cursor", "the previous page's `nextCursor`")])
        .returns(200, Body::Envelope("Object")),
    op("get", BOTH, &["/loop-runs/{id}"], "getLoopRun", "loops", "A stored loop run: status, last checkpoint (context, frontier, while counters), trace, output or error, agent-step runs, revision.").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/loop-runs/{id}/cancel"], "cancelLoopRun", "loops", "Stop a loop run wherever it runs and store it `cancelled`; 409 `loop_run_finished` when it already ended.").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/loop-runs/{id}/reconcile"], "reconcileLoopRun", "loops", "Settle the effect a run stopped `effect_unconfirmed` on and resume it from its last checkpoint (202): `{key, outcome, result?}`, the key from its `loop.error` event (`data.effect.key`), `applied` (it happened; `result` is the step's output) or `not_applied` (the step runs it now, once, under the same key); 409 `loop_run_not_resumable` otherwise.").request("Object").returns(202, Body::Envelope("Object")),
    op("get", BOTH, &["/loops"], "listLoops", "loops", "The served loops: `[{id, name, label, description, source: json|ts, revision}]`.").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/loops"], "createLoop", "loops", "Create `.polpo/loops/<name>.json` from the canonical config (admin key); 400 `invalid_config` with JSON pointers, 409 `already_exists`.")
        .request("Object")
        .returns(201, Body::Envelope("Object")),
    op("get", BOTH, &["/loops/{id}"], "getLoop", "loops", "A loop's canonical config, source and revision; 404 `loop_not_found`.").returns(200, Body::Envelope("Object")),
    op("put", BOTH, &["/loops/{id}"], "replaceLoop", "loops", "Replace a JSON loop's config (admin key); send `expectedRevision` to get 409 `conflict` instead of overwriting a concurrent edit; 409 `loop_read_only` for a `.ts` loop.")
        .request("Object")
        .returns(200, Body::Envelope("Object")),
    op("delete", BOTH, &["/loops/{id}"], "deleteLoop", "loops", "Delete a JSON loop (admin key; `?expectedRevision=`); 409 `loop_in_use` while an agent assigns it.").returns(200, Body::Envelope("Removed")),
    op("get", BOTH, &["/schedules"], "listSchedules", "schedules", "The project's schedules with status, revision and next occurrences (in each schedule's time zone), then the schedules of missions waiting `scheduled` or `recurring` (`mission-<id>`, surface `legacy_mission`).").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/schedules"], "createSchedule", "schedules", "Create `.polpo/schedules/<id>.json` from `{id, timing, invocation, …}` (v2; a legacy mission-shaped body is written as its v2 translation with a `legacy_schedule` warning) at revision 1; 400 `invalid_config` with pointers, 409 `already_exists`.").request("Object").returns(201, Body::Envelope("Object")),
    op("get", BOTH, &["/schedules/{id}"], "getSchedule", "schedules", "A schedule; 404 `schedule_not_found`.").returns(200, Body::Envelope("Object")),
    op("patch", BOTH, &["/schedules/{id}"], "patchSchedule", "schedules", "JSON merge patch onto the v2 definition (`null` removes), written at the next revision; `expectedRevision` (or `If-Match`) other than the file's is 409 `conflict`.").request("Object").returns(200, Body::Envelope("Object")),
    op("delete", BOTH, &["/schedules/{id}"], "deleteSchedule", "schedules", "Remove the schedule's file (`{deleted, id}`); `?expectedRevision=` (or `If-Match`) other than the file's is 409 `conflict`; its runs stay.").query(&[("expectedRevision", "the revision read")]).returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/schedules/{id}/pause"], "pauseSchedule", "schedules", "Write `status: paused` and the next revision to the schedule's file; `{expectedRevision}` other than the file's is 409 `conflict`.").request("Object").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/schedules/{id}/resume"], "resumeSchedule", "schedules", "Write `status: active`, as pause.").request("Object").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/schedules/{id}/trigger"], "triggerSchedule", "schedules", "Fire now, once per `{idempotencyKey}`: the same key answers the first trigger's schedule-run.").request("Object").returns(200, Body::Envelope("Object")),
    op("get", BOTH, &["/schedules/{id}/runs"], "listScheduleRuns", "schedules", "The schedule's runs newest first (`{runs, nextCursor}`): scheduledFor, firedAt, status, runId / taskId / loopRunId / result, error.")
        .query(&[("limit", "1..=1000, default 50"), ("cursor", "the previous page's `nextCursor`")])
        .returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/loop-runs/{id}/approve"], "approveLoopRun", "approvals", "Approve the gate the run waits on (`{note?}`; the reviewer is the key): the run becomes `approval_approved`.").request("Object").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/loop-runs/{id}/reject"], "rejectLoopRun", "approvals", "Reject the gate the run waits on (`{feedback}` required): the run ends `approval_rejected`.").request("Object").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/loop-runs/{id}/resume"], "resumeLoopRun", "approvals", "Continue an `approval_approved` run from its last checkpoint past the approved gate; completed steps are not run again (202).").returns(202, Body::Envelope("Object")),
    op("get", BOTH, &["/approvals"], "listApprovals", "approvals", "Approval requests of loop gates, newest first (`{approvals, nextCursor}`).")
        .query(&[("status", "pending, approved or rejected"), ("limit", "1..=200, default 50"), ("cursor", "the previous page's `nextCursor`")])
        .returns(200, Body::Envelope("Object")),
    op("get", BOTH, &["/approvals/{id}"], "getApproval", "approvals", "An approval request: run, gate (rule, point, step), message, context, decision.").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/approvals/{id}/approve"], "approveApproval", "approvals", "Approve (`{note?}`); the run becomes `approval_approved`, ready for `POST /loop-runs/{id}/resume`.").request("Object").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/approvals/{id}/reject"], "rejectApproval", "approvals", "Reject (`{feedback}` required); the run ends `approval_rejected`.").request("Object").returns(200, Body::Envelope("Object")),
    op("get", BOTH, AGENTS, "listAgents", "agents", "Agents the runtime serves.").returns(200, Body::Envelope("AgentSummaryList")),
    op("post", BOTH, AGENTS, "createAgent", "agents", "Create `.polpo/agents/<id>/agent.json` and `instructions.md`; 409 `already_exists` when taken.")
        .request("AgentInput")
        .returns(201, Body::Envelope("Agent")),
    op("get", BOTH, AGENT, "getAgent", "agents", "An agent's config, instructions and revision (also the ETag).").returns(200, Body::Envelope("Agent")),
    op("put", BOTH, AGENT, "replaceAgent", "agents", "Replace an agent's config (and instructions); send the revision read (`If-Match` or `revision`) to get 409 `conflict` instead of overwriting a concurrent edit.")
        .request("AgentInput")
        .returns(200, Body::Envelope("Agent")),
    op("patch", BOTH, AGENT, "patchAgent", "agents", "Merge config fields (JSON merge patch; `null` removes) and replace instructions when given; revision-checked like PUT.")
        .request("AgentInput")
        .returns(200, Body::Envelope("Agent")),
    op("delete", BOTH, AGENT, "deleteAgent", "agents", "Delete an agent's folder (revision-checked with `If-Match`).").returns(200, Body::Envelope("Removed")),
    op("get", BOTH, SESSIONS, "listSessions", "sessions", "Chat sessions, newest first, one page at a time.")
        .query(&[
            ("agent", "only this agent's sessions"),
            ("user", "only this user's sessions"),
            ("limit", "page size, 1..=1000 (default 100)"),
            ("cursor", "`nextCursor` of the previous page"),
            ("metadata.<key>", "only sessions whose metadata has this string value (ANDed)"),
        ])
        .returns(200, Body::Envelope("SessionPage")),
    op("get", BOTH, SESSION, "getSession", "sessions", "A session and its messages, oldest first.").returns(200, Body::Envelope("SessionWithMessages")),
    op("get", BOTH, SESSION_MESSAGES, "getSessionMessages", "sessions", "A session and its messages, oldest first.").returns(200, Body::Envelope("SessionWithMessages")),
    op("patch", BOTH, SESSION, "patchSession", "sessions", "Retitle a session (or replace its metadata).").request("SessionPatch").returns(200, Body::Envelope("Session")),
    op("delete", BOTH, SESSION, "deleteSession", "sessions", "Delete a session and its messages.").returns(200, Body::Envelope("Removed")),
    op("post", BOTH, SESSIONS_IMPORT, "importSession", "sessions", "Import a conversation as a new session of `agent`; a chat with `x-session-id` continues from it.")
        .request("SessionImport")
        .returns(201, Body::Envelope("SessionImported")),
    op("get", BOTH, &["/skills"], "listSkills", "skills", "Installed Agent Skills: `{name, description, assignedTo, lock}` each.").returns(200, Body::Envelope("Object")),
    op("get", BOTH, &["/skills/{name}"], "getSkill", "skills", "One skill with its SKILL.md (`content`), `files` and `hash`; 404 `skill_not_found`.").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/skills/{name}/assign"], "assignSkill", "skills", "Add the skill to `{agent}`'s `skills` (admin key; one project edit): `{skill, agent, changed}`.").request("Object").returns(200, Body::Envelope("Object")),
    op("get", BOTH, &["/agents/{agent}/memory/items"], "listMemoryItems", "memory", "Typed memory items the caller reaches for this agent, newest first: `{items, nextCursor}` (`kinds`, `scopeKind`, `scopeSubjectId`, `limit` ≤ 100, opaque `cursor`).").query(&[("kinds", "comma-separated kinds"), ("scopeKind", "project, agent, user or session"), ("scopeSubjectId", "the scope's subject"), ("limit", "page size"), ("cursor", "nextCursor of the previous page")]).returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/agents/{agent}/memory/items"], "createMemoryItem", "memory", "Create an item `{id?, scope: {kind, subjectId?}, kind, content, source?}` → 201 `{item, warnings}`; 409 `conflict` on a taken id.").request("Object").returns(201, Body::Envelope("Object")),
    op("get", BOTH, &["/agents/{agent}/memory/items/{item}"], "getMemoryItem", "memory", "One item `{item}`; 404 `not_found` when missing or out of the caller's reach.").returns(200, Body::Envelope("Object")),
    op("patch", BOTH, &["/agents/{agent}/memory/items/{item}"], "patchMemoryItem", "memory", "Change `{kind?, content?, source?, expectedRevision?}` → `{item, warnings}`; a stale `expectedRevision` is 409 `conflict`.").request("Object").returns(200, Body::Envelope("Object")),
    op("delete", BOTH, &["/agents/{agent}/memory/items/{item}"], "deleteMemoryItem", "memory", "Forget an item (`?expectedRevision=`): `{forgotten, itemId}`.").query(&[("expectedRevision", "the revision read")]).returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/agents/{agent}/memory/search"], "searchMemory", "memory", "Hybrid search `{query, kinds?, scope?, maxResults?}` → `{results: [{item, score, lexicalRank?, semanticRank?}], warnings}` (lexical + semantic fused by reciprocal rank; lexical only, with a warning, when the embedder fails).").request("Object").returns(200, Body::Envelope("Object")),
    op("get", BOTH, &["/agents/{agent}/memory/candidates"], "listMemoryCandidates", "memory", "Memory learning's candidates the caller reaches for this agent, newest first: `{candidates, nextCursor}` (`statuses` pending,approved,rejected,applied; `limit` ≤ 100; opaque `cursor`). 503 `memory_review_unavailable` when learning does not run.").query(&[("statuses", "comma-separated statuses"), ("limit", "page size"), ("cursor", "nextCursor of the previous page")]).returns(200, Body::Envelope("Object")),
    op("get", BOTH, &["/agents/{agent}/memory/candidates/{candidate}"], "getMemoryCandidate", "memory", "One candidate `{candidate}` (proposed kind, scope and content, source turn, status, reviewer, audit); 404 when missing or out of the caller's reach.").returns(200, Body::Envelope("Object")),
    op("get", BOTH, &["/agents/{agent}/memory/candidates/{candidate}/audit"], "getMemoryCandidateAudit", "memory", "A candidate's audit trail `{candidateId, audit: [{at, action, actor, reason?}]}`, oldest first.").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/agents/{agent}/memory/candidates/{candidate}/decision"], "decideMemoryCandidate", "memory", "Review `{decision: approve|reject, reason?, expectedRevision?}` → `{candidate, memoryId}`: approve applies at once (the item is created); the reviewer is the authenticated key, never a body field; 409 `conflict` when already decided or stale.").request("Object").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/agents/{agent}/memory/candidates/{candidate}/apply"], "applyMemoryCandidate", "memory", "Apply an approved candidate `{expectedRevision?}` → `{candidate, memoryId}` (applying again returns the same item).").request("Object").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/skills/{name}/unassign"], "unassignSkill", "skills", "Remove the skill from `{agent}`'s `skills` (admin key): `{skill, agent, changed}`.").request("Object").returns(200, Body::Envelope("Object")),
    op("get", BOTH, TEAMS, "listTeams", "agents", "Teams with their description and members.").returns(200, Body::Envelope("TeamList")),
    op("post", BOTH, TEAMS, "createTeam", "agents", "Create `.polpo/teams/<name>.json`; 409 `already_exists` when taken.").request("TeamInput").returns(201, Body::Envelope("Team")),
    op("get", BOTH, TEAM, "getTeam", "agents", "One team; 404 `team_not_found`.").query(&[("name", "the team")]).returns(200, Body::Envelope("Team")),
    op("patch", BOTH, TEAM, "renameTeam", "agents", "Rename a team (`{oldName, name}`); its members follow; 409 `already_exists` rather than overwrite another team.")
        .request("TeamRename")
        .returns(200, Body::Envelope("Team")),
    op("delete", BOTH, TEAM_BY_NAME, "deleteTeam", "agents", "Delete a team's file; `409 team_not_empty` while agents still name it.").returns(200, Body::Envelope("Removed")),
    op("get", BOTH, VAULT_ENTRIES, "listVaultEntries", "vault", "Every vault entry's metadata (`{agent, service, type, label, keys}`), never a value; 503 `vault_key_missing` without a key.").returns(200, Body::Envelope("Object")),
    op("get", BOTH, &["/vault/entries/{agent}"], "listAgentVaultEntries", "vault", "One agent's vault entries' metadata.").returns(200, Body::Envelope("Object")),
    op("post", BOTH, VAULT_ENTRIES, "setVaultEntry", "vault", "Add or replace `{agent, service, type, label?, credentials}` (admin key); answers the metadata only.").request("Object").returns(201, Body::Envelope("Object")),
    op("patch", BOTH, VAULT_ENTRY, "patchVaultEntry", "vault", "Change an entry's type or label and merge credentials (admin key); 404 `vault_entry_not_found`.").request("Object").returns(200, Body::Envelope("Object")),
    op("delete", BOTH, VAULT_ENTRY, "deleteVaultEntry", "vault", "Remove an entry (admin key): `{removed}`.").returns(200, Body::Envelope("Removed")),
    op("get", BOTH, &["/tasks"], "listTasks", "tasks", "Tasks, newest first (`{tasks, nextCursor}`).")
        .query(&[("status", "draft, pending, awaiting_approval, assigned, in_progress, review, done or failed"), ("missionId", "only this mission's tasks"), ("limit", "1..=1000"), ("cursor", "the previous page's `nextCursor`")])
        .returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/tasks"], "createTask", "tasks", "Create a task `{title, description, assignTo, dependsOn?, expectations?, metrics?, maxRetries?, retryPolicy?, maxDuration?, sideEffects?, draft?}`; pending tasks run as soon as their dependencies are done. 409 `conflict` when an unfinished task has the title.").request("Object").returns(201, Body::Envelope("Object")),
    op("get", BOTH, &["/tasks/{id}"], "getTask", "tasks", "A task with its result and assessment, and `runId` (the run of its latest attempt) once a run started; 404 `not_found`.").returns(200, Body::Envelope("Object")),
    op("patch", BOTH, &["/tasks/{id}"], "patchTask", "tasks", "Edit a task that is not running (description, assignTo, expectations, metrics, maxRetries, maxDuration, priority, sideEffects, deadline).").request("Object").returns(200, Body::Envelope("Object")),
    op("delete", BOTH, &["/tasks/{id}"], "deleteTask", "tasks", "Delete a task for good (`{removed}`; event `task:removed`). 409 `conflict` while it is being worked on (kill it first) or while other tasks depend on it; 404 `not_found`.").returns(200, Body::Envelope("Removed")),
    op("post", BOTH, &["/tasks/{id}/queue"], "queueTask", "tasks", "draft → pending (`{queued, task}`); 409 `invalid_transition` otherwise.").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/tasks/{id}/retry"], "retryTask", "tasks", "failed → pending (`{retried, task}`).").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/tasks/{id}/kill"], "killTask", "tasks", "Abort the task's run and fail it (`{killed}`).").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/tasks/{id}/reassess"], "reassessTask", "tasks", "Assess a done or failed task again on the answer it kept (`{reassessed, task}`); the verdict decides done or failed, the earlier assessment moves to `assessmentHistory`.").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/tasks/{id}/approve"], "approveTask", "tasks", "A task awaiting approval runs again (`{approved, task}`).").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/tasks/{id}/reject"], "rejectTask", "tasks", "A task awaiting approval fails (`{rejected, task}`).").returns(200, Body::Envelope("Object")),
    op("get", BOTH, &["/missions"], "listMissions", "missions", "Missions, newest first (`{missions, nextCursor}`).")
        .query(&[("status", "draft, scheduled, recurring, active, paused, completed, failed or cancelled"), ("limit", "1..=1000"), ("cursor", "the previous page's `nextCursor`")])
        .returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/missions"], "createMission", "missions", "Create a draft mission `{name, data: {tasks: [{title, description, assignTo, dependsOn: [titles]…}], checkpoints?, delays?}, qualityThreshold?}`; `qualityGates [{name, afterTasks, blocksTasks, minScore?, requireAllPassed?, condition?}]` (condition in the loop guard language over avgScore, lowestScore, allPassed, passedCount, failedCount, taskCount); `schedule?` (an ISO-8601 instant: `scheduled`, runs once; a cron expression in UTC: `recurring`, a fresh run of its tasks at each occurrence until `endDate?`) is fired by the scheduler once across servers; one that cannot fire is 400 `invalid_request` with `problems [{code: invalid_time|invalid_cron|schedule_never_fires|schedule_in_past, pointer: /schedule}]`.").request("Object").returns(201, Body::Envelope("Object")),
    op("get", BOTH, &["/missions/{id}"], "getMission", "missions", "A mission with its progress (`data.progress`); with a schedule its `scheduleId` (`mission-<id>`, whose runs `/schedules/{id}/runs` lists) and, while it waits, `nextOccurrenceAt`.").returns(200, Body::Envelope("Object")),
    op("patch", BOTH, &["/missions/{id}"], "patchMission", "missions", "Set `{schedule?, endDate?}` (absent or null clears): a draft given a schedule waits `scheduled`/`recurring`; a waiting mission may move its schedule but keep its kind (else 409 `invalid_transition`); a schedule that cannot fire is 400 with `problems` pointed at `/schedule`.").request("Object").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/missions/{id}/execute"], "executeMission", "missions", "Create the plan's tasks and make the mission active.").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/missions/{id}/pause"], "pauseMission", "missions", "Pause an active mission: no new task starts.").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/missions/{id}/resume"], "resumeMission", "missions", "Resume a paused mission (`{retryFailed?}` queues its failed tasks again).").request("Object").returns(200, Body::Envelope("Object")),
    op("post", BOTH, &["/missions/{id}/abort"], "abortMission", "missions", "Cancel a mission; its running tasks are killed.").returns(200, Body::Envelope("Object")),
    op("get", BOTH, &["/missions/{id}/report"], "missionReport", "missions", "The MissionReport of its current run: each task's status, duration, score, files and outcomes, allPassed, avgScore, filesCreated, filesEdited, outcomes.").returns(200, Body::Envelope("Object")),
    op("get", ROOT, &["/", "/dashboard"], "dashboard", "dashboard", "The web dashboard page; it holds no data (it calls this API with the key the user enters), so it needs no key.")
        .open()
        .returns(200, Body::Asset("text/html")),
    op("get", ROOT, &["/dashboard/{name}"], "dashboardScript", "dashboard", "One of the dashboard's plain scripts, loaded by the page in order: `core.js`, `work.js`, `loops.js`, `app.js`; 404 for any other name.").open().returns(200, Body::Asset("text/javascript")),
    op("get", ROOT, &["/dashboard/app.css"], "dashboardStyle", "dashboard", "The dashboard's style.").open().returns(200, Body::Asset("text/css")),
];

/// `GET /api/v1/openapi.json`.
pub async fn openapi() -> Json<Value> {
    Json(document())
}

/// The OpenAPI 3.1 document for [`ROUTES`].
pub fn document() -> Value {
    let mut paths = Map::new();
    for route in ROUTES {
        for (n, path) in route.full_paths().enumerate() {
            let item = paths.entry(path.clone()).or_insert_with(|| json!({}));
            item[route.method] = operation(route, &path, n == 0);
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Polpo", "version": env!("CARGO_PKG_VERSION"), "description": "Polpo agent runtime: OpenAI-compatible chat completions and the management API. Management routes answer `{ok:true, data}` or `{ok:false, error, code}`."},
        "servers": [{"url": "/"}],
        "security": [{"bearerAuth": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer", "description": "An API key (`POLPO_API_KEY` or `settings.apiKeys`); `X-API-Key: <key>` is accepted too."}
            },
            "schemas": schemas(),
        },
    })
}

fn operation(route: &Route, path: &str, canonical: bool) -> Value {
    let mut parameters: Vec<Value> = path
        .split('/')
        .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
        .collect();
    parameters.extend(route.query.iter().map(|(name, description)| json!({"name": name, "in": "query", "required": false, "description": description, "schema": {"type": "string"}})));
    let schema = |name: &str| json!({"$ref": format!("#/components/schemas/{name}")});
    let content = match route.response {
        Body::Raw(s) => json!({"application/json": {"schema": schema(s)}}),
        Body::Envelope(s) => {
            json!({"application/json": {"schema": {"type": "object", "required": ["ok", "data"], "properties": {"ok": {"const": true}, "data": schema(s)}}}})
        }
        Body::Sse => json!({"text/event-stream": {"schema": {"type": "string"}}}),
        Body::JsonOrSse(s) => {
            json!({"application/json": {"schema": schema(s)}, "text/event-stream": {"schema": {"type": "string"}}})
        }
        Body::Asset(media) => json!({media: {"schema": {"type": "string"}}}),
    };
    let error = if route.prefixes == V1 { "OpenAIError" } else { "RestError" };
    let mut responses = Map::new();
    responses.insert(route.status.to_string(), json!({"description": "success", "content": content}));
    responses.insert("default".into(), json!({"description": "error, with a stable snake_case code", "content": {"application/json": {"schema": schema(error)}}}));
    let mut op =
        json!({"tags": [route.tag], "summary": route.summary, "parameters": parameters, "responses": responses});
    if canonical {
        op["operationId"] = json!(route.id);
    } else {
        op["x-polpo-alias-of"] = json!(route.id);
    }
    if let Some(r) = route.request {
        op["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": schema(r)}}});
    }
    if !route.auth {
        op["security"] = json!([]);
    }
    op
}

fn schemas() -> Value {
    let string = json!({"type": "string"});
    let object = json!({"type": "object", "additionalProperties": true});
    json!({
        "Object": object,
        "RestError": {"type": "object", "required": ["ok", "error"], "properties": {"ok": {"const": false}, "error": string, "code": string, "problems": {"type": "array", "items": {"$ref": "#/components/schemas/Problem"}}}},
        "OpenAIError": {"type": "object", "required": ["error"], "properties": {"error": {"type": "object", "properties": {"message": string, "type": string, "code": string}}}},
        "Problem": {"type": "object", "required": ["code", "message"], "properties": {"code": string, "message": string, "file": string, "pointer": string, "line": {"type": "integer"}, "column": {"type": "integer"}}},
        "Health": {"type": "object", "properties": {"status": string, "version": string, "uptime": {"type": "integer", "description": "seconds"},
            "store": {"type": "object", "properties": {"kind": string, "ok": {"type": "boolean"}}},
            "worker": {"type": "object", "properties": {"id": string, "leases": {"type": "integer"}}}}},
        "ChatCompletionRequest": {"type": "object", "required": ["messages"], "additionalProperties": true, "properties": {
            "agent": string, "model": string, "messages": {"type": "array", "items": object}, "stream": {"type": "boolean"},
            "tools": {"type": "array", "items": object}, "tool_choice": {}, "parallel_tool_calls": {"type": "boolean"},
            "response_format": object, "metadata": {"type": "object", "additionalProperties": string}, "user": string, "polpo": object,
            "loop": {"type": "string", "description": "run this Project Loop (one of the agent's `assignedLoops`; without it, an agent's `defaultLoop` runs)"}}},
        "ChatCompletion": {"type": "object", "properties": {"id": string, "object": {"const": "chat.completion"}, "created": {"type": "integer"}, "model": string, "choices": {"type": "array", "items": object}, "usage": object,
            "loop_run_id": {"type": "string", "description": "a loop chat's run (`looprun-…`)"},
            "loop_trace": {"type": "array", "items": object, "description": "a loop chat's trace events, in order (streamed as `loop_trace: [event]` chunks)"}}},
        "ModelList": {"type": "object", "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": {"type": "object", "properties": {"id": string, "object": {"const": "model"}, "owned_by": string}}}}},
        "AgentConfig": {"type": "object", "description": "agent.json (see `polpo validate`).", "additionalProperties": true},
        "AgentInput": {"type": "object", "properties": {
            "id": {"type": "string", "description": "create only; also accepted as `name`"},
            "config": {"$ref": "#/components/schemas/AgentConfig"},
            "instructions": {"type": "string", "description": "instructions.md; also accepted as `systemPrompt`"},
            "revision": {"type": "string", "description": "the revision read (or send `If-Match`)"}},
            "description": "Config fields may also be given at the top level instead of under `config`."},
        "Agent": {"type": "object", "properties": {"id": string, "config": {"$ref": "#/components/schemas/AgentConfig"}, "instructions": string, "revision": string, "file": string}},
        "AgentSummaryList": {"type": "array", "items": {"type": "object", "properties": {"id": string, "config": {"$ref": "#/components/schemas/AgentConfig"}, "file": string}}},
        "Removed": {"type": "object", "properties": {"removed": {"const": true}}},
        "Session": {"type": "object", "properties": {"id": string, "agent": string, "title": string, "user": string, "metadata": object,
            "createdAt": {"type": "string", "format": "date-time"}, "updatedAt": {"type": "string", "format": "date-time"},
            "messageCount": {"type": "integer"}, "revision": {"type": "integer"}}},
        "SessionPage": {"type": "object", "properties": {"sessions": {"type": "array", "items": {"$ref": "#/components/schemas/Session"}}, "nextCursor": {"type": ["string", "null"]}}},
        "Message": {"type": "object", "additionalProperties": true, "properties": {"id": string, "seq": {"type": "integer"}, "ts": string, "role": string, "content": {}}},
        "SessionWithMessages": {"type": "object", "properties": {"session": {"$ref": "#/components/schemas/Session"}, "messages": {"type": "array", "items": {"$ref": "#/components/schemas/Message"}}}},
        "SessionPatch": {"type": "object", "properties": {"title": string, "metadata": object, "revision": {"type": "integer"}}},
        "SessionImport": {"type": "object", "required": ["agent", "messages"], "properties": {"title": string, "agent": string, "messages": {"type": "array", "items": {"type": "object", "required": ["role"], "properties": {
            "role": {"enum": ["system", "user", "assistant", "tool"]}, "content": {}, "toolCallId": string, "name": string,
            "toolCalls": {"type": "array", "items": {"type": "object", "required": ["id", "name"], "properties": {"id": string, "name": string, "arguments": {}}}}}}}}},
        "SessionImported": {"type": "object", "properties": {"sessionId": string, "imported": {"type": "integer"}}},
        "TeamInput": {"type": "object", "required": ["name"], "properties": {"name": string, "description": string}},
        "TeamRename": {"type": "object", "required": ["oldName", "name"], "properties": {"oldName": string, "name": string}},
        "Team": {"type": "object", "properties": {"name": string, "description": {"type": ["string", "null"]}, "members": {"type": "array", "items": string}, "file": string}},
        "TeamList": {"type": "array", "items": {"$ref": "#/components/schemas/Team"}},
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

    /// `(method, path)` of every `.route("path", method(..).method(..))` in `source`.
    fn registered(source: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for chunk in source.split(".route(").skip(1) {
            let Some(path) = chunk.strip_prefix('"').and_then(|r| r.split('"').next()) else { continue };
            // The call's arguments end at the parenthesis that closes `.route(`.
            let mut depth = 1;
            let end = chunk
                .char_indices()
                .find(|(_, c)| {
                    depth += match c {
                        '(' => 1,
                        ')' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(chunk.len(), |(i, _)| i);
            let args = &chunk[..end];
            for m in METHODS {
                let call = format!("{m}(");
                let bytes = args.as_bytes();
                let mut calls = args.match_indices(&call).filter(|(i, _)| {
                    *i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':')
                });
                if calls.next().is_some() {
                    out.push((m.to_owned(), path.to_owned()));
                }
            }
        }
        out
    }

    fn sources(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("openapi.rs") {
                out.push((path.clone(), std::fs::read_to_string(&path).unwrap()));
            }
        }
    }

    #[test]
    fn every_route_the_router_registers_is_documented() {
        let doc = document();
        let mut files = Vec::new();
        sources(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
        let mut seen = 0;
        for (file, text) in &files {
            for (method, path) in registered(text) {
                seen += 1;
                assert!(
                    doc["paths"][&path][&method].is_object(),
                    "{} registers {method} {path}, which has no row in routes::openapi::ROUTES",
                    file.display()
                );
            }
        }
        assert!(seen >= 10, "the scan found only {seen} routes: is it still reading app.rs?");
    }

    #[test]
    fn the_scan_reads_methods_and_paths() {
        let src = r#"Router::new().route("/a/{id}", get(routes::x::get).patch(routes::x::patch)).route("/b", post(f))"#;
        assert_eq!(
            registered(src),
            [("get".into(), "/a/{id}".into()), ("patch".into(), "/a/{id}".into()), ("post".into(), "/b".into())]
                as [(String, String); 3]
        );
    }

    #[test]
    fn the_document_is_openapi_3_1_with_bearer_auth_and_resolvable_refs() {
        let doc = document();
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(doc["components"]["securitySchemes"]["bearerAuth"]["scheme"], "bearer");
        assert_eq!(doc["paths"]["/api/v1/health"]["get"]["security"], json!([]));
        let text = doc.to_string();
        for r in text.split("#/components/schemas/").skip(1) {
            let name = r.split('"').next().unwrap();
            assert!(doc["components"]["schemas"][name].is_object(), "dangling $ref {name}");
        }
        let ids: Vec<&str> = ROUTES.iter().map(|r| r.id).collect();
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "operation ids must be unique");
    }
}
