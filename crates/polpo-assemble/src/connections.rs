//! The project's Connections (`.polpo/connections/`), for the runtime's tools and for
//! `polpo connections`.

use polpo_connections::Connections;
use polpo_core::redact::Redactor;
use polpo_tools::net::NetworkPolicy;
use polpo_vault::{KeySources, Vault};
use std::path::Path;

/// The project's Connections, their secrets from its vault (this process's key), feeding
/// `redactor`.
pub fn project_connections(root: &Path, redactor: &Redactor) -> Connections {
    let polpo_dir = root.join(".polpo");
    let vault = KeySources::from_env().load().map(|key| Vault::open(&polpo_dir, key, redactor.clone()));
    Connections::new(&polpo_dir, vault, NetworkPolicy::default())
}
