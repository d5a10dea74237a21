//! Environment keys: the POSIX shape every key must have, and the one table of
//! keys no manifest may pass to a child. Each reserved key turns data into code:
//! it makes the dynamic loader, a shell or an interpreter load or run something
//! the caller chose. A child that receives one is no longer running the program
//! that was hashed. The "Reserved environment keys" table of docs/manifest.md
//! mirrors this one (tests/docs_in_sync.rs keeps the two in step).

/// A reserved key or key prefix and why it is reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReservedEnv {
    /// The key, or a prefix when `prefix` is true.
    pub key: &'static str,
    /// Whether every key starting with `key` is reserved.
    pub prefix: bool,
    /// What the key lets a caller do.
    pub why: &'static str,
}

const fn exact(key: &'static str, why: &'static str) -> ReservedEnv {
    ReservedEnv {
        key,
        prefix: false,
        why,
    }
}

const fn prefix(key: &'static str, why: &'static str) -> ReservedEnv {
    ReservedEnv {
        key,
        prefix: true,
        why,
    }
}

/// Keys that no `env_passthrough`, `env_set` or `credential_env_keys` may name.
pub const RESERVED_ENV: &[ReservedEnv] = &[
    prefix(
        "LD_",
        "dynamic loader: LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT load arbitrary code",
    ),
    exact(
        "GLIBC_TUNABLES",
        "glibc tunables: changes loader and allocator behaviour (CVE-2023-4911)",
    ),
    exact(
        "GCONV_PATH",
        "glibc iconv: loads modules from a chosen directory",
    ),
    exact("HOSTALIASES", "resolver: redirects host names"),
    exact("NLSPATH", "message catalogs: reads chosen files"),
    exact("MALLOC_CHECK_", "glibc allocator debugging"),
    prefix(
        "DYLD_",
        "macOS dynamic loader (reserved for portable manifests)",
    ),
    exact("BASH_ENV", "bash runs this file at start"),
    exact("ENV", "sh runs this file at start"),
    prefix("BASH_FUNC_", "bash imports exported functions"),
    exact("SHELLOPTS", "bash options such as xtrace"),
    exact("BASHOPTS", "bash options"),
    exact("PS4", "bash evaluates it under xtrace"),
    exact("PROMPT_COMMAND", "bash runs it"),
    exact("IFS", "changes how shells split words"),
    exact(
        "PYTHONPATH",
        "python imports modules from chosen directories",
    ),
    exact(
        "PYTHONHOME",
        "python loads its standard library from a chosen place",
    ),
    exact("PYTHONSTARTUP", "python runs this file"),
    exact("PYTHONINSPECT", "python drops into an interactive prompt"),
    exact(
        "PYTHONBREAKPOINT",
        "python imports and calls a chosen callable",
    ),
    exact(
        "PYTHONWARNINGS",
        "python imports a chosen warning category module",
    ),
    exact("PYTHONUSERBASE", "python adds a chosen site directory"),
    exact("NODE_OPTIONS", "node: --require loads arbitrary code"),
    exact("NODE_PATH", "node resolves modules from chosen directories"),
    exact("PERL5OPT", "perl: -M loads arbitrary modules"),
    exact("PERL5LIB", "perl loads modules from chosen directories"),
    exact("PERLLIB", "perl loads modules from chosen directories"),
    exact("PERL5DB", "perl runs this debugger code"),
    exact("RUBYOPT", "ruby: -r loads arbitrary code"),
    exact("RUBYLIB", "ruby loads libraries from chosen directories"),
    exact("LUA_INIT", "lua runs this code"),
    prefix("LUA_PATH", "lua loads modules from chosen paths"),
    prefix("LUA_CPATH", "lua loads native modules from chosen paths"),
    exact("TCLLIBPATH", "tcl loads packages from chosen directories"),
    exact("JAVA_TOOL_OPTIONS", "the JVM loads agents and options"),
    exact("_JAVA_OPTIONS", "the JVM loads agents and options"),
    exact(
        "JDK_JAVA_OPTIONS",
        "the java launcher loads agents and options",
    ),
    exact("CLASSPATH", "the JVM loads classes from chosen places"),
    exact("GIT_SSH_COMMAND", "git runs this command through a shell"),
    exact("GIT_SSH", "git runs this program"),
    exact("GIT_PROXY_COMMAND", "git runs this program"),
    exact("GIT_EXEC_PATH", "git runs sub-commands from this directory"),
    exact("GIT_EXTERNAL_DIFF", "git runs this program"),
    exact("GIT_ASKPASS", "git runs this program"),
    exact("SSH_ASKPASS", "ssh runs this program"),
    exact("GIT_PAGER", "git runs this program"),
    exact("PAGER", "many tools run this program"),
    exact("EDITOR", "many tools run this program"),
    exact("VISUAL", "many tools run this program"),
    exact(
        "GIT_CONFIG_PARAMETERS",
        "git config injection (core.sshCommand, core.fsmonitor …)",
    ),
    exact(
        "GIT_CONFIG_COUNT",
        "git config injection (core.sshCommand, core.fsmonitor …)",
    ),
    prefix("GIT_CONFIG_KEY_", "git config injection"),
    prefix("GIT_CONFIG_VALUE_", "git config injection"),
    exact(
        "GIT_CONFIG_GLOBAL",
        "git reads configuration (and so commands) from a chosen file",
    ),
    exact(
        "GIT_CONFIG_SYSTEM",
        "git reads configuration (and so commands) from a chosen file",
    ),
    exact(
        "GIT_TEMPLATE_DIR",
        "git copies hooks from a chosen directory",
    ),
    exact("GIT_EDITOR", "git runs this program"),
    exact("GIT_SEQUENCE_EDITOR", "git runs this program"),
    exact(
        "GIT_DIR",
        "git reads a repository (and its config, hooks and fsmonitor) from a chosen place",
    ),
    exact(
        "GIT_COMMON_DIR",
        "git reads repository config and hooks from a chosen place",
    ),
    exact("LESSOPEN", "less runs this input preprocessor"),
    exact("LESSCLOSE", "less runs this postprocessor"),
    exact("MANPAGER", "man runs this program"),
    exact("BROWSER", "many tools run this program"),
    exact("SUDO_ASKPASS", "sudo runs this program"),
    exact("ZDOTDIR", "zsh runs startup files from this directory"),
    prefix(
        "npm_config_",
        "npm configuration (script-shell, node-options …) runs chosen code",
    ),
    prefix(
        "NPM_CONFIG_",
        "npm configuration (script-shell, node-options …) runs chosen code",
    ),
    exact("RUSTC_WRAPPER", "cargo runs this program"),
    exact("RUSTC_WORKSPACE_WRAPPER", "cargo runs this program"),
    exact("CARGO_BUILD_RUSTC_WRAPPER", "cargo runs this program"),
    exact(
        "OPENSSL_CONF",
        "OpenSSL loads engines and providers named in a chosen file",
    ),
    exact(
        "OPENSSL_ENGINES",
        "OpenSSL loads engines from a chosen directory",
    ),
    exact(
        "PHPRC",
        "php reads ini settings (auto_prepend_file) from a chosen place",
    ),
    exact(
        "PHP_INI_SCAN_DIR",
        "php reads ini settings from a chosen directory",
    ),
];

/// Keys a manifest may pass through, with a lint warning: a caller-chosen value
/// moves where the program looks for its configuration or other programs, and
/// configuration can name commands (`~/.gitconfig`'s `core.pager`). Fixing the
/// value with `env_set` avoids the question.
pub(crate) const REDIRECTING_ENV: &[&str] = &[
    "HOME",
    "PATH",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "SHELL",
    "TMPDIR",
];

/// The reserved entry matching `key`, if any.
pub(crate) fn reserved(key: &str) -> Option<&'static ReservedEnv> {
    RESERVED_ENV.iter().find(|entry| {
        if entry.prefix {
            key.starts_with(entry.key)
        } else {
            key == entry.key
        }
    })
}

/// True for a POSIX-shaped key: `[A-Za-z_][A-Za-z0-9_]*`.
pub(crate) fn is_valid_key(key: &str) -> bool {
    let mut chars = key.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference vectors I13–I15 plus the accepted shapes.
    #[test]
    fn keys_must_be_posix_shaped() {
        for bad in ["1VAR", "MY-VAR", "", "A B", "É"] {
            assert!(!is_valid_key(bad), "{bad}");
        }
        for good in ["GIT_AUTHOR_NAME", "_X", "a1"] {
            assert!(is_valid_key(good), "{good}");
        }
    }

    #[test]
    fn loader_and_interpreter_keys_are_reserved() {
        for key in [
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "LD_AUDIT",
            "BASH_ENV",
            "ENV",
            "PYTHONPATH",
            "NODE_OPTIONS",
            "PERL5OPT",
            "GIT_SSH_COMMAND",
            "BASH_FUNC_x%%",
            "GIT_CONFIG_KEY_0",
        ] {
            assert!(reserved(key).is_some(), "{key}");
        }
        for key in ["GIT_AUTHOR_NAME", "GH_TOKEN", "LANG", "HOME", "ENVIRONMENT"] {
            assert!(reserved(key).is_none(), "{key}");
        }
    }
}
