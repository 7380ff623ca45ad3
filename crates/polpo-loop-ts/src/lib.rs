//! Static TypeScript loops: `.polpo/loops/<name>.ts` written with the loop DSL of
//! `@polpo-ai/core/loop-code`, compiled to the same canonical JSON as a hand-written
//! `loops/<name>.json`, without executing any code.
//!
//! A loop file is parsed with a real TypeScript parser (oxc) and then read as data: object,
//! array, string, number, boolean and `null` literals, calls of the DSL helpers imported from
//! `@polpo-ai/core/loop-code` (each one a fixed JSON shape, see [`dsl`]), type-only wrappers
//! (`as`, `satisfies`, `!`), and one `export default`. Anything else — another call, another
//! import, `import()`, `process.env`, a template with `${}`, a getter or method, a spread, a
//! computed key, a name bound to nothing static, any other statement — is a problem with the
//! file, line, column and a stable code ([`codes`]). The input is bounded before parsing
//! ([`limits`]) and parsed on a thread with a stack of its own, so no file can exhaust the
//! caller's stack.

pub mod codes;
pub mod dsl;
mod eval;
pub mod limits;
mod position;

pub use position::{Positions, line_column};

use eval::Eval;
use oxc_allocator::Allocator;
use oxc_ast::ast::Statement;
use oxc_parser::Parser;
use oxc_span::{GetSpan, SourceType};
use polpo_core::config::Location;
use polpo_core::loops::{LoopConfig, parse_loop};
use polpo_core::problem::Problem;
use serde_json::Value;

/// Stack of the parsing thread: far above what the bounded nesting of [`limits`] needs.
const PARSER_STACK_BYTES: usize = 16 * 1024 * 1024;
/// Most syntax errors reported for one file.
const MAX_SYNTAX_ERRORS: usize = 20;

/// A compiled `.ts` loop: its canonical JSON and where each part of it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Compiled {
    /// The loop as a `.json` file would hold it.
    pub value: Value,
    /// Source positions by JSON pointer, to locate problems found in `value`.
    pub positions: Positions,
}

impl Compiled {
    /// The typed loop, or its shape problems located at `at` with their lines and columns.
    pub fn config(&self, at: &Location) -> Result<LoopConfig, Vec<Problem>> {
        parse_loop(&self.value, at).map_err(|problems| problems.into_iter().map(|p| self.positions.locate(p)).collect())
    }
}

/// Compiles the loop source `source` (shown to users as `file`) to its canonical JSON, or
/// every problem found, each located by line and column.
pub fn compile(source: &str, file: &str) -> Result<Compiled, Vec<Problem>> {
    limits::check(source, file)?;
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("polpo-loop-ts".into())
            .stack_size(PARSER_STACK_BYTES)
            .spawn_scoped(scope, || compile_here(source, file));
        match worker {
            Ok(handle) => handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(e) => Err(vec![
                Problem::new(polpo_core::config::codes::UNREADABLE_FILE, format!("cannot start the parser: {e}"))
                    .in_file(file),
            ]),
        }
    })
}

fn compile_here(source: &str, file: &str) -> Result<Compiled, Vec<Problem>> {
    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, source, SourceType::ts().with_module(true)).parse();
    if parsed.panicked || parsed.diagnostics.has_errors() {
        let problems = parsed.diagnostics.errors().take(MAX_SYNTAX_ERRORS).map(|error| {
            let offset = error.labels.first().map_or(0, |label| label.offset() as usize);
            position::problem_at(codes::SYNTAX, error.message.to_string(), file, source, offset)
        });
        let mut problems: Vec<Problem> = problems.collect();
        if problems.is_empty() {
            problems.push(Problem::new(codes::SYNTAX, "the parser gave up on this file").in_file(file));
        }
        return Err(problems);
    }
    let mut eval = Eval::new(source, file);
    // Imports first, as JavaScript hoists them; every other statement is refused.
    for statement in &parsed.program.body {
        if let Statement::ImportDeclaration(import) = statement {
            eval.import(import);
        }
    }
    let mut export = None;
    for statement in &parsed.program.body {
        match statement {
            Statement::ImportDeclaration(_) => {}
            Statement::ExportDefaultDeclaration(default) => match default.declaration.as_expression() {
                Some(expr) => export = Some(expr),
                None => {
                    let message = "the default export must be a loop object: `export default defineProjectLoop({…})`";
                    let _ = eval.fail::<()>(codes::MISSING_EXPORT, message, default.span);
                }
            },
            other => {
                let message = format!(
                    "`{}`: a loop file holds only imports from \"{}\" and one `export default`",
                    eval.snippet(other.span()),
                    dsl::MODULE
                );
                let _ = eval.fail::<()>(codes::UNSUPPORTED, message, other.span());
            }
        }
    }
    let value = match export {
        Some(expr) => eval.value(expr, ""),
        None if eval.problems.is_empty() => {
            let message = "no `export default`: a loop file ends with `export default defineProjectLoop({…})`";
            let end = oxc_span::Span::new(0, 0);
            eval.fail(codes::MISSING_EXPORT, message, end)
        }
        None => Err(()),
    };
    match value {
        Ok(Some(Value::Object(mut fields))) if eval.problems.is_empty() => {
            dsl::loop_defaults(&mut fields);
            Ok(Compiled { value: Value::Object(fields), positions: eval.positions })
        }
        Ok(_) if eval.problems.is_empty() => {
            let span = export.map_or(oxc_span::Span::new(0, 0), GetSpan::span);
            let _ = eval.fail::<()>(codes::MISSING_EXPORT, "the default export must be a loop object", span);
            Err(eval.problems)
        }
        _ => Err(eval.problems),
    }
}
