//! Handing memory back to the system after a burst of connections.
//!
//! glibc's allocator keeps what freed connections used inside its per-thread arenas: after
//! 2,000 connections closed, the server stayed 12 MiB bigger than before they opened (issue
//! #13). [`Release`] watches the number of open connections and, once it has fallen to a
//! quarter of a large peak (and again when the rest have closed), asks the allocators to return
//! their free pages, off the async threads: glibc's (`malloc_trim`, a few milliseconds; it holds
//! what C libraries such as SQLite allocate, and Rust's unless the program chose another
//! allocator), then the program's own `#[global_allocator]` through what it registered with
//! [`set_release`] (the `polpo` binary: a jemalloc purge).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Peaks smaller than this are not worth a trim.
pub const MIN_PEAK: usize = 256;

/// Tracks open connections and releases memory when a large peak has drained.
#[derive(Debug, Default)]
pub struct Release {
    open: AtomicUsize,
    peak: AtomicUsize,
    /// Connections of a released peak were still open: release again when they have closed.
    residual: AtomicBool,
}

impl Release {
    /// A connection opened.
    pub fn opened(&self) {
        let open = self.open.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(open, Ordering::Relaxed);
    }

    /// A connection closed; when the open count has fallen to a quarter of a peak of at least
    /// [`MIN_PEAK`], the free memory is returned (once per peak), and once more when the
    /// connections still open then have closed too.
    pub fn closed(&self) {
        let open = self.open.fetch_sub(1, Ordering::Relaxed).saturating_sub(1);
        let peak = self.peak.load(Ordering::Relaxed);
        let drained = peak >= MIN_PEAK
            && open <= peak / 4
            && self.peak.compare_exchange(peak, open, Ordering::Relaxed, Ordering::Relaxed).is_ok();
        if drained {
            self.residual.store(open > 0, Ordering::Relaxed);
        }
        if drained || (open == 0 && self.residual.swap(false, Ordering::Relaxed)) {
            tokio::task::spawn_blocking(release);
        }
    }
}

/// The program's global allocator's way to return free pages, when it is not glibc's.
static GLOBAL_RELEASE: OnceLock<fn()> = OnceLock::new();

/// Registers how the program's `#[global_allocator]` returns its free pages to the system, run
/// after glibc's `malloc_trim` whenever a large peak of connections has drained: an allocator
/// such as jemalloc keeps what closed connections used (14–17 MiB after 2,000, #22) until the
/// process allocates again, which an idle server does not. The first registration counts.
pub fn set_release(release: fn()) {
    // A second registration is ignored: one program has one global allocator.
    let _ = GLOBAL_RELEASE.set(release);
}

/// Return every allocator's free pages to the system.
fn release() {
    trim();
    if let Some(global) = GLOBAL_RELEASE.get() {
        global();
    }
}

/// Return the allocator's free pages to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() {
    // SAFETY: malloc_trim takes no pointers and only walks the allocator's own state under
    // its locks; any thread may call it at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other allocators return memory on their own.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_drained_peak_is_released_once() {
        let r = Release::default();
        for _ in 0..MIN_PEAK {
            r.opened();
        }
        for _ in 0..MIN_PEAK * 3 / 4 {
            r.closed();
        }
        assert_eq!(r.peak.load(Ordering::Relaxed), MIN_PEAK / 4, "the peak restarts from what is open");
        assert!(r.residual.load(Ordering::Relaxed), "the rest is released when it closes");
        for _ in 0..MIN_PEAK / 4 - 1 {
            r.closed();
        }
        assert_eq!(r.peak.load(Ordering::Relaxed), MIN_PEAK / 4, "no second trim for the same peak");
        assert!(r.residual.load(Ordering::Relaxed));
        r.closed();
        assert!(!r.residual.load(Ordering::Relaxed), "released once all closed");
    }
}
