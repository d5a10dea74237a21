//! spawnd-probe: a hostile program for spawnd's escape suite. It performs one
//! named attack and reports, from inside, whether it worked:
//!
//! ```text
//! spawnd-probe list [--json]
//! spawnd-probe <attack> [ARG...]
//! {"attack":"…","outcome":"blocked"|"escaped","detail":"…"}
//! ```
//!
//! Exit 0 when blocked, 1 when escaped, 2 on a usage error. The suite runs it
//! inside the sandbox (expecting "blocked") and outside as a control
//! (expecting "escaped" where the attack can work at all). Every attack keeps
//! the host intact when run unconfined as root: see each `about` text.
//!
//! It builds for x86_64 and aarch64. The attacks on entry points only x86_64
//! has (x32 and i386 system calls, iopl) exist only in the x86_64 build; the
//! others call the `*at` forms where aarch64 lacks the older calls (see
//! `attacks/modes.rs`).

mod attacks;
mod child;
mod consts;
mod report;
mod sys;

use std::io::Write;
use std::process::ExitCode;

use attacks::{Attack, Channel, ATTACKS};
use report::{Args, Verdict};

const USAGE: &str = "usage: spawnd-probe list [--json] | spawnd-probe <attack> [ARG...]";

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(command) = argv.first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if command == "list" {
        return list(argv.get(1).map(String::as_str));
    }
    if command == "-h" || command == "--help" || command == "help" {
        println!("{USAGE}\nrun `spawnd-probe list` for the attacks");
        return ExitCode::SUCCESS;
    }
    let Some(attack) = attacks::find(command) else {
        eprintln!("spawnd-probe: unknown attack {command:?}\n{USAGE}");
        return ExitCode::from(2);
    };
    match (attack.run)(&Args::new(&argv[1..])) {
        Ok(verdict) => report(attack, verdict),
        Err(error) => {
            eprintln!(
                "spawnd-probe {}: {error}\nusage: spawnd-probe {} {}",
                attack.name, attack.name, attack.usage
            );
            ExitCode::from(2)
        }
    }
}

fn list(option: Option<&str>) -> ExitCode {
    match option {
        None => {
            for a in ATTACKS {
                println!("{}\t{}\t{}\t{}", a.name, a.group, a.usage, a.about);
            }
        }
        Some("--json") => {
            let entries: Vec<_> = ATTACKS
                .iter()
                .map(|a| {
                    serde_json::json!({
                        "name": a.name,
                        "group": a.group.to_string(),
                        "usage": a.usage,
                        "about": a.about,
                        "reports_on": if a.channel == Channel::Stderr { "stderr" } else { "stdout" },
                    })
                })
                .collect();
            println!("{}", serde_json::Value::Array(entries));
        }
        Some(other) => {
            eprintln!("spawnd-probe list: unknown option {other:?}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}

fn report(attack: &Attack, verdict: Verdict) -> ExitCode {
    let line = report_line(attack.name, &verdict);
    // A failed write (closed pipe) cannot be reported anywhere else; the exit
    // code still carries the outcome.
    let _ = match attack.channel {
        Channel::Stdout => {
            writeln!(std::io::stdout(), "{line}").and_then(|()| std::io::stdout().flush())
        }
        Channel::Stderr => writeln!(std::io::stderr(), "{line}"),
    };
    if let Some(then) = verdict.then {
        then();
    }
    ExitCode::from(verdict.outcome.exit_code() as u8)
}

/// The report line, keys in the documented order.
fn report_line(name: &str, verdict: &Verdict) -> String {
    let text = |s: &str| serde_json::Value::from(s).to_string();
    format!(
        "{{\"attack\":{},\"outcome\":{},\"detail\":{}}}",
        text(name),
        text(verdict.outcome.as_str()),
        text(&verdict.detail)
    )
}
