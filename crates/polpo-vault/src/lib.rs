//! The project's credential vault: `.polpo/vault.enc`, encrypted with AES-256-GCM.
//!
//! Secrets that tools, Connections and MCP servers need are kept here rather than in config
//! files. The file is unreadable without the key (see [`key`]); every write replaces it
//! atomically and durably (temp file, fsync, rename, fsync of the directory), under an
//! exclusive lock so two writers never lose each other's entries. Values leave this crate only
//! through [`Vault::lookup`] and [`Vault::interpolate`] (to the code that authenticates), and as
//! the redaction list ([`Vault::refresh`]); listings, errors and `Debug` never carry one.

pub mod entry;
pub mod key;

pub use entry::{Entry, EntryMeta, PROJECT_SCOPE};
pub use key::{KEY_ENV, KeySources, VaultKey};

use aes_gcm::aead::{Aead, AeadCore, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use nix::fcntl::{Flock, FlockArg};
use polpo_core::redact::Redactor;
use polpo_project::fsx;
use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

/// The file's first bytes: a format tag, also authenticated as associated data.
const MAGIC: &[u8] = b"POLPO-VAULT\x01";
/// AES-GCM nonce length.
const NONCE_BYTES: usize = 12;
/// Largest vault file read.
pub const MAX_VAULT_BYTES: u64 = 16 * 1024 * 1024;

/// Why a vault operation failed. No variant carries a credential value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VaultError {
    /// Neither `POLPO_VAULT_KEY` nor `~/.polpo/vault.key` exists.
    #[error(
        "vault_key_missing: no vault key (set POLPO_VAULT_KEY or create ~/.polpo/vault.key with `polpo vault set`)"
    )]
    KeyMissing,
    /// The key is not 64 hex characters.
    #[error("vault_key_invalid: the vault key must be 64 hex characters (32 bytes)")]
    KeyInvalid,
    /// The file does not decrypt with this key, or is not a vault file.
    #[error("vault_unreadable: {0}")]
    Unreadable(String),
    /// Reading or writing the file failed.
    #[error("vault_io: {0}")]
    Io(String),
    /// An entry failed validation.
    #[error("vault_entry_invalid: {0}")]
    InvalidEntry(String),
    /// No entry for this agent and service.
    #[error("vault_entry_not_found: no vault entry `{service}` for agent `{agent}`")]
    NotFound {
        /// The agent asked for.
        agent: String,
        /// The service asked for.
        service: String,
    },
    /// A `${vault:service:key}` reference is malformed or names a missing credential.
    #[error("vault_reference_invalid: {0}")]
    Reference(String),
}

impl VaultError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            VaultError::KeyMissing => "vault_key_missing",
            VaultError::KeyInvalid => "vault_key_invalid",
            VaultError::Unreadable(_) => "vault_unreadable",
            VaultError::Io(_) => "vault_io",
            VaultError::InvalidEntry(_) => "vault_entry_invalid",
            VaultError::NotFound { .. } => "vault_entry_not_found",
            VaultError::Reference(_) => "vault_reference_invalid",
        }
    }
}

/// The vault of one project, opened with one key.
#[derive(Debug, Clone)]
pub struct Vault {
    path: PathBuf,
    key: VaultKey,
    redactor: Redactor,
}

impl Vault {
    /// The vault at `<polpo_dir>/vault.enc` (which need not exist yet), feeding `redactor`.
    pub fn open(polpo_dir: &Path, key: VaultKey, redactor: Redactor) -> Self {
        Self { path: polpo_dir.join("vault.enc"), key, redactor }
    }

    /// The encrypted file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Metadata of every entry (of `agent` only, when given), by agent then service.
    pub fn list(&self, agent: Option<&str>) -> Result<Vec<EntryMeta>, VaultError> {
        Ok(self.read()?.iter().filter(|e| agent.is_none_or(|a| e.agent == a)).map(Entry::meta).collect())
    }

    /// Add or replace the entry for its agent and service.
    pub fn set(&self, entry: Entry) -> Result<EntryMeta, VaultError> {
        entry.check()?;
        let meta = entry.meta();
        self.update(|entries| {
            entries.retain(|e| !(e.agent == entry.agent && e.service == entry.service));
            entries.push(entry);
            Ok(())
        })?;
        Ok(meta)
    }

    /// Change the type or label of an existing entry and merge `credentials` into it.
    pub fn patch(
        &self,
        agent: &str,
        service: &str,
        kind: Option<String>,
        label: Option<String>,
        credentials: BTreeMap<String, String>,
    ) -> Result<EntryMeta, VaultError> {
        let mut meta = None;
        self.update(|entries| {
            let entry = entries
                .iter_mut()
                .find(|e| e.agent == agent && e.service == service)
                .ok_or_else(|| VaultError::NotFound { agent: agent.into(), service: service.into() })?;
            entry.kind = kind.unwrap_or_else(|| entry.kind.clone());
            entry.label = label.or_else(|| entry.label.clone());
            entry.credentials.extend(credentials);
            entry.check()?;
            meta = Some(entry.meta());
            Ok(())
        })?;
        meta.ok_or_else(|| VaultError::NotFound { agent: agent.into(), service: service.into() })
    }

    /// Remove the entry of `agent` and `service`; `false` when there was none.
    pub fn remove(&self, agent: &str, service: &str) -> Result<bool, VaultError> {
        let mut removed = false;
        self.update(|entries| {
            let before = entries.len();
            entries.retain(|e| !(e.agent == agent && e.service == service));
            removed = entries.len() != before;
            Ok(())
        })?;
        Ok(removed)
    }

    /// The value of credential `key` of `service`, for `agent`: its own entry first, then the
    /// project-wide one ([`PROJECT_SCOPE`]).
    pub fn lookup(&self, agent: &str, service: &str, key: &str) -> Result<String, VaultError> {
        let entries = self.read()?;
        let entry = [agent, PROJECT_SCOPE]
            .iter()
            .find_map(|a| entries.iter().find(|e| e.agent == *a && e.service == service))
            .ok_or_else(|| VaultError::NotFound { agent: agent.into(), service: service.into() })?;
        entry
            .credentials
            .get(key)
            .cloned()
            .ok_or_else(|| VaultError::Reference(format!("vault entry `{service}` has no credential `{key}`")))
    }

    /// `text` with every `${vault:service:key}` replaced by its value for `agent` (how
    /// `mcpServers` commands, arguments, environment and headers name secrets).
    pub fn interpolate(&self, agent: &str, text: &str) -> Result<String, VaultError> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("${vault:") {
            out.push_str(&rest[..start]);
            let tail = &rest[start + "${vault:".len()..];
            let end = tail.find('}').ok_or_else(|| VaultError::Reference("unterminated `${vault:…}`".into()))?;
            let (service, key) = parse_reference(&tail[..end])?;
            out.push_str(&self.lookup(agent, service, key)?);
            rest = &tail[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// Refill the redaction list with every value in the vault. Called at start-up and after
    /// each write, so a secret is redacted from the moment it is stored.
    pub fn refresh(&self) -> Result<(), VaultError> {
        let entries = self.read()?;
        self.redactor.replace(entries.into_iter().flat_map(|e| e.credentials.into_values()));
        Ok(())
    }

    /// The redaction list this vault feeds.
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Every entry, decrypted; none when the file does not exist yet.
    fn read(&self) -> Result<Vec<Entry>, VaultError> {
        let bytes = match fsx::read_bounded(&self.path, MAX_VAULT_BYTES) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(VaultError::Io(format!("cannot read {}: {e}", self.path.display()))),
        };
        let plain = decrypt(&self.key, &bytes)?;
        serde_json::from_slice(&plain).map_err(|_| VaultError::Unreadable("the decrypted vault is not valid".into()))
    }

    /// Read, change and write back under the vault's exclusive lock, then refresh the
    /// redaction list.
    fn update(&self, change: impl FnOnce(&mut Vec<Entry>) -> Result<(), VaultError>) -> Result<(), VaultError> {
        let io = |e: std::io::Error| VaultError::Io(format!("cannot write {}: {e}", self.path.display()));
        let dir = self.path.parent().ok_or_else(|| VaultError::Io("the vault path has no directory".into()))?;
        std::fs::create_dir_all(dir).map_err(io)?;
        let lock_file =
            OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(".vault.lock")).map_err(io)?;
        let _lock = Flock::lock(lock_file, FlockArg::LockExclusive).map_err(|(_, e)| io(e.into()))?;
        let mut entries = self.read()?;
        change(&mut entries)?;
        entries.sort_by(|a, b| (&a.agent, &a.service).cmp(&(&b.agent, &b.service)));
        let plain = serde_json::to_vec(&entries).map_err(|e| VaultError::Io(e.to_string()))?;
        fsx::write_atomic(&self.path, &encrypt(&self.key, &plain)?).map_err(io)?;
        self.redactor.replace(entries.into_iter().flat_map(|e| e.credentials.into_values()));
        Ok(())
    }
}

/// `service:key` of a `${vault:service:key}` reference.
pub fn parse_reference(inner: &str) -> Result<(&str, &str), VaultError> {
    match inner.split_once(':') {
        Some((service, key)) if entry::valid_name(service) && entry::valid_name(key) => Ok((service, key)),
        _ => Err(VaultError::Reference(format!("`${{vault:{inner}}}` must be `${{vault:service:key}}`"))),
    }
}

fn encrypt(key: &VaultKey, plain: &[u8]) -> Result<Vec<u8>, VaultError> {
    let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
    let sealed = key
        .cipher()
        .encrypt(&nonce, Payload { msg: plain, aad: MAGIC })
        .map_err(|_| VaultError::Io("encryption failed".into()))?;
    let mut out = Vec::with_capacity(MAGIC.len() + NONCE_BYTES + sealed.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&sealed);
    Ok(out)
}

fn decrypt(key: &VaultKey, bytes: &[u8]) -> Result<Vec<u8>, VaultError> {
    let body = bytes
        .strip_prefix(MAGIC)
        .filter(|b| b.len() > NONCE_BYTES)
        .ok_or_else(|| VaultError::Unreadable("not a Polpo vault file".into()))?;
    let (nonce, sealed) = body.split_at(NONCE_BYTES);
    let nonce: [u8; NONCE_BYTES] =
        nonce.try_into().map_err(|_| VaultError::Unreadable("not a Polpo vault file".into()))?;
    key.cipher()
        .decrypt(&Nonce::from(nonce), Payload { msg: sealed, aad: MAGIC })
        .map_err(|_| VaultError::Unreadable("the vault does not decrypt with this key".into()))
}
