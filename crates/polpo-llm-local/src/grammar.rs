//! A GBNF grammar that makes a small model's tool calls parse.
//!
//! The output is either plain text (which must not start with `<` or `{`) or exactly one call
//! `{"name": …, "arguments": {…}}` naming an offered tool, wrapped in `<tool_call>` tags or bare
//! (Qwen prefers bare JSON when its tag token is not offered as text), one alternative per tool, whose
//! arguments object starts with the schema's required properties, typed where the schema says so,
//! and holds nothing undeclared when the schema forbids additional properties. Without it a 135M-parameter model writes calls that rarely parse; with it every
//! call parses, and choosing the right tool is the only thing left to the model.

use polpo_core::tool::ToolSpec;
use serde_json::Value;

/// JSON building blocks; every value rule consumes its trailing whitespace, which is bounded so
/// that a confused model cannot spin on blanks until the token limit.
const JSON_RULES: &str = r#"value ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( pair ( "," ws pair )* )? "}" ws
pair ::= string ":" ws value
array ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" char* "\"" ws
char ::= [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,4} )? ws
integer ::= "-"? natural
natural ::= "0" ws | positive
positive ::= [1-9] [0-9]{0,15} ws
boolean ::= ( "true" | "false" ) ws
ws ::= [ \t\n]{0,4}
"#;

/// Prose: anything that does not start like a call (`<tool_call>` or bare JSON).
const TEXT: &str = "[^<{] .*";

/// What a tool-call grammar must allow: the offered tools, and whether prose may stand instead.
#[derive(Debug, Clone)]
pub struct ToolConstraint {
    /// Offered tools; none means prose only (see [`ToolConstraint::text_only`]).
    pub tools: Vec<ToolSpec>,
    /// Keep the plain-text answer open (tool choice `auto`); otherwise a call is forced.
    pub allow_text: bool,
}

/// How the `<tool_call>` and `</tool_call>` tags are matched: as text, or as the single special
/// token a vocabulary has for them (Qwen's). A model that was trained to emit the token cannot
/// spell the tag out, so a text-only grammar would push it into writing bare JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tags {
    /// GBNF element for the opening tag.
    pub open: String,
    /// GBNF element for the closing tag.
    pub close: String,
}

impl Tags {
    /// Tags matched as literal text, or by token id when the vocabulary has one (`<[id]>`).
    pub fn new(open_token: Option<i32>, close_token: Option<i32>) -> Self {
        let element = |token: Option<i32>, text: &str| match token {
            Some(id) => format!("( \"{text}\" | <[{id}]> )"),
            None => format!("\"{text}\""),
        };
        Self {
            open: element(open_token, "<tool_call>"),
            close: element(close_token, "</tool_call>"),
        }
    }
}

impl ToolConstraint {
    /// Prose that does not open like a call: for a turn that must answer after tool calls, when a
    /// small model would otherwise imitate its earlier calls in free text.
    pub fn text_only() -> Self {
        Self {
            tools: Vec::new(),
            allow_text: true,
        }
    }

    /// True when output starting with `piece` can only be the free-text branch, which accepts
    /// anything from there on: the grammar may then be dropped, saving a third of decode time.
    pub fn is_free_text_start(&self, piece: &str) -> bool {
        self.allow_text && !piece.starts_with(['<', '{'])
    }

    /// The GBNF: either text that does not start with `<`, or one call naming an offered tool.
    pub fn gbnf(&self, tags: &Tags) -> String {
        if self.tools.is_empty() {
            return format!("root ::= {TEXT}\n");
        }
        let mut g = if self.allow_text {
            format!("root ::= text | call\ntext ::= {TEXT}\n")
        } else {
            "root ::= call\n".to_string()
        };
        let alternatives: Vec<String> =
            (0..self.tools.len()).map(|i| format!("call-{i}")).collect();
        g.push_str(&format!(
            "call ::= {} ws body {} | body\n",
            tags.open, tags.close
        ));
        g.push_str(&format!(
            "body ::= \"{{\" ws \"\\\"name\\\"\" ws \":\" ws ( {} ) \"}}\" ws\n",
            alternatives.join(" | ")
        ));
        for (i, tool) in self.tools.iter().enumerate() {
            g.push_str(&format!(
                "call-{i} ::= {} ws \",\" ws \"\\\"arguments\\\"\" ws \":\" ws args-{i}\n",
                json_key_literal(&tool.name)
            ));
            g.push_str(&format!(
                "args-{i} ::= {}\n",
                arguments_rule(&tool.parameters)
            ));
        }
        g.push_str(JSON_RULES);
        g
    }
}

/// `{ "req1": <typed>, "req2": <typed> … }`: the schema's required properties first, in order.
/// When the schema forbids additional properties, only its declared optional properties may
/// follow, each at most once and in declared order, so a model cannot invent an argument the
/// tool will reject; otherwise any further pairs may follow. With nothing required and extra
/// properties allowed, any object.
fn arguments_rule(schema: &Value) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let declared = schema.get("properties").and_then(Value::as_object);
    let field = |name: &str| {
        let property = declared.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
        format!(
            "{} ws \":\" ws {}",
            json_key_literal(name),
            value_rule(property)
        )
    };
    let required_fields: Vec<String> = required.iter().map(|name| field(name)).collect();
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    let optional: Vec<String> = declared
        .into_iter()
        .flat_map(|p| p.keys())
        .filter(|name| closed && !required.contains(&name.as_str()))
        .map(|name| field(name))
        .collect();
    // Each optional pair at most once, in order: `( "," ws pair )?` after whatever came before.
    let tail = |from: usize| -> String {
        optional[from..]
            .iter()
            .map(|pair| format!(" ( \",\" ws {pair} )?"))
            .collect()
    };
    let body = match (required_fields.is_empty(), closed) {
        (false, true) => format!("{}{}", required_fields.join(" \",\" ws "), tail(0)),
        (false, false) => format!("{} ( \",\" ws pair )*", required_fields.join(" \",\" ws ")),
        (true, false) => return "object".into(),
        (true, true) if optional.is_empty() => return r#""{" ws "}" ws"#.into(),
        // Nothing required: the object is empty or starts with any one optional pair.
        (true, true) => {
            let starts: Vec<String> = (0..optional.len())
                .map(|i| format!("{}{}", optional[i], tail(i + 1)))
                .collect();
            format!("( {} )?", starts.join(" | "))
        }
    };
    format!("\"{{\" ws {body} \"}}\" ws")
}

/// The rule for one property's value, from its schema `type` (or string `enum`).
fn value_rule(property: &Value) -> String {
    if let Some(options) = property.get("enum").and_then(Value::as_array) {
        let literals: Vec<String> = options
            .iter()
            .filter_map(Value::as_str)
            .map(json_key_literal)
            .collect();
        if literals.len() == options.len() && !literals.is_empty() {
            return format!("( {} ) ws", literals.join(" | "));
        }
    }
    match property.get("type").and_then(Value::as_str) {
        Some("string") => "string",
        // Counts and 1-based positions: a bound the model cannot see in the grammar is one it breaks.
        Some("integer") => match property.get("minimum").and_then(Value::as_i64) {
            Some(1..) => "positive",
            Some(0) => "natural",
            _ => "integer",
        },
        Some("number") => "number",
        Some("boolean") => "boolean",
        Some("array") => "array",
        Some("object") => "object",
        _ => "value",
    }
    .into()
}

/// A GBNF literal matching `text` written as a JSON string (quotes included).
fn json_key_literal(text: &str) -> String {
    let json = Value::String(text.into()).to_string();
    let mut out = String::with_capacity(json.len() + 8);
    out.push('"');
    for c in json.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, parameters: Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters,
        }
    }

    #[test]
    fn one_alternative_per_tool_with_required_typed_arguments() {
        let read = tool(
            "read",
            serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["path", "limit"]}),
        );
        let ls = tool("ls", serde_json::json!({"type": "object"}));
        let g = ToolConstraint {
            tools: vec![read, ls.clone()],
            allow_text: true,
        }
        .gbnf(&Tags::new(None, None));
        assert!(g.starts_with("root ::= text | call\ntext ::= [^<{] .*\n"));
        assert!(g.contains("call ::= \"<tool_call>\" ws body \"</tool_call>\" | body\n"));
        assert!(g.contains(r#"body ::= "{" ws "\"name\"" ws ":" ws ( call-0 | call-1 ) "}" ws"#));
        assert!(g.contains(r#"call-0 ::= "\"read\"" ws"#));
        assert!(g.contains(r#"args-0 ::= "{" ws "\"path\"" ws ":" ws string "," ws "\"limit\"" ws ":" ws integer ( "," ws pair )* "}" ws"#));
        assert!(g.contains("args-1 ::= object\n"));
        let auto = ToolConstraint {
            tools: vec![],
            allow_text: true,
        };
        assert!(
            auto.is_free_text_start("The")
                && !auto.is_free_text_start("{\"")
                && !auto.is_free_text_start("<tool")
        );
        let forced = ToolConstraint {
            tools: vec![ls],
            allow_text: false,
        };
        assert!(
            forced
                .gbnf(&Tags::new(Some(7), None))
                .starts_with("root ::= call\ncall ::= ( \"<tool_call>\" | <[7]> ) ws")
        );
        assert!(
            !forced.is_free_text_start("Sure"),
            "a forced call never drops its grammar"
        );
        let answer = ToolConstraint::text_only();
        assert_eq!(answer.gbnf(&Tags::new(None, None)), "root ::= [^<{] .*\n");
        assert!(answer.is_free_text_start("The") && !answer.is_free_text_start("{"));
    }

    #[test]
    fn a_closed_schema_allows_only_its_declared_properties_each_once() {
        // The shape of polpo-tools' `read`: one required property, two optional 1-based counts.
        let read = serde_json::json!({"type": "object", "properties": {
            "path": {"type": "string"}, "offset": {"type": "integer", "minimum": 1},
            "limit": {"type": "integer", "minimum": 1}}, "required": ["path"], "additionalProperties": false});
        assert_eq!(
            arguments_rule(&read),
            r#""{" ws "\"path\"" ws ":" ws string ( "," ws "\"offset\"" ws ":" ws positive )? ( "," ws "\"limit\"" ws ":" ws positive )? "}" ws"#
        );
        let optional_only = serde_json::json!({"properties": {"a": {"type": "boolean"}, "b": {"minimum": 0, "type": "integer"}},
            "additionalProperties": false});
        assert_eq!(
            arguments_rule(&optional_only),
            r#""{" ws ( "\"a\"" ws ":" ws boolean ( "," ws "\"b\"" ws ":" ws natural )? | "\"b\"" ws ":" ws natural )? "}" ws"#
        );
        let nothing =
            serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false});
        assert_eq!(arguments_rule(&nothing), r#""{" ws "}" ws"#);
        let open = serde_json::json!({"properties": {"a": {"type": "string"}}});
        assert_eq!(
            arguments_rule(&open),
            "object",
            "an open schema with nothing required takes any object"
        );
    }

    #[test]
    fn names_are_escaped_twice_json_then_gbnf() {
        assert_eq!(json_key_literal(r#"a"b\c"#), r#""\"a\\\"b\\\\c\"""#);
        let mode = serde_json::json!({"enum": ["r", "w"]});
        assert_eq!(value_rule(&mode), r#"( "\"r\"" | "\"w\"" ) ws"#);
    }
}
