//! The loop DSL of `@polpo-ai/core/loop-code`, as data: what each helper returns for its
//! arguments. `agentStep(x)` is `{type: "agent", ...x}`, `when(e, to)` is `{when: e, to}`,
//! `bash(cmd, opts)` is `{tool: "bash", input: {command: cmd}, ...opts}`, and so on; applying
//! one is building a JSON object, never running anything.

use serde_json::{Map, Value};

/// The module a loop file may import from.
pub const MODULE: &str = "@polpo-ai/core/loop-code";

/// Where a helper puts one of its arguments.
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// An object literal whose fields become the result's fields.
    Merge,
    /// A non-empty string placed at this path of the result.
    Text(&'static [&'static str]),
    /// Any value placed at this path.
    Any(&'static [&'static str]),
}

/// One parameter: its slot and whether it may be left out.
#[derive(Debug, Clone, Copy)]
struct Param {
    slot: Slot,
    required: bool,
}

const fn required(slot: Slot) -> Param {
    Param { slot, required: true }
}

const fn optional(slot: Slot) -> Param {
    Param { slot, required: false }
}

/// One DSL helper.
#[derive(Debug)]
pub struct Helper {
    /// Its exported name.
    pub name: &'static str,
    /// Fields the caller's object may replace (`defineProjectLoop`'s contract defaults).
    defaults: &'static [(&'static str, &'static str)],
    /// Fields the helper sets itself; an argument may repeat one only with the same value.
    fixed: &'static [(&'static str, &'static str)],
    params: &'static [Param],
}

const LOOP_DEFAULTS: &[(&str, &str)] = &[("version", "1"), ("kind", "graph"), ("context", "shared")];
const OBJECT: &[Param] = &[required(Slot::Merge)];

const fn step(name: &'static str, fixed: &'static [(&'static str, &'static str)]) -> Helper {
    Helper { name, defaults: &[], fixed, params: OBJECT }
}

/// Every helper of the DSL (`defineLoop` is the reference's older name of `defineProjectLoop`).
static HELPERS: &[Helper] = &[
    Helper { name: "defineProjectLoop", defaults: LOOP_DEFAULTS, fixed: &[], params: OBJECT },
    Helper { name: "defineLoop", defaults: LOOP_DEFAULTS, fixed: &[], params: OBJECT },
    step("agentStep", &[("type", "agent")]),
    step("toolStep", &[("type", "tool")]),
    step("humanStep", &[("type", "human")]),
    step("parallelStep", &[("type", "parallel")]),
    step("whileStep", &[("type", "while")]),
    step("permission", &[]),
    step("policy", &[]),
    Helper {
        name: "when",
        defaults: &[],
        fixed: &[],
        params: &[required(Slot::Text(&["when"])), required(Slot::Text(&["to"]))],
    },
    Helper { name: "otherwise", defaults: &[], fixed: &[], params: &[required(Slot::Text(&["to"]))] },
    Helper {
        name: "requireTool",
        defaults: &[],
        fixed: &[("mode", "required")],
        params: &[required(Slot::Text(&["tool"]))],
    },
    Helper {
        name: "toolAction",
        defaults: &[],
        fixed: &[],
        params: &[required(Slot::Text(&["tool"])), optional(Slot::Any(&["input"])), optional(Slot::Merge)],
    },
    Helper {
        name: "bash",
        defaults: &[],
        fixed: &[("tool", "bash")],
        params: &[required(Slot::Text(&["input", "command"])), optional(Slot::Merge)],
    },
];

/// The helper exported as `name`.
pub fn helper(name: &str) -> Option<&'static Helper> {
    HELPERS.iter().find(|h| h.name == name)
}

/// The names of every helper, for messages.
pub fn names() -> String {
    HELPERS.iter().map(|h| h.name).collect::<Vec<_>>().join(", ")
}

/// `defineProjectLoop`'s defaults on a loop object, for a default export written without it.
pub fn loop_defaults(loop_object: &mut Map<String, Value>) {
    for (key, value) in LOOP_DEFAULTS {
        loop_object.entry(*key).or_insert_with(|| Value::from(*value));
    }
}

/// Why a call cannot be applied: the sentence and which argument (`None`: the call itself).
pub type CallError = (Option<usize>, String);

impl Helper {
    /// The JSON pointer tokens under which argument `index` lands (empty: the result itself).
    pub fn path_of(&self, index: usize) -> &'static [&'static str] {
        match self.params.get(index).map(|p| p.slot) {
            Some(Slot::Text(path) | Slot::Any(path)) => path,
            Some(Slot::Merge) | None => &[],
        }
    }

    /// The helper's result for `args` (`None`: the argument was `undefined`).
    pub fn apply(&self, args: Vec<Option<Value>>) -> Result<Value, CallError> {
        if args.len() > self.params.len() {
            let most = self.params.len();
            return Err((Some(most), format!("`{}` takes at most {most} argument(s), got {}", self.name, args.len())));
        }
        let mut out = Map::new();
        for (key, value) in self.defaults.iter().chain(self.fixed) {
            out.insert((*key).to_owned(), Value::from(*value));
        }
        let mut args = args.into_iter();
        for (index, param) in self.params.iter().enumerate() {
            let Some(value) = args.next().flatten() else {
                if param.required {
                    return Err((None, format!("`{}` needs argument {} ({})", self.name, index + 1, param.describe())));
                }
                continue;
            };
            let bad = |what: &str| (Some(index), format!("argument {} of `{}` must be {what}", index + 1, self.name));
            match (param.slot, value) {
                (Slot::Text(_), Value::String(text)) if text.trim().is_empty() => {
                    return Err(bad("a non-empty string"));
                }
                (Slot::Text(path), text @ Value::String(_)) => self.set(&mut out, path, text, index)?,
                (Slot::Text(_), _) => return Err(bad("a string literal")),
                (Slot::Any(path), value) => self.set(&mut out, path, value, index)?,
                (Slot::Merge, Value::Object(fields)) => {
                    for (key, value) in fields {
                        self.set(&mut out, &[key.as_str()], value, index)?;
                    }
                }
                (Slot::Merge, _) => return Err(bad("an object literal")),
            }
        }
        Ok(Value::Object(out))
    }

    /// Puts `value` at `path` of `out`. A field the helper or an earlier argument already set
    /// may be written again only with the same value; a default may be replaced.
    fn set(&self, out: &mut Map<String, Value>, path: &[&str], value: Value, index: usize) -> Result<(), CallError> {
        let Some((last, parents)) = path.split_last() else {
            return Ok(());
        };
        let mut here = out;
        for key in parents {
            let entry = here.entry(*key).or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(inner) = entry else {
                return Err((Some(index), format!("`{}` sets `{key}` itself", self.name)));
            };
            here = inner;
        }
        let replaceable = parents.is_empty() && self.defaults.iter().any(|(k, _)| k == last);
        match here.get(*last) {
            Some(existing) if !replaceable && *existing != value => Err((
                Some(index),
                format!("`{}` sets `{last}` to {existing} itself; this argument cannot change it", self.name),
            )),
            _ => {
                here.insert((*last).to_owned(), value);
                Ok(())
            }
        }
    }
}

impl Param {
    fn describe(&self) -> &'static str {
        match self.slot {
            Slot::Merge => "an object literal",
            Slot::Text(_) => "a string literal",
            Slot::Any(_) => "a value",
        }
    }
}
