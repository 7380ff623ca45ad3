//! Reciprocal-rank fusion: one ranking from several, using only ranks (a BM25 score and a
//! cosine are not on one scale), deterministic so the same candidates always give the same
//! order.

use std::collections::HashMap;

use polpo_store::{MemoryItem, ScoredItem};
use serde::Serialize;

/// The usual RRF constant: it damps the weight of the very first ranks.
pub const RRF_K: f64 = 60.0;

/// One fused result.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchHit {
    /// The item.
    pub item: MemoryItem,
    /// Σ 1 / (k + rank) over the rankings that hold the item.
    pub score: f64,
    /// Its 1-based rank among the lexical candidates, if it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lexical_rank: Option<usize>,
    /// Its 1-based rank among the semantic candidates, if it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub semantic_rank: Option<usize>,
}

/// Fuse the lexical and semantic candidate lists (each best first) and keep `limit`: higher
/// fused score first, ties by item id.
pub fn fuse(lexical: Vec<ScoredItem>, semantic: Vec<ScoredItem>, limit: usize) -> Vec<SearchHit> {
    let mut hits: HashMap<String, SearchHit> = HashMap::new();
    for (rank, candidate) in lexical.into_iter().enumerate() {
        let hit = entry(&mut hits, candidate.item);
        hit.score += 1.0 / (RRF_K + (rank + 1) as f64);
        hit.lexical_rank = Some(rank + 1);
    }
    for (rank, candidate) in semantic.into_iter().enumerate() {
        let hit = entry(&mut hits, candidate.item);
        hit.score += 1.0 / (RRF_K + (rank + 1) as f64);
        hit.semantic_rank = Some(rank + 1);
    }
    let mut hits: Vec<SearchHit> = hits.into_values().collect();
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.item.id.cmp(&b.item.id)));
    hits.truncate(limit);
    hits
}

fn entry(hits: &mut HashMap<String, SearchHit>, item: MemoryItem) -> &mut SearchHit {
    hits.entry(item.id.clone()).or_insert(SearchHit { item, score: 0.0, lexical_rank: None, semantic_rank: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use polpo_store::MemoryScope;

    fn scored(id: &str) -> ScoredItem {
        let item = MemoryItem {
            id: id.into(),
            scope: MemoryScope::project(),
            kind: "fact".into(),
            content: id.into(),
            source: String::new(),
            created_at: Default::default(),
            updated_at: Default::default(),
            revision: 1,
        };
        ScoredItem { item, score: 0.0 }
    }

    fn order(hits: &[SearchHit]) -> Vec<&str> {
        hits.iter().map(|h| h.item.id.as_str()).collect()
    }

    #[test]
    fn an_item_in_both_lists_beats_items_in_one_and_ties_go_by_id() {
        let hits = fuse(vec![scored("a"), scored("b")], vec![scored("c"), scored("b")], 10);
        assert_eq!(order(&hits), vec!["b", "a", "c"]);
        assert_eq!((hits[0].lexical_rank, hits[0].semantic_rank), (Some(2), Some(2)));
        assert!((hits[0].score - 2.0 / 62.0).abs() < 1e-12);
        // a and c both sit first in one list: equal scores, id order.
        assert_eq!(hits[1].score, hits[2].score);
        assert_eq!(order(&fuse(vec![scored("z")], vec![scored("y")], 10)), vec!["y", "z"]);
        assert_eq!(fuse(vec![scored("a"), scored("b")], vec![], 1).len(), 1);
    }
}
