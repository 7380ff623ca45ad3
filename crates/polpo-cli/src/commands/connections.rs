//! `polpo connections list|test <id>`: the project's Connections (`.polpo/connections/`).
//! `test` resolves the Connection's secrets from the vault (and fetches an OAuth2 token) and,
//! when the Connection has a `testUrl`, requests it; it prints header names, never values.

use super::Global;
use polpo_assemble::project_connections;
use polpo_connections::Auth;
use polpo_core::redact::Redactor;
use polpo_tools::net::{NetworkPolicy, OutboundRequest, send_guarded};
use polpo_vault::PROJECT_SCOPE;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::process::ExitCode;

/// `polpo connections …`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List Connections: id, provider, scopes and auth kind.
    List,
    /// Resolve a Connection's credentials (and request its `testUrl`) without printing them.
    Test {
        /// The Connection id.
        id: String,
        /// Resolve as this agent (its own vault entries first).
        #[arg(long, default_value = PROJECT_SCOPE)]
        agent: String,
    },
}

/// Run a `connections` subcommand.
pub fn run(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    let connections = project_connections(&global.root()?, &Redactor::new());
    match command {
        Command::List => {
            let all = connections.list()?;
            if all.is_empty() {
                println!("no connections");
            }
            for c in all {
                let kind = match c.auth {
                    Auth::Bearer { .. } => "bearer",
                    Auth::Header { .. } => "header",
                    Auth::Basic { .. } => "basic",
                    Auth::OAuth2ClientCredentials { .. } => "oauth2_client_credentials",
                };
                println!("{} provider={} scopes=[{}] auth={kind}", c.id, c.provider, c.scopes.join(","));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Test { id, agent } => {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            polpo_llm::install_crypto_provider();
            runtime.block_on(async {
                let connection = connections.get(&id)?;
                let headers = connections.headers(&id, &agent).await?;
                let names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
                println!("{id}: credentials resolved (headers: {})", names.join(", "));
                let Some(url) = connection.test_url else { return Ok(ExitCode::SUCCESS) };
                let mut map = HeaderMap::new();
                for (name, value) in &headers {
                    map.insert(HeaderName::from_bytes(name.as_bytes())?, HeaderValue::from_str(value)?);
                }
                let request =
                    OutboundRequest { method: reqwest::Method::GET, url: url.parse()?, headers: map, body: None };
                let status = send_guarded(request, &NetworkPolicy::default()).await?.status();
                println!("{id}: GET {url} answered HTTP {}", status.as_u16());
                Ok(if status.is_success() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
            })
        }
    }
}
