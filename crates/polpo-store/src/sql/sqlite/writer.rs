//! The SQLite store's one writer: every write of the store goes through one connection, in
//! turn, and the writes of concurrent callers share one transaction (group commit).
//!
//! SQLite lets one connection write at a time. With writes spread over a pool, writers met on
//! that lock and SQLite's busy handler slept between tries (≈ 1.7 ms of sleeping per chat
//! completion at 32 concurrent). Here writers queue on a fair (FIFO) async mutex instead, so
//! nobody sleeps, and a write does not commit on its own:
//!
//! - a write takes the connection, opens the group transaction if none is open
//!   (`BEGIN IMMEDIATE`), runs inside its own savepoint, releases it (or rolls back to it, so a
//!   failed write — a revision conflict, a missing row — undoes only itself) and gives the
//!   connection to the next writer in the queue;
//! - then it queues again; when its turn comes and its transaction is still open, every write
//!   queued before it has run, and it commits them all: one `COMMIT`, one WAL fsync
//!   (`synchronous=FULL`) for the whole group. Each caller hears of success only after that
//!   commit, so an acknowledged write survives a crash as before; if the commit fails, every
//!   write of the group gets the error.
//!
//! A caller dropped halfway (a cancelled request) cannot leave its half-write behind: its
//! savepoint is marked abandoned and rolled back by the next holder of the connection, and a
//! task is spawned to do that (and commit what the group already holds) in case nobody else
//! comes.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::sqlite::SqliteConnection;
use tokio::sync::{Mutex, OwnedMutexGuard, oneshot};

use crate::error::StoreError;

/// The savepoint each write runs in, inside the group transaction.
const SAVEPOINT: &str = "SAVEPOINT polpo_write";
const RELEASE: &str = "RELEASE polpo_write";
/// Release a write's savepoint and open the next write's in the same round trip.
const RELEASE_AND_NEXT: &str = "RELEASE polpo_write; SAVEPOINT polpo_write";
const UNDO: &str = "ROLLBACK TO polpo_write; RELEASE polpo_write";

/// How a group's commit ended, told to each of its writes (an error as its message: every
/// write of the group gets its own copy).
type Outcome = Result<(), String>;

/// The writer connection and the state of its group transaction.
struct Group {
    conn: SqliteConnection,
    /// `BEGIN IMMEDIATE` was issued and neither committed nor rolled back yet.
    open: bool,
    /// Finished writes in the open transaction, each waiting to hear how its commit ended.
    members: Vec<oneshot::Sender<Outcome>>,
    /// A write was dropped before its end: the next holder undoes it first.
    abandoned: bool,
    /// The write in progress runs in a savepoint (it joined a group with earlier writes in
    /// it); the first write of a group needs none, as undoing it is rolling the group back.
    savepoint: bool,
    /// A savepoint is open that no write has used yet (opened with the previous write's
    /// release, as writers were waiting): the next write runs in it.
    spare: bool,
    /// One of the writer's own statements (`BEGIN`, `SAVEPOINT`, `RELEASE`, …) was dropped
    /// before it answered, so whether a transaction is open is not known: the next holder
    /// rolls back whatever is open and fails the group.
    unsure: bool,
}

impl Group {
    async fn run(&mut self, sql: &'static str) -> Result<(), sqlx::Error> {
        self.unsure = true;
        let done = sqlx::raw_sql(sql).execute(&mut self.conn).await.map(drop);
        self.unsure = false;
        done
    }

    /// Undo what a dropped caller left: its write's savepoint, or — when one of the writer's
    /// own statements was cut off — the whole group. If undoing the savepoint fails, SQLite
    /// has already ended the transaction (e.g. an I/O error rolls it back): the group fails.
    async fn settle(&mut self) {
        if self.unsure {
            self.open = true;
            self.abandoned = false;
            let interrupted = sqlx::Error::Protocol("a write to the database was interrupted".into());
            self.fail(&interrupted).await;
            return;
        }
        if !self.abandoned {
            return;
        }
        self.abandoned = false;
        self.spare = false;
        if !self.savepoint {
            let dropped = sqlx::Error::Protocol("the write was dropped before its end".into());
            self.fail(&dropped).await;
        } else if let Err(e) = self.run(UNDO).await {
            self.fail(&e).await;
        }
    }

    /// Commit the open transaction and tell every member how it ended.
    async fn commit(&mut self) {
        if !self.open {
            return;
        }
        match self.run("COMMIT").await {
            Ok(()) => self.end(&Ok(())),
            Err(e) => self.fail(&e).await,
        }
    }

    /// Give up the open transaction (if SQLite has not already): every member gets `error`.
    async fn fail(&mut self, error: &sqlx::Error) {
        if self.open {
            // Fails when SQLite already rolled the transaction back; either way it is over.
            let _ = self.run("ROLLBACK").await;
        }
        self.end(&Err(format!("the write was rolled back: {error}")));
    }

    fn end(&mut self, outcome: &Outcome) {
        self.open = false;
        self.spare = false;
        for member in self.members.drain(..) {
            // A member that stopped waiting (its caller was dropped) has nobody to tell.
            let _ = member.send(outcome.clone());
        }
    }
}

/// The store's single writer: hands out [`WriteTx`]s one at a time, in arrival order.
#[derive(Clone)]
pub(crate) struct Writer {
    group: Arc<Mutex<Group>>,
    /// Writes waiting for the connection: a statement on its own runs alone only when none is.
    queued: Arc<AtomicUsize>,
}

impl fmt::Debug for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

impl Writer {
    /// The writer over `conn`, a connection to the store's database used for nothing else.
    pub(crate) fn new(conn: SqliteConnection) -> Self {
        let group = Group {
            conn,
            open: false,
            members: Vec::new(),
            abandoned: false,
            savepoint: false,
            spare: false,
            unsure: false,
        };
        Writer { group: Arc::new(Mutex::new(group)), queued: Arc::new(AtomicUsize::new(0)) }
    }

    /// Wait for the connection, then start a write: a savepoint in the group transaction (or
    /// the transaction itself, for a group's first write).
    pub(crate) async fn begin(&self) -> Result<WriteTx, StoreError> {
        self.start(false).await
    }

    /// Start a write of one statement. When no other write is under way or waiting, it runs
    /// on its own (autocommit: SQLite commits the statement, with its fsync, before it
    /// answers); otherwise it joins the group like any write. One statement needs no
    /// savepoint: SQLite undoes a failed statement by itself.
    pub(crate) async fn begin_one(&self) -> Result<WriteTx, StoreError> {
        self.start(true).await
    }

    async fn start(&self, one_statement: bool) -> Result<WriteTx, StoreError> {
        let mut group = {
            let _queued = Queued::join(&self.queued);
            Arc::clone(&self.group).lock_owned().await
        };
        // Armed from here: a caller dropped while the transaction or savepoint starts leaves
        // the connection unsure, for a spawned task to settle.
        let mut unfinished = Unfinished::new(self);
        group.settle().await;
        if one_statement && !group.open && self.queued.load(Ordering::Acquire) == 0 {
            unfinished.disarm();
            return Ok(WriteTx { group, unfinished, solo: true });
        }
        // One statement needs no savepoint of its own, but one left spare is used and released
        // (its changes must not be undone as an unused savepoint's).
        group.savepoint = group.open && (!one_statement || group.spare);
        if !group.open {
            if let Err(e) = group.run("BEGIN IMMEDIATE").await {
                unfinished.disarm();
                return Err(e.into());
            }
            group.open = true;
        }
        let spare = std::mem::take(&mut group.spare);
        if group.savepoint
            && !spare
            && let Err(e) = group.run(SAVEPOINT).await
        {
            group.fail(&e).await;
            unfinished.disarm();
            return Err(e.into());
        }
        // A statement of one write that fails leaves nothing to undo (SQLite undid it), but
        // one cut off by a drop may still run: undone like any abandoned write.
        group.abandoned = true;
        Ok(WriteTx { group, unfinished, solo: false })
    }

    /// Finish the group without waiting: roll back an abandoned savepoint and commit what the
    /// group holds. For a write dropped before its end, so that its neighbours are committed
    /// (and the write lock given back) even when no other write comes along.
    fn finish_soon(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let group = Arc::clone(&self.group);
        runtime.spawn(async move { finish(group.lock_owned().await).await });
    }

    /// Wait until the group holding a finished write commits, committing it ourselves when
    /// our turn at the connection comes first.
    async fn committed(&self, mut outcome: oneshot::Receiver<Outcome>) -> Result<(), StoreError> {
        let mut waiting = Unfinished::new(self);
        let told = tokio::select! {
            biased;
            told = &mut outcome => told,
            group = Arc::clone(&self.group).lock_owned() => match outcome.try_recv() {
                Ok(told) => Ok(told),
                Err(_) => {
                    // On its own task, so that a caller dropped now cannot cut the commit off
                    // halfway, not knowing whether it happened.
                    match tokio::runtime::Handle::try_current() {
                        Ok(runtime) => drop(runtime.spawn(finish(group))),
                        Err(_) => finish(group).await,
                    }
                    outcome.await
                }
            },
        };
        waiting.disarm();
        match told {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(StoreError::Database(message)),
            // Every member is told before its sender is dropped; this is only a guard.
            Err(_) => Err(StoreError::Database("the write's transaction ended unreported".into())),
        }
    }
}

/// Counts a write in [`Writer::queued`] while it waits for the connection.
struct Queued<'a>(&'a AtomicUsize);

impl<'a> Queued<'a> {
    fn join(queued: &'a AtomicUsize) -> Self {
        queued.fetch_add(1, Ordering::AcqRel);
        Queued(queued)
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Settle what a dropped write left and commit the group: every member is told how it ended.
async fn finish(mut group: OwnedMutexGuard<Group>) {
    group.settle().await;
    group.commit().await;
}

/// Armed while a write is unfinished (running, or waiting for its commit): dropped armed (the
/// caller was dropped), it has the group finished by a spawned task, as nobody else may come
/// to undo the write's savepoint or commit its neighbours.
struct Unfinished {
    writer: Writer,
    armed: bool,
}

impl Unfinished {
    fn new(writer: &Writer) -> Self {
        Unfinished { writer: writer.clone(), armed: true }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if self.armed {
            self.writer.finish_soon();
        }
    }
}

/// One write in progress: the writer connection (deref to run statements on it) inside the
/// write's savepoint. End it with [`WriteTx::commit`] or [`WriteTx::rollback`]; dropped
/// without either, the write is undone.
pub(crate) struct WriteTx {
    /// Declared first, so the connection is given back before `unfinished` acts on a drop.
    group: OwnedMutexGuard<Group>,
    unfinished: Unfinished,
    /// A statement on its own (autocommit): committed when it answered, nothing to end.
    solo: bool,
}

impl WriteTx {
    /// Keep the write: release its savepoint, give the connection to the next writer and
    /// return once the group transaction holding it has committed (durably).
    pub(crate) async fn commit(self) -> Result<(), StoreError> {
        let WriteTx { mut group, mut unfinished, solo } = self;
        if solo {
            return Ok(());
        }
        // With writers waiting, the next one's savepoint is opened in the same round trip.
        let next = unfinished.writer.queued.load(Ordering::Acquire) > 0;
        if group.savepoint
            && let Err(e) = group.run(if next { RELEASE_AND_NEXT } else { RELEASE }).await
        {
            group.fail(&e).await;
            unfinished.disarm();
            return Err(e.into());
        }
        group.abandoned = false;
        group.spare = group.savepoint && next;
        let (tell, outcome) = oneshot::channel();
        group.members.push(tell);
        drop(group);
        unfinished.disarm();
        unfinished.writer.committed(outcome).await
    }

    /// Undo the write (only this one: the group's other writes stay) and commit the group
    /// now, so the write lock is not held for nobody.
    pub(crate) async fn rollback(self) -> Result<(), StoreError> {
        let WriteTx { mut group, mut unfinished, solo } = self;
        if solo {
            return Ok(());
        }
        group.settle().await;
        group.commit().await;
        unfinished.disarm();
        Ok(())
    }
}

impl Deref for WriteTx {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        &self.group.conn
    }
}

impl DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.group.conn
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    use std::sync::Arc;

    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    use polpo_core::message::Message;

    use crate::memory::{MemoryItemStore, MemoryScope, NewMemoryItem};
    use crate::model::{NewMessage, NewSession};
    use crate::traits::SessionStore;
    use crate::{SqliteStore, StoreError, SystemClock};

    async fn open(dir: &std::path::Path) -> SqliteStore {
        SqliteStore::open(&dir.join("polpo.db"), Arc::new(SystemClock)).await.unwrap()
    }

    fn said(text: &str) -> Vec<NewMessage> {
        vec![NewMessage::new(Message::user(text))]
    }

    /// Let every spawned task run until it waits (here: queues for the writer connection).
    async fn let_them_queue() {
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_refused_write_in_a_group_undoes_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let mut sessions = Vec::new();
        for _ in 0..8 {
            sessions.push(store.create_session(NewSession { agent: "a".into(), ..Default::default() }).await.unwrap());
        }
        // Hold the connection so the appends below queue and run as one group.
        let held = Arc::clone(&store.writer.group).lock_owned().await;
        let appends: Vec<_> = sessions
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let (store, id) = (store.clone(), s.id.clone());
                // Every other append names a revision the session does not have: refused.
                let expected = if i % 2 == 0 { s.revision } else { s.revision + 7 };
                tokio::spawn(async move { store.append_messages(&id, said(&format!("m{i}")), Some(expected)).await })
            })
            .collect();
        let_them_queue().await;
        drop(held);
        for (i, append) in appends.into_iter().enumerate() {
            let result = append.await.unwrap();
            let stored = store.recent_messages(&sessions[i].id, 10).await.unwrap();
            if i % 2 == 0 {
                assert_eq!(result.unwrap().session.message_count, 1);
                assert_eq!(stored.len(), 1, "session {i} keeps its message");
            } else {
                assert!(matches!(result, Err(StoreError::Conflict(_))), "append {i}: {result:?}");
                assert!(stored.is_empty(), "session {i} has nothing of the refused append");
                assert_eq!(store.get_session(&sessions[i].id).await.unwrap().unwrap().message_count, 0);
            }
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_refused_statement_in_a_group_leaves_its_neighbours() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let item = |id: &str| NewMemoryItem {
            id: Some(id.into()),
            scope: MemoryScope::project(),
            kind: "fact".into(),
            content: format!("fact {id}"),
            source: "test".into(),
        };
        store.create_memory_item(item("taken")).await.unwrap();
        let held = Arc::clone(&store.writer.group).lock_owned().await;
        let creates: Vec<_> = ["a", "taken", "b"]
            .into_iter()
            .map(|id| {
                let (store, new) = (store.clone(), item(id));
                tokio::spawn(async move { store.create_memory_item(new).await })
            })
            .collect();
        let_them_queue().await;
        drop(held);
        let results: Vec<_> = futures_join(creates).await;
        assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
        assert!(matches!(results[1], Err(StoreError::Conflict(_))), "{results:?}");
        for id in ["a", "b", "taken"] {
            assert!(store.get_memory_item(id).await.unwrap().is_some(), "{id}");
        }
    }

    async fn futures_join<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
        let mut done = Vec::new();
        for task in tasks {
            done.push(task.await.unwrap());
        }
        done
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_write_dropped_halfway_is_undone_and_its_neighbours_commit() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let kept = store.create_session(NewSession { agent: "a".into(), ..Default::default() }).await.unwrap();
        let mut halfway = store.tx().await.unwrap();
        sqlx::query("DELETE FROM sessions WHERE id = $1").bind(&kept.id).execute(&mut *halfway).await.unwrap();
        let (next_store, next) = (store.clone(), NewSession { agent: "b".into(), ..Default::default() });
        let neighbour = tokio::spawn(async move { next_store.create_session(next).await });
        let_them_queue().await;
        // The caller gives up (a cancelled request) before its write ends.
        drop(halfway);
        let neighbour = neighbour.await.unwrap().unwrap();
        assert!(store.get_session(&kept.id).await.unwrap().is_some(), "the dropped delete was undone");
        assert!(store.get_session(&neighbour.id).await.unwrap().is_some());
        // Nothing holds the database's write lock afterwards: another connection writes at once.
        let other = open(dir.path()).await;
        other.create_session(NewSession { agent: "c".into(), ..Default::default() }).await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_caller_dropped_while_its_group_waits_leaves_no_transaction_open() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let held = Arc::clone(&store.writer.group).lock_owned().await;
        let writes: Vec<_> = (0..4)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    store.create_session(NewSession { agent: format!("a{i}"), ..Default::default() }).await
                })
            })
            .collect();
        let_them_queue().await;
        drop(held);
        let_them_queue().await;
        // Every caller gives up, wherever it is: writing, or waiting for the group's commit.
        for write in &writes {
            write.abort();
        }
        for write in writes {
            let _ = write.await;
        }
        // A write from another connection must not wait for a transaction nobody will end.
        let other = open(dir.path()).await;
        let created = other.create_session(NewSession { agent: "c".into(), ..Default::default() }).await.unwrap();
        assert!(store.get_session(&created.id).await.unwrap().is_some());
        store.create_session(NewSession { agent: "d".into(), ..Default::default() }).await.unwrap();
    }

    const CRASH_CHILD: &str = "POLPO_SQLITE_GROUP_CRASH_DIR";

    /// Child mode (does nothing in a normal run): 16 concurrent writers create sessions with
    /// their first messages and print each acknowledged one, until killed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn crash_child_group_writer() {
        let Ok(dir) = std::env::var(CRASH_CHILD) else { return };
        let store = open(std::path::Path::new(&dir)).await;
        let (acks, mut acked) = tokio::sync::mpsc::unbounded_channel();
        for writer in 0..16 {
            let (store, acks) = (store.clone(), acks.clone());
            tokio::spawn(async move {
                for n in 0u64.. {
                    let new = NewSession { agent: "a".into(), ..Default::default() };
                    let first = said(&format!("{writer}.{n}"));
                    let created = store.create_session_with_messages(new, first).await.unwrap();
                    acks.send(created.session.id).unwrap();
                }
            });
        }
        let mut out = std::io::stdout();
        while let Some(id) = acked.recv().await {
            writeln!(out, "ack {id}").unwrap();
            out.flush().unwrap();
        }
    }

    /// SIGKILL a process whose concurrent writes are being committed in groups: every write it
    /// acknowledged is there, whole, after reopening.
    #[tokio::test(flavor = "current_thread")]
    async fn a_kill_during_group_commits_loses_no_acknowledged_write() {
        let dir = tempfile::tempdir().unwrap();
        for round in 0..2 {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "sql::sqlite::writer::tests::crash_child_group_writer", "--nocapture"])
                .env(CRASH_CHILD, dir.path())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut acked = Vec::new();
            for line in BufReader::new(child.stdout.take().unwrap()).lines() {
                let line = line.unwrap();
                if let Some(id) = line.split_whitespace().skip_while(|w| *w != "ack").nth(1) {
                    acked.push(id.to_owned());
                }
                if acked.len() >= 300 + round * 97 {
                    break;
                }
            }
            kill(Pid::from_raw(i32::try_from(child.id()).unwrap()), Signal::SIGKILL).unwrap();
            child.wait().unwrap();
            let store = open(dir.path()).await;
            for id in &acked {
                let session = store.get_session(id).await.unwrap();
                assert_eq!(session.map(|s| s.message_count), Some(1), "acknowledged session {id} (round {round})");
                assert_eq!(store.recent_messages(id, 5).await.unwrap().len(), 1);
            }
        }
    }
}
