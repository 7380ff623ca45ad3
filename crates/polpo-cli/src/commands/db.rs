//! `polpo db status|migrate|copy`: the project's store from the terminal.
//!
//! Migrations are applied whenever a store opens, so `migrate` is "open and report"; `copy`
//! moves everything between two backends with the store's own verified, re-runnable copy,
//! which is how a project moves from files to SQLite or PostgreSQL without changing anything
//! else.

use super::Global;
use anyhow::{Context as _, anyhow};
use polpo_store::{Store, StoreKind, SystemClock};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

/// `polpo db …`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Show the configured backend and its schema version.
    Status,
    /// Apply pending schema migrations to the configured backend.
    Migrate,
    /// Copy everything from one backend to another, verify counts and checksums.
    Copy(CopyArgs),
}

/// `polpo db copy`.
#[derive(Debug, clap::Args)]
pub struct CopyArgs {
    /// Source backend: file, sqlite or postgres.
    #[arg(long)]
    from: String,
    /// Target backend: file, sqlite or postgres.
    #[arg(long)]
    to: String,
}

/// Run a `db` subcommand.
pub fn run(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    let project = global.load()?;
    let root = project.root.clone();
    let settings = project.settings();
    let url = std::env::var("DATABASE_URL").ok().or_else(|| settings.database_url.clone());
    let configured = parse_kind(settings.storage().as_str())?;
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(async move {
        match command {
            Command::Status | Command::Migrate => {
                let version = schema_version(configured, &root, url.as_deref()).await?;
                match version {
                    Some((current, latest)) => {
                        println!("storage: {} (schema version {current} of {latest})", configured.as_str())
                    }
                    None => println!("storage: file (.polpo/; no schema)"),
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Copy(args) => {
                let (from, to) = (parse_kind(&args.from)?, parse_kind(&args.to)?);
                if from == to {
                    return Err(anyhow!("--from and --to are both `{}`", from.as_str()));
                }
                let source = open(from, &root, url.as_deref()).await?;
                let target = open(to, &root, url.as_deref()).await?;
                let report =
                    polpo_store::copy_store(&source, &target).await.map_err(|e| anyhow!("{}: {e}", e.code()))?;
                println!("copied {} → {}: {report:?}", from.as_str(), to.as_str());
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

fn parse_kind(name: &str) -> anyhow::Result<StoreKind> {
    StoreKind::parse(name).map_err(|e| anyhow!("{}: {e}", e.code()))
}

async fn open(kind: StoreKind, root: &Path, url: Option<&str>) -> anyhow::Result<Store> {
    polpo_store::open_store(kind, root, url, Arc::new(SystemClock)).await.map_err(|e| anyhow!("{}: {e}", e.code()))
}

/// `(current, latest)` for SQL backends after opening (which applies migrations).
async fn schema_version(kind: StoreKind, root: &Path, url: Option<&str>) -> anyhow::Result<Option<(i64, i64)>> {
    let clock = Arc::new(SystemClock);
    let err = |e: polpo_store::StoreError| anyhow!("{}: {e}", e.code());
    Ok(match kind {
        StoreKind::File => {
            open(kind, root, url).await?;
            None
        }
        StoreKind::Sqlite => {
            let s = polpo_store::SqliteStore::open(&root.join(".polpo").join("polpo.db"), clock).await.map_err(err)?;
            Some((
                s.schema_version().await.map_err(err)?.unwrap_or(0),
                polpo_store::SqliteStore::latest_schema_version(),
            ))
        }
        StoreKind::Postgres => {
            let url = url
                .ok_or_else(|| anyhow!("store_config: postgres storage needs DATABASE_URL or settings.databaseUrl"))?;
            let s = polpo_store::PgStore::connect(url, clock).await.map_err(err)?;
            Some((s.schema_version().await.map_err(err)?.unwrap_or(0), polpo_store::PgStore::latest_schema_version()))
        }
    })
}
