//! A small structural schema for config files, checked against a `serde_json::Value`.
//!
//! serde stops at the first error; a user fixing a project wants every mistake at once, each
//! with its JSON pointer. So every config file is first walked against a [`Shape`] that
//! collects *all* unknown fields and invalid values, and only a document that passes is handed
//! to serde. The shapes live next to the types they describe and a test per type proves that
//! a document using every field passes both.

use super::codes;
use crate::problem::{Problem, pointer_push};
use serde_json::Value;

/// What a JSON value must look like.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    /// Anything (open extension points, legacy sections kept verbatim).
    Any,
    /// A string.
    String,
    /// `true` or `false`.
    Bool,
    /// An integer within an inclusive range.
    Integer {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// A number within an inclusive range.
    Number {
        /// Smallest accepted value.
        min: f64,
        /// Largest accepted value.
        max: f64,
    },
    /// One of a fixed set of strings.
    Enum(&'static [&'static str]),
    /// An array whose items all have the given shape.
    Array(&'static Shape),
    /// An object with free keys whose values all have the given shape.
    Map(&'static Shape),
    /// An object with known fields (given as groups, so shapes can share field lists).
    Object(&'static [&'static [Field]]),
    /// The first alternative that fits; the string says what was expected.
    OneOf(&'static [Shape], &'static str),
    /// As a field: must not be present; the string says why.
    Forbidden(&'static str),
}

/// A count: an integer from 0 to `u32::MAX`.
pub const COUNT: Shape = Shape::Integer { min: 0, max: u32::MAX as i64 };
/// A positive count: an integer from 1 to `u32::MAX`.
pub const POSITIVE: Shape = Shape::Integer { min: 1, max: u32::MAX as i64 };
/// Milliseconds or other large non-negative integers.
pub const MILLIS: Shape = Shape::Integer { min: 0, max: i64::MAX };
/// A list of strings.
pub const STRINGS: Shape = Shape::Array(&Shape::String);
/// A string → string map (headers, env).
pub const STRING_MAP: Shape = Shape::Map(&Shape::String);

/// One known field of an object.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The JSON key.
    pub name: &'static str,
    /// What its value must look like.
    pub shape: Shape,
    /// Whether the key must be present.
    pub required: bool,
}

impl Field {
    /// A field that may be absent.
    pub const fn optional(name: &'static str, shape: Shape) -> Self {
        Self { name, shape, required: false }
    }

    /// A field that must be present.
    pub const fn required(name: &'static str, shape: Shape) -> Self {
        Self { name, shape, required: true }
    }

    /// A key that must not appear, with the reason shown to the user.
    pub const fn forbidden(name: &'static str, reason: &'static str) -> Self {
        Self { name, shape: Shape::Forbidden(reason), required: false }
    }
}

/// Every problem in `value` against `shape`, with pointers relative to the document root.
/// Problems carry no file; the caller knows it.
pub fn check(value: &Value, shape: &Shape) -> Vec<Problem> {
    let mut out = Vec::new();
    check_at(value, shape, "", &mut out);
    out
}

fn invalid(pointer: &str, message: String) -> Problem {
    Problem::new(codes::INVALID_VALUE, message).at(pointer)
}

fn check_at(value: &Value, shape: &Shape, pointer: &str, out: &mut Vec<Problem>) {
    match shape {
        Shape::Any => {}
        Shape::String => {
            if !value.is_string() {
                out.push(invalid(pointer, format!("expected a string, found {}", kind(value))));
            }
        }
        Shape::Bool => {
            if !value.is_boolean() {
                out.push(invalid(pointer, format!("expected true or false, found {}", kind(value))));
            }
        }
        Shape::Integer { min, max } => match value.as_i64() {
            Some(n) if (*min..=*max).contains(&n) => {}
            _ => out.push(invalid(pointer, format!("expected {}, found {}", integer_range(*min, *max), brief(value)))),
        },
        Shape::Number { min, max } => match value.as_f64() {
            Some(n) if (*min..=*max).contains(&n) => {}
            _ => out.push(invalid(pointer, format!("expected a number from {min} to {max}, found {}", brief(value)))),
        },
        Shape::Enum(names) => match value.as_str() {
            Some(s) if names.contains(&s) => {}
            Some(_) => out.push(invalid(pointer, format!("expected one of {}, found {}", list(names), brief(value)))),
            // `"version": 1` where the string "1" is expected: say which kind, or the message
            // reads "expected one of `1`, found 1".
            None => out.push(invalid(
                pointer,
                format!("expected one of {} (a string), found {} ({})", list(names), brief(value), kind(value)),
            )),
        },
        Shape::Array(item) => match value.as_array() {
            Some(items) => {
                for (i, v) in items.iter().enumerate() {
                    check_at(v, item, &pointer_push(pointer, &i.to_string()), out);
                }
            }
            None => out.push(invalid(pointer, format!("expected an array, found {}", kind(value)))),
        },
        Shape::Map(item) => match value.as_object() {
            Some(map) => {
                for (k, v) in map {
                    check_at(v, item, &pointer_push(pointer, k), out);
                }
            }
            None => out.push(invalid(pointer, format!("expected an object, found {}", kind(value)))),
        },
        Shape::Object(groups) => check_object(value, groups, pointer, out),
        Shape::OneOf(alternatives, expected) => check_one_of(value, alternatives, expected, pointer, out),
        Shape::Forbidden(reason) => {
            out.push(Problem::new(codes::FORBIDDEN_FIELD, (*reason).to_string()).at(pointer));
        }
    }
}

fn check_object(value: &Value, groups: &[&[Field]], pointer: &str, out: &mut Vec<Problem>) {
    let Some(map) = value.as_object() else {
        out.push(invalid(pointer, format!("expected an object, found {}", kind(value))));
        return;
    };
    let fields = || groups.iter().flat_map(|g| g.iter());
    for (key, v) in map {
        let here = pointer_push(pointer, key);
        match fields().find(|f| f.name == key) {
            Some(field) => check_at(v, &field.shape, &here, out),
            None => {
                let known: Vec<&str> =
                    fields().filter(|f| !matches!(f.shape, Shape::Forbidden(_))).map(|f| f.name).collect();
                let hint = closest(key, &known).map(|k| format!("; did you mean `{k}`?")).unwrap_or_default();
                out.push(Problem::new(codes::UNKNOWN_FIELD, format!("field `{key}` is not known here{hint}")).at(here));
            }
        }
    }
    for field in fields().filter(|f| f.required && !map.contains_key(f.name)) {
        out.push(invalid(&pointer_push(pointer, field.name), format!("missing required field `{}`", field.name)));
    }
}

fn check_one_of(value: &Value, alternatives: &[Shape], expected: &str, pointer: &str, out: &mut Vec<Problem>) {
    let mut best: Option<Vec<Problem>> = None;
    for alt in alternatives {
        let mut found = Vec::new();
        check_at(value, alt, pointer, &mut found);
        if found.is_empty() {
            return;
        }
        if same_kind(value, alt) && best.as_ref().is_none_or(|b| found.len() < b.len()) {
            best = Some(found);
        }
    }
    match best {
        Some(problems) => out.extend(problems),
        None => out.push(invalid(pointer, format!("expected {expected}, found {}", kind(value)))),
    }
}

/// Whether `value` has the JSON type an alternative expects, so its detailed problems are
/// the helpful ones to show.
fn same_kind(value: &Value, shape: &Shape) -> bool {
    match shape {
        Shape::Any => true,
        Shape::String | Shape::Enum(_) => value.is_string(),
        Shape::Bool => value.is_boolean(),
        Shape::Integer { .. } | Shape::Number { .. } => value.is_number(),
        Shape::Array(_) => value.is_array(),
        Shape::Map(_) | Shape::Object(_) => value.is_object(),
        Shape::OneOf(alts, _) => alts.iter().any(|a| same_kind(value, a)),
        Shape::Forbidden(_) => false,
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The value itself when it is short and scalar, else its kind.
fn brief(value: &Value) -> String {
    match value {
        Value::String(s) if s.chars().count() <= 40 => format!("\"{s}\""),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => kind(other).to_string(),
    }
}

fn integer_range(min: i64, max: i64) -> String {
    if max >= u32::MAX as i64 { format!("an integer ≥ {min}") } else { format!("an integer from {min} to {max}") }
}

fn list(names: &[&str]) -> String {
    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

/// The known name closest to a misspelt key, if it is close enough to be a likely typo.
fn closest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    let key = key.to_lowercase();
    known
        .iter()
        .map(|k| (edit_distance(&key, &k.to_lowercase()), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb { prev } else { 1 + prev.min(cur).min(row[j]) };
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    static SHAPE: Shape = Shape::Object(&[&[
        Field::required("name", Shape::String),
        Field::optional("mode", Shape::Enum(&["a", "b"])),
        Field::optional("turns", POSITIVE),
        Field::optional("tags", STRINGS),
        Field::forbidden("secret", "secrets do not belong here"),
    ]]);

    fn codes_and_pointers(p: &[Problem]) -> Vec<(String, String)> {
        p.iter().map(|p| (p.code.clone(), p.pointer.clone().unwrap_or_default())).collect()
    }

    #[test]
    fn collects_every_problem_with_its_pointer() {
        let v = json!({"mode": "c", "turns": 0, "tags": ["x", 3], "colour": 1, "secret": "s"});
        let mut got = codes_and_pointers(&check(&v, &SHAPE));
        got.sort();
        let want = [
            ("forbidden_field", "/secret"),
            ("invalid_value", "/mode"),
            ("invalid_value", "/name"),
            ("invalid_value", "/tags/1"),
            ("invalid_value", "/turns"),
            ("unknown_field", "/colour"),
        ];
        assert_eq!(got, want.map(|(c, p)| (c.to_string(), p.to_string())));
    }

    #[test]
    fn a_name_given_as_another_kind_says_a_string_is_expected() {
        static VERSION: Shape = Shape::Object(&[&[Field::required("version", Shape::Enum(&["1"]))]]);
        let p = check(&json!({"version": 1}), &VERSION);
        assert_eq!(p[0].message, "expected one of `1` (a string), found 1 (a number)");
        let p = check(&json!({"version": "2"}), &VERSION);
        assert_eq!(p[0].message, "expected one of `1`, found \"2\"");
    }

    #[test]
    fn unknown_field_suggests_the_likely_name() {
        let p = check(&json!({"name": "x", "tgas": []}), &SHAPE);
        assert!(p[0].message.contains("did you mean `tags`"), "{}", p[0].message);
    }

    #[test]
    fn one_of_reports_the_closest_alternative() {
        static MODEL: Shape = Shape::OneOf(
            &[Shape::String, Shape::Object(&[&[Field::required("profile", Shape::String)]])],
            "a model id or {profile}",
        );
        assert!(check(&json!("x"), &MODEL).is_empty());
        let p = check(&json!({"profile": "x", "extra": 1}), &MODEL);
        assert_eq!(codes_and_pointers(&p), vec![("unknown_field".into(), "/extra".into())]);
        let p = check(&json!(3), &MODEL);
        assert_eq!(p[0].code, "invalid_value");
        assert!(p[0].message.contains("a model id or {profile}"));
    }
}
