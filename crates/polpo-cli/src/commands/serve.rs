//! `polpo serve` and `polpo dev`: the HTTP server for the project.
//!
//! Both load the project once, open its store, and serve the whole API. `dev` also reloads
//! the project when its files change (a polling fingerprint of `.polpo/`, once a second: no
//! watcher dependency, no missed events on network filesystems) and rebuilds everything derived
//! from it, providers included. A broken edit is reported and the last good version keeps
//! serving.

mod worker;

use super::Global;
use anyhow::Context as _;
use polpo_engine::Runtime;
use polpo_scheduler::Scheduler;
use polpo_server::auth::ApiKeys;
use polpo_server::serve::Limits;
use polpo_server::{AppState, bind_address, router};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Options of `polpo serve` / `polpo dev`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Port (default: `settings.port`, else 3890). `0` picks a free port.
    #[arg(long)]
    port: Option<u16>,
    /// Address to listen on. Without an API key the server only ever listens on 127.0.0.1.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Owner id of this server's run leases, to tell the servers sharing one database apart
    /// (health, `polpo workers list`). Unique per live server. Default: `polpo-<pid>-<id>`.
    #[arg(long, value_parser = worker_id)]
    worker_id: Option<String>,
}

/// Longest `--worker-id`: it is stored with every lease and shown in listings.
const MAX_WORKER_ID: usize = 128;

/// `--worker-id`: 1 to 128 printable characters without spaces, so it reads back unchanged.
fn worker_id(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > MAX_WORKER_ID || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("must be 1 to {MAX_WORKER_ID} characters without spaces or control characters"));
    }
    Ok(s.to_owned())
}

/// How often `dev` looks for changed files.
const RELOAD_POLL: Duration = Duration::from_secs(1);

/// Run the server until Ctrl-C / SIGTERM; `reload` turns on file watching (`polpo dev`).
pub fn run(global: &Global, args: Args, reload: bool) -> anyhow::Result<ExitCode> {
    // Taken before the project is read, so no edit can fall between the two.
    let files = if reload { Some(fingerprint(&global.root()?)) } else { None };
    let project = global.load()?;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(serve(project, args, files))
}

async fn serve(
    project: polpo_core::config::Project,
    args: Args,
    files: Option<Fingerprint>,
) -> anyhow::Result<ExitCode> {
    let root = project.root.clone();
    let port = args.port.unwrap_or_else(|| project.settings().port());
    let max_connections = project.settings().max_connections;
    let (keys, warnings) = ApiKeys::load(
        std::env::var("POLPO_API_KEY").ok().as_deref(),
        project.manifest.api_keys.as_deref().unwrap_or_default(),
    );
    for w in warnings {
        eprintln!("warning: {w}");
    }
    // What the tool sandbox cannot enforce on this host, said before anything runs.
    for notice in polpo_tools::sandbox::sandbox_support().notices() {
        eprintln!("warning: {}", notice.message);
    }
    let storage = project.settings().storage();
    let agents: Vec<String> = project.agents.keys().cloned().collect();
    let (runtime, memory) = polpo_assemble::open_with_memory(project).await?;
    // Before anything runs under it: one live server per worker id on the shared store.
    let worker = match &args.worker_id {
        Some(id) => {
            let ttl = polpo_engine::runs::RunOptions::from_env().lease_ttl;
            Some(worker::hold(runtime.clone(), id, ttl).await?)
        }
        None => None,
    };

    let bind = bind_address(args.host, port, !keys.is_empty());
    if let Some(notice) = &bind.notice {
        eprintln!("{notice}");
    } else if keys.is_empty() {
        eprintln!("no API key configured: local requests only (set POLPO_API_KEY to require one)");
    }
    let listener =
        tokio::net::TcpListener::bind(bind.addr).await.with_context(|| format!("cannot listen on {}", bind.addr))?;
    let addr = listener.local_addr()?;
    // `bash` may not connect to this port: without an API key the server trusts every local
    // process, and its API can rewrite the very agent running the command.
    polpo_tools::sandbox::deny_connect_ports(&[addr.port()])?;
    // One line a script can wait for; the rest is for people.
    println!("polpo listening on http://{addr}");
    println!("  OpenAI-compatible: http://{addr}/v1/chat/completions");
    println!("  dashboard: http://{addr}/");
    println!("  agents: {}", if agents.is_empty() { "(none)".to_owned() } else { agents.join(", ") });
    println!("  storage: {}", storage.as_str());

    let mut state = AppState::with_worker_id(runtime.clone(), keys, args.worker_id);
    if let Some(files) = files {
        tokio::spawn(watch(root, runtime, state.scheduler.clone(), files));
    }
    state.memory = memory;
    // Agents whose memory.learning is on learn from committed turns (outbox drained now).
    polpo_server::learning::start_learning(&mut state);
    if let Ok(origins) = std::env::var("POLPO_CORS_ORIGINS") {
        state.cors_origins = origins.split(',').map(|o| o.trim().to_owned()).filter(|o| !o.is_empty()).collect();
    }
    let state = Arc::new(state);
    // The task orchestrator claims and runs ready tasks for as long as the server serves.
    let _orchestrator = state.orchestrator.spawn();
    // Schedules fire from now on, each occurrence once across the servers sharing the store.
    let _scheduler = state.scheduler.spawn(polpo_scheduler::PASS_EVERY);
    let runs = state.runs.clone();
    // On the signal, durable runs are handed over (checkpointed, leases released) while the
    // server stops accepting and drains; their event streams end once handed over.
    let (stopping_tx, stopping) = tokio::sync::oneshot::channel();
    let handover = tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stopping_tx.send(());
        runs.shutdown().await;
    });
    let stopped = async {
        let _ = stopping.await;
    };
    let limits = Limits::configured(max_connections, state.keys.is_empty());
    polpo_server::serve::run(listener, router(state), limits, stopped).await;
    handover.await.context("the hand-over of running runs failed")?;
    if let Some(worker) = worker {
        worker.release().await;
    }
    polpo_assemble::MCP.shutdown().await;
    eprintln!("polpo stopped");
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

/// Path, size and modification time of each configuration file.
type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// Reload the project whenever the fingerprint of `.polpo/` changes, and wake the scheduler:
/// a schedule added or moved earlier fires at its time, not after the sleep it was in.
async fn watch(root: PathBuf, runtime: Arc<Runtime>, scheduler: Arc<Scheduler>, mut last: Fingerprint) {
    loop {
        tokio::time::sleep(RELOAD_POLL).await;
        let now = fingerprint(&root);
        if now == last {
            continue;
        }
        last = now;
        let derived = polpo_project::load_project(&root)
            .map_err(|problems| {
                super::print_problems_to_stderr(&problems);
                anyhow::anyhow!("the edit has {} problem(s)", problems.len())
            })
            .and_then(polpo_assemble::derive);
        match derived {
            Ok((loaded, providers)) => {
                let n = loaded.project.agents.len();
                runtime.rebuild(loaded, providers);
                scheduler.wake();
                eprintln!("reloaded the project ({n} agent(s))");
            }
            Err(e) => eprintln!("{e}; still serving the previous version"),
        }
    }
}

/// Names, sizes and modification times of the configuration files under `.polpo/` (not the
/// store's own data), so a change to any agent, team, hook pack, loop, schedule, connection or
/// the manifest is seen.
fn fingerprint(root: &Path) -> Fingerprint {
    let polpo = root.join(".polpo");
    let mut out = Vec::new();
    let mut stack = vec![polpo.clone()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                let top = path
                    .strip_prefix(&polpo)
                    .ok()
                    .and_then(|p| p.components().next())
                    .map(|c| c.as_os_str().to_string_lossy().into_owned());
                if matches!(top.as_deref(), Some("agents" | "teams" | "hooks" | "loops" | "schedules" | "connections"))
                {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "json" || e == "md" || e == "ts") {
                out.push((path, meta.len(), meta.modified().ok()));
            }
        }
    }
    out.sort();
    out
}
