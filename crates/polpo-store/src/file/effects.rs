//! The effect ledger in the file backend, one JSON file per key.

use async_trait::async_trait;
use serde_json::Value;

use super::{FileStore, Inner, fsio, owned};
use crate::error::StoreError;
use crate::model::{self, Effect, EffectClaim, EffectStatus, ImportOutcome};
use crate::page::{Cursor, Page, PageRequest};
use crate::traits::EffectLedger;

impl Inner {
    fn record_effect_intent(&self, key: &str) -> Result<EffectClaim, StoreError> {
        model::validate_effect_key(key)?;
        let now = self.now();
        let mut idx = self.index();
        if let Some(e) = idx.effects.get(key) {
            return Ok(match e.status {
                EffectStatus::Pending => EffectClaim::Pending(e.clone()),
                EffectStatus::Done => EffectClaim::Done(e.clone()),
            });
        }
        let effect = Effect {
            key: key.to_owned(),
            status: EffectStatus::Pending,
            result: None,
            created_at: now,
            completed_at: None,
        };
        fsio::write_json(&self.effect_path(key), &effect)?;
        idx.effects.insert(key.to_owned(), effect);
        Ok(EffectClaim::Fresh)
    }

    fn import_effect(&self, effect: &Effect) -> Result<ImportOutcome, StoreError> {
        model::validate_effect_key(&effect.key)?;
        let mut idx = self.index();
        if let Some(existing) = idx.effects.get(&effect.key) {
            return model::same_import("effect", &effect.key, existing, effect);
        }
        fsio::write_json(&self.effect_path(&effect.key), effect)?;
        idx.effects.insert(effect.key.clone(), effect.clone());
        Ok(ImportOutcome::Imported)
    }

    fn record_effect_result(&self, key: &str, result: Value) -> Result<Effect, StoreError> {
        let now = self.now();
        let mut idx = self.index();
        let mut effect = idx.effects.get(key).cloned().ok_or_else(|| StoreError::not_found("effect", key))?;
        if effect.status == EffectStatus::Done {
            return model::same_result(effect, &result);
        }
        effect.status = EffectStatus::Done;
        effect.result = Some(result);
        effect.completed_at = Some(now);
        fsio::write_json(&self.effect_path(key), &effect)?;
        idx.effects.insert(key.to_owned(), effect.clone());
        Ok(effect)
    }
}

#[async_trait]
impl EffectLedger for FileStore {
    async fn record_effect_intent(&self, key: &str) -> Result<EffectClaim, StoreError> {
        let key = owned(key);
        self.blocking(move |s| s.record_effect_intent(&key)).await
    }

    async fn record_effect_result(&self, key: &str, result: Value) -> Result<Effect, StoreError> {
        let key = owned(key);
        self.blocking(move |s| s.record_effect_result(&key, result)).await
    }

    async fn get_effect(&self, key: &str) -> Result<Option<Effect>, StoreError> {
        Ok(self.inner.index().effects.get(key).cloned())
    }

    async fn list_effects(&self, page: &PageRequest) -> Result<Page<Effect>, StoreError> {
        let after = page.after.as_ref().map(Cursor::key).transpose()?;
        let size = page.size();
        let mut items: Vec<Effect> = self
            .inner
            .index()
            .effects
            .values()
            .filter(|e| after.as_ref().is_none_or(|a| e.key > *a))
            .cloned()
            .collect();
        items.sort_by(|a, b| a.key.cmp(&b.key));
        items.truncate(size + 1);
        Ok(Page::from_overfetch(items, size, |e| Cursor::at_key(&e.key)))
    }

    async fn import_effect(&self, effect: &Effect) -> Result<ImportOutcome, StoreError> {
        let effect = effect.clone();
        self.blocking(move |s| s.import_effect(&effect)).await
    }
}
