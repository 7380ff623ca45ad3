//! The task and mission part of the conformance suite: each `async fn` takes a fresh store of
//! one backend (stamped out per backend by `conformance!` in `conformance.rs`).

use std::collections::HashSet;
use std::time::Duration;

use chrono::Duration as Span;
use polpo_core::tasks::{
    FailReason, Mission, MissionEvent, MissionStatus, Task, TaskEvent, TaskStatus, transition, transition_mission,
};
use polpo_store::{AgentLimits, Clock, ImportOutcome, MissionFilter, PageRequest, StoreError, StoredTask, TaskFilter};
use serde_json::json;

use crate::support::{TestStore, start_time};

fn code<T: std::fmt::Debug>(r: Result<T, StoreError>) -> &'static str {
    r.unwrap_err().code()
}

fn task(title: &str) -> Task {
    Task::new("", title, format!("do {title}"), start_time())
}

fn mission(name: &str) -> Mission {
    serde_json::from_value(json!({
        "id": "", "name": name, "status": "draft",
        "createdAt": "2000-01-01T00:00:00Z", "updatedAt": "2000-01-01T00:00:00Z"
    }))
    .unwrap()
}

/// Apply a core event and store the result at the task's revision.
async fn step(t: &TestStore, stored: &StoredTask, event: TaskEvent) -> Result<StoredTask, StoreError> {
    let next = transition(&stored.task, &event, t.clock.now()).unwrap();
    t.store.tasks.update_task(next, stored.revision).await
}

pub async fn tasks_round_trip_and_move_only_along_the_table(t: &TestStore) {
    let s = &t.store.tasks;
    let mut full: Task = serde_json::from_value(json!({
        "id": "", "title": "Write the report", "description": "three pages", "assignTo": "writer",
        "status": "draft", "dependsOn": [],
        "expectations": [{"type": "llm_review", "criteria": "clear", "threshold": 4.0,
                          "dimensions": [{"name": "clarity", "description": "reads well", "weight": 1.0, "rubric": {"1": "bad", "5": "good"}}]},
                         {"type": "file_exists", "paths": ["report.md"], "confidence": "estimated"}],
        "metrics": [{"name": "words", "command": "wc -w report.md", "threshold": 500.0}],
        "expectedOutcomes": [{"type": "file", "label": "report", "path": "report.md", "required": false, "tags": ["doc"]}],
        "outcomes": [], "maxRetries": 4, "maxDuration": 600000,
        "retryPolicy": {"escalateAfter": 2, "fallbackAgent": "senior", "escalateModel": "big"},
        "deadline": "2026-02-01T12:00:00Z", "priority": 2.5, "sideEffects": true, "user": "u1",
        "loop": "review-loop", "notifications": {"onDone": ["slack"]},
        "createdAt": "2000-01-01T00:00:00Z", "updatedAt": "2000-01-01T00:00:00Z"
    }))
    .unwrap();
    let created = s.create_task(full.clone()).await.unwrap();
    full.id = created.task.id.clone();
    full.created_at = start_time();
    full.updated_at = start_time();
    assert!(!created.task.id.is_empty(), "the store makes an id");
    assert_eq!(
        (created.task.clone(), created.revision, created.claim.clone()),
        (full, 1, None),
        "every field kept; times are the store's"
    );
    assert_eq!(s.get_task(&created.task.id).await.unwrap(), Some(created.clone()));
    assert_eq!(s.get_task("missing").await.unwrap(), None);

    t.clock.advance(Span::seconds(1));
    let queued = step(t, &created, TaskEvent::Queue).await.unwrap();
    assert_eq!(
        (queued.task.status, queued.revision, queued.task.updated_at),
        (TaskStatus::Pending, 2, start_time() + Span::seconds(1))
    );
    // A second writer still holding revision 1 loses, and nothing of its write lands.
    let mut stale = created.task.clone();
    stale.status = TaskStatus::Pending;
    stale.description = "lost".into();
    assert_eq!(code(s.update_task(stale, 1).await), "conflict");
    assert_eq!(s.get_task(&created.task.id).await.unwrap(), Some(queued.clone()));

    let mut skip = queued.task.clone();
    skip.status = TaskStatus::Done;
    assert_eq!(code(s.update_task(skip, queued.revision).await), "invalid_transition", "pending cannot jump to done");
    let mut rewired = queued.task.clone();
    rewired.depends_on = vec![created.task.id.clone()];
    assert_eq!(code(s.update_task(rewired, queued.revision).await), "invalid_input", "dependsOn is fixed");
    let mut missing = queued.task.clone();
    missing.id = "missing".into();
    assert_eq!(code(s.update_task(missing, 1).await), "not_found");

    // Two writers at the same revision: exactly one wins.
    let assign =
        |agent: &str| transition(&queued.task, &TaskEvent::Assign { agent: Some(agent.into()) }, start_time()).unwrap();
    let (a, b) = tokio::join!(s.update_task(assign("a"), queued.revision), s.update_task(assign("b"), queued.revision));
    assert_eq!([a.is_ok(), b.is_ok()].iter().filter(|ok| **ok).count(), 1);
    let assigned = a.or(b).unwrap();
    assert_eq!(s.get_task(&created.task.id).await.unwrap().unwrap().revision, 3);

    let mut dependent = task("Review the report");
    dependent.depends_on = vec!["ghost".into()];
    assert_eq!(code(s.create_task(dependent.clone()).await), "invalid_input", "unknown dependency");
    dependent.id = "self-ref".into();
    dependent.depends_on = vec!["self-ref".into()];
    assert_eq!(code(s.create_task(dependent.clone()).await), "invalid_input", "a task cannot depend on itself");
    dependent.depends_on = vec![created.task.id.clone(), created.task.id.clone()];
    assert_eq!(code(s.create_task(dependent.clone()).await), "invalid_input", "a dependency listed twice");
    dependent.depends_on = vec![created.task.id.clone()];
    assert_eq!(s.create_task(dependent.clone()).await.unwrap().task.id, "self-ref");
    assert_eq!(
        code(s.create_task(Task { title: "other".into(), ..dependent.clone() }).await),
        "conflict",
        "a taken id"
    );
    let mut running = task("Run");
    running.status = TaskStatus::InProgress;
    assert_eq!(code(s.create_task(running).await), "invalid_input", "new tasks start draft or pending");
    assert_eq!(code(s.create_task(Task { id: "../x".into(), ..task("x") }).await), "invalid_input");

    // Titles are unique among unfinished tasks only.
    assert_eq!(code(s.create_task(task("Write the report")).await), "conflict");
    let started = step(t, &assigned, TaskEvent::Start).await.unwrap();
    let failed = step(t, &started, TaskEvent::Fail { reason: FailReason::Crash }).await.unwrap();
    s.create_task(task("Write the report")).await.unwrap();

    // `polpo db copy`'s side: the same task again is a no-op, a different one a conflict.
    assert_eq!(s.import_task(&failed).await.unwrap(), ImportOutcome::AlreadyPresent);
    assert_eq!(code(s.import_task(&StoredTask { revision: 99, ..failed.clone() }).await), "conflict");
    let orphan =
        StoredTask { task: Task { id: "orphan".into(), depends_on: vec!["ghost".into()], ..task("orphan") }, ..failed };
    assert_eq!(code(s.import_task(&orphan).await), "invalid_input", "dependencies are imported first");
}

pub async fn a_batch_of_tasks_is_created_whole_or_not_at_all(t: &TestStore) {
    let s = &t.store.tasks;
    let stored = s.create_task(task("setup")).await.unwrap();
    let linked = |id: &str, deps: &[&str]| Task {
        id: id.into(),
        depends_on: deps.iter().map(|d| (*d).to_owned()).collect(),
        ..task(id)
    };
    // A dependent listed before its dependency, and one on a stored task.
    let plan = vec![linked("deploy", &["build"]), linked("build", &[&stored.task.id]), linked("docs", &[])];
    let created = s.create_tasks(plan).await.unwrap();
    assert_eq!(created.iter().map(|x| x.task.id.as_str()).collect::<Vec<_>>(), ["deploy", "build", "docs"]);
    assert!(created.iter().all(|x| x.revision == 1 && x.task.created_at == start_time()));

    let everything =
        || async { s.list_tasks(&TaskFilter::default(), &PageRequest::default()).await.unwrap().items.len() };
    let err = s.create_tasks(vec![linked("x", &["y"]), linked("y", &["z"]), linked("z", &["x"])]).await.unwrap_err();
    assert_eq!(err.code(), "invalid_input");
    assert!(err.to_string().contains("dependency_cycle"), "{err}");
    assert_eq!(everything().await, 4, "a cycle creates nothing");
    let clash = vec![linked("fresh", &[]), Task { id: "again".into(), ..task("docs") }];
    assert_eq!(code(s.create_tasks(clash).await), "conflict", "an unfinished task is already titled docs");
    assert_eq!(code(s.create_tasks(vec![linked("p", &[]), linked("p", &[])]).await), "invalid_input");
    assert_eq!(code(s.create_tasks(vec![linked("q", &["ghost"])]).await), "invalid_input");
    assert_eq!(code(s.create_tasks(vec![]).await), "invalid_input");
    assert_eq!(everything().await, 4, "a refused batch creates nothing");
    assert_eq!(s.get_task("fresh").await.unwrap(), None);

    let mut ready: Vec<String> = s
        .claim_ready("w", Duration::from_secs(60), 10, &AgentLimits::new())
        .await
        .unwrap()
        .into_iter()
        .map(|x| x.task.id)
        .collect();
    ready.sort();
    let mut expected = vec![stored.task.id.clone(), "docs".to_owned()];
    expected.sort();
    assert_eq!(ready, expected, "only the tasks without unfinished dependencies");
}

pub async fn tasks_list_by_mission_and_status_page_by_page(t: &TestStore) {
    let s = &t.store.tasks;
    let m = t.store.missions.create_mission(mission("mission-1")).await.unwrap().mission.id;
    let mut of_mission = Vec::new();
    for i in 0..9 {
        // Pairs share a millisecond, so the id breaks ties.
        if i % 2 == 0 {
            t.clock.advance(Span::milliseconds(1));
        }
        let mut new = task(&format!("t{i}"));
        if i % 3 != 0 {
            new.mission_id = Some(m.clone());
            new.group = Some("mission-1".into());
        }
        if i == 4 {
            new.status = TaskStatus::Draft;
        }
        let created = s.create_task(new).await.unwrap();
        if created.task.mission_id.is_some() {
            of_mission.push((created.task.created_at, created.task.id));
        }
    }
    of_mission.sort();
    of_mission.reverse();
    let filter = TaskFilter { mission_id: Some(m.clone()), ..Default::default() };
    let mut seen = Vec::new();
    let mut page = PageRequest::first(4);
    loop {
        let got = s.list_tasks(&filter, &page).await.unwrap();
        assert!(got.items.len() <= 4);
        seen.extend(got.items.iter().map(|x| (x.task.created_at, x.task.id.clone())));
        match got.next {
            Some(c) => page = PageRequest::after(c, 4),
            None => break,
        }
    }
    assert_eq!(seen, of_mission, "newest first, each task of the mission exactly once");
    let drafts = s
        .list_tasks(&TaskFilter { status: Some(TaskStatus::Draft), ..Default::default() }, &PageRequest::default())
        .await
        .unwrap();
    assert_eq!(drafts.items.iter().map(|x| x.task.title.as_str()).collect::<Vec<_>>(), ["t4"]);
    assert_eq!(s.list_tasks(&TaskFilter::default(), &PageRequest::default()).await.unwrap().items.len(), 9);
    let bogus = PageRequest::after(polpo_store::Cursor::from_wire("zz"), 3);
    assert_eq!(code(s.list_tasks(&filter, &bogus).await), "invalid_cursor");
    assert_eq!(code(s.create_task(Task { mission_id: Some("ghost".into()), ..task("orphan") }).await), "invalid_input");
}

pub async fn ready_tasks_are_claimed_once_in_priority_order(t: &TestStore) {
    let s = &t.store.tasks;
    let lease = Duration::from_secs(60);
    let a = s.create_task(task("a")).await.unwrap();
    let b = s.create_task(Task { depends_on: vec![a.task.id.clone()], ..task("b") }).await.unwrap();
    let c = s.create_task(Task { priority: 5.0, ..task("c") }).await.unwrap();
    let m = t.store.missions.create_mission(mission("later")).await.unwrap();
    let d = s.create_task(Task { mission_id: Some(m.mission.id.clone()), ..task("d") }).await.unwrap();
    s.create_task(Task { status: TaskStatus::Draft, ..task("e") }).await.unwrap();

    let first = s.claim_ready("w1", lease, 10, &AgentLimits::new()).await.unwrap();
    let ids = |v: &[StoredTask]| v.iter().map(|x| x.task.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&first), [c.task.id.as_str(), a.task.id.as_str()], "ready only, highest priority first");
    assert!(first.iter().all(|x| x.revision == 2 && x.claim.as_ref().map(|c| c.worker.as_str()) == Some("w1")));
    assert_eq!(first[0].claim.as_ref().unwrap().expires_at, start_time() + Span::seconds(60));
    assert!(
        s.claim_ready("w2", lease, 10, &AgentLimits::new()).await.unwrap().is_empty(),
        "claimed tasks are not offered again"
    );
    assert_eq!(code(step(t, &a, TaskEvent::Assign { agent: None }).await), "conflict", "a claim moves the revision");

    let mut a = first[1].clone();
    for e in [TaskEvent::Assign { agent: None }, TaskEvent::Start, TaskEvent::Submit, TaskEvent::Pass] {
        a = step(t, &a, e).await.unwrap();
    }
    assert_eq!(
        ids(&s.claim_ready("w2", lease, 10, &AgentLimits::new()).await.unwrap()),
        [b.task.id.as_str()],
        "its dependency is done"
    );
    let active = transition_mission(&m.mission, &MissionEvent::Execute, start_time()).unwrap();
    t.store.missions.update_mission(active, m.revision).await.unwrap();
    assert_eq!(
        ids(&s.claim_ready("w2", lease, 10, &AgentLimits::new()).await.unwrap()),
        [d.task.id.as_str()],
        "its mission is active"
    );

    t.clock.advance(Span::seconds(61));
    let again = s.claim_ready("w3", lease, 1, &AgentLimits::new()).await.unwrap();
    assert_eq!(ids(&again), [c.task.id.as_str()], "a lapsed claim on a still pending task is claimable again");
    assert_eq!(again[0].revision, 3);
    assert_eq!(code(s.claim_ready("w3", lease, 0, &AgentLimits::new()).await), "invalid_input");
    assert_eq!(code(s.claim_ready("w3", Duration::ZERO, 1, &AgentLimits::new()).await), "invalid_input");
}

pub async fn a_running_task_is_held_renewed_and_taken_over_once_its_claim_lapses(t: &TestStore) {
    let s = &t.store.tasks;
    let lease = Duration::from_secs(60);
    s.create_task(task("long job")).await.unwrap();
    let mut held = s.claim_ready("w1", lease, 1, &AgentLimits::new()).await.unwrap().remove(0);
    for e in [TaskEvent::Assign { agent: None }, TaskEvent::Start] {
        held = step(t, &held, e).await.unwrap();
    }
    t.clock.advance(Span::seconds(30));
    let renewed = s.hold_task(&held.task.id, "w1", lease).await.unwrap();
    assert_eq!(renewed.revision, held.revision, "renewing its own claim does not stop the holder's next write");
    assert_eq!(renewed.claim.as_ref().unwrap().expires_at, start_time() + Span::seconds(90));
    assert_eq!(code(s.hold_task(&held.task.id, "w2", lease).await), "conflict", "a live claim is the holder's");

    t.clock.advance(Span::seconds(61));
    let taken = s.hold_task(&held.task.id, "w2", lease).await.unwrap();
    assert_eq!(taken.claim.as_ref().unwrap().worker, "w2");
    assert_eq!(taken.revision, held.revision + 1, "a takeover moves the revision");
    assert_eq!(code(step(t, &held, TaskEvent::Submit).await), "conflict", "the old holder can no longer write");
    assert_eq!(code(s.hold_task(&held.task.id, "w1", lease).await), "conflict");

    s.release_task(&held.task.id, "w1").await.unwrap();
    assert_eq!(s.get_task(&held.task.id).await.unwrap().unwrap().claim, taken.claim, "only the holder releases");
    s.release_task(&held.task.id, "w2").await.unwrap();
    let released = s.get_task(&held.task.id).await.unwrap().unwrap();
    assert_eq!(released.claim, None);
    assert_eq!(s.hold_task(&held.task.id, "w1", lease).await.unwrap().claim.unwrap().worker, "w1");
    assert_eq!(code(s.hold_task("missing", "w1", lease).await), "not_found");
    assert_eq!(code(s.hold_task(&held.task.id, "w1", Duration::ZERO).await), "invalid_input");
}

pub async fn concurrent_claimers_never_get_the_same_task(t: &TestStore) {
    let mut all = HashSet::new();
    for i in 0..40 {
        all.insert(t.store.tasks.create_task(task(&format!("job {i}"))).await.unwrap().task.id);
    }
    let mut workers = Vec::new();
    for w in 0..4 {
        let s = t.store.tasks.clone();
        workers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got =
                    s.claim_ready(&format!("w{w}"), Duration::from_secs(60), 3, &AgentLimits::new()).await.unwrap();
                if got.is_empty() {
                    break mine;
                }
                mine.extend(got.into_iter().map(|x| x.task.id));
            }
        }));
    }
    let mut claimed = Vec::new();
    for w in workers {
        claimed.extend(w.await.unwrap());
    }
    // A claimer racing another may see "nothing" early; a final sweep picks up any leftovers.
    loop {
        let got =
            t.store.tasks.claim_ready("sweeper", Duration::from_secs(60), 100, &AgentLimits::new()).await.unwrap();
        if got.is_empty() {
            break;
        }
        claimed.extend(got.into_iter().map(|x| x.task.id));
    }
    let unique: HashSet<_> = claimed.iter().cloned().collect();
    assert_eq!(unique.len(), claimed.len(), "no task claimed twice");
    assert_eq!(unique, all, "every task claimed");
}

fn limits(pairs: &[(&str, u32)]) -> AgentLimits {
    pairs.iter().map(|(a, n)| ((*a).to_owned(), *n)).collect()
}

fn assigned(title: &str, agent: &str) -> Task {
    Task { assign_to: Some(agent.into()), ..task(title) }
}

pub async fn an_agents_tasks_are_claimed_only_up_to_its_limit_by_every_worker_together(t: &TestStore) {
    let s = &t.store.tasks;
    let lease = Duration::from_secs(60);
    let only_a = limits(&[("a", 2)]);
    for i in 0..5 {
        s.create_task(assigned(&format!("a{i}"), "a")).await.unwrap();
    }
    s.create_task(assigned("b0", "b")).await.unwrap();
    s.create_task(assigned("b1", "b")).await.unwrap();
    s.create_task(task("nobody's")).await.unwrap();
    let agents = |v: &[StoredTask]| {
        let mut a: Vec<String> = v.iter().map(|x| x.task.assign_to.clone().unwrap_or_default()).collect();
        a.sort();
        a
    };
    let first = s.claim_ready("w1", lease, 10, &only_a).await.unwrap();
    assert_eq!(agents(&first), ["", "a", "a", "b", "b"], "two of a's five; unlimited agents all");
    assert!(s.claim_ready("w2", lease, 10, &only_a).await.unwrap().is_empty(), "w1's claims fill a's places");

    // a's first task runs, then finishes: running it keeps its place, done frees it.
    let mut running = first.iter().find(|x| x.task.assign_to.as_deref() == Some("a")).unwrap().clone();
    for e in [TaskEvent::Assign { agent: None }, TaskEvent::Start] {
        running = step(t, &running, e).await.unwrap();
    }
    s.release_task(&running.task.id, "w1").await.unwrap();
    assert!(s.claim_ready("w2", lease, 10, &only_a).await.unwrap().is_empty(), "a running task keeps its place");
    for e in [TaskEvent::Submit, TaskEvent::Pass] {
        running = step(t, &running, e).await.unwrap();
    }
    let next = s.claim_ready("w2", lease, 10, &only_a).await.unwrap();
    assert_eq!(agents(&next), ["a"], "a finished task frees its place, for any worker");
    assert_eq!(code(s.claim_ready("w2", lease, 10, &limits(&[("a", 0)])).await), "invalid_input");

    // Pending tasks whose claims lapsed hold no place.
    t.clock.advance(Span::seconds(61));
    let again = s.claim_ready("w3", lease, 10, &limits(&[("a", 3)])).await.unwrap();
    assert_eq!(agents(&again), ["", "a", "a", "a", "b", "b"]);
}

pub async fn concurrent_claimers_never_exceed_an_agents_limit(t: &TestStore) {
    for i in 0..30 {
        t.store.tasks.create_task(assigned(&format!("job {i}"), "a")).await.unwrap();
    }
    let mut workers = Vec::new();
    for w in 0..4 {
        let s = t.store.tasks.clone();
        workers.push(tokio::spawn(async move {
            let mut mine = 0;
            for _ in 0..5 {
                mine += s
                    .claim_ready(&format!("w{w}"), Duration::from_secs(60), 2, &limits(&[("a", 3)]))
                    .await
                    .unwrap()
                    .len();
            }
            mine
        }));
    }
    let mut claimed = 0;
    for w in workers {
        claimed += w.await.unwrap();
    }
    assert_eq!(claimed, 3, "four workers claiming at once took a's three places, no more");
}

pub async fn a_task_is_deleted_unless_worked_on_or_depended_on(t: &TestStore) {
    let s = &t.store.tasks;
    let lease = Duration::from_secs(60);
    let a = s.create_task(task("a")).await.unwrap();
    let b = s.create_task(Task { depends_on: vec![a.task.id.clone()], ..task("b") }).await.unwrap();
    assert_eq!(code(s.delete_task(&a.task.id).await), "conflict", "b depends on a");
    let deleted = s.delete_task(&b.task.id).await.unwrap();
    assert_eq!(deleted.task.id, b.task.id);
    assert_eq!(s.get_task(&b.task.id).await.unwrap(), None);
    assert_eq!(code(s.delete_task(&b.task.id).await), "not_found");
    s.create_task(task("b")).await.expect("a deleted task's title is free again");

    let mut held = s.claim_ready("w1", lease, 10, &AgentLimits::new()).await.unwrap().remove(0);
    assert_eq!(held.task.id, a.task.id);
    assert_eq!(code(s.delete_task(&a.task.id).await), "conflict", "claimed to start");
    for e in [TaskEvent::Assign { agent: None }, TaskEvent::Start] {
        held = step(t, &held, e).await.unwrap();
    }
    s.release_task(&a.task.id, "w1").await.unwrap();
    assert_eq!(code(s.delete_task(&a.task.id).await), "conflict", "running, even with no live claim");
    held = step(t, &held, TaskEvent::Fail { reason: FailReason::Forced }).await.unwrap();
    assert_eq!(held.task.status, TaskStatus::Failed);
    s.delete_task(&a.task.id).await.unwrap();
    let left = s.list_tasks(&TaskFilter::default(), &PageRequest::default()).await.unwrap().items;
    assert_eq!(left.iter().map(|x| x.task.title.as_str()).collect::<Vec<_>>(), ["b"]);
    assert!(s.claim_ready("w1", lease, 10, &AgentLimits::new()).await.unwrap().iter().all(|x| x.task.title == "b"));
}

pub async fn missions_round_trip_and_move_only_along_their_table(t: &TestStore) {
    let s = &t.store.missions;
    let mut full: Mission = serde_json::from_value(json!({
        "id": "", "name": "launch", "status": "draft", "prompt": "ship it", "data": {"team": ["coder"]},
        "deadline": "2026-03-01T00:00:00Z", "schedule": "0 9 * * 1", "endDate": "2026-06-01T00:00:00Z",
        "qualityThreshold": 4.0, "executionCount": 0, "user": "u1",
        "checkpoints": [{"name": "sign-off", "afterTasks": ["Build"], "blocksTasks": ["Deploy"], "notifyChannels": ["ops"], "message": "ok?"}],
        "delays": [{"name": "soak", "afterTasks": ["Deploy"], "blocksTasks": ["Announce"], "duration": "PT2H"}],
        "qualityGates": [{"name": "good enough", "afterTasks": ["Build"], "blocksTasks": ["Deploy"], "minScore": 3.5, "requireAllPassed": true}],
        "createdAt": "2000-01-01T00:00:00Z", "updatedAt": "2000-01-01T00:00:00Z"
    }))
    .unwrap();
    let created = s.create_mission(full.clone()).await.unwrap();
    full.id = created.mission.id.clone();
    full.created_at = start_time();
    full.updated_at = start_time();
    assert_eq!((created.mission.clone(), created.revision), (full, 1));
    assert_eq!(s.get_mission(&created.mission.id).await.unwrap(), Some(created.clone()));
    assert_eq!(code(s.create_mission(mission("launch")).await), "conflict", "names are unique");
    let mut bad = mission("bad delay");
    bad.delays = created.mission.delays.clone();
    bad.delays[0].duration = "2 hours".into();
    assert_eq!(code(s.create_mission(bad).await), "invalid_input");

    t.clock.advance(Span::seconds(1));
    let recurring = transition_mission(&created.mission, &MissionEvent::Recur, start_time()).unwrap();
    let stored = s.update_mission(recurring.clone(), 1).await.unwrap();
    assert_eq!(
        (stored.mission.status, stored.revision, stored.mission.updated_at),
        (MissionStatus::Recurring, 2, start_time() + Span::seconds(1))
    );
    assert_eq!(code(s.update_mission(recurring, 1).await), "conflict", "a stale revision is refused");
    let mut back = stored.mission.clone();
    back.status = MissionStatus::Draft;
    assert_eq!(code(s.update_mission(back, stored.revision).await), "invalid_transition");
    let fired = transition_mission(&stored.mission, &MissionEvent::Execute, start_time()).unwrap();
    let fired = s.update_mission(fired, stored.revision).await.unwrap();
    assert_eq!((fired.mission.status, fired.mission.execution_count), (MissionStatus::Active, 1));
    assert_eq!(s.import_mission(&fired).await.unwrap(), ImportOutcome::AlreadyPresent);
    assert_eq!(code(s.import_mission(&polpo_store::StoredMission { revision: 99, ..fired.clone() }).await), "conflict");

    for i in 0..5 {
        t.clock.advance(Span::milliseconds(1));
        s.create_mission(mission(&format!("mission-{i}"))).await.unwrap();
    }
    let active =
        s.list_missions(&MissionFilter { status: Some(MissionStatus::Active) }, &PageRequest::default()).await.unwrap();
    assert_eq!(active.items.iter().map(|m| m.mission.name.as_str()).collect::<Vec<_>>(), ["launch"]);
    let first = s.list_missions(&MissionFilter::default(), &PageRequest::first(4)).await.unwrap();
    let rest =
        s.list_missions(&MissionFilter::default(), &PageRequest::after(first.next.clone().unwrap(), 4)).await.unwrap();
    let names: Vec<_> = first.items.iter().chain(&rest.items).map(|m| m.mission.name.clone()).collect();
    assert_eq!(names, ["mission-4", "mission-3", "mission-2", "mission-1", "mission-0", "launch"]);
    assert_eq!(rest.next, None);
}

/// A mission, an active one's task claimed by a worker: what `everything_survives_a_reopen`
/// reads back after reopening (the mission, then the task).
pub async fn a_mission_with_a_claimed_task(
    t: &TestStore,
) -> (String, Vec<StoredTask>, Option<polpo_store::StoredMission>) {
    let m =
        t.store.missions.create_mission(Mission { status: MissionStatus::Active, ..mission("kept") }).await.unwrap();
    t.store.tasks.create_task(Task { mission_id: Some(m.mission.id.clone()), ..task("kept") }).await.unwrap();
    let claimed = t.store.tasks.claim_ready("w", Duration::from_secs(60), 10, &AgentLimits::new()).await.unwrap();
    assert_eq!(claimed.len(), 1);
    a_mission_with_a_claimed_task_reread(t, &m.mission.id).await
}

/// Read back what [`a_mission_with_a_claimed_task`] wrote.
pub async fn a_mission_with_a_claimed_task_reread(
    t: &TestStore,
    mission_id: &str,
) -> (String, Vec<StoredTask>, Option<polpo_store::StoredMission>) {
    let filter = TaskFilter { mission_id: Some(mission_id.to_owned()), ..Default::default() };
    let tasks = t.store.tasks.list_tasks(&filter, &PageRequest::default()).await.unwrap().items;
    (mission_id.to_owned(), tasks, t.store.missions.get_mission(mission_id).await.unwrap())
}
