//! `TaskStore` and `MissionStore` over SQL: tasks with their dependency rows and worker
//! claims, and missions.

/// The candidates of `claim_ready`, the same on both drivers but for `$lock`, the row
/// locking clause (PostgreSQL: skip rows another claimer holds; SQLite: none, its write
/// transaction is already exclusive), and `$list`, a subquery of the strings of a JSON array
/// bound as `$3` (the agents with no place left). Ready tasks in claim order through the
/// index of pending tasks, so it reads the tasks it returns and the pending ones before them.
/// Binds: now, limit, full agents (JSON array).
macro_rules! claim_ready_sql {
    ($lock:literal, $list:literal) => {
        concat!(
            "SELECT t.id, t.agent FROM tasks t \
             WHERE t.status = 'pending' AND (t.claim_expires_at IS NULL OR t.claim_expires_at <= $1) \
               AND NOT EXISTS (SELECT 1 FROM task_dependencies d JOIN tasks u ON u.id = d.depends_on \
                               WHERE d.task_id = t.id AND u.status <> 'done') \
               AND (t.mission_id IS NULL OR EXISTS (SELECT 1 FROM missions m \
                                                    WHERE m.id = t.mission_id AND m.status = 'active')) \
               AND (t.agent IS NULL OR t.agent NOT IN (",
            $list,
            ")) ORDER BY t.priority DESC, t.created_at, t.id LIMIT $2 ",
            $lock
        )
    };
}
pub(crate) use claim_ready_sql;

/// The agent of each task taking one of its agent's places (see `work::occupies_agent`).
/// Binds: now.
pub(crate) const OCCUPYING: &str = "SELECT agent FROM tasks WHERE agent IS NOT NULL \
     AND (status IN ('assigned', 'in_progress', 'review') \
          OR (claimed_by IS NOT NULL AND status IN ('pending', 'failed') AND claim_expires_at > $1))";

/// Stamped out per driver by `sql_store_impl!` in the parent module, which also defines
/// `CLAIM_READY_TASKS` and `CLAIM_LOCK` in the driver module.
macro_rules! sql_work {
    ($store:ty, $row:ty) => {
        mod work_impl {
            use super::*;
            use polpo_core::tasks::{Mission, Task};

            use crate::work::{self, AgentBudget, AgentLimits, MissionFilter, StoredMission, StoredTask, TaskClaim, TaskFilter};
            use crate::sql::work::OCCUPYING;
            use crate::traits::{MissionStore, TaskStore};

            const TASK_COLUMNS: &str = "body, revision, claimed_by, claim_expires_at";
            const MISSION_COLUMNS: &str = "body, revision";

            /// A task or mission row's record (its JSON `body`) and `revision`: both tables
            /// keep them alike.
            fn body_and_revision<T: serde::de::DeserializeOwned>(row: &$row) -> Result<(T, u64), StoreError> {
                Ok((from_text(row.try_get::<&str, _>("body")?)?, from_db(row.try_get("revision")?)))
            }

            fn task_from_row(row: &$row) -> Result<StoredTask, StoreError> {
                let (task, revision) = body_and_revision(row)?;
                let worker: Option<String> = row.try_get("claimed_by")?;
                let expires: Option<i64> = row.try_get("claim_expires_at")?;
                let claim = worker.zip(expires).map(|(worker, at)| TaskClaim { worker, expires_at: from_millis(at) });
                Ok(StoredTask { task, revision, claim })
            }

            fn mission_from_row(row: &$row) -> Result<StoredMission, StoreError> {
                let (mission, revision) = body_and_revision(row)?;
                Ok(StoredMission { mission, revision })
            }

            impl $store {
                /// Row `id` of `table` (a `kind` in `not_found`), mapped by `map` from
                /// `columns` and locked until `tx` commits, so the revision check and the
                /// write after it are one step.
                async fn locked_row<'e, E, T>(
                    executor: E,
                    table: &str,
                    columns: &str,
                    kind: &'static str,
                    id: &str,
                    map: fn(&$row) -> Result<T, StoreError>,
                ) -> Result<T, StoreError>
                where
                    E: sqlx::Executor<'e, Database = <$row as sqlx::Row>::Database>,
                {
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "UPDATE {table} SET revision = revision WHERE id = $1 RETURNING {columns}"
                    )))
                    .bind(id)
                    .fetch_optional(executor)
                    .await?
                    .as_ref()
                    .map(map)
                    .transpose()?
                    .ok_or_else(|| StoreError::not_found(kind, id))
                }

                async fn task_by_id<'e, E>(executor: E, id: &str) -> Result<Option<StoredTask>, StoreError>
                where
                    E: sqlx::Executor<'e, Database = <$row as sqlx::Row>::Database>,
                {
                    sqlx::query(sqlx::AssertSqlSafe(format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1")))
                        .bind(id)
                        .fetch_optional(executor)
                        .await?
                        .as_ref()
                        .map(task_from_row)
                        .transpose()
                }

                /// Whether the mission a task names exists (`true` when it names none).
                async fn mission_there<'e, E>(executor: E, mission_id: Option<&String>) -> Result<bool, StoreError>
                where
                    E: sqlx::Executor<'e, Database = <$row as sqlx::Row>::Database>,
                {
                    let Some(id) = mission_id else { return Ok(true) };
                    Ok(sqlx::query("SELECT 1 FROM missions WHERE id = $1").bind(id).fetch_optional(executor).await?.is_some())
                }
            }

            #[async_trait]
            impl TaskStore for $store {
                async fn create_tasks(&self, batch: Vec<Task>) -> Result<Vec<StoredTask>, StoreError> {
                    let now = self.now();
                    let mut tx = self.tx().await?;
                    let mut deps = Vec::new();
                    for dep in work::outside_deps(&batch) {
                        deps.extend(Self::task_by_id(&mut *tx, &dep).await?);
                    }
                    let mut missions = std::collections::HashSet::new();
                    for m in work::missions_of(&batch) {
                        if Self::mission_there(&mut *tx, Some(&m)).await? {
                            missions.insert(m);
                        }
                    }
                    let stored = work::new_tasks(batch, &deps, |m| missions.contains(m), now, self.ids())?;
                    for s in &stored {
                        let t = &s.task;
                        // A taken id or an unfinished task's title is a unique violation: `conflict`.
                        sqlx::query(
                            "INSERT INTO tasks (id, title, status, mission_id, priority, created_at, revision, body, agent) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                        )
                        .bind(&t.id)
                        .bind(&t.title)
                        .bind(t.status.as_str())
                        .bind(&t.mission_id)
                        .bind(t.priority)
                        .bind(t.created_at.timestamp_millis())
                        .bind(to_db(s.revision))
                        .bind(to_text(t)?)
                        .bind(work::runs_as(t))
                        .execute(&mut *tx)
                        .await?;
                    }
                    for s in &stored {
                        for dep in &s.task.depends_on {
                            sqlx::query("INSERT INTO task_dependencies (task_id, depends_on) VALUES ($1, $2)")
                                .bind(&s.task.id)
                                .bind(dep)
                                .execute(&mut *tx)
                                .await?;
                        }
                    }
                    tx.commit().await?;
                    Ok(stored)
                }

                async fn get_task(&self, id: &str) -> Result<Option<StoredTask>, StoreError> {
                    Self::task_by_id(&self.pool, id).await
                }

                async fn list_tasks(&self, filter: &TaskFilter, page: &PageRequest) -> Result<Page<StoredTask>, StoreError> {
                    let (after_ms, after_id) = time_cursor(page)?;
                    let size = page.size();
                    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "SELECT {TASK_COLUMNS} FROM tasks \
                         WHERE ($1 IS NULL OR status = $1) AND ($2 IS NULL OR mission_id = $2) \
                           AND (created_at, id) < ($3, $4) \
                         ORDER BY created_at DESC, id DESC LIMIT $5"
                    )))
                    .bind(filter.status.map(|s| s.as_str()))
                    .bind(&filter.mission_id)
                    .bind(after_ms)
                    .bind(after_id)
                    .bind(to_db(size as u64 + 1))
                    .fetch_all(&self.pool)
                    .await?;
                    let items = rows.iter().map(task_from_row).collect::<Result<Vec<_>, _>>()?;
                    Ok(Page::from_overfetch(items, size, |t| Cursor::at_time(t.task.created_at.timestamp_millis(), &t.task.id)))
                }

                async fn update_task(&self, task: Task, expected_revision: u64) -> Result<StoredTask, StoreError> {
                    let now = self.now();
                    let mut tx = self.tx().await?;
                    let current = Self::locked_row(&mut *tx, "tasks", TASK_COLUMNS, "task", &task.id, task_from_row).await?;
                    let next = work::updated_task(&current, task, expected_revision, now)?;
                    let t = &next.task;
                    sqlx::query("UPDATE tasks SET title = $2, status = $3, priority = $4, revision = $5, body = $6, agent = $7 WHERE id = $1")
                        .bind(&t.id)
                        .bind(&t.title)
                        .bind(t.status.as_str())
                        .bind(t.priority)
                        .bind(to_db(next.revision))
                        .bind(to_text(t)?)
                        .bind(work::runs_as(t))
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(next)
                }

                async fn claim_ready(
                    &self,
                    worker: &str,
                    lease: Duration,
                    limit: u32,
                    agents: &AgentLimits,
                ) -> Result<Vec<StoredTask>, StoreError> {
                    let ttl = model::lease_ttl(lease)?;
                    let limit = work::claim_limit(limit, agents)?;
                    let now = self.now();
                    let mut tx = self.tx().await?;
                    let mut budget = AgentBudget::new(agents, std::iter::empty());
                    if !agents.is_empty() {
                        // Claimers of agents with limits take turns, so each counts the
                        // places the others took.
                        if let Some(lock) = CLAIM_LOCK {
                            sqlx::query(lock).execute(&mut *tx).await?;
                        }
                        let rows = sqlx::query(OCCUPYING).bind(now.timestamp_millis()).fetch_all(&mut *tx).await?;
                        let occupying = rows.iter().map(|r| r.try_get::<String, _>("agent")).collect::<Result<Vec<_>, _>>()?;
                        budget = AgentBudget::new(agents, occupying.iter().map(String::as_str));
                    }
                    let mut claimed = Vec::new();
                    // A round passes over the agents found full; one that fills up during a
                    // round sends the claim round again without it (at most once per agent).
                    for _ in 0..=agents.len() {
                        let want = limit - claimed.len();
                        let full = serde_json::to_string(&budget.full()).map_err(|e| StoreError::Invalid(e.to_string()))?;
                        let candidates = sqlx::query(CLAIM_READY_TASKS)
                            .bind(now.timestamp_millis())
                            .bind(to_db(want as u64))
                            .bind(full)
                            .fetch_all(&mut *tx)
                            .await?;
                        let mut passed_over = false;
                        for row in &candidates {
                            let agent: Option<String> = row.try_get("agent")?;
                            if !budget.take(agent.as_deref()) {
                                passed_over = true;
                                continue;
                            }
                            let id: String = row.try_get("id")?;
                            let row = sqlx::query(sqlx::AssertSqlSafe(format!(
                                "UPDATE tasks SET claimed_by = $1, claim_expires_at = $2, revision = revision + 1 \
                                 WHERE id = $3 RETURNING {TASK_COLUMNS}"
                            )))
                            .bind(worker)
                            .bind((now + ttl).timestamp_millis())
                            .bind(&id)
                            .fetch_one(&mut *tx)
                            .await?;
                            claimed.push(task_from_row(&row)?);
                        }
                        if !passed_over || claimed.len() == limit {
                            break;
                        }
                    }
                    tx.commit().await?;
                    Ok(claimed)
                }

                async fn delete_task(&self, id: &str) -> Result<StoredTask, StoreError> {
                    let now = self.now();
                    let mut tx = self.tx().await?;
                    let current = Self::locked_row(&mut *tx, "tasks", TASK_COLUMNS, "task", id, task_from_row).await?;
                    let dependents: Vec<String> = sqlx::query("SELECT task_id FROM task_dependencies WHERE depends_on = $1 ORDER BY task_id")
                        .bind(id)
                        .fetch_all(&mut *tx)
                        .await?
                        .iter()
                        .map(|r| r.try_get("task_id"))
                        .collect::<Result<_, _>>()?;
                    work::check_deletable(&current, &dependents, now)?;
                    sqlx::query("DELETE FROM task_dependencies WHERE task_id = $1").bind(id).execute(&mut *tx).await?;
                    sqlx::query("DELETE FROM tasks WHERE id = $1").bind(id).execute(&mut *tx).await?;
                    tx.commit().await?;
                    Ok(current)
                }

                async fn hold_task(&self, id: &str, worker: &str, lease: Duration) -> Result<StoredTask, StoreError> {
                    let ttl = model::lease_ttl(lease)?;
                    let now = self.now();
                    let mut tx = self.tx().await?;
                    let current = Self::locked_row(&mut *tx, "tasks", TASK_COLUMNS, "task", id, task_from_row).await?;
                    let next = work::held_task(&current, worker, now + ttl, now)?;
                    let claim = next.claim.as_ref().map(|c| c.expires_at.timestamp_millis());
                    sqlx::query("UPDATE tasks SET claimed_by = $2, claim_expires_at = $3, revision = $4 WHERE id = $1")
                        .bind(id)
                        .bind(worker)
                        .bind(claim)
                        .bind(to_db(next.revision))
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(next)
                }

                async fn release_task(&self, id: &str, worker: &str) -> Result<(), StoreError> {
                    let write = sqlx::query("UPDATE tasks SET claimed_by = NULL, claim_expires_at = NULL WHERE id = $1 AND claimed_by = $2")
                        .bind(id)
                        .bind(worker);
                    self.write_execute(write).await?;
                    Ok(())
                }

                async fn import_task(&self, stored: &StoredTask) -> Result<ImportOutcome, StoreError> {
                    work::check_task_import(stored)?;
                    let t = &stored.task;
                    let mut tx = self.tx().await?;
                    let mut there = Self::mission_there(&mut *tx, t.mission_id.as_ref()).await?;
                    for dep in &t.depends_on {
                        there &= Self::task_by_id(&mut *tx, dep).await?.is_some();
                    }
                    if !there {
                        return Err(StoreError::Invalid(format!("task `{}`: import its dependencies and mission first", t.id)));
                    }
                    let inserted = sqlx::query(
                        "INSERT INTO tasks (id, title, status, mission_id, priority, created_at, revision, claimed_by, claim_expires_at, body, agent) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (id) DO NOTHING",
                    )
                    .bind(&t.id)
                    .bind(&t.title)
                    .bind(t.status.as_str())
                    .bind(&t.mission_id)
                    .bind(t.priority)
                    .bind(t.created_at.timestamp_millis())
                    .bind(to_db(stored.revision))
                    .bind(stored.claim.as_ref().map(|c| c.worker.as_str()))
                    .bind(stored.claim.as_ref().map(|c| c.expires_at.timestamp_millis()))
                    .bind(to_text(t)?)
                    .bind(work::runs_as(t))
                    .execute(&mut *tx)
                    .await?;
                    if inserted.rows_affected() == 0 {
                        tx.rollback().await?;
                        let existing = self.get_task(&t.id).await?.ok_or_else(|| StoreError::not_found("task", &t.id))?;
                        return model::same_import("task", &t.id, &existing, stored);
                    }
                    for dep in &t.depends_on {
                        sqlx::query("INSERT INTO task_dependencies (task_id, depends_on) VALUES ($1, $2)")
                            .bind(&t.id)
                            .bind(dep)
                            .execute(&mut *tx)
                            .await?;
                    }
                    tx.commit().await?;
                    Ok(ImportOutcome::Imported)
                }
            }

            #[async_trait]
            impl MissionStore for $store {
                async fn create_mission(&self, mission: Mission) -> Result<StoredMission, StoreError> {
                    let stored = work::new_mission(mission, self.now(), self.ids())?;
                    let m = &stored.mission;
                    // A taken id or name is a unique violation: `conflict`.
                    let write = sqlx::query(
                        "INSERT INTO missions (id, name, status, created_at, revision, body) VALUES ($1, $2, $3, $4, $5, $6)",
                    )
                    .bind(&m.id)
                    .bind(&m.name)
                    .bind(m.status.as_str())
                    .bind(m.created_at.timestamp_millis())
                    .bind(to_db(stored.revision))
                    .bind(to_text(m)?);
                    self.write_execute(write).await?;
                    Ok(stored)
                }

                async fn get_mission(&self, id: &str) -> Result<Option<StoredMission>, StoreError> {
                    sqlx::query("SELECT body, revision FROM missions WHERE id = $1")
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?
                        .as_ref()
                        .map(mission_from_row)
                        .transpose()
                }

                async fn list_missions(&self, filter: &MissionFilter, page: &PageRequest) -> Result<Page<StoredMission>, StoreError> {
                    let (after_ms, after_id) = time_cursor(page)?;
                    let size = page.size();
                    let rows = sqlx::query(
                        "SELECT body, revision FROM missions \
                         WHERE ($1 IS NULL OR status = $1) \
                           AND (created_at, id) < ($2, $3) \
                         ORDER BY created_at DESC, id DESC LIMIT $4",
                    )
                    .bind(filter.status.map(|s| s.as_str()))
                    .bind(after_ms)
                    .bind(after_id)
                    .bind(to_db(size as u64 + 1))
                    .fetch_all(&self.pool)
                    .await?;
                    let items = rows.iter().map(mission_from_row).collect::<Result<Vec<_>, _>>()?;
                    Ok(Page::from_overfetch(items, size, |m| Cursor::at_time(m.mission.created_at.timestamp_millis(), &m.mission.id)))
                }

                async fn update_mission(&self, mission: Mission, expected_revision: u64) -> Result<StoredMission, StoreError> {
                    let now = self.now();
                    let mut tx = self.tx().await?;
                    let current =
                        Self::locked_row(&mut *tx, "missions", MISSION_COLUMNS, "mission", &mission.id, mission_from_row).await?;
                    let next = work::updated_mission(&current, mission, expected_revision, now)?;
                    let m = &next.mission;
                    sqlx::query("UPDATE missions SET name = $2, status = $3, revision = $4, body = $5 WHERE id = $1")
                        .bind(&m.id)
                        .bind(&m.name)
                        .bind(m.status.as_str())
                        .bind(to_db(next.revision))
                        .bind(to_text(m)?)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(next)
                }

                async fn import_mission(&self, stored: &StoredMission) -> Result<ImportOutcome, StoreError> {
                    work::check_mission_import(stored)?;
                    let m = &stored.mission;
                    let write = sqlx::query(
                        "INSERT INTO missions (id, name, status, created_at, revision, body) VALUES ($1, $2, $3, $4, $5, $6) \
                         ON CONFLICT (id) DO NOTHING",
                    )
                    .bind(&m.id)
                    .bind(&m.name)
                    .bind(m.status.as_str())
                    .bind(m.created_at.timestamp_millis())
                    .bind(to_db(stored.revision))
                    .bind(to_text(m)?);
                    let inserted = self.write_execute(write).await?;
                    if inserted.rows_affected() > 0 {
                        return Ok(ImportOutcome::Imported);
                    }
                    let existing = self.get_mission(&m.id).await?.ok_or_else(|| StoreError::not_found("mission", &m.id))?;
                    model::same_import("mission", &m.id, &existing, stored)
                }
            }
        }
    };
}
pub(crate) use sql_work;
