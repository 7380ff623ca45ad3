//! The one loader: `.polpo/` on disk → a validated [`Project`], or every problem in it.
//!
//! Layout rules (from the reference): the directory layout wins when `agents/<id>/` exists;
//! an aggregate `agents.json` next to agent directories is `ambiguous_layout` (same for
//! teams and for `polpo.json` next to `project.json`). Ids are compared after NFKC +
//! lowercase (`case_collision`). The loader never stops at the first problem.

use crate::paths::{self, AGENT_JSON, AGENTS_DIR, INSTRUCTIONS_MD, LOOPS_DIR, SCHEDULES_DIR, TEAMS_DIR};
use crate::read;
use polpo_core::config::schema::{Field, Shape};
use polpo_core::config::{
    AGENT_FILE, Agent, AgentConfig, LEGACY_AGENT, LEGACY_PROJECT_FILE, LEGACY_TEAM, Layout, Location, PROJECT_FILE,
    Project, ProjectFile, TEAM_FILE, Team, TeamConfig, check_confusable, check_id, codes, collisions, parse_checked,
    validate_project,
};
use polpo_core::loops::{Loop, parse_loop};
use polpo_core::problem::Problem;
use polpo_core::schedules::{Schedule, parse_schedule, validate_schedules};
use polpo_loop_ts::Positions;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Team of legacy `{agent, teamName}` entries that name none.
pub const DEFAULT_TEAM: &str = "default";

/// Load and validate the project whose root (the folder containing `.polpo/`) is `root`.
pub fn load_project(root: &Path) -> Result<Project, Vec<Problem>> {
    load(root, None)
}

/// [`load_project`], also reporting every tool name in a loop that `known_tool` does not know,
/// in the same pass as every other problem (the tool registry lives above this crate).
pub fn load_project_checking_tools(root: &Path, known_tool: &dyn Fn(&str) -> bool) -> Result<Project, Vec<Problem>> {
    load(root, Some(known_tool))
}

fn load(root: &Path, known_tool: Option<&dyn Fn(&str) -> bool>) -> Result<Project, Vec<Problem>> {
    let dot = paths::polpo_dir(root);
    if !dot.is_dir() {
        return Err(vec![Problem::new(
            codes::MISSING_PROJECT_FILE,
            format!("no {} folder in {}", paths::POLPO_DIR, root.display()),
        )]);
    }
    let mut loader = Loader { dot, problems: Vec::new(), legacy: false, ts_positions: BTreeMap::new() };
    let (manifest, manifest_source) = loader.manifest();
    let agents = loader.agents();
    let teams = loader.teams();
    let loops = loader.loops();
    let schedules = loader.schedules();
    let (hook_packs, broken_packs) = crate::hooks::load_hook_packs(root);
    let project = Project {
        root: root.to_path_buf(),
        layout: if loader.legacy { Layout::Legacy } else { Layout::Directory },
        manifest: manifest.unwrap_or_default(),
        manifest_source,
        agents,
        teams,
        loops,
        hook_packs,
        schedules,
    };
    let mut problems = loader.problems;
    problems.extend(validate_project(&project));
    problems.extend(validate_schedules(&project));
    problems.extend(crate::hooks::check_hook_references(&project, &broken_packs));
    problems.extend(broken_packs);
    if let Some(known) = known_tool {
        problems.extend(polpo_core::loops::unknown_loop_tools(&project, known));
    }
    // A problem in a `.ts` loop's JSON is shown at the line of the source that wrote it.
    let problems: Vec<Problem> = problems
        .into_iter()
        .map(|p| match p.file.as_ref().and_then(|f| loader.ts_positions.get(f)) {
            Some(positions) => positions.locate(p),
            None => p,
        })
        .collect();
    if problems.is_empty() { Ok(project) } else { Err(problems) }
}

struct Loader {
    dot: PathBuf,
    problems: Vec<Problem>,
    legacy: bool,
    /// Source positions of each `.ts` loop, by file, to locate later problems in it.
    ts_positions: BTreeMap<String, Positions>,
}

impl Loader {
    fn keep<T>(&mut self, result: Result<T, Vec<Problem>>) -> Option<T> {
        result.map_err(|p| self.problems.extend(p)).ok()
    }

    fn ambiguous(&mut self, legacy_file: &str, modern: &str) {
        self.problems.push(
            Problem::new(
                codes::AMBIGUOUS_LAYOUT,
                format!(
                    "both legacy {legacy_file} and {modern} exist; keep one (`polpo migrate` converts the legacy file)"
                ),
            )
            .in_file(paths::display(&[legacy_file])),
        );
    }

    /// The manifest (if it parses) and the file it is, or would be, read from.
    fn manifest(&mut self) -> (Option<ProjectFile>, Location) {
        let modern = self.dot.join(paths::PROJECT_JSON).is_file();
        let legacy = self.dot.join(paths::LEGACY_PROJECT_JSON).is_file();
        if modern && legacy {
            self.ambiguous(paths::LEGACY_PROJECT_JSON, paths::PROJECT_JSON);
        }
        let (name, shape) = match (modern, legacy) {
            (true, _) => (paths::PROJECT_JSON, &PROJECT_FILE),
            (false, true) => {
                self.legacy = true;
                (paths::LEGACY_PROJECT_JSON, &LEGACY_PROJECT_FILE)
            }
            (false, false) => {
                self.problems.push(
                    Problem::new(codes::MISSING_PROJECT_FILE, "project.json is missing (`polpo create` writes one)")
                        .in_file(paths::display(&[paths::PROJECT_JSON])),
                );
                return (None, Location::file(paths::display(&[paths::PROJECT_JSON])));
            }
        };
        let at = Location::file(paths::display(&[name]));
        let manifest = self
            .keep(read::json(&self.dot.join(name), &at.file))
            .and_then(|value| self.keep(parse_checked(&value, shape, &at)));
        (manifest, at)
    }

    /// Non-hidden entries of `.polpo/<dir>` that are directories (`want_dirs`) or files.
    fn entries(&mut self, dir: &str, want_dirs: bool) -> Vec<String> {
        let Ok(read) = std::fs::read_dir(self.dot.join(dir)) else {
            return Vec::new();
        };
        let mut names = Vec::new();
        for entry in read.flatten() {
            // Follows symlinks: a linked agent folder is still an agent.
            let path = entry.path();
            if !(if want_dirs { path.is_dir() } else { path.is_file() }) {
                continue;
            }
            match entry.file_name().into_string() {
                Ok(name) if name.starts_with('.') => {}
                Ok(name) => names.push(name),
                Err(raw) => self.problems.push(
                    Problem::new(codes::INVALID_VALUE, format!("file name {raw:?} is not UTF-8"))
                        .in_file(paths::display(&[dir])),
                ),
            }
        }
        names.sort();
        names
    }

    fn agents(&mut self) -> BTreeMap<String, Agent> {
        let dirs = self.entries(AGENTS_DIR, true);
        let has_legacy = self.dot.join(paths::LEGACY_AGENTS_JSON).is_file();
        let agents = if !dirs.is_empty() {
            if has_legacy {
                self.ambiguous(paths::LEGACY_AGENTS_JSON, "agents/<id>/ directories");
            }
            dirs.iter().filter_map(|id| self.directory_agent(id)).collect()
        } else if has_legacy {
            self.legacy = true;
            self.legacy_agents()
        } else {
            Vec::new()
        };
        self.unique(agents, |a| (&a.id, &a.source))
    }

    fn directory_agent(&mut self, id: &str) -> Option<Agent> {
        let dir = self.dot.join(AGENTS_DIR).join(id);
        let shown = |file: &str| paths::display(&[AGENTS_DIR, id, file]);
        if let Err(reason) = check_id(id) {
            let p = Problem::new(codes::INVALID_VALUE, format!("agent directory name: {reason}"));
            self.problems.push(p.in_file(paths::display(&[AGENTS_DIR, id])));
            return None;
        }
        let mut missing = false;
        for file in [AGENT_JSON, INSTRUCTIONS_MD] {
            if !dir.join(file).is_file() {
                missing = true;
                self.problems.push(
                    Problem::new(codes::MISSING_AGENT_FILE, format!("agent `{id}` has no {file}")).in_file(shown(file)),
                );
            }
        }
        let at = Location::file(shown(AGENT_JSON));
        let config = match dir.join(AGENT_JSON).is_file() {
            true => self
                .keep(read::json(&dir.join(AGENT_JSON), &at.file))
                .and_then(|v| self.keep(parse_checked::<AgentConfig>(&v, &AGENT_FILE, &at))),
            false => None,
        };
        let instructions = match missing {
            false => self.keep(read::text(&dir.join(INSTRUCTIONS_MD), &shown(INSTRUCTIONS_MD))),
            true => None,
        };
        Some(Agent { id: id.to_string(), config: config?, instructions: instructions?, source: at })
    }

    /// The entries of a legacy aggregate file, which must be a JSON array of objects.
    fn legacy_array(&mut self, name: &str) -> Vec<(Value, Location)> {
        let at = Location::file(paths::display(&[name]));
        let Some(value) = self.keep(read::json(&self.dot.join(name), &at.file)) else {
            return Vec::new();
        };
        let Value::Array(items) = value else {
            self.problems.push(at.problem(codes::INVALID_LEGACY_LAYOUT, format!("{name} must be a JSON array"), ""));
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            let here = at.child(&i.to_string());
            if item.is_object() {
                out.push((item, here));
            } else {
                self.problems.push(here.problem(
                    codes::INVALID_LEGACY_LAYOUT,
                    format!("each entry of {name} must be an object"),
                    "",
                ));
            }
        }
        out
    }

    fn legacy_agents(&mut self) -> Vec<Agent> {
        self.legacy_array(paths::LEGACY_AGENTS_JSON)
            .into_iter()
            .filter_map(|(value, at)| {
                let parsed = legacy_agent(value, at);
                self.keep(parsed)
            })
            .collect()
    }

    fn teams(&mut self) -> BTreeMap<String, Team> {
        let files: Vec<String> = self.entries(TEAMS_DIR, false).into_iter().filter(|n| n.ends_with(".json")).collect();
        let has_legacy = self.dot.join(paths::LEGACY_TEAMS_JSON).is_file();
        let teams = if !files.is_empty() {
            if has_legacy {
                self.ambiguous(paths::LEGACY_TEAMS_JSON, "teams/<id>.json files");
            }
            files.iter().filter_map(|file| self.directory_team(file)).collect()
        } else if has_legacy {
            self.legacy = true;
            let entries = self.legacy_array(paths::LEGACY_TEAMS_JSON);
            entries.into_iter().filter_map(|(value, at)| self.legacy_team(value, at)).collect()
        } else {
            Vec::new()
        };
        self.unique(teams, |t| (&t.id, &t.source))
    }

    fn directory_team(&mut self, file: &str) -> Option<Team> {
        let (id, config, source) =
            self.named_file(TEAMS_DIR, file, "team", |value, at| parse_checked::<TeamConfig>(value, &TEAM_FILE, at))?;
        Some(Team { id, config, source })
    }

    /// `loops/<id>.json` files, and `loops/<id>.ts` static TypeScript loops compiled to the
    /// same JSON by polpo-loop-ts (other files there are not read). One id with both files is
    /// `loop_source_conflict`.
    fn loops(&mut self) -> BTreeMap<String, Loop> {
        let files = self.entries(LOOPS_DIR, false);
        let json: BTreeSet<&str> = files.iter().filter_map(|n| n.strip_suffix(".json")).collect();
        let mut loops = Vec::new();
        for file in &files {
            let found = if file.ends_with(".json") {
                self.named_file(LOOPS_DIR, file, "loop", parse_loop).map(|(id, config, source)| Loop {
                    id,
                    config: Arc::new(config),
                    source,
                })
            } else if let Some(id) = file.strip_suffix(".ts").filter(|id| json.contains(id)) {
                let message = format!("both loops/{id}.json and loops/{id}.ts define loop `{id}`; keep one");
                let at = Location::file(paths::display(&[LOOPS_DIR, file]));
                self.problems.push(at.problem(polpo_loop_ts::codes::SOURCE_CONFLICT, message, ""));
                None
            } else if file.ends_with(".ts") {
                self.ts_loop(file)
            } else {
                None
            };
            loops.extend(found);
        }
        self.unique(loops, |l| (&l.id, &l.source))
    }

    /// A `loops/<id>.ts` file: compiled without running it, then checked like a `.json` loop;
    /// its source positions are kept to locate the problems found later.
    fn ts_loop(&mut self, file: &str) -> Option<Loop> {
        let (id, at) = self.file_id(LOOPS_DIR, file, "loop")?;
        let source = self.keep(read::text(&self.dot.join(LOOPS_DIR).join(file), &at.file))?;
        let compiled = self.keep(polpo_loop_ts::compile(&source, &at.file))?;
        let config = compiled.config(&at);
        self.ts_positions.insert(at.file.clone(), compiled.positions);
        Some(Loop { id, config: Arc::new(self.keep(config)?), source: at })
    }

    /// `schedules/<id>.json` files, v2 or legacy mission-shaped.
    fn schedules(&mut self) -> BTreeMap<String, Schedule> {
        let files = self.entries(SCHEDULES_DIR, false);
        let schedules = files
            .iter()
            .filter(|n| n.ends_with(".json"))
            .filter_map(|file| {
                let (id, (config, timing, legacy), source) =
                    self.named_file(SCHEDULES_DIR, file, "schedule", parse_schedule)?;
                if let Some(named) = config.id.as_deref().filter(|named| *named != id) {
                    let message = format!("`id` is `{named}` but the file name says `{id}`");
                    self.problems.push(source.problem(codes::INVALID_VALUE, message, "/id"));
                    return None;
                }
                Some(Schedule { id, config, timing, source, legacy })
            })
            .collect();
        self.unique(schedules, |s| (&s.id, &s.source))
    }

    /// A `<dir>/<id>.json` file: its id (checked), its parsed content and where it is.
    fn named_file<T>(
        &mut self,
        dir: &str,
        file: &str,
        what: &str,
        parse: impl FnOnce(&Value, &Location) -> Result<T, Vec<Problem>>,
    ) -> Option<(String, T, Location)> {
        let (id, at) = self.file_id(dir, file, what)?;
        let value = self.keep(read::json(&self.dot.join(dir).join(file), &at.file))?;
        let config = self.keep(parse(&value, &at))?;
        Some((id, config, at))
    }

    /// A `<dir>/<id>.<ext>` file's id (checked) and location.
    fn file_id(&mut self, dir: &str, file: &str, what: &str) -> Option<(String, Location)> {
        let id = file.rsplit_once('.').map_or(file, |(stem, _)| stem);
        let at = Location::file(paths::display(&[dir, file]));
        if let Err(reason) = check_id(id) {
            self.problems.push(at.problem(codes::INVALID_VALUE, format!("{what} file name: {reason}"), ""));
            return None;
        }
        Some((id.to_owned(), at))
    }

    fn legacy_team(&mut self, mut value: Value, at: Location) -> Option<Team> {
        self.keep(parse_checked::<Value>(&value, &LEGACY_TEAM, &at))?;
        let id = take_string(&mut value, "name");
        if let Err(reason) = check_id(&id) {
            self.problems.push(at.problem(codes::INVALID_VALUE, format!("team name: {reason}"), "/name"));
            return None;
        }
        let config = self.keep(parse_checked::<TeamConfig>(&value, &Shape::Any, &at))?;
        Some(Team { id, config, source: at })
    }

    /// Drop (and report) items whose id collides with an earlier one after NFKC + lowercase;
    /// report ids that look like an earlier one or mix scripts (`id_confusable`).
    fn unique<T>(&mut self, items: Vec<T>, key: impl Fn(&T) -> (&String, &Location)) -> BTreeMap<String, T> {
        let clashes = collisions(items.iter().map(|i| key(i).0.as_str()));
        for &(first, later) in &clashes {
            let (first, (id, source)) = (key(&items[first]).0, key(&items[later]));
            self.problems.push(source.problem(
                codes::CASE_COLLISION,
                format!("id `{id}` collides with `{first}` (ids are compared ignoring case and Unicode form)"),
                "",
            ));
        }
        for (i, item) in items.iter().enumerate() {
            let (id, source) = key(item);
            let earlier = items[..i].iter().map(|other| key(other).0.as_str());
            if let Err(reason) = check_confusable(id, earlier) {
                self.problems.push(source.problem(codes::ID_CONFUSABLE, reason, ""));
            }
        }
        items
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !clashes.iter().any(|(_, later)| later == i))
            .map(|(_, item)| (key(&item).0.clone(), item))
            .collect()
    }
}

static LEGACY_WRAPPER: Shape =
    Shape::Object(&[&[Field::required("agent", Shape::Any), Field::optional("teamName", Shape::String)]]);

/// One entry of a legacy `agents.json`: an `AgentConfig` with `name` (and maybe
/// `systemPrompt`, `createdAt`), or `{agent, teamName}`.
fn legacy_agent(mut value: Value, at: Location) -> Result<Agent, Vec<Problem>> {
    let (mut value, at, team) = if value.get("agent").is_some() {
        parse_checked::<Value>(&value, &LEGACY_WRAPPER, &at)?;
        let team = match value.get("teamName") {
            Some(Value::String(t)) => t.clone(),
            _ => DEFAULT_TEAM.to_string(),
        };
        (value["agent"].take(), at.child("agent"), Some(team))
    } else {
        (value, at, None)
    };
    parse_checked::<Value>(&value, &LEGACY_AGENT, &at)?;
    let id = take_string(&mut value, "name");
    check_id(&id).map_err(|reason| vec![at.problem(codes::INVALID_VALUE, format!("agent name: {reason}"), "/name")])?;
    let instructions = take_string(&mut value, "systemPrompt");
    take_string(&mut value, "createdAt");
    let mut config: AgentConfig = parse_checked(&value, &Shape::Any, &at)?;
    if config.team.is_none() {
        config.team = team;
    }
    Ok(Agent { id, config, instructions, source: at })
}

/// Remove a string field from an object, returning it (empty when absent).
fn take_string(value: &mut Value, key: &str) -> String {
    match value.as_object_mut().and_then(|m| m.shift_remove(key)) {
        Some(Value::String(s)) => s,
        _ => String::new(),
    }
}
