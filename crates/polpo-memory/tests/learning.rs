//! Memory learning over a real file store, with the built-in model extractor asking the strict
//! fake model through the real OpenAI-wire provider: which turns are learnt from, the outbox
//! keeping a job until its candidates are stored, and the `automatic` policy applying only
//! what it accepts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use polpo_core::config::agent::Learning;
use polpo_core::config::enums::{LearningMode, LearningSurface, MemoryKind};
use polpo_core::redact::Redactor;
use polpo_llm::{ModelProvider, Providers};
use polpo_memory::Memory;
use polpo_memory::learning::{CommittedTurn, Learner, LearningEvent, ModelExtractor};
use polpo_store::{
    CandidateStatus, LearningStore, MemoryFilter, MemoryScope, NewMemoryItem, PageRequest, ScopeKind, SourceTurn,
    StoreKind, SystemClock, open_store,
};
use polpo_testkit::{FakeLlm, Turn};
use serde_json::json;

fn turn(run: &str) -> CommittedTurn {
    CommittedTurn {
        agent: "notes".into(),
        user: Some("key-ada".into()),
        turn: SourceTurn { session_id: "s1".into(), run_id: run.into() },
        surface: Some(LearningSurface::Chat),
        nested: false,
        answered: true,
        user_text: "I prefer dark mode. My API key is sk-live-123.".into(),
        answer: "Noted.".into(),
    }
}

struct Setup {
    learner: Learner,
    memory: Memory,
    events: Arc<Mutex<Vec<(String, serde_json::Value)>>>,
    _dir: tempfile::TempDir,
}

async fn setup(llm: &FakeLlm, mode: LearningMode) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(StoreKind::File, dir.path(), None, Arc::new(SystemClock)).await.unwrap();
    let memory = Memory::new(store.memory.clone(), None);
    let providers = Providers::new(BTreeMap::new(), llm.openai_env());
    let provider: Arc<dyn ModelProvider> = Arc::new(providers.chain(&["openai/fake-model".to_owned()]).unwrap());
    let extractor = ModelExtractor::new(Arc::new(move |_: &str| Ok(provider.clone())));
    let learning = Learning {
        mode: Some(mode),
        surfaces: Some(vec![LearningSurface::Chat]),
        kinds: Some(vec![MemoryKind::Preference, MemoryKind::Fact]),
    };
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let redactor = Redactor::new();
    redactor.replace(["sk-live-123".to_owned()]);
    let learner = Learner::new(
        LearningStore::new(store.records.clone()),
        memory.clone(),
        Arc::new(extractor),
        store.seams().clock.clone(),
        Arc::new(move |agent: &str| (agent == "notes").then(|| learning.clone())),
        Arc::new(move |e: LearningEvent| {
            let (name, data) = e.to_bus();
            seen.lock().unwrap().push((name.to_owned(), data));
        }),
    )
    .with_redactor(redactor);
    Setup { learner, memory, events, _dir: dir }
}

#[tokio::test]
async fn only_committed_top_level_answered_turns_of_a_trusted_user_on_a_listed_surface_are_queued() {
    let llm = FakeLlm::start([]).await.unwrap();
    let s = setup(&llm, LearningMode::Suggest).await;
    let refused = [
        CommittedTurn { nested: true, ..turn("r1") },
        CommittedTurn { answered: false, ..turn("r2") },
        CommittedTurn { user: None, ..turn("r3") },
        CommittedTurn { surface: Some(LearningSurface::Channel), ..turn("r4") },
        CommittedTurn { surface: None, ..turn("r5") },
        CommittedTurn { answer: "  ".into(), ..turn("r6") },
        CommittedTurn { agent: "other".into(), ..turn("r7") },
    ];
    for t in refused {
        assert!(s.learner.committed(t.clone()).await.unwrap().is_none(), "{t:?}");
    }
    assert!(s.learner.store().pending(10).await.unwrap().is_empty());
    let warned = s.events.lock().unwrap().clone();
    assert_eq!(warned.len(), 1, "the untrusted turn is announced: {warned:?}");
    assert_eq!((warned[0].0.as_str(), &warned[0].1["code"]), ("memory:warning", &json!("memory_learning_untrusted")));

    let queued = s.learner.committed(turn("r8")).await.unwrap().unwrap();
    assert!(s.learner.committed(turn("r8")).await.unwrap().is_none(), "the same turn queues once");
    assert_eq!(s.learner.store().pending(10).await.unwrap().len(), 1);
    assert_eq!(queued.user, "key-ada");
    // Never attempted: its own extraction runs after the turn, a retry pass leaves it alone
    // (the fake model here has no answer, so taking it would fail and count an attempt).
    assert_eq!(s.learner.retry_failed().await, 0);
    assert_eq!(s.learner.store().job(&queued.id).await.unwrap().unwrap().attempts, 0);
}

#[tokio::test]
async fn automatic_mode_applies_what_the_policy_accepts_and_leaves_the_rest_pending() {
    let llm = FakeLlm::start([
        // A failed extraction keeps the job queued.
        Turn::error(400, r#"{"error": {"message": "bad", "type": "invalid_request_error"}}"#),
        Turn::json(json!({"items": [
            {"kind": "preference", "content": "Prefers dark mode"},
            {"kind": "fact", "content": "API key is sk-live-123"},
            {"kind": "preference", "content": "likes  SHORT answers"},
            {"kind": "fact", "content": "   "},
        ]})),
    ])
    .await
    .unwrap();
    let s = setup(&llm, LearningMode::Automatic).await;
    let ada = MemoryScope::of(ScopeKind::User, "key-ada");
    let existing = NewMemoryItem {
        id: None,
        scope: ada.clone(),
        kind: "preference".into(),
        content: "Likes short answers".into(),
        source: "user".into(),
    };
    s.memory.create(existing).await.unwrap();

    let job = s.learner.committed(turn("run-1")).await.unwrap().unwrap();
    assert!(!s.learner.process(job.clone()).await, "the model refused");
    let retried = s.learner.store().job(&job.id).await.unwrap().unwrap();
    assert_eq!(retried.attempts, 1);
    assert_eq!(s.learner.retry_failed().await, 1, "a failed job is retried without a restart");
    assert!(s.learner.store().job(&job.id).await.unwrap().is_none(), "done jobs leave the outbox");

    // The extractor saw the turn's text without the vault's values, and was asked for JSON.
    let asked = &llm.requests()[1].body;
    assert!(asked["messages"].to_string().contains("I prefer dark mode"));
    assert!(!asked["messages"].to_string().contains("sk-live-123"));
    assert_eq!(asked["response_format"]["json_schema"]["strict"], true);
    assert_eq!(
        asked["response_format"]["json_schema"]["schema"]["properties"]["items"]["items"]["properties"]["kind"]["enum"],
        json!(["preference", "fact"])
    );

    let page = s.learner.store().list("notes", &PageRequest::first(10), |_| true).await.unwrap();
    let mut by_content: Vec<(String, CandidateStatus, Option<String>)> = page
        .items
        .iter()
        .map(|c| (c.content.clone(), c.status, c.audit.last().and_then(|a| a.reason.clone())))
        .collect();
    by_content.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(by_content.len(), 3, "the blank item is dropped: {by_content:?}");
    assert_eq!(by_content[0].0, "API key is [REDACTED]", "secrets never reach a candidate");
    assert_eq!(by_content[0].1, CandidateStatus::Pending);
    assert!(by_content[0].2.as_deref().unwrap().contains("secret"));
    assert_eq!((by_content[1].0.as_str(), by_content[1].1), ("Prefers dark mode", CandidateStatus::Applied));
    assert_eq!(by_content[2].1, CandidateStatus::Pending);
    assert!(by_content[2].2.as_deref().unwrap().contains("repeats memory item"));

    let items = s.memory.list_page(&MemoryFilter { scopes: vec![ada], kinds: vec![] }, &PageRequest::first(10)).await;
    let contents: Vec<String> = items.unwrap().items.into_iter().map(|i| i.content).collect();
    assert_eq!(contents.len(), 2);
    assert!(contents.contains(&"Prefers dark mode".to_owned()));

    let names: Vec<(String, String)> = s
        .events
        .lock()
        .unwrap()
        .iter()
        .map(|(n, d)| (n.clone(), d["action"].as_str().unwrap_or_default().to_owned()))
        .collect();
    assert_eq!(names.iter().filter(|(n, a)| n == "memory:candidate" && a == "created").count(), 3);
    assert_eq!(names.iter().filter(|(n, a)| n == "memory:candidate" && a == "applied").count(), 1);
    assert!(names.iter().any(|(n, _)| n == "memory:warning"), "the failed attempt is announced");
    for (_, data) in s.events.lock().unwrap().iter() {
        assert!(!data.to_string().contains("sk-live-123"));
    }
}
