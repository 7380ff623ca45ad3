//! Recognising credentials, so packs cannot carry them and envelopes never leak them.
//!
//! Two checks, both deliberately broad (a false positive costs a rename; a false negative
//! leaks a credential into a git repository or a hook endpoint): names that say "this is a
//! secret", and values shaped like well-known token formats.

/// Substrings of a field, header or variable name that mark its value as a secret.
const SECRET_NAME_PARTS: &[&str] = &[
    "authorization",
    "auth",
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "api_key",
    "api-key",
    "x-api-key",
    "credential",
    "private_key",
    "privatekey",
    "cookie",
    "signature",
    "session_key",
];

/// Prefixes of well-known credential formats (OpenAI, Stripe, GitHub, GitLab, Slack, AWS, Google).
const TOKEN_PREFIXES: &[&str] =
    &["sk-", "sk_live_", "sk_test_", "ghp_", "gho_", "ghs_", "github_pat_", "glpat-", "xoxb-", "xoxp-", "AKIA", "AIza"];

/// True when a name (`Authorization`, `GITHUB_TOKEN`, `apiKey`) says its value is a secret.
pub fn is_secret_name(name: &str) -> bool {
    // `key` alone is too common (`cacheKey`), but a name that *ends* in key usually is one.
    SECRET_NAME_PARTS.iter().any(|p| contains_ignoring_case(name, p))
        || ends_with_ignoring_case(name, "_key")
        || ends_with_ignoring_case(name, "-key")
}

/// Whether `text` contains `lower` (ASCII lowercase) in any ASCII case, without a lowercased
/// copy of `text`: every field name and string of every event is checked, most match nothing.
fn contains_ignoring_case(text: &str, lower: &str) -> bool {
    let (text, lower) = (text.as_bytes(), lower.as_bytes());
    lower.is_empty() || text.windows(lower.len()).any(|w| w.eq_ignore_ascii_case(lower))
}

fn ends_with_ignoring_case(text: &str, lower: &str) -> bool {
    text.len() >= lower.len() && text.as_bytes()[text.len() - lower.len()..].eq_ignore_ascii_case(lower.as_bytes())
}

/// True when `text` contains something shaped like a credential: a `Bearer`/`Basic`
/// authorization value or a token with a well-known prefix followed by 16+ token characters.
pub fn contains_token(text: &str) -> bool {
    if ["bearer ", "basic ", "authorization:"].iter().any(|p| contains_ignoring_case(text, p)) {
        return true;
    }
    // One pass over the text, trying the prefixes only where one can start (a searcher per
    // prefix and string cost more than the scan: every string of every event is checked).
    let bytes = text.as_bytes();
    bytes.iter().enumerate().filter(|(_, b)| TOKEN_STARTS[usize::from(**b)]).any(|(i, _)| {
        TOKEN_PREFIXES.iter().any(|prefix| {
            // `i` is an ASCII byte's index, so a char boundary.
            bytes[i..].starts_with(prefix.as_bytes()) && {
                let boundary = text[..i].chars().next_back().is_none_or(|c| !c.is_ascii_alphanumeric());
                let tail = text[i + prefix.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                    .count();
                boundary && tail >= 16
            }
        })
    })
}

/// The first bytes of [`TOKEN_PREFIXES`], as a table.
const TOKEN_STARTS: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < TOKEN_PREFIXES.len() {
        table[TOKEN_PREFIXES[i].as_bytes()[0] as usize] = true;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_are_recognised() {
        for n in ["Authorization", "GITHUB_TOKEN", "apiKey", "X-Api-Key", "DB_PASSWORD", "stripe_key", "Cookie"] {
            assert!(is_secret_name(n), "{n}");
        }
        for n in ["Content-Type", "cacheKey", "MODE", "X-Request-Id"] {
            assert!(!is_secret_name(n), "{n}");
        }
        // Any ASCII case, anywhere in the name; non-ASCII names are compared byte by byte.
        for n in ["X-AUTH-Header", "Stripe_KEY", "MY-KEY", "pAsSwOrD", "ünïcode_token"] {
            assert!(is_secret_name(n), "{n}");
        }
        for n in ["keyboard", "KEY", "y", "", "ключ"] {
            assert!(!is_secret_name(n), "{n}");
        }
    }

    #[test]
    fn token_shaped_values_are_recognised() {
        assert!(contains_token("curl -H 'Authorization: Bearer abc' https://x"));
        assert!(contains_token("OPENAI=sk-abcdefghijklmnopqrstuvwx ./run"));
        assert!(contains_token("ghp_0123456789abcdefABCDEF"));
        assert!(!contains_token("./scripts/check.sh --task-key sk-1"));
        assert!(!contains_token("risk-assessment-of-everything-here"));
        assert!(contains_token("header: BEARER abc"));
        assert!(contains_token("AUTHORIZATION: x"));
        assert!(contains_token("use bAsIc auth"));
        assert!(!contains_token("bearer"), "the scheme alone, without its value, is no credential");
        assert!(!contains_token("ünïcode without any credential"));
        // Every prefix, after a boundary, anywhere in the text, after non-ASCII text too.
        for prefix in TOKEN_PREFIXES {
            let token = format!("{prefix}0123456789abcdef");
            assert!(contains_token(&format!("é {token} more")), "{token}");
            assert!(!contains_token(&format!("x{token}")), "{token} inside a word");
            assert!(!contains_token(&format!("é {prefix}0123456789abcde")), "{prefix}: 15 token characters");
        }
    }
}
