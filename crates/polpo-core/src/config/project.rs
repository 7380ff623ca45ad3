//! The validated project: what the engine and server run from.
//!
//! A `Project` is built once by the loader (in `polpo-project`) and passed down; nothing
//! re-reads files behind it. Cross-file rules that need every agent at once (escalation
//! chains, loop and profile references) are checked here, from data alone.

use super::agent::AgentConfig;
use super::codes;
use super::parse::Location;
use super::settings::{ProjectFile, Settings};
use super::team::TeamConfig;
use crate::hooks::HookPack;
use crate::loops::Loop;
use crate::model::{ModelProfileError, ModelProfiles, resolve_model_chain, validate_model_profiles};
use crate::problem::Problem;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Which on-disk layout a project was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `project.json`, `agents/<id>/`, `teams/<id>.json`.
    Directory,
    /// At least one legacy aggregate file (`polpo.json`, `agents.json`, `teams.json`);
    /// readable, but agent writes need `polpo migrate` first.
    Legacy,
}

/// One agent: its id, authored config and instructions.
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    /// The id (directory name; `name` in the API and legacy files).
    pub id: String,
    /// `agent.json`.
    pub config: AgentConfig,
    /// `instructions.md` (the system prompt).
    pub instructions: String,
    /// Where the config was read from, for locating problems.
    pub source: Location,
}

/// One team: its id and metadata. Members are the agents whose `team` is this id.
#[derive(Debug, Clone, PartialEq)]
pub struct Team {
    /// The id (file name).
    pub id: String,
    /// `teams/<id>.json`.
    pub config: TeamConfig,
    /// Where the config was read from.
    pub source: Location,
}

/// A whole validated project.
#[derive(Debug, Clone, PartialEq)]
pub struct Project {
    /// The folder that contains `.polpo/`.
    pub root: PathBuf,
    /// The layout it was read from.
    pub layout: Layout,
    /// `project.json` (or legacy `polpo.json`) as authored.
    pub manifest: ProjectFile,
    /// Which file the manifest was read from, for locating problems.
    pub manifest_source: Location,
    /// Agents by id.
    pub agents: BTreeMap<String, Agent>,
    /// Teams by id.
    pub teams: BTreeMap<String, Team>,
    /// Project Loops by id (`loops/<id>.json`).
    pub loops: BTreeMap<String, Loop>,
    /// Hook packs by name (`hooks/<name>.json`), read with the rest so that nothing derived
    /// from the project (the runtime's hook sets) reads files again.
    pub hook_packs: BTreeMap<String, HookPack>,
    /// Schedules by id (`schedules/<id>.json`).
    pub schedules: BTreeMap<String, crate::schedules::Schedule>,
}

impl Project {
    /// Runtime settings (defaults when the manifest has none).
    pub fn settings(&self) -> &Settings {
        &self.manifest.settings
    }

    /// The agent with this exact id.
    pub fn agent(&self, id: &str) -> Option<&Agent> {
        self.agents.get(id)
    }

    /// Agents whose `team` is `team_id`, in id order.
    pub fn team_members<'a>(&'a self, team_id: &'a str) -> impl Iterator<Item = &'a Agent> + 'a {
        self.agents.values().filter(move |a| a.config.team.as_deref() == Some(team_id))
    }
}

/// Cross-file rules: every `reportsTo` names an agent and no chain loops; `defaultLoop` and
/// `executionRouter.allowedLoops` stay within `assignedLoops`; every model selection (agents,
/// `orchestratorModel`, the profiles themselves) resolves (codes `model_profile_*` from
/// [`crate::model`]); `defaultRetryPolicy.fallbackAgent` names an agent; loops and the agents'
/// `assignedLoops` pass [`crate::loops::validate_loops`].
pub fn validate_project(project: &Project) -> Vec<Problem> {
    let mut out = Vec::new();
    let settings = project.settings();
    let no_profiles = ModelProfiles::new();
    let profiles = settings.model_profiles.as_ref().unwrap_or(&no_profiles);
    let manifest = &project.manifest_source;
    out.extend(validate_model_profiles(profiles).into_iter().map(|p| manifest.locate(p)));
    if let Some(routing) = &settings.model_routing {
        out.extend(crate::routing::validate_model_routing(routing, profiles).into_iter().map(|p| manifest.locate(p)));
    }
    if let Some(model) = &settings.orchestrator_model
        && let Err(e) = resolve_model_chain(model, profiles, None)
    {
        out.push(manifest.locate(e.to_problem().at("/settings/orchestratorModel")));
    }
    if let Some(agent) = settings.default_retry_policy.as_ref().and_then(|p| p.fallback_agent.as_deref())
        && !project.agents.contains_key(agent)
    {
        out.push(manifest.problem(
            codes::INVALID_REFERENCE,
            format!("`fallbackAgent` names agent `{agent}`, which does not exist"),
            "/settings/defaultRetryPolicy/fallbackAgent",
        ));
    }
    for agent in project.agents.values() {
        check_reports_to(project, agent, &mut out);
        check_allowed_paths(agent, &mut out);
        check_loops(agent, &mut out);
        check_agent_model(agent, profiles, &mut out);
        if agent.config.model_routing.as_ref().is_some_and(|r| r.mode == super::enums::RouterMode::Auto) {
            let problems = crate::routing::validate_agent_routing(settings.model_routing.as_ref(), "/modelRouting");
            out.extend(problems.into_iter().map(|p| agent.source.locate(p)));
        }
    }
    out.extend(crate::loops::validate_loops(project));
    out
}

fn check_reports_to(project: &Project, agent: &Agent, out: &mut Vec<Problem>) {
    let Some(target) = agent.config.reports_to.as_deref() else {
        return;
    };
    if !project.agents.contains_key(target) {
        out.push(agent.source.problem(
            codes::INVALID_REFERENCE,
            format!("`reportsTo` names agent `{target}`, which does not exist"),
            "/reportsTo",
        ));
        return;
    }
    // Walk the chain; report a cycle once, at its smallest id, so each loop is one problem.
    let mut chain = vec![agent.id.as_str()];
    let mut next = Some(target);
    while let Some(id) = next {
        if id == agent.id {
            if chain.iter().min() == Some(&agent.id.as_str()) {
                chain.push(id);
                out.push(agent.source.problem(
                    codes::REPORTS_TO_CYCLE,
                    format!("`reportsTo` loops: {}", chain.join(" → ")),
                    "/reportsTo",
                ));
            }
            return;
        }
        if chain.contains(&id) {
            return; // a loop further up the chain, reported at its own members
        }
        chain.push(id);
        next = project.agents.get(id).and_then(|a| a.config.reports_to.as_deref());
    }
}

/// `allowedPaths` narrows the workspace: each entry is relative and stays inside it. An absolute
/// entry (`/`) or one that climbs out (`../..`) would hand file tools and bash the whole disk.
fn check_allowed_paths(agent: &Agent, out: &mut Vec<Problem>) {
    for (i, entry) in agent.config.allowed_paths.iter().flatten().enumerate() {
        if !stays_inside(entry) {
            out.push(agent.source.problem(
                codes::INVALID_VALUE,
                format!(
                    "`{entry}` must be a path inside the workspace, relative to it (no leading `/`, no `..` above it)"
                ),
                &format!("/allowedPaths/{i}"),
            ));
        }
    }
}

/// Whether the relative path `entry` names the workspace or something below it.
fn stays_inside(entry: &str) -> bool {
    let mut depth = 0usize;
    for part in std::path::Path::new(entry).components() {
        match part {
            std::path::Component::Normal(_) => depth += 1,
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            std::path::Component::RootDir | std::path::Component::Prefix(_) => return false,
        }
    }
    !entry.is_empty()
}

fn check_loops(agent: &Agent, out: &mut Vec<Problem>) {
    let assigned: BTreeSet<&str> = agent.config.assigned_loops.iter().flatten().map(String::as_str).collect();
    if let Some(default) = agent.config.default_loop.as_deref()
        && !assigned.contains(default)
    {
        out.push(agent.source.problem(
            codes::INVALID_REFERENCE,
            format!("`defaultLoop` `{default}` must be one of `assignedLoops`"),
            "/defaultLoop",
        ));
    }
    let Some(router) = &agent.config.execution_router else {
        return;
    };
    if router.mode == Some(super::enums::RouterMode::Auto) && router.allowed_loops.is_none() {
        out.push(agent.source.problem(
            codes::INVALID_VALUE,
            "`executionRouter.mode` `auto` needs an explicit `allowedLoops`",
            "/executionRouter/allowedLoops",
        ));
    }
    for (i, name) in router.allowed_loops.iter().flatten().enumerate() {
        if !assigned.contains(name.as_str()) {
            out.push(agent.source.problem(
                codes::INVALID_REFERENCE,
                format!("`executionRouter.allowedLoops` may only narrow `assignedLoops`; `{name}` is not assigned"),
                &format!("/executionRouter/allowedLoops/{i}"),
            ));
        }
    }
}

fn check_agent_model(agent: &Agent, profiles: &ModelProfiles, out: &mut Vec<Problem>) {
    let allowed = agent.config.allowed_model_profiles.as_deref();
    for (i, name) in allowed.into_iter().flatten().enumerate() {
        if !profiles.contains_key(name) {
            let p = ModelProfileError::Unknown(name.clone()).to_problem();
            out.push(agent.source.locate(p.at(format!("/allowedModelProfiles/{i}"))));
        }
    }
    if let Some(model) = &agent.config.model
        && let Err(e) = resolve_model_chain(model, profiles, allowed)
    {
        out.push(agent.source.locate(e.to_problem().at("/model")));
    }
}
