//! The messages a sandbox's init sends its parent on the status pipe, each
//! tagged by its first byte ([`StatusKind`]):
//!
//! - `E<step byte><call>\0<error>\n` ([`StatusKind::Failed`]): a setup
//!   step or the program's exec failed, so the program did not run (the
//!   [`Step`]'s byte, then the call and what it applied to, a NUL, and the
//!   error as text: a [`SetupError`] that decodes as one);
//! - `L<abi> <scoped> <spare> <ready µs> <release wait µs>[ idmapped=<i>,…]\n`
//!   ([`StatusKind::Layers`]): the layers in force and init's times on its
//!   setup (decimal numbers, `scoped` and `spare` 0 or 1; an init that does
//!   not time its setup sends the first three alone), and the scopes
//!   mounted idmapped, by index, when there are any; sent once, just
//!   before the program starts;
//! - `W<i32 wait status><u64 cpu µs><u64 max rss KiB>` ([`StatusKind::Ended`]),
//!   little-endian and of fixed length: the program ended and init has
//!   reaped everything. Init's last word.
//!
//! The child side encodes ([`encode_failed`], [`encode_layers`],
//! [`encode_ended`], written by [`send`]) on the stack unless a text is long,
//! so a message with a short text allocates nothing. The program's own
//! process, which shares init's memory until it executes, reports its
//! failure through [`crate::sys::ProgramStart`], given the tag by init
//! ([`StatusKind::tag`]): `sys` knows nothing of the crate above it.
//!
//! The parent side decodes: [`decode`] turns everything read into messages
//! or refuses it as [`Garbled`]; [`setup_over`] and [`end_arrived`] mark the
//! phases while the bytes arrive; [`read_dead_init_report`] reads, through
//! [`decode`], the report of an init that died before its program started
//! (for a launch in this process and for the daemon's spawner alike).

use std::fmt::{self, Write as _};
use std::os::fd::{AsFd, BorrowedFd};

use super::{Cause, SetupError, Step};

/// The tag of a [`StatusKind::Failed`] line.
pub(crate) const FAILED_TAG: u8 = b'E';
/// Ends the call of a [`StatusKind::Failed`] line, before its error.
pub(crate) const FAILED_CALL_END: u8 = 0;
/// The tag of a [`StatusKind::Layers`] line.
pub(crate) const LAYERS_TAG: u8 = b'L';
/// The tag of a [`StatusKind::Ended`] record.
pub(crate) const ENDED_TAG: u8 = b'W';

/// The kind of a message, its tag byte as the discriminant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum StatusKind {
    /// `E<step byte><call>\0<error>\n`: setup or exec failed.
    Failed = FAILED_TAG,
    /// `L<abi> <scoped> <spare> <ready µs> <release wait µs>\n`: the layers
    /// in force, and init's times.
    Layers = LAYERS_TAG,
    /// `W` and 20 bytes: the program ended.
    Ended = ENDED_TAG,
}

impl StatusKind {
    /// The byte that starts a message of this kind.
    pub(crate) const fn tag(self) -> u8 {
        self as u8
    }

    /// The kind a tag byte starts, if any.
    pub(crate) const fn from_tag(tag: u8) -> Option<StatusKind> {
        match tag {
            FAILED_TAG => Some(StatusKind::Failed),
            LAYERS_TAG => Some(StatusKind::Layers),
            ENDED_TAG => Some(StatusKind::Ended),
            _ => None,
        }
    }
}

/// What init reported of the layers it applied: the Landlock ABI, whether
/// TCP and abstract-socket/signal scoping are enforced, and whether the
/// network namespace was made before the request (a spare sandbox); and how
/// long its own setup took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Applied {
    /// Landlock ABI enforced.
    pub abi: u32,
    /// Abstract unix sockets and signals scoped.
    pub scoped: bool,
    /// The sandbox's namespaces, network namespace included, were made
    /// before the request (a spare sandbox), not at launch.
    pub netns_of_spare: bool,
    /// Init's own clock on its setup (absent from an init that did not say).
    pub setup: Option<SetupTimes>,
    /// The scopes (indices into `spec.scopes`, ascending) mounted
    /// idmapped ([`super::idmap`]).
    pub idmapped: Vec<u32>,
}

/// Init's setup as init timed it, in µs: the part of the sandbox's path
/// that a supervisor's clock cannot split from the audit record's commit
/// running beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SetupTimes {
    /// From init's start on its order until it stood confined, ready for
    /// the program: cgroups, root, identity, Landlock, seccomp, and a
    /// fresh clone's wait for its id maps.
    pub ready_us: u32,
    /// From ready until the release came, which is once the audit record
    /// is durable: near 0 when the sandbox's setup was the longer.
    pub release_wait_us: u32,
}

/// How the program ended and what its processes used, as init measured
/// once it had reaped them all (`getrusage(RUSAGE_CHILDREN)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProgramEnded {
    /// The program's raw wait status.
    pub wait_status: i32,
    /// User + system CPU time, µs.
    pub cpu_us: u64,
    /// The largest resident set among them, KiB.
    pub max_rss_kib: u64,
    /// The program ended before init forwarded it any signal of spawnd's
    /// (the wall time's SIGTERM, an interruption): it ended on its own,
    /// however close to a deadline.
    pub on_its_own: bool,
}

/// One message, as decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StatusMessage {
    /// Setup or exec failed: the step, the call and its error, as init
    /// wrote them (the error as text).
    Failed(SetupError),
    /// The layers in force.
    Layers(Applied),
    /// The program ended.
    Ended(ProgramEnded),
}

/// Why the bytes read cannot be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Garbled {
    /// A message init sends once came twice.
    Repeated,
    /// A byte where a message should start is no tag, an `Ended` record
    /// is cut short, or a `Failed` line names no step or has no error.
    UnknownRecord,
}

impl fmt::Display for Garbled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Garbled::Repeated => "a status reported twice",
            Garbled::UnknownRecord => "unknown record",
        })
    }
}

/// Bytes of an `Ended` record after its tag.
const ENDED_BODY: usize = 4 + 8 + 8 + 1;

/// An encoded message: on the stack, or on the heap when its text does not
/// fit there.
pub(crate) struct Encoded {
    stack: [u8; STACK_LINE],
    len: usize,
    heap: Option<Vec<u8>>,
}

/// How long a message may be and still be encoded on the stack.
const STACK_LINE: usize = 512;

impl Encoded {
    fn new() -> Encoded {
        Encoded {
            stack: [0; STACK_LINE],
            len: 0,
            heap: None,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        if let Some(heap) = &mut self.heap {
            heap.extend_from_slice(bytes);
        } else if let Some(room) = self.stack.get_mut(self.len..self.len + bytes.len()) {
            room.copy_from_slice(bytes);
            self.len += bytes.len();
        } else {
            let mut heap = self.stack[..self.len].to_vec();
            heap.extend_from_slice(bytes);
            self.heap = Some(heap);
        }
    }

    /// The message's bytes, as they go down the pipe.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match &self.heap {
            Some(heap) => heap,
            None => &self.stack[..self.len],
        }
    }
}

impl fmt::Write for Encoded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push(s.as_bytes());
        Ok(())
    }
}

/// `E<step byte><call>\0<error>\n`: a setup step or the exec failed.
pub(crate) fn encode_failed(error: &SetupError) -> Encoded {
    let mut line = Encoded::new();
    line.push(&[StatusKind::Failed.tag(), error.step.byte()]);
    line.push(error.call.as_bytes());
    line.push(&[FAILED_CALL_END]);
    // Writing into `Encoded` cannot fail; only a `Display` that fails could.
    let _ = write!(line, "{}", error.source);
    line.push(b"\n");
    line
}

/// `L<abi> <scoped> <spare>[ <ready µs> <release wait µs>]\n`: the layers
/// in force, and init's times when it has them.
pub(crate) fn encode_layers(applied: &Applied) -> Encoded {
    let mut line = Encoded::new();
    line.push(&[StatusKind::Layers.tag()]);
    let _ = write!(
        line,
        "{} {} {}",
        applied.abi,
        u8::from(applied.scoped),
        u8::from(applied.netns_of_spare)
    );
    if let Some(t) = applied.setup {
        let _ = write!(line, " {} {}", t.ready_us, t.release_wait_us);
    }
    for (n, index) in applied.idmapped.iter().enumerate() {
        let lead = if n == 0 { " idmapped=" } else { "," };
        let _ = write!(line, "{lead}{index}");
    }
    line.push(b"\n");
    line
}

/// `W<i32 wait status><u64 cpu µs><u64 max rss KiB><u8 on its own>`,
/// little-endian: the program ended.
pub(crate) fn encode_ended(ended: &ProgramEnded) -> Encoded {
    let mut record = Encoded::new();
    record.push(&[StatusKind::Ended.tag()]);
    record.push(&ended.wait_status.to_le_bytes());
    record.push(&ended.cpu_us.to_le_bytes());
    record.push(&ended.max_rss_kib.to_le_bytes());
    record.push(&[u8::from(ended.on_its_own)]);
    record
}

/// Writes one message to the status pipe in one `write` (a pipe keeps it
/// whole). A failed write is not reported: the pipe is init's only way to
/// report anything, and the parent then learns from init's exit instead.
pub(crate) fn send(status: impl AsFd, message: &Encoded) {
    let _ = nix::unistd::write(status, message.as_bytes());
}

/// Everything read from the status pipe so far, as messages. A message
/// init sends once (`Layers`, `Ended`) coming twice, or a byte that starts
/// no message, garbles the whole: nothing of it can be trusted. A `Failed`
/// or `Layers` line not yet ended by its newline runs to the end of the
/// bytes; a `Layers` line that is not three or five numbers is left out.
pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<StatusMessage>, Garbled> {
    let mut messages = Vec::new();
    let mut rest = bytes;
    let (mut seen_ended, mut seen_layers) = (false, false);
    while let Some((&tag, tail)) = rest.split_first() {
        let kind = StatusKind::from_tag(tag);
        let repeated = match kind {
            Some(StatusKind::Ended) => std::mem::replace(&mut seen_ended, true),
            Some(StatusKind::Layers) => std::mem::replace(&mut seen_layers, true),
            _ => false,
        };
        if repeated {
            return Err(Garbled::Repeated);
        }
        match kind {
            Some(StatusKind::Ended) if tail.len() >= ENDED_BODY => {
                messages.push(StatusMessage::Ended(decode_ended(&tail[..ENDED_BODY])));
                rest = &tail[ENDED_BODY..];
            }
            Some(kind @ (StatusKind::Failed | StatusKind::Layers)) => {
                let end = tail.iter().position(|b| *b == b'\n').unwrap_or(tail.len());
                let line = &tail[..end];
                if kind == StatusKind::Failed {
                    let failed = decode_failed(line).ok_or(Garbled::UnknownRecord)?;
                    messages.push(StatusMessage::Failed(failed));
                } else if let Some(applied) = decode_layers(&String::from_utf8_lossy(line)) {
                    messages.push(StatusMessage::Layers(applied));
                }
                rest = tail.get(end + 1..).unwrap_or_default();
            }
            _ => return Err(Garbled::UnknownRecord),
        }
    }
    Ok(messages)
}

/// A `Failed` line after its tag: the step's byte, the call up to
/// [`FAILED_CALL_END`], then the error.
fn decode_failed(line: &[u8]) -> Option<SetupError> {
    let (&step, rest) = line.split_first()?;
    let step = Step::from_byte(step)?;
    let end = rest.iter().position(|b| *b == FAILED_CALL_END)?;
    let call = String::from_utf8_lossy(&rest[..end]).into_owned();
    let error = String::from_utf8_lossy(&rest[end + 1..]).into_owned();
    Some(SetupError::because(step, call, Cause::Other(error)))
}

/// An `Ended` record's body: exactly [`ENDED_BODY`] bytes.
fn decode_ended(body: &[u8]) -> ProgramEnded {
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&body[i..i + 8]);
        u64::from_le_bytes(b)
    };
    ProgramEnded {
        wait_status: i32::from_le_bytes([body[0], body[1], body[2], body[3]]),
        cpu_us: u64_at(4),
        max_rss_kib: u64_at(12),
        on_its_own: body[20] == 1,
    }
}

/// A `Layers` line's text: three numbers, the flags true only when 1,
/// init's two times when it sent them, and `idmapped=` with the idmapped
/// scopes' indices when there are any; anything else is no line.
fn decode_layers(text: &str) -> Option<Applied> {
    let (text, idmapped) = match text.rsplit_once(" idmapped=") {
        Some((numbers, list)) => (
            numbers,
            list.split(',')
                .map(str::parse)
                .collect::<Result<Vec<u32>, _>>()
                .ok()?,
        ),
        None => (text, Vec::new()),
    };
    let n: Vec<u32> = text
        .split(' ')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let (flags, setup) = match n.as_slice() {
        [flags @ .., ready_us, release_wait_us] if flags.len() == 3 => (
            flags,
            Some(SetupTimes {
                ready_us: *ready_us,
                release_wait_us: *release_wait_us,
            }),
        ),
        flags => (flags, None),
    };
    match flags {
        [abi, scoped, spare] => Some(Applied {
            abi: *abi,
            scoped: *scoped == 1,
            netns_of_spare: *spare == 1,
            setup,
            idmapped,
        }),
        _ => None,
    }
}

/// Whether init's first message has begun and is one it sends once its
/// setup is over: the layers in force, or a failure.
pub(crate) fn setup_over(bytes: &[u8]) -> bool {
    bytes.first().is_some_and(|b| {
        matches!(
            StatusKind::from_tag(*b),
            Some(StatusKind::Layers | StatusKind::Failed)
        )
    })
}

/// Whether the `Ended` tag has arrived: the mark of the program's end,
/// checked on every read. A `W` anywhere counts, in the text of an earlier
/// `Failed` line too; only the phase timings read this mark.
pub(crate) fn end_arrived(bytes: &[u8]) -> bool {
    bytes.contains(&StatusKind::Ended.tag())
}

/// What an init that died before its program started reported: the first
/// `Failed` message of everything it wrote, its error marked as reported
/// ([`Cause::Reported`]). Reads until that message is whole or the pipe
/// ends (its other holders, the sandbox's last processes, are being killed
/// with it), for at most a second; `None` when init reported no failure.
pub(crate) fn read_dead_init_report(status: BorrowedFd<'_>) -> Option<SetupError> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
    let mut report = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        let timeout = PollTimeout::try_from(left.as_millis() as i32).unwrap_or(PollTimeout::ZERO);
        let mut fds = [PollFd::new(status, PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(1..) => match nix::unistd::read(status, &mut buf) {
                Ok(n @ 1..) => {
                    report.extend_from_slice(&buf[..n]);
                    if report.ends_with(b"\n") && first_failure(&report).is_some() {
                        break;
                    }
                }
                _ => break,
            },
            Ok(_) => break,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    let mut failed = first_failure(&report)?;
    if let Cause::Other(text) = failed.source {
        failed.source = Cause::Reported(text);
    }
    Some(failed)
}

/// The first `Failed` message among everything read, if the bytes decode.
fn first_failure(report: &[u8]) -> Option<SetupError> {
    decode(report).ok()?.into_iter().find_map(|m| match m {
        StatusMessage::Failed(failed) => Some(failed),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENDED_3: ProgramEnded = ProgramEnded {
        wait_status: 3 << 8,
        cpu_us: 2_500,
        max_rss_kib: 1_024,
        on_its_own: true,
    };

    const LAYERS_7: Applied = Applied {
        abi: 7,
        scoped: true,
        netns_of_spare: false,
        setup: None,
        idmapped: Vec::new(),
    };

    /// The wire bytes, written out.
    /// An `Ended` record of a program that ended on its own.
    fn ended_bytes(status: i32, cpu_us: u64, rss_kib: u64) -> Vec<u8> {
        let mut v = b"W".to_vec();
        v.extend_from_slice(&status.to_le_bytes());
        v.extend_from_slice(&cpu_us.to_le_bytes());
        v.extend_from_slice(&rss_kib.to_le_bytes());
        v.push(1);
        v
    }

    #[test]
    fn each_kind_is_tagged_by_its_letter() {
        for (kind, tag) in [
            (StatusKind::Failed, b'E'),
            (StatusKind::Layers, b'L'),
            (StatusKind::Ended, b'W'),
        ] {
            assert_eq!(kind.tag(), tag);
            assert_eq!(StatusKind::from_tag(tag), Some(kind));
        }
        assert_eq!(StatusKind::from_tag(b'Z'), None);
    }

    /// A failed step whose error is text.
    fn failed(step: Step, call: &'static str, error: &str) -> SetupError {
        SetupError::because(step, call, Cause::Other(error.into()))
    }

    #[test]
    fn the_encoders_write_the_wire_bytes() {
        assert_eq!(
            encode_failed(&failed(Step::Root, "mount(/usr)", "EPERM")).as_bytes(),
            b"Ermount(/usr)\0EPERM\n"
        );
        // An OS error goes as `io::Error` shows it.
        let os = SetupError::new(Step::Landlock, "landlock", nix::Error::E2BIG.into());
        let shown = std::io::Error::from_raw_os_error(libc::E2BIG).to_string();
        assert_eq!(
            encode_failed(&os).as_bytes(),
            format!("Ellandlock\0{shown}\n").as_bytes()
        );
        assert_eq!(encode_layers(&LAYERS_7).as_bytes(), b"L7 1 0\n");
        let spare = Applied {
            abi: 6,
            scoped: true,
            netns_of_spare: true,
            setup: Some(SetupTimes {
                ready_us: 480,
                release_wait_us: 2,
            }),
            idmapped: Vec::new(),
        };
        assert_eq!(encode_layers(&spare).as_bytes(), b"L6 1 1 480 2\n");
        assert_eq!(
            encode_ended(&ENDED_3).as_bytes(),
            ended_bytes(3 << 8, 2_500, 1_024).as_slice()
        );
    }

    #[test]
    fn a_failure_longer_than_the_stack_line_is_encoded_whole() {
        let text = "x".repeat(3 * STACK_LINE);
        let line = encode_failed(&failed(Step::Root, "mount", &text));
        assert_eq!(
            line.as_bytes().len(),
            text.len() + "Er".len() + "mount".len() + 2
        );
        assert_eq!(line.as_bytes()[0], b'E');
        assert_eq!(line.as_bytes().last(), Some(&b'\n'));
    }

    #[test]
    fn what_is_encoded_decodes_to_the_same_messages() {
        let mut bytes = encode_layers(&LAYERS_7).as_bytes().to_vec();
        let exec = failed(Step::Exec, "execveat(program)", "EACCES");
        bytes.extend_from_slice(encode_failed(&exec).as_bytes());
        bytes.extend_from_slice(encode_ended(&ENDED_3).as_bytes());
        assert_eq!(
            decode(&bytes),
            Ok(vec![
                StatusMessage::Layers(LAYERS_7),
                StatusMessage::Failed(exec),
                StatusMessage::Ended(ENDED_3),
            ])
        );
    }

    #[test]
    fn garbled_bytes_are_refused_whole() {
        let mut twice = ended_bytes(0, 0, 0);
        twice.extend_from_slice(&ended_bytes(0, 0, 0));
        assert_eq!(decode(&twice), Err(Garbled::Repeated));
        assert_eq!(decode(b"L7 1 0\nL7 1 0\n"), Err(Garbled::Repeated));
        let mut forged = ended_bytes(0, 0, 0);
        forged.push(b'Z');
        assert_eq!(decode(&forged), Err(Garbled::UnknownRecord));
        // A short `Ended` record is not read past its end.
        assert_eq!(
            decode(&ended_bytes(9, 0, 0)[..5]),
            Err(Garbled::UnknownRecord)
        );
        // Failures may come more than once; the first is what counts above.
        assert_eq!(decode(b"Eia\0x\nEib\0y\n").map(|m| m.len()), Ok(2));
        // A failure names a step and ends its call before its error.
        assert_eq!(decode(b"E?a\0x\n"), Err(Garbled::UnknownRecord));
        assert_eq!(decode(b"Eia: x\n"), Err(Garbled::UnknownRecord));
    }

    #[test]
    fn an_unfinished_line_runs_to_the_end_and_unreadable_layers_are_left_out() {
        assert_eq!(
            decode(b"Ermount(/usr)\0EPE"),
            Ok(vec![StatusMessage::Failed(failed(
                Step::Root,
                "mount(/usr)",
                "EPE"
            ))])
        );
        assert_eq!(decode(b"L7 x 0\n"), Ok(vec![]));
        assert_eq!(decode(b"L7 1 0 480\n"), Ok(vec![]));
        assert_eq!(decode(b"L7 1 0 x 480 2\n"), Ok(vec![]));
        assert_eq!(decode(b"L7 1 0 480 2 \n"), Ok(vec![]));
    }

    #[test]
    fn inits_times_decode_when_sent_and_are_absent_otherwise() {
        let timed = Applied {
            setup: Some(SetupTimes {
                ready_us: 480,
                release_wait_us: 0,
            }),
            ..LAYERS_7
        };
        assert_eq!(
            decode(encode_layers(&timed).as_bytes()),
            Ok(vec![StatusMessage::Layers(timed)])
        );
        assert_eq!(
            decode(b"L7 1 0\n"),
            Ok(vec![StatusMessage::Layers(LAYERS_7)])
        );
    }

    #[test]
    fn idmapped_scopes_travel_by_index_after_the_times() {
        let idmapped = Applied {
            setup: Some(SetupTimes {
                ready_us: 480,
                release_wait_us: 3,
            }),
            idmapped: vec![0, 2, 17],
            ..LAYERS_7
        };
        let bytes = encode_layers(&idmapped);
        assert_eq!(bytes.as_bytes(), b"L7 1 0 480 3 idmapped=0,2,17\n");
        assert_eq!(
            decode(bytes.as_bytes()),
            Ok(vec![StatusMessage::Layers(idmapped)])
        );
        // None idmapped: nothing is added to the line.
        assert_eq!(encode_layers(&LAYERS_7).as_bytes(), b"L7 1 0\n");
        // An unreadable list leaves the line out, as any unreadable number does.
        assert_eq!(decode(b"L7 1 0 480 3 idmapped=0,x\n"), Ok(vec![]));
        assert_eq!(decode(b"L7 1 0 480 3 idmapped=\n"), Ok(vec![]));
    }

    #[test]
    fn the_phase_marks_read_the_first_tag_and_any_end_tag() {
        assert!(setup_over(b"L7"));
        assert!(setup_over(b"Ex"));
        assert!(!setup_over(&ended_bytes(0, 0, 0)));
        assert!(!setup_over(b""));
        assert!(end_arrived(b"L7 1 0\nW"));
        assert!(!end_arrived(b"L7 1 0\n"));
    }

    /// What a dead init wrote, in a pipe whose write end is closed.
    fn report_of(bytes: &[u8]) -> Option<SetupError> {
        let (r, w) = nix::unistd::pipe().unwrap();
        nix::unistd::write(&w, bytes).unwrap();
        drop(w);
        read_dead_init_report(r.as_fd())
    }

    #[test]
    fn a_dead_inits_failure_is_read_through_the_one_decoder_and_marked_reported() {
        let mut bytes = b"L7 1 0\n".to_vec();
        let mount = failed(
            Step::Root,
            "mount(/usr)",
            "Operation not permitted (os error 1)",
        );
        bytes.extend_from_slice(encode_failed(&mount).as_bytes());
        let reported = report_of(&bytes).unwrap();
        assert_eq!(reported.step, Step::Root);
        assert_eq!(
            reported.to_string(),
            "mount(/usr): Operation not permitted (os error 1): reported by the sandbox"
        );
        assert_eq!(report_of(b"L7 1 0\n"), None);
        assert_eq!(report_of(b""), None);
    }

    #[test]
    fn a_dead_inits_report_is_read_until_its_failure_is_whole_while_the_pipe_stays_open() {
        let (r, w) = nix::unistd::pipe().unwrap();
        let mount = failed(Step::Root, "mount(/usr)", "EPERM");
        nix::unistd::write(&w, encode_failed(&mount).as_bytes()).unwrap();
        let started = std::time::Instant::now();
        // The write end stays open (a process of the sandbox not yet gone).
        assert_eq!(
            read_dead_init_report(r.as_fd()).map(|e| e.step),
            Some(Step::Root)
        );
        assert!(started.elapsed() < std::time::Duration::from_millis(500));
        drop(w);
    }
}
