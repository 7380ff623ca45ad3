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
use crate::model::{ModelSelection, ModelTarget};
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
    /// Agents by id.
    pub agents: BTreeMap<String, Agent>,
    /// Teams by id.
    pub teams: BTreeMap<String, Team>,
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
        self.agents
            .values()
            .filter(move |a| a.config.team.as_deref() == Some(team_id))
    }
}

/// Cross-agent rules: every `reportsTo` names an agent and no chain loops; `defaultLoop` and
/// `executionRouter.allowedLoops` stay within `assignedLoops`; every model profile an agent
/// names exists in `settings.modelProfiles`.
pub fn validate_project(project: &Project) -> Vec<Problem> {
    let mut out = Vec::new();
    let profiles: BTreeSet<&str> = project
        .settings()
        .model_profiles
        .iter()
        .flat_map(|p| p.keys())
        .map(String::as_str)
        .collect();
    for agent in project.agents.values() {
        check_reports_to(project, agent, &mut out);
        check_loops(agent, &mut out);
        check_profiles(agent, &profiles, &mut out);
    }
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
        next = project
            .agents
            .get(id)
            .and_then(|a| a.config.reports_to.as_deref());
    }
}

fn check_loops(agent: &Agent, out: &mut Vec<Problem>) {
    let assigned: BTreeSet<&str> = agent
        .config
        .assigned_loops
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
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

fn check_profiles(agent: &Agent, profiles: &BTreeSet<&str>, out: &mut Vec<Problem>) {
    let mut missing = |name: &str, pointer: String| {
        if !profiles.contains(name) {
            out.push(agent.source.problem(
                codes::INVALID_REFERENCE,
                format!("model profile `{name}` is not defined in settings.modelProfiles"),
                &pointer,
            ));
        }
    };
    match &agent.config.model {
        Some(ModelSelection::Profile { profile }) => missing(profile, "/model/profile".into()),
        Some(ModelSelection::Chain { primary, fallbacks }) => {
            if let ModelTarget::Profile { profile } = primary {
                missing(profile, "/model/primary/profile".into());
            }
            for (i, target) in fallbacks.iter().enumerate() {
                if let ModelTarget::Profile { profile } = target {
                    missing(profile, format!("/model/fallbacks/{i}/profile"));
                }
            }
        }
        Some(ModelSelection::Id(_)) | None => {}
    }
    for (i, name) in agent
        .config
        .allowed_model_profiles
        .iter()
        .flatten()
        .enumerate()
    {
        missing(name, format!("/allowedModelProfiles/{i}"));
    }
}
