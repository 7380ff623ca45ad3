//! The shared context bag of a loop run: dotted-path reads and writes (`request` is
//! read-only) and the resolution of `{"$context": "a.b"}` bindings.

use crate::error::LoopError;
use serde_json::{Map, Value};

/// The key under which the request (metadata, user, input) is kept; steps cannot write it.
pub const REQUEST: &str = "request";
/// The binding marker.
const MARKER: &str = "$context";

/// The value at dotted `path`, or `None`.
pub fn get<'a>(context: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(context, |at, key| at.get(key))
}

/// Write `value` at dotted `path`, creating objects on the way (a non-object on the way is
/// replaced). Refuses paths under `request`.
pub fn set(context: &mut Value, path: &str, value: Value) -> Result<(), LoopError> {
    writable(path)?;
    let mut keys = path.split('.');
    let last = keys.next_back().unwrap_or(path);
    let mut at = context;
    for key in keys {
        at = object(at).entry(key.to_owned()).or_insert_with(|| Value::Object(Map::new()));
    }
    object(at).insert(last.to_owned(), value);
    Ok(())
}

/// Whether a step may write dotted `path`: a well-formed path outside `request`.
pub fn writable(path: &str) -> Result<(), LoopError> {
    if path.is_empty() || path.split('.').any(str::is_empty) {
        return Err(LoopError::BindingInvalid(format!("`{path}` is not a dotted path")));
    }
    if path.split('.').next() == Some(REQUEST) {
        return Err(LoopError::ContextReadonly(path.to_owned()));
    }
    Ok(())
}

/// The top-level entries of `after` that are not `before`'s (what the steps since a checkpoint
/// wrote, for a checkpoint delta); `None` when `after` lacks one of `before`'s entries, which
/// entries written over the checkpoint cannot say.
pub(crate) fn changes(before: &Value, after: &Value) -> Option<Map<String, Value>> {
    let (before, after) = (before.as_object()?, after.as_object()?);
    // Asked after every step, over a context that grows with the run: an entry written over
    // keeps its place and a new one comes last (the map keeps insertion order), so the two
    // are walked side by side, without hashing every key; any other order is looked up.
    if let Some(changed) = changes_in_order(before, after) {
        return Some(changed);
    }
    let (mut kept, mut changed) = (0, Map::new());
    for (key, value) in after {
        match before.get(key) {
            Some(old) if old == value => kept += 1,
            old => {
                kept += usize::from(old.is_some());
                changed.insert(key.clone(), value.clone());
            }
        }
    }
    (kept == before.len()).then_some(changed)
}

/// [`changes`] when `before`'s keys are the first of `after`'s, in order; `None` otherwise.
fn changes_in_order(before: &Map<String, Value>, after: &Map<String, Value>) -> Option<Map<String, Value>> {
    if before.len() > after.len() {
        return None;
    }
    let mut changed = Map::new();
    for ((old_key, old), (key, value)) in before.iter().zip(after) {
        if old_key != key {
            return None;
        }
        if old != value {
            changed.insert(key.clone(), value.clone());
        }
    }
    changed.extend(after.iter().skip(before.len()).map(|(k, v)| (k.clone(), v.clone())));
    Some(changed)
}

/// Write top-level `entries` over `context` (a checkpoint delta's).
pub(crate) fn merge(context: &mut Value, entries: Map<String, Value>) {
    object(context).extend(entries);
}

/// `value` as an object, replacing anything else with an empty one.
fn object(value: &mut Value) -> &mut Map<String, Value> {
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    match value {
        Value::Object(map) => map,
        _ => unreachable!("replaced by an object just above"),
    }
}

/// `template` with every `{"$context": path}` marker replaced by the value at that path,
/// recursively; strings are never interpolated. Reports the paths it resolved, in order.
pub fn resolve(template: &Value, context: &Value, paths: &mut Vec<String>) -> Result<Value, LoopError> {
    Ok(match template {
        Value::Object(map) if map.contains_key(MARKER) => {
            let path = match (map.len(), &map[MARKER]) {
                (1, Value::String(path)) if !path.is_empty() && !path.split('.').any(str::is_empty) => path,
                _ => {
                    return Err(LoopError::BindingInvalid(format!(
                        "a `{MARKER}` marker must be exactly {{\"{MARKER}\": \"dotted.path\"}}, found {template}"
                    )));
                }
            };
            paths.push(path.clone());
            get(context, path).cloned().ok_or_else(|| LoopError::BindingMissing(path.clone()))?
        }
        Value::Object(map) => Value::Object(
            map.iter().map(|(k, v)| Ok((k.clone(), resolve(v, context, paths)?))).collect::<Result<_, LoopError>>()?,
        ),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| resolve(v, context, paths)).collect::<Result<_, _>>()?)
        }
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn markers_resolve_recursively_and_malformed_ones_are_refused() {
        let context = json!({"a": {"b": [1, 2]}, "s": "{$context} stays"});
        let mut paths = Vec::new();
        let out =
            resolve(&json!({"x": [{"$context": "a.b"}], "y": {"$context": "s"}, "z": "a.b"}), &context, &mut paths)
                .unwrap();
        assert_eq!(out, json!({"x": [[1, 2]], "y": "{$context} stays", "z": "a.b"}));
        assert_eq!(paths, ["a.b", "s"]);
        for bad in [json!({"$context": "a", "extra": 1}), json!({"$context": 3}), json!({"$context": "a..b"})] {
            assert_eq!(resolve(&bad, &context, &mut Vec::new()).unwrap_err().code(), "loop_binding_invalid", "{bad}");
        }
        assert_eq!(
            resolve(&json!({"$context": "a.c"}), &context, &mut Vec::new()).unwrap_err().code(),
            "loop_binding_missing"
        );
    }

    /// Whatever the order of the two contexts, the changes are the entries `after` adds or
    /// writes over, and `None` when it lost one of `before`'s; the walk in order and the
    /// lookups agree.
    #[test]
    fn changes_are_what_was_added_or_written_over_in_any_order() {
        let before = json!({"request": {"q": 1}, "r0": "a", "r1": "b"});
        let cases = [
            (json!({"request": {"q": 1}, "r0": "a", "r1": "b"}), Some(json!({}))),
            (json!({"request": {"q": 1}, "r0": "a", "r1": "B", "r2": "c"}), Some(json!({"r1": "B", "r2": "c"}))),
            (json!({"r0": "a", "request": {"q": 1}, "r2": "c", "r1": "b"}), Some(json!({"r2": "c"}))),
            (json!({"r1": "b", "request": {"q": 2}, "r0": "a"}), Some(json!({"request": {"q": 2}}))),
            (json!({"request": {"q": 1}, "r0": "a"}), None),
            (json!({"request": {"q": 1}, "r0": "a", "r2": "c"}), None),
        ];
        for (after, expected) in cases {
            let expected = expected.map(|e| e.as_object().unwrap().clone());
            assert_eq!(changes(&before, &after), expected, "{after}");
            let (old, new) = (before.as_object().unwrap(), after.as_object().unwrap());
            if let Some(in_order) = changes_in_order(old, new) {
                assert_eq!(Some(in_order), expected, "in order: {after}");
            }
        }
    }

    #[test]
    fn writes_create_objects_and_request_is_read_only() {
        let mut context = json!({"request": {"metadata": {}}});
        set(&mut context, "repo.clone.dir", json!("d")).unwrap();
        assert_eq!(context["repo"]["clone"]["dir"], "d");
        assert_eq!(set(&mut context, "request.metadata.x", json!(1)).unwrap_err().code(), "loop_context_readonly");
        assert_eq!(get(&context, "repo.clone.dir"), Some(&json!("d")));
    }

    #[test]
    fn changes_are_the_entries_written_and_merge_puts_them_back() {
        let before = json!({"request": {}, "a": 1, "b": {"c": 2}});
        let mut after = before.clone();
        set(&mut after, "b.d", json!(3)).unwrap();
        set(&mut after, "e", json!("new")).unwrap();
        let changed = changes(&before, &after).unwrap();
        assert_eq!(Value::Object(changed.clone()), json!({"b": {"c": 2, "d": 3}, "e": "new"}));
        let mut folded = before.clone();
        merge(&mut folded, changed);
        assert_eq!(folded, after);
        assert_eq!(changes(&after, &before), None, "an entry gone cannot be said by a delta");
    }
}
