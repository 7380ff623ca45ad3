//! Every error the server returns, in the OpenAI error envelope with a stable code.
//!
//! One mapping from code to HTTP status, so the same failure has the same status on every
//! route. Provider-side failures (the model's API key is wrong, the provider is down) are
//! reported as 502, never 401/403: those statuses belong to the caller's own credentials.

use crate::wire::error_body;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Declares [`ErrorCode`] from one table: each code with its wire name and HTTP status. A code
/// cannot be added without its status, and `as_str`/`status` are exhaustive matches.
macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident = $code:literal => $status:expr,)+) => {
        /// Every stable code the server answers with, each with its HTTP status.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[$doc])* $variant,)+
        }

        impl ErrorCode {
            /// Every code, in table order.
            pub const ALL: &[Self] = &[$(Self::$variant,)+];

            /// The stable snake_case name clients see.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $code,)+
                }
            }

            /// The HTTP status of this code, the same on every route.
            pub fn status(self) -> StatusCode {
                match self {
                    $(Self::$variant => $status,)+
                }
            }
        }
    };
}

/// 499: the client closed the request (nginx's convention); not a constant of `http`.
const CLIENT_CLOSED: StatusCode = match StatusCode::from_u16(499) {
    Ok(status) => status,
    Err(_) => StatusCode::BAD_REQUEST,
};

error_codes! {
    /// The caller's API key is missing or wrong.
    Unauthorized = "unauthorized" => StatusCode::UNAUTHORIZED,
    /// The caller may not do this (an admin route, the live feed).
    Forbidden = "forbidden" => StatusCode::FORBIDDEN,
    /// A browser origin that is not allowed.
    OriginNotAllowed = "origin_not_allowed" => StatusCode::FORBIDDEN,
    /// The agent's tool policy refuses the request.
    ToolPolicyDenied = "tool_policy_denied" => StatusCode::FORBIDDEN,
    /// A hook stopped the run.
    HookStopped = "hook_stopped" => StatusCode::FORBIDDEN,
    /// A `Host` header this server does not answer.
    HostNotAllowed = "host_not_allowed" => StatusCode::MISDIRECTED_REQUEST,
    /// A body that is not JSON.
    UnsupportedMediaType = "unsupported_media_type" => StatusCode::UNSUPPORTED_MEDIA_TYPE,
    /// A method the route does not take.
    MethodNotAllowed = "method_not_allowed" => StatusCode::METHOD_NOT_ALLOWED,
    /// The request took too long to arrive.
    RequestTimeout = "request_timeout" => StatusCode::REQUEST_TIMEOUT,
    /// No such agent.
    AgentNotFound = "agent_not_found" => StatusCode::NOT_FOUND,
    /// No such team.
    TeamNotFound = "team_not_found" => StatusCode::NOT_FOUND,
    /// No such session.
    SessionNotFound = "session_not_found" => StatusCode::NOT_FOUND,
    /// No such run.
    RunNotFound = "run_not_found" => StatusCode::NOT_FOUND,
    /// No such stored record.
    NotFound = "not_found" => StatusCode::NOT_FOUND,
    /// No such Project Loop.
    LoopNotFound = "loop_not_found" => StatusCode::NOT_FOUND,
    /// No such schedule in the served project.
    ScheduleNotFound = "schedule_not_found" => StatusCode::NOT_FOUND,
    /// No loop run waits for a person under that id.
    LoopRunNotFound = "loop_run_not_found" => StatusCode::NOT_FOUND,
    /// Cancelling a loop run that already ended.
    LoopRunFinished = "loop_run_finished" => StatusCode::CONFLICT,
    /// A stored loop run that does not read back as one.
    LoopRunRecordInvalid = "loop_run_record_invalid" => StatusCode::INTERNAL_SERVER_ERROR,
    /// No such approval request.
    ApprovalNotFound = "approval_not_found" => StatusCode::NOT_FOUND,
    /// Approving, rejecting or resuming a loop run (or approval) not in a state that allows it.
    LoopRunNotResumable = "loop_run_not_resumable" => StatusCode::CONFLICT,
    /// A side-effecting loop tool step that may already have run on a server that died: it is
    /// not run again; a person checks what it did.
    EffectUnconfirmed = "effect_unconfirmed" => StatusCode::CONFLICT,
    /// A loop permission denied the action.
    LoopPermissionDenied = "loop_permission_denied" => StatusCode::FORBIDDEN,
    /// A loop policy denied the action.
    LoopPolicyDenied = "loop_policy_denied" => StatusCode::FORBIDDEN,
    /// A loop hook action failed.
    LoopHookFailed = "loop_hook_failed" => StatusCode::UNPROCESSABLE_ENTITY,
    /// A loop run stopped at an approval gate (stored `awaiting_approval`).
    LoopApprovalRequired = "loop_approval_required" => StatusCode::ACCEPTED,
    /// A durable run paused for a hook-asked tool call's approval; it goes on once decided.
    AwaitingApproval = "awaiting_approval" => StatusCode::ACCEPTED,
    /// A hook asked for approval of a tool call in inline chat: approve it, then retry with
    /// the same `Idempotency-Key`.
    ApprovalRequired = "approval_required" => StatusCode::CONFLICT,
    /// No such route.
    RouteNotFound = "route_not_found" => StatusCode::NOT_FOUND,
    /// The resource changed since it was read.
    Conflict = "conflict" => StatusCode::CONFLICT,
    /// A team that still has members.
    TeamNotEmpty = "team_not_empty" => StatusCode::CONFLICT,
    /// A session continued with another agent.
    SessionAgentMismatch = "session_agent_mismatch" => StatusCode::CONFLICT,
    /// The request with this `Idempotency-Key` is still running.
    IdempotencyInProgress = "idempotency_in_progress" => StatusCode::CONFLICT,
    /// A loop compiled from `loops/<id>.ts`: only its source changes it.
    LoopReadOnly = "loop_read_only" => StatusCode::CONFLICT,
    /// A loop an agent still names in `assignedLoops` or `defaultLoop`.
    LoopInUse = "loop_in_use" => StatusCode::CONFLICT,
    /// The id is taken.
    AlreadyExists = "already_exists" => StatusCode::CONFLICT,
    /// Another process holds the run's lease.
    LeaseHeld = "lease_held" => StatusCode::CONFLICT,
    /// A run state change that is not allowed from its state.
    InvalidTransition = "invalid_transition" => StatusCode::CONFLICT,
    /// The run does not execute here.
    RunNotActive = "run_not_active" => StatusCode::CONFLICT,
    /// The body is too large.
    PayloadTooLarge = "payload_too_large" => StatusCode::PAYLOAD_TOO_LARGE,
    /// The `Idempotency-Key` was used with another body.
    IdempotencyKeyReused = "idempotency_key_reused" => StatusCode::UNPROCESSABLE_ENTITY,
    /// The agent used all its turns.
    MaxTurnsExhausted = "max_turns_exhausted" => StatusCode::UNPROCESSABLE_ENTITY,
    /// The answer does not match the requested format.
    StructuredOutputInvalid = "structured_output_invalid" => StatusCode::UNPROCESSABLE_ENTITY,
    /// A `turn:stop` hook failed.
    HookFailed = "hook_failed" => StatusCode::UNPROCESSABLE_ENTITY,
    /// The termination gate's cycle budget ran out.
    TerminationGateCyclesExhausted = "termination_gate_cycles_exhausted" => StatusCode::UNPROCESSABLE_ENTITY,
    /// The termination gate's turn budget ran out.
    TerminationGateTurnsExhausted = "termination_gate_turns_exhausted" => StatusCode::UNPROCESSABLE_ENTITY,
    /// The termination gate's time budget ran out.
    TerminationGateTimeExhausted = "termination_gate_time_exhausted" => StatusCode::UNPROCESSABLE_ENTITY,
    /// The termination gate's token budget ran out.
    TerminationGateTokensExhausted = "termination_gate_tokens_exhausted" => StatusCode::UNPROCESSABLE_ENTITY,
    /// Token usage the gate needs is unknown.
    TerminationGateUsageUnknown = "termination_gate_usage_unknown" => StatusCode::UNPROCESSABLE_ENTITY,
    /// The validator rejected the answer.
    TerminationGateRejected = "termination_gate_rejected" => StatusCode::UNPROCESSABLE_ENTITY,
    /// A gate applies but hooks are switched off.
    TerminationGateDisabled = "termination_gate_disabled" => StatusCode::UNPROCESSABLE_ENTITY,
    /// A gate on a durable node of a parallel branch.
    TerminationGateParallelUnsupported = "termination_gate_parallel_unsupported" => StatusCode::UNPROCESSABLE_ENTITY,
    /// The gate's checkpoint could not be written or read.
    TerminationGateCheckpointInvalid = "termination_gate_checkpoint_invalid" => StatusCode::UNPROCESSABLE_ENTITY,
    /// The gate's checkpoint is over the store's limit.
    TerminationGateCheckpointTooLarge = "termination_gate_checkpoint_too_large" => StatusCode::UNPROCESSABLE_ENTITY,
    /// A correction-cycle model call a crash left unconfirmed.
    TerminationGateEffectUnconfirmed = "termination_gate_effect_unconfirmed" => StatusCode::UNPROCESSABLE_ENTITY,
    /// Too many requests for the caller.
    TooManyRequests = "too_many_requests" => StatusCode::TOO_MANY_REQUESTS,
    /// The caller aborted the run.
    Aborted = "aborted" => CLIENT_CLOSED,
    /// The server is stopping; the run goes on on the next one.
    RunHandedOver = "run_handed_over" => StatusCode::SERVICE_UNAVAILABLE,
    /// The connection cap is reached.
    TooManyConnections = "too_many_connections" => StatusCode::SERVICE_UNAVAILABLE,
    /// The operator has not set the provider's key: nothing the caller can fix by retrying.
    ProviderNotConfigured = "provider_not_configured" => StatusCode::SERVICE_UNAVAILABLE,
    /// The provider rate-limited the model call.
    RateLimited = "rate_limited" => StatusCode::BAD_GATEWAY,
    /// The provider does not answer.
    ProviderUnavailable = "provider_unavailable" => StatusCode::BAD_GATEWAY,
    /// The provider refused the server's credentials (never the caller's 401).
    AuthFailed = "auth_failed" => StatusCode::BAD_GATEWAY,
    /// The model call timed out.
    ModelTimeout = "model_timeout" => StatusCode::BAD_GATEWAY,
    /// The model stream broke after content was delivered.
    StreamInterrupted = "stream_interrupted" => StatusCode::BAD_GATEWAY,
    /// The provider filtered the content.
    ContentFiltered = "content_filtered" => StatusCode::BAD_GATEWAY,
    /// The prompt does not fit the model.
    ContextLengthExceeded = "context_length_exceeded" => StatusCode::BAD_GATEWAY,
    /// The provider's answer could not be understood.
    InvalidResponse = "invalid_response" => StatusCode::BAD_GATEWAY,
    /// A bug or an unexpected failure of the server.
    Internal = "internal" => StatusCode::INTERNAL_SERVER_ERROR,
    /// A file system operation failed.
    IoError = "io_error" => StatusCode::INTERNAL_SERVER_ERROR,
    /// The database failed.
    DatabaseError = "database_error" => StatusCode::INTERNAL_SERVER_ERROR,
    /// A store file is not what the store wrote.
    StoreCorrupt = "store_corrupt" => StatusCode::INTERNAL_SERVER_ERROR,
    /// Another process holds the store.
    StoreLocked = "store_locked" => StatusCode::INTERNAL_SERVER_ERROR,
    /// A schema migration failed.
    MigrationFailed = "migration_failed" => StatusCode::INTERNAL_SERVER_ERROR,
    /// The store is misconfigured.
    StoreConfig = "store_config" => StatusCode::INTERNAL_SERVER_ERROR,
    /// This process lost the run's lease.
    LeaseLost = "lease_lost" => StatusCode::INTERNAL_SERVER_ERROR,
    /// A request that is malformed.
    InvalidRequest = "invalid_request" => StatusCode::BAD_REQUEST,
    /// A request with `store: false` that needs storage (a session to continue, a durable
    /// run, an idempotent replay, a loop run).
    StoreRequired = "store_required" => StatusCode::BAD_REQUEST,
    /// A field with a value out of its range or shape.
    InvalidValue = "invalid_value" => StatusCode::BAD_REQUEST,
    /// A config file (agent, team) that does not pass its schema.
    InvalidConfig = "invalid_config" => StatusCode::BAD_REQUEST,
    /// A change after which the project no longer loads.
    InvalidProject = "invalid_project" => StatusCode::BAD_REQUEST,
    /// An id that can be mistaken for another.
    IdConfusable = "id_confusable" => StatusCode::BAD_REQUEST,
    /// A chat request that names no agent.
    AgentRequired = "agent_required" => StatusCode::BAD_REQUEST,
    /// A loop the agent is not assigned, or no `defaultLoop`.
    LoopNotAssigned = "loop_not_assigned" => StatusCode::BAD_REQUEST,
    /// A loop chat with `response_format`, client tools or `ask_user_question`.
    LoopRequestUnsupported = "loop_request_unsupported" => StatusCode::BAD_REQUEST,
    /// A human step's answer that does not match its `output.schema`.
    LoopHumanOutputInvalid = "loop_human_output_invalid" => StatusCode::BAD_REQUEST,
    /// A `$context` binding that names nothing in the loop context.
    LoopBindingMissing = "loop_binding_missing" => StatusCode::UNPROCESSABLE_ENTITY,
    /// A malformed `$context` marker.
    LoopBindingInvalid = "loop_binding_invalid" => StatusCode::UNPROCESSABLE_ENTITY,
    /// A tool step's resolved input that does not match the tool's schema.
    LoopToolInputInvalid = "loop_tool_input_invalid" => StatusCode::UNPROCESSABLE_ENTITY,
    /// An agent step's projection that does not match its `inputSchema`.
    LoopInputInvalid = "loop_input_invalid" => StatusCode::UNPROCESSABLE_ENTITY,
    /// An agent step's projection above 256 KiB.
    LoopInputTooLarge = "loop_input_too_large" => StatusCode::UNPROCESSABLE_ENTITY,
    /// A step writing under `request`.
    LoopContextReadonly = "loop_context_readonly" => StatusCode::UNPROCESSABLE_ENTITY,
    /// A loop run past its step budget.
    LoopStepBudgetExceeded = "loop_step_budget_exceeded" => StatusCode::UNPROCESSABLE_ENTITY,
    /// A tool step's tool refused or failed.
    LoopToolFailed = "loop_tool_failed" => StatusCode::UNPROCESSABLE_ENTITY,
    /// An agent step's invocation failed.
    LoopStepFailed = "loop_step_failed" => StatusCode::BAD_GATEWAY,
    /// An agent step's `stopWhen` never held within its turns.
    LoopStopConditionUnmet = "loop_stop_condition_unmet" => StatusCode::UNPROCESSABLE_ENTITY,
    /// A feature this runtime does not have yet.
    FeatureUnavailable = "feature_unavailable" => StatusCode::BAD_REQUEST,
    /// A page cursor that is not one the server gave.
    InvalidCursor = "invalid_cursor" => StatusCode::BAD_REQUEST,
    /// Input the store refuses.
    InvalidInput = "invalid_input" => StatusCode::BAD_REQUEST,
    /// A model the provider or project does not know.
    ModelNotFound = "model_not_found" => StatusCode::BAD_REQUEST,
    /// A model profile that does not exist.
    ModelProfileUnknown = "model_profile_unknown" => StatusCode::BAD_REQUEST,
    /// Model profiles that refer to each other in a circle.
    ModelProfileCycle = "model_profile_cycle" => StatusCode::BAD_REQUEST,
    /// A model profile the agent may not use.
    ModelProfileNotAllowed = "model_profile_not_allowed" => StatusCode::BAD_REQUEST,
    /// Fallbacks that are not a list of models.
    ModelFallbacksInvalid = "model_fallbacks_invalid" => StatusCode::BAD_REQUEST,
    /// Model profiles nested too deeply.
    ModelProfileTooDeep = "model_profile_too_deep" => StatusCode::BAD_REQUEST,
    /// A hook pack that does not exist.
    UnknownHookPack = "unknown_hook_pack" => StatusCode::BAD_REQUEST,
    /// `polpo.skills` names a skill the agent does not have.
    SkillNotAssigned = "skill_not_assigned" => StatusCode::BAD_REQUEST,
    /// No installed skill by that name.
    SkillNotFound = "skill_not_found" => StatusCode::NOT_FOUND,
    /// A skill bundle whose SKILL.md or name breaks the Agent Skills rules.
    InvalidSkill = "invalid_skill" => StatusCode::BAD_REQUEST,
    /// A skill bundle holding a symbolic link.
    SkillSymlinkRefused = "skill_symlink_refused" => StatusCode::BAD_REQUEST,
    /// A path that leaves a skill bundle.
    PathOutsideBundle = "path_outside_bundle" => StatusCode::BAD_REQUEST,
    /// A skill bundle over its size bounds.
    SkillTooLarge = "skill_too_large" => StatusCode::BAD_REQUEST,
    /// A skill file that is not text.
    SkillFileNotText = "skill_file_not_text" => StatusCode::BAD_REQUEST,
    /// A skill source that could not be fetched.
    SkillSourceFailed = "skill_source_failed" => StatusCode::BAD_GATEWAY,
    /// `.polpo/skills.lock.json` that does not read.
    InvalidSkillsLock = "invalid_skills_lock" => StatusCode::INTERNAL_SERVER_ERROR,
    /// The project uses a legacy aggregate layout; `polpo migrate` first.
    LegacyLayout = "legacy_layout" => StatusCode::BAD_REQUEST,
    /// `.polpo/` already exists where a project was to be created.
    ProjectExists = "project_exists" => StatusCode::BAD_REQUEST,
    /// An automatic retry of a task with no retries left.
    RetriesExhausted = "retries_exhausted" => StatusCode::CONFLICT,
    /// A fix round of a task with none left.
    FixAttemptsExhausted = "fix_attempts_exhausted" => StatusCode::CONFLICT,
    /// A clarifying question of a task with no answer rounds left.
    QuestionRoundsExhausted = "question_rounds_exhausted" => StatusCode::CONFLICT,
    /// An automatic re-execution of a task with side effects: a person approves it.
    SideEffectsNeedApproval = "side_effects_need_approval" => StatusCode::CONFLICT,
    /// A migration backup already exists.
    BackupExists = "backup_exists" => StatusCode::BAD_REQUEST,
    /// A file a migration would write already exists.
    TargetExists = "target_exists" => StatusCode::BAD_REQUEST,
    /// Nothing to migrate.
    NothingToMigrate = "nothing_to_migrate" => StatusCode::BAD_REQUEST,
    /// No vault key on this server (`POLPO_VAULT_KEY` or `~/.polpo/vault.key`).
    VaultKeyMissing = "vault_key_missing" => StatusCode::SERVICE_UNAVAILABLE,
    /// The configured vault key is not 32 bytes of hex.
    VaultKeyInvalid = "vault_key_invalid" => StatusCode::SERVICE_UNAVAILABLE,
    /// The vault file does not decrypt with the server's key.
    VaultUnreadable = "vault_unreadable" => StatusCode::INTERNAL_SERVER_ERROR,
    /// Memory learning does not run on this server, so there are no candidates to review.
    MemoryReviewUnavailable = "memory_review_unavailable" => StatusCode::SERVICE_UNAVAILABLE,
    /// Reading or writing the vault file failed.
    VaultIo = "vault_io" => StatusCode::INTERNAL_SERVER_ERROR,
    /// A vault entry that fails its type's rules.
    VaultEntryInvalid = "vault_entry_invalid" => StatusCode::BAD_REQUEST,
    /// No such vault entry.
    VaultEntryNotFound = "vault_entry_not_found" => StatusCode::NOT_FOUND,
    /// A malformed or dangling `${vault:service:key}` reference.
    VaultReferenceInvalid = "vault_reference_invalid" => StatusCode::BAD_REQUEST,
}

impl ErrorCode {
    /// The code a library error reports (`ChatError::code`, `StoreError::code`, …, or one
    /// stored with a run). `None` for a code this table lacks, which is a bug: a test walks
    /// every library error's code.
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.as_str() == code)
    }
}

/// A code an [`ApiError`] is made from: an [`ErrorCode`], or a library's code text.
pub trait Code {
    /// The wire name and the status.
    fn resolve(self) -> (String, StatusCode);
}

impl Code for ErrorCode {
    fn resolve(self) -> (String, StatusCode) {
        (self.as_str().to_owned(), self.status())
    }
}

/// A library's (or a stored run's) code: its status from the table; a code the table lacks
/// keeps its name, is logged as the bug it is, and answers 500, never a silent 400.
impl Code for &str {
    fn resolve(self) -> (String, StatusCode) {
        match ErrorCode::parse(self) {
            Some(code) => code.resolve(),
            None => {
                tracing::error!(code = self, "an error code without an HTTP status in polpo-server's error table");
                (self.to_owned(), StatusCode::INTERNAL_SERVER_ERROR)
            }
        }
    }
}

impl Code for &String {
    fn resolve(self) -> (String, StatusCode) {
        self.as_str().resolve()
    }
}

/// An error response.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable snake_case code.
    pub code: String,
    /// Human sentence.
    pub message: String,
    /// The durable run the failure concerns (`error.run_id`), for a client to follow it on.
    pub run_id: Option<String>,
    /// The approval request the failure waits on (`error.approval_id`), for a client to
    /// approve it and retry or follow the run.
    pub approval_id: Option<String>,
}

impl ApiError {
    /// An error whose status follows from its code.
    pub fn new(code: impl Code, message: impl Into<String>) -> Self {
        let (code, status) = code.resolve();
        Self { status, code, message: message.into(), run_id: None, approval_id: None }
    }

    /// The same error, naming the durable run it concerns.
    pub fn for_run(mut self, run_id: &str) -> Self {
        self.run_id = Some(run_id.to_owned());
        self
    }

    /// The same error, naming the approval request it waits on.
    pub fn for_approval(mut self, approval_id: &str) -> Self {
        self.approval_id = Some(approval_id.to_owned());
        self
    }

    /// `400 invalid_request`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    /// The OpenAI `type` that goes with the status, so SDKs raise the matching exception class.
    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            409 => "conflict_error",
            429 => "rate_limit_error",
            500..=599 => "api_error",
            _ => "invalid_request_error",
        }
    }
}

impl From<polpo_engine::ChatError> for ApiError {
    fn from(e: polpo_engine::ChatError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<polpo_store::StoreError> for ApiError {
    fn from(e: polpo_store::StoreError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<polpo_scheduler::SchedulerError> for ApiError {
    fn from(e: polpo_scheduler::SchedulerError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<polpo_engine::runs::RunError> for ApiError {
    fn from(e: polpo_engine::runs::RunError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<polpo_project::skills::SkillError> for ApiError {
    fn from(e: polpo_project::skills::SkillError) -> Self {
        match e {
            polpo_project::skills::SkillError::Project(e) => e.into(),
            other => Self::new(other.code(), other.to_string()),
        }
    }
}

impl From<polpo_vault::VaultError> for ApiError {
    fn from(e: polpo_vault::VaultError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<polpo_project::ProjectError> for ApiError {
    fn from(e: polpo_project::ProjectError) -> Self {
        // The REST API's name for "taken" is `already_exists`, shared with other resources.
        match e {
            polpo_project::ProjectError::AgentExists(_) | polpo_project::ProjectError::LoopExists(_) => {
                Self::new(ErrorCode::AlreadyExists, e.to_string())
            }
            _ => Self::new(e.code(), e.to_string()),
        }
    }
}

impl From<polpo_orchestrator::OrchestratorError> for ApiError {
    fn from(e: polpo_orchestrator::OrchestratorError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = error_body(&self.message, self.kind(), &self.code);
        if let Some(run_id) = self.run_id {
            body["error"]["run_id"] = run_id.into();
        }
        if let Some(approval_id) = self.approval_id {
            body["error"]["approval_id"] = approval_id.into();
        }
        (self.status, Json(body)).into_response()
    }
}

/// An error from a management route (`/api/v1/*`), in the reference's REST envelope
/// `{ok:false, error, code}` rather than OpenAI's.
#[derive(Debug, Clone)]
pub struct RestError(pub ApiError);

impl<E: Into<ApiError>> From<E> for RestError {
    fn from(e: E) -> Self {
        Self(e.into())
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        (self.0.status, Json(serde_json::json!({"ok": false, "error": self.0.message, "code": self.0.code})))
            .into_response()
    }
}

/// `e` in the envelope the route at `path` answers with: OpenAI's for the OpenAI surface
/// (`/v1/chat/completions`, `/v1/models`, which OpenAI SDKs parse), the REST envelope for
/// everything else; for errors raised before any handler runs (layers, fallbacks).
pub fn for_path(path: &str, e: ApiError) -> Response {
    if path == "/v1/chat/completions" || path == "/v1/models" {
        e.into_response()
    } else {
        RestError(e).into_response()
    }
}

/// A management route's success: `{ok:true, data}`.
pub fn ok<T: serde::Serialize>(data: T) -> Json<serde_json::Value> {
    Json(serde_json::json!({"ok": true, "data": data}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use polpo_core::hooks::GateExhaustion;
    use polpo_core::model::ModelProfileError;
    use polpo_engine::runs::RunError;
    use polpo_engine::{ActivationError, ChatError, EngineError};
    use polpo_llm::{LlmError, LlmErrorKind, ResolveError};
    use polpo_loops::LoopError;
    use polpo_orchestrator::OrchestratorError;
    use polpo_project::ProjectError;
    use polpo_project::skills::SkillError;
    use polpo_store::StoreError;
    use polpo_vault::VaultError;

    #[test]
    fn provider_credential_failures_are_not_the_callers_401() {
        assert_eq!(ErrorCode::AuthFailed.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(ErrorCode::Unauthorized.status(), StatusCode::UNAUTHORIZED);
        assert_eq!("termination_gate_cycles_exhausted".resolve().1, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(ApiError::new(ErrorCode::AgentNotFound, "x").kind(), "not_found_error");
    }

    #[test]
    fn codes_are_unique_snake_case_and_parse_back() {
        for (i, code) in ErrorCode::ALL.iter().enumerate() {
            let name = code.as_str();
            assert!(name.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{name}");
            assert_eq!(ErrorCode::parse(name), Some(*code));
            assert!(!ErrorCode::ALL[..i].iter().any(|other| other.as_str() == name), "{name} twice");
        }
    }

    #[test]
    fn a_code_the_table_lacks_is_a_500_with_its_name_never_a_silent_400() {
        let e = ApiError::new("no_such_code", "x");
        assert_eq!((e.status, e.code.as_str()), (StatusCode::INTERNAL_SERVER_ERROR, "no_such_code"));
    }

    /// Every skill error (the skills routes answer with them; request activation wraps them).
    fn skill_errors() -> Vec<SkillError> {
        let errors = vec![
            SkillError::invalid("s", "r"),
            SkillError::Symlink("s".into()),
            SkillError::PathOutsideBundle("p".into()),
            SkillError::TooLarge("t".into()),
            SkillError::NotFound("n".into()),
            SkillError::NotText("n".into()),
            SkillError::Source("s".into()),
            SkillError::Lock("l".into()),
            SkillError::Project(ProjectError::NothingToMigrate),
        ];
        for e in &errors {
            match e {
                SkillError::Invalid { .. }
                | SkillError::Symlink(_)
                | SkillError::PathOutsideBundle(_)
                | SkillError::TooLarge(_)
                | SkillError::NotFound(_)
                | SkillError::NotText(_)
                | SkillError::Source(_)
                | SkillError::Lock(_)
                | SkillError::Project(_) => {}
            }
        }
        errors
    }

    /// One error of every variant of every library error the server answers with. Each list
    /// is followed by an exhaustive match, so a variant added to a library fails to compile
    /// here until it is listed, and then fails the test until its code has a status.
    fn library_errors() -> Vec<ApiError> {
        let io = || std::io::Error::other("x");
        let project = [
            ProjectError::Io { action: "write", path: "p".into(), source: io() },
            ProjectError::Invalid(Vec::new()),
            ProjectError::AgentNotFound("a".into()),
            ProjectError::AgentExists("a".into()),
            ProjectError::InvalidId { id: "a".into(), reason: "r".into() },
            ProjectError::Conflict("a".into()),
            ProjectError::LoopNotFound("l".into()),
            ProjectError::LoopExists("l".into()),
            ProjectError::LoopReadOnly("l".into()),
            ProjectError::LegacyLayout,
            ProjectError::ProjectExists("p".into()),
            ProjectError::BackupExists("p".into()),
            ProjectError::TargetExists("p".into()),
            ProjectError::NothingToMigrate,
        ];
        for e in &project {
            match e {
                ProjectError::Io { .. }
                | ProjectError::Invalid(_)
                | ProjectError::AgentNotFound(_)
                | ProjectError::AgentExists(_)
                | ProjectError::InvalidId { .. }
                | ProjectError::Conflict(_)
                | ProjectError::LoopNotFound(_)
                | ProjectError::LoopExists(_)
                | ProjectError::LoopReadOnly(_)
                | ProjectError::LegacyLayout
                | ProjectError::ProjectExists(_)
                | ProjectError::BackupExists(_)
                | ProjectError::TargetExists(_)
                | ProjectError::NothingToMigrate => {}
            }
        }
        let store = || {
            let store = vec![
                StoreError::NotFound { kind: "run", id: "r".into() },
                StoreError::Conflict("c".into()),
                StoreError::Locked { path: "p".into() },
                StoreError::LeaseHeld {
                    run_id: "r".into(),
                    owner: "o".into(),
                    expires_at: chrono::DateTime::UNIX_EPOCH,
                },
                StoreError::LeaseLost { run_id: "r".into(), owner: "o".into() },
                StoreError::InvalidTransition { from: "a".into(), to: "b".into() },
                StoreError::InvalidCursor,
                StoreError::Invalid("i".into()),
                StoreError::Io { path: "p".into(), source: io() },
                StoreError::Corrupt { path: "p".into(), message: "m".into() },
                StoreError::Database("d".into()),
                StoreError::Migration("m".into()),
                StoreError::Config("c".into()),
            ];
            for e in &store {
                match e {
                    StoreError::NotFound { .. }
                    | StoreError::Conflict(_)
                    | StoreError::Locked { .. }
                    | StoreError::LeaseHeld { .. }
                    | StoreError::LeaseLost { .. }
                    | StoreError::InvalidTransition { .. }
                    | StoreError::InvalidCursor
                    | StoreError::Invalid(_)
                    | StoreError::Io { .. }
                    | StoreError::Corrupt { .. }
                    | StoreError::Database(_)
                    | StoreError::Migration(_)
                    | StoreError::Config(_) => {}
                }
            }
            store
        };
        let kinds = [
            LlmErrorKind::RateLimited,
            LlmErrorKind::ContextLengthExceeded,
            LlmErrorKind::AuthFailed,
            LlmErrorKind::ProviderUnavailable,
            LlmErrorKind::ContentFiltered,
            LlmErrorKind::Timeout,
            LlmErrorKind::ModelNotFound,
            LlmErrorKind::InvalidRequest,
            LlmErrorKind::InvalidResponse,
            LlmErrorKind::StreamInterrupted,
            LlmErrorKind::NotConfigured,
        ];
        for k in kinds {
            match k {
                LlmErrorKind::RateLimited
                | LlmErrorKind::ContextLengthExceeded
                | LlmErrorKind::AuthFailed
                | LlmErrorKind::ProviderUnavailable
                | LlmErrorKind::ContentFiltered
                | LlmErrorKind::Timeout
                | LlmErrorKind::ModelNotFound
                | LlmErrorKind::InvalidRequest
                | LlmErrorKind::InvalidResponse
                | LlmErrorKind::StreamInterrupted
                | LlmErrorKind::NotConfigured => {}
            }
        }
        let profiles = [
            ModelProfileError::Unknown("p".into()),
            ModelProfileError::Cycle(Vec::new()),
            ModelProfileError::NotAllowed("p".into()),
            ModelProfileError::FallbacksInvalid("f".into()),
            ModelProfileError::TooDeep("p".into()),
        ];
        for e in &profiles {
            match e {
                ModelProfileError::Unknown(_)
                | ModelProfileError::Cycle(_)
                | ModelProfileError::NotAllowed(_)
                | ModelProfileError::FallbacksInvalid(_)
                | ModelProfileError::TooDeep(_) => {}
            }
        }
        let gates = [
            GateExhaustion::Cycles,
            GateExhaustion::Turns,
            GateExhaustion::Time,
            GateExhaustion::Tokens,
            GateExhaustion::UsageUnknown,
        ];
        for g in gates {
            match g {
                GateExhaustion::Cycles
                | GateExhaustion::Turns
                | GateExhaustion::Time
                | GateExhaustion::Tokens
                | GateExhaustion::UsageUnknown => {}
            }
        }
        let llm = |kind| LlmError::new(kind, "m");
        let mut engine: Vec<EngineError> = vec![
            EngineError::MaxTurnsExhausted { max_turns: 1, transcript: Vec::new() },
            EngineError::ToolPolicyDenied("t".into()),
            EngineError::StructuredOutputInvalid("s".into()),
            EngineError::InvalidRequest("i".into()),
            EngineError::Aborted,
            EngineError::TerminationGateRejected("r".into()),
            EngineError::TerminationGateDisabled("d".into()),
            EngineError::TerminationGateParallelUnsupported("p".into()),
            EngineError::TerminationGateCheckpointInvalid("c".into()),
            EngineError::TerminationGateCheckpointTooLarge("c".into()),
            EngineError::TerminationGateEffectUnconfirmed("e".into()),
            EngineError::HookStopped("h".into()),
            EngineError::HookFailed("h".into()),
            EngineError::ApprovalRequired("a".into()),
        ];
        engine.extend(kinds.map(|k| EngineError::Model(llm(k))));
        engine.extend(gates.map(|reason| EngineError::TerminationGateExhausted { reason, detail: "d".into() }));
        for e in &engine {
            match e {
                EngineError::MaxTurnsExhausted { .. }
                | EngineError::ToolPolicyDenied(_)
                | EngineError::Model(_)
                | EngineError::StructuredOutputInvalid(_)
                | EngineError::InvalidRequest(_)
                | EngineError::Aborted
                | EngineError::TerminationGateExhausted { .. }
                | EngineError::TerminationGateRejected(_)
                | EngineError::TerminationGateDisabled(_)
                | EngineError::TerminationGateParallelUnsupported(_)
                | EngineError::TerminationGateCheckpointInvalid(_)
                | EngineError::TerminationGateCheckpointTooLarge(_)
                | EngineError::TerminationGateEffectUnconfirmed(_)
                | EngineError::HookStopped(_)
                | EngineError::HookFailed(_)
                | EngineError::ApprovalRequired(_) => {}
            }
        }
        let mut chat: Vec<ChatError> = vec![
            ChatError::AgentNotFound("a".into()),
            ChatError::SessionNotFound("s".into()),
            ChatError::SessionAgentMismatch { session: "s".into(), agent: "a".into() },
            ChatError::InvalidRequest("i".into()),
            ChatError::StoreRequired("s".into()),
            ChatError::UnknownHookPack("h".into()),
            ChatError::Skill(ActivationError::NotAssigned { agent: "a".into(), skill: "s".into() }),
            ChatError::Skill(ActivationError::TooMany),
        ];
        chat.extend(skill_errors().into_iter().map(|e| ChatError::Skill(ActivationError::Read(e))));
        chat.extend(profiles.map(|e| ChatError::Model(ResolveError::Profile(e))));
        chat.extend(kinds.map(|k| ChatError::Model(ResolveError::Model(llm(k)))));
        chat.extend(store().into_iter().map(ChatError::Store));
        chat.extend(engine.into_iter().map(ChatError::Engine));
        for e in &chat {
            match e {
                ChatError::AgentNotFound(_)
                | ChatError::SessionNotFound(_)
                | ChatError::SessionAgentMismatch { .. }
                | ChatError::InvalidRequest(_)
                | ChatError::StoreRequired(_)
                | ChatError::UnknownHookPack(_)
                | ChatError::Model(_)
                | ChatError::Store(_)
                | ChatError::Engine(_)
                | ChatError::Skill(_) => {}
            }
        }
        let runs = [
            RunError::NotFound("r".into()),
            RunError::NotActive("r".into(), "w".into()),
            RunError::Invalid("i".into()),
        ];
        for e in &runs {
            match e {
                RunError::NotFound(_)
                | RunError::NotActive(..)
                | RunError::Invalid(_)
                | RunError::Chat(_)
                | RunError::Store(_) => {}
            }
        }
        let loops = [
            LoopError::NotFound("l".into()),
            LoopError::NotAssigned("l".into()),
            LoopError::Unsupported("u".into()),
            LoopError::BindingMissing("b".into()),
            LoopError::BindingInvalid("b".into()),
            LoopError::ToolInputInvalid("t".into()),
            LoopError::InputInvalid("i".into()),
            LoopError::InputTooLarge(1),
            LoopError::ContextReadonly("r".into()),
            LoopError::StepBudgetExceeded(1),
            LoopError::ToolFailed("t".into()),
            LoopError::StepFailed { step: "s".into(), code: "c".into(), message: "m".into() },
            LoopError::StopConditionUnmet { step: "s".into(), expression: "e".into(), turns: 1 },
            LoopError::HumanOutputInvalid("h".into()),
            LoopError::RunNotFound("r".into()),
            LoopError::Aborted,
            LoopError::RunFinished("r".into()),
            LoopError::RunRecordInvalid("r".into()),
            LoopError::Store(StoreError::Invalid("s".into())),
            LoopError::PermissionDenied("p".into()),
            LoopError::PolicyDenied("p".into()),
            LoopError::HookFailed("h".into()),
            LoopError::AwaitingApproval { approval: "a".into(), message: "m".into() },
            LoopError::ApprovalNotFound("a".into()),
            LoopError::NotResumable("r".into()),
            LoopError::EffectUnconfirmed {
                step: "s".into(),
                tool: "t".into(),
                key: "k".into(),
                started_at: "a".into(),
            },
        ];
        for e in &loops {
            match e {
                LoopError::NotFound(_)
                | LoopError::NotAssigned(_)
                | LoopError::Unsupported(_)
                | LoopError::BindingMissing(_)
                | LoopError::BindingInvalid(_)
                | LoopError::ToolInputInvalid(_)
                | LoopError::InputInvalid(_)
                | LoopError::InputTooLarge(_)
                | LoopError::ContextReadonly(_)
                | LoopError::StepBudgetExceeded(_)
                | LoopError::ToolFailed(_)
                | LoopError::StepFailed { .. }
                | LoopError::StopConditionUnmet { .. }
                | LoopError::HumanOutputInvalid(_)
                | LoopError::RunNotFound(_)
                | LoopError::Aborted
                | LoopError::RunFinished(_)
                | LoopError::RunRecordInvalid(_)
                | LoopError::Store(_)
                | LoopError::PermissionDenied(_)
                | LoopError::PolicyDenied(_)
                | LoopError::HookFailed(_)
                | LoopError::ApprovalRequired { .. }
                | LoopError::AwaitingApproval { .. }
                | LoopError::ApprovalNotFound(_)
                | LoopError::NotResumable(_)
                | LoopError::EffectUnconfirmed { .. }
                // Its codes are the chat errors' (listed above).
                | LoopError::Chat(_) => {}
            }
        }
        let vault = [
            VaultError::KeyMissing,
            VaultError::KeyInvalid,
            VaultError::Unreadable("u".into()),
            VaultError::Io("i".into()),
            VaultError::InvalidEntry("e".into()),
            VaultError::NotFound { agent: "a".into(), service: "s".into() },
            VaultError::Reference("r".into()),
        ];
        for e in &vault {
            match e {
                VaultError::KeyMissing
                | VaultError::KeyInvalid
                | VaultError::Unreadable(_)
                | VaultError::Io(_)
                | VaultError::InvalidEntry(_)
                | VaultError::NotFound { .. }
                | VaultError::Reference(_) => {}
            }
        }
        let mut all: Vec<ApiError> = project.into_iter().map(ApiError::from).collect();
        all.extend(vault.into_iter().map(ApiError::from));
        all.extend(loops.into_iter().map(ApiError::from));
        all.extend(store().into_iter().map(ApiError::from));
        all.extend(chat.into_iter().map(ApiError::from));
        all.extend(skill_errors().into_iter().map(ApiError::from));
        all.extend(runs.into_iter().map(ApiError::from));
        all.extend(orchestrator().into_iter().map(ApiError::from));
        let schedules = [
            polpo_scheduler::SchedulerError::NotFound("s".into()),
            polpo_scheduler::SchedulerError::Invalid("i".into()),
            polpo_scheduler::SchedulerError::Store(StoreError::Invalid("s".into())),
        ];
        for e in &schedules {
            match e {
                polpo_scheduler::SchedulerError::NotFound(_)
                | polpo_scheduler::SchedulerError::Invalid(_)
                | polpo_scheduler::SchedulerError::Store(_) => {}
            }
        }
        all.extend(schedules.into_iter().map(ApiError::from));
        all
    }

    /// Every orchestrator error, the core's transition errors included.
    fn orchestrator() -> Vec<OrchestratorError> {
        use polpo_core::tasks::{MissionStatus, MissionTransitionError, TaskStatus, TransitionError};
        let transitions = [
            TransitionError::InvalidTransition { from: TaskStatus::Done, event: "e" },
            TransitionError::RetriesExhausted { max: 1 },
            TransitionError::FixAttemptsExhausted { max: 1 },
            TransitionError::QuestionRoundsExhausted { max: 1 },
            TransitionError::SideEffectsNeedApproval,
        ];
        for e in &transitions {
            match e {
                TransitionError::InvalidTransition { .. }
                | TransitionError::RetriesExhausted { .. }
                | TransitionError::FixAttemptsExhausted { .. }
                | TransitionError::QuestionRoundsExhausted { .. }
                | TransitionError::SideEffectsNeedApproval => {}
            }
        }
        let mut all = vec![
            OrchestratorError::NotFound("t".into()),
            OrchestratorError::Invalid("i".into()),
            OrchestratorError::MissionTransition(MissionTransitionError { from: MissionStatus::Draft, event: "e" }),
            OrchestratorError::Store(StoreError::Invalid("i".into())),
        ];
        for e in &all {
            match e {
                OrchestratorError::NotFound(_)
                | OrchestratorError::Invalid(_)
                | OrchestratorError::Transition(_)
                | OrchestratorError::MissionTransition(_)
                | OrchestratorError::Store(_) => {}
            }
        }
        all.extend(transitions.into_iter().map(OrchestratorError::Transition));
        all
    }

    #[test]
    fn every_library_error_code_has_a_status_in_the_table() {
        let errors = library_errors();
        assert!(errors.len() > 80, "{}", errors.len());
        let unknown: Vec<&str> =
            errors.iter().map(|e| e.code.as_str()).filter(|code| ErrorCode::parse(code).is_none()).collect();
        assert_eq!(unknown, Vec::<&str>::new(), "library codes the server's table lacks");
    }
}
