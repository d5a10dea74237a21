//! The status pipe from inside the sandbox: `E<step>: <error>` when setup or
//! exec failed, `L<abi> <tcp> <scoped> <spare>` once Landlock is in force,
//! and `W<i32 wait status><u64 cpu µs><u64 max rss KiB>` (little-endian)
//! when the program ended and init has reaped everything. A record reported twice or an
//! unknown one means the pipe cannot be trusted, and the run is failed.

use super::Ending;

/// Decodes the status pipe: `E<step>\n` setup errors, `L<abi> <tcp> <scoped>\n`, `W<i32>`.
/// What init reported of the layers it applied: the Landlock ABI, whether
/// TCP and abstract-socket/signal scoping are enforced, and whether the
/// network namespace was made before the request (a spare sandbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// Landlock ABI enforced.
    pub abi: u32,
    /// TCP bind and connect denied.
    pub tcp_denied: bool,
    /// Abstract unix sockets and signals scoped.
    pub scoped: bool,
    /// The sandbox's namespaces, network namespace included, were made
    /// before the request (a spare sandbox), not at launch.
    pub netns_of_spare: bool,
}

/// What the program's processes used, as init measured once it had reaped
/// them all (`getrusage(RUSAGE_CHILDREN)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramUsage {
    /// User + system CPU time, ms.
    pub cpu_ms: u64,
    /// The largest resident set among them, bytes.
    pub max_rss_bytes: u64,
}

/// Bytes after a `W` tag.
const W_LEN: usize = 4 + 8 + 8;

pub(super) fn parse_status(
    bytes: &[u8],
    init_status: i32,
) -> (Ending, Option<Applied>, Option<ProgramUsage>) {
    let mut landlock = None;
    let mut usage = None;
    let mut ending = None;
    let mut rest = bytes;
    let garbled = |what: &str| {
        Ending::SetupFailed(format!(
            "the sandbox's status pipe is garbled ({what}); the result cannot be trusted"
        ))
    };
    let (mut seen_w, mut seen_l) = (false, false);
    while let Some((&tag, tail)) = rest.split_first() {
        let repeated = match tag {
            b'W' => std::mem::replace(&mut seen_w, true),
            b'L' => std::mem::replace(&mut seen_l, true),
            _ => false,
        };
        if repeated {
            return (garbled("a status reported twice"), None, None);
        }
        match tag {
            b'W' if tail.len() >= W_LEN => {
                let raw = i32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
                let u64_at = |i: usize| {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&tail[i..i + 8]);
                    u64::from_le_bytes(b)
                };
                usage = Some(ProgramUsage {
                    cpu_ms: u64_at(4) / 1000,
                    max_rss_bytes: u64_at(12).saturating_mul(1024),
                });
                // A setup or exec error reported before wins over the exit status that follows it.
                if !matches!(ending, Some(Ending::SetupFailed(_))) {
                    ending = Some(decode_wait(raw));
                }
                rest = &tail[W_LEN..];
            }
            b'E' | b'L' => {
                let end = tail.iter().position(|b| *b == b'\n').unwrap_or(tail.len());
                let text = String::from_utf8_lossy(&tail[..end]).into_owned();
                if tag == b'E' {
                    ending.get_or_insert(Ending::SetupFailed(text));
                } else {
                    let n: Vec<u32> = text.split(' ').filter_map(|x| x.parse().ok()).collect();
                    if let [abi, tcp, scoped, spare] = n.as_slice() {
                        landlock = Some(Applied {
                            abi: *abi,
                            tcp_denied: *tcp == 1,
                            scoped: *scoped == 1,
                            netns_of_spare: *spare == 1,
                        });
                    }
                }
                rest = tail.get(end + 1..).unwrap_or_default();
            }
            _ => return (garbled("unknown record"), None, None),
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

    /// A `W` record: wait status, CPU µs, max RSS KiB.
    fn w(status: i32, cpu_us: u64, rss_kib: u64) -> Vec<u8> {
        let mut v = vec![b'W'];
        v.extend_from_slice(&status.to_le_bytes());
        v.extend_from_slice(&cpu_us.to_le_bytes());
        v.extend_from_slice(&rss_kib.to_le_bytes());
        v
    }

    #[test]
    fn the_status_pipe_decodes_exit_signal_setup_errors_and_landlock() {
        let mut bytes = b"L7 1 1 0\n".to_vec();
        bytes.extend_from_slice(&w(3 << 8, 2_500, 1_024));
        assert_eq!(
            parse_status(&bytes, 0),
            (
                Ending::Exited(3),
                Some(Applied {
                    abi: 7,
                    tcp_denied: true,
                    scoped: true,
                    netns_of_spare: false
                }),
                Some(ProgramUsage {
                    cpu_ms: 2,
                    max_rss_bytes: 1 << 20
                })
            )
        );
        assert_eq!(parse_status(&w(9, 0, 0), 0).0, Ending::Signaled(9));
        // A short W record is garbled, not read past its end.
        let mut short = vec![b'W'];
        short.extend_from_slice(&9i32.to_le_bytes());
        assert!(matches!(parse_status(&short, 0).0, Ending::SetupFailed(_)));
        assert_eq!(
            parse_status(b"Emount(/usr): EPERM\n", 126 << 8).0,
            Ending::SetupFailed("mount(/usr): EPERM".into())
        );
        assert_eq!(parse_status(b"", 9).0, Ending::Signaled(9));
        let mut forged = w(0, 0, 0);
        forged.push(b'Z');
        assert!(matches!(parse_status(&forged, 0).0, Ending::SetupFailed(_)));
        let mut twice = w(0, 0, 0);
        twice.extend_from_slice(&w(0, 0, 0));
        assert!(matches!(parse_status(&twice, 0).0, Ending::SetupFailed(_)));
        let mut exec_failed = b"L7 1 1 0\nEexecveat(program, AT_EMPTY_PATH): EACCES\n".to_vec();
        exec_failed.extend_from_slice(&w(127 << 8, 0, 0));
        assert!(matches!(
            parse_status(&exec_failed, 0).0,
            Ending::SetupFailed(_)
        ));
    }
}
