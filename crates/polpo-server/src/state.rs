//! What every handler shares: the runtime, the run manager, keys, limits and host policy.
//! It sits below the routes and the router, which both use it.

use crate::auth::ApiKeys;
use crate::hosts::HostPolicy;
use crate::ratelimit::{AUTH_FAILURES_PER_MINUTE, RateLimit};
use polpo_engine::Runtime;
use polpo_engine::runs::{RunManager, RunOptions};
use polpo_loops::{LoopExecutor, LoopOptions};
use polpo_orchestrator::{Orchestrator, OrchestratorOptions};
use polpo_project::ProjectEditor;
use polpo_scheduler::{Scheduler, Targets};
use polpo_vault::{KeySources, Vault, VaultError};
use std::net::IpAddr;
use std::sync::Arc;

/// Longest a request body may take to arrive, counted from the request's start: 20 MiB at a
/// modest 350 KB/s, while a client trickling bytes to hold a connection is cut off.
pub const BODY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// Everything a handler needs.
pub struct AppState {
    /// The runtime (project, providers, store).
    pub runtime: Arc<Runtime>,
    /// Accepted API keys; empty means local-only mode (the listener is bound to 127.0.0.1).
    pub keys: ApiKeys,
    /// Browser origins allowed to call the API (`*` for any); empty: none.
    pub cors_origins: Vec<String>,
    /// When the server started (health reports uptime).
    pub started: std::time::Instant,
    /// Per-key request limit; only applied when keys are configured.
    pub rate_limit: Option<RateLimit>,
    /// Failed authentications per client address.
    pub auth_failures: Option<RateLimit<IpAddr>>,
    /// Which `Host` headers are answered.
    pub hosts: HostPolicy,
    /// The runs of this process: every chat is invoked through it (delivery, steering, abort,
    /// recovery of durable runs).
    pub runs: Arc<RunManager>,
    /// The one writer of the project's files: every route that edits `.polpo/` goes through
    /// it, so edits run one at a time and each is served whole or undone.
    pub editor: Arc<ProjectEditor>,
    /// The Project Loop executor (its agent steps run through `runs`).
    pub loops: Arc<LoopExecutor>,
    /// The task orchestrator (its tasks run through `runs`); `polpo serve` runs its loop.
    pub orchestrator: Arc<Orchestrator>,
    /// The scheduler of the project's schedules (its fires run through `runs`); `polpo serve`
    /// runs its passes, the schedule routes trigger and list through it.
    pub scheduler: Arc<Scheduler>,
    /// How long a request's whole body may take to arrive, from the request's start: the
    /// header timeout does not cover a body trickled a byte at a time.
    pub body_deadline: std::time::Duration,
    /// The project's vault, opened with the key of this process (`POLPO_VAULT_KEY` or
    /// `~/.polpo/vault.key`) and feeding the runtime's redaction list; the error when there
    /// is no usable key, which the vault routes answer with (`503 vault_key_missing`).
    pub vault: Result<Vault, VaultError>,
    /// Typed memory over the runtime's store, for the memory routes: lexical only until the
    /// host gives it an embedder (`polpo_memory::Memory::new` with `Some`).
    pub memory: polpo_memory::Memory,
    /// Memory learning and its candidates, once the host started it (`start_learning` of the
    /// `learning` module); the candidate routes answer 503 before.
    pub learning: Option<polpo_memory::learning::Learner>,
}

impl AppState {
    /// State for `runtime` with these keys, local browser origins, started now.
    pub fn new(runtime: Arc<Runtime>, keys: ApiKeys) -> Self {
        Self::with_worker_id(runtime, keys, None)
    }

    /// [`AppState::new`] whose run leases carry `worker_id` (`polpo serve --worker-id`), so
    /// the servers sharing one database can be told apart; `None`: an id unique to this process.
    pub fn with_worker_id(runtime: Arc<Runtime>, keys: ApiKeys, worker_id: Option<String>) -> Self {
        let rate_limit = if keys.is_empty() { None } else { RateLimit::from_env() };
        // Runs whose owner crashed are taken over as soon as the server state exists.
        let runs = match worker_id {
            Some(id) => RunManager::with_owner(runtime.clone(), RunOptions::from_env(), id),
            None => RunManager::new(runtime.clone(), RunOptions::from_env()),
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            runs.spawn_recovery();
        }
        let auth_failures = RateLimit::with_burst(AUTH_FAILURES_PER_MINUTE, AUTH_FAILURES_PER_MINUTE);
        let hosts = HostPolicy::for_server(!keys.is_empty());
        let editor = Arc::new(ProjectEditor::new(runtime.loaded().project.root.clone()));
        let store_memory = runtime.store().memory.clone();
        let loops = Arc::new(LoopExecutor::new(runs.clone(), LoopOptions::default()));
        let orchestrator = Orchestrator::new(runs.clone(), OrchestratorOptions::from_env());
        let polpo_dir = runtime.loaded().project.root.join(".polpo");
        let vault = KeySources::from_env().load().map(|key| Vault::open(&polpo_dir, key, runtime.redactor().clone()));
        let scheduler = Scheduler::new(runs.clone(), Targets::new(orchestrator.clone(), loops.clone()));
        // Loop runs a crash left running or waiting for a person go on from their checkpoint.
        if tokio::runtime::Handle::try_current().is_ok() {
            loops.spawn_recovery();
        }
        Self {
            runtime,
            keys,
            cors_origins: default_cors_origins(),
            started: std::time::Instant::now(),
            rate_limit,
            auth_failures,
            hosts,
            body_deadline: BODY_DEADLINE,
            runs,
            editor,
            loops,
            orchestrator,
            vault,
            scheduler,
            memory: polpo_memory::Memory::new(store_memory, None),
            learning: None,
        }
    }
}

/// The reference's default: local dashboards and dev servers only.
pub fn default_cors_origins() -> Vec<String> {
    let ports = [3000, 3001, 3890, 3891, 5173, 5174, 5175, 5176];
    ports.iter().flat_map(|p| [format!("http://localhost:{p}"), format!("http://127.0.0.1:{p}")]).collect()
}
