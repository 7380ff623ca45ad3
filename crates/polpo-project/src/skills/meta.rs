//! A skill's identity as the Agent Skills specification defines it: the YAML front matter of
//! `SKILL.md` (`name`, `description`; other keys are kept in the file and not interpreted) and
//! the rules its name and description must follow.

use super::error::SkillError;
use serde::Serialize;

/// The bundle's entry file.
pub const SKILL_MD: &str = "SKILL.md";
/// Longest skill name (spec: 64).
pub const MAX_NAME_CHARS: usize = 64;
/// Longest description (spec: 1024).
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// Name and description of one skill, from its front matter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkillMeta {
    /// Lowercase letters, digits and single hyphens; also the bundle's folder name.
    pub name: String,
    /// What the skill does and when to use it (shown by `skill_list`).
    pub description: String,
}

/// Check a skill name against the spec: 1–64 characters of `a-z`, `0-9` and `-`, no leading,
/// trailing or doubled hyphen. Also what keeps a name from being a path.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok_chars = name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(format!("a skill name has 1 to {MAX_NAME_CHARS} characters"));
    }
    if !ok_chars || name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        return Err(format!(
            "skill name `{name}` must use lowercase letters, digits and single hyphens, not at either end"
        ));
    }
    Ok(())
}

/// Parse and check the front matter of `SKILL.md` (`at` names the file in errors).
pub fn parse_skill_md(text: &str, at: &str) -> Result<SkillMeta, SkillError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(SkillError::invalid(at, "SKILL.md must start with a `---` front matter block"));
    }
    let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim_end() != "---").collect();
    let name = value_of(&block, "name").ok_or_else(|| SkillError::invalid(at, "front matter has no `name`"))?;
    let description =
        value_of(&block, "description").ok_or_else(|| SkillError::invalid(at, "front matter has no `description`"))?;
    check_name(&name).map_err(|reason| SkillError::invalid(at, reason))?;
    if description.trim().is_empty() || description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(SkillError::invalid(at, format!("`description` has 1 to {MAX_DESCRIPTION_CHARS} characters")));
    }
    Ok(SkillMeta { name, description: description.trim().to_owned() })
}

/// The value of top-level `key` in a front matter block: a plain or quoted scalar, or a `|` /
/// `>` block scalar made of the indented lines that follow.
fn value_of(block: &[&str], key: &str) -> Option<String> {
    let at = block.iter().position(|l| l.split_once(':').is_some_and(|(k, _)| k == key))?;
    let raw = block[at].split_once(':').map(|(_, v)| v.trim())?;
    if raw.starts_with('|') || raw.starts_with('>') {
        let body: Vec<&str> = block[at + 1..]
            .iter()
            .take_while(|l| l.is_empty() || l.starts_with(' ') || l.starts_with('\t'))
            .map(|l| l.trim())
            .collect();
        let joiner = if raw.starts_with('|') { "\n" } else { " " };
        return Some(body.join(joiner).trim().to_owned());
    }
    let unquoted = match raw.as_bytes() {
        [b'"', .., b'"'] | [b'\'', .., b'\''] if raw.len() >= 2 => &raw[1..raw.len() - 1],
        _ => raw,
    };
    Some(unquoted.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_gives_name_and_description() {
        let meta =
            parse_skill_md("---\nname: pdf-tools\ndescription: \"Read PDFs.\"\nlicense: MIT\n---\n# Body\n", "x")
                .unwrap();
        assert_eq!(meta, SkillMeta { name: "pdf-tools".into(), description: "Read PDFs.".into() });
        let folded = parse_skill_md("---\nname: a\ndescription: >\n  Two\n  lines.\n---\n", "x").unwrap();
        assert_eq!(folded.description, "Two lines.");
    }

    #[test]
    fn bad_names_and_missing_fields_are_refused() {
        for name in ["", "Caps", "-a", "a-", "a--b", "../x", "a/b", &"x".repeat(65)] {
            assert!(check_name(name).is_err(), "{name}");
        }
        assert!(parse_skill_md("# no front matter", "x").is_err());
        assert!(parse_skill_md("---\nname: a\n---\n", "x").is_err());
        assert_eq!(parse_skill_md("---\nname: A\ndescription: d\n---\n", "x").unwrap_err().code(), "invalid_skill");
    }
}
