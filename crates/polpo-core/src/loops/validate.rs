//! The rules a loop must satisfy before anything runs it, each problem with its pointer.
//!
//! [`validate_loop`] checks one loop from its own data: step references, reachability,
//! groups, expressions (with the column), `$context` bindings, `while` bounds and its own tool
//! narrowing. [`validate_loops`] adds what needs the project: agents' `assignedLoops`, the
//! tool ceilings of the agents a loop is assigned to, and step models. Tool names are checked
//! against a registry by [`unknown_loop_tools`], since the registry is not data `polpo-core`
//! has.

use super::codes;
use super::config::{
    AgentStep, END, Effect, Join, LifecycleHook, Loop, LoopConfig, Names, Next, Step, StepBody, ToolChoice,
    ToolChoiceMode,
};
use super::expr;
use crate::config::codes::{INVALID_REFERENCE, INVALID_VALUE};
use crate::config::project::Project;
use crate::model::{ModelProfiles, resolve_model_chain};
use crate::policy::pattern_matches;
use crate::problem::{Problem, pointer_push};
use serde_json::Value;
use std::collections::{BTreeSet, VecDeque};

/// Step ids that cannot be used: `end` is the terminator, `request` the read-only context root.
const RESERVED_STEP_IDS: &[&str] = &[END, "request"];
/// The context root no step may write.
const PROTECTED_ROOT: &str = "request";
/// The one key of a context binding.
const BINDING_KEY: &str = "$context";

/// Every problem of one loop on its own, with pointers from the root of its file.
pub fn validate_loop(id: &str, config: &LoopConfig) -> Vec<Problem> {
    let mut out = Vec::new();
    if let Some(name) = config.name.as_deref()
        && name != id
    {
        out.push(
            Problem::new(
                INVALID_VALUE,
                format!("`name` is `{name}` but the file makes the loop `{id}`; they must match"),
            )
            .at("/name"),
        );
    }
    let exists = |target: &str| config.steps.contains_key(target);
    if !exists(&config.start) {
        out.push(
            Problem::new(codes::UNKNOWN_STEP, format!("`start` names step `{}`, which does not exist", config.start))
                .at("/start"),
        );
    }
    for (step_id, step) in &config.steps {
        check_step(config, step_id, step, &mut out);
    }
    for used in tool_uses(config).iter().filter(|u| u.in_step) {
        check_within(config.allowed_tools.as_deref(), used.name, &used.pointer, "the loop's `allowedTools`", &mut out);
    }
    if exists(&config.start) {
        for step_id in unreachable(config) {
            out.push(
                Problem::new(
                    codes::UNREACHABLE_STEP,
                    format!("step `{step_id}` cannot be reached from `start` (`{}`)", config.start),
                )
                .at(pointer_push("/steps", step_id)),
            );
        }
    }
    check_governance(config, &mut out);
    out
}

/// The rules of one step: its id, group, guards, references and its type's own fields.
fn check_step(config: &LoopConfig, step_id: &str, step: &Step, out: &mut Vec<Problem>) {
    let exists = |target: &str| config.steps.contains_key(target);
    let at = |suffix: &str| format!("{}{suffix}", pointer_push("/steps", step_id));
    if RESERVED_STEP_IDS.contains(&step_id) {
        out.push(Problem::new(codes::RESERVED_STEP_ID, format!("`{step_id}` cannot be a step id: `end` ends the loop and `request` is the read-only request in the context")).at(at("")));
    }
    if let Some(group) = step.group.as_deref()
        && !config.groups.as_ref().is_some_and(|g| g.contains_key(group))
    {
        out.push(
            Problem::new(codes::UNKNOWN_GROUP, format!("`group` names `{group}`, which is not declared in `groups`"))
                .at(at("/group")),
        );
    }
    check_expression(step.when.as_deref(), &at("/when"), out);
    for edge in edges(step_id, &step.body, step.next.as_ref()) {
        let ends = edge.may_end && edge.target == END;
        if !ends && !exists(edge.target) {
            out.push(
                Problem::new(codes::UNKNOWN_STEP, format!("`{}` is not a step of this loop", edge.target))
                    .at(edge.pointer),
            );
        }
    }
    if let Some(Next::Branch(transitions)) = &step.next {
        if transitions.is_empty() {
            out.push(
                Problem::new(INVALID_VALUE, "`next` needs at least one transition; use \"end\" to stop")
                    .at(at("/next")),
            );
        }
        for (i, t) in transitions.iter().enumerate() {
            check_expression(t.when.as_deref(), &at(&format!("/next/{i}/when")), out);
        }
    }
    match &step.body {
        StepBody::Agent(agent) => check_agent_step(agent, &at(""), out),
        StepBody::Tool(tool) => {
            check_bindings(tool.input.as_ref(), &at("/input"), out);
            check_save_as(tool.save_as.as_deref(), &at("/saveAs"), out);
        }
        StepBody::Human(_) => {}
        StepBody::Parallel(parallel) => {
            let asking: Vec<&str> = parallel
                .branches
                .iter()
                .filter_map(|b| reachable(config, b).into_iter().find(|s| is_human(config, s)))
                .collect();
            if asking.len() > 1 {
                out.push(
                    Problem::new(
                        codes::PARALLEL_HUMAN_STEPS,
                        format!(
                            "branches of this parallel step reach human steps ({}): a run waits for one person at a time; ask before or after the parallel step",
                            asking.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
                        ),
                    )
                    .at(at("/branches")),
                );
            }
            if parallel.branches.is_empty() {
                out.push(Problem::new(INVALID_VALUE, "a parallel step needs at least one branch").at(at("/branches")));
            }
            if let Some(Join::Count(n)) = parallel.join
                && n as usize > parallel.branches.len()
            {
                out.push(
                    Problem::new(
                        INVALID_VALUE,
                        format!("`join` waits for {n} branches but the step has {}", parallel.branches.len()),
                    )
                    .at(at("/join")),
                );
            }
        }
        StepBody::While(w) => {
            match (&w.condition, &w.until) {
                (None, None) => out.push(
                    Problem::new(
                        codes::UNBOUNDED_WHILE,
                        "a while step needs `condition` or `until`; `maxIterations` alone does not say when it is done",
                    )
                    .at(at("")),
                ),
                (Some(_), Some(_)) => {
                    out.push(Problem::new(INVALID_VALUE, "give `condition` or `until`, not both").at(at("/until")))
                }
                _ => {}
            }
            check_expression(w.condition.as_deref(), &at("/condition"), out);
            check_expression(w.until.as_deref(), &at("/until"), out);
        }
    }
}

fn check_agent_step(agent: &AgentStep, at: &str, out: &mut Vec<Problem>) {
    if agent.allowed_tools.is_some() && agent.tools.is_some() {
        out.push(
            Problem::new(INVALID_VALUE, "`tools` is the deprecated name of `allowedTools`; keep only `allowedTools`")
                .at(format!("{at}/tools")),
        );
    }
    if let Some(ToolChoice::Forced(forced)) = &agent.tool_choice
        && let Some(tool) = forced.tool.as_deref()
    {
        check_within(agent.allowed_tools(), tool, &format!("{at}/toolChoice/tool"), "the step's `allowedTools`", out);
        if forced.mode != ToolChoiceMode::Required {
            out.push(
                Problem::new(
                    INVALID_VALUE,
                    format!("`toolChoice.tool` forces `{tool}`, which needs `mode` `required`"),
                )
                .at(format!("{at}/toolChoice/mode")),
            );
        }
    }
    check_expression(
        agent.stop_when.as_ref().map(|s| s.expression.as_str()),
        &format!("{at}/stopWhen/expression"),
        out,
    );
    check_bindings(agent.input.as_ref(), &format!("{at}/input"), out);
}

/// A `tool_outside_ceiling` problem when a ceiling is configured and admits no `name`.
/// Wildcard names only narrow further and are not checked.
fn check_within(ceiling: Option<&[String]>, name: &str, pointer: &str, what: &str, out: &mut Vec<Problem>) {
    if let Some(ceiling) = ceiling
        && !name.contains('*')
        && !ceiling.iter().any(|p| pattern_matches(p, name))
    {
        out.push(
            Problem::new(codes::TOOL_OUTSIDE_CEILING, format!("`{name}` is outside {what}, so it could never be used"))
                .at(pointer),
        );
    }
}

/// One step a step leads to.
struct Edge<'a> {
    /// Where the reference is written.
    pointer: String,
    /// The step it names.
    target: &'a str,
    /// Whether `"end"` is allowed there (`next` and transitions, not branches or bodies).
    may_end: bool,
}

/// Every step a step leads to: `next`, transitions, parallel branches, a while body.
fn edges<'a>(step_id: &str, body: &'a StepBody, next: Option<&'a Next>) -> Vec<Edge<'a>> {
    let at = |suffix: String| format!("{}{suffix}", pointer_push("/steps", step_id));
    let edge = |pointer: String, target: &'a String, may_end: bool| Edge { pointer, target, may_end };
    let mut out = Vec::new();
    match next {
        Some(Next::To(target)) => out.push(edge(at("/next".into()), target, true)),
        Some(Next::Branch(transitions)) => {
            out.extend(transitions.iter().enumerate().map(|(i, t)| edge(at(format!("/next/{i}/to")), &t.to, true)));
        }
        None => {}
    }
    match body {
        StepBody::Parallel(p) => {
            out.extend(p.branches.iter().enumerate().map(|(i, b)| edge(at(format!("/branches/{i}")), b, false)));
        }
        StepBody::While(w) => {
            out.extend(named(&w.body, at("/body".into())).into_iter().map(|(p, b)| edge(p, b, false)))
        }
        _ => {}
    }
    out
}

/// Steps no path from `start` reaches, in id order.
fn unreachable(config: &LoopConfig) -> Vec<&str> {
    let seen = reachable(config, &config.start);
    config.steps.keys().map(String::as_str).filter(|id| !seen.contains(id)).collect()
}

/// The steps some path from `from` (included) reaches, in id order.
fn reachable<'a>(config: &'a LoopConfig, from: &'a str) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::from([from]);
    let mut queue = VecDeque::from([from]);
    while let Some(id) = queue.pop_front() {
        let Some(step) = config.steps.get(id) else { continue };
        for edge in edges(id, &step.body, step.next.as_ref()) {
            if config.steps.contains_key(edge.target) && seen.insert(edge.target) {
                queue.push_back(edge.target);
            }
        }
    }
    seen
}

/// Whether `id` is a human step.
fn is_human(config: &LoopConfig, id: &str) -> bool {
    config.steps.get(id).is_some_and(|s| matches!(s.body, StepBody::Human(_)))
}

/// An `invalid_expression` problem, with the column, when a guard does not parse.
fn check_expression(source: Option<&str>, pointer: &str, out: &mut Vec<Problem>) {
    if let Some(source) = source
        && let Err(e) = expr::parse(source)
    {
        out.push(
            Problem::new(
                codes::INVALID_EXPRESSION,
                format!("`{source}` at column {}: {} ({})", e.column, e.message, e.code.as_str()),
            )
            .at(pointer),
        );
    }
}

/// Every malformed `{"$context": path}` marker inside a step's input.
fn check_bindings(value: Option<&Value>, pointer: &str, out: &mut Vec<Problem>) {
    match value {
        Some(Value::Object(map)) if map.contains_key(BINDING_KEY) => {
            let path = map.get(BINDING_KEY).and_then(Value::as_str);
            if map.len() != 1 || !path.is_some_and(is_context_path) {
                out.push(Problem::new(codes::INVALID_BINDING, "a binding is exactly {\"$context\": \"a.b.c\"}: one key, a dotted path of letters, digits and `_`").at(pointer));
            }
        }
        Some(Value::Object(map)) => {
            for (k, v) in map {
                check_bindings(Some(v), &pointer_push(pointer, k), out);
            }
        }
        Some(Value::Array(items)) => {
            for (i, v) in items.iter().enumerate() {
                check_bindings(Some(v), &format!("{pointer}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// A dotted path as guards and bindings read it: non-empty segments of `[A-Za-z0-9_]`,
/// starting with a letter or `_`.
fn is_context_path(path: &str) -> bool {
    path.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && path.split('.').all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

fn check_save_as(save_as: Option<&str>, pointer: &str, out: &mut Vec<Problem>) {
    let Some(path) = save_as else { return };
    if !is_context_path(path) {
        out.push(Problem::new(INVALID_VALUE, format!("`saveAs` `{path}` is not a dotted context path")).at(pointer));
    } else if path.split('.').next() == Some(PROTECTED_ROOT) {
        out.push(
            Problem::new(
                INVALID_VALUE,
                format!("`saveAs` `{path}` writes under `{PROTECTED_ROOT}`, which is read-only"),
            )
            .at(pointer),
        );
    }
}

fn check_governance(config: &LoopConfig, out: &mut Vec<Problem>) {
    for (point, actions) in config.hooks.iter().flatten() {
        for (i, action) in actions.iter().enumerate() {
            let at = format!("{}/{i}", pointer_push("/hooks", point));
            check_expression(action.when.as_deref(), &format!("{at}/when"), out);
            check_bindings(action.input.as_ref(), &format!("{at}/input"), out);
            check_save_as(action.save_as.as_deref(), &format!("{at}/saveAs"), out);
        }
    }
    for (i, permission) in config.permissions.iter().flatten().enumerate() {
        check_expression(permission.when.as_deref(), &format!("/permissions/{i}/when"), out);
        check_timeout(permission.timeout.as_deref(), permission.effect, &format!("/permissions/{i}"), out);
        let Some(matches) = &permission.matches else { continue };
        for (pointer, step) in matches.step.iter().flat_map(|s| named(s, format!("/permissions/{i}/match/step"))) {
            if !config.steps.contains_key(step) {
                out.push(
                    Problem::new(
                        codes::UNKNOWN_STEP,
                        format!("`match.step` names `{step}`, which is not a step of this loop"),
                    )
                    .at(pointer),
                );
            }
        }
        for (pointer, hook) in matches.hook.iter().flat_map(|h| named(h, format!("/permissions/{i}/match/hook"))) {
            if !LifecycleHook::NAMES.contains(&hook.as_str()) {
                out.push(
                    Problem::new(
                        INVALID_VALUE,
                        format!(
                            "`{hook}` is not a lifecycle point; expected one of {}",
                            LifecycleHook::NAMES.join(", ")
                        ),
                    )
                    .at(pointer),
                );
            }
        }
    }
    for (i, policy) in config.policies.iter().flatten().enumerate() {
        check_expression(Some(&policy.when), &format!("/policies/{i}/when"), out);
        check_timeout(policy.timeout.as_deref(), policy.effect, &format!("/policies/{i}"), out);
    }
}

/// A rule's `timeout`: an ISO-8601 duration, and only on an `approval` rule (nothing else waits).
fn check_timeout(timeout: Option<&str>, effect: Effect, rule: &str, out: &mut Vec<Problem>) {
    let Some(timeout) = timeout else { return };
    if let Err(e) = crate::tasks::parse_duration(timeout) {
        out.push(Problem::new(e.code(), e.to_string()).at(format!("{rule}/timeout")));
    } else if effect != Effect::Approval {
        out.push(
            Problem::new(INVALID_VALUE, "`timeout` applies only to a rule with `effect: \"approval\"`")
                .at(format!("{rule}/timeout")),
        );
    }
}

/// Each name with its pointer: `base` for one name, `base/<i>` in a list.
fn named(names: &Names, base: String) -> Vec<(String, &String)> {
    match names {
        Names::One(name) => vec![(base, name)],
        Names::Many(list) => list.iter().enumerate().map(|(i, name)| (format!("{base}/{i}"), name)).collect(),
    }
}

/// Where a tool name appears in a loop and what it does there.
struct ToolUse<'a> {
    pointer: String,
    name: &'a str,
    /// In a step (so an assigned agent's ceiling applies), rather than the loop's own
    /// `allowedTools` or a hook action.
    in_step: bool,
}

fn tool_uses(config: &LoopConfig) -> Vec<ToolUse<'_>> {
    let mut out = Vec::new();
    for (i, name) in config.allowed_tools.iter().flatten().enumerate() {
        out.push(ToolUse { pointer: format!("/allowedTools/{i}"), name, in_step: false });
    }
    for (id, step) in &config.steps {
        let at = pointer_push("/steps", id);
        match &step.body {
            StepBody::Agent(agent) => {
                let field = if agent.allowed_tools.is_some() { "allowedTools" } else { "tools" };
                for (i, name) in agent.allowed_tools().into_iter().flatten().enumerate() {
                    out.push(ToolUse { pointer: format!("{at}/{field}/{i}"), name, in_step: true });
                }
                if let Some(ToolChoice::Forced(forced)) = &agent.tool_choice
                    && let Some(name) = forced.tool.as_deref()
                {
                    out.push(ToolUse { pointer: format!("{at}/toolChoice/tool"), name, in_step: true });
                }
            }
            StepBody::Tool(tool) => {
                out.push(ToolUse { pointer: format!("{at}/tool"), name: &tool.tool, in_step: true })
            }
            _ => {}
        }
    }
    for (i, permission) in config.permissions.iter().flatten().enumerate() {
        let tools = permission.matches.as_ref().and_then(|m| m.tool.as_ref());
        for (pointer, name) in tools.iter().flat_map(|t| named(t, format!("/permissions/{i}/match/tool"))) {
            out.push(ToolUse { pointer, name, in_step: false });
        }
    }
    for (point, actions) in config.hooks.iter().flatten() {
        for (i, action) in actions.iter().enumerate() {
            out.push(ToolUse {
                pointer: format!("{}/{i}/tool", pointer_push("/hooks", point)),
                name: &action.tool,
                in_step: false,
            });
        }
    }
    out
}

/// Cross-file rules: every `assignedLoops` entry names a loop; every loop passes
/// [`validate_loop`]; step models resolve; tools named in a loop's steps are within the
/// `allowedTools` of every agent the loop is assigned to.
pub fn validate_loops(project: &Project) -> Vec<Problem> {
    let mut out = Vec::new();
    for agent in project.agents.values() {
        for (i, name) in agent.config.assigned_loops.iter().flatten().enumerate() {
            if !project.loops.contains_key(name) {
                out.push(agent.source.problem(
                    INVALID_REFERENCE,
                    format!("`assignedLoops` names loop `{name}`, which does not exist in .polpo/loops/"),
                    &format!("/assignedLoops/{i}"),
                ));
            }
        }
    }
    let no_profiles = ModelProfiles::new();
    let profiles = project.settings().model_profiles.as_ref().unwrap_or(&no_profiles);
    for lp in project.loops.values() {
        out.extend(validate_loop(&lp.id, &lp.config).into_iter().map(|p| lp.source.locate(p)));
        for (id, step) in &lp.config.steps {
            if let StepBody::Agent(AgentStep { model: Some(model), .. }) = &step.body
                && let Err(e) = resolve_model_chain(model, profiles, None)
            {
                out.push(lp.source.locate(e.to_problem().at(format!("{}/model", pointer_push("/steps", id)))));
            }
        }
        check_agent_ceilings(project, lp, &mut out);
        check_step_skills(project, lp, &mut out);
    }
    out
}

/// A `skill_not_assigned` problem for each skill an agent step names that an agent running
/// the loop is not assigned: a step's `skills` narrow its agent's, never add to them.
fn check_step_skills(project: &Project, lp: &Loop, out: &mut Vec<Problem>) {
    let runners: Vec<_> =
        project.agents.values().filter(|a| a.config.assigned_loops.iter().flatten().any(|l| *l == lp.id)).collect();
    for (id, step) in &lp.config.steps {
        let StepBody::Agent(AgentStep { skills: Some(skills), .. }) = &step.body else { continue };
        for (i, skill) in skills.iter().enumerate() {
            for agent in &runners {
                if !agent.config.skills.iter().flatten().any(|s| s == skill) {
                    let pointer = format!("{}/skills/{i}", pointer_push("/steps", id));
                    let message = format!(
                        "step `{id}` names skill `{skill}`, which agent `{}` (running this loop) is not assigned",
                        agent.id
                    );
                    out.push(lp.source.locate(Problem::new(codes::SKILL_NOT_ASSIGNED, message).at(pointer)));
                }
            }
        }
    }
}

fn check_agent_ceilings(project: &Project, lp: &Loop, out: &mut Vec<Problem>) {
    let uses = tool_uses(&lp.config);
    let mut found = Vec::new();
    for agent in project.agents.values() {
        let assigned = agent.config.assigned_loops.iter().flatten().any(|l| *l == lp.id);
        let Some(ceiling) = agent.config.allowed_tools.as_deref().filter(|_| assigned) else { continue };
        let what = format!("the `allowedTools` of agent `{}`, which runs this loop", agent.id);
        for used in uses.iter().filter(|u| u.in_step) {
            check_within(Some(ceiling), used.name, &used.pointer, &what, &mut found);
        }
    }
    out.extend(found.into_iter().map(|p| lp.source.locate(p)));
}

/// An `unknown_tool` problem for every exact tool name in a loop that `known` does not know
/// (wildcard patterns may match tools that arrive later, and are not checked).
pub fn unknown_loop_tools(project: &Project, known: &dyn Fn(&str) -> bool) -> Vec<Problem> {
    project
        .loops
        .values()
        .flat_map(|lp| {
            tool_uses(&lp.config)
                .into_iter()
                .filter(|u| !u.name.contains('*') && !known(u.name))
                .map(|u| lp.source.problem(codes::UNKNOWN_TOOL, format!("no tool is named `{}`", u.name), &u.pointer))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Warnings that never fail validation: the deprecated `tools` on agent steps.
pub fn loop_warnings(project: &Project) -> Vec<Problem> {
    let mut out = Vec::new();
    for lp in project.loops.values() {
        for (id, step) in &lp.config.steps {
            if let StepBody::Agent(AgentStep { tools: Some(_), .. }) = &step.body {
                out.push(lp.source.problem(
                    codes::DEPRECATED_FIELD,
                    "`tools` on an agent step is deprecated; rename it `allowedTools` (same meaning)",
                    &format!("{}/tools", pointer_push("/steps", id)),
                ));
            }
        }
    }
    out
}
