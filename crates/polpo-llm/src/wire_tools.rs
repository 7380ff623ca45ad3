//! The wire JSON of tool specs, written once per spec: an agent's specs are `Arc`s shared by
//! every request of its tool set, and serialising the same schemas into every model call was a
//! tenth of a chat run's instructions (ten schemas, two calls a run).

use polpo_core::tool::ToolSpec;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// Specs whose JSON a cache keeps before it forgets the dead ones (and, if all are alive,
/// everything): tool sets are few and long-lived, so this is never reached in practice.
const MAX_SPECS: usize = 4096;

/// A spec's wire JSON by its address. The `Weak` keeps the address from being reused while
/// the entry exists, so an entry found for a live spec is that spec's; a spec is immutable
/// behind its `Arc`, so its JSON never goes stale.
#[derive(Default)]
pub(crate) struct WireTools {
    by_spec: Mutex<HashMap<usize, Written>>,
}

/// One spec's JSON, with the spec it was written from.
struct Written {
    spec: Weak<ToolSpec>,
    json: Arc<[u8]>,
}

impl WireTools {
    /// Append the wire JSON of `tools`, comma-separated in order, to `out`; `wire` writes one
    /// spec (the shape is the caller's: the OpenAI and Anthropic wires differ).
    pub(crate) fn write_all(
        &self,
        tools: &[Arc<ToolSpec>],
        out: &mut Vec<u8>,
        wire: impl Fn(&ToolSpec) -> Result<Vec<u8>, serde_json::Error>,
    ) -> Result<(), serde_json::Error> {
        let mut cache = self.by_spec.lock().unwrap_or_else(PoisonError::into_inner);
        for (i, spec) in tools.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let key = Arc::as_ptr(spec) as usize;
            match cache.get(&key) {
                Some(written) => out.extend_from_slice(&written.json),
                None => {
                    let json: Arc<[u8]> = wire(spec)?.into();
                    out.extend_from_slice(&json);
                    if cache.len() >= MAX_SPECS {
                        cache.retain(|_, written| written.spec.strong_count() > 0);
                        if cache.len() >= MAX_SPECS {
                            cache.clear();
                        }
                    }
                    cache.insert(key, Written { spec: Arc::downgrade(spec), json });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;
    use std::cell::Cell;

    fn spec(name: &str) -> Arc<ToolSpec> {
        Arc::new(ToolSpec { name: name.into(), description: String::new(), parameters: json!({"type": "object"}) })
    }

    #[test]
    fn a_spec_is_written_once_and_its_json_reused_while_it_lives() {
        let cache = WireTools::default();
        let written = Cell::new(0);
        let wire = |s: &ToolSpec| {
            written.set(written.get() + 1);
            serde_json::to_vec(&s.name)
        };
        let (a, b) = (spec("a"), spec("b"));
        let mut out = Vec::new();
        cache.write_all(&[a.clone(), b.clone()], &mut out, wire).unwrap();
        cache.write_all(&[b.clone(), a.clone()], &mut out, wire).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), r#""a","b""b","a""#);
        assert_eq!(written.get(), 2, "each spec serialised once");
        // A new spec with the same name but other content is another spec: written afresh.
        let changed = Arc::new(ToolSpec { description: "other".into(), ..(*a).clone() });
        let mut out = Vec::new();
        cache.write_all(&[changed], &mut out, |s| serde_json::to_vec(&s.description)).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), r#""other""#);
    }

    #[test]
    fn the_cache_forgets_dead_specs_when_full() {
        let cache = WireTools::default();
        for i in 0..MAX_SPECS + 10 {
            let mut out = Vec::new();
            cache.write_all(&[spec(&i.to_string())], &mut out, |s| serde_json::to_vec(&s.name)).unwrap();
        }
        assert!(cache.by_spec.lock().unwrap().len() <= 11, "dead specs are dropped once the cache is full");
    }
}
