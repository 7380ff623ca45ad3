//! `polpo db copy`: move everything from one backend to another (file → PostgreSQL and any
//! other pair), verifying each record on the target, safe to re-run.
//!
//! Each session (with its messages), run (with its events and checkpoint), effect, record,
//! mission and task is imported atomically, so a copy interrupted half-way leaves whole records only; running it
//! again skips what is already there and identical, and refuses (`conflict`) what differs.
//! Copy from a stopped source: records that change during the copy conflict on the re-run.

use sha2::{Digest, Sha256};

use crate::Store;
use crate::error::StoreError;
use crate::model::{ImportOutcome, RunFilter, SessionFilter};
use crate::page::{MAX_PAGE, PageRequest};
use crate::work::{MissionFilter, StoredTask, TaskFilter};

/// What a copy did, per kind of record, with a checksum over everything copied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyReport {
    /// Sessions written / already present.
    pub sessions: (u64, u64),
    /// Messages in all copied sessions.
    pub messages: u64,
    /// Runs written / already present.
    pub runs: (u64, u64),
    /// Events in all copied runs.
    pub events: u64,
    /// Effects written / already present.
    pub effects: (u64, u64),
    /// Records (all collections) written / already present.
    pub records: (u64, u64),
    /// Missions written / already present.
    pub missions: (u64, u64),
    /// Tasks written / already present.
    pub tasks: (u64, u64),
    /// SHA-256 over every record as read back from the target, in copy order: equal on the
    /// source and target side, or the copy fails.
    pub checksum: String,
}

fn count(pair: &mut (u64, u64), outcome: ImportOutcome) {
    match outcome {
        ImportOutcome::Imported => pair.0 += 1,
        ImportOutcome::AlreadyPresent => pair.1 += 1,
    }
}

/// Feed the JSON of a record read from the source and the same record read back from the
/// target; any difference fails the copy.
fn verify<T: serde::Serialize>(
    kind: &str,
    id: &str,
    source: &T,
    target: &T,
    hash: &mut Sha256,
) -> Result<(), StoreError> {
    let (a, b) = (serde_json::to_vec(source), serde_json::to_vec(target));
    match (a, b) {
        (Ok(a), Ok(b)) if a == b => {
            hash.update(&a);
            Ok(())
        }
        _ => Err(StoreError::Conflict(format!("{kind} `{id}` reads back differently on the target"))),
    }
}

/// Copy every session, run, effect, record, mission and task from `from` to `to`, verifying
/// each on the target.
pub async fn copy_store(from: &Store, to: &Store) -> Result<CopyReport, StoreError> {
    let mut report = CopyReport::default();
    let mut hash = Sha256::new();

    let mut page = PageRequest::first(MAX_PAGE);
    loop {
        let sessions = from.sessions.list_sessions(&SessionFilter::default(), &page).await?;
        for session in &sessions.items {
            let mut messages = Vec::new();
            let mut mpage = PageRequest::first(MAX_PAGE);
            loop {
                let got = from.sessions.list_messages(&session.id, &mpage).await?;
                messages.extend(got.items);
                match got.next {
                    Some(c) => mpage = PageRequest::after(c, MAX_PAGE),
                    None => break,
                }
            }
            count(&mut report.sessions, to.sessions.import_session(session, &messages).await?);
            report.messages += messages.len() as u64;
            let back = to.sessions.get_session(&session.id).await?;
            verify("session", &session.id, &Some(session), &back.as_ref(), &mut hash)?;
            let tail = to.sessions.recent_messages(&session.id, MAX_PAGE).await?;
            let start = messages.len().saturating_sub(tail.len());
            verify("session", &session.id, &&messages[start..], &tail.as_slice(), &mut hash)?;
        }
        match sessions.next {
            Some(c) => page = PageRequest::after(c, MAX_PAGE),
            None => break,
        }
    }

    let mut page = PageRequest::first(MAX_PAGE);
    loop {
        let runs = from.runs.list_runs(&RunFilter::default(), &page).await?;
        for run in &runs.items {
            let mut events = Vec::new();
            loop {
                let got = from.runs.events_after(&run.id, events.len() as u64, MAX_PAGE).await?;
                if got.is_empty() {
                    break;
                }
                events.extend(got);
            }
            let checkpoint = from.runs.latest_checkpoint(&run.id).await?;
            count(&mut report.runs, to.runs.import_run(run, &events, checkpoint.as_ref()).await?);
            report.events += events.len() as u64;
            let back = to.runs.get_run(&run.id).await?;
            verify("run", &run.id, &Some(run), &back.as_ref(), &mut hash)?;
            let tail_from = (events.len() as u64).saturating_sub(u64::from(MAX_PAGE));
            let tail = to.runs.events_after(&run.id, tail_from, MAX_PAGE).await?;
            verify("run", &run.id, &&events[tail_from as usize..], &tail.as_slice(), &mut hash)?;
            verify("run", &run.id, &checkpoint, &to.runs.latest_checkpoint(&run.id).await?, &mut hash)?;
        }
        match runs.next {
            Some(c) => page = PageRequest::after(c, MAX_PAGE),
            None => break,
        }
    }

    let mut page = PageRequest::first(MAX_PAGE);
    loop {
        let effects = from.effects.list_effects(&page).await?;
        for effect in &effects.items {
            count(&mut report.effects, to.effects.import_effect(effect).await?);
            verify(
                "effect",
                &effect.key,
                &Some(effect),
                &to.effects.get_effect(&effect.key).await?.as_ref(),
                &mut hash,
            )?;
        }
        match effects.next {
            Some(c) => page = PageRequest::after(c, MAX_PAGE),
            None => break,
        }
    }
    for collection in from.records.collections().await? {
        let mut page = PageRequest::first(MAX_PAGE);
        loop {
            let records = from.records.list_records(&collection, &page).await?;
            for record in &records.items {
                count(&mut report.records, to.records.import_record(record).await?);
                let back = to.records.get_record(&record.collection, &record.id).await?;
                verify("record", &record.id, &Some(record), &back.as_ref(), &mut hash)?;
            }
            match records.next {
                Some(c) => page = PageRequest::after(c, MAX_PAGE),
                None => break,
            }
        }
    }

    let mut page = PageRequest::first(MAX_PAGE);
    loop {
        let missions = from.missions.list_missions(&MissionFilter::default(), &page).await?;
        for m in &missions.items {
            count(&mut report.missions, to.missions.import_mission(m).await?);
            let back = to.missions.get_mission(&m.mission.id).await?;
            verify("mission", &m.mission.id, &Some(m), &back.as_ref(), &mut hash)?;
        }
        match missions.next {
            Some(c) => page = PageRequest::after(c, MAX_PAGE),
            None => break,
        }
    }
    copy_tasks(from, to, &mut report, &mut hash).await?;

    report.checksum = hex::encode(hash.finalize());
    Ok(report)
}

/// Tasks go after missions and each after its dependencies (the target checks both exist), so
/// they are read whole first and imported in waves: each wave the tasks whose dependencies
/// are already there, newest first within a wave as listed.
async fn copy_tasks(from: &Store, to: &Store, report: &mut CopyReport, hash: &mut Sha256) -> Result<(), StoreError> {
    let mut pending: Vec<StoredTask> = Vec::new();
    let mut page = PageRequest::first(MAX_PAGE);
    loop {
        let tasks = from.tasks.list_tasks(&TaskFilter::default(), &page).await?;
        pending.extend(tasks.items);
        match tasks.next {
            Some(c) => page = PageRequest::after(c, MAX_PAGE),
            None => break,
        }
    }
    let mut copied = std::collections::HashSet::new();
    while !pending.is_empty() {
        let (wave, rest): (Vec<StoredTask>, Vec<StoredTask>) =
            pending.into_iter().partition(|t| t.task.depends_on.iter().all(|d| copied.contains(d)));
        if wave.is_empty() {
            return Err(StoreError::Invalid("the source holds tasks whose dependencies are missing".into()));
        }
        for t in &wave {
            count(&mut report.tasks, to.tasks.import_task(t).await?);
            let back = to.tasks.get_task(&t.task.id).await?;
            verify("task", &t.task.id, &Some(t), &back.as_ref(), hash)?;
        }
        copied.extend(wave.into_iter().map(|t| t.task.id));
        pending = rest;
    }
    Ok(())
}
