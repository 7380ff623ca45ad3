//! Progressive tool loading (`toolLoading.mode`): which runtime tool schemas the model sees.
//!
//! In `direct` mode every tool of the effective policy is shown on every model call. In
//! `progressive` mode the model first sees only `polpo_tool_list`, `polpo_tool_search` and
//! `polpo_tool_load` (plus what always stays direct: client tools, `ask_user_question`, and a
//! forced `tool_choice` tool, which is preloaded). A tool the model loads is shown from the
//! next model call on. `auto` is progressive when the authorized catalog has more than
//! [`AUTO_PROGRESSIVE_ABOVE`] tools, else direct.
//!
//! Visibility never widens the policy: the catalog these tools list, search and load is the
//! effective policy's set, so a denied tool can be neither listed nor loaded, and execution
//! still checks the policy. The loaded set is not kept anywhere: it is read back from the
//! `polpo_tool_load` calls in the conversation (checked against the current catalog again),
//! so it persists with the session history and survives a durable run's resume for free.

use crate::invocation::Invocation;
use polpo_core::config::ToolLoadingMode;
use polpo_core::message::{Message, Role, ToolCall};
use polpo_core::tool::ToolSpec;
use polpo_llm::ToolChoice;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

/// `auto` turns progressive above this many authorized runtime tools. Tool schemas cost a few
/// hundred prompt tokens each; 24 (the 14 built-ins plus a handful of custom or MCP tools,
/// roughly 6–8 k tokens) is where sending them all on every call starts to dominate a short
/// turn, while below it the extra list/load round trip costs more than it saves.
pub const AUTO_PROGRESSIVE_ABOVE: usize = 24;
/// Lists the authorized catalog.
pub const TOOL_LIST: &str = "polpo_tool_list";
/// Searches the authorized catalog.
pub const TOOL_SEARCH: &str = "polpo_tool_search";
/// Loads tools by exact name.
pub const TOOL_LOAD: &str = "polpo_tool_load";
/// Most tools one `polpo_tool_load` call loads.
pub const MAX_LOAD_PER_CALL: usize = 20;
/// Most results of one search.
pub const MAX_SEARCH_RESULTS: usize = 25;
/// Longest description shown per tool in a listing or search (characters).
const DESCRIPTION_CHARS: usize = 160;

/// True when `name` is one of the three disclosure tools.
pub fn is_disclosure_tool(name: &str) -> bool {
    matches!(name, TOOL_LIST | TOOL_SEARCH | TOOL_LOAD)
}

/// The authorized catalog: the agent's runtime tools the effective policy allows, in
/// declaration order.
fn catalog(inv: &Invocation) -> impl Iterator<Item = &Arc<ToolSpec>> {
    inv.tools.specs().filter(|s| inv.policy.allows(&s.name))
}

/// The first tools of the authorized catalog, as many as `auto` decides on: one past
/// [`AUTO_PROGRESSIVE_ABOVE`] at most, so the walk stops at the first tool past the bound.
fn auto_window(inv: &Invocation) -> impl Iterator<Item = &Arc<ToolSpec>> {
    catalog(inv).take(AUTO_PROGRESSIVE_ABOVE + 1)
}

/// `auto`'s rule: direct while the authorized catalog (counted by [`auto_window`]) holds at
/// most [`AUTO_PROGRESSIVE_ABOVE`] tools.
fn auto_shows_directly(counted: usize) -> bool {
    counted <= AUTO_PROGRESSIVE_ABOVE
}

/// Whether this invocation shows its tools progressively (`auto` resolved by catalog size).
pub fn is_progressive(inv: &Invocation) -> bool {
    match inv.tool_loading {
        ToolLoadingMode::Direct => false,
        ToolLoadingMode::Progressive => true,
        // Asked before every model call and tool call.
        ToolLoadingMode::Auto => !auto_shows_directly(auto_window(inv).count()),
    }
}

/// The tool specs of the next model call over `conversation`.
pub fn visible_tools(inv: &Invocation, conversation: &[Message]) -> Vec<Arc<ToolSpec>> {
    // Direct: the authorized catalog, then interaction tools, then client tools. `auto` is
    // decided on the tools it would show, walked once (the policy asked about each tool once
    // per model call, not twice): when they are within the bound, they are the whole catalog.
    let direct = match inv.tool_loading {
        ToolLoadingMode::Progressive => None,
        ToolLoadingMode::Direct => Some(catalog(inv).cloned().collect::<Vec<_>>()),
        ToolLoadingMode::Auto => {
            let shown: Vec<_> = auto_window(inv).cloned().collect();
            auto_shows_directly(shown.len()).then_some(shown)
        }
    };
    if let Some(mut specs) = direct {
        specs.extend(inv.interaction_tools());
        specs.extend(inv.client_tools.iter().cloned());
        return specs;
    }
    let loaded = loaded_tools(inv, conversation);
    let forced = match &inv.tool_choice {
        ToolChoice::Tool(name) => Some(name.as_str()),
        _ => None,
    };
    let mut specs = disclosure_specs().to_vec();
    specs.extend(catalog(inv).filter(|s| loaded.contains(&s.name) || forced == Some(s.name.as_str())).cloned());
    specs.extend(inv.interaction_tools());
    specs.extend(inv.client_tools.iter().cloned());
    specs
}

/// Names loaded by the `polpo_tool_load` calls of `conversation` that are still in the
/// authorized catalog.
fn loaded_tools(inv: &Invocation, conversation: &[Message]) -> BTreeSet<String> {
    let requested: Vec<String> = conversation
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(|m| &m.tool_calls)
        .filter(|c| c.name == TOOL_LOAD)
        .flat_map(|c| requested_names(&c.arguments).unwrap_or_default())
        .collect();
    if requested.is_empty() {
        return BTreeSet::new();
    }
    catalog(inv).filter(|s| requested.iter().any(|r| r.eq_ignore_ascii_case(&s.name))).map(|s| s.name.clone()).collect()
}

/// `names` of a `polpo_tool_load` call, at most [`MAX_LOAD_PER_CALL`].
fn requested_names(arguments: &str) -> Result<Vec<String>, String> {
    let v: Value = serde_json::from_str(arguments).map_err(|e| format!("arguments are not valid JSON: {e}"))?;
    let names = v.get("names").and_then(Value::as_array).ok_or("`names` must be an array of tool names")?;
    if names.len() > MAX_LOAD_PER_CALL {
        return Err(format!("at most {MAX_LOAD_PER_CALL} names per call"));
    }
    Ok(names.iter().filter_map(Value::as_str).map(str::to_owned).collect())
}

/// True when the model may not call server tool `name` yet: progressive mode, authorized,
/// but neither loaded before this turn nor forced.
pub fn not_loaded(inv: &Invocation, earlier: &[Message], name: &str) -> bool {
    is_progressive(inv)
        && !is_disclosure_tool(name)
        && inv.tools.get(name).is_some()
        && inv.policy.allows(name)
        && !matches!(&inv.tool_choice, ToolChoice::Tool(forced) if forced == name)
        && !loaded_tools(inv, earlier).contains(name)
}

/// The model-visible result of a disclosure call. `Err` is an `Error: …` result.
pub fn call(inv: &Invocation, call: &ToolCall) -> Result<String, String> {
    let args: Value = if call.arguments.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(&call.arguments).map_err(|e| format!("invalid_arguments: {e}"))?
    };
    match call.name.as_str() {
        TOOL_LIST => Ok(listing(catalog(inv), "No tools are available to this agent.")),
        TOOL_SEARCH => {
            let query = args.get("query").and_then(Value::as_str).unwrap_or_default().to_lowercase();
            let limit =
                args.get("limit").and_then(Value::as_u64).map_or(10, |l| (l as usize).clamp(1, MAX_SEARCH_RESULTS));
            let terms: Vec<&str> = query.split_whitespace().collect();
            if terms.is_empty() {
                return Err("invalid_arguments: `query` must contain at least one word".into());
            }
            let mut scored: Vec<(usize, &Arc<ToolSpec>)> = catalog(inv)
                .filter_map(|s| {
                    let (name, description) = (s.name.to_lowercase(), s.description.to_lowercase());
                    let score: usize = terms
                        .iter()
                        .map(|t| {
                            if name.contains(t) {
                                3
                            } else if description.contains(t) {
                                1
                            } else {
                                0
                            }
                        })
                        .sum();
                    (score > 0).then_some((score, s))
                })
                .collect();
            scored.sort_by_key(|s| std::cmp::Reverse(s.0));
            Ok(listing(
                scored.into_iter().take(limit).map(|(_, s)| s),
                "No authorized tool matches; try other words or polpo_tool_list.",
            ))
        }
        TOOL_LOAD => {
            let names = requested_names(&call.arguments).map_err(|e| format!("invalid_arguments: {e}"))?;
            let known: Vec<&Arc<ToolSpec>> = catalog(inv).collect();
            let (mut loaded, mut missing) = (Vec::new(), Vec::new());
            for n in &names {
                match known.iter().find(|s| s.name.eq_ignore_ascii_case(n)) {
                    Some(s) => loaded.push(s.name.as_str()),
                    None => missing.push(n.as_str()),
                }
            }
            let mut out = if loaded.is_empty() {
                "No tool was loaded.".to_owned()
            } else {
                format!("Loaded: {}. Call them from your next step.", loaded.join(", "))
            };
            if !missing.is_empty() {
                // Same answer for unknown and denied names: the policy's exclusions stay invisible.
                out.push_str(&format!(" Not available to this agent: {}.", missing.join(", ")));
            }
            Ok(out)
        }
        other => Err(format!("unknown_tool: no tool named `{other}`")),
    }
}

fn listing<'a>(specs: impl Iterator<Item = &'a Arc<ToolSpec>>, empty: &str) -> String {
    let lines: Vec<String> =
        specs.map(|s| format!("- {}: {}", s.name, first_chars(&s.description, DESCRIPTION_CHARS))).collect();
    if lines.is_empty() { empty.to_owned() } else { lines.join("\n") }
}

fn first_chars(text: &str, n: usize) -> &str {
    let line = text.lines().next().unwrap_or_default();
    line.char_indices().nth(n).map_or(line, |(i, _)| &line[..i])
}

/// Schemas of the three disclosure tools, built once and shared by every progressive request.
fn disclosure_specs() -> &'static [Arc<ToolSpec>; 3] {
    static SPECS: LazyLock<[Arc<ToolSpec>; 3]> = LazyLock::new(|| {
        [
            ToolSpec {
                name: TOOL_LIST.into(),
                description: "List the tools you may load, one line each (name: what it does).".into(),
                parameters: json!({"type": "object", "properties": {}, "additionalProperties": false}),
            },
            ToolSpec {
                name: TOOL_SEARCH.into(),
                description: "Search the tools you may load by words in their name or description.".into(),
                parameters: json!({"type": "object", "properties": {
                    "query": {"type": "string", "description": "Words to look for."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_RESULTS}
                }, "required": ["query"], "additionalProperties": false}),
            },
            ToolSpec {
                name: TOOL_LOAD.into(),
                description: "Load tools by exact name; they can be called from your next step.".into(),
                parameters: json!({"type": "object", "properties": {
                    "names": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_LOAD_PER_CALL}
                }, "required": ["names"], "additionalProperties": false}),
            },
        ]
        .map(Arc::new)
    });
    &SPECS
}
