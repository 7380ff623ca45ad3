//! `polpo hooks validate|capabilities|explain`: runtime hook packs from the terminal.
//!
//! `explain` answers the question every hook user eventually asks — "why did (or didn't) my
//! hook fire?" — from the same resolution the runtime uses (`Loaded::hooks_for`: project
//! packs, then the agent's, then `HookSet::explain`), so what it prints is what a request
//! would run.

use super::{Global, print_json, print_problems_to_stderr, sorted};
use polpo_core::config::{Agent, Project};
use polpo_core::hooks::capabilities::{HostHooks, capabilities};
use polpo_core::hooks::set::ExplainEntry;
use polpo_core::hooks::{AgentTool, ExecutionMode, HookEvent, HookSet, Target, lint_for_agent};
use polpo_core::policy::{PolicyLayer, ToolPolicy};
use polpo_core::problem::Problem;
use serde_json::{Value, json};
use std::process::ExitCode;

/// `polpo hooks …`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check every `.polpo/hooks/*.json` pack and every agent's `hooks` assignment; warn
    /// about matchers that can never match a tool the agent has.
    Validate,
    /// Print what this host supports (portable terminationGate, command timeout default, limits).
    Capabilities {
        /// Accepted for compatibility with the reference CLI: the output is always the JSON
        /// payload of `GET /v1/hooks/capabilities`.
        #[arg(long)]
        json: bool,
    },
    /// Show which hooks would fire for an agent, in which order, and which matcher matched.
    Explain(ExplainArgs),
}

/// Arguments of `polpo hooks explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The agent id.
    #[arg(long)]
    agent: String,
    /// A tool name: explain `tool:*` events for this tool only (default: every tool of the
    /// agent that some hook matches).
    #[arg(long)]
    tool: Option<String>,
    /// The surface: `chat`, `channel` or `loop` (default `chat`, or `loop` with `--step`).
    #[arg(long, value_parser = parse_mode)]
    mode: Option<ExecutionMode>,
    /// A loop step id (implies `--mode loop`).
    #[arg(long)]
    step: Option<String>,
    /// Print the explanation as JSON.
    #[arg(long)]
    json: bool,
}

fn parse_mode(s: &str) -> Result<ExecutionMode, String> {
    [ExecutionMode::Chat, ExecutionMode::Channel, ExecutionMode::Loop]
        .into_iter()
        .find(|m| m.as_str() == s)
        .ok_or_else(|| format!("`{s}` is not a mode: use chat, channel or loop"))
}

/// Run a `hooks` subcommand.
pub fn run(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Validate => {
            // Hook packs and their assignments are checked by the loader, with the rest.
            let problems = match polpo_project::load_project(&global.root()?) {
                Ok(project) => {
                    let warnings = agent_warnings(&project);
                    print_warnings(&warnings);
                    let plural = |n: usize, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
                    let note = if warnings.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", plural(warnings.len(), "warning"))
                    };
                    println!("ok: {}{note}", plural(project.hook_packs.len(), "hook pack"));
                    return Ok(ExitCode::SUCCESS);
                }
                Err(problems) => problems,
            };
            for p in sorted(problems.clone()) {
                println!("{p}");
            }
            eprintln!("{} problem(s)", problems.len());
            Ok(ExitCode::FAILURE)
        }
        Command::Capabilities { json: _ } => {
            let caps = capabilities(HostHooks { hooks_enabled: hooks_enabled(), managed: false });
            print_json(&caps)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Explain(args) => explain(global, args),
    }
}

/// The kill switch as this process sees it (`POLPO_RUNTIME_HOOKS=off`), read the same way
/// as the runtime reads it.
fn hooks_enabled() -> bool {
    polpo_engine::hooks::hooks_enabled(std::env::var(polpo_engine::hooks::KILL_SWITCH_ENV).ok().as_deref())
}

/// Print warnings as `warning: <file>:<pointer>: <code>: <sentence>` on stdout. Warnings
/// never fail validation: the pack is valid, it just does not do what its author meant here.
pub fn print_warnings(warnings: &[Problem]) {
    for w in warnings {
        println!("warning: {w}");
    }
}

/// The tools agent `agent` can have at all: the runtime's tools under its `allowedTools`
/// ceiling (and `layer`, when a mode narrows it), plus one `mcp__<server>__*` family per MCP
/// server (their tool names are only known once connected).
fn agent_tools(agent: &Agent, mode: Option<ExecutionMode>) -> (Vec<String>, ToolPolicy) {
    let c = &agent.config;
    let mut policy = ToolPolicy::unrestricted().narrow(PolicyLayer::Agent, c.allowed_tools.as_deref());
    policy = match mode {
        Some(ExecutionMode::Chat) => {
            policy.narrow(PolicyLayer::Chat, c.chat.as_ref().and_then(|x| x.allowed_tools.as_deref()))
        }
        Some(ExecutionMode::Channel) => {
            policy.narrow(PolicyLayer::Channels, c.channels.as_ref().and_then(|x| x.allowed_tools.as_deref()))
        }
        Some(ExecutionMode::Loop) | None => policy,
    };
    let mut names: Vec<String> =
        polpo_tools::tools::system_tools().iter().map(|t| t.spec().name.clone()).filter(|n| policy.allows(n)).collect();
    names.extend(c.mcp_servers.iter().flatten().map(|(server, _)| format!("mcp__{server}__*")));
    (names, policy)
}

/// Warnings for every pack that applies to every agent (the project's and its own): `tools`
/// matchers (or single patterns) that can never match a tool the agent has, and
/// `tool:before` hooks that only see provider-native tools. Each points into the pack file.
pub fn agent_warnings(project: &Project) -> Vec<Problem> {
    let mut warnings = Vec::new();
    for agent in project.agents.values() {
        let (names, _) = agent_tools(agent, None);
        let tools: Vec<AgentTool<'_>> = names.iter().map(|n| AgentTool { name: n, provider_native: false }).collect();
        for name in applicable_packs(project, agent) {
            if let Some(pack) = project.hook_packs.get(name) {
                warnings.extend(
                    lint_for_agent(pack, &agent.id, &tools)
                        .into_iter()
                        .map(|w| w.in_file(format!(".polpo/hooks/{name}.json"))),
                );
            }
        }
    }
    sorted(warnings)
}

fn explain(global: &Global, args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let mode = match (args.mode, &args.step) {
        (Some(m), Some(_)) if m != ExecutionMode::Loop => anyhow::bail!("--step only applies to --mode loop"),
        (Some(m), _) => m,
        (None, Some(_)) => ExecutionMode::Loop,
        (None, None) => ExecutionMode::Chat,
    };
    let hook_problems = |problems: Vec<Problem>| {
        print_problems_to_stderr(&problems);
        anyhow::anyhow!("the hook packs have {} problem(s); run `polpo hooks validate`", problems.len())
    };
    // The runtime's own resolution, cached per agent exactly as a server would serve it.
    let loaded = polpo_engine::Loaded::new(global.load()?).map_err(hook_problems)?;
    let project = &loaded.project;
    let Some(agent) = project.agent(&args.agent) else {
        anyhow::bail!(
            "agent_not_found: no agent `{}` (agents: {})",
            args.agent,
            project.agents.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    };
    let set = loaded.hooks_for(agent, None).map_err(hook_problems)?.unwrap_or_default();
    let assignments = polpo_project::hooks::hook_assignments(project, agent);
    let names = applicable_packs(project, agent);
    let (tools, policy) = agent_tools(agent, Some(mode));
    let step = args.step.as_deref();
    let mut events = Vec::new();
    let mut tool_note = Value::Null;
    for event in HookEvent::ALL {
        if event.is_tool_event() {
            let candidates: Vec<&str> = match &args.tool {
                Some(t) => vec![t.as_str()],
                None => tools.iter().map(String::as_str).filter(|t| !t.ends_with('*')).collect(),
            };
            for tool in candidates {
                // The tool policy runs before any hook: a tool the agent cannot use in this
                // mode never reaches `tool:before`, whatever the matcher says.
                if let Some(layer) = policy.denied_by(tool) {
                    tool_note = json!({"tool": tool, "available": false, "deniedBy": layer});
                    events.push(event_json(event, Some(tool), Vec::new()));
                    continue;
                }
                // A name the agent does not have (a typo, or a client tool, which is handed
                // back to the caller instead of running here) meets no hook either.
                let known = tools.iter().any(|t| match t.strip_suffix('*') {
                    Some(prefix) => tool.to_ascii_lowercase().starts_with(&prefix.to_ascii_lowercase()),
                    None => t.eq_ignore_ascii_case(tool),
                });
                if !known {
                    tool_note = json!({"tool": tool, "available": false, "reason": "unknown_tool"});
                    events.push(event_json(event, Some(tool), Vec::new()));
                    continue;
                }
                let hooks = entries(&set, event, Target { mode, step, tool: Some(tool) });
                if !hooks.is_empty() || args.tool.is_some() {
                    events.push(event_json(event, Some(tool), hooks));
                }
            }
        } else {
            let hooks = entries(&set, event, Target { mode, step, tool: None });
            // `model:before` is reserved: shown only if a pack ever uses it.
            if !hooks.is_empty() || event != HookEvent::ModelBefore {
                events.push(event_json(event, None, hooks));
            }
        }
    }
    let out = json!({
        "agent": agent.id,
        "mode": mode,
        "step": step,
        "tool": args.tool,
        "hooksEnabled": hooks_enabled(),
        "packs": names,
        "assignments": assignments.iter().map(|(scope, packs)| json!({"scope": scope, "packs": packs})).collect::<Vec<_>>(),
        "toolPolicy": tool_note,
        "events": events,
        "terminationGate": set.gate_limits(&Target { mode, step, tool: None }),
    });
    if args.json {
        return print_json(&out);
    }
    print_text(&out);
    Ok(ExitCode::SUCCESS)
}

/// The packs that apply to `agent` outside loops, broadest scope first, each once (a pack
/// assigned at several scopes runs once, at the broadest).
fn applicable_packs<'a>(project: &'a Project, agent: &'a Agent) -> Vec<&'a String> {
    let mut seen = std::collections::HashSet::new();
    polpo_project::hooks::hook_assignments(project, agent)
        .into_iter()
        .flat_map(|(_, names)| names)
        .filter(|n| seen.insert(*n))
        .collect()
}

fn entries(set: &HookSet, event: HookEvent, target: Target<'_>) -> Vec<ExplainEntry> {
    set.explain(&target).into_iter().filter(|e| e.event == event).collect()
}

fn event_json(event: HookEvent, tool: Option<&str>, hooks: Vec<ExplainEntry>) -> Value {
    let mut v = json!({"event": event, "hooks": hooks});
    if let Some(tool) = tool {
        v["tool"] = json!(tool);
    }
    v
}

/// The human rendering of the JSON explanation (one source of truth for both outputs).
fn print_text(out: &Value) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let mut head = format!("agent {} · mode {}", s(&out["agent"]), s(&out["mode"]));
    if let Some(step) = out["step"].as_str() {
        head.push_str(&format!(" · step {step}"));
    }
    let project_packs = out["assignments"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["scope"] == "project")
        .and_then(|a| a["packs"].as_array().cloned())
        .unwrap_or_default();
    let scoped = |v: &Value| if project_packs.contains(v) { format!("{} (project)", s(v)) } else { s(v) };
    let packs: Vec<String> = out["packs"].as_array().into_iter().flatten().map(scoped).collect();
    head.push_str(&format!(" · packs: {}", if packs.is_empty() { "none".to_owned() } else { packs.join(", ") }));
    println!("{head}");
    if out["hooksEnabled"] == json!(false) {
        println!(
            "note: POLPO_RUNTIME_HOOKS=off — hooks are skipped, and an agent with an applicable termination gate refuses to run"
        );
    }
    let note = &out["toolPolicy"];
    if note["available"] == json!(false) {
        let why = match note["deniedBy"].as_str() {
            Some(layer) => format!("is denied by the {layer} tool policy in this mode"),
            None => "is not a tool of this agent".to_owned(),
        };
        println!("note: tool `{}` {why}, so no tool hook ever sees it", s(&note["tool"]));
    }
    for e in out["events"].as_array().into_iter().flatten() {
        match e["tool"].as_str() {
            Some(tool) => println!("{} ({tool})", s(&e["event"])),
            None => println!("{}", s(&e["event"])),
        }
        let hooks = e["hooks"].as_array().cloned().unwrap_or_default();
        if hooks.is_empty() {
            println!("  (no hook)");
        }
        for h in hooks {
            let position = match h["order"].as_u64() {
                Some(n) => format!("{n}."),
                None => "~".to_owned(),
            };
            let role =
                if h["concurrent"] == json!(true) { "observer, runs concurrently".to_owned() } else { s(&h["role"]) };
            let matched: polpo_core::hooks::matcher::MatchReason =
                serde_json::from_value(h["matchedBy"].clone()).unwrap_or_default();
            let mut line = format!(
                "  {position} {} [{role}] {} · scope {} · priority {} · matched {matched}",
                s(&h["hook"]),
                s(&h["handler"]),
                s(&h["scope"]),
                h["priority"]
            );
            if let Some(d) = h["description"].as_str() {
                line.push_str(&format!(" — {d}"));
            }
            println!("{line}");
        }
    }
    if let Some(g) = out["terminationGate"].as_object() {
        let tokens = g.get("maxTokens").filter(|t| !t.is_null()).map_or("unlimited".to_owned(), Value::to_string);
        println!(
            "termination gate: maxCycles {}, maxDurationMs {}, maxTokens {tokens} (strictest of the gates that apply)",
            g["maxCycles"], g["maxDurationMs"]
        );
    }
}
