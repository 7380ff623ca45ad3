//! `RunStore` over SQL: runs, events, checkpoints, leases and the run work queue.

/// Stamped out per driver by `sql_store_impl!` in the parent module.
macro_rules! sql_runs {
    ($store:ty, $row:ty) => {
        impl $store {
            /// Insert the new run `new` (status `running`, lease generation `generation`: 0 with
            /// no lease yet) in `tx`, announcing it on commit where the database can: the one
            /// creation path of `create_run` and `create_leased_run`.
            async fn insert_run(
                &self,
                tx: &mut WriteTx,
                new: NewRun,
                generation: u64,
            ) -> Result<Run, StoreError> {
                let now = self.now();
                let run = new.into_run(now, self.ids())?;
                sqlx::query(
                    "INSERT INTO runs (id, agent, session_id, status, error, created_at, updated_at, revision, last_seq, \
                       lease_generation) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                )
                .bind(&run.id)
                .bind(&run.agent)
                .bind(&run.session_id)
                .bind(run.status.as_str())
                .bind(&run.error)
                .bind(now.timestamp_millis())
                .bind(now.timestamp_millis())
                .bind(to_db(run.revision))
                .bind(to_db(run.last_seq))
                .bind(to_db(generation))
                .execute(&mut **tx)
                .await?;
                if let Some(announce) = ANNOUNCE_RUN {
                    sqlx::query(announce).bind(&run.id).execute(&mut **tx).await?;
                }
                Ok(run)
            }
        }

        #[async_trait]
        impl RunStore for $store {
            async fn create_run(&self, new: NewRun) -> Result<Run, StoreError> {
                let mut tx = self.tx().await?;
                let run = self.insert_run(&mut tx, new, 0).await?;
                tx.commit().await?;
                Ok(run)
            }

            async fn create_leased_run(&self, new: NewRun, owner: &str, ttl: Duration) -> Result<(Run, Lease), StoreError> {
                let ttl = model::lease_ttl(ttl)?;
                let mut tx = self.tx().await?;
                // The first grant (generation 1) in the creating transaction: a claimer sees
                // the run only together with its live lease.
                let run = self.insert_run(&mut tx, new, 1).await?;
                let lease = model::first_lease(&run, owner, ttl);
                sqlx::query("INSERT INTO run_leases (run_id, owner, expires_at, generation) VALUES ($1, $2, $3, $4)")
                    .bind(&run.id)
                    .bind(owner)
                    .bind(lease.expires_at.timestamp_millis())
                    .bind(to_db(lease.generation))
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok((run, lease))
            }

            async fn get_run(&self, id: &str) -> Result<Option<Run>, StoreError> {
                sqlx::query(
                    "SELECT id, agent, session_id, status, error, created_at, updated_at, revision, last_seq \
                     FROM runs WHERE id = $1",
                )
                .bind(id)
                .fetch_optional(&self.pool)
                .await?
                .as_ref()
                .map(run_from_row)
                .transpose()
            }

            async fn list_runs(&self, filter: &RunFilter, page: &PageRequest) -> Result<Page<Run>, StoreError> {
                let (after_ms, after_id) = time_cursor(page)?;
                let size = page.size();
                let rows = sqlx::query(
                    "SELECT id, agent, session_id, status, error, created_at, updated_at, revision, last_seq \
                     FROM runs \
                     WHERE ($1 IS NULL OR agent = $1) AND ($2 IS NULL OR session_id = $2) AND ($3 IS NULL OR status = $3) \
                       AND (created_at, id) < ($4, $5) \
                     ORDER BY created_at DESC, id DESC LIMIT $6",
                )
                .bind(&filter.agent)
                .bind(&filter.session_id)
                .bind(filter.status.map(RunStatus::as_str))
                .bind(after_ms)
                .bind(after_id)
                .bind(to_db(size as u64 + 1))
                .fetch_all(&self.pool)
                .await?;
                let items = rows.iter().map(run_from_row).collect::<Result<Vec<_>, _>>()?;
                Ok(Page::from_overfetch(items, size, |r| Cursor::at_time(r.created_at.timestamp_millis(), &r.id)))
            }

            async fn update_run_status_fenced(
                &self,
                id: &str,
                fence: Option<&Lease>,
                status: RunStatus,
                error: Option<String>,
                expected_revision: Option<u64>,
            ) -> Result<Run, StoreError> {
                let now = self.now();
                let mut tx = self.tx().await?;
                let row = sqlx::query(
                    "UPDATE runs SET revision = revision WHERE id = $1 \
                     RETURNING id, agent, session_id, status, error, created_at, updated_at, revision, last_seq, lease_generation",
                )
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::not_found("run", id))?;
                model::check_fence(id, fence, from_db(row.try_get("lease_generation")?))?;
                let mut run = run_from_row(&row)?;
                model::check_revision("run", id, expected_revision, run.revision)?;
                run.status.check_transition(status)?;
                run.status = status;
                run.error = error;
                run.revision += 1;
                run.updated_at = now;
                sqlx::query("UPDATE runs SET status = $2, error = $3, updated_at = $4, revision = $5 WHERE id = $1")
                    .bind(id)
                    .bind(status.as_str())
                    .bind(&run.error)
                    .bind(now.timestamp_millis())
                    .bind(to_db(run.revision))
                    .execute(&mut *tx)
                    .await?;
                if let Some(announce) = ANNOUNCE_EVENTS {
                    // A status change ends or pauses a run's stream even without a journal event.
                    sqlx::query(announce).bind(format!("{id}:{}", run.last_seq)).execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok(run)
            }

            async fn append_events_fenced(
                &self,
                run_id: &str,
                fence: Option<&Lease>,
                events: Vec<NewRunEvent>,
            ) -> Result<std::ops::RangeInclusive<u64>, StoreError> {
                let texts = model::encode_event_batch(&events)?;
                let now = self.now().timestamp_millis();
                let n = events.len() as i64;
                let generation = fence.map(|f| to_db(f.generation));
                let mut tx = self.tx().await?;
                // The row lock taken by this UPDATE serialises appends to one run: gap-free seqs.
                // The fence is checked by the same statement, on the locked row: a grant of the
                // lease committed before it refuses the append, one after it waits for it.
                let last: i64 = match sqlx::query(
                    "UPDATE runs SET last_seq = last_seq + $3, updated_at = $2 \
                     WHERE id = $1 AND ($4 IS NULL OR lease_generation = $4) RETURNING last_seq",
                )
                .bind(run_id)
                .bind(now)
                .bind(n)
                .bind(generation)
                .fetch_optional(&mut *tx)
                .await?
                {
                    Some(row) => row.try_get("last_seq")?,
                    None => {
                        tx.rollback().await?;
                        return Err(match (fence, self.run_exists(run_id).await?) {
                            (Some(f), true) => StoreError::LeaseLost { run_id: run_id.to_owned(), owner: f.owner.clone() },
                            _ => StoreError::not_found("run", run_id),
                        });
                    }
                };
                let first = last - n + 1;
                for ((event, text), seq) in events.iter().zip(texts).zip(first..) {
                    sqlx::query("INSERT INTO run_events (run_id, seq, event_type, data, created_at) VALUES ($1, $2, $3, $4, $5)")
                        .bind(run_id)
                        .bind(seq)
                        .bind(&event.event_type)
                        .bind(text)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                }
                if let Some(announce) = ANNOUNCE_EVENTS {
                    // Delivered at commit, so a follower never hears of an event it cannot read.
                    sqlx::query(announce).bind(format!("{run_id}:{last}")).execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok(from_db(first)..=from_db(last))
            }

            async fn events_after(&self, run_id: &str, after_seq: u64, limit: u32) -> Result<Vec<RunEvent>, StoreError> {
                let size = PageRequest::first(limit).size();
                let rows = sqlx::query(
                    "SELECT run_id, seq, event_type, data, created_at FROM run_events \
                     WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                )
                .bind(run_id)
                .bind(to_db(after_seq))
                .bind(to_db(size as u64))
                .fetch_all(&self.pool)
                .await?;
                if rows.is_empty() && !self.run_exists(run_id).await? {
                    return Err(StoreError::not_found("run", run_id));
                }
                rows.iter().map(event_from_row).collect()
            }

            async fn put_checkpoint_fenced(
                &self,
                run_id: &str,
                fence: Option<&Lease>,
                seq: u64,
                state: Value,
            ) -> Result<Checkpoint, StoreError> {
                model::check_size("checkpoint", &state, model::MAX_CHECKPOINT_BYTES)?;
                let mut tx = self.tx().await?;
                Self::lock_fence(&mut tx, run_id, fence).await?;
                let checkpoint = Checkpoint { run_id: run_id.to_owned(), seq, state, created_at: self.now() };
                let written = sqlx::query(
                    "INSERT INTO run_checkpoints (run_id, seq, state, created_at) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (run_id) DO UPDATE SET seq = excluded.seq, state = excluded.state, created_at = excluded.created_at \
                     WHERE run_checkpoints.seq <= excluded.seq",
                )
                .bind(run_id)
                .bind(to_db(seq))
                .bind(to_text(&checkpoint.state)?)
                .bind(checkpoint.created_at.timestamp_millis())
                .execute(&mut *tx)
                .await?;
                if written.rows_affected() == 0 {
                    return Err(StoreError::Conflict(format!("run `{run_id}` has a newer checkpoint")));
                }
                tx.commit().await?;
                Ok(checkpoint)
            }

            async fn latest_checkpoint(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
                let Some(row) = sqlx::query("SELECT run_id, seq, state, created_at FROM run_checkpoints WHERE run_id = $1")
                    .bind(run_id)
                    .fetch_optional(&self.pool)
                    .await?
                else {
                    return Ok(None);
                };
                Ok(Some(Checkpoint {
                    run_id: row.try_get("run_id")?,
                    seq: from_db(row.try_get("seq")?),
                    state: from_text(row.try_get::<&str, _>("state")?)?,
                    created_at: from_millis(row.try_get("created_at")?),
                }))
            }

            async fn claim_run(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<Lease, StoreError> {
                let ttl = model::lease_ttl(ttl)?;
                let now = self.now();
                let mut tx = self.tx().await?;
                // The next generation, on the run row: it outlives released leases, so a
                // generation is never handed out twice. Rolled back when the lease is not granted.
                let generation: i64 = sqlx::query(
                    "UPDATE runs SET lease_generation = lease_generation + 1 WHERE id = $1 RETURNING lease_generation",
                )
                .bind(run_id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::not_found("run", run_id))?
                .try_get("lease_generation")?;
                let lease = Lease {
                    run_id: run_id.to_owned(),
                    owner: owner.to_owned(),
                    expires_at: now + ttl,
                    generation: from_db(generation),
                };
                let granted = sqlx::query(
                    "INSERT INTO run_leases (run_id, owner, expires_at, generation) VALUES ($1, $2, $3, $5) \
                     ON CONFLICT (run_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at, \
                       generation = excluded.generation \
                     WHERE run_leases.owner = excluded.owner OR run_leases.expires_at <= $4",
                )
                .bind(run_id)
                .bind(owner)
                .bind(lease.expires_at.timestamp_millis())
                .bind(now.timestamp_millis())
                .bind(generation)
                .execute(&mut *tx)
                .await?;
                if granted.rows_affected() > 0 {
                    tx.commit().await?;
                    return Ok(lease);
                }
                tx.rollback().await?;
                match self.lease_of(run_id).await? {
                    Some(held) => {
                        model::lease_grantable(Some(&held), owner, now)?;
                        Err(StoreError::Conflict(format!("lease on run `{run_id}` changed concurrently; retry")))
                    }
                    None => Err(StoreError::Conflict(format!("lease on run `{run_id}` changed concurrently; retry"))),
                }
            }

            async fn claim_next_run(&self, owner: &str, ttl: Duration) -> Result<Option<Lease>, StoreError> {
                let ttl = model::lease_ttl(ttl)?;
                let now = self.now();
                let mut tx = self.tx().await?;
                let claimed = sqlx::query(CLAIM_NEXT_RUN)
                    .bind(owner)
                    .bind((now + ttl).timestamp_millis())
                    .bind(now.timestamp_millis())
                    .fetch_optional(&mut *tx)
                    .await?
                    .as_ref()
                    .map(lease_from_row)
                    .transpose()?;
                let Some(mut lease) = claimed else {
                    tx.commit().await?;
                    return Ok(None);
                };
                // The grant's fencing generation, in the claim's transaction (the run row is
                // already ours in it).
                let generation: i64 = sqlx::query(
                    "UPDATE runs SET lease_generation = lease_generation + 1 WHERE id = $1 RETURNING lease_generation",
                )
                .bind(&lease.run_id)
                .fetch_one(&mut *tx)
                .await?
                .try_get("lease_generation")?;
                sqlx::query("UPDATE run_leases SET generation = $2 WHERE run_id = $1")
                    .bind(&lease.run_id)
                    .bind(generation)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                lease.generation = from_db(generation);
                Ok(Some(lease))
            }

            async fn import_run(
                &self,
                run: &Run,
                events: &[RunEvent],
                checkpoint: Option<&Checkpoint>,
            ) -> Result<ImportOutcome, StoreError> {
                model::check_run_import(run, events, checkpoint)?;
                let mut tx = self.tx().await?;
                let inserted = sqlx::query(
                    "INSERT INTO runs (id, agent, session_id, status, error, created_at, updated_at, revision, last_seq) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING",
                )
                .bind(&run.id)
                .bind(&run.agent)
                .bind(&run.session_id)
                .bind(run.status.as_str())
                .bind(&run.error)
                .bind(run.created_at.timestamp_millis())
                .bind(run.updated_at.timestamp_millis())
                .bind(to_db(run.revision))
                .bind(to_db(run.last_seq))
                .execute(&mut *tx)
                .await?;
                if inserted.rows_affected() == 0 {
                    tx.rollback().await?;
                    let existing = self.get_run(&run.id).await?.ok_or_else(|| StoreError::not_found("run", &run.id))?;
                    model::same_import("run", &run.id, &existing, run)?;
                    let mut stored = Vec::with_capacity(events.len());
                    loop {
                        let page = self.events_after(&run.id, stored.len() as u64, crate::page::MAX_PAGE).await?;
                        if page.is_empty() {
                            break;
                        }
                        stored.extend(page);
                    }
                    model::same_import("run", &run.id, &stored.as_slice(), &events)?;
                    let stored_checkpoint = self.latest_checkpoint(&run.id).await?;
                    return model::same_import("run", &run.id, &stored_checkpoint.as_ref(), &checkpoint);
                }
                for e in events {
                    sqlx::query("INSERT INTO run_events (run_id, seq, event_type, data, created_at) VALUES ($1, $2, $3, $4, $5)")
                        .bind(&run.id)
                        .bind(to_db(e.seq))
                        .bind(&e.event_type)
                        .bind(to_text(&e.data)?)
                        .bind(e.created_at.timestamp_millis())
                        .execute(&mut *tx)
                        .await?;
                }
                if let Some(c) = checkpoint {
                    sqlx::query("INSERT INTO run_checkpoints (run_id, seq, state, created_at) VALUES ($1, $2, $3, $4)")
                        .bind(&run.id)
                        .bind(to_db(c.seq))
                        .bind(to_text(&c.state)?)
                        .bind(c.created_at.timestamp_millis())
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(ImportOutcome::Imported)
            }

            async fn renew_lease(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<Lease, StoreError> {
                let ttl = model::lease_ttl(ttl)?;
                let expires_at = self.now() + ttl;
                let write = sqlx::query(
                    "UPDATE run_leases SET expires_at = $3 WHERE run_id = $1 AND owner = $2 \
                     RETURNING run_id, owner, expires_at, generation",
                )
                .bind(run_id)
                .bind(owner)
                .bind(expires_at.timestamp_millis());
                self.write_fetch_optional(write).await?
                .as_ref()
                .map(lease_from_row)
                .transpose()?
                .ok_or_else(|| StoreError::LeaseLost { run_id: run_id.to_owned(), owner: owner.to_owned() })
            }

            async fn release_lease(&self, run_id: &str, owner: &str) -> Result<(), StoreError> {
                let write = sqlx::query("DELETE FROM run_leases WHERE run_id = $1 AND owner = $2")
                    .bind(run_id)
                    .bind(owner);
                self.write_execute(write).await?;
                Ok(())
            }

            async fn expired_runs(&self, limit: u32) -> Result<Vec<Lease>, StoreError> {
                sqlx::query(
                    "SELECT l.run_id, l.owner, l.expires_at, l.generation FROM run_leases l JOIN runs r ON r.id = l.run_id \
                     WHERE l.expires_at <= $1 AND r.status IN ('running', 'paused') \
                     ORDER BY l.expires_at, l.run_id LIMIT $2",
                )
                .bind(self.now().timestamp_millis())
                .bind(to_db(PageRequest::first(limit).size() as u64))
                .fetch_all(&self.pool)
                .await?
                .iter()
                .map(lease_from_row)
                .collect()
            }

            async fn running_leases(&self, limit: u32) -> Result<Vec<Lease>, StoreError> {
                sqlx::query(
                    "SELECT l.run_id, l.owner, l.expires_at, l.generation FROM run_leases l JOIN runs r ON r.id = l.run_id \
                     WHERE r.status = 'running' ORDER BY l.expires_at DESC, l.run_id LIMIT $1",
                )
                .bind(to_db(PageRequest::first(limit).size() as u64))
                .fetch_all(&self.pool)
                .await?
                .iter()
                .map(lease_from_row)
                .collect()
            }
        }

    };
}
pub(crate) use sql_runs;
