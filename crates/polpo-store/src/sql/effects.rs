//! `EffectLedger` over SQL.

/// Stamped out per driver by `sql_store_impl!` in the parent module.
macro_rules! sql_effects {
    ($store:ty, $row:ty) => {
        #[async_trait]
        impl EffectLedger for $store {
            async fn record_effect_intent_fenced(
                &self,
                key: &str,
                fence: Option<&Lease>,
            ) -> Result<EffectClaim, StoreError> {
                model::validate_effect_key(key)?;
                let mut tx = self.tx().await?;
                if let Some(f) = fence {
                    Self::lock_fence(&mut tx, &f.run_id, fence).await?;
                }
                let inserted = sqlx::query(
                    "INSERT INTO effects (key, status, result, created_at, completed_at) VALUES ($1, 'pending', NULL, $2, NULL) \
                     ON CONFLICT (key) DO NOTHING",
                )
                .bind(key)
                .bind(self.now().timestamp_millis())
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                if inserted.rows_affected() > 0 {
                    return Ok(EffectClaim::Fresh);
                }
                let effect = self.get_effect(key).await?.ok_or_else(|| StoreError::not_found("effect", key))?;
                Ok(match effect.status {
                    EffectStatus::Pending => EffectClaim::Pending(effect),
                    EffectStatus::Done => EffectClaim::Done(effect),
                })
            }

            async fn record_effect_result_fenced(
                &self,
                key: &str,
                fence: Option<&Lease>,
                result: Value,
            ) -> Result<Effect, StoreError> {
                let now = self.now().timestamp_millis();
                let mut tx = self.tx().await?;
                if let Some(f) = fence {
                    Self::lock_fence(&mut tx, &f.run_id, fence).await?;
                }
                let done = sqlx::query(
                    "UPDATE effects SET status = 'done', result = $2, completed_at = $3 WHERE key = $1 AND status = 'pending'",
                )
                .bind(key)
                .bind(to_text(&result)?)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                let effect = self.get_effect(key).await?.ok_or_else(|| StoreError::not_found("effect", key))?;
                if done.rows_affected() > 0 { Ok(effect) } else { model::same_result(effect, &result) }
            }

            async fn list_effects(&self, page: &PageRequest) -> Result<Page<Effect>, StoreError> {
                let after = page.after.as_ref().map(Cursor::key).transpose()?;
                let size = page.size();
                let rows = sqlx::query(
                    "SELECT key, status, result, created_at, completed_at FROM effects \
                     WHERE ($1 IS NULL OR key > $1) ORDER BY key LIMIT $2",
                )
                .bind(after)
                .bind(to_db(size as u64 + 1))
                .fetch_all(&self.pool)
                .await?;
                let items = rows.iter().map(effect_from_row).collect::<Result<Vec<_>, _>>()?;
                Ok(Page::from_overfetch(items, size, |e| Cursor::at_key(&e.key)))
            }

            async fn import_effect(&self, e: &Effect) -> Result<ImportOutcome, StoreError> {
                model::validate_effect_key(&e.key)?;
                let write = sqlx::query(
                    "INSERT INTO effects (key, status, result, created_at, completed_at) VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (key) DO NOTHING",
                )
                .bind(&e.key)
                .bind(e.status.as_str())
                .bind(e.result.as_ref().map(to_text).transpose()?)
                .bind(e.created_at.timestamp_millis())
                .bind(e.completed_at.map(|c| c.timestamp_millis()));
                let inserted = self.write_execute(write).await?;
                if inserted.rows_affected() > 0 {
                    return Ok(ImportOutcome::Imported);
                }
                let existing = self.get_effect(&e.key).await?.ok_or_else(|| StoreError::not_found("effect", &e.key))?;
                model::same_import("effect", &e.key, &existing, e)
            }

            async fn get_effect(&self, key: &str) -> Result<Option<Effect>, StoreError> {
                sqlx::query("SELECT key, status, result, created_at, completed_at FROM effects WHERE key = $1")
                    .bind(key)
                    .fetch_optional(&self.pool)
                    .await?
                    .as_ref()
                    .map(effect_from_row)
                    .transpose()
            }
        }
    };
}
pub(crate) use sql_effects;
