//! The effect ledger in the file backend, one JSON file per key (named by the key's hash), read
//! when asked for: nothing is read at open. Writes take the index lock, so a check and its
//! write never interleave. Listing (an export's walk, in key order) reads every key once, on
//! the first list, and keeps the keys (not the effects) from then on.

use async_trait::async_trait;
use serde_json::Value;

use std::collections::BTreeSet;

use super::{EFFECTS, FileStore, Index, Inner, fsio, json_files, owned};
use crate::error::StoreError;
use crate::model::{self, Effect, EffectClaim, EffectStatus, ImportOutcome, Lease};
use crate::page::{Cursor, Page, PageRequest};
use crate::traits::EffectLedger;

impl Inner {
    /// The effect stored under `key` (its file is named by the key's hash, so any key is safe).
    fn effect(&self, key: &str) -> Result<Option<Effect>, StoreError> {
        fsio::read_json(&self.effect_path(key))
    }

    /// Write an effect; a new key joins the listed keys when they have been read.
    fn write_effect(&self, idx: &mut Index, effect: &Effect) -> Result<(), StoreError> {
        fsio::write_json(&self.effect_path(&effect.key), effect)?;
        if let Some(keys) = idx.effect_keys.as_mut() {
            keys.insert(effect.key.clone());
        }
        Ok(())
    }

    /// Every effect key, read on the first list.
    fn effect_keys<'a>(&self, idx: &'a mut Index) -> Result<&'a BTreeSet<String>, StoreError> {
        if idx.effect_keys.is_none() {
            let mut keys = BTreeSet::new();
            for path in json_files(&self.dir.join(EFFECTS))? {
                if let Some(effect) = fsio::read_json::<Effect>(&path)? {
                    keys.insert(effect.key);
                }
            }
            idx.effect_keys = Some(keys);
        }
        Ok(idx.effect_keys.get_or_insert_default())
    }

    fn list_effects(&self, page: &PageRequest) -> Result<Page<Effect>, StoreError> {
        let after = page.after.as_ref().map(Cursor::key).transpose()?;
        let size = page.size();
        let mut idx = self.index();
        let keys = self.effect_keys(&mut idx)?;
        let from = after.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        let page_keys: Vec<String> = keys.range((from, std::ops::Bound::Unbounded)).take(size + 1).cloned().collect();
        let mut items = Vec::with_capacity(page_keys.len());
        for key in page_keys {
            if let Some(effect) = fsio::read_json::<Effect>(&self.effect_path(&key))? {
                items.push(effect);
            }
        }
        Ok(Page::from_overfetch(items, size, |e| Cursor::at_key(&e.key)))
    }

    fn record_effect_intent(&self, key: &str) -> Result<EffectClaim, StoreError> {
        model::validate_effect_key(key)?;
        let now = self.now();
        let mut idx = self.index();
        if let Some(e) = self.effect(key)? {
            return Ok(match e.status {
                EffectStatus::Pending => EffectClaim::Pending(e),
                EffectStatus::Done => EffectClaim::Done(e),
            });
        }
        let effect = Effect {
            key: key.to_owned(),
            status: EffectStatus::Pending,
            result: None,
            created_at: now,
            completed_at: None,
        };
        self.write_effect(&mut idx, &effect)?;
        Ok(EffectClaim::Fresh)
    }

    fn import_effect(&self, effect: &Effect) -> Result<ImportOutcome, StoreError> {
        model::validate_effect_key(&effect.key)?;
        let mut idx = self.index();
        if let Some(existing) = self.effect(&effect.key)? {
            return model::same_import("effect", &effect.key, &existing, effect);
        }
        self.write_effect(&mut idx, effect)?;
        Ok(ImportOutcome::Imported)
    }

    fn record_effect_result(&self, key: &str, result: Value) -> Result<Effect, StoreError> {
        let now = self.now();
        let mut idx = self.index();
        let mut effect = self.effect(key)?.ok_or_else(|| StoreError::not_found("effect", key))?;
        if effect.status == EffectStatus::Done {
            return model::same_result(effect, &result);
        }
        effect.status = EffectStatus::Done;
        effect.result = Some(result);
        effect.completed_at = Some(now);
        self.write_effect(&mut idx, &effect)?;
        Ok(effect)
    }
}

#[async_trait]
impl EffectLedger for FileStore {
    async fn record_effect_intent_fenced(&self, key: &str, fence: Option<&Lease>) -> Result<EffectClaim, StoreError> {
        let (key, fence) = (owned(key), fence.cloned());
        self.blocking(move |s| {
            if let Some(f) = &fence {
                s.check_fence(&f.run_id, fence.as_ref())?;
            }
            s.record_effect_intent(&key)
        })
        .await
    }

    async fn record_effect_result_fenced(
        &self,
        key: &str,
        fence: Option<&Lease>,
        result: Value,
    ) -> Result<Effect, StoreError> {
        let (key, fence) = (owned(key), fence.cloned());
        self.blocking(move |s| {
            if let Some(f) = &fence {
                s.check_fence(&f.run_id, fence.as_ref())?;
            }
            s.record_effect_result(&key, result)
        })
        .await
    }

    async fn get_effect(&self, key: &str) -> Result<Option<Effect>, StoreError> {
        let key = owned(key);
        self.blocking(move |s| s.effect(&key)).await
    }

    async fn list_effects(&self, page: &PageRequest) -> Result<Page<Effect>, StoreError> {
        let page = page.clone();
        self.blocking(move |s| s.list_effects(&page)).await
    }

    async fn import_effect(&self, effect: &Effect) -> Result<ImportOutcome, StoreError> {
        let effect = effect.clone();
        self.blocking(move |s| s.import_effect(&effect)).await
    }
}
