use super::*;
use proptest::prelude::*;
use serde_json::json;

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec![
            "tool:before",
            "turn:stop",
            "command",
            "http",
            "https://127.0.0.1",
            "x",
            "",
            "*",
            "version",
            "hooks"
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "version",
                    "hooks",
                    "tool:before",
                    "turn:stop",
                    "handler",
                    "type",
                    "command",
                    "url",
                    "terminationGate",
                    "validator",
                    "maxCycles",
                    "matcher",
                    "tools"
                ])
                .prop_map(String::from),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Pack files are untrusted: any JSON gives a pack and problems, never a panic.
    #[test]
    fn any_document_is_checked_without_panicking(doc in json_value()) {
        let _ = check_document("p", &doc, &ValidateOptions::default());
        let _ = check_document("p", &json!({"version": 1, "hooks": {"tool:before": [doc.clone()], "turn:stop": [{"terminationGate": doc}]}}), &ValidateOptions::default());
    }
}

fn check(doc: Value) -> Vec<Problem> {
    check_document("quality", &doc, &ValidateOptions::default()).1
}

fn codes_at(doc: Value) -> Vec<(String, String)> {
    check(doc).into_iter().map(|p| (p.code, p.pointer.unwrap_or_default())).collect()
}

fn one_hook(event: &str, hook: Value) -> Value {
    json!({"version": 1, "hooks": {event: [hook]}})
}

#[test]
fn a_complete_pack_is_accepted_in_order() {
    let doc = json!({
        "version": 1,
        "description": "Quality policy",
        "hooks": {
            "tool:before": [
                {"id": "guard-bash", "matcher": {"tools": ["bash"]}, "priority": 10, "handler": {"type": "command", "command": "./guard.sh", "timeoutMs": 2000}},
                {"matcher": {"tools": ["mcp__lab__*"], "modes": ["chat", "channel"]}, "observe": true, "handler": {"type": "http", "url": "https://hooks.example.com/audit", "connection": "audit"}}
            ],
            "tool:after": [{"id": "redact", "handler": {"type": "tool", "tool": "redact_result", "input": {"style": "strict"}}, "onFailure": "fail"}],
            "turn:stop": [
                {"id": "review", "handler": {"type": "prompt", "prompt": "Is the answer complete?"}, "onFailure": "continue"},
                {"id": "tests-pass", "matcher": {"steps": ["build*"]}, "terminationGate": {
                    "validator": {"type": "command", "command": "cargo test -q", "timeoutMs": 120000},
                    "maxCycles": 3, "maxDurationMs": 900000, "maxTokens": 400000}}
            ]
        }
    });
    let (pack, problems) = check_document("quality", &doc, &ValidateOptions::default());
    assert_eq!(problems, vec![]);
    let ids: Vec<_> = pack.hooks.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(ids, ["guard-bash", "tool:before#1", "redact", "review", "tests-pass"]);
    assert_eq!(pack.hooks[4].gate().map(|g| g.max_cycles), Some(3));
    assert!(parse_pack("quality", &doc.to_string(), ".polpo/hooks/quality.json", &ValidateOptions::default()).is_ok());
}

#[test]
fn syntax_errors_have_a_line_and_column() {
    let err =
        parse_pack("q", "{\n  \"version\": 1,,\n}", ".polpo/hooks/q.json", &ValidateOptions::default()).unwrap_err();
    assert_eq!(err[0].code, "invalid_json");
    assert_eq!(err[0].line, Some(2));
    assert_eq!(err[0].file.as_deref(), Some(".polpo/hooks/q.json"));
}

#[test]
fn structure_problems_point_at_the_field() {
    assert_eq!(codes_at(json!({"hooks": {}})), [("missing_field".into(), "/version".into())]);
    assert_eq!(codes_at(json!({"version": 2, "hooks": {}})), [("unsupported_version".into(), "/version".into())]);
    assert_eq!(
        codes_at(json!({"version": 1, "hooks": {"tool:around": []}})),
        [("unknown_event".into(), "/hooks/tool:around".into())]
    );
    let cmd = json!({"type": "command", "command": "x"});
    assert_eq!(
        codes_at(one_hook("tool:before", json!({"handler": cmd, "colour": 1}))),
        [("invalid_hook".into(), "/hooks/tool:before/0".into())]
    );
    assert_eq!(
        codes_at(one_hook("tool:before", json!({"handler": {"type": "shell", "command": "x"}}))),
        [("invalid_hook".into(), "/hooks/tool:before/0".into())]
    );
    assert_eq!(
        codes_at(one_hook("tool:before", json!({}))),
        [("missing_handler".into(), "/hooks/tool:before/0".into())]
    );
    let dup =
        json!({"version": 1, "hooks": {"tool:before": [{"id": "a", "handler": cmd}, {"id": "a", "handler": cmd}]}});
    assert_eq!(codes_at(dup), [("duplicate_hook_id".into(), "/hooks/tool:before/1/id".into())]);
    assert_eq!(
        codes_at(one_hook("turn:stop", json!({"matcher": {"tools": ["bash"]}, "handler": cmd}))),
        [("matcher_not_applicable".into(), "/hooks/turn:stop/0/matcher/tools".into())]
    );
    assert_eq!(
        codes_at(one_hook("tool:before", json!({"matcher": {"steps": ["a"], "modes": ["chat"]}, "handler": cmd}))),
        [("matcher_never_matches".into(), "/hooks/tool:before/0/matcher".into())]
    );
    assert_eq!(
        codes_at(one_hook("tool:before", json!({"handler": {"type": "command", "command": "x", "timeoutMs": 0}}))),
        [("timeout_out_of_range".into(), "/hooks/tool:before/0/handler/timeoutMs".into())]
    );
}

#[test]
fn inline_credentials_are_rejected_everywhere() {
    let cases = [
        (
            json!({"type": "http", "url": "https://h.example.com/x", "headers": {"Authorization": "Bearer abc"}}),
            "/hooks/tool:before/0/handler/headers/Authorization",
        ),
        (
            json!({"type": "http", "url": "https://h.example.com/x", "headers": {"X-Api-Key": "abc"}}),
            "/hooks/tool:before/0/handler/headers/X-Api-Key",
        ),
        (json!({"type": "http", "url": "https://h.example.com/x?token=abc"}), "/hooks/tool:before/0/handler/url"),
        (json!({"type": "http", "url": "https://user:pw@h.example.com/x"}), "/hooks/tool:before/0/handler/url"),
        (
            json!({"type": "command", "command": "x", "env": {"GITHUB_TOKEN": "abc"}}),
            "/hooks/tool:before/0/handler/env/GITHUB_TOKEN",
        ),
        (
            json!({"type": "command", "command": "curl -H 'Authorization: Bearer x' https://h"}),
            "/hooks/tool:before/0/handler/command",
        ),
        (
            json!({"type": "tool", "tool": "t", "input": {"nested": {"password": "x"}}}),
            "/hooks/tool:before/0/handler/input/nested/password",
        ),
    ];
    for (handler, pointer) in cases {
        let got = codes_at(one_hook("tool:before", json!({"handler": handler})));
        assert_eq!(got, [("inline_secret".to_string(), pointer.to_string())], "{handler}");
    }
    let ok = one_hook(
        "tool:before",
        json!({"handler": {"type": "http", "url": "https://h.example.com/x", "connection": "audit", "headers": {"X-Request-Source": "polpo"}}}),
    );
    assert_eq!(check(ok), vec![]);
}

#[test]
fn http_hooks_must_use_public_https() {
    let url = |u: &str| one_hook("tool:before", json!({"handler": {"type": "http", "url": u}}));
    assert_eq!(codes_at(url("http://h.example.com/x"))[0].0, "insecure_url");
    assert_eq!(codes_at(url("https://127.0.0.1/x"))[0].0, "private_url");
    assert_eq!(codes_at(url("https://localhost:8443/x"))[0].0, "private_url");
    assert_eq!(codes_at(url("https://[::1]/x"))[0].0, "private_url");
    assert_eq!(codes_at(url("https://10.1.2.3/x"))[0].0, "private_url");
    assert_eq!(codes_at(url("http://127.0.0.1:8080/x"))[0].0, "insecure_url");
    let (_, problems) =
        check_document("q", &url("http://127.0.0.1:8080/x"), &ValidateOptions { allow_loopback_http: true });
    assert_eq!(problems, vec![], "the explicit test allowance admits local servers");
}

#[test]
fn gates_are_checked() {
    let gate = |g: Value| one_hook("turn:stop", json!({"terminationGate": g}));
    let cmd = json!({"type": "command", "command": "./check.sh"});
    assert_eq!(
        codes_at(gate(
            json!({"validator": {"type": "prompt", "prompt": "ok?"}, "maxCycles": 2, "maxDurationMs": 1000})
        )),
        [("gate_validator_nondeterministic".into(), "/hooks/turn:stop/0/terminationGate/validator/type".into())]
    );
    assert_eq!(
        codes_at(gate(
            json!({"validator": {"type": "verifier", "agent": "qa"}, "maxCycles": 2, "maxDurationMs": 1000})
        ))[0]
            .0,
        "gate_validator_nondeterministic"
    );
    assert_eq!(
        codes_at(gate(json!({"validator": cmd, "maxCycles": 0, "maxDurationMs": 1000})))[0].1,
        "/hooks/turn:stop/0/terminationGate/maxCycles"
    );
    assert_eq!(
        codes_at(gate(json!({"validator": cmd, "maxCycles": 21, "maxDurationMs": 1000})))[0].0,
        "gate_limit_out_of_range"
    );
    assert_eq!(
        codes_at(gate(json!({"validator": cmd, "maxCycles": 2, "maxDurationMs": 3_600_001})))[0].1,
        "/hooks/turn:stop/0/terminationGate/maxDurationMs"
    );
    assert_eq!(
        codes_at(gate(json!({"validator": cmd, "maxCycles": 2, "maxDurationMs": 1000, "maxTokens": 10_000_001})))[0].1,
        "/hooks/turn:stop/0/terminationGate/maxTokens"
    );
    assert_eq!(codes_at(gate(json!({"validator": cmd, "maxCycles": 2})))[0].0, "invalid_hook", "limits are explicit");
    let on_tool =
        one_hook("tool:after", json!({"terminationGate": {"validator": cmd, "maxCycles": 2, "maxDurationMs": 1000}}));
    assert_eq!(codes_at(on_tool)[0].0, "gate_event");
    let observe = one_hook(
        "turn:stop",
        json!({"observe": true, "terminationGate": {"validator": cmd, "maxCycles": 2, "maxDurationMs": 1000}}),
    );
    assert_eq!(codes_at(observe)[0].0, "gate_observe");
    assert_eq!(
        check(gate(json!({"validator": cmd, "maxCycles": 20, "maxDurationMs": 3_600_000, "maxTokens": 10_000_000}))),
        vec![]
    );
}

#[test]
fn prompt_and_verifier_hooks_remain_available_outside_a_gate() {
    let doc = json!({"version": 1, "hooks": {"turn:stop": [
        {"handler": {"type": "prompt", "prompt": "Complete?"}},
        {"handler": {"type": "verifier", "agent": "qa", "maxTurns": 2}}
    ]}});
    assert_eq!(check(doc), vec![]);
}
