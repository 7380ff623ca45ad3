//! The environment a sandboxed process sees: an allow-list, never secrets.

/// Variables every process gets when the runtime has them: enough for ordinary tools (locale,
/// terminal, temp dir, user identity) and nothing that carries credentials.
pub const BASE_ENV_ALLOW: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TERM",
    "TMPDIR",
    "TZ",
];

/// Name fragments that mark a variable as a credential. Matching is on the upper-cased name, so
/// `openai_api_key`, `GITHUB_TOKEN` and `DATABASE_URL` are all caught.
const SECRET_MARKERS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
    "PRIVATE",
    "DATABASE_URL",
    "DSN",
    "CONNECTION_STRING",
];

/// True when a variable's name looks like it holds a secret; such variables never reach a
/// sandboxed process, even when explicitly allowed.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_MARKERS.iter().any(|marker| upper.contains(marker))
}

/// The environment for a sandboxed process: the current process's variables whose names are in
/// [`BASE_ENV_ALLOW`] or `extra_allowed`, minus secret-looking names. Processes start from an
/// empty environment plus this list, so nothing else leaks.
pub fn scrubbed_env(extra_allowed: &[String]) -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .filter(|(name, _)| {
            BASE_ENV_ALLOW.contains(&name.as_str()) || extra_allowed.iter().any(|allowed| allowed == name)
        })
        .filter(|(name, _)| !is_secret_name(name))
        .collect()
}
