//! The README's hook pack example is accepted by the validator, exactly as printed.

use polpo_core::hooks::{ValidateOptions, parse_pack};

#[test]
fn the_readme_example_pack_validates() {
    let readme = include_str!("../../src/hooks/README.md");
    let start = readme.find("```json\n").expect("the README has a json example") + "```json\n".len();
    let end = start + readme[start..].find("```").expect("the example is closed");
    let pack = parse_pack("quality", &readme[start..end], ".polpo/hooks/quality.json", &ValidateOptions::default());
    let pack = pack.unwrap_or_else(|problems| panic!("{problems:?}"));
    assert!(pack.hooks.iter().any(|h| h.gate().is_some()));
}
