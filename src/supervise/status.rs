//! The status pipe from inside the sandbox: `E<step>: <error>` when setup or
//! exec failed, `L<abi> <tcp> <scoped>` once Landlock is in force, and
//! `W<i32 wait status>` when the program ended. A record reported twice or an
//! unknown one means the pipe cannot be trusted, and the run is failed.

use super::Ending;

/// Decodes the status pipe: `E<step>\n` setup errors, `L<abi> <tcp> <scoped>\n`, `W<i32>`.
/// What init reported of the layers it applied: the Landlock ABI, whether
/// TCP and abstract-socket/signal scoping are enforced, and whether the
/// network namespace was made ahead of the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// Landlock ABI enforced.
    pub abi: u32,
    /// TCP bind and connect denied.
    pub tcp_denied: bool,
    /// Abstract unix sockets and signals scoped.
    pub scoped: bool,
    /// The network namespace was made ahead (by the spawner), not at clone.
    pub netns_made_ahead: bool,
}

pub(super) fn parse_status(bytes: &[u8], init_status: i32) -> (Ending, Option<Applied>) {
    let mut landlock = None;
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
            return (garbled("a status reported twice"), None);
        }
        match tag {
            b'W' if tail.len() >= 4 => {
                let raw = i32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
                // A setup or exec error reported before wins over the exit status that follows it.
                if !matches!(ending, Some(Ending::SetupFailed(_))) {
                    ending = Some(decode_wait(raw));
                }
                rest = &tail[4..];
            }
            b'E' | b'L' => {
                let end = tail.iter().position(|b| *b == b'\n').unwrap_or(tail.len());
                let text = String::from_utf8_lossy(&tail[..end]).into_owned();
                if tag == b'E' {
                    ending.get_or_insert(Ending::SetupFailed(text));
                } else {
                    let n: Vec<u32> = text.split(' ').filter_map(|x| x.parse().ok()).collect();
                    if let [abi, tcp, scoped, ahead] = n.as_slice() {
                        landlock = Some(Applied {
                            abi: *abi,
                            tcp_denied: *tcp == 1,
                            scoped: *scoped == 1,
                            netns_made_ahead: *ahead == 1,
                        });
                    }
                }
                rest = tail.get(end + 1..).unwrap_or_default();
            }
            _ => return (garbled("unknown record"), None),
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
    (ending, landlock)
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

    #[test]
    fn the_status_pipe_decodes_exit_signal_setup_errors_and_landlock() {
        let mut bytes = b"L7 1 1 0\n".to_vec();
        bytes.push(b'W');
        bytes.extend_from_slice(&(3i32 << 8).to_le_bytes());
        assert_eq!(
            parse_status(&bytes, 0),
            (
                Ending::Exited(3),
                Some(Applied {
                    abi: 7,
                    tcp_denied: true,
                    scoped: true,
                    netns_made_ahead: false
                })
            )
        );
        let mut bytes = vec![b'W'];
        bytes.extend_from_slice(&9i32.to_le_bytes());
        assert_eq!(parse_status(&bytes, 0).0, Ending::Signaled(9));
        assert_eq!(
            parse_status(b"Emount(/usr): EPERM\n", 126 << 8).0,
            Ending::SetupFailed("mount(/usr): EPERM".into())
        );
        assert_eq!(parse_status(b"", 9).0, Ending::Signaled(9));
        let mut forged = vec![b'W'];
        forged.extend_from_slice(&0i32.to_le_bytes());
        forged.push(b'Z');
        assert!(matches!(parse_status(&forged, 0).0, Ending::SetupFailed(_)));
        let mut twice = forged[..5].to_vec();
        twice.extend_from_slice(&forged[..5]);
        assert!(matches!(parse_status(&twice, 0).0, Ending::SetupFailed(_)));
        let mut exec_failed = b"L7 1 1 0\nEexecveat(program, AT_EMPTY_PATH): EACCES\nW".to_vec();
        exec_failed.extend_from_slice(&(127i32 << 8).to_le_bytes());
        assert!(matches!(
            parse_status(&exec_failed, 0).0,
            Ending::SetupFailed(_)
        ));
    }
}
