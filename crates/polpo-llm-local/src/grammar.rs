//! A GBNF grammar that makes a small model's tool calls parse.
//!
//! The output is either plain text (which must not start with `<` or `{`) or exactly one call
//! `{"name": …, "arguments": {…}}` naming an offered tool, wrapped in `<tool_call>` tags or bare
//! (Qwen prefers bare JSON when its tag token is not offered as text), one alternative per tool, whose
//! arguments object starts with the schema's required properties, typed where the schema says so,
//! and holds nothing undeclared when the schema forbids additional properties. Without it a 135M-parameter model writes calls that rarely parse; with it every
//! call parses, and choosing the right tool is the only thing left to the model.
//!
//! A structured answer (`response_format`) is constrained the same way: [`JsonAnswer`] turns the
//! JSON Schema into a grammar for the subset a grammar can express (objects with their
//! properties, required ones and `additionalProperties: false`; string, number, integer, boolean
//! and null; `enum` and `const`; arrays of `items`; nullable types and `anyOf`). Everything else
//! (lengths, ranges, patterns, formats, `$ref`) is left to the validation that follows.

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

/// What the output of one generation is constrained to.
#[derive(Debug, Clone)]
pub enum Constraint {
    /// Tool calls (and perhaps prose).
    Tools(ToolConstraint),
    /// One JSON value for a structured answer.
    Json(JsonAnswer),
}

impl Constraint {
    /// The GBNF, rooted at `root`.
    pub fn gbnf(&self, tags: &Tags) -> String {
        match self {
            Self::Tools(tools) => tools.gbnf(tags),
            Self::Json(answer) => answer.gbnf(),
        }
    }

    /// See [`ToolConstraint::is_free_text_start`]; a JSON answer is never free text.
    pub fn is_free_text_start(&self, piece: &str) -> bool {
        matches!(self, Self::Tools(tools) if tools.is_free_text_start(piece))
    }

    /// The tools a call may name (none for a JSON answer).
    pub fn tools(&self) -> &[ToolSpec] {
        match self {
            Self::Tools(tools) => &tools.tools,
            Self::Json(_) => &[],
        }
    }

    /// True for a structured answer, whose output is text only (never a call).
    pub fn is_json(&self) -> bool {
        matches!(self, Self::Json(_))
    }
}

/// A structured answer: the output is one JSON value of the `response_format`'s schema.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonAnswer {
    /// The JSON Schema (`{"type": "object"}` for `json_object`).
    pub schema: Value,
}

impl JsonAnswer {
    /// From an OpenAI-wire `response_format`; `None` for text.
    pub fn from_response_format(format: &Value) -> Option<Self> {
        match format.get("type").and_then(Value::as_str)? {
            "json_object" => Some(Self { schema: serde_json::json!({"type": "object"}) }),
            "json_schema" => {
                Some(Self { schema: format.pointer("/json_schema/schema").cloned().unwrap_or(Value::Bool(true)) })
            }
            _ => None,
        }
    }

    /// The GBNF: `root` is a value of the schema; nested objects and arrays get rules of their
    /// own (`schema-N`).
    pub fn gbnf(&self) -> String {
        let mut rules = SchemaRules::default();
        let root = rules.expression(&self.schema);
        let mut g = format!("root ::= {root}\n");
        for (i, body) in rules.0.iter().enumerate() {
            g.push_str(&format!("schema-{i} ::= {body}\n"));
        }
        g.push_str(JSON_RULES);
        g
    }
}

/// The named rules of a schema grammar, in creation order.
#[derive(Default)]
struct SchemaRules(Vec<String>);

impl SchemaRules {
    /// A GBNF expression matching values of `schema` (what the grammar cannot express is
    /// widened, never narrowed: validation after decoding has the last word).
    fn expression(&mut self, schema: &Value) -> String {
        if let Some(value) = schema.get("const") {
            return format!("{} ws", gbnf_literal(&value.to_string()));
        }
        if let Some(options) = schema.get("enum").and_then(Value::as_array).filter(|o| !o.is_empty()) {
            let literals: Vec<String> = options.iter().map(|v| gbnf_literal(&v.to_string())).collect();
            return format!("( {} ) ws", literals.join(" | "));
        }
        if let Some(options) =
            schema.get("anyOf").or_else(|| schema.get("oneOf")).and_then(Value::as_array).filter(|o| !o.is_empty())
        {
            let alternatives: Vec<String> = options.iter().map(|o| self.expression(o)).collect();
            return format!("( {} )", alternatives.join(" | "));
        }
        let mut types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ if schema.get("properties").is_some() => vec!["object"],
            _ => return "value".into(),
        };
        // OpenAPI's `nullable: true`, which some clients still send.
        if schema.get("nullable") == Some(&Value::Bool(true)) {
            types.push("null");
        }
        let alternatives: Vec<String> = types.into_iter().map(|t| self.typed(t, schema)).collect();
        match alternatives.as_slice() {
            [one] => one.clone(),
            _ => format!("( {} )", alternatives.join(" | ")),
        }
    }

    fn typed(&mut self, kind: &str, schema: &Value) -> String {
        match kind {
            "object" => {
                let body = object_rule(schema, &mut |property| self.expression(property));
                // An open object without requirements is any object: no rule of its own.
                if body == "object" { body } else { self.named(body) }
            }
            "array" => match schema.get("items").filter(|i| i.is_object()) {
                Some(items) => {
                    let item = self.expression(items);
                    self.named(format!("\"[\" ws ( {item} ( \",\" ws {item} )* )? \"]\" ws"))
                }
                None => "array".into(),
            },
            "string" | "number" | "integer" | "boolean" => kind.into(),
            "null" => "\"null\" ws".into(),
            _ => "value".into(),
        }
    }

    fn named(&mut self, body: String) -> String {
        self.0.push(body);
        format!("schema-{}", self.0.len() - 1)
    }
}

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
        Self { open: element(open_token, "<tool_call>"), close: element(close_token, "</tool_call>") }
    }
}

impl ToolConstraint {
    /// Prose that does not open like a call: for a turn that must answer after tool calls, when a
    /// small model would otherwise imitate its earlier calls in free text.
    pub fn text_only() -> Self {
        Self { tools: Vec::new(), allow_text: true }
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
        let alternatives: Vec<String> = (0..self.tools.len()).map(|i| format!("call-{i}")).collect();
        g.push_str(&format!("call ::= {} ws body {} | body\n", tags.open, tags.close));
        g.push_str(&format!(
            "body ::= \"{{\" ws \"\\\"name\\\"\" ws \":\" ws ( {} ) \"}}\" ws\n",
            alternatives.join(" | ")
        ));
        for (i, tool) in self.tools.iter().enumerate() {
            g.push_str(&format!(
                "call-{i} ::= {} ws \",\" ws \"\\\"arguments\\\"\" ws \":\" ws args-{i}\n",
                json_key_literal(&tool.name)
            ));
            g.push_str(&format!("args-{i} ::= {}\n", arguments_rule(&tool.parameters)));
        }
        g.push_str(JSON_RULES);
        g
    }
}

/// A tool's arguments object: [`object_rule`] with each property typed by [`value_rule`].
fn arguments_rule(schema: &Value) -> String {
    object_rule(schema, &mut value_rule)
}

/// `{ "req1": <typed>, "req2": <typed> … }`: the schema's required properties first, in order,
/// each value matched by `value`'s rule for its property schema. When the schema forbids
/// additional properties, only its declared optional properties may follow, each at most once
/// and in declared order, so a model cannot invent a property that will be rejected; otherwise
/// any further pairs may follow. With nothing required and extra properties allowed, any object.
fn object_rule(schema: &Value, value: &mut dyn FnMut(&Value) -> String) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let declared = schema.get("properties").and_then(Value::as_object);
    let mut field = |name: &str| {
        let property = declared.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
        format!("{} ws \":\" ws {}", json_key_literal(name), value(property))
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
    let tail =
        |from: usize| -> String { optional[from..].iter().map(|pair| format!(" ( \",\" ws {pair} )?")).collect() };
    let body = match (required_fields.is_empty(), closed) {
        (false, true) => format!("{}{}", required_fields.join(" \",\" ws "), tail(0)),
        (false, false) => format!("{} ( \",\" ws pair )*", required_fields.join(" \",\" ws ")),
        (true, false) => return "object".into(),
        (true, true) if optional.is_empty() => return r#""{" ws "}" ws"#.into(),
        // Nothing required: the object is empty or starts with any one optional pair.
        (true, true) => {
            let starts: Vec<String> = (0..optional.len()).map(|i| format!("{}{}", optional[i], tail(i + 1))).collect();
            format!("( {} )?", starts.join(" | "))
        }
    };
    format!("\"{{\" ws {body} \"}}\" ws")
}

/// The rule for one property's value, from its schema `type` (or string `enum`).
fn value_rule(property: &Value) -> String {
    if let Some(options) = property.get("enum").and_then(Value::as_array) {
        let literals: Vec<String> = options.iter().filter_map(Value::as_str).map(json_key_literal).collect();
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
    gbnf_literal(&Value::String(text.into()).to_string())
}

/// A GBNF literal matching `text` exactly.
fn gbnf_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    out.push('"');
    for c in text.chars() {
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
        ToolSpec { name: name.into(), description: String::new(), parameters }
    }

    #[test]
    fn one_alternative_per_tool_with_required_typed_arguments() {
        let read = tool(
            "read",
            serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["path", "limit"]}),
        );
        let ls = tool("ls", serde_json::json!({"type": "object"}));
        let g = ToolConstraint { tools: vec![read, ls.clone()], allow_text: true }.gbnf(&Tags::new(None, None));
        assert!(g.starts_with("root ::= text | call\ntext ::= [^<{] .*\n"));
        assert!(g.contains("call ::= \"<tool_call>\" ws body \"</tool_call>\" | body\n"));
        assert!(g.contains(r#"body ::= "{" ws "\"name\"" ws ":" ws ( call-0 | call-1 ) "}" ws"#));
        assert!(g.contains(r#"call-0 ::= "\"read\"" ws"#));
        assert!(g.contains(r#"args-0 ::= "{" ws "\"path\"" ws ":" ws string "," ws "\"limit\"" ws ":" ws integer ( "," ws pair )* "}" ws"#));
        assert!(g.contains("args-1 ::= object\n"));
        let auto = ToolConstraint { tools: vec![], allow_text: true };
        assert!(auto.is_free_text_start("The") && !auto.is_free_text_start("{\"") && !auto.is_free_text_start("<tool"));
        let forced = ToolConstraint { tools: vec![ls], allow_text: false };
        assert!(
            forced
                .gbnf(&Tags::new(Some(7), None))
                .starts_with("root ::= call\ncall ::= ( \"<tool_call>\" | <[7]> ) ws")
        );
        assert!(!forced.is_free_text_start("Sure"), "a forced call never drops its grammar");
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
        let nothing = serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false});
        assert_eq!(arguments_rule(&nothing), r#""{" ws "}" ws"#);
        let open = serde_json::json!({"properties": {"a": {"type": "string"}}});
        assert_eq!(arguments_rule(&open), "object", "an open schema with nothing required takes any object");
    }

    #[test]
    fn a_strict_schema_becomes_a_grammar_of_its_exact_shape() {
        let schema = serde_json::json!({"type": "object", "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer"},
            "tier": {"enum": ["free", "paid"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "manager": {"type": ["string", "null"]},
            "address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}
        }, "required": ["name", "age", "tier", "tags", "manager", "address"], "additionalProperties": false});
        let g = JsonAnswer { schema }.gbnf();
        let rules: Vec<&str> = g.lines().take(4).collect();
        assert_eq!(rules[0], "root ::= schema-2");
        assert_eq!(rules[1], r#"schema-0 ::= "[" ws ( string ( "," ws string )* )? "]" ws"#);
        assert_eq!(rules[2], r#"schema-1 ::= "{" ws "\"city\"" ws ":" ws string "}" ws"#);
        assert_eq!(
            rules[3],
            concat!(
                r#"schema-2 ::= "{" ws "\"name\"" ws ":" ws string "," ws "\"age\"" ws ":" ws integer "," ws "#,
                r#""\"tier\"" ws ":" ws ( "\"free\"" | "\"paid\"" ) ws "," ws "\"tags\"" ws ":" ws schema-0 "," ws "#,
                r#""\"manager\"" ws ":" ws ( string | "null" ws ) "," ws "\"address\"" ws ":" ws schema-1 "}" ws"#
            )
        );
        assert!(g.contains("\nvalue ::= "), "the JSON building blocks follow");
    }

    #[test]
    fn what_a_grammar_cannot_express_is_widened_and_validated_after() {
        let answer = |format: Value| JsonAnswer::from_response_format(&format).unwrap().gbnf();
        assert!(answer(serde_json::json!({"type": "json_object"})).starts_with("root ::= object\n"));
        let referenced =
            serde_json::json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/a"}}});
        assert!(answer(referenced).starts_with("root ::= value\n"));
        let choice = serde_json::json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "anyOf": [{"type": "integer"}, {"const": "none"}], "minimum": 3}}});
        assert!(answer(choice).starts_with(r#"root ::= ( integer | "\"none\"" ws )"#));
        let nullable = serde_json::json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "number", "nullable": true}}});
        assert!(answer(nullable).starts_with(r#"root ::= ( number | "null" ws )"#));
        assert!(JsonAnswer::from_response_format(&serde_json::json!({"type": "text"})).is_none());
        let constraint = Constraint::Json(JsonAnswer { schema: serde_json::json!({"type": "object"}) });
        assert!(constraint.is_json() && constraint.tools().is_empty() && !constraint.is_free_text_start("The"));
        assert!(constraint.gbnf(&Tags::new(None, None)).starts_with("root ::= object\n"));
        let prose = Constraint::Tools(ToolConstraint::text_only());
        assert!(!prose.is_json() && prose.is_free_text_start("The"));
    }

    #[test]
    fn names_are_escaped_twice_json_then_gbnf() {
        assert_eq!(json_key_literal(r#"a"b\c"#), r#""\"a\\\"b\\\\c\"""#);
        let mode = serde_json::json!({"enum": ["r", "w"]});
        assert_eq!(value_rule(&mode), r#"( "\"r\"" | "\"w\"" ) ws"#);
    }
}
