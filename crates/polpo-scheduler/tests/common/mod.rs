//! What the scheduler's tests set up alike: a project whose agent `reporter` has these
//! schedules, and one server's run manager on a store shared through a `ManualClock`.

// Each test binary uses a part of it.
#![allow(dead_code)]

use polpo_engine::runs::{RunManager, RunOptions};
use polpo_engine::{Loaded, Runtime};
use polpo_llm::Providers;
use polpo_store::{ManualClock, StoreKind, open_store};
use polpo_testkit::{FakeLlm, ProjectFixture};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use tempfile::TempDir;

/// A project whose agent `reporter` (model `openai/fake-model`) has `schedules`, by id.
pub fn project(schedules: &[(&str, Value)]) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), json!({}))
        .unwrap()
        .agent("reporter", json!({"model": "openai/fake-model"}), "You report.")
        .unwrap();
    std::fs::create_dir_all(dir.path().join(".polpo/schedules")).unwrap();
    for (id, schedule) in schedules {
        std::fs::write(dir.path().join(format!(".polpo/schedules/{id}.json")), schedule.to_string()).unwrap();
    }
    dir
}

/// One server's run manager: a store on `kind` at `url` (time from `clock`), its runtime over
/// `dir`'s project with `llm` as the model, leases long enough never to lapse by themselves.
pub async fn runs(
    dir: &TempDir,
    kind: StoreKind,
    url: Option<&str>,
    clock: &Arc<ManualClock>,
    llm: &FakeLlm,
) -> Arc<RunManager> {
    let project = polpo_project::load_project(dir.path()).unwrap();
    let store = open_store(kind, dir.path(), url, clock.clone()).await.unwrap();
    let runtime =
        Arc::new(Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), llm.openai_env()), store));
    RunManager::new(runtime, RunOptions { lease_ttl: std::time::Duration::from_secs(3600) })
}
