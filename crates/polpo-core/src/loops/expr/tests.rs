#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use proptest::prelude::*;
use serde_json::json;

fn ctx() -> Value {
    json!({
        "classify": {"route": "answer", "score": 0.8, "tags": ["a", "b"]},
        "count": 3, "text": "3", "blank": "", "zero": 0, "flag": true, "nothing": null,
        "obj": {"a": 1}, "same": {"a": 1}
    })
}

fn eval(src: &str) -> Option<Value> {
    evaluate(src, &ctx()).unwrap()
}

fn code(src: &str) -> (&'static str, usize) {
    let e = parse(src).unwrap_err();
    (e.code.as_str(), e.column)
}

#[test]
fn the_readme_guards_evaluate_over_the_context() {
    assert!(holds("classify.route == 'answer'", &ctx()));
    assert!(holds("classify.route != null", &ctx()));
    assert!(!holds("classify.missing != null", &ctx()));
    assert!(holds("classify.score >= 0.5 && (flag || count > 10)", &ctx()));
    assert_eq!(eval("classify.tags.1"), Some(json!("b")));
    assert_eq!(eval("classify.tags.01"), None, "only canonical indexes");
    assert_eq!(eval("classify.route.x"), None);
    assert_eq!(eval("nope"), None);
}

#[test]
fn loose_and_strict_equality_follow_the_reference() {
    for (src, want) in [
        ("count == text", true),
        ("count === text", false),
        ("count !== text", true),
        ("nothing == missing", true),
        ("nothing === missing", false),
        ("nothing == 0", false),
        ("missing == false", false),
        ("blank == 0", false),
        ("zero == false", true),
        ("flag == 1", true),
        ("flag == 'true'", true),
        ("obj == same", true),
        ("obj === same", true),
        ("' 3 ' == 3", true),
        ("'1e1' == 10", true),
        ("'Infinity' > 1", true),
    ] {
        assert_eq!(holds(src, &ctx()), want, "{src}");
    }
}

#[test]
fn ordering_with_null_or_undefined_is_false_and_otherwise_numeric_or_textual() {
    for (src, want) in [
        ("nothing < 1", false),
        ("nothing >= 0", false),
        ("missing <= missing", false),
        ("'10' > '9'", true),
        ("'abc' < 'abd'", true),
        ("'b' > 'a10'", true),
        ("count > '2'", true),
        ("'x' < 1", false),
        ("'x' > 1", true),
    ] {
        assert_eq!(holds(src, &ctx()), want, "{src}");
    }
}

#[test]
fn logic_gives_booleans_and_the_empty_expression_holds() {
    assert_eq!(eval("count && text"), Some(json!(true)));
    assert_eq!(eval("blank || zero"), Some(json!(false)));
    assert_eq!(eval("!classify"), Some(json!(false)));
    assert_eq!(eval("-2.5"), Some(json!(-2.5)));
    assert!(holds("", &ctx()));
    assert!(holds("   ", &ctx()));
    assert_eq!(eval(""), Some(json!(true)));
}

#[test]
fn syntax_errors_carry_a_code_and_the_column() {
    assert_eq!(code("a = 1"), ("unexpected_character", 3));
    assert_eq!(code("a == 'x"), ("unterminated_string", 6));
    assert_eq!(code("a == 1.2.3"), ("invalid_number", 6));
    assert_eq!(code("a == b == c"), ("chained_comparison", 8));
    assert_eq!(code("a &&"), ("unexpected_end", 5));
    assert_eq!(code("(a"), ("unexpected_end", 3));
    assert_eq!(code("a b"), ("unexpected_token", 3));
    assert_eq!(code("a[0]"), ("unexpected_character", 2));
    assert_eq!(code("f(x)"), ("unexpected_token", 2));
    assert_eq!(code("a + 1"), ("unexpected_character", 3));
    assert_eq!(code(&"9".repeat(400)), ("invalid_number", 1));
    assert!(!holds("a = 1", &ctx()), "fails closed");
    assert_eq!(evaluate("a = 1", &ctx()).unwrap_err().code, ExprErrorCode::UnexpectedCharacter, "evaluate reports it");
}

#[test]
fn limits_bound_length_depth_and_steps() {
    assert_eq!(code(&"a".repeat(5000)), ("expression_too_long", 1));
    let deep = format!("{}a{}", "(".repeat(65), ")".repeat(65));
    assert_eq!(code(&deep), ("expression_too_deep", 65));
    assert!(parse(&format!("{}a{}", "(".repeat(64), ")".repeat(64))).is_ok());
    assert_eq!(code(&format!("{}a", "!".repeat(65))), ("expression_too_deep", 65));
    let tight = Limits { max_steps: 5, ..Limits::default() };
    let expr = parse_with("classify.route.x || classify.score.y", &tight).unwrap();
    let err = evaluate_expr(&expr, &ctx(), &tight).unwrap_err();
    assert_eq!(err.code.as_str(), "evaluation_budget_exceeded");
    assert!(evaluate_expr(&expr, &ctx(), &Limits { max_steps: 9, ..tight }).is_ok());
}

#[test]
fn printing_is_canonical() {
    let e = parse(r#"!(a == "it's") || (b && c) && d.e >= -1 || (x || y)"#).unwrap();
    assert_eq!(e.to_string(), r"!(a == 'it\'s') || (b && c) && d.e >= -1 || (x || y)");
}

// ---- properties ----

const KEYS: &[&str] = &["a", "b", "c", "d"];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..4).prop_map(|n| json!(n)),
        (-1000.0f64..1000.0).prop_map(|n| json!(n)),
        prop::sample::select(vec!["", "0", "1", " 2 ", "1e1", "abc", "true", "null", "Infinity", "é", "😀"])
            .prop_map(|s| json!(s)),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map(prop::sample::select(KEYS.to_vec()), inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

fn context() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(prop::sample::select(KEYS.to_vec()), json_value(), 0..4)
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
}

fn literal() -> impl Strategy<Value = Literal> {
    prop_oneof![
        Just(Literal::Null),
        any::<bool>().prop_map(Literal::Bool),
        (-1.0e6f64..1.0e6).prop_map(Literal::Number),
        "[a-z'\"\\\\ ]{0,6}".prop_map(Literal::String),
    ]
}

fn operand() -> impl Strategy<Value = Expr> {
    prop_oneof![
        literal().prop_map(Expr::Literal),
        prop::sample::select(vec!["a", "b", "a.b", "c.d.0", "_x", "zz"]).prop_map(|p| Expr::Path(p.to_owned())),
    ]
}

fn op() -> impl Strategy<Value = CmpOp> {
    prop::sample::select(vec![
        CmpOp::StrictEq,
        CmpOp::StrictNe,
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Ge,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Lt,
    ])
}

fn expr() -> impl Strategy<Value = Expr> {
    operand().prop_recursive(5, 32, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
            prop::collection::vec(inner.clone(), 2..4).prop_map(Expr::And),
            prop::collection::vec(inner.clone(), 2..4).prop_map(Expr::Or),
            (op(), inner.clone(), inner).prop_map(|(o, l, r)| Expr::Cmp(o, Box::new(l), Box::new(r))),
        ]
    })
}

fn val(v: &Option<Value>) -> Val<'_> {
    match v {
        None => Val::Undefined,
        Some(Value::Null) => Val::Null,
        Some(Value::Bool(b)) => Val::Bool(*b),
        Some(Value::Number(n)) => Val::Number(n.as_f64().unwrap()),
        Some(Value::String(s)) => Val::String(s.as_str().into()),
        Some(other) => Val::Json(other),
    }
}

proptest! {
    #[test]
    fn printing_then_parsing_gives_the_same_tree(e in expr()) {
        let printed = e.to_string();
        prop_assert_eq!(parse(&printed), Ok(e), "{}", printed);
    }

    #[test]
    fn evaluation_of_a_printed_tree_never_fails(e in expr(), c in context()) {
        prop_assert!(evaluate_expr(&e, &c, &Limits::default()).is_ok());
    }

    #[test]
    fn equality_is_symmetric(a in proptest::option::of(json_value()), b in proptest::option::of(json_value())) {
        for op in [CmpOp::Eq, CmpOp::StrictEq, CmpOp::Ne, CmpOp::StrictNe] {
            prop_assert_eq!(eval::compare(op, &val(&a), &val(&b)), eval::compare(op, &val(&b), &val(&a)));
        }
        prop_assert!(eval::compare(CmpOp::Ne, &val(&a), &val(&b)) != eval::compare(CmpOp::Eq, &val(&a), &val(&b)));
        if eval::compare(CmpOp::StrictEq, &val(&a), &val(&b)) {
            prop_assert!(eval::compare(CmpOp::Eq, &val(&a), &val(&b)), "strict implies loose");
        }
    }

    #[test]
    fn ordering_is_total_between_defined_values_and_false_otherwise(
        a in proptest::option::of(json_value()), b in proptest::option::of(json_value())
    ) {
        let (x, y) = (val(&a), val(&b));
        let [lt, gt, le, ge] = [CmpOp::Lt, CmpOp::Gt, CmpOp::Le, CmpOp::Ge].map(|op| eval::compare(op, &x, &y));
        if matches!(a, None | Some(Value::Null)) || matches!(b, None | Some(Value::Null)) {
            prop_assert!(!(lt || gt || le || ge));
        } else {
            let equal = le && ge;
            prop_assert_eq!(u8::from(lt) + u8::from(gt) + u8::from(equal), 1, "exactly one of <, >, equal");
            prop_assert_eq!(lt, eval::compare(CmpOp::Gt, &y, &x));
            prop_assert_eq!(le, !gt);
        }
    }

    #[test]
    fn double_negation_is_truthiness(e in expr(), c in context()) {
        let not_not = Expr::Not(Box::new(Expr::Not(Box::new(e.clone()))));
        let limits = Limits::default();
        let truthy = evaluate_expr(&e, &c, &limits).unwrap().truthy();
        prop_assert_eq!(evaluate_expr(&not_not, &c, &limits).unwrap(), Val::Bool(truthy));
    }

    #[test]
    fn any_text_parses_or_fails_with_a_column_inside_it(s in "[a-z0-9 .'\"!=<>&|()_-]{0,40}|\\PC{0,40}") {
        match parse(&s) {
            Ok(e) => { let _ = holds(&e.to_string(), &json!({})); }
            Err(err) => prop_assert!(err.column >= 1 && err.column <= s.chars().count() + 1, "{err} in {s:?}"),
        }
    }
}
