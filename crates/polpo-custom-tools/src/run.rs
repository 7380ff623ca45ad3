//! One call of a custom tool: bindings and Connections resolved by the host, then the
//! entrypoint run in the sandbox as a process that reads one JSON request on stdin
//! (`{name, params, invocation, bindings, connections: {slot: {headers}}}`) and writes one JSON
//! answer on stdout (`{ok: true, result}` or `{ok: false, error}`).

use crate::manifest::ToolDir;
use crate::{CustomToolError, strip};
use polpo_connections::Connections;
use polpo_core::config::settings::JsRuntimeName;
use polpo_core::tool::{ToolEffect, ToolSpec};
use polpo_tools::sandbox::{CommandSpec, Confinement, Program, Termination, run_command, scrubbed_env};
use polpo_tools::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Oldest Node major version the bridge runs on (Deno and Bun: any that runs it).
pub const MIN_NODE_MAJOR: u32 = 20;
/// Output bytes read from a tool process.
const OUTPUT_CAP: usize = 1024 * 1024;
/// The bridge sources, written beside the compiled tool.
const BRIDGE: &str = include_str!("bridge.mjs");
const TOOLS_MODULE: &str = include_str!("tools.mjs");
const TYPEBOX_MODULE: &str = include_str!("typebox.mjs");

/// The JS runtime found on this machine, the one `settings.customTools.runtime` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsRuntime {
    /// Which runtime it is.
    pub name: JsRuntimeName,
    /// Its executable.
    pub program: PathBuf,
    /// The first line of what `--version` printed.
    pub version: String,
}

impl JsRuntime {
    /// Node, as [`JsRuntime::configured`] finds it.
    pub fn detect() -> Result<Self, CustomToolError> {
        Self::configured(JsRuntimeName::Node)
    }

    /// The runtime the project at `root` names in `.polpo/project.json`
    /// (`settings.customTools.runtime`, Node when it names none), as [`JsRuntime::configured`]
    /// finds it. Read on its own so `polpo tools` need not load the whole project; a file that
    /// cannot be read or names no known runtime is `custom_tool_runtime_unavailable` saying so.
    pub fn for_project(root: &Path) -> Result<Self, CustomToolError> {
        use polpo_project::paths::{POLPO_DIR, PROJECT_JSON};
        let unavailable = |why: &str| CustomToolError::RuntimeUnavailable(format!(".polpo/project.json: {why}"));
        let file = root.join(POLPO_DIR).join(PROJECT_JSON);
        let name = match polpo_project::fsx::read_bounded(&file, polpo_project::fsx::MAX_FILE_BYTES) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => JsRuntimeName::Node,
            Err(e) => return Err(unavailable(&e.to_string())),
            Ok(bytes) => {
                let doc: Value = serde_json::from_slice(&bytes).map_err(|_| unavailable("not JSON"))?;
                match doc.pointer("/settings/customTools/runtime") {
                    None => JsRuntimeName::Node,
                    Some(name) => serde_json::from_value(name.clone())
                        .map_err(|_| unavailable("/settings/customTools/runtime is not node, deno or bun"))?,
                }
            }
        };
        Self::configured(name)
    }

    /// Runtime `name` from `POLPO_NODE` / `POLPO_DENO` / `POLPO_BUN` when set, else from `PATH`.
    /// Missing, not runnable, or a Node older than 20 is `custom_tool_runtime_unavailable`,
    /// which `polpo tools validate` reports and a call answers (never a crash).
    pub fn configured(name: JsRuntimeName) -> Result<Self, CustomToolError> {
        let chosen = std::env::var_os(format!("POLPO_{}", name.as_str().to_ascii_uppercase()));
        match chosen {
            Some(program) => Self::at(name, PathBuf::from(program)),
            None => Self::find(name, &std::env::var_os("PATH").unwrap_or_default()),
        }
    }

    /// Runtime `name` as the first executable of its name in the directories of `path` (a
    /// `PATH`-style list).
    pub fn find(name: JsRuntimeName, path: &std::ffi::OsStr) -> Result<Self, CustomToolError> {
        let exe = name.as_str();
        let program = std::env::split_paths(path).map(|d| d.join(exe)).find(|p| is_executable(p)).ok_or_else(|| {
            CustomToolError::RuntimeUnavailable(format!(
                "JavaScript and TypeScript tools run under `{exe}` (settings.customTools.runtime), which is not on PATH"
            ))
        })?;
        Self::at(name, program)
    }

    fn at(name: JsRuntimeName, program: PathBuf) -> Result<Self, CustomToolError> {
        let unavailable = |m: String| CustomToolError::RuntimeUnavailable(m);
        let output = std::process::Command::new(&program)
            .arg("--version")
            .output()
            .map_err(|e| unavailable(format!("{} cannot run: {e}", program.display())))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let version = stdout.lines().next().unwrap_or_default().trim().to_owned();
        if !output.status.success() || version.is_empty() {
            return Err(unavailable(format!("{} --version failed", program.display())));
        }
        if name == JsRuntimeName::Node {
            let major: u32 =
                version.trim_start_matches('v').split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0);
            if major < MIN_NODE_MAJOR {
                return Err(unavailable(format!(
                    "{} is {version}; custom tools need Node ≥ {MIN_NODE_MAJOR}",
                    program.display()
                )));
            }
        }
        // Resolved, so the sandbox can let exactly this program be read and run.
        let program = std::fs::canonicalize(&program).unwrap_or(program);
        Ok(Self { name, program, version })
    }

    /// The command line that runs `bridge` (a file of `scratch`, the working directory, which
    /// holds the compiled tool and nothing else).
    fn argv(&self, scratch: &Path, bridge: &str) -> Vec<String> {
        let flags: Vec<String> = match self.name {
            // Without the Wasm trap handler V8 reserves no 10 GiB guard regions, so `fetch`
            // (whose HTTP parser is Wasm) works under the sandbox's address-space limit.
            JsRuntimeName::Node => vec!["--no-warnings".into(), "--disable-wasm-trap-handler".into()],
            // Deno's permissions: read the compiled tool, reach the network (what tools are
            // for); no prompt, no config or lock file, no remote or npm module.
            JsRuntimeName::Deno => [
                "run",
                "--quiet",
                "--no-prompt",
                "--no-config",
                "--no-lock",
                "--no-remote",
                "--no-npm",
                &format!("--allow-read={}", scratch.display()),
                "--allow-net",
            ]
            .map(String::from)
            .to_vec(),
            // Never install a missing package from the registry on the fly.
            JsRuntimeName::Bun => vec!["run".into(), "--no-install".into()],
        };
        std::iter::once(self.program.display().to_string()).chain(flags).chain([bridge.to_owned()]).collect()
    }

    /// Environment the runtime needs beyond the sandbox's allow-list: Deno keeps its cache in
    /// the scratch directory (the only one it may write) and does not look for updates.
    fn env(&self, scratch: &Path) -> Vec<(String, String)> {
        match self.name {
            JsRuntimeName::Deno => vec![
                ("DENO_DIR".into(), scratch.join(".deno").display().to_string()),
                ("DENO_NO_UPDATE_CHECK".into(), "1".into()),
            ],
            JsRuntimeName::Node | JsRuntimeName::Bun => Vec::new(),
        }
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A custom tool as the runtime registers it.
pub struct CustomTool {
    tool: ToolDir,
    spec: ToolSpec,
    connections: Arc<Connections>,
    runtime: Result<JsRuntime, CustomToolError>,
}

impl CustomTool {
    /// The tool of `tool`, authenticating through `connections`, its JS entrypoints run by
    /// `runtime` (its error, when there is none, is what a call answers).
    pub fn new(tool: ToolDir, connections: Arc<Connections>, runtime: Result<JsRuntime, CustomToolError>) -> Self {
        let manifest = &tool.manifest;
        let spec = ToolSpec {
            name: manifest.name.clone(),
            description: manifest.description.clone(),
            parameters: manifest.parameters.clone(),
        };
        Self { tool, spec, connections, runtime }
    }

    /// Everything a call needs before any tool code runs: the runtime (for JS), the compiled
    /// source, the bindings and the Connection headers. Also what `polpo tools validate` checks.
    pub fn check(&self) -> Result<(), CustomToolError> {
        if self.tool.is_javascript() {
            self.runtime.as_ref().map_err(Clone::clone)?;
            let out = tempfile::tempdir().map_err(|e| CustomToolError::Io(e.to_string()))?;
            strip::compile_tree(&self.tool.dir, &self.tool.entrypoint, out.path())?;
        }
        Ok(())
    }

    /// One call: `params` already validated against `parameters`.
    pub async fn invoke(&self, ctx: &ToolContext, params: Value) -> Result<String, CustomToolError> {
        let bindings = self.tool.bindings(&ctx.invocation)?;
        let user = ctx.invocation.get("user").and_then(Value::as_str);
        let mut slots = Map::new();
        for (name, slot) in &self.tool.manifest.connections {
            let fail = |e: polpo_connections::ConnectionError| CustomToolError::Failed(format!("slot `{name}`: {e}"));
            let connection = self.connections.select(slot, &ctx.agent, user).map_err(fail)?;
            let headers: Map<String, Value> = self
                .connections
                .headers_of(&connection, &ctx.agent)
                .await
                .map_err(fail)?
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            slots.insert(name.clone(), json!({"headers": headers}));
        }
        let request = json!({
            "name": self.spec.name,
            "params": params,
            "invocation": ctx.invocation,
            "bindings": bindings,
            "connections": slots,
        });
        let scratch =
            tempfile::Builder::new().prefix("polpo-tool-").tempdir().map_err(|e| CustomToolError::Io(e.to_string()))?;
        let launch = if self.tool.is_javascript() {
            let runtime = self.runtime.as_ref().map_err(Clone::clone)?;
            let entry = strip::compile_tree(&self.tool.dir, &self.tool.entrypoint, scratch.path())?;
            let entry = entry.strip_prefix(scratch.path()).unwrap_or(&entry).display().to_string();
            let write = |name: &str, text: &str| {
                std::fs::write(scratch.path().join(name), text).map_err(|e| CustomToolError::Io(e.to_string()))
            };
            write("__polpo_bridge.mjs", &BRIDGE.replace("./__ENTRY__", &format!("./{entry}")))?;
            write(strip::BRIDGED[0].1, TOOLS_MODULE)?;
            write(strip::BRIDGED[1].1, TYPEBOX_MODULE)?;
            Launch {
                argv: runtime.argv(scratch.path(), "__polpo_bridge.mjs"),
                env: runtime.env(scratch.path()),
                program: Some(&runtime.program),
            }
        } else {
            Launch { argv: vec![self.tool.entrypoint.display().to_string()], env: Vec::new(), program: None }
        };
        self.run(ctx, launch, scratch.path(), request).await
    }

    /// Run `launch` in `cwd`, confined like `bash`, with `request` on stdin.
    async fn run(
        &self,
        ctx: &ToolContext,
        launch: Launch<'_>,
        cwd: &Path,
        request: Value,
    ) -> Result<String, CustomToolError> {
        // The tool's folder, and the JS runtime wherever it is installed (a Deno or Bun in the
        // user's home, say); nothing else outside the system directories.
        let readable = std::iter::once(self.tool.dir.clone()).chain(launch.program.cloned()).collect();
        let mut confinement = Confinement::of(ctx, readable).map_err(|e| CustomToolError::Failed(e.to_string()))?;
        // It writes only its scratch directory, not the agent's workspace.
        confinement.writable = vec![cwd.to_path_buf()];
        let timeout_ms = self.tool.timeout_ms();
        let mut run = CommandSpec::new(Program::Argv(launch.argv), cwd);
        run.confinement = Some(confinement);
        run.env = scrubbed_env(&ctx.env_allow);
        run.env.extend(launch.env);
        run.stdin = Some(serde_json::to_vec(&request).map_err(|e| CustomToolError::Failed(e.to_string()))?);
        run.timeout = Duration::from_millis(timeout_ms);
        run.output_cap = OUTPUT_CAP;
        run.kill_grace = Duration::from_millis(500);
        run.cancel = ctx.cancel.child_token();
        let outcome = run_command(run).await.map_err(|e| CustomToolError::Failed(e.to_string()))?;
        match outcome.termination {
            Termination::TimedOut => return Err(CustomToolError::Failed(format!("timed out after {timeout_ms} ms"))),
            Termination::Cancelled => return Err(CustomToolError::Failed("cancelled".into())),
            _ => {}
        }
        let stdout = outcome.stdout.render();
        let answer: Value = serde_json::from_str(stdout.trim()).map_err(|_| {
            let stderr = outcome.stderr.render();
            let tail: String = stderr.chars().rev().take(400).collect::<Vec<_>>().into_iter().rev().collect();
            CustomToolError::Failed(format!("the tool answered no JSON (exit {:?}): {tail}", outcome.exit_code()))
        })?;
        match (answer.get("ok").and_then(Value::as_bool), answer.get("result"), answer.get("error")) {
            (Some(true), Some(Value::String(result)), _) => Ok(result.clone()),
            (Some(true), Some(other), _) => Ok(other.to_string()),
            (_, _, Some(error)) => {
                Err(CustomToolError::Failed(error.as_str().map_or_else(|| error.to_string(), str::to_owned)))
            }
            _ => Err(CustomToolError::Failed("the tool's answer is not {ok, result} or {ok: false, error}".into())),
        }
    }
}

/// What starts a tool's process: its command line, environment beyond the allow-list, and
/// the program to let the sandbox read when it lives outside the system directories.
struct Launch<'a> {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    program: Option<&'a PathBuf>,
}

#[async_trait::async_trait]
impl Tool for CustomTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn effect(&self) -> ToolEffect {
        self.tool.effect
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        match self.invoke(ctx, args).await {
            Ok(text) => Ok(ToolOutput { text, details: json!({"customTool": self.spec.name}) }),
            Err(e) => Err(ToolError::new(e.code(), e.to_string())),
        }
    }
}
