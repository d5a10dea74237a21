//! The observed argv as the operation's template: flags and bare words
//! literal, every other value a placeholder defaulting to it.

use std::path::Path;

use super::Host;

/// An argv placeholder the draft offers.
pub(super) struct Param {
    pub(super) name: String,
    pub(super) default: String,
    pub(super) path: bool,
    /// The option whose value it is (`-c`, `--output=`), if any.
    pub(super) option: Option<String>,
}

/// The observed argv as template tokens (the array form: a token may hold
/// spaces) and the placeholders it uses. Flags and bare words stay
/// literal; every other value becomes a placeholder defaulting to it, a
/// `path` when it names one.
pub(super) fn template(argv: &[String], cwd: &Path, host: &dyn Host) -> (Vec<String>, Vec<Param>) {
    let mut tokens = Vec::new();
    let mut params: Vec<Param> = Vec::new();
    let mut previous_flag: Option<String> = None;
    let mut after_flag: Option<String> = None;
    for (i, arg) in argv.iter().enumerate() {
        let names_path = |v: &str| {
            !v.is_empty()
                && (v.starts_with('/') || v.starts_with("./") || host.exists(&cwd.join(v)))
        };
        if i == 0 {
            tokens.push(escape_braces(arg));
            continue;
        }
        let literal = is_flag(arg) || (is_word(arg) && !host.exists(&cwd.join(arg)));
        if literal {
            tokens.push(escape_braces(arg));
            previous_flag = arg
                .starts_with("--")
                .then(|| arg.trim_start_matches('-').to_string());
            after_flag = is_flag(arg).then(|| arg.clone());
            continue;
        }
        let option = match after_flag.take() {
            Some(flag) => Some(flag),
            None => arg
                .split_once('=')
                .filter(|(k, _)| k.starts_with("--") && is_flag(k))
                .map(|(k, _)| format!("{k}=")),
        };
        let (prefix, value) = match arg.split_once('=') {
            Some((k, v)) if k.starts_with("--") && is_flag(k) && !v.is_empty() => {
                (format!("{k}="), v.to_string())
            }
            _ => (String::new(), arg.clone()),
        };
        let base = if !prefix.is_empty() {
            prefix
                .trim_start_matches('-')
                .trim_end_matches('=')
                .to_string()
        } else {
            previous_flag.take().unwrap_or_else(|| format!("arg{i}"))
        };
        let mut name: String = base
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
            name = format!("arg_{name}");
        }
        while params.iter().any(|p| p.name == name) {
            name = format!("{name}_{i}");
        }
        tokens.push(format!("{}{{{name}}}", escape_braces(&prefix)));
        params.push(Param {
            path: names_path(&value) && !value.contains("://"),
            name,
            default: value,
            option,
        });
    }
    (tokens, params)
}

/// `-x`, `--name`: a dash or two, then a letter or digit, then letters,
/// digits, `_`, `.` or `-`.
fn is_flag(s: &str) -> bool {
    let rest = s.strip_prefix("--").or_else(|| s.strip_prefix('-'));
    rest.is_some_and(|r| r.starts_with(|c: char| c.is_ascii_alphanumeric()) && is_word_tail(r))
}

/// `clone`, `unittest`: a letter, then letters, digits, `_`, `.` or `-`.
fn is_word(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic()) && is_word_tail(s)
}

fn is_word_tail(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

fn escape_braces(s: &str) -> String {
    s.replace('{', "{{").replace('}', "}}")
}
