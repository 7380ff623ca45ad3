//! The static subset, one expression at a time: literals become JSON, DSL helper calls become
//! the objects they stand for, type-only wrappers (`as`, `satisfies`, `!`, parentheses) are
//! looked through, and everything else is a located problem. Nothing is ever run.

use crate::codes;
use crate::dsl::{self, Helper};
use crate::position::{Positions, problem_at};
use oxc_ast::ast::{
    ArrayExpression, ArrayExpressionElement, CallExpression, Expression, ImportDeclaration, ImportDeclarationSpecifier,
    ObjectExpression, ObjectPropertyKind, PropertyKey, PropertyKind, UnaryOperator,
};
use oxc_span::{GetSpan, Span};
use polpo_core::problem::{Problem, pointer_push};
use serde_json::{Map, Number, Value};
use std::collections::HashMap;

/// Most problems reported for one file: the first ones are the ones to fix.
const MAX_PROBLEMS: usize = 50;
/// Largest magnitude a number keeps as an integer (2^53).
const EXACT_INTEGERS: f64 = 9_007_199_254_740_992.0;

/// A value, `undefined` (left out, as JavaScript leaves it out of JSON), or a failure already
/// reported.
pub type Evaluated = Result<Option<Value>, ()>;

/// The state of one file's compilation.
pub struct Eval<'s> {
    source: &'s str,
    file: &'s str,
    /// Local names of the imported helpers.
    helpers: HashMap<String, &'static Helper>,
    /// Every problem found so far.
    pub problems: Vec<Problem>,
    /// Where each value of the result was written.
    pub positions: Positions,
}

impl<'s> Eval<'s> {
    /// A compilation of `source`, shown to users as `file`.
    pub fn new(source: &'s str, file: &'s str) -> Self {
        Self { source, file, helpers: HashMap::new(), problems: Vec::new(), positions: Positions::new(source) }
    }

    /// Records a problem at `span` and fails.
    pub fn fail<T>(&mut self, code: &str, message: impl Into<String>, span: Span) -> Result<T, ()> {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(problem_at(code, message, self.file, self.source, span.start as usize));
        }
        Err(())
    }

    /// The first line of the source under `span`, shortened, for messages.
    pub fn snippet(&self, span: Span) -> String {
        let text = self.source.get(span.start as usize..span.end as usize).unwrap_or_default();
        let line = text.lines().next().unwrap_or_default();
        match line.char_indices().nth(40) {
            Some((cut, _)) => format!("{}…", &line[..cut]),
            None if line.len() < text.len() => format!("{line}…"),
            None => line.to_owned(),
        }
    }

    /// Binds the helpers an import names; refuses any other module or form of import.
    pub fn import(&mut self, import: &ImportDeclaration<'_>) {
        if import.source.value.as_str() != dsl::MODULE {
            let message = format!(
                "import from \"{}\": a loop file imports only the loop DSL, from \"{}\"",
                import.source.value.as_str(),
                dsl::MODULE
            );
            let _ = self.fail::<()>(codes::UNSUPPORTED, message, import.source.span);
            return;
        }
        if import.phase.is_some() || import.with_clause.is_some() {
            let message = "import phases and attributes are not part of the loop DSL";
            let _ = self.fail::<()>(codes::UNSUPPORTED, message, import.span);
            return;
        }
        if import.import_kind.is_type() {
            return;
        }
        for specifier in import.specifiers.iter().flatten() {
            let ImportDeclarationSpecifier::ImportSpecifier(named) = specifier else {
                let message = "import the helpers by name: `import { defineProjectLoop, agentStep } from …`";
                let _ = self.fail::<()>(codes::UNSUPPORTED, message, specifier.span());
                continue;
            };
            if named.import_kind.is_type() {
                continue;
            }
            let name = named.imported.name();
            match dsl::helper(name.as_str()) {
                Some(helper) => {
                    self.helpers.insert(named.local.name.as_str().to_owned(), helper);
                }
                None => {
                    let message = format!("`{}` is not a loop DSL helper (they are: {})", name.as_str(), dsl::names());
                    let _ = self.fail::<()>(codes::UNSUPPORTED, message, named.span);
                }
            }
        }
    }

    /// The JSON value of `expr`, placed at `pointer` of the result.
    pub fn value(&mut self, expr: &Expression<'_>, pointer: &str) -> Evaluated {
        self.positions.record(pointer, expr.span().start);
        match expr {
            Expression::StringLiteral(s) if s.lone_surrogates => {
                self.fail(codes::UNSUPPORTED, "a string with a lone UTF-16 surrogate has no JSON form", s.span)
            }
            Expression::StringLiteral(s) => Ok(Some(Value::String(s.value.as_str().to_owned()))),
            Expression::NumericLiteral(n) => self.number(n.value, n.span).map(Some),
            Expression::BooleanLiteral(b) => Ok(Some(Value::Bool(b.value))),
            Expression::NullLiteral(_) => Ok(Some(Value::Null)),
            Expression::TemplateLiteral(t) => match (t.expressions.is_empty(), t.quasis.first()) {
                (true, Some(quasi)) if !quasi.lone_surrogates => match &quasi.value.cooked {
                    Some(text) => Ok(Some(Value::String(text.as_str().to_owned()))),
                    None => self.fail(codes::SYNTAX, "invalid escape in a template literal", t.span),
                },
                _ => self.fail(
                    codes::UNSUPPORTED,
                    "a template literal with `${…}` computes a string; loop data is static: write the string out",
                    t.span,
                ),
            },
            Expression::Identifier(id) if id.name.as_str() == "undefined" => Ok(None),
            Expression::Identifier(id) => {
                let message = format!(
                    "`{}` is not bound to a static value: a loop file has no variables, only literals and the \
                     loop DSL helpers",
                    id.name.as_str()
                );
                self.fail(codes::UNSUPPORTED, message, id.span)
            }
            Expression::ArrayExpression(array) => self.array(array, pointer),
            Expression::ObjectExpression(object) => self.object(object, pointer),
            Expression::CallExpression(call) => self.call(call, pointer),
            Expression::UnaryExpression(u)
                if matches!(u.operator, UnaryOperator::UnaryNegation | UnaryOperator::UnaryPlus) =>
            {
                match &u.argument {
                    Expression::NumericLiteral(n) => {
                        let sign = if u.operator == UnaryOperator::UnaryNegation { -1.0 } else { 1.0 };
                        self.number(sign * n.value, u.span).map(Some)
                    }
                    _ => self.fail(codes::UNSUPPORTED, "`-` and `+` apply only to number literals here", u.span),
                }
            }
            Expression::ParenthesizedExpression(e) => self.value(&e.expression, pointer),
            Expression::TSAsExpression(e) => self.value(&e.expression, pointer),
            Expression::TSSatisfiesExpression(e) => self.value(&e.expression, pointer),
            Expression::TSNonNullExpression(e) => self.value(&e.expression, pointer),
            Expression::TSTypeAssertion(e) => self.value(&e.expression, pointer),
            Expression::StaticMemberExpression(_)
            | Expression::ComputedMemberExpression(_)
            | Expression::PrivateFieldExpression(_)
            | Expression::ChainExpression(_) => {
                let message = format!(
                    "`{}` reads a property at run time (process.env and globals included); a loop is static \
                     data, and secrets stay in Connections",
                    self.snippet(expr.span())
                );
                self.fail(codes::UNSUPPORTED, message, expr.span())
            }
            Expression::ImportExpression(e) => {
                self.fail(codes::UNSUPPORTED, "dynamic `import()` loads code; a loop file cannot", e.span)
            }
            other => {
                let message = format!(
                    "`{}` is not static loop data: only literals and the loop DSL helpers are",
                    self.snippet(other.span())
                );
                self.fail(codes::UNSUPPORTED, message, other.span())
            }
        }
    }

    /// A JSON number: integral values stay integers, as they would in a hand-written file.
    fn number(&mut self, value: f64, span: Span) -> Result<Value, ()> {
        if value.fract() == 0.0 && value.abs() < EXACT_INTEGERS {
            return Ok(Value::from(value as i64));
        }
        match Number::from_f64(value) {
            Some(number) => Ok(Value::Number(number)),
            None => self.fail(codes::UNSUPPORTED, "a number too large for JSON", span),
        }
    }

    fn array(&mut self, array: &ArrayExpression<'_>, pointer: &str) -> Evaluated {
        let mut items = Vec::with_capacity(array.elements.len());
        let mut failed = false;
        for element in &array.elements {
            let here = pointer_push(pointer, &items.len().to_string());
            let found = match element {
                ArrayExpressionElement::SpreadElement(s) => {
                    self.fail(codes::UNSUPPORTED, "a spread `...` copies a value computed at run time", s.span)
                }
                ArrayExpressionElement::Elision(e) => {
                    self.fail(codes::UNSUPPORTED, "a hole in an array literal has no JSON form", e.span)
                }
                item => match item.as_expression() {
                    Some(expr) => self.value(expr, &here),
                    None => self.fail(codes::UNSUPPORTED, "not an array item", item.span()),
                },
            };
            match found {
                Ok(Some(value)) => items.push(value),
                Ok(None) => {}
                Err(()) => failed = true,
            }
        }
        if failed { Err(()) } else { Ok(Some(Value::Array(items))) }
    }

    fn object(&mut self, object: &ObjectExpression<'_>, pointer: &str) -> Evaluated {
        let mut fields = Map::new();
        let mut failed = false;
        for property in &object.properties {
            let found = match property {
                ObjectPropertyKind::SpreadProperty(s) => {
                    self.fail(codes::UNSUPPORTED, "a spread `...` copies a value computed at run time", s.span)
                }
                ObjectPropertyKind::ObjectProperty(p) if p.kind != PropertyKind::Init => {
                    self.fail(codes::UNSUPPORTED, "getters and setters are code, not loop data", p.span)
                }
                ObjectPropertyKind::ObjectProperty(p) if p.method => {
                    self.fail(codes::UNSUPPORTED, "methods are code, not loop data", p.span)
                }
                ObjectPropertyKind::ObjectProperty(p) if p.shorthand => {
                    let message = "a shorthand property names a variable; write `key: value`";
                    self.fail(codes::UNSUPPORTED, message, p.span)
                }
                ObjectPropertyKind::ObjectProperty(p) if p.computed => self.fail(
                    codes::UNSUPPORTED,
                    "a computed key `[…]` is decided at run time; write the key out",
                    p.span,
                ),
                ObjectPropertyKind::ObjectProperty(p) => match self.key(&p.key) {
                    Ok(key) if fields.contains_key(&key) => {
                        self.fail(codes::DUPLICATE_KEY, format!("`{key}` appears twice in this object"), p.key.span())
                    }
                    Ok(key) => {
                        // The key is where a problem with this field is shown.
                        let here = pointer_push(pointer, &key);
                        self.positions.record(&here, p.span.start);
                        match self.value(&p.value, &here) {
                            Ok(Some(value)) => {
                                fields.insert(key, value);
                                Ok(None)
                            }
                            other => other,
                        }
                    }
                    Err(()) => Err(()),
                },
            };
            failed |= found.is_err();
        }
        if failed { Err(()) } else { Ok(Some(Value::Object(fields))) }
    }

    /// A plain key: a name, a string, or a non-negative integer.
    fn key(&mut self, key: &PropertyKey<'_>) -> Result<String, ()> {
        match key {
            PropertyKey::StaticIdentifier(id) => Ok(id.name.as_str().to_owned()),
            PropertyKey::StringLiteral(s) if !s.lone_surrogates => Ok(s.value.as_str().to_owned()),
            PropertyKey::NumericLiteral(n) if n.value.fract() == 0.0 && (0.0..EXACT_INTEGERS).contains(&n.value) => {
                Ok((n.value as u64).to_string())
            }
            other => self.fail(codes::UNSUPPORTED, "keys are names, strings or whole numbers", other.span()),
        }
    }

    fn call(&mut self, call: &CallExpression<'_>, pointer: &str) -> Evaluated {
        let helper = match &call.callee {
            Expression::Identifier(id) if !call.optional => match self.helpers.get(id.name.as_str()) {
                Some(helper) => *helper,
                None => {
                    let message = format!(
                        "`{}(…)` is not a loop DSL helper imported from \"{}\"; only those can be called ({})",
                        id.name.as_str(),
                        dsl::MODULE,
                        dsl::names()
                    );
                    return self.fail(codes::UNSUPPORTED, message, call.span);
                }
            },
            callee => {
                let message =
                    format!("`{}(…)` is not a loop DSL helper; only those can be called", self.snippet(callee.span()));
                return self.fail(codes::UNSUPPORTED, message, call.span);
            }
        };
        let mut args = Vec::with_capacity(call.arguments.len());
        let mut failed = false;
        for (index, argument) in call.arguments.iter().enumerate() {
            let here = helper.path_of(index).iter().fold(pointer.to_owned(), |p, token| pointer_push(&p, token));
            let found = match argument.as_expression() {
                Some(expr) => self.value(expr, &here),
                None => {
                    self.fail(codes::UNSUPPORTED, "a spread `...` copies a value computed at run time", argument.span())
                }
            };
            match found {
                Ok(value) => args.push(value),
                Err(()) => failed = true,
            }
        }
        if failed {
            return Err(());
        }
        match helper.apply(args) {
            Ok(value) => Ok(Some(value)),
            Err((index, message)) => {
                let span = index.and_then(|i| call.arguments.get(i)).map_or(call.span, GetSpan::span);
                self.fail(codes::INVALID_CALL, message, span)
            }
        }
    }
}
