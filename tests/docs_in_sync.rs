//! The README's tables of reserved env keys and denial reasons must list every
//! entry of the code's tables, so documentation cannot drift from behaviour.

use spawnd::manifest::env_keys::RESERVED_ENV;
use spawnd::policy::REASONS;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md")
}

#[test]
fn every_reserved_env_key_is_in_the_readme() {
    let text = readme();
    for entry in RESERVED_ENV {
        let shown = if entry.prefix {
            format!("`{}*`", entry.key)
        } else {
            format!("`{}`", entry.key)
        };
        assert!(
            text.contains(&format!("| {shown} | {} |", entry.why)),
            "README lacks the row for {shown}"
        );
    }
}

#[test]
fn every_denial_reason_is_in_the_readme() {
    let text = readme();
    for r in REASONS {
        let row = format!(
            "| `{}` | `{}` | `{}` | {} |",
            r.reason.as_str(),
            r.reason.class(),
            r.detail,
            r.when
        );
        assert!(text.contains(&row), "README lacks the row {row}");
    }
}
