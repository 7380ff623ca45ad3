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
    let lower = name.to_ascii_lowercase();
    // `key` alone is too common (`cacheKey`), but a name that *ends* in key usually is one.
    SECRET_NAME_PARTS.iter().any(|p| lower.contains(p)) || lower.ends_with("_key") || lower.ends_with("-key")
}

/// True when `text` contains something shaped like a credential: a `Bearer`/`Basic`
/// authorization value or a token with a well-known prefix followed by 16+ token characters.
pub fn contains_token(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    if lower.contains("bearer ") || lower.contains("basic ") || lower.contains("authorization:") {
        return true;
    }
    TOKEN_PREFIXES.iter().any(|prefix| {
        text.match_indices(prefix).any(|(i, _)| {
            let boundary = text[..i].chars().next_back().is_none_or(|c| !c.is_ascii_alphanumeric());
            let tail = text[i + prefix.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .count();
            boundary && tail >= 16
        })
    })
}

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
    }

    #[test]
    fn token_shaped_values_are_recognised() {
        assert!(contains_token("curl -H 'Authorization: Bearer abc' https://x"));
        assert!(contains_token("OPENAI=sk-abcdefghijklmnopqrstuvwx ./run"));
        assert!(contains_token("ghp_0123456789abcdefABCDEF"));
        assert!(!contains_token("./scripts/check.sh --task-key sk-1"));
        assert!(!contains_token("risk-assessment-of-everything-here"));
    }
}
