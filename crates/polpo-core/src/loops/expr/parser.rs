//! Tokens → [`Expr`], by recursive descent; and [`Expr`] → canonical source (`Display`), so
//! that parsing what was printed gives the same tree.

use super::lexer::{CmpOp, Tok, Token, lex};
use super::{ExprError, ExprErrorCode, Limits};
use std::fmt;

/// A literal value.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A finite number.
    Number(f64),
    /// A quoted string (escapes resolved).
    String(String),
}

/// A parsed expression. `Or` and `And` hold two or more operands, so a long chain is flat
/// rather than deep.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A literal.
    Literal(Literal),
    /// A dotted path into the context.
    Path(String),
    /// `!x`.
    Not(Box<Expr>),
    /// `a && b && …`.
    And(Vec<Expr>),
    /// `a || b || …`.
    Or(Vec<Expr>),
    /// `a op b`.
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
}

/// Parse with the default [`Limits`]. An empty (or all-blank) source is `true`.
pub fn parse(source: &str) -> Result<Expr, ExprError> {
    parse_with(source, &Limits::default())
}

/// Parse with explicit limits.
pub fn parse_with(source: &str, limits: &Limits) -> Result<Expr, ExprError> {
    if source.len() > limits.max_bytes {
        return Err(ExprError::new(
            ExprErrorCode::TooLong,
            1,
            format!("expressions are limited to {} bytes", limits.max_bytes),
        ));
    }
    let tokens = lex(source)?;
    if tokens.is_empty() {
        return Ok(Expr::Literal(Literal::Bool(true)));
    }
    let mut parser = Parser { tokens, pos: 0, end: source.chars().count() + 1, depth: 0, max_depth: limits.max_depth };
    let expr = parser.or()?;
    match parser.tokens.get(parser.pos) {
        None => Ok(expr),
        Some(t) => Err(parser.unexpected(t, "`&&`, `||` or the end")),
    }
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    /// Column just past the source, for "ended early" errors.
    end: usize,
    depth: usize,
    max_depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos).map(|t| &t.tok)
    }

    fn unexpected(&self, token: &Token, expected: &str) -> ExprError {
        ExprError::new(
            ExprErrorCode::UnexpectedToken,
            token.column,
            format!("expected {expected}, found {}", describe(&token.tok)),
        )
    }

    fn or(&mut self) -> Result<Expr, ExprError> {
        let mut items = vec![self.and()?];
        while self.peek() == Some(&Tok::Or) {
            self.pos += 1;
            items.push(self.and()?);
        }
        Ok(if items.len() == 1 { items.remove(0) } else { Expr::Or(items) })
    }

    fn and(&mut self) -> Result<Expr, ExprError> {
        let mut items = vec![self.cmp()?];
        while self.peek() == Some(&Tok::And) {
            self.pos += 1;
            items.push(self.cmp()?);
        }
        Ok(if items.len() == 1 { items.remove(0) } else { Expr::And(items) })
    }

    fn cmp(&mut self) -> Result<Expr, ExprError> {
        let left = self.unary()?;
        let Some(&Tok::Cmp(op)) = self.peek() else {
            return Ok(left);
        };
        self.pos += 1;
        let right = self.unary()?;
        if let Some(t) = self.tokens.get(self.pos)
            && matches!(t.tok, Tok::Cmp(_))
        {
            return Err(ExprError::new(
                ExprErrorCode::ChainedComparison,
                t.column,
                "comparisons do not chain; combine them with `&&` or parentheses",
            ));
        }
        Ok(Expr::Cmp(op, Box::new(left), Box::new(right)))
    }

    /// Enter one level of `!` or `(`, refusing past the depth limit.
    fn nest(&mut self, column: usize) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return Err(ExprError::new(
                ExprErrorCode::TooDeep,
                column,
                format!("expressions nest at most {} levels deep", self.max_depth),
            ));
        }
        Ok(())
    }

    fn unary(&mut self) -> Result<Expr, ExprError> {
        let Some(token) = self.tokens.get(self.pos).cloned() else {
            return Err(ExprError::new(
                ExprErrorCode::UnexpectedEnd,
                self.end,
                "the expression ends where a value is expected",
            ));
        };
        self.pos += 1;
        let expr = match token.tok {
            Tok::Not => {
                self.nest(token.column)?;
                let inner = self.unary()?;
                self.depth -= 1;
                Expr::Not(Box::new(inner))
            }
            Tok::LParen => {
                self.nest(token.column)?;
                let inner = self.or()?;
                match self.tokens.get(self.pos) {
                    Some(t) if t.tok == Tok::RParen => self.pos += 1,
                    Some(t) => return Err(self.unexpected(t, "`)`")),
                    None => return Err(ExprError::new(ExprErrorCode::UnexpectedEnd, self.end, "`(` is not closed")),
                }
                self.depth -= 1;
                inner
            }
            Tok::Number(n) => Expr::Literal(Literal::Number(n)),
            Tok::Str(s) => Expr::Literal(Literal::String(s)),
            Tok::True => Expr::Literal(Literal::Bool(true)),
            Tok::False => Expr::Literal(Literal::Bool(false)),
            Tok::Null => Expr::Literal(Literal::Null),
            Tok::Path(p) => Expr::Path(p),
            _ => return Err(self.unexpected(&token, "a value, a path, `!` or `(`")),
        };
        Ok(expr)
    }
}

fn describe(tok: &Tok) -> String {
    match tok {
        Tok::Or => "`||`".into(),
        Tok::And => "`&&`".into(),
        Tok::Not => "`!`".into(),
        Tok::Cmp(op) => format!("`{}`", op.as_str()),
        Tok::LParen => "`(`".into(),
        Tok::RParen => "`)`".into(),
        Tok::Number(n) => format!("the number {n}"),
        Tok::Str(_) => "a string".into(),
        Tok::True | Tok::False => "a boolean".into(),
        Tok::Null => "`null`".into(),
        Tok::Path(p) => format!("the path `{p}`"),
    }
}

/// Binding strength, loosest first; a child looser than its slot is parenthesised.
fn precedence(expr: &Expr) -> u8 {
    match expr {
        Expr::Or(_) => 1,
        Expr::And(_) => 2,
        Expr::Cmp(..) => 3,
        Expr::Not(_) | Expr::Literal(_) | Expr::Path(_) => 4,
    }
}

fn write_at(f: &mut fmt::Formatter<'_>, expr: &Expr, min: u8) -> fmt::Result {
    if precedence(expr) < min {
        write!(f, "(")?;
        write_at(f, expr, 0)?;
        return write!(f, ")");
    }
    match expr {
        Expr::Literal(Literal::Null) => write!(f, "null"),
        Expr::Literal(Literal::Bool(b)) => write!(f, "{b}"),
        Expr::Literal(Literal::Number(n)) => write!(f, "{n}"),
        Expr::Literal(Literal::String(s)) => {
            write!(f, "'")?;
            for c in s.chars() {
                if c == '\'' || c == '\\' {
                    write!(f, "\\")?;
                }
                write!(f, "{c}")?;
            }
            write!(f, "'")
        }
        Expr::Path(p) => write!(f, "{p}"),
        Expr::Not(inner) => {
            write!(f, "!")?;
            write_at(f, inner, 4)
        }
        Expr::Or(items) | Expr::And(items) => {
            let (op, level) = if matches!(expr, Expr::Or(_)) { ("||", 1) } else { ("&&", 2) };
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    write!(f, " {op} ")?;
                }
                // An operand of the same operator is a group the author wrote: keep it one.
                write_at(f, item, level + 1)?;
            }
            Ok(())
        }
        Expr::Cmp(op, left, right) => {
            write_at(f, left, 4)?;
            write!(f, " {} ", op.as_str())?;
            write_at(f, right, 4)
        }
    }
}

impl fmt::Display for Expr {
    /// Canonical source: minimal parentheses, single-quoted strings.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_at(f, self, 0)
    }
}
