//! Evaluating an [`Expr`] over a JSON context, with the comparison rules of the reference
//! evaluator.
//!
//! Where the reference relies on JavaScript object identity or `String(object)`, values here
//! come from JSON and have no identity: `===` compares arrays and objects by content, and
//! their string form is compact JSON. Numbers print in plain decimal (`1e21` as
//! `1000000000000000000000`), which only matters when a number is compared with a non-numeric
//! string.

use super::lexer::CmpOp;
use super::parser::{Expr, Literal};
use super::{ExprError, ExprErrorCode, Limits};
use serde_json::Value;
use std::borrow::Cow;
use std::cmp::Ordering;

/// A value during evaluation: JSON plus JavaScript's `undefined` (a missing path).
#[derive(Debug, Clone, PartialEq)]
pub enum Val<'a> {
    /// A path that names nothing.
    Undefined,
    /// `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// A number.
    Number(f64),
    /// A string.
    String(Cow<'a, str>),
    /// An array or object from the context.
    Json(&'a Value),
}

impl Val<'_> {
    /// JavaScript truthiness: undefined, null, false, 0 and "" are false.
    pub fn truthy(&self) -> bool {
        match self {
            Val::Undefined | Val::Null => false,
            Val::Bool(b) => *b,
            Val::Number(n) => *n != 0.0 && !n.is_nan(),
            Val::String(s) => !s.is_empty(),
            Val::Json(_) => true,
        }
    }

    /// The value as JSON; `None` for undefined.
    pub fn into_json(self) -> Option<Value> {
        Some(match self {
            Val::Undefined => return None,
            Val::Null => Value::Null,
            Val::Bool(b) => Value::Bool(b),
            Val::Number(n) => serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number),
            Val::String(s) => Value::String(s.into_owned()),
            Val::Json(v) => v.clone(),
        })
    }

    fn nullish(&self) -> bool {
        matches!(self, Val::Undefined | Val::Null)
    }

    /// The number a value coerces to: numbers, booleans (1/0) and non-blank numeric strings.
    fn number(&self) -> Option<f64> {
        match self {
            Val::Number(n) => Some(*n),
            Val::Bool(b) => Some(f64::from(u8::from(*b))),
            Val::String(s) => js_number(s),
            _ => None,
        }
    }

    /// The string a value compares as.
    fn string_form(&self) -> Cow<'_, str> {
        match self {
            Val::Undefined => "undefined".into(),
            Val::Null => "null".into(),
            Val::Bool(b) => b.to_string().into(),
            Val::Number(n) => n.to_string().into(),
            Val::String(s) => Cow::Borrowed(s),
            Val::Json(v) => v.to_string().into(),
        }
    }
}

fn from_json(value: &Value) -> Val<'_> {
    match value {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Bool(*b),
        Value::Number(n) => n.as_f64().map_or(Val::Null, Val::Number),
        Value::String(s) => Val::String(Cow::Borrowed(s)),
        other => Val::Json(other),
    }
}

/// `Number(s)` for the decimal forms: optional sign, digits with at most one dot, optional
/// exponent, or `Infinity`; surrounding whitespace ignored; blank is not a number.
fn js_number(s: &str) -> Option<f64> {
    let t = s.trim();
    let unsigned = t.strip_prefix(['+', '-']).unwrap_or(t);
    if unsigned == "Infinity" {
        return Some(if t.starts_with('-') { f64::NEG_INFINITY } else { f64::INFINITY });
    }
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (unsigned, None),
    };
    let digits = mantissa.chars().filter(char::is_ascii_digit).count();
    let mantissa_ok =
        digits > 0 && mantissa.chars().all(|c| c.is_ascii_digit() || c == '.') && mantissa.matches('.').count() <= 1;
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && e.chars().all(|c| c.is_ascii_digit())
    });
    if !(mantissa_ok && exponent_ok) {
        return None;
    }
    t.parse::<f64>().ok()
}

/// `===`: same kind and value (arrays and objects by content).
fn strict_eq(a: &Val<'_>, b: &Val<'_>) -> bool {
    match (a, b) {
        (Val::Undefined, Val::Undefined) | (Val::Null, Val::Null) => true,
        (Val::Bool(x), Val::Bool(y)) => x == y,
        (Val::Number(x), Val::Number(y)) => x == y,
        (Val::String(x), Val::String(y)) => x == y,
        (Val::Json(x), Val::Json(y)) => x == y,
        _ => false,
    }
}

/// `==` as the reference defines it.
fn loose_eq(a: &Val<'_>, b: &Val<'_>) -> bool {
    if a.nullish() || b.nullish() {
        return a.nullish() && b.nullish();
    }
    if strict_eq(a, b) {
        return true;
    }
    match (a.number(), b.number()) {
        (Some(x), Some(y)) => x == y,
        _ => a.string_form() == b.string_form(),
    }
}

/// The order of two values, `None` when either is null or undefined. Numeric when both
/// coerce to numbers, else by string (UTF-16 code units, as JavaScript compares).
fn order(a: &Val<'_>, b: &Val<'_>) -> Option<Ordering> {
    if a.nullish() || b.nullish() {
        return None;
    }
    match (a.number(), b.number()) {
        (Some(x), Some(y)) => x.partial_cmp(&y),
        _ => Some(a.string_form().encode_utf16().cmp(b.string_form().encode_utf16())),
    }
}

/// Compare two values with `op`.
pub(crate) fn compare(op: CmpOp, a: &Val<'_>, b: &Val<'_>) -> bool {
    match op {
        CmpOp::StrictEq => strict_eq(a, b),
        CmpOp::StrictNe => !strict_eq(a, b),
        CmpOp::Eq => loose_eq(a, b),
        CmpOp::Ne => !loose_eq(a, b),
        CmpOp::Gt => order(a, b) == Some(Ordering::Greater),
        CmpOp::Lt => order(a, b) == Some(Ordering::Less),
        CmpOp::Ge => matches!(order(a, b), Some(Ordering::Greater | Ordering::Equal)),
        CmpOp::Le => matches!(order(a, b), Some(Ordering::Less | Ordering::Equal)),
    }
}

/// Evaluate `expr` over `context`, within `limits.max_steps`.
pub fn evaluate_expr<'a>(expr: &'a Expr, context: &'a Value, limits: &Limits) -> Result<Val<'a>, ExprError> {
    let mut eval = Eval { context, steps: 0, max_steps: limits.max_steps };
    eval.value(expr)
}

struct Eval<'a> {
    context: &'a Value,
    steps: usize,
    max_steps: usize,
}

impl<'a> Eval<'a> {
    fn step(&mut self) -> Result<(), ExprError> {
        self.steps += 1;
        if self.steps > self.max_steps {
            return Err(ExprError::new(
                ExprErrorCode::BudgetExceeded,
                1,
                format!("evaluation takes more than {} steps", self.max_steps),
            ));
        }
        Ok(())
    }

    fn value(&mut self, expr: &'a Expr) -> Result<Val<'a>, ExprError> {
        self.step()?;
        Ok(match expr {
            Expr::Literal(Literal::Null) => Val::Null,
            Expr::Literal(Literal::Bool(b)) => Val::Bool(*b),
            Expr::Literal(Literal::Number(n)) => Val::Number(*n),
            Expr::Literal(Literal::String(s)) => Val::String(Cow::Borrowed(s)),
            Expr::Path(path) => self.lookup(path)?,
            Expr::Not(inner) => Val::Bool(!self.value(inner)?.truthy()),
            Expr::And(items) => {
                for item in items {
                    if !self.value(item)?.truthy() {
                        return Ok(Val::Bool(false));
                    }
                }
                Val::Bool(true)
            }
            Expr::Or(items) => {
                for item in items {
                    if self.value(item)?.truthy() {
                        return Ok(Val::Bool(true));
                    }
                }
                Val::Bool(false)
            }
            Expr::Cmp(op, left, right) => {
                let (a, b) = (self.value(left)?, self.value(right)?);
                Val::Bool(compare(*op, &a, &b))
            }
        })
    }

    /// Dot-split lookup: object keys, and canonical indexes into arrays; anything else is
    /// undefined.
    fn lookup(&mut self, path: &str) -> Result<Val<'a>, ExprError> {
        let mut here = self.context;
        for segment in path.split('.') {
            self.step()?;
            let next = match here {
                Value::Object(map) => map.get(segment),
                Value::Array(items) => {
                    segment.parse::<usize>().ok().filter(|i| i.to_string() == segment).and_then(|i| items.get(i))
                }
                _ => None,
            };
            match next {
                Some(v) => here = v,
                None => return Ok(Val::Undefined),
            }
        }
        Ok(from_json(here))
    }
}
