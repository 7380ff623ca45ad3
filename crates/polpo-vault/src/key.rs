//! The vault key: 32 bytes from `POLPO_VAULT_KEY`, or from a key file kept outside the project
//! (`~/.polpo/vault.key`), created with mode 0600 the first time a vault is written.

use crate::VaultError;
use aes_gcm::aead::{KeyInit, OsRng};
use aes_gcm::{Aes256Gcm, Key};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The environment variable holding the key (64 hex characters).
pub const KEY_ENV: &str = "POLPO_VAULT_KEY";

/// An AES-256 key. Its `Debug` never shows the bytes.
#[derive(Clone)]
pub struct VaultKey(Key<Aes256Gcm>);

impl std::fmt::Debug for VaultKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VaultKey(..)")
    }
}

/// Where a key may come from: the value of [`KEY_ENV`] and the user's home directory. Passed
/// in rather than read inside, so a test (or a server) decides what it sees.
#[derive(Debug, Clone, Default)]
pub struct KeySources {
    /// The value of `POLPO_VAULT_KEY`, when set.
    pub env: Option<String>,
    /// The home directory holding `.polpo/vault.key`, when known.
    pub home: Option<PathBuf>,
}

impl KeySources {
    /// The sources of this process: its environment and `$HOME`.
    pub fn from_env() -> Self {
        Self {
            env: std::env::var(KEY_ENV).ok().filter(|v| !v.trim().is_empty()),
            home: std::env::var_os("HOME").map(PathBuf::from),
        }
    }

    /// The key file's path (`~/.polpo/vault.key`).
    pub fn key_file(&self) -> Option<PathBuf> {
        self.home.as_ref().map(|h| h.join(".polpo").join("vault.key"))
    }

    /// The key, if one exists: the environment first, then the key file. Never creates one.
    pub fn load(&self) -> Result<VaultKey, VaultError> {
        if let Some(hex) = &self.env {
            return VaultKey::from_hex(hex);
        }
        match self.key_file() {
            Some(path) if path.exists() => read_key_file(&path),
            _ => Err(VaultError::KeyMissing),
        }
    }

    /// The key, creating the key file (0600, in a 0700 directory) when there is none yet: what
    /// `polpo vault set` uses, so the first secret stored makes the key.
    pub fn load_or_create(&self) -> Result<VaultKey, VaultError> {
        match self.load() {
            Err(VaultError::KeyMissing) => {
                let path = self.key_file().ok_or(VaultError::KeyMissing)?;
                create_key_file(&path)
            }
            other => other,
        }
    }
}

impl VaultKey {
    /// A key from 64 hex characters.
    pub fn from_hex(text: &str) -> Result<Self, VaultError> {
        let bytes = hex::decode(text.trim()).map_err(|_| VaultError::KeyInvalid)?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|_| VaultError::KeyInvalid)?;
        Ok(Self(Key::<Aes256Gcm>::from(bytes)))
    }

    /// A fresh random key.
    pub fn generate() -> Self {
        Self(Aes256Gcm::generate_key(OsRng))
    }

    /// The key as 64 hex characters (for the key file only).
    fn to_hex(&self) -> String {
        hex::encode(&self.0[..])
    }

    /// The cipher this key opens.
    pub(crate) fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new(&self.0)
    }
}

fn read_key_file(path: &Path) -> Result<VaultKey, VaultError> {
    let text = fs::read_to_string(path).map_err(|e| VaultError::Io(format!("cannot read the vault key file: {e}")))?;
    VaultKey::from_hex(&text)
}

/// Write a new key to `path` without ever exposing a partial file: a private temp file,
/// fsynced, then hard-linked into place (which fails if another process made the key first;
/// that key is then used).
fn create_key_file(path: &Path) -> Result<VaultKey, VaultError> {
    let io = |e: std::io::Error| VaultError::Io(format!("cannot create the vault key file: {e}"));
    let dir = path.parent().ok_or_else(|| VaultError::Io("the key file has no directory".into()))?;
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io)?;
    let key = VaultKey::generate();
    let tmp = dir.join(format!(".vault.key.tmp-{}", std::process::id()));
    let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io)?;
    let written = file.write_all(format!("{}\n", key.to_hex()).as_bytes()).and_then(|()| file.sync_all());
    drop(file);
    let linked = written.and_then(|()| fs::hard_link(&tmp, path));
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            polpo_project::fsx::sync_dir(dir).map_err(io)?;
            Ok(key)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_key_file(path),
        Err(e) => Err(io(e)),
    }
}
