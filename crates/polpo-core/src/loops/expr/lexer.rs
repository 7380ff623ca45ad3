//! Source text → tokens, each with its 1-based column.

use super::{ExprError, ExprErrorCode};

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `===`: same type and value.
    StrictEq,
    /// `!==`.
    StrictNe,
    /// `==`: null and undefined equal each other only; else identical, numerically or
    /// string-equal.
    Eq,
    /// `!=`.
    Ne,
    /// `>=`.
    Ge,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `<`.
    Lt,
}

impl CmpOp {
    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StrictEq => "===",
            Self::StrictNe => "!==",
            Self::Eq => "==",
            Self::Ne => "!=",
            Self::Ge => ">=",
            Self::Le => "<=",
            Self::Gt => ">",
            Self::Lt => "<",
        }
    }
}

/// One token of the grammar.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    Or,
    And,
    Not,
    Cmp(CmpOp),
    LParen,
    RParen,
    Number(f64),
    Str(String),
    True,
    False,
    Null,
    Path(String),
}

/// A token and the column it starts at.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub tok: Tok,
    pub column: usize,
}

/// Tokenise `source`, or the first lexical error.
pub(crate) fn lex(source: &str) -> Result<Vec<Token>, ExprError> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let column = i + 1;
        let at = |k: usize| chars.get(i + k).copied();
        let (tok, len) = match c {
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '|' if at(1) == Some('|') => (Tok::Or, 2),
            '&' if at(1) == Some('&') => (Tok::And, 2),
            '=' if at(1) == Some('=') && at(2) == Some('=') => (Tok::Cmp(CmpOp::StrictEq), 3),
            '=' if at(1) == Some('=') => (Tok::Cmp(CmpOp::Eq), 2),
            '!' if at(1) == Some('=') && at(2) == Some('=') => (Tok::Cmp(CmpOp::StrictNe), 3),
            '!' if at(1) == Some('=') => (Tok::Cmp(CmpOp::Ne), 2),
            '!' => (Tok::Not, 1),
            '>' if at(1) == Some('=') => (Tok::Cmp(CmpOp::Ge), 2),
            '>' => (Tok::Cmp(CmpOp::Gt), 1),
            '<' if at(1) == Some('=') => (Tok::Cmp(CmpOp::Le), 2),
            '<' => (Tok::Cmp(CmpOp::Lt), 1),
            '(' => (Tok::LParen, 1),
            ')' => (Tok::RParen, 1),
            '\'' | '"' => string(&chars, i)?,
            '-' if at(1).is_some_and(|d| d.is_ascii_digit()) => number(&chars, i)?,
            d if d.is_ascii_digit() => number(&chars, i)?,
            a if a.is_ascii_alphabetic() || a == '_' => {
                let len =
                    chars[i..].iter().take_while(|c| c.is_ascii_alphanumeric() || **c == '_' || **c == '.').count();
                let word: String = chars[i..i + len].iter().collect();
                let tok = match word.as_str() {
                    "true" => Tok::True,
                    "false" => Tok::False,
                    "null" => Tok::Null,
                    _ => Tok::Path(word),
                };
                (tok, len)
            }
            other => {
                let hint = match other {
                    '=' => "; compare with `==` or `===`",
                    '&' => "; `and` is `&&`",
                    '|' => "; `or` is `||`",
                    _ => "",
                };
                return Err(ExprError::new(
                    ExprErrorCode::UnexpectedCharacter,
                    column,
                    format!("unexpected character `{other}`{hint}"),
                ));
            }
        };
        out.push(Token { tok, column });
        i += len;
    }
    Ok(out)
}

/// A quoted string starting at `start`; a backslash takes the next character literally.
fn string(chars: &[char], start: usize) -> Result<(Tok, usize), ExprError> {
    let quote = chars[start];
    let mut text = String::new();
    let mut i = start + 1;
    while let Some(&c) = chars.get(i) {
        match c {
            '\\' => match chars.get(i + 1) {
                Some(&next) => {
                    text.push(next);
                    i += 2;
                }
                None => break,
            },
            c if c == quote => return Ok((Tok::Str(text), i + 1 - start)),
            c => {
                text.push(c);
                i += 1;
            }
        }
    }
    Err(ExprError::new(
        ExprErrorCode::UnterminatedString,
        start + 1,
        format!("string opened with {quote} is not closed"),
    ))
}

/// A NUMBER token: optional `-`, a digit, then digits and dots; it must be one finite number.
fn number(chars: &[char], start: usize) -> Result<(Tok, usize), ExprError> {
    let sign = usize::from(chars[start] == '-');
    let len = sign + chars[start + sign..].iter().take_while(|c| c.is_ascii_digit() || **c == '.').count();
    let text: String = chars[start..start + len].iter().collect();
    match text.parse::<f64>() {
        Ok(n) if n.is_finite() && text.matches('.').count() <= 1 => Ok((Tok::Number(n), len)),
        _ => Err(ExprError::new(ExprErrorCode::InvalidNumber, start + 1, format!("`{text}` is not a number"))),
    }
}
