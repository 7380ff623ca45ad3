//! Agent and team ids: what a valid id is, and when two ids are "the same".
//!
//! Ids become directory and file names, so two ids that differ only by case or Unicode
//! form would collide on macOS and Windows file systems. They are compared after NFKC
//! normalisation and lowercasing, and a project holding both is rejected everywhere.

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
    if let Some(c) = id
        .chars()
        .find(|c| c.is_control() || "/\\:*?\"<>|".contains(*c))
    {
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

/// Pairs `(earlier, later)` of distinct ids that fold to the same form, in input order.
pub fn collisions<'a>(ids: impl IntoIterator<Item = &'a str>) -> Vec<(&'a str, &'a str)> {
    let mut seen: std::collections::HashMap<String, &'a str> = std::collections::HashMap::new();
    let mut out = Vec::new();
    for id in ids {
        match seen.get(&fold_id(id)) {
            Some(first) => out.push((*first, id)),
            None => {
                seen.insert(fold_id(id), id);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_collide_after_nfkc_and_lowercase() {
        // U+FF21 FULLWIDTH A folds to "a" under NFKC.
        assert_eq!(
            collisions(["Support", "support", "\u{FF21}x", "ax", "other"]),
            vec![("Support", "support"), ("\u{FF21}x", "ax")]
        );
    }

    #[test]
    fn path_like_ids_are_rejected() {
        for bad in ["", ".hidden", "a/b", "a\\b", " a", "a:b"] {
            assert!(check_id(bad).is_err(), "{bad:?}");
        }
        assert!(check_id("support-bot_2").is_ok());
    }
}
