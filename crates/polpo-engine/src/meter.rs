//! Measuring the runtime's own cost: time a request spends *outside* the model and the tools.
//!
//! The server reports `x-polpo-overhead-ms` on every response. Rather than thread a stopwatch
//! through every layer, the few places that wait on something external (a model stream, a
//! tool call, a hook handler) wrap that wait in [`external`]; the caller runs the whole request
//! inside a [`Meter::scope`] and subtracts. Outside a scope, `external` is a plain pass-through.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

tokio::task_local! {
    static METER: Arc<Counters>;
}

/// What one scope accumulates.
#[derive(Debug, Default)]
struct Counters {
    /// External wall time so far.
    nanos: AtomicU64,
    /// External waits in progress; only the outermost one counts, so a wait nested in another
    /// (a tool inside a concurrent batch) is not counted twice.
    depth: AtomicU32,
}

/// Wall time of a request, split into external waits and the runtime's own share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overhead {
    /// Everything, start to finish.
    pub total: Duration,
    /// Time spent waiting on models, tools and hook handlers.
    pub external: Duration,
}

impl Overhead {
    /// The runtime's own time: total minus external waits.
    pub fn own(&self) -> Duration {
        self.total.saturating_sub(self.external)
    }
}

/// A shared accumulator for one request, readable while the request is still running (a
/// streaming response reports overhead at its end, from another task).
#[derive(Debug, Clone, Default)]
pub struct Meter {
    counters: Arc<Counters>,
    started: Option<Instant>,
}

impl Meter {
    /// A meter whose clock starts now.
    pub fn start() -> Self {
        Self { counters: Arc::default(), started: Some(Instant::now()) }
    }

    /// Run `fut` with its external waits counted on this meter.
    pub async fn scope<F: Future>(&self, fut: F) -> F::Output {
        METER.scope(self.counters.clone(), fut).await
    }

    /// The split so far.
    pub fn read(&self) -> Overhead {
        let total = self.started.map(|s| s.elapsed()).unwrap_or_default();
        Overhead { total, external: Duration::from_nanos(self.counters.nanos.load(Ordering::Relaxed)) }
    }
}

/// Await `fut`, counting its wall time as external when inside a [`Meter::scope`].
/// Waits nested inside another external wait are not counted again.
pub async fn external<F: Future>(fut: F) -> F::Output {
    let _wait = METER.try_with(|m| Wait::begin(m.clone())).ok();
    fut.await
}

/// One external wait in progress; counted when it ends, also when the future is dropped
/// half-way (a cancelled model stream), so the depth never leaks.
struct Wait {
    counters: Arc<Counters>,
    outermost: bool,
    start: Instant,
}

impl Wait {
    fn begin(counters: Arc<Counters>) -> Self {
        let outermost = counters.depth.fetch_add(1, Ordering::Relaxed) == 0;
        Self { counters, outermost, start: Instant::now() }
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        self.counters.depth.fetch_sub(1, Ordering::Relaxed);
        if self.outermost {
            self.counters
                .nanos
                .fetch_add(u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn external_waits_are_subtracted_and_only_inside_a_scope() {
        let meter = Meter::start();
        meter
            .scope(async {
                // Two overlapping waits inside an outer one count once, not three times.
                external(async {
                    let nested = || external(tokio::time::sleep(Duration::from_millis(20)));
                    tokio::join!(nested(), nested());
                })
                .await;
            })
            .await;
        // Outside the scope nothing is counted.
        external(tokio::time::sleep(Duration::from_millis(5))).await;
        let o = meter.read();
        assert!(o.external >= Duration::from_millis(20), "{o:?}");
        assert!(o.external < Duration::from_millis(40) && o.external <= o.total, "{o:?}");
        assert!(o.own() < o.total);
    }
}
