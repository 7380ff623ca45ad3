//! The memory-learning part of the conformance suite: the outbox and the candidates, on every
//! backend (stamped out by `conformance!` in `conformance.rs`).

use polpo_store::{
    CandidateStatus, LearningJob, LearningStore, MemoryCandidate, MemoryScope, PageRequest, ScopeKind, SourceTurn,
};

use crate::support::TestStore;

fn job(run: &str) -> LearningJob {
    LearningJob {
        id: LearningJob::key(run, "model-1", "1"),
        agent: "coder".into(),
        user: "key-1".into(),
        turn: SourceTurn { session_id: "s1".into(), run_id: run.into() },
        user_text: "I prefer tabs".into(),
        answer: "Noted.".into(),
        extractor_revision: "model-1".into(),
        policy_revision: "1".into(),
        attempts: 0,
        last_error: None,
        revision: 0,
    }
}

fn candidate(job: &LearningJob, index: usize) -> MemoryCandidate {
    MemoryCandidate {
        id: job.candidate_id(index),
        agent: job.agent.clone(),
        scope: MemoryScope::of(ScopeKind::User, &job.user),
        kind: "preference".into(),
        content: "prefers tabs".into(),
        source_turn: job.turn.clone(),
        status: CandidateStatus::Pending,
        memory_id: None,
        reviewer: None,
        audit: Vec::new(),
        revision: 0,
        created_at: chrono::DateTime::UNIX_EPOCH,
        updated_at: chrono::DateTime::UNIX_EPOCH,
    }
}

pub async fn learning_outbox_is_idempotent_and_candidates_are_proposed_once(t: &TestStore) {
    let learning = LearningStore::new(t.store.records.clone());
    let first = job("run-1");
    assert!(learning.enqueue(&first).await.unwrap());
    assert!(!learning.enqueue(&first).await.unwrap(), "the same turn and revisions queue once");
    assert!(learning.enqueue(&job("run-2")).await.unwrap());
    let pending = learning.pending(10).await.unwrap();
    assert_eq!(pending.len(), 2);
    let stored = pending.iter().find(|j| j.id == first.id).unwrap();
    assert_eq!(stored.revision, 1);

    let failed = learning.failed(stored, "model down").await.unwrap();
    assert_eq!((failed.attempts, failed.revision, failed.last_error.as_deref()), (1, 2, Some("model down")));
    assert_eq!(learning.failed(stored, "stale").await.unwrap_err().code(), "conflict");

    // A retried job proposes the same ids: the second proposal stores nothing.
    let c = candidate(&first, 0);
    let proposed = learning.propose(&c).await.unwrap().unwrap();
    assert_eq!((proposed.revision, proposed.status), (1, CandidateStatus::Pending));
    assert!(learning.propose(&c).await.unwrap().is_none());
    assert!(learning.done(&first.id).await.unwrap());
    assert!(learning.job(&first.id).await.unwrap().is_none());
    assert!(!learning.done(&first.id).await.unwrap());
    assert_eq!(learning.pending(10).await.unwrap().len(), 1);

    // Review moves by compare-and-set and keeps its audit trail.
    let mut approved = proposed.clone();
    approved.status = CandidateStatus::Approved;
    approved.reviewer = Some("admin".into());
    approved.audit(polpo_store::Clock::now(t.clock.as_ref()), "approved", "admin", Some("looks right".into()));
    let saved = learning.save(&approved, 1).await.unwrap();
    assert_eq!((saved.revision, saved.status, saved.audit.len()), (2, CandidateStatus::Approved, 1));
    assert_eq!(learning.save(&approved, 1).await.unwrap_err().code(), "conflict");
    assert_eq!(learning.get("coder", &c.id).await.unwrap(), Some(saved));
    assert!(learning.get("other", &c.id).await.unwrap().is_none(), "candidates are per agent");

    let second = learning.propose(&candidate(&first, 1)).await.unwrap().unwrap();
    let all = learning.list("coder", &PageRequest::first(10), |_| true).await.unwrap();
    assert_eq!(all.items.len(), 2);
    let pending_only =
        learning.list("coder", &PageRequest::first(10), |c| c.status == CandidateStatus::Pending).await.unwrap();
    assert_eq!(pending_only.items.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), vec![second.id.as_str()]);
    let page = learning.list("coder", &PageRequest::first(1), |_| true).await.unwrap();
    assert_eq!(page.items.len(), 1);
    let rest = learning.list("coder", &PageRequest::after(page.next.unwrap(), 1), |_| true).await.unwrap();
    assert_eq!(rest.items.len(), 1);
    assert_ne!(rest.items[0].id, page.items[0].id);
    assert!(rest.next.is_none());
}
