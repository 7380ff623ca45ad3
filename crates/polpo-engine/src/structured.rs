//! Structured outputs: `response_format` `json_object` and `json_schema`.
//!
//! The final answer is validated here, never trusted: a client that asked for a schema gets
//! either a value that matches it, as a canonical JSON string, or a clear
//! `structured_output_invalid` error — never a partial or invalid object.

use serde_json::Value;

/// Largest schema we accept from a request; schemas are untrusted input.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// What shape the final answer must have.
#[derive(Debug, Clone)]
pub enum ResponseFormat {
    /// Any text (the default).
    Text,
    /// Any JSON object.
    JsonObject,
    /// A value valid against a JSON Schema (draft 2020-12).
    JsonSchema {
        /// `json_schema.name`.
        name: String,
        /// The schema as sent.
        schema: Value,
        /// The compiled validator.
        validator: std::sync::Arc<jsonschema::Validator>,
        /// The `response_format` object exactly as the client sent it (`strict` included),
        /// which is what providers with native structured output are given.
        wire: Value,
    },
}

impl ResponseFormat {
    /// Parse the OpenAI wire `response_format` object, checking the schema itself.
    pub fn from_wire(v: &Value) -> Result<Self, String> {
        match v.get("type").and_then(Value::as_str) {
            None | Some("text") => Ok(Self::Text),
            Some("json_object") => Ok(Self::JsonObject),
            Some("json_schema") => {
                let js = v.get("json_schema").ok_or("response_format.json_schema is required for type json_schema")?;
                let name = js.get("name").and_then(Value::as_str).unwrap_or("response").to_string();
                if name.is_empty()
                    || name.len() > 64
                    || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                {
                    return Err("response_format.json_schema.name must match [A-Za-z0-9_-]{1,64}".into());
                }
                let schema = js.get("schema").cloned().unwrap_or_else(|| serde_json::json!({}));
                if serde_json::to_vec(&schema).map(|b| b.len()).unwrap_or(usize::MAX) > MAX_SCHEMA_BYTES {
                    return Err(format!("response_format schema is larger than {MAX_SCHEMA_BYTES} bytes"));
                }
                let validator = jsonschema::draft202012::new(&schema)
                    .map_err(|e| format!("response_format schema is invalid: {e}"))?;
                Ok(Self::JsonSchema { name, schema, validator: std::sync::Arc::new(validator), wire: v.clone() })
            }
            Some(other) => {
                Err(format!("response_format.type `{other}` is not supported (text, json_object, json_schema)"))
            }
        }
    }

    /// True when the answer must be JSON (and so is buffered while streaming).
    pub fn is_structured(&self) -> bool {
        !matches!(self, Self::Text)
    }

    /// The `response_format` to send to the provider: `None` for text, else the client's
    /// object (a `json_schema` exactly as sent, `strict` included).
    pub fn wire(&self) -> Option<Value> {
        match self {
            Self::Text => None,
            Self::JsonObject => Some(serde_json::json!({"type": "json_object"})),
            Self::JsonSchema { wire, .. } => Some(wire.clone()),
        }
    }

    /// The system-prompt section that states the required answer shape, for every provider:
    /// the ones that constrain output natively are told what the tools phase works towards,
    /// and the ones that cannot constrain it see the schema at all. `None` for text.
    pub fn instructions(&self) -> Option<String> {
        match self {
            Self::Text => None,
            Self::JsonObject => Some("Response format: your final answer (after any tool use) must be a single JSON object and nothing else.".into()),
            Self::JsonSchema { name, schema, .. } => Some(format!(
                "Response format: your final answer (after any tool use) must be a single JSON value, and nothing else, valid against this JSON Schema (`{name}`):\n{schema}"
            )),
        }
    }

    /// The user message that starts the tool-free formatting phase, after a final answer
    /// given while tools were offered (so without the provider's output constraint).
    pub fn formatting_request(&self) -> String {
        match self {
            Self::JsonSchema { name, .. } => format!(
                "Now give that final answer as a single JSON value valid against the `{name}` JSON Schema of the response format, and nothing else."
            ),
            _ => "Now give that final answer as a single JSON object, and nothing else.".into(),
        }
    }

    /// The user message of the one repair turn: what was wrong, and the schema to meet.
    pub fn repair_request(&self, diagnostics: &str) -> String {
        let target = match self {
            Self::JsonSchema { name, schema, .. } => {
                format!("a single JSON value valid against this JSON Schema (`{name}`):\n{schema}")
            }
            _ => "a single JSON object".into(),
        };
        format!(
            "Your answer does not match the required response format: {diagnostics}.\nReply again with only the corrected JSON value: {target}"
        )
    }

    /// Check a candidate answer. `Ok` carries the canonical JSON text; `Err` carries
    /// diagnostics written for the model, so it can repair its answer.
    pub fn check(&self, answer: &str) -> Result<String, String> {
        match self {
            Self::Text => Ok(answer.to_string()),
            Self::JsonObject => {
                let value = parse_json_answer(answer)?;
                if value.is_object() { Ok(value.to_string()) } else { Err("the answer must be a JSON object".into()) }
            }
            Self::JsonSchema { validator, .. } => {
                let value = parse_json_answer(answer)?;
                let errors: Vec<String> = validator
                    .iter_errors(&value)
                    .take(10)
                    .map(|e| format!("at `{}`: {e}", e.instance_path()))
                    .collect();
                if errors.is_empty() { Ok(value.to_string()) } else { Err(errors.join("; ")) }
            }
        }
    }
}

/// Parse the answer as JSON, tolerating one Markdown code fence around it (small models
/// often add one); anything else must be exactly one JSON value.
fn parse_json_answer(answer: &str) -> Result<Value, String> {
    let t = answer.trim();
    let t = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .and_then(|s| s.strip_suffix("```"))
        .map(str::trim)
        .unwrap_or(t);
    serde_json::from_str(t).map_err(|e| format!("the answer is not valid JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tier() -> ResponseFormat {
        ResponseFormat::from_wire(&json!({"type":"json_schema","json_schema":{"name":"customer_tier","strict":true,"schema":{
            "type":"object","properties":{"tier":{"type":"string","enum":["free","paid"]}},"required":["tier"],"additionalProperties":false}}}))
        .unwrap()
    }

    #[test]
    fn valid_answers_come_back_canonical() {
        assert_eq!(tier().check("```json\n{ \"tier\" : \"paid\" }\n```").unwrap(), r#"{"tier":"paid"}"#);
    }

    #[test]
    fn invalid_answers_give_model_visible_diagnostics() {
        let err = tier().check(r#"{"tier":"gold"}"#).unwrap_err();
        assert!(err.contains("/tier"), "{err}");
        assert!(tier().check("free").unwrap_err().contains("not valid JSON"));
        let obj = ResponseFormat::from_wire(&json!({"type":"json_object"})).unwrap();
        assert!(obj.check("[1]").is_err());
    }

    #[test]
    fn the_provider_gets_the_format_as_sent_and_the_model_sees_the_schema() {
        let wire = tier().wire().unwrap();
        assert_eq!(wire["json_schema"]["strict"], true);
        assert_eq!(wire["json_schema"]["name"], "customer_tier");
        assert!(tier().instructions().unwrap().contains(r#""enum":["free","paid"]"#));
        let repair = tier().repair_request("at `/tier`: \"gold\" is not one of [\"free\",\"paid\"]");
        assert!(repair.contains("/tier") && repair.contains(r#""required":["tier"]"#), "{repair}");
        assert!(ResponseFormat::Text.wire().is_none() && ResponseFormat::Text.instructions().is_none());
        assert_eq!(ResponseFormat::JsonObject.wire().unwrap(), serde_json::json!({"type": "json_object"}));
    }

    #[test]
    fn bad_formats_are_rejected_up_front() {
        assert!(ResponseFormat::from_wire(&json!({"type":"xml"})).is_err());
        assert!(
            ResponseFormat::from_wire(&json!({"type":"json_schema","json_schema":{"name":"bad name","schema":{}}}))
                .is_err()
        );
        assert!(
            ResponseFormat::from_wire(&json!({"type":"json_schema","json_schema":{"name":"x","schema":{"type":12}}}))
                .is_err()
        );
    }
}
