//! Round-trip and validation tests over documents that use every field.

use super::*;
use crate::problem::Problem;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};

fn full_agent() -> Value {
    serde_json::from_str(
        r#"{
        "role": "Support engineer",
        "model": {"primary": {"profile": "fast"}, "fallbacks": ["openai/gpt-4o-mini", {"profile": "balanced"}]},
        "allowedModelProfiles": ["fast", "balanced"],
        "modelRouting": {"mode": "auto"},
        "reasoning": "medium",
        "image_model": "fal/fal-ai/flux/dev",
        "video_model": "fal/luma-ray-2-flash",
        "vision_model": "openai/gpt-4o-mini",
        "transcribe_model": "openai/whisper-1",
        "tts_model": "edge/edge-tts",
        "search_provider": "exa",
        "allowedTools": ["read", "browser_*"],
        "allowedPaths": ["./docs"],
        "toolLoading": {"mode": "progressive"},
        "chat": {"allowedTools": ["read"], "allowUserQuestions": false,
                 "suggestions": {"enabled": true, "maxItems": 3, "guidance": "short"}},
        "channels": {"allowedTools": []},
        "memory": {"learning": {"mode": "suggest", "surfaces": ["chat", "channel"],
                                "kinds": ["fact", "preference", "style", "open_thread"]}},
        "identity": {"displayName": "Alice", "title": "Support", "company": "Acme", "email": "a@acme.test",
                     "bio": "Helps", "timezone": "Europe/Rome", "avatar": ".polpo/avatars/a.png",
                     "responsibilities": ["Answer tickets", {"area": "Billing", "description": "refunds", "priority": "high"}],
                     "tone": "warm", "personality": "calm", "socials": {"x": "@alice"}},
        "reportsTo": "lead",
        "skills": ["find-skills"],
        "mcpServers": {"gh": {"type": "stdio", "command": "gh-mcp", "args": ["--x"], "env": {"T": "${vault:gh:token}"}},
                       "web": {"type": "http", "url": "https://mcp.test", "headers": {"A": "b"}}},
        "maxTurns": 40,
        "maxConcurrency": 2,
        "runtime": "polpo-runner",
        "assignedLoops": ["triage", "refund"],
        "defaultLoop": "triage",
        "executionRouter": {"mode": "auto", "allowedLoops": ["refund"], "minConfidence": 0.7,
                            "timeoutMs": 2000, "maxInputChars": 4000},
        "loops": {"old": {}},
        "pipeline": ["a"],
        "toolChoice": "auto",
        "executionMode": "in-process",
        "sandbox": {"isolation": "fresh"},
        "volatile": false,
        "missionGroup": "m1",
        "browserProfile": "alice",
        "emailAllowedDomains": ["acme.test"],
        "team": "default",
        "hooks": ["quality"],
        "version": "1.0.0",
        "author": "Acme",
        "tags": ["support"]
    }"#,
    )
    .unwrap()
}

fn full_project() -> Value {
    serde_json::from_str(
        r#"{
        "schemaVersion": 2,
        "project": "demo",
        "settings": {
            "maxRetries": 2, "workDir": ".", "logLevel": "verbose", "taskTimeout": 1800000, "staleThreshold": 300000,
            "defaultRetryPolicy": {"escalateAfter": 2, "fallbackAgent": "lead", "escalateModel": "openai/gpt-4o"},
            "enableVolatileTeams": true, "volatileCleanup": "on_complete", "maxFixAttempts": 2,
            "maxQuestionRounds": 2, "maxResolutionAttempts": 2, "autoCorrectExpectations": true,
            "orchestratorSkills": ["plan"], "orchestratorModel": {"profile": "balanced"},
            "modelProfiles": {"fast": "openai/gpt-4o-mini", "balanced": {"primary": {"profile": "fast"}, "fallbacks": ["anthropic/claude-haiku"]}},
            "imageModel": "fal/fal-ai/flux/dev", "modelAllowlist": {"openai/gpt-4o": {"alias": "big", "params": {"temperature": 0.2}}},
            "reasoning": "low", "storage": "postgres", "databaseUrl": "postgres://127.0.0.1/test",
            "taskExecution": "subprocess", "sandbox": {"isolation": "reuse", "allowUnconfined": false, "runAs": "nobody", "cpuSeconds": 60, "memoryMb": 2048, "maxProcesses": 64, "fileSizeMb": 100},
            "chatExecution": "inline",
            "maxAssessmentRetries": 1, "maxConcurrency": 4, "approvalGates": [{"id": "g"}],
            "notifications": {"channels": {}, "rules": []}, "escalationPolicy": {"name": "e", "levels": []},
            "sla": {"warningThreshold": 0.8}, "enableScheduler": true, "defaultQualityThreshold": 3.5,
            "emailAllowedDomains": ["acme.test"], "gateway": {"url": "https://gw.test", "apiKeyEnv": "GW_KEY", "headers": {"x": "y"}},
            "guardrails": {"mode": "standard"}, "contextTrust": "enforce",
            "providers": {"openai": {"baseUrl": "http://127.0.0.1:9", "apiKeyEnv": "OPENAI_API_KEY", "headers": {}, "api": "openai-completions"}},
            "apiKeys": {"openai": "${OPENAI_API_KEY}"},
            "port": 3890,
            "maxConnections": 512,
            "hooks": ["quality"]
        },
        "providers": {"local": {"baseUrl": "http://127.0.0.1:8080/v1", "api": "openai-responses",
            "models": [{"id": "m", "name": "M", "reasoning": false, "input": ["text", "image"],
                        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}, "contextWindow": 200000, "maxTokens": 8192}]}},
        "apiKeys": ["k1"],
        "version": "1.0.0",
        "author": "Acme",
        "tags": ["demo"]
    }"#,
    )
    .unwrap()
}

fn round_trip<T: Serialize + DeserializeOwned>(value: &Value, shape: &schema::Shape) -> T {
    let parsed: T = parse_checked(value, shape, &Location::file("f.json")).unwrap();
    assert_eq!(&serde_json::to_value(&parsed).unwrap(), value, "round trip changed the document");
    parsed
}

#[test]
fn agent_with_every_field_round_trips() {
    let agent: AgentConfig = round_trip(&full_agent(), &AGENT_FILE);
    assert_eq!(agent.max_turns(), 40);
    assert_eq!(agent.reasoning, Some(ReasoningLevel::Medium));
}

#[test]
fn project_with_every_setting_round_trips() {
    let project: ProjectFile = round_trip(&full_project(), &PROJECT_FILE);
    assert_eq!(project.settings.storage(), StorageKind::Postgres);
    assert_eq!(project.settings.chat_execution(), ChatExecution::Inline);
}

#[test]
fn absent_fields_stay_absent_and_defaults_come_from_accessors() {
    let agent: AgentConfig = round_trip(&json!({"model": "openai/gpt-4o-mini"}), &AGENT_FILE);
    assert_eq!(agent.max_turns(), DEFAULT_MAX_TURNS);
    let project: ProjectFile = round_trip(&json!({"schemaVersion": 2}), &PROJECT_FILE);
    assert_eq!(project.settings.storage(), StorageKind::File);
    assert_eq!(project.settings.port(), 3890);
    let team: TeamConfig = round_trip(&json!({"description": "d"}), &TEAM_FILE);
    assert_eq!(team.description.as_deref(), Some("d"));
}

fn problems_of(value: Value, shape: &schema::Shape) -> Vec<(String, String)> {
    let err = parse_checked::<Value>(&value, shape, &Location::file("a.json")).unwrap_err();
    let mut v: Vec<_> = err.into_iter().map(|p| (p.code, p.pointer.unwrap_or_default())).collect();
    v.sort();
    v
}

#[test]
fn agent_file_reports_every_mistake() {
    let got = problems_of(
        json!({"name": "x", "systemPrompt": "p", "maxTurns": 0, "reasoning": "huge",
               "chat": {"suggestions": {"maxItem": 3}}, "model": {"profile": "p", "fallback": []}}),
        &AGENT_FILE,
    );
    let want = [
        ("forbidden_field", "/name"),
        ("forbidden_field", "/systemPrompt"),
        ("invalid_value", "/maxTurns"),
        ("invalid_value", "/reasoning"),
        ("unknown_field", "/chat/suggestions/maxItem"),
        ("unknown_field", "/model/fallback"),
    ];
    assert_eq!(got, want.map(|(c, p)| (c.to_string(), p.to_string())));
}

#[test]
fn project_file_needs_schema_version_two() {
    assert_eq!(
        problems_of(json!({"schemaVersion": 1}), &PROJECT_FILE),
        vec![("invalid_value".to_string(), "/schemaVersion".to_string())]
    );
    assert_eq!(
        problems_of(json!({"settings": {"storage": "mysql"}}), &LEGACY_PROJECT_FILE),
        vec![("invalid_value".to_string(), "/settings/storage".to_string())]
    );
}

fn agent(id: &str, config: Value) -> Agent {
    Agent {
        id: id.into(),
        config: serde_json::from_value(config).unwrap(),
        instructions: String::new(),
        source: Location::file(format!(".polpo/agents/{id}/agent.json")),
    }
}

fn project(agents: Vec<Agent>, settings: Value) -> Project {
    Project {
        root: ".".into(),
        layout: Layout::Directory,
        manifest: serde_json::from_value(json!({"schemaVersion": 2, "settings": settings})).unwrap(),
        manifest_source: Location::file(".polpo/project.json"),
        agents: agents.into_iter().map(|a| (a.id.clone(), a)).collect(),
        teams: Default::default(),
        loops: Default::default(),
        hook_packs: Default::default(),
        schedules: Default::default(),
    }
}

fn located(problems: Vec<Problem>) -> Vec<(String, String, String)> {
    let mut v: Vec<_> =
        problems.into_iter().map(|p| (p.code, p.file.unwrap_or_default(), p.pointer.unwrap_or_default())).collect();
    v.sort();
    v
}

#[test]
fn reports_to_cycles_are_reported_once_per_cycle() {
    let p = project(
        vec![
            agent("a", json!({"reportsTo": "b"})),
            agent("b", json!({"reportsTo": "c"})),
            agent("c", json!({"reportsTo": "a"})),
            agent("d", json!({"reportsTo": "a"})),
            agent("e", json!({"reportsTo": "ghost"})),
        ],
        json!({}),
    );
    let got = located(validate_project(&p));
    assert_eq!(
        got,
        vec![
            ("invalid_reference".into(), ".polpo/agents/e/agent.json".into(), "/reportsTo".into()),
            ("reports_to_cycle".into(), ".polpo/agents/a/agent.json".into(), "/reportsTo".into()),
        ]
    );
}

#[test]
fn loops_and_profiles_must_be_defined() {
    let p = project(
        vec![agent(
            "a",
            json!({"assignedLoops": ["x"], "defaultLoop": "y", "model": {"profile": "nope"},
                   "executionRouter": {"mode": "auto", "allowedLoops": ["z"]}, "allowedModelProfiles": ["fast"]}),
        )],
        json!({"modelProfiles": {"fast": "openai/gpt-4o-mini"}}),
    );
    let got: Vec<(String, String)> =
        located(validate_project(&p)).into_iter().map(|(code, _, pointer)| (code, pointer)).collect();
    let want = [
        ("invalid_reference", "/assignedLoops/0"),
        ("invalid_reference", "/defaultLoop"),
        ("invalid_reference", "/executionRouter/allowedLoops/0"),
        ("model_profile_not_allowed", "/model"),
    ];
    assert_eq!(got, want.map(|(c, p)| (c.to_string(), p.to_string())));
}

#[test]
fn settings_references_must_resolve() {
    let p = project(
        vec![agent("a", json!({"model": {"profile": "fast"}}))],
        json!({"modelProfiles": {"fast": {"profile": "slow"}, "slow": {"profile": "fast"}},
               "orchestratorModel": {"profile": "ghost"},
               "defaultRetryPolicy": {"fallbackAgent": "nobody"}}),
    );
    let got: Vec<(String, String, String)> = located(validate_project(&p));
    let file = ".polpo/project.json";
    let want = [
        ("invalid_reference", file, "/settings/defaultRetryPolicy/fallbackAgent"),
        ("model_profile_cycle", ".polpo/agents/a/agent.json", "/model"),
        ("model_profile_cycle", file, "/settings/modelProfiles/fast"),
        ("model_profile_cycle", file, "/settings/modelProfiles/slow"),
        ("model_profile_unknown", file, "/settings/orchestratorModel"),
    ];
    assert_eq!(got, want.map(|(c, f, p)| (c.to_string(), f.to_string(), p.to_string())));
}

#[test]
fn a_valid_project_has_no_problems() {
    let p = project(
        vec![agent("lead", json!({})), agent("a", json!({"reportsTo": "lead", "model": {"profile": "fast"}}))],
        json!({"modelProfiles": {"fast": "openai/gpt-4o-mini"}}),
    );
    assert!(validate_project(&p).is_empty());
}

#[test]
fn allowed_paths_stay_inside_the_workspace() {
    let entries = ["docs", "./docs/api", "a/../b", ".", "/", "/etc", "..", "docs/../../x", ""];
    let p = project(vec![agent("a", json!({"allowedPaths": entries}))], json!({}));
    let refused: Vec<String> =
        validate_project(&p).into_iter().filter(|p| p.code == "invalid_value").filter_map(|p| p.pointer).collect();
    assert_eq!(
        refused,
        ["/allowedPaths/4", "/allowedPaths/5", "/allowedPaths/6", "/allowedPaths/7", "/allowedPaths/8"]
    );
}
