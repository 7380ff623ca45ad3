//! The `polpo` command line.
//!
//! `main` only parses arguments and dispatches: each command is one module under
//! `commands/` with an `Args` struct and a `run` function returning the exit code. Adding a
//! command means adding a module and one line in [`Command`] and in [`dispatch`].

mod commands;

use clap::{CommandFactory, Parser, Subcommand};
use commands::Global;
use std::path::PathBuf;
use std::process::ExitCode;

/// jemalloc instead of glibc's malloc for everything Rust allocates (#22, README Performance):
/// measured on `polpo bench` and `bench_http`, ≈ 15–35 % more runs/s, and with
/// [`ALLOCATOR_OPTIONS`] its resident memory grows less over 50,000 runs. C libraries (SQLite)
/// keep glibc's malloc.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, which it reads at start-up from its `malloc_conf` symbol (`_rjem_` is
/// tikv-jemalloc-sys's prefix): unused dirty pages go back to the system after 1 s instead of
/// 10 s. Measured (#22): RSS growth from 5,000 to 50,000 chat completions 1.5–3.0 MiB instead of
/// 3.6–7.8 with the defaults, for at most ≈ 5 % of their runs/s; `background_thread:true` grew more
/// (12–31 MiB). `MALLOC_CONF`-style overrides still work through `_RJEM_MALLOC_CONF`.
#[allow(unsafe_code)]
#[unsafe(export_name = "_rjem_malloc_conf")]
static ALLOCATOR_OPTIONS: &u8 = &b"dirty_decay_ms:1000\0"[0];

/// Hands jemalloc's free pages back to the system. Registered with polpo-server, which calls
/// it once a large peak of connections has drained: jemalloc otherwise keeps what they used
/// (14–17 MiB after 2,000 idle connections) until the process allocates again.
#[allow(unsafe_code)]
fn purge_allocator() {
    // `arena.<MALLCTL_ARENAS_ALL>.purge`: every arena's unused dirty pages.
    const PURGE_ALL_ARENAS: &[u8] = b"arena.4096.purge\0";
    let null = std::ptr::null_mut();
    // SAFETY: the name is NUL-terminated and this control neither reads nor writes a value
    // (null pointers, length 0); jemalloc takes its own locks, any thread may call it.
    unsafe {
        tikv_jemalloc_sys::mallctl(PURGE_ALL_ARENAS.as_ptr().cast(), null, null.cast(), null, 0);
    }
}

/// Polpo: build, run and manage AI agents kept as files in a `.polpo/` folder.
#[derive(Debug, Parser)]
#[command(name = "polpo", version, propagate_version = true)]
struct Cli {
    /// The project: a folder containing `.polpo/` (or any folder inside one). Default: the
    /// current directory.
    #[arg(long, global = true, value_name = "DIR")]
    project: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a new project with one agent.
    Create(commands::create::Args),
    /// Check every file under `.polpo/` and report all problems.
    Validate(commands::validate::Args),
    /// List or show agents.
    #[command(subcommand)]
    Agents(commands::agents::Command),
    /// Convert a legacy polpo.json/agents.json/teams.json project to the directory layout.
    Migrate(commands::migrate::Args),
    /// Show, migrate or copy the project's store.
    #[command(subcommand)]
    Db(commands::db::Command),
    /// List, validate or show Project Loops (`.polpo/loops/*.json`).
    #[command(subcommand)]
    Loops(commands::loops::Command),
    /// Validate hook packs or show hook capabilities.
    #[command(subcommand)]
    Hooks(commands::hooks::Command),
    /// Install, list, assign, update or remove Agent Skills (`.polpo/skills/`).
    #[command(subcommand)]
    Skills(commands::skills::Command),
    /// Show agents' MCP servers and tools, or serve the agents over MCP (stdio).
    #[command(subcommand)]
    Mcp(commands::mcp::Command),
    /// List, search, add or forget typed memory items; rebuild their vectors.
    #[command(subcommand)]
    Memory(commands::memory::Command),
    /// Hash an API key for `apiKeys` in project.json.
    #[command(subcommand)]
    Keys(commands::keys::Command),
    /// List or install the offline models of the `local` provider.
    #[command(subcommand)]
    Models(commands::models::Command),
    /// Start the server with live reload of agent and hook files (port 3890).
    Dev(commands::serve::Args),
    /// Start the server for production (no reload).
    Serve(commands::serve::Args),
    /// Ask an agent one thing from the terminal; the answer streams to stdout.
    Run(commands::run::Args),
    /// Follow, steer, abort or reconcile a durable run on a running server.
    Runs(commands::runs::Args),
    /// List, approve or reject the approval gates of loop runs, and resume approved runs.
    Approvals(commands::approvals::Args),
    /// Add, list, show, retry or kill tasks on a running server.
    Tasks(commands::tasks::TasksArgs),
    /// Create, run, pause, resume or report missions on a running server.
    Missions(commands::tasks::MissionsArgs),
    /// The project's schedules and their next occurrences (`list`, `show`, `next <id>`).
    #[command(subcommand)]
    Schedules(commands::schedules::Command),
    /// The servers holding running runs in the shared store, asked of a running server (`list`).
    #[command(subcommand)]
    Workers(commands::workers::Command),
    /// List or test the project's Connections (`.polpo/connections/`).
    #[command(subcommand)]
    Connections(commands::connections::Command),
    /// List, validate or run the project's custom tools (`.polpo/tools/`).
    #[command(subcommand)]
    Tools(commands::tools::Command),
    /// Store, list or remove encrypted credentials (`.polpo/vault.enc`); values never on argv.
    #[command(subcommand)]
    Vault(commands::vault::Command),
    /// Measure what the runtime costs on this machine, against a zero-latency fake model.
    Bench(commands::bench::Args),
    /// Print a shell completion script.
    Completions(commands::completions::Args),
}

fn dispatch(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Create(args) => commands::create::run(global, args),
        Command::Validate(args) => commands::validate::run(global, args),
        Command::Agents(command) => commands::agents::run(global, command),
        Command::Migrate(args) => commands::migrate::run(global, args),
        Command::Db(command) => commands::db::run(global, command),
        Command::Loops(command) => commands::loops::run(global, command),
        Command::Skills(command) => commands::skills::run(global, command),
        Command::Hooks(command) => commands::hooks::run(global, command),
        Command::Mcp(command) => commands::mcp::run(global, command),
        Command::Memory(command) => commands::memory::run(global, command),
        Command::Keys(command) => commands::keys::run(command),
        Command::Models(command) => commands::models::run(command),
        Command::Dev(args) => commands::serve::run(global, args, true),
        Command::Serve(args) => commands::serve::run(global, args, false),
        Command::Run(args) => commands::run::run(global, args),
        Command::Runs(args) => commands::runs::run(global, args),
        Command::Approvals(args) => commands::approvals::run(global, args),
        Command::Tasks(args) => commands::tasks::run_tasks(global, args),
        Command::Missions(args) => commands::tasks::run_missions(global, args),
        Command::Schedules(command) => commands::schedules::run(global, command),
        Command::Workers(command) => commands::workers::run(global, command),
        Command::Vault(command) => commands::vault::run(global, command),
        Command::Connections(command) => commands::connections::run(global, command),
        Command::Tools(command) => commands::tools::run(global, command),
        Command::Bench(args) => commands::bench::run(args),
        Command::Completions(args) => commands::completions::run(args, &mut Cli::command()),
    }
}

fn main() -> ExitCode {
    polpo_server::memory::set_release(purge_allocator);
    let cli = Cli::parse();
    let global = Global { project: cli.project };
    match dispatch(&global, cli.command) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
