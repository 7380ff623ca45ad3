//! Agent and team ids: what a valid id is, and when two ids are "the same".
//!
//! Ids become directory and file names, so two ids that differ only by case or Unicode
//! form would collide on macOS and Windows file systems. They are compared after NFKC
//! normalisation and lowercasing, and a project holding both is rejected everywhere.
//!
//! Ids are also shown to people who pick one by its look (a model name in an OpenAI client,
//! an agent in the dashboard): `hеlper` with a Cyrillic `е` beside `helper` would receive
//! what was meant for the other. Ids whose [`skeleton`]s are equal, and ids that mix Latin,
//! Greek and Cyrillic letters, are refused as confusable.

use unicode_normalization::UnicodeNormalization;

/// Longest accepted id, in characters.
pub const MAX_ID_CHARS: usize = 64;

/// `Ok` when `id` can be a directory or file name on every platform, else why not.
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("an id must not be empty".into());
    }
    if id.chars().count() > MAX_ID_CHARS {
        return Err(format!("an id must be at most {MAX_ID_CHARS} characters"));
    }
    if id.starts_with('.') {
        return Err("an id must not start with `.`".into());
    }
    if let Some(c) = id.chars().find(|c| c.is_control() || "/\\:*?\"<>|".contains(*c)) {
        return Err(format!("an id must not contain {c:?}"));
    }
    if id.trim() != id {
        return Err("an id must not start or end with whitespace".into());
    }
    Ok(())
}

/// The form ids are compared in: NFKC, then lowercase.
pub fn fold_id(id: &str) -> String {
    id.nfkc().collect::<String>().to_lowercase()
}

/// For each id equal to an earlier one after folding: `(index of the earlier, index of this)`.
/// Exact duplicates count too; each later id is reported once, against the first.
pub fn collisions<'a>(ids: impl IntoIterator<Item = &'a str>) -> Vec<(usize, usize)> {
    let mut first: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut out = Vec::new();
    for (i, id) in ids.into_iter().enumerate() {
        match first.entry(fold_id(id)) {
            std::collections::hash_map::Entry::Occupied(e) => out.push((*e.get(), i)),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(i);
            }
        }
    }
    out
}

/// Letters that look like a Latin letter (after [`fold_id`]'s lowercasing), from Cyrillic and
/// Greek, plus the digits people misread: a reduced form of Unicode TR39's confusables table
/// covering the homoglyphs that occur in practice.
const HOMOGLYPHS: &[(char, char)] = &[
    // Cyrillic
    ('а', 'a'),
    ('в', 'b'),
    ('с', 'c'),
    ('ԁ', 'd'),
    ('е', 'e'),
    ('ё', 'e'),
    ('һ', 'h'),
    ('н', 'h'),
    ('і', 'i'),
    ('ї', 'i'),
    ('ј', 'j'),
    ('к', 'k'),
    ('ӏ', 'l'),
    ('м', 'm'),
    ('п', 'n'),
    ('о', 'o'),
    ('р', 'p'),
    ('ԛ', 'q'),
    ('г', 'r'),
    ('ѕ', 's'),
    ('т', 't'),
    ('ц', 'u'),
    ('ѵ', 'v'),
    ('ԝ', 'w'),
    ('х', 'x'),
    ('у', 'y'),
    ('з', '3'),
    // Greek
    ('α', 'a'),
    ('β', 'b'),
    ('ϲ', 'c'),
    ('ε', 'e'),
    ('η', 'n'),
    ('ι', 'i'),
    ('ϳ', 'j'),
    ('κ', 'k'),
    ('μ', 'u'),
    ('ν', 'v'),
    ('ο', 'o'),
    ('ρ', 'p'),
    ('τ', 't'),
    ('υ', 'u'),
    ('χ', 'x'),
    ('γ', 'y'),
    ('ζ', 'z'),
    // Digits and Latin letters read as others
    ('0', 'o'),
    ('1', 'l'),
    ('ı', 'i'),
];

/// The form two ids that look alike share: [`fold_id`], then every homoglyph replaced by the
/// Latin letter it imitates.
pub fn skeleton(id: &str) -> String {
    fold_id(id).chars().map(|c| HOMOGLYPHS.iter().find(|(from, _)| *from == c).map_or(c, |(_, to)| *to)).collect()
}

/// The alphabets whose letters imitate each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Script {
    Latin,
    Greek,
    Cyrillic,
}

fn script(c: char) -> Option<Script> {
    match c {
        'a'..='z' | 'A'..='Z' | '\u{00C0}'..='\u{024F}' | '\u{1E00}'..='\u{1EFF}' => Some(Script::Latin),
        '\u{0370}'..='\u{03FF}' | '\u{1F00}'..='\u{1FFF}' => Some(Script::Greek),
        '\u{0400}'..='\u{052F}' => Some(Script::Cyrillic),
        _ => None,
    }
}

/// `Ok` unless `id` mixes Latin, Greek and Cyrillic letters (a spoofing tell: no real name
/// needs two of them at once); the message names the scripts.
pub fn check_single_script(id: &str) -> Result<(), String> {
    let mut seen: Option<Script> = None;
    for s in id.chars().filter_map(script) {
        match seen {
            Some(first) if first != s => {
                return Err(format!("id `{id}` mixes {first:?} and {s:?} letters, so it can pass for another id"));
            }
            _ => seen = Some(s),
        }
    }
    Ok(())
}

/// The first of `existing` that `id` can be mistaken for: the same [`skeleton`] but not the
/// same id after [`fold_id`] (that case is a [`collisions`] one).
pub fn confusable_with<'a>(id: &str, existing: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let (folded, shape) = (fold_id(id), skeleton(id));
    existing.into_iter().find(|other| fold_id(other) != folded && skeleton(other) == shape)
}

/// `Ok` when `id` neither mixes scripts nor looks like one of `existing`; else the sentence
/// for an `id_confusable` refusal.
pub fn check_confusable<'a>(id: &str, existing: impl IntoIterator<Item = &'a str>) -> Result<(), String> {
    check_single_script(id)?;
    match confusable_with(id, existing) {
        Some(other) => {
            Err(format!("id `{id}` looks like the existing id `{other}`; pick a name that reads differently"))
        }
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_collide_after_nfkc_and_lowercase() {
        // U+FF21 FULLWIDTH A folds to "a" under NFKC.
        let ids = ["Support", "support", "\u{FF21}x", "ax", "other", "Support"];
        assert_eq!(collisions(ids), vec![(0, 1), (2, 3), (0, 5)]);
    }

    #[test]
    fn path_like_ids_are_rejected() {
        for bad in ["", ".hidden", "a/b", "a\\b", " a", "a:b"] {
            assert!(check_id(bad).is_err(), "{bad:?}");
        }
        assert!(check_id("support-bot_2").is_ok());
    }

    #[test]
    fn homoglyph_and_mixed_script_ids_are_confusable() {
        // U+0435 CYRILLIC SMALL LETTER IE in place of the Latin e.
        assert_eq!(confusable_with("h\u{0435}lper", ["helper", "writer"]), Some("helper"));
        assert_eq!(confusable_with("HELPER", ["helper"]), None, "a case variant is a collision, not a confusable");
        assert_eq!(confusable_with("he1per", ["helper"]), Some("helper"));
        assert_eq!(confusable_with("\u{03BF}ps", ["ops"]), Some("ops"), "Greek omicron");
        assert!(check_single_script("h\u{0435}lper").unwrap_err().contains("Latin and Cyrillic"));
        assert!(
            check_single_script("\u{043f}\u{043e}\u{043c}\u{043e}\u{0449}\u{043d}\u{0438}\u{043a}").is_ok(),
            "a Cyrillic-only id is fine"
        );
        assert!(check_confusable("support-bot_2", ["support", "writer"]).is_ok());
    }
}
