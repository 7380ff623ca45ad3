//! Bounds checked before the parser sees a file. The parser descends recursively, so input that
//! nests without end could exhaust its stack; a loop is data, so it needs neither deep nesting
//! nor many operators. This scan skips strings, templates and comments, counts bracket depth
//! (template `${` included) and every operator or keyword token that could nest, and refuses a
//! file past either bound before it is parsed. A `/` outside a comment (a regular expression or
//! a division, both outside the static subset) is refused here too: it is the one token that
//! would make this scan guess where strings are.

use crate::codes;
use crate::position::problem_at;
use polpo_core::problem::Problem;

/// Largest `.ts` loop accepted, in bytes (the JSON of a large loop is a few kilobytes).
pub const MAX_SOURCE_BYTES: usize = 256 * 1024;
/// Deepest bracket nesting accepted: room for a JSON Schema many levels deep.
pub const MAX_NESTING: usize = 64;
/// Most operator and keyword tokens accepted in a file (`-1`, `as const`, `!` use a few).
pub const MAX_OPERATORS: usize = 64;

/// Tokens that are keywords able to nest an expression, a type or a statement.
const KEYWORDS: &[&str] = &[
    "as",
    "asserts",
    "await",
    "case",
    "catch",
    "class",
    "const",
    "declare",
    "delete",
    "do",
    "else",
    "extends",
    "for",
    "function",
    "if",
    "in",
    "infer",
    "instanceof",
    "is",
    "keyof",
    "let",
    "new",
    "readonly",
    "return",
    "satisfies",
    "switch",
    "throw",
    "try",
    "typeof",
    "unique",
    "var",
    "void",
    "while",
    "with",
    "yield",
];

/// What a closing `}` ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Bracket,
    Substitution,
    Template,
}

/// Refuses `source` when it is too large, nests too deep, has too many operators, or has a `/`
/// outside a comment.
pub fn check(source: &str, file: &str) -> Result<(), Vec<Problem>> {
    if source.len() > MAX_SOURCE_BYTES {
        let message = format!("the file has {} bytes; a loop file has at most {MAX_SOURCE_BYTES}", source.len());
        return Err(vec![Problem::new(codes::TOO_LARGE, message).in_file(file)]);
    }
    let at = |code: &str, message: String, offset: usize| vec![problem_at(code, message, file, source, offset)];
    let bytes = source.as_bytes();
    let mut stack: Vec<Open> = Vec::new();
    let mut operators = 0usize;
    let mut first_operator = 0usize;
    // The two previous significant tokens: `i` identifier, `s` string, or the punctuation byte.
    let mut previous = [b';', b';'];
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        if stack.last() == Some(&Open::Template) {
            match byte {
                b'`' => drop(stack.pop()),
                b'\\' => i += 1,
                b'$' if bytes.get(i + 1) == Some(&b'{') => {
                    stack.push(Open::Substitution);
                    i += 1;
                }
                _ => {}
            }
            i += 1;
            continue;
        }
        let mut token = byte;
        let mut counts = false;
        match byte {
            b' ' | b'\t' | b'\r' | b'\n' => {
                i += 1;
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i = source[i..].find('\n').map_or(bytes.len(), |n| i + n);
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = source[i + 2..].find("*/").map_or(bytes.len(), |n| i + 2 + n + 2);
                continue;
            }
            b'/' => {
                let message = "`/` starts a regular expression or a division, neither of which is loop data".into();
                return Err(at(codes::UNSUPPORTED, message, i));
            }
            b'\'' | b'"' => {
                let mut j = i + 1;
                while j < bytes.len() && bytes[j] != byte && bytes[j] != b'\n' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                i = j;
                token = b's';
            }
            b'`' => stack.push(Open::Template),
            b'(' | b'[' | b'{' => stack.push(Open::Bracket),
            b')' | b']' | b'}' => {
                if matches!(stack.last(), Some(Open::Bracket | Open::Substitution)) {
                    stack.pop();
                }
            }
            b':' => counts = previous[0] == b'i' && !matches!(previous[1], b'{' | b','),
            b'!' | b'~' | b'?' | b'=' | b'<' | b'>' | b'-' | b'+' | b'*' | b'&' | b'|' | b'^' | b'%' | b'@' | b'#' => {
                counts = true;
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'_' | b'$' | 0x80.. => {
                let end = bytes[i..]
                    .iter()
                    .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_' || *b == b'$' || *b >= 0x80))
                    .map_or(bytes.len(), |n| i + n);
                counts = KEYWORDS.contains(&&source[i..end]);
                i = end - 1;
                token = b'i';
            }
            _ => {}
        }
        if stack.len() > MAX_NESTING {
            return Err(at(codes::TOO_LARGE, format!("nested more than {MAX_NESTING} levels deep"), i));
        }
        if counts {
            if operators == 0 {
                first_operator = i;
            }
            operators += 1;
            if operators > MAX_OPERATORS {
                let message = format!(
                    "more than {MAX_OPERATORS} operators and keywords (the first here); a loop is static data: \
                     literals and the loop DSL helpers"
                );
                return Err(at(codes::UNSUPPORTED, message, first_operator));
            }
        }
        previous = [token, previous[0]];
        i += 1;
    }
    Ok(())
}
