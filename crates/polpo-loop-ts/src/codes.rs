//! Stable problem codes of `.ts` loop files. Scripts and tests match on these strings, so they
//! never change once published.

/// The file is larger, or nested deeper, than a loop has reason to be.
pub const TOO_LARGE: &str = "loop_ts_too_large";
/// The file is not valid TypeScript (carries the parser's line and column).
pub const SYNTAX: &str = "loop_ts_syntax";
/// A construct outside the static subset: a call of something other than a DSL helper, an
/// import from another module, an identifier bound to nothing static, an operator, a template
/// with `${}`, a spread, a computed key, a getter or method, any other statement.
pub const UNSUPPORTED: &str = "loop_ts_unsupported";
/// A DSL helper called with the wrong number or kind of arguments, or an argument that sets a
/// field the helper sets itself.
pub const INVALID_CALL: &str = "loop_ts_invalid_call";
/// The same key twice in one object literal (JavaScript would keep the last one silently).
pub const DUPLICATE_KEY: &str = "loop_ts_duplicate_key";
/// No `export default`, or one that is not a loop object.
pub const MISSING_EXPORT: &str = "loop_ts_missing_export";
/// Both `loops/<id>.json` and `loops/<id>.ts` exist: the loop has two sources.
pub const SOURCE_CONFLICT: &str = "loop_source_conflict";
