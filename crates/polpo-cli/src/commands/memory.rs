//! `polpo memory list|search|add|rm|reindex`: the project's typed memory items from the
//! terminal, through the project's own store (`settings.storage`, like `polpo db`). The file
//! store is held by one process at a time, so with file storage these run while no server
//! does (`store_locked` otherwise). Search here is lexical until an embedder is configured;
//! `reindex` needs one and says so.

use super::Global;
use anyhow::{Context as _, anyhow};
use polpo_memory::SearchRequest;
use polpo_store::{
    Cursor, MemoryFilter, MemoryItem, MemoryScope, NewMemoryItem, PageRequest, ScopeKind, StoreKind, SystemClock,
};
use std::process::ExitCode;
use std::sync::Arc;

/// `polpo memory` subcommands on the items, through the project's store.
#[derive(Debug, clap::Subcommand)]
pub enum Items {
    /// Items newest first, one page at a time (`--cursor` from the previous page).
    List {
        #[command(flatten)]
        scope: ScopeArgs,
        /// Only these kinds (repeatable).
        #[arg(long = "kind", value_name = "KIND")]
        kinds: Vec<String>,
        /// Page size (1-1000).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Resume after this cursor (printed after a full page).
        #[arg(long)]
        cursor: Option<String>,
        /// Print the page as JSON (`{items, nextCursor}`).
        #[arg(long)]
        json: bool,
    },
    /// Search items by words (and meaning, with an embedder); best first.
    Search {
        /// What to look for.
        query: String,
        #[command(flatten)]
        scope: ScopeArgs,
        /// Only these kinds (repeatable).
        #[arg(long = "kind", value_name = "KIND")]
        kinds: Vec<String>,
        /// How many results (1-100).
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remember something.
    Add {
        /// What to remember.
        content: String,
        /// fact, preference, style, open_thread, failure_pattern, successful_episode, procedure_hint.
        #[arg(long, default_value = "fact")]
        kind: String,
        #[command(flatten)]
        scope: ScopeArgs,
        /// The id to give it (default: a new one).
        #[arg(long)]
        id: Option<String>,
    },
    /// Forget an item.
    Rm {
        /// The item id.
        id: String,
        /// Only if it is still at this revision.
        #[arg(long, value_name = "N")]
        expected_revision: Option<u64>,
    },
    /// Rebuild every item's vector with the configured embedder.
    Reindex,
}

/// `polpo memory` subcommands: the items, from the project's store; the candidates, from the
/// running server (which decides on them).
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    #[command(flatten)]
    Items(Items),
    /// Review what memory learning proposed, on the running server.
    Candidates {
        #[command(subcommand)]
        command: super::memory_candidates::Command,
    },
}

/// Which scope: `--scope project|agent|user|session` with `--subject` (the agent, user or
/// session id).
#[derive(Debug, clap::Args)]
pub struct ScopeArgs {
    /// project, agent, user or session (list and search: every scope when absent; add: project).
    #[arg(long, value_name = "KIND")]
    scope: Option<String>,
    /// The agent, user or session id of the scope.
    #[arg(long, value_name = "ID")]
    subject: Option<String>,
}

impl ScopeArgs {
    fn scope(&self) -> anyhow::Result<Option<MemoryScope>> {
        let Some(kind) = &self.scope else {
            return match self.subject {
                Some(_) => Err(anyhow!("--subject needs --scope")),
                None => Ok(None),
            };
        };
        let kind =
            ScopeKind::parse(kind).ok_or_else(|| anyhow!("unknown scope `{kind}` (project, agent, user, session)"))?;
        Ok(Some(MemoryScope { kind, subject_id: self.subject.clone() }))
    }

    fn filter(&self, kinds: Vec<String>) -> anyhow::Result<MemoryFilter> {
        Ok(MemoryFilter { scopes: self.scope()?.into_iter().collect(), kinds })
    }
}

/// Run one `polpo memory` command.
pub fn run(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Items(command) => run_items(global, command),
        Command::Candidates { command } => super::memory_candidates::run(global, command),
    }
}

/// Run one `polpo memory` command on the items.
fn run_items(global: &Global, command: Items) -> anyhow::Result<ExitCode> {
    let project = global.load()?;
    let settings = project.settings();
    let url = std::env::var("DATABASE_URL").ok().or_else(|| settings.database_url.clone());
    let kind = StoreKind::parse(settings.storage().as_str()).map_err(|e| anyhow!("{}: {e}", e.code()))?;
    let root = project.root.clone();
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let store = polpo_store::open_store(kind, &root, url.as_deref(), Arc::new(SystemClock))
            .await
            .map_err(|e| anyhow!("{}: {e}", e.code()))?;
        let memory = polpo_assemble::project_memory(settings, store.memory.clone())?;
        let fail = |e: polpo_memory::MemoryError| anyhow!("{}: {e}", e.code());
        match command {
            Items::List { scope, kinds, limit, cursor, json } => {
                let page = PageRequest { after: cursor.map(Cursor::from_wire), limit };
                let page = memory.list_page(&scope.filter(kinds)?, &page).await.map_err(fail)?;
                let next = page.next.as_ref().map(Cursor::as_str);
                if json {
                    return super::print_json(&serde_json::json!({"items": page.items, "nextCursor": next}));
                }
                page.items.iter().for_each(print_item);
                if let Some(next) = next {
                    println!("more: --cursor {next}");
                }
            }
            Items::Search { query, scope, kinds, limit, json } => {
                let request = SearchRequest { query, filter: scope.filter(kinds)?, max_results: Some(limit) };
                let found = memory.search(&request).await.map_err(fail)?;
                for warning in &found.warnings {
                    eprintln!("warning: {}: {}", warning.code, warning.message);
                }
                if json {
                    return super::print_json(&found);
                }
                found.results.iter().for_each(|hit| print_item(&hit.item));
            }
            Items::Add { content, kind, scope, id } => {
                let scope = scope.scope()?.unwrap_or_else(MemoryScope::project);
                let new = NewMemoryItem { id, scope, kind, content, source: "cli".into() };
                let written = memory.create(new).await.map_err(fail)?;
                println!("{}", written.item.id);
            }
            Items::Rm { id, expected_revision } => {
                if !memory.delete(&id, expected_revision).await.map_err(fail)? {
                    return Err(anyhow!("not_found: memory item `{id}` not found"));
                }
                println!("forgot {id}");
            }
            Items::Reindex => match memory.identity() {
                Some(_) => {
                    let report = memory.reindex(&MemoryFilter::default()).await.map_err(fail)?;
                    println!("embedded {}, skipped {}", report.embedded, report.skipped);
                }
                None => {
                    return Err(anyhow!(
                        "feature_unavailable: no embedding provider is configured (settings.memory.embedding), so there are no vectors to rebuild"
                    ));
                }
            },
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn print_item(item: &MemoryItem) {
    let subject = item.scope.subject_id.as_deref().map(|s| format!(":{s}")).unwrap_or_default();
    println!("{}\t{}{subject}\t{}\t{}", item.id, item.scope.kind.as_str(), item.kind, item.content.replace('\n', " "));
}
