//! The process lock of the file store: one `flock` on `.polpo/.runtime/store.lock`, held for
//! the store's lifetime and dropped by the kernel when the process dies (even by SIGKILL), so a
//! crash never leaves a stale lock behind.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::error::StoreError;

/// A held store lock; released on drop.
#[derive(Debug)]
pub(crate) struct StoreLock {
    _flock: Flock<File>,
}

impl StoreLock {
    /// Take the lock without waiting: a second process gets `store_locked` at once instead of
    /// hanging or interleaving its writes with ours.
    pub(crate) fn acquire(data_dir: &Path) -> Result<Self, StoreError> {
        let runtime = data_dir.join(".runtime");
        std::fs::create_dir_all(&runtime).map_err(|e| StoreError::io(&runtime, e))?;
        let path: PathBuf = runtime.join("store.lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| StoreError::io(&path, e))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(flock) => Ok(StoreLock { _flock: flock }),
            Err((_, Errno::EWOULDBLOCK)) => Err(StoreError::Locked { path }),
            Err((_, errno)) => Err(StoreError::io(&path, std::io::Error::from(errno))),
        }
    }
}
