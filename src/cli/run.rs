//! `spawnd run`: one spawn through [`crate::pipeline`], in this process
//! (single-threaded, so cloning is safe), or through a daemon's socket. Without `--json` the child's output
//! streams live and spawnd exits with the child's code (128+N after signal N,
//! 124 after a timeout); spawnd's own messages go to stderr prefixed `spawnd:`.

use crate::failure::FailureKind;
use std::path::Path;

use super::args::{Cli, RunArgs};
use super::check::load_request;
use super::output::{print_notice, Failure, Success};
use crate::pipeline::{self, Concluded, Pump, Spawn};
use crate::policy::Access;
use crate::sandbox::launch::StdinSource;
use crate::spawner::Spawner;
use crate::supervise::{LiveOutput, LiveView};

/// The exit code of a run whose program succeeded while spawnd refused
/// some of its network egress, under `--fail-on-refusal`.
pub(crate) const EXIT_NETWORK_REFUSED: i32 = 7;

/// `spawnd run`.
pub(crate) fn run(cli: &Cli, args: &RunArgs) -> Result<Success, Failure> {
    let mut ran = run_here_or_remote(cli, args)?;
    if args.fail_on_refusal {
        fail_on_refusal(&mut ran);
    }
    Ok(ran.into_success())
}

/// A run whose program exited 0 while spawnd refused some of its network
/// egress ends with [`EXIT_NETWORK_REFUSED`] (`data.failed_on_refusal`);
/// any other exit code stays as it is, the program's own failure first.
fn fail_on_refusal(ran: &mut Concluded) {
    let refused = ran
        .result
        .network
        .as_ref()
        .is_some_and(|n| !crate::pipeline::network_refusals(n).is_empty());
    if refused && ran.exit == 0 {
        ran.exit = EXIT_NETWORK_REFUSED;
        ran.result.failed_on_refusal = Some(true);
    }
}

fn run_here_or_remote(cli: &Cli, args: &RunArgs) -> Result<Concluded, Failure> {
    if let Some(socket) = &args.socket {
        return super::remote::run_remote(cli, args, socket);
    }
    // Forked first, while this process has one thread, as the daemon does.
    let spawner =
        match args.via_spawner {
            true => Some(Spawner::start().map_err(|e| {
                Failure::sandbox_unavailable(format!("spawner: {e}; nothing was run"))
            })?),
            false => None,
        };
    let prepared = load_request(cli, args)?;
    let (stdin, pump) = stdin_source(args.stdin_file.as_deref())?;
    let mut ran = pipeline::run(Spawn {
        prepared: &prepared,
        access: &Access::Local,
        stdin,
        pump,
        timeout_ms: args.timeout,
        live: live_output(cli.json, args.live),
        json: cli.json,
        spawner: spawner.as_ref(),
        on_started: None,
        signals_end_the_run: true,
        on_notice: &print_notice,
        trace: args.trace,
        ended_by: None,
        shared_connections: None,
        network_learning: None,
    })?;
    // The result is ready: the exit record is durable and init reaped.
    let process_us = u64::try_from(super::process_elapsed().as_micros()).unwrap_or(u64::MAX);
    ran.result.timings.process_us = Some(process_us);
    Ok(ran)
}

/// Where the program's output goes as it arrives: the terminal without
/// `--json`; spawnd's stderr with `--json --live`; nowhere else.
pub(super) fn live_output(json: bool, live: bool) -> Option<Box<dyn LiveOutput + Send>> {
    match (json, live) {
        (false, _) => Some(Box::new(LiveView::terminal())),
        (true, true) => Some(Box::new(LiveView::on_stderr())),
        (true, false) => None,
    }
}

fn stdin_source(path: Option<&Path>) -> Result<(StdinSource, Pump), Failure> {
    match path {
        None => Ok((StdinSource::Null, None)),
        Some(p) if p.as_os_str() == "-" => {
            Ok((StdinSource::Pipe, Some(Box::new(std::io::stdin()))))
        }
        Some(p) => {
            // O_NONBLOCK: opening a FIFO with no writer must not hang spawnd
            // before any time limit applies; reads go through the feeder thread.
            use std::os::unix::fs::OpenOptionsExt;
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(p);
            let file = opened
                .and_then(|f| {
                    let flags = nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_GETFL)
                        .map_err(std::io::Error::from)?;
                    let blocking = nix::fcntl::OFlag::from_bits_truncate(flags)
                        & !nix::fcntl::OFlag::O_NONBLOCK;
                    nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_SETFL(blocking))
                        .map_err(std::io::Error::from)?;
                    Ok(f)
                })
                .map_err(|e| {
                    Failure::from_io(
                        &e,
                        FailureKind::Usage,
                        format!("--stdin-file {}: {e}", p.display()),
                    )
                })?;
            // Copied through a pipe, whatever it is (a regular file, a tty, a
            // fifo): the child never holds the host file's descriptor, through
            // which it could change the file's mode or times (docs/sandbox.md).
            Ok((StdinSource::Pipe, Some(Box::new(file))))
        }
    }
}
