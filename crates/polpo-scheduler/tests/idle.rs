//! What the scheduler costs when nothing is due, and that it still fires on time: `polpo
//! serve`'s loop ([`Scheduler::run`]) sleeps until the earliest next occurrence instead of
//! reading every schedule's records twice a second, and a project edit wakes it. Real time
//! (the system clock), a real SQLite store whose record calls are counted, the fake model.
//!
//! The counts are printed; before this loop, each schedule cost one cursor read and one
//! 100-record listing every 500 ms whether due or not.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod support;

use async_trait::async_trait;
use polpo_engine::events::bus::Delivery;
use polpo_engine::runs::{RunManager, RunOptions};
use polpo_engine::{Loaded, Runtime};
use polpo_llm::Providers;
use polpo_scheduler::PASS_EVERY;
use polpo_store::{
    ImportOutcome, JsonText, Page, PageRequest, Record, RecordStore, StoreError, StoreKind, SystemClock, open_store,
};
use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A record store that counts the calls reaching the real one.
struct Counted {
    inner: Arc<dyn RecordStore>,
    reads: AtomicUsize,
    writes: AtomicUsize,
}

#[async_trait]
impl RecordStore for Counted {
    async fn put_record(&self, c: &str, id: &str, value: Value, expected: Option<u64>) -> Result<Record, StoreError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.put_record(c, id, value, expected).await
    }
    async fn get_record(&self, c: &str, id: &str) -> Result<Option<Record>, StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.get_record(c, id).await
    }
    async fn list_records(&self, c: &str, page: &PageRequest) -> Result<Page<Record>, StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.list_records(c, page).await
    }
    async fn delete_record(&self, c: &str, id: &str, expected: Option<u64>) -> Result<bool, StoreError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.delete_record(c, id, expected).await
    }
    async fn collections(&self) -> Result<Vec<String>, StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.collections().await
    }
    async fn import_record(&self, record: &Record) -> Result<ImportOutcome, StoreError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.import_record(record).await
    }
    async fn append_log(&self, c: &str, log: &str, seq: u64, entry: &JsonText) -> Result<(), StoreError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.append_log(c, log, seq, entry).await
    }
    async fn read_log(&self, c: &str, log: &str) -> Result<Vec<Value>, StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.read_log(c, log).await
    }
    async fn clear_log(&self, c: &str, log: &str) -> Result<(), StoreError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.clear_log(c, log).await
    }
}

fn schedule(expression: &str) -> Value {
    json!({
        "timing": {"kind": "cron", "expression": expression, "timezone": "UTC"},
        "invocation": {"surface": "agent", "agentName": "reporter", "input": {"prompt": "Report."}},
        "policy": {"maxConcurrency": 100}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_scheduler_reads_nothing_and_an_edit_wakes_it() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start_repeating([Turn::text("reported")]).await.unwrap();
    // Three schedules that fire once a year (New Year's midnight): nothing due in the test.
    let yearly = ["a", "b", "c"].map(|id| (id, schedule("0 0 0 1 1 *")));
    let dir = common::project(&yearly);
    let mut store = open_store(StoreKind::Sqlite, dir.path(), None, Arc::new(SystemClock)).await.unwrap();
    let counted =
        Arc::new(Counted { inner: store.records.clone(), reads: AtomicUsize::new(0), writes: AtomicUsize::new(0) });
    store.records = counted.clone();
    let project = polpo_project::load_project(dir.path()).unwrap();
    let runtime =
        Arc::new(Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), llm.openai_env()), store));
    let scheduler = support::scheduler(RunManager::new(runtime.clone(), RunOptions::default()));
    let (_, mut events) = runtime.events().subscribe_after(None);
    let _running = scheduler.spawn(PASS_EVERY);

    // The measured window: 2 s of an idle server.
    let window = Duration::from_secs(2);
    let (began, cpu) = (Instant::now(), process_cpu());
    tokio::time::sleep(window).await;
    let (reads, writes) = (counted.reads.load(Ordering::SeqCst), counted.writes.load(Ordering::SeqCst));
    let cpu = process_cpu().saturating_sub(cpu);
    println!(
        "idle {window:?}: {reads} record reads, {writes} writes (3 schedules, first pass included); test process CPU {cpu:?}"
    );
    assert!(began.elapsed() < PASS_EVERY, "the window is shorter than a full pass");
    // One full pass at start: per schedule a claim listing (take-over) and its cursor read,
    // and the cursor written on first sight; nothing after it.
    assert_eq!((reads, writes), (6, 3), "an idle scheduler reads the store once, at its first pass");

    // An edit adds an every-second schedule; the wake makes the sleeping loop see it at once
    // (far sooner than the next full pass), and it fires on its seconds.
    std::fs::write(dir.path().join(".polpo/schedules/tick.json"), schedule("* * * * * *").to_string()).unwrap();
    runtime.reload(Loaded::new(polpo_project::load_project(dir.path()).unwrap()).unwrap());
    scheduler.wake();
    let woken = Instant::now();
    let mut fired = Vec::new();
    while fired.len() < 2 {
        let delivery =
            tokio::time::timeout(PASS_EVERY / 3, events.recv()).await.expect("a fire well before a full pass");
        if let Some(Delivery::Event(e)) = delivery
            && e.event == "schedule:fired"
        {
            assert_eq!(e.payload()["scheduleId"], "tick", "{e:?}");
            fired.push(e.payload()["scheduledFor"].as_str().unwrap().parse::<chrono::DateTime<chrono::Utc>>().unwrap());
        }
    }
    assert_eq!(fired[1] - fired[0], chrono::Duration::seconds(1), "consecutive seconds: {fired:?}");
    println!("after the wake: two fires in {:?}", woken.elapsed());
    scheduler.settled().await;
}

/// This process's CPU time (user + system) so far, from `/proc/self/stat`.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(") ").map(|(_, rest)| rest.split(' ').collect()).unwrap_or_default();
    let ticks: u64 = fields.get(11..13).map_or(0, |f| f.iter().filter_map(|t| t.parse::<u64>().ok()).sum());
    Duration::from_millis(ticks * 10)
}
