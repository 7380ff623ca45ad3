//! The safe expression language of loop guards (`when`, `stopWhen`, `while`, policies).
//!
//! Guards are written by people into loop files and evaluated by the runtime over the loop's
//! shared context bag, so they must never run code: this is a small recursive-descent language
//! with no eval, no globals, no function calls, no arithmetic and no indexing. Grammar, lowest
//! precedence first:
//!
//! ```text
//! or      := and ( "||" and )*
//! and     := cmp ( "&&" cmp )*
//! cmp     := unary ( ("==="|"!=="|"=="|"!="|">="|"<="|">"|"<") unary )?   (at most one)
//! unary   := "!" unary | primary
//! primary := "(" or ")" | NUMBER | STRING | "true" | "false" | "null" | PATH
//! NUMBER  := optional "-", a digit, then [0-9.]*
//! STRING  := '...' | "..."   (a backslash takes the next character literally)
//! PATH    := [A-Za-z_][A-Za-z0-9_.]*   (dot-split lookup in the context; missing → undefined)
//! ```
//!
//! Semantics: `===`/`!==` are strict; `==` holds between null and undefined only, otherwise
//! for identical values, numerically equal values (both coerce to numbers), or equal string
//! forms. An ordering with a null or undefined operand is false; ordering is numeric when both
//! sides coerce to numbers, otherwise by string. `&&`, `||` and `!` give booleans. An empty
//! expression is true. [`evaluate`] reports errors; [`holds`] fails closed (false).
//!
//! Everything is bounded by [`Limits`]: source length, nesting depth and evaluation steps.
//! Errors are values with a stable code and the 1-based column, never panics.

mod eval;
mod lexer;
mod parser;
#[cfg(test)]
mod tests;

pub use eval::{Val, evaluate_expr};
pub use lexer::CmpOp;
pub use parser::{Expr, Literal, parse, parse_with};

use serde_json::Value;
use std::fmt;

/// Bounds on one expression, so a hostile loop file cannot make the runtime spin or overflow
/// its stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest source accepted, in bytes.
    pub max_bytes: usize,
    /// Deepest nesting of parentheses and `!`.
    pub max_depth: usize,
    /// Nodes visited plus path segments looked up in one evaluation.
    pub max_steps: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_bytes: 4096, max_depth: 64, max_steps: 10_000 }
    }
}

/// What went wrong, as a stable snake_case code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExprErrorCode {
    /// The source is longer than [`Limits::max_bytes`].
    TooLong,
    /// Parentheses or `!` nest deeper than [`Limits::max_depth`].
    TooDeep,
    /// A character no token starts with (including a single `=`, `&` or `|`).
    UnexpectedCharacter,
    /// A string literal without its closing quote.
    UnterminatedString,
    /// A NUMBER token that is not a finite number (`1.2.3`, a 400-digit literal).
    InvalidNumber,
    /// A token where the grammar expects something else.
    UnexpectedToken,
    /// The source ends where the grammar expects more.
    UnexpectedEnd,
    /// `a == b == c`: comparisons do not chain.
    ChainedComparison,
    /// Evaluation needed more than [`Limits::max_steps`] steps.
    BudgetExceeded,
}

impl ExprErrorCode {
    /// The code as scripts and tests match on it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TooLong => "expression_too_long",
            Self::TooDeep => "expression_too_deep",
            Self::UnexpectedCharacter => "unexpected_character",
            Self::UnterminatedString => "unterminated_string",
            Self::InvalidNumber => "invalid_number",
            Self::UnexpectedToken => "unexpected_token",
            Self::UnexpectedEnd => "unexpected_end",
            Self::ChainedComparison => "chained_comparison",
            Self::BudgetExceeded => "evaluation_budget_exceeded",
        }
    }
}

/// A syntax or evaluation failure, located at a 1-based character column of the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    /// The stable code.
    pub code: ExprErrorCode,
    /// 1-based column (in characters) where the problem starts.
    pub column: usize,
    /// A sentence saying what was expected.
    pub message: String,
}

impl ExprError {
    pub(crate) fn new(code: ExprErrorCode, column: usize, message: impl Into<String>) -> Self {
        Self { code, column, message: message.into() }
    }
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column {}: {}: {}", self.column, self.code.as_str(), self.message)
    }
}

impl std::error::Error for ExprError {}

/// Parse and evaluate `source` over `context` with the default limits: the value (`None` is
/// undefined), or the syntax error. Used where the caller reports errors.
pub fn evaluate(source: &str, context: &Value) -> Result<Option<Value>, ExprError> {
    let limits = Limits::default();
    let expr = parse_with(source, &limits)?;
    Ok(evaluate_expr(&expr, context, &limits)?.into_json())
}

/// Whether the guard `source` holds over `context`. Fails closed: any error is `false`; an
/// empty guard is `true`.
pub fn holds(source: &str, context: &Value) -> bool {
    let limits = Limits::default();
    parse_with(source, &limits)
        .and_then(|expr| evaluate_expr(&expr, context, &limits).map(|v| v.truthy()))
        .unwrap_or(false)
}
