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
}
