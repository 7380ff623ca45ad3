//! Strict mode: the fake behaves like real providers where a lax fake would hide bugs.
//!
//! Real models (OpenAI, vLLM, Ollama, Claude) answer in JSON only when the request asks for it
//! natively — `response_format` on the OpenAI wire, a forced tool on the Anthropic wire — and
//! real APIs reject malformed requests with 400 before any model runs. A fake that sends a
//! scripted JSON answer whatever the request says lets a runtime that never asks for JSON pass
//! its tests and fail with real models. In strict mode (the default, [`crate::Options`]):
//!
//! - a scripted text answer that is a JSON object or array is sent as JSON only when the
//!   request asks for JSON; otherwise the fake answers with a prose description of it;
//! - on the Anthropic wire, a request that forces a tool gets such a JSON answer as that
//!   tool's `tool_use` input (how Claude does structured output);
//! - requests real APIs refuse are answered 400 in the provider's error shape, without using
//!   a scripted turn: a `json_schema` response format whose schema is malformed (or breaks
//!   the Structured Outputs rules under `strict: true`), `json_object` without the word
//!   "json" in the messages, a `tool_choice` without `tools` or naming a tool not in `tools`,
//!   a tool `input_schema` that is not an object schema, thinking together with a forced tool.

use crate::script::Turn;
use serde_json::{Value, json};

/// Which wire a request arrived on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    /// OpenAI chat completions.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

/// Why a real API would refuse `request`, as that API's JSON error body.
pub(crate) fn rejection(wire: Wire, request: &Value) -> Option<Value> {
    let problem = match wire {
        Wire::OpenAi => openai_problem(request),
        Wire::Anthropic => anthropic_problem(request),
    }?;
    Some(match wire {
        Wire::OpenAi => {
            json!({"error": {"message": problem, "type": "invalid_request_error", "param": null, "code": null}})
        }
        Wire::Anthropic => json!({"type": "error", "error": {"type": "invalid_request_error", "message": problem}}),
    })
}

/// The turn as a real model would answer this request (see the module docs).
pub(crate) fn adapt(wire: Wire, request: &Value, turn: Turn) -> Turn {
    let Some(value) = turn.text.as_deref().and_then(structured) else { return turn };
    match forced_anthropic_tool(wire, request) {
        Some(tool) => {
            let input = tool_input(request, &tool, value);
            Turn { text: None, tool_calls: vec![(tool, input)], ..turn }
        }
        None if asks_for_json(wire, request) => turn,
        None => Turn { text: Some(prose(&value)), ..turn },
    }
}

/// `value` as the input of the forced `tool`: tool input is always an object, so a value of
/// another kind fills the one property the tool's `input_schema` requires (how a client asks
/// Claude for an array or a string).
fn tool_input(request: &Value, tool: &str, value: Value) -> Value {
    if value.is_object() {
        return value;
    }
    let schema =
        request["tools"].as_array().into_iter().flatten().find(|t| t["name"] == tool).map(|t| &t["input_schema"]);
    match schema.and_then(|s| s["required"].as_array()).map(Vec::as_slice) {
        Some([Value::String(only)]) => json!({ only.as_str(): value }),
        _ => value,
    }
}

/// The scripted text as a JSON object or array (a Markdown fence around it allowed).
fn structured(text: &str) -> Option<Value> {
    let t = text.trim();
    let t = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .and_then(|s| s.strip_suffix("```"))
        .map_or(t, str::trim);
    serde_json::from_str::<Value>(t).ok().filter(|v| v.is_object() || v.is_array())
}

/// True when the request asks for a JSON answer natively.
fn asks_for_json(wire: Wire, request: &Value) -> bool {
    match wire {
        Wire::OpenAi => matches!(request["response_format"]["type"].as_str(), Some("json_object" | "json_schema")),
        Wire::Anthropic => forced_anthropic_tool(wire, request).is_some(),
    }
}

/// The tool an Anthropic request forces (`tool_choice: {type: "tool", name}`).
fn forced_anthropic_tool(wire: Wire, request: &Value) -> Option<String> {
    let choice = &request["tool_choice"];
    (wire == Wire::Anthropic && choice["type"] == "tool")
        .then(|| choice["name"].as_str().unwrap_or_default().to_owned())
}

/// What a model says when nobody asked it for JSON: the same facts, in words.
fn prose(value: &Value) -> String {
    format!("Here is what I found: {}.", describe(value))
}

fn describe(value: &Value) -> String {
    match value {
        Value::Object(fields) => {
            fields.iter().map(|(k, v)| format!("{k} is {}", describe(v))).collect::<Vec<_>>().join(", ")
        }
        Value::Array(items) => items.iter().map(describe).collect::<Vec<_>>().join(" and "),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn tool_names(tools: &Value, name_of: impl Fn(&Value) -> Option<&str>) -> Vec<String> {
    tools.as_array().into_iter().flatten().filter_map(|t| name_of(t).map(str::to_owned)).collect()
}

fn openai_problem(request: &Value) -> Option<String> {
    let tools = tool_names(&request["tools"], |t| t["function"]["name"].as_str());
    if let Some(choice) = request.get("tool_choice").filter(|c| !c.is_null()) {
        if tools.is_empty() {
            return Some(
                "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.".into(),
            );
        }
        if let Some(name) = choice["function"]["name"].as_str().filter(|n| !tools.iter().any(|t| t == n)) {
            return Some(format!(
                "Invalid value for 'tool_choice': function '{name}' is not among the 'tools' of this request."
            ));
        }
    }
    let format = request.get("response_format").filter(|f| !f.is_null())?;
    match format["type"].as_str() {
        Some("text") => None,
        Some("json_object") => {
            let mentions_json = request["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["content"].to_string().to_lowercase().contains("json"));
            (!mentions_json).then(|| "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.".into())
        }
        Some("json_schema") => json_schema_problem(&format["json_schema"]),
        _ => Some(format!("Invalid value for 'response_format.type': {}.", format["type"])),
    }
}

fn json_schema_problem(spec: &Value) -> Option<String> {
    if !spec.is_object() {
        return Some("Missing required parameter: 'response_format.json_schema'.".into());
    }
    let name = spec["name"].as_str().unwrap_or_default();
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Some("Invalid 'response_format.json_schema.name': must match ^[a-zA-Z0-9_-]{1,64}$.".into());
    }
    let schema = &spec["schema"];
    if !schema.is_object() {
        return Some(format!("Invalid schema for response_format '{name}': the schema must be a JSON object."));
    }
    let problem = if spec["strict"] == true {
        if schema["type"] != "object" {
            Some(format!("schema must be a JSON Schema of 'type: \"object\"', got 'type: {}'.", schema["type"]))
        } else {
            strict_problem(schema, "root")
        }
    } else {
        malformed(schema, "root")
    };
    problem.map(|p| format!("Invalid schema for response_format '{name}': In context={p}"))
}

/// JSON Schema `type` names.
const TYPES: &[&str] = &["object", "array", "string", "number", "integer", "boolean", "null"];

/// A `type` that is not a JSON Schema type, anywhere in the schema.
fn malformed(schema: &Value, at: &str) -> Option<String> {
    let types_ok = match &schema["type"] {
        Value::Null => true,
        Value::String(t) => TYPES.contains(&t.as_str()),
        Value::Array(ts) => ts.iter().all(|t| t.as_str().is_some_and(|t| TYPES.contains(&t))),
        _ => false,
    };
    if !types_ok || !(schema.is_object() || schema.is_boolean()) {
        return Some(format!("('{at}'), {} is not a valid schema type.", schema["type"]));
    }
    let shapes_ok = [
        ("properties", Value::is_object as fn(&Value) -> bool),
        ("$defs", Value::is_object),
        ("required", Value::is_array),
        ("enum", Value::is_array),
        ("anyOf", Value::is_array),
    ]
    .iter()
    .all(|(key, shape)| schema.get(key).is_none_or(shape))
        && schema["required"].as_array().is_none_or(|r| r.iter().all(Value::is_string))
        && schema.get("items").is_none_or(|i| i.is_object() || i.is_boolean());
    if !shapes_ok {
        return Some(format!("('{at}'), the schema is not valid JSON Schema."));
    }
    subschemas(schema).find_map(|(key, sub)| malformed(sub, &format!("{at}.{key}")))
}

/// OpenAI Structured Outputs rules for `strict: true`: every object closes
/// (`additionalProperties: false`) and requires all of its properties.
fn strict_problem(schema: &Value, at: &str) -> Option<String> {
    if let Some(problem) = malformed(schema, at) {
        return Some(problem);
    }
    let is_object =
        schema["type"] == "object" || schema["type"].as_array().is_some_and(|ts| ts.iter().any(|t| t == "object"));
    if is_object {
        if schema["additionalProperties"] != false {
            return Some(format!("('{at}'), 'additionalProperties' is required to be supplied and to be false."));
        }
        let required: Vec<&str> =
            schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        if let Some(missing) = schema["properties"]
            .as_object()
            .into_iter()
            .flat_map(|p| p.keys())
            .find(|k| !required.contains(&k.as_str()))
        {
            return Some(format!(
                "('{at}'), 'required' is required to be supplied and to be an array including every key in properties. Missing '{missing}'."
            ));
        }
    }
    subschemas(schema).find_map(|(key, sub)| strict_problem(sub, &format!("{at}.{key}")))
}

/// Direct subschemas: properties, items, `anyOf`/`oneOf`/`allOf` members, `$defs`.
fn subschemas(schema: &Value) -> impl Iterator<Item = (String, &Value)> {
    let named = ["properties", "$defs", "definitions"]
        .into_iter()
        .flat_map(move |k| schema[k].as_object().into_iter().flatten().map(move |(n, s)| (format!("{k}.{n}"), s)));
    let listed = ["anyOf", "oneOf", "allOf"].into_iter().flat_map(move |k| {
        schema[k].as_array().into_iter().flatten().enumerate().map(move |(i, s)| (format!("{k}.{i}"), s))
    });
    let items = schema.get("items").filter(|i| i.is_object()).map(|i| ("items".to_owned(), i));
    named.chain(listed).chain(items)
}

fn anthropic_problem(request: &Value) -> Option<String> {
    let tools = tool_names(&request["tools"], |t| t["name"].as_str());
    for (i, tool) in request["tools"].as_array().into_iter().flatten().enumerate() {
        if tool["input_schema"]["type"] != "object" {
            return Some(format!("tools.{i}.custom.input_schema.type: Input should be 'object'"));
        }
    }
    let choice = &request["tool_choice"];
    if choice["type"] == "tool" && !tools.iter().any(|t| choice["name"] == t.as_str()) {
        return Some(format!(
            "tool_choice.name: tool `{}` was not found in tools",
            choice["name"].as_str().unwrap_or_default()
        ));
    }
    let forced = matches!(choice["type"].as_str(), Some("tool" | "any"));
    (forced && request["thinking"]["type"] == "enabled")
        .then(|| "Thinking may not be enabled when tool_choice forces tool use.".into())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn schema_format(strict: bool, schema: Value) -> Value {
        json!({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "person", "strict": strict, "schema": schema}}})
    }

    #[test]
    fn json_is_sent_only_when_the_request_asks_for_it() {
        let turn = Turn::text(r#"{"name": "Ada", "age": 36}"#);
        let plain = json!({"messages": []});
        assert_eq!(
            adapt(Wire::OpenAi, &plain, turn.clone()).text.unwrap(),
            "Here is what I found: name is Ada, age is 36."
        );
        let asked = json!({"response_format": {"type": "json_object"}});
        assert_eq!(adapt(Wire::OpenAi, &asked, turn.clone()).text, turn.text);
        let forced = json!({"tools": [{"name": "person", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "person"}});
        let answered = adapt(Wire::Anthropic, &forced, turn.clone());
        assert_eq!(
            (answered.text, answered.tool_calls),
            (None, vec![("person".to_owned(), json!({"name": "Ada", "age": 36}))])
        );
        let wrapped = json!({"tools": [{"name": "tags", "input_schema": {"type": "object", "required": ["value"]}}], "tool_choice": {"type": "tool", "name": "tags"}});
        assert_eq!(
            adapt(Wire::Anthropic, &wrapped, Turn::json(json!(["a"]))).tool_calls,
            vec![("tags".to_owned(), json!({"value": ["a"]}))]
        );
        assert_eq!(adapt(Wire::Anthropic, &plain, Turn::text("Just words.")).text.unwrap(), "Just words.");
    }

    #[test]
    fn malformed_requests_are_refused_like_the_real_apis() {
        let closed = json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"], "additionalProperties": false});
        assert!(rejection(Wire::OpenAi, &schema_format(true, closed)).is_none());
        let open = json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
        assert!(rejection(Wire::OpenAi, &schema_format(false, open.clone())).is_none());
        let refused = rejection(Wire::OpenAi, &schema_format(true, open)).unwrap();
        assert!(refused["error"]["message"].as_str().unwrap().contains("additionalProperties"), "{refused}");
        assert!(rejection(Wire::OpenAi, &schema_format(false, json!({"type": "text"}))).is_some());
        assert!(
            rejection(
                Wire::OpenAi,
                &schema_format(false, json!({"type": "object", "properties": {"a": {"type": "array", "items": 3}}}))
            )
            .is_some()
        );
        assert!(rejection(Wire::OpenAi, &schema_format(false, json!({"type": "object", "required": "a"}))).is_some());
        let no_json_word =
            json!({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}});
        assert!(rejection(Wire::OpenAi, &no_json_word).is_some());
        let unknown_tool = json!({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": {"type": "function", "function": {"name": "b"}}});
        assert!(rejection(Wire::OpenAi, &unknown_tool).is_some());
        assert!(rejection(Wire::OpenAi, &json!({"tool_choice": "auto"})).is_some());
        let forced_missing = json!({"tools": [{"name": "a", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "b"}});
        assert_eq!(rejection(Wire::Anthropic, &forced_missing).unwrap()["type"], "error");
        let thinking = json!({"tools": [{"name": "a", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "a"}, "thinking": {"type": "enabled"}});
        assert!(rejection(Wire::Anthropic, &thinking).is_some());
    }
}
