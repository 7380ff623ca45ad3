//! The seed's custom tools run for real: manifest + TypeScript entrypoint, types stripped in
//! Rust, run under Node in the sandbox; bindings come from the invocation, headers from a
//! Connection whose secret is in the vault; a local site API stands in for the real one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use polpo_connections::Connections;
use polpo_core::redact::Redactor;
use polpo_custom_tools::{CustomTool, CustomToolError, JsRuntime, ToolDir};
use polpo_testkit::site::{SITE_SECRET as SECRET, SITE_TENANT as TENANT, SiteApi, custom_tool_fixture};
use polpo_tools::net::NetworkPolicy;
use polpo_tools::{Tool, ToolContext};
use polpo_vault::{Entry, Vault, VaultKey};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn tool(name: &str, connections: Arc<Connections>) -> CustomTool {
    CustomTool::new(ToolDir::load(&custom_tool_fixture(name)).unwrap(), connections, JsRuntime::detect())
}

fn no_connections(dir: &Path) -> Arc<Connections> {
    Arc::new(Connections::new(dir, Err(polpo_vault::VaultError::KeyMissing), NetworkPolicy::default()))
}

fn context(workspace: &Path, invocation: Value) -> ToolContext {
    let mut ctx = ToolContext::new(workspace);
    ctx.agent = "publisher".into();
    ctx.invocation = invocation;
    ctx
}

#[tokio::test]
async fn site_context_get_sees_no_parameters_and_gets_the_tenant_from_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let tool = tool("site_context_get", no_connections(dir.path()));
    assert_eq!(tool.spec().parameters, json!({"type": "object", "properties": {}, "additionalProperties": false}));
    assert!(!tool.spec().parameters.to_string().contains("tenantId"), "bindings never reach the model's schema");
    let invocation = json!({"requestId": "r", "runId": "u", "user": "ext-42", "metadata": {"tenantId": TENANT, "grant": "site"}, "surface": "chat"});
    let out = tool.call(&context(dir.path(), invocation), json!({})).await.unwrap();
    assert_eq!(serde_json::from_str::<Value>(&out.text).unwrap(), json!({"tenantId": TENANT}));

    for metadata in [json!({"grant": "site"}), json!({"tenantId": "not-a-uuid", "grant": "site"})] {
        let invocation = json!({"user": "ext-42", "metadata": metadata});
        let err = tool.call(&context(dir.path(), invocation), json!({})).await.unwrap_err();
        assert_eq!(err.code, "tool_binding_invalid", "{err}");
        assert!(!err.message.contains("not-a-uuid"), "a binding value is never echoed: {err}");
    }
}

/// A project folder whose vault holds the site secret and whose Connection `site` uses it.
pub fn site_connection(root: &Path) -> Arc<Connections> {
    let polpo = root.join(".polpo");
    std::fs::create_dir_all(polpo.join("connections")).unwrap();
    let vault = Vault::open(&polpo, VaultKey::generate(), Redactor::new());
    let credentials = BTreeMap::from([("key".to_string(), SECRET.to_string())]);
    vault
        .set(Entry { agent: "*".into(), service: "site".into(), kind: "api_key".into(), label: None, credentials })
        .unwrap();
    std::fs::write(polpo.join("connections/site.json"), polpo_testkit::site::site_connection().to_string()).unwrap();
    Arc::new(Connections::new(&polpo, Ok(vault), NetworkPolicy::default()))
}

#[tokio::test]
async fn site_publish_gets_its_headers_from_a_connection_whose_secret_is_in_the_vault() {
    let dir = tempfile::tempdir().unwrap();
    let tool = tool("site_publish", site_connection(dir.path()));
    let api = SiteApi::start().await.unwrap();
    let invocation = json!({"user": "ext-42", "metadata": {"siteApi": api.url()}});
    let out = tool.call(&context(dir.path(), invocation), json!({"message": "v2"})).await.unwrap();
    assert_eq!(api.authorization(), format!("authorization: Bearer {SECRET}"));
    assert_eq!(out.text, format!(r#"published by authorization: Bearer {SECRET}: {{"message":"v2"}}"#));
    assert!(!tool.spec().parameters.to_string().contains("siteApi"), "the slot is not a parameter");

    let keyless = CustomTool::new(
        ToolDir::load(&custom_tool_fixture("site_publish")).unwrap(),
        no_connections(dir.path()),
        JsRuntime::detect(),
    );
    let err = keyless.call(&context(dir.path(), json!({})), json!({"message": "v2"})).await.unwrap_err();
    assert!(err.message.contains("connection_missing"), "{err}");
}

fn write_tool(root: &Path, name: &str, source: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = json!({"name": name, "description": "d", "parameters": {"type": "object"}});
    std::fs::write(dir.join("tool.json"), manifest.to_string()).unwrap();
    std::fs::write(dir.join("index.ts"), source).unwrap();
    dir
}

#[tokio::test]
async fn typescript_is_stripped_and_unsafe_imports_are_refused_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let typed = write_tool(
        dir.path(),
        "typed",
        "import { defineTool } from \"@polpo-ai/tools\";\ntype N = number;\nenum Mode { A = 1 }\nconst twice = (x: N): N => x * 2;\nexport default defineTool({ name: \"typed\", async execute(ctx: unknown, p: { n: N }) { return String(twice(p.n) + Mode.A); } });\n",
    );
    let tool = CustomTool::new(ToolDir::load(&typed).unwrap(), no_connections(dir.path()), JsRuntime::detect());
    assert_eq!(tool.call(&context(dir.path(), json!({})), json!({"n": 20})).await.unwrap().text, "41");

    for (name, source) in [
        ("fsuser", "import fs from \"node:fs\";\nexport default {};\n"),
        ("dynamic", "const m = \"./x\";\nexport default await import(m);\n"),
        ("escape", "import x from \"../outside.ts\";\nexport default x;\n"),
    ] {
        let d = write_tool(dir.path(), name, source);
        std::fs::write(dir.path().join("outside.ts"), "export default 1;\n").unwrap();
        let tool = CustomTool::new(ToolDir::load(&d).unwrap(), no_connections(dir.path()), JsRuntime::detect());
        let err = tool.check().unwrap_err();
        assert_eq!(err.code(), "custom_tool_source_invalid", "{name}: {err}");
    }

    let missing = CustomTool::new(
        ToolDir::load(&typed).unwrap(),
        no_connections(dir.path()),
        Err(CustomToolError::RuntimeUnavailable("no node".into())),
    );
    assert_eq!(missing.check().unwrap_err().code(), "custom_tool_runtime_unavailable");
    let err = missing.call(&context(dir.path(), json!({})), json!({"n": 1})).await.unwrap_err();
    assert_eq!(err.code, "custom_tool_runtime_unavailable");
}

/// A stand-in `deno` or `bun` written into `bin` (neither is installed here): it answers
/// `--version`, and otherwise hands the bridge (its last argument) to the real Node, exporting
/// the command line it was given so the tool can show it.
fn runtime_shim(bin: &Path, name: &str, node: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo \"{name} 9.9.9 (shim)\"; exit 0; fi\nfor bridge; do :; done\nPOLPO_SHIM_ARGV=\"$*\" exec {} --no-warnings \"$bridge\"\n",
        node.display()
    );
    let path = bin.join(name);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[tokio::test]
async fn a_configured_deno_or_bun_runs_the_bridge_with_its_own_command_line() {
    use polpo_core::config::settings::JsRuntimeName;
    let node = JsRuntime::detect().unwrap().program;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let argv = write_tool(
        dir.path(),
        "argv",
        "import { defineTool } from \"@polpo-ai/tools\";\nexport default defineTool({ name: \"argv\", async execute() { return process.env.POLPO_SHIM_ARGV ?? \"no shim\"; } });\n",
    );
    let runtimes = [JsRuntimeName::Deno, JsRuntimeName::Bun];

    // Configured but not on PATH: validation says so, and so does a call, before any code runs.
    for name in runtimes {
        let err = JsRuntime::find(name, bin.as_os_str()).unwrap_err();
        assert_eq!(err.code(), "custom_tool_runtime_unavailable");
        assert!(err.to_string().contains(&format!("`{}`", name.as_str())), "{err}");
        let tool = CustomTool::new(ToolDir::load(&argv).unwrap(), no_connections(dir.path()), Err(err));
        assert_eq!(tool.check().unwrap_err().code(), "custom_tool_runtime_unavailable");
        let err = tool.call(&context(dir.path(), json!({})), json!({})).await.unwrap_err();
        assert_eq!(err.code, "custom_tool_runtime_unavailable");
    }

    for name in runtimes {
        runtime_shim(&bin, name.as_str(), &node);
        let runtime = JsRuntime::find(name, bin.as_os_str()).unwrap();
        assert_eq!(runtime.version, format!("{} 9.9.9 (shim)", name.as_str()));
        let tool = CustomTool::new(ToolDir::load(&argv).unwrap(), no_connections(dir.path()), Ok(runtime));
        tool.check().unwrap();
        let seen = tool.call(&context(dir.path(), json!({})), json!({})).await.unwrap().text;
        match name {
            JsRuntimeName::Deno => {
                let prefix = "run --quiet --no-prompt --no-config --no-lock --no-remote --no-npm --allow-read=/";
                assert!(seen.starts_with(prefix), "{seen}");
                assert!(seen.ends_with(" --allow-net __polpo_bridge.mjs"), "{seen}");
            }
            _ => assert_eq!(seen, "run --no-install __polpo_bridge.mjs"),
        }
    }
}

#[test]
fn the_project_names_its_js_runtime_in_settings() {
    use polpo_core::config::settings::JsRuntimeName;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".polpo")).unwrap();
    let project = |settings: Value| {
        std::fs::write(dir.path().join(".polpo/project.json"), json!({"settings": settings}).to_string()).unwrap();
        JsRuntime::for_project(dir.path())
    };
    assert_eq!(project(json!({})).unwrap().name, JsRuntimeName::Node, "Node by default");
    // Bun is not installed here; where it is, it is the one found.
    match project(json!({"customTools": {"runtime": "bun"}})) {
        Ok(found) => assert_eq!(found.name, JsRuntimeName::Bun),
        Err(e) => assert!(e.code() == "custom_tool_runtime_unavailable" && e.to_string().contains("`bun`"), "{e}"),
    }
    let err = project(json!({"customTools": {"runtime": "rhino"}})).unwrap_err();
    assert_eq!(err.code(), "custom_tool_runtime_unavailable");
    assert!(err.to_string().contains("/settings/customTools/runtime"), "{err}");
}
