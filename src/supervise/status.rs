//! What the status pipe's messages ([`crate::sandbox::status_pipe`]) mean for
//! a run: how it ended, the layers that were in force and what the program
//! used. Garbled bytes mean the pipe cannot be trusted, and the run is failed.

use super::Ending;
pub(crate) use crate::sandbox::status_pipe::Applied;
use crate::sandbox::status_pipe::{decode, StatusMessage};

/// What the program's processes used, as init measured once it had reaped
/// them all (`getrusage(RUSAGE_CHILDREN)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ProgramUsage {
    /// User + system CPU time, ms.
    pub cpu_ms: u64,
    /// The largest resident set among them, bytes.
    pub max_rss_bytes: u64,
    /// It ended before any signal of spawnd's reached it.
    pub on_its_own: bool,
}

/// The run as the status pipe tells it, from everything read there and, for
/// an init that reported no ending, its own wait status.
pub(super) fn parse_status(
    bytes: &[u8],
    init_status: i32,
) -> (Ending, Option<Applied>, Option<ProgramUsage>) {
    let messages = match decode(bytes) {
        Ok(messages) => messages,
        Err(garbled) => {
            let failed = Ending::SetupFailed(format!(
                "the sandbox's status pipe is garbled ({garbled}); the result cannot be trusted"
            ));
            return (failed, None, None);
        }
    };
    let mut landlock = None;
    let mut usage = None;
    let mut ending = None;
    for message in messages {
        match message {
            StatusMessage::Ended(ended) => {
                usage = Some(ProgramUsage {
                    cpu_ms: ended.cpu_us / 1000,
                    max_rss_bytes: ended.max_rss_kib.saturating_mul(1024),
                    on_its_own: ended.on_its_own,
                });
                // A setup or exec error reported before wins over the exit status that follows it.
                if !matches!(ending, Some(Ending::SetupFailed(_))) {
                    ending = Some(decode_wait(ended.wait_status));
                }
            }
            StatusMessage::Failed(failed) => {
                ending.get_or_insert(Ending::SetupFailed(failed.to_string()));
            }
            StatusMessage::Layers(applied) => landlock = Some(applied),
        }
    }
    let ending = ending.unwrap_or_else(|| match decode_wait(init_status) {
        // init itself was killed (timeout or spawnd's signal): the program died with it.
        Ending::Signaled(s) => Ending::Signaled(s),
        Ending::Exited(code) => {
            Ending::SetupFailed(format!("sandbox init exited with {code} before reporting"))
        }
        other => other,
    });
    (ending, landlock, usage)
}

fn decode_wait(raw: i32) -> Ending {
    if libc::WIFEXITED(raw) {
        Ending::Exited(libc::WEXITSTATUS(raw))
    } else if libc::WIFSIGNALED(raw) {
        Ending::Signaled(libc::WTERMSIG(raw))
    } else {
        Ending::SetupFailed(format!("unexpected wait status {raw:#x}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::status_pipe::{encode_ended, encode_failed, encode_layers, ProgramEnded};
    use crate::sandbox::{Cause, SetupError, Step};

    /// A `Failed` line, its error as text.
    fn e(step: Step, call: &'static str, error: &str) -> Vec<u8> {
        let failed = SetupError::because(step, call, Cause::Other(error.into()));
        encode_failed(&failed).as_bytes().to_vec()
    }

    /// An `Ended` record: wait status, CPU µs, max RSS KiB.
    fn w(wait_status: i32, cpu_us: u64, max_rss_kib: u64) -> Vec<u8> {
        let ended = ProgramEnded {
            wait_status,
            cpu_us,
            max_rss_kib,
            on_its_own: true,
        };
        encode_ended(&ended).as_bytes().to_vec()
    }

    /// A `Layers` line: ABI 7, TCP denied, scoped, made at launch.
    fn layers_7() -> Vec<u8> {
        let applied = Applied {
            abi: 7,
            scoped: true,
            netns_of_spare: false,
            setup: None,
            idmapped: Vec::new(),
        };
        encode_layers(&applied).as_bytes().to_vec()
    }

    #[test]
    fn the_status_pipe_decodes_exit_signal_setup_errors_and_landlock() {
        let mut bytes = layers_7();
        bytes.extend_from_slice(&w(3 << 8, 2_500, 1_024));
        assert_eq!(
            parse_status(&bytes, 0),
            (
                Ending::Exited(3),
                Some(Applied {
                    abi: 7,
                    scoped: true,
                    netns_of_spare: false,
                    setup: None,
                    idmapped: Vec::new(),
                }),
                Some(ProgramUsage {
                    cpu_ms: 2,
                    max_rss_bytes: 1 << 20,
                    on_its_own: true,
                })
            )
        );
        assert_eq!(parse_status(&w(9, 0, 0), 0).0, Ending::Signaled(9));
        // A short W record is garbled, not read past its end.
        let short = &w(9, 0, 0)[..5];
        assert!(matches!(parse_status(short, 0).0, Ending::SetupFailed(_)));
        assert_eq!(
            parse_status(&e(Step::Root, "mount(/usr)", "EPERM"), 126 << 8).0,
            Ending::SetupFailed("mount(/usr): EPERM".into())
        );
        assert_eq!(parse_status(b"", 9).0, Ending::Signaled(9));
        let mut forged = w(0, 0, 0);
        forged.push(b'Z');
        assert!(matches!(parse_status(&forged, 0).0, Ending::SetupFailed(_)));
        let mut twice = w(0, 0, 0);
        twice.extend_from_slice(&w(0, 0, 0));
        assert!(matches!(parse_status(&twice, 0).0, Ending::SetupFailed(_)));
        let mut exec_failed = layers_7();
        exec_failed.extend_from_slice(&e(Step::Exec, "execveat(program, AT_EMPTY_PATH)", "EACCES"));
        exec_failed.extend_from_slice(&w(127 << 8, 0, 0));
        assert!(matches!(
            parse_status(&exec_failed, 0).0,
            Ending::SetupFailed(_)
        ));
    }
}
