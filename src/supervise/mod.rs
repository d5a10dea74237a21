//! Supervising a started sandbox until it is gone: both output pipes drained
//! at once and hashed while streaming, each capped (the rest drained and
//! counted, never blocking the child), stdin pumped without ever blocking on
//! a child that does not read it, the wall-time limit enforced (SIGTERM to
//! init, which forwards it, then SIGKILL, which ends the whole pid namespace),
//! and SIGINT/SIGTERM/SIGHUP to spawnd itself turned into killing the sandbox.

use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;

use crate::manifest::Sha256Digest;
use crate::sandbox::cgroup::SpawnCgroup;
use crate::sandbox::launch::LocalSandbox;
use crate::sandbox::status_pipe::SetupTimes;
use crate::sys::wait_with_usage;

mod live;
pub(crate) mod redact;
mod status;
mod stream;
/// Durations of the phases of one spawn (a part of its result).
pub(crate) use crate::spawn_result::Phases;
pub(crate) use live::LiveView;
use status::parse_status;
pub(crate) use status::Applied;
use stream::{drain, read_some, Stream, FIRST_CHUNK};

/// How long a program gets between SIGTERM and SIGKILL after its wall time.
pub(crate) const GRACE: Duration = Duration::from_millis(1500);
/// How long output is still drained once init has exited.
const DRAIN_AFTER_INIT: Duration = Duration::from_millis(250);

/// A started sandbox as the supervisor sees it, wherever it was launched
/// (in this process, or by the daemon's spawner).
pub struct Watched<'a> {
    /// Read end of the program's stdout.
    pub stdout: OwnedFd,
    /// Read end of its stderr.
    pub stderr: OwnedFd,
    /// Read end of the status pipe.
    pub status: OwnedFd,
    /// Write end of the stdin pipe, when stdin is pumped.
    pub stdin: Option<OwnedFd>,
    /// When `clone` was called.
    pub cloned_at: Instant,
    /// When the ids were mapped (init went on to build the root).
    pub mapped_at: Instant,
    /// When the program was started (its go-ahead written): the wall-time clock starts here.
    pub started_at: Instant,
    /// The host pid of the sandbox's init (the program is its child).
    pub init_pid: i32,
    /// Signalling and reaping init.
    pub end: Box<dyn SandboxEnd + 'a>,
}

/// How the supervisor signals a sandbox's init and learns how it ended.
pub trait SandboxEnd {
    /// Sends `signal` to init (SIGKILL ends the whole pid namespace).
    fn signal(&self, signal: Signal);
    /// Waits until init is reaped; reads and removes its cgroups.
    fn reap(self: Box<Self>) -> std::io::Result<InitExit>;
    /// The cgroup readings (peak memory, OOM kill) available before init is
    /// reaped, when this end can give them; `None` means reap first.
    fn readings_before_reap(&self) -> Option<(Option<u64>, bool)> {
        None
    }
    /// Reaps init once its exit is on record (the readings were taken):
    /// [`SandboxEnd::reap`] without reading the cgroups again.
    fn reap_recorded(self: Box<Self>) -> std::io::Result<()> {
        self.reap().map(drop)
    }
    /// A way to kill the sandbox from another thread (the network relay's,
    /// for `on_violation = "terminate"`) that never signals a process that
    /// reused init's pid. Every real end has one; `None` only for an end
    /// that cannot be signalled from elsewhere (the caller then kills the
    /// sandbox rather than run it unguarded).
    fn killer(&self) -> Option<Killer>;
}

/// Kills a sandbox (SIGKILL to its init) from any thread.
pub(crate) type Killer = Box<dyn Fn() + Send + Sync>;

/// A [`Killer`] through a pidfd for init.
pub(crate) fn killer_through(pidfd: std::sync::Arc<std::os::fd::OwnedFd>) -> Killer {
    Box::new(move || {
        let _ = crate::sys::pidfd_send_signal(
            std::os::fd::AsFd::as_fd(&*pidfd),
            Signal::SIGKILL as i32,
        );
    })
}

/// How a sandbox's init ended, with what it used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InitExit {
    /// Init's raw wait status (the program's own travels on the status pipe).
    pub init_status: i32,
    /// CPU time of every process init reaped, in ms.
    pub cpu_ms: u64,
    /// Peak resident set size, bytes (the largest process).
    pub max_rss_bytes: u64,
    /// Peak memory of the whole sandbox from its cgroup, when it had one.
    pub cgroup_peak_bytes: Option<u64>,
    /// Whether the cgroup's OOM killer acted.
    pub oom_killed: bool,
}

/// Waits for `pid` (a child of this process), then reads and removes its cgroups.
pub(crate) fn reap_init(pid: i32, cgroup: Option<SpawnCgroup>) -> std::io::Result<InitExit> {
    let reaped = wait_with_usage(pid)?;
    let (cgroup_peak_bytes, oom_killed) =
        cgroup.as_ref().map_or((None, false), SpawnCgroup::readings);
    if let Some(cg) = cgroup {
        cg.remove();
    }
    Ok(InitExit {
        init_status: reaped.status,
        cpu_ms: reaped.cpu_ms,
        max_rss_bytes: reaped.max_rss_bytes,
        cgroup_peak_bytes,
        oom_killed,
    })
}

/// A sandbox launched by this process: init is our child.
struct LocalEnd {
    init: Pid,
    cgroup: Option<SpawnCgroup>,
    /// The go-ahead pipe's write end, held until init is reaped (init watches
    /// it to learn spawnd is alive).
    _go_ahead: OwnedFd,
}

impl SandboxEnd for LocalEnd {
    fn signal(&self, signal: Signal) {
        // Not yet reaped, so the pid cannot have been reused.
        let _ = kill(self.init, signal);
    }

    fn reap(self: Box<Self>) -> std::io::Result<InitExit> {
        let LocalEnd { init, cgroup, .. } = *self;
        reap_init(init.as_raw(), cgroup)
    }

    fn killer(&self) -> Option<Killer> {
        // Init is this process's child, not yet reaped: the pidfd is init's.
        // Without one (no descriptor left), its pid serves as well: the
        // killer is dropped with the relay, before init is reaped.
        match crate::sys::pidfd_open(self.init.as_raw()) {
            Ok(pidfd) => Some(killer_through(std::sync::Arc::new(pidfd))),
            Err(_) => {
                let init = self.init;
                Some(Box::new(move || {
                    let _ = kill(init, Signal::SIGKILL);
                }))
            }
        }
    }

    fn readings_before_reap(&self) -> Option<(Option<u64>, bool)> {
        Some(
            self.cgroup
                .as_ref()
                .map_or((None, false), SpawnCgroup::readings),
        )
    }

    fn reap_recorded(self: Box<Self>) -> std::io::Result<()> {
        let LocalEnd { init, cgroup, .. } = *self;
        wait_with_usage(init.as_raw())?;
        if let Some(cg) = cgroup {
            cg.remove();
        }
        Ok(())
    }
}

/// A sandbox whose program has ended and been reported, and whose init is
/// still leaving (the kernel tears its namespaces down meanwhile): reap it
/// once the exit is on record.
pub(crate) struct Leaving<'a>(Box<dyn SandboxEnd + 'a>);

impl Leaving<'_> {
    /// Waits for init and removes its cgroups.
    pub(crate) fn reap(self) -> std::io::Result<()> {
        self.0.reap_recorded()
    }
}

impl From<LocalSandbox> for Watched<'static> {
    fn from(r: LocalSandbox) -> Watched<'static> {
        Watched {
            stdout: r.stdout,
            stderr: r.stderr,
            status: r.status,
            stdin: r.stdin,
            cloned_at: r.cloned_at,
            mapped_at: r.mapped_at,
            started_at: r.started_at,
            init_pid: r.init_pid,
            end: Box::new(LocalEnd {
                init: Pid::from_raw(r.init_pid),
                cgroup: r.cgroup,
                _go_ahead: r.go_ahead,
            }),
        }
    }
}

/// What the supervisor enforces and where live output goes.
pub(crate) struct Supervision {
    /// Bytes of stdout kept.
    pub stdout_cap: u64,
    /// Bytes of stderr kept.
    pub stderr_cap: u64,
    /// Wall time.
    pub wall_time: Duration,
    /// Where kept bytes go as they arrive (spawnd's own stdout/stderr for
    /// `run`, a handle's buffers for the daemon); `None` keeps them only.
    pub live: Option<Box<dyn LiveOutput + Send>>,
    /// Bytes for the child's stdin pipe (spawnd's stdin, or request bytes).
    pub stdin: Option<Box<dyn Read + Send>>,
    /// Credential values to replace with `[REDACTED:KEY]` in both streams.
    pub redact: Vec<(String, crate::vault::Secret)>,
    /// SIGINT, SIGTERM or SIGHUP to this process kill the sandbox (`spawnd
    /// run`); the daemon keeps its signals for itself.
    pub signals_end_the_run: bool,
}

/// A receiver of output as it arrives: `which` is 0 for stdout, 1 for
/// stderr, and `kept` the bytes within the cap (the same bytes the result
/// holds and hashes).
pub trait LiveOutput {
    /// One chunk, kept in the result.
    fn chunk(&mut self, which: u8, kept: &[u8]);

    /// Output past the stream's cap, which the result does not keep
    /// (redacted all the same): a terminal shows it, a buffer drops it.
    fn past_cap(&mut self, _which: u8, _bytes: &[u8]) {}

    /// Output a remote reader fell too far behind to get (a daemon keeps
    /// only a window of the output past the cap).
    fn skipped(&mut self, _which: u8, _bytes: u64) {}
}

/// One captured stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Captured {
    /// The bytes kept (at most the cap).
    pub kept: Vec<u8>,
    /// Everything the child wrote.
    pub total: u64,
    /// Whether bytes were dropped.
    pub truncated: bool,
    /// SHA-256 of exactly `kept`.
    pub sha256: Sha256Digest,
    /// Credential values replaced by `[REDACTED:KEY]` in the whole stream
    /// (kept or not).
    pub redactions: u64,
}

/// How the program ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Exited with a code.
    Exited(i32),
    /// Killed by a signal (number).
    Signaled(i32),
    /// The sandbox could not be set up; nothing of the program ran.
    SetupFailed(String),
}

/// Everything known when the sandbox is gone.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    /// How it ended.
    pub ending: Ending,
    /// The wall time ran out.
    pub timed_out: bool,
    /// A signal to spawnd ended the run.
    pub interrupted_by: Option<i32>,
    /// From release to the end.
    pub duration: Duration,
    /// stdout.
    pub stdout: Captured,
    /// stderr.
    pub stderr: Captured,
    /// Landlock as reported from inside: (abi, tcp denied, scoped).
    pub landlock: Option<Applied>,
    /// User+system CPU time of the program and every process it started.
    pub cpu_ms: u64,
    /// Peak memory (cgroup), else the largest resident set.
    pub peak_memory_bytes: u64,
    /// The cgroup OOM killer acted.
    pub oom_killed: bool,
    /// Where the time went.
    pub phases: Phases,
    /// The host pid of the sandbox's init.
    pub sandbox_pid: i32,
}

fn set_nonblocking(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    let flags =
        OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL).map_err(std::io::Error::from)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))
        .map(drop)
        .map_err(std::io::Error::from)
}

/// Drives the sandbox until its outcome is known. When init has reported
/// the program's end and usage, and the cgroups can be read before init is
/// reaped, init is returned still [`Leaving`]: the caller records the exit
/// while the kernel tears the namespaces down, then reaps it.
pub(crate) fn supervise_to_report<'a>(
    running: Watched<'a>,
    mut sup: Supervision,
) -> std::io::Result<(Outcome, Option<Leaving<'a>>)> {
    // The daemon's own signals are its business (reload, shutdown): a
    // supervisor there must not take them from the process.
    let signals: SigSet = match sup.signals_end_the_run {
        true => [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP]
            .into_iter()
            .collect(),
        false => SigSet::empty(),
    };
    let mut old_mask = SigSet::empty();
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&signals), Some(&mut old_mask))?;
    let result = supervise_blocked(running, &mut sup, &signals);
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old_mask), None)?;
    result
}

/// [`supervise_to_report`] with its signals blocked: the pipes set up, the
/// sandbox watched until its pipes close, then its outcome.
fn supervise_blocked<'a>(
    running: Watched<'a>,
    sup: &mut Supervision,
    signals: &SigSet,
) -> std::io::Result<(Outcome, Option<Leaving<'a>>)> {
    let started = running.started_at;
    let sandbox_pid = running.init_pid;
    let sigfd = SignalFd::with_flags(signals, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
    let end = running.end;
    let redactor =
        || redact::Redactor::new(sup.redact.iter().map(|(k, v)| (k.as_str(), v.expose())));
    let out = Stream::new(running.stdout, sup.stdout_cap, redactor());
    let err = Stream::new(running.stderr, sup.stderr_cap, redactor());
    let status = Some(running.status);
    for fd in [out.fd.as_ref(), err.fd.as_ref(), status.as_ref()]
        .into_iter()
        .flatten()
    {
        set_nonblocking(fd.as_fd())?;
    }
    if let (Some(source), Some(pipe)) = (sup.stdin.take(), running.stdin) {
        feed_stdin_in_background(source, pipe);
    }
    let Seen {
        out,
        err,
        status_bytes,
        setup_done,
        program_done,
        timed_out,
        interrupted_by,
    } = watch(out, err, status, &*end, &sigfd, started, sup)?;
    let ProgramEnd {
        ending,
        on_its_own,
        landlock,
        cpu_ms,
        peak_memory_bytes,
        oom_killed,
        leaving,
    } = program_end(status_bytes, end)?;
    let ended = Instant::now();
    let duration = ended - started;
    let phases = Phases::measured(
        running.cloned_at,
        running.mapped_at,
        setup_done,
        program_done,
        ended,
    )
    .with_inits_times(landlock.as_ref().and_then(|applied| applied.setup));
    // A program that ended on its own as the deadline passed (or as spawnd
    // was interrupted) was not ended by it: its own exit stands.
    let outcome = Outcome {
        ending,
        timed_out: timed_out && !on_its_own,
        interrupted_by: interrupted_by.filter(|_| !on_its_own),
        duration,
        stdout: out.finish(),
        stderr: err.finish(),
        landlock,
        cpu_ms,
        peak_memory_bytes,
        oom_killed,
        phases,
        sandbox_pid,
    };
    Ok((outcome, leaving))
}

/// What the watch saw by the time the pipes closed (or the drain after
/// init's last word ran out).
struct Seen {
    out: Stream,
    err: Stream,
    /// Everything init wrote on the status pipe.
    status_bytes: Vec<u8>,
    /// When init reported the sandbox set up (or its setup failed).
    setup_done: Option<Instant>,
    /// When init reported the program's end.
    program_done: Option<Instant>,
    timed_out: bool,
    interrupted_by: Option<i32>,
}

/// Watches the sandbox until its pipes close: output drained as it
/// arrives, init's reports read, the wall time enforced, and a signal to
/// spawnd (when blocked for the run) turned into killing the sandbox.
fn watch(
    mut out: Stream,
    mut err: Stream,
    mut status: Option<OwnedFd>,
    end: &dyn SandboxEnd,
    sigfd: &SignalFd,
    started: Instant,
    sup: &mut Supervision,
) -> std::io::Result<Seen> {
    let (mut setup_done, mut program_done) = (None, None);
    let mut status_bytes = Vec::new();
    let mut wall = WallTime::new(started + sup.wall_time);
    // Once init is gone the pipes close within moments, unless another process
    // (e.g. a concurrent sandbox the child passed its fds to) holds them: then
    // stop after a short drain instead of waiting for it.
    let mut drain_until: Option<Instant> = None;
    let mut interrupted_by = None;
    // The child's raw output, credential values and all, passes through it:
    // wiped when the supervision ends.
    let mut buf = zeroize::Zeroizing::new(vec![0u8; FIRST_CHUNK]);
    while out.fd.is_some() || err.fd.is_some() || status.is_some() {
        let now = Instant::now();
        if drain_until.is_some_and(|t| now >= t) {
            break;
        }
        wall.enforce(now, end);
        let wait_ms = poll_wait_ms(now, [wall.next_signal(), drain_until]);
        let pipes = [out.fd.as_ref(), err.fd.as_ref(), status.as_ref()];
        let ready = match ready_slots(pipes, sigfd, wait_ms) {
            Ok(ready) => ready,
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        for slot in ready {
            match slot {
                0 => drain(&mut out, &mut buf, 0, &mut sup.live),
                1 => drain(&mut err, &mut buf, 1, &mut sup.live),
                2 => {
                    let eof = read_some(status.as_ref(), &mut buf, &mut status_bytes);
                    if setup_done.is_none()
                        && crate::sandbox::status_pipe::setup_over(&status_bytes)
                    {
                        setup_done = Some(Instant::now());
                    }
                    if program_done.is_none()
                        && crate::sandbox::status_pipe::end_arrived(&status_bytes)
                    {
                        program_done = Some(Instant::now());
                    }
                    // Init's report of the program's end is its last word,
                    // sent once it has closed its ends of the output pipes:
                    // from then on only the output's end is awaited.
                    let reported = parse_status(&status_bytes, 0).2.is_some();
                    if eof || reported {
                        status = None;
                        drain_until = Some(Instant::now() + DRAIN_AFTER_INIT);
                    }
                }
                _ => {
                    if let Ok(Some(info)) = sigfd.read_signal() {
                        interrupted_by.get_or_insert(info.ssi_signo as i32);
                        wall.interrupt(Instant::now(), end);
                    }
                }
            }
        }
    }
    Ok(Seen {
        out,
        err,
        status_bytes,
        setup_done,
        program_done,
        timed_out: wall.timed_out,
        interrupted_by,
    })
}

/// How a run is ended: at the wall time's deadline, or when spawnd is
/// interrupted (SIGINT, SIGTERM), SIGTERM to init (which forwards it to
/// the program, so it can clean up), then SIGKILL, which ends the whole
/// pid namespace, a [`GRACE`] later; a second interruption kills at once.
struct WallTime {
    deadline: Instant,
    timed_out: bool,
    kill_at: Option<Instant>,
}

impl WallTime {
    fn new(deadline: Instant) -> WallTime {
        WallTime {
            deadline,
            timed_out: false,
            kill_at: None,
        }
    }

    /// Sends init the signal that is due at `now`, if one is.
    fn enforce(&mut self, now: Instant, end: &dyn SandboxEnd) {
        if !self.timed_out && now >= self.deadline {
            self.timed_out = true;
            end.signal(Signal::SIGTERM);
            self.kill_at = Some(self.kill_at.map_or(now + GRACE, |at| at.min(now + GRACE)));
        }
        if self.kill_at.is_some_and(|t| now >= t) {
            end.signal(Signal::SIGKILL);
            self.kill_at = None;
        }
    }

    /// spawnd was interrupted at `now`: the program is asked to end, or,
    /// when it already was, killed.
    fn interrupt(&mut self, now: Instant, end: &dyn SandboxEnd) {
        if self.kill_at.is_some() {
            end.signal(Signal::SIGKILL);
            self.kill_at = None;
        } else {
            end.signal(Signal::SIGTERM);
            self.kill_at = Some(now + GRACE);
        }
    }

    /// When the next signal is due, if one still is.
    fn next_signal(&self) -> Option<Instant> {
        [self.kill_at, (!self.timed_out).then_some(self.deadline)]
            .into_iter()
            .flatten()
            .min()
    }
}

/// How long a poll at `now` may wait: until the earliest of `wakes`, and
/// never more than a minute.
fn poll_wait_ms(now: Instant, wakes: [Option<Instant>; 2]) -> u16 {
    let far = now + Duration::from_secs(3600);
    let next = wakes.into_iter().flatten().min().unwrap_or(far);
    next.saturating_duration_since(now).as_millis().min(60_000) as u16
}

/// Waits up to `wait_ms` for the open pipes (slot 0 stdout, 1 stderr, 2
/// status) and the signalfd (slot 3); returns the slots with something to
/// read (or a hang-up, or an error), in that order.
fn ready_slots(
    pipes: [Option<&OwnedFd>; 3],
    sigfd: &SignalFd,
    wait_ms: u16,
) -> nix::Result<Vec<u8>> {
    let mut fds: Vec<PollFd> = Vec::with_capacity(4);
    let mut slots = Vec::with_capacity(4);
    for (slot, fd) in (0u8..).zip(pipes) {
        if let Some(fd) = fd {
            fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
            slots.push(slot);
        }
    }
    fds.push(PollFd::new(sigfd.as_fd(), PollFlags::POLLIN));
    slots.push(3);
    poll(&mut fds, PollTimeout::from(wait_ms))?;
    Ok(fds
        .iter()
        .zip(&slots)
        .filter(|(p, _)| p.revents().is_some_and(|r| !r.is_empty()))
        .map(|(_, s)| *s)
        .collect())
}

/// How the program ended and what it used.
struct ProgramEnd<'a> {
    ending: Ending,
    /// Init reported that the program ended before a signal of spawnd's
    /// reached it.
    on_its_own: bool,
    landlock: Option<Applied>,
    cpu_ms: u64,
    peak_memory_bytes: u64,
    oom_killed: bool,
    /// Init, still leaving, when it was not reaped here.
    leaving: Option<Leaving<'a>>,
}

/// How the program ended and what it used, from init's reports on the
/// status pipe; init is reaped here only when it must be for that.
fn program_end<'a>(
    status_bytes: Vec<u8>,
    end: Box<dyn SandboxEnd + 'a>,
) -> std::io::Result<ProgramEnd<'a>> {
    // The program's end and usage as init reported them; the cgroups read
    // now when they can be, else after init is reaped (its wait status then
    // also stands in for a missing report).
    let (mut ending, mut landlock, usage) = parse_status(&status_bytes, 0);
    let (init_usage, cgroup_readings, leaving) = match (usage, end.readings_before_reap()) {
        (Some(_), Some(readings)) => (None, readings, Some(Leaving(end))),
        _ => {
            let reaped = end.reap()?;
            (ending, landlock, _) = parse_status(&status_bytes, reaped.init_status);
            (
                Some(reaped),
                (reaped.cgroup_peak_bytes, reaped.oom_killed),
                None,
            )
        }
    };
    let (cpu_ms, max_rss_bytes) = match (usage, init_usage) {
        (Some(u), _) => (u.cpu_ms, u.max_rss_bytes),
        (None, Some(r)) => (r.cpu_ms, r.max_rss_bytes),
        (None, None) => (0, 0),
    };
    let (peak_cg, oom) = cgroup_readings;
    Ok(ProgramEnd {
        ending,
        on_its_own: usage.is_some_and(|u| u.on_its_own),
        landlock,
        cpu_ms,
        peak_memory_bytes: peak_cg.unwrap_or(max_rss_bytes),
        oom_killed: oom,
        leaving,
    })
}

impl Phases {
    /// The phases between the marks of one spawn: `clone`, the ids mapped,
    /// init's reports of the sandbox set up and of the program's end, and
    /// `ended` (which also stands in for a report that never came).
    fn measured(
        cloned_at: Instant,
        mapped_at: Instant,
        setup_done: Option<Instant>,
        program_done: Option<Instant>,
        ended: Instant,
    ) -> Phases {
        let us = |a: Instant, b: Instant| b.saturating_duration_since(a).as_micros() as u64;
        let setup_done = setup_done.unwrap_or(ended);
        let program_done = program_done.unwrap_or(ended);
        Phases {
            clone_and_release_us: us(cloned_at, mapped_at),
            sandbox_setup_us: us(mapped_at, setup_done),
            program_us: us(setup_done, program_done),
            teardown_us: us(program_done, ended),
            init_ready_us: None,
            release_wait_us: None,
        }
    }

    /// With the times init reported on its setup.
    fn with_inits_times(self, times: Option<SetupTimes>) -> Phases {
        Phases {
            init_ready_us: times.map(|t| u64::from(t.ready_us)),
            release_wait_us: times.map(|t| u64::from(t.release_wait_us)),
            ..self
        }
    }
}

/// Copies the stdin source into the child's stdin pipe on its own thread, so
/// a source that blocks (a terminal, a slow pipe) or a child that never reads
/// can never stall supervision. The thread ends at EOF or when the child
/// closes its end; it is not waited for.
fn feed_stdin_in_background(mut source: Box<dyn Read + Send>, pipe: OwnedFd) {
    let mut sink = std::fs::File::from(pipe);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut source, &mut sink);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A sandbox end that only notes the signals it is sent.
    struct Noting(RefCell<Vec<Signal>>);

    impl SandboxEnd for Noting {
        fn signal(&self, signal: Signal) {
            self.0.borrow_mut().push(signal);
        }

        fn reap(self: Box<Self>) -> std::io::Result<InitExit> {
            Err(std::io::ErrorKind::Unsupported.into())
        }

        fn killer(&self) -> Option<Killer> {
            None
        }
    }

    #[test]
    fn the_wall_time_sends_sigterm_at_the_deadline_then_sigkill_a_grace_later() {
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_secs(1);
        let end = Noting(RefCell::default());
        let mut wall = WallTime::new(deadline);
        wall.enforce(t0, &end);
        assert!(end.0.borrow().is_empty());
        assert_eq!(wall.next_signal(), Some(deadline));
        wall.enforce(deadline, &end);
        assert!(wall.timed_out);
        assert_eq!(*end.0.borrow(), [Signal::SIGTERM]);
        assert_eq!(wall.next_signal(), Some(deadline + GRACE));
        wall.enforce(deadline + GRACE, &end);
        assert_eq!(*end.0.borrow(), [Signal::SIGTERM, Signal::SIGKILL]);
        assert_eq!(wall.next_signal(), None);
    }

    #[test]
    fn an_interruption_asks_the_program_to_end_and_a_second_one_kills() {
        let t0 = Instant::now();
        let end = Noting(RefCell::default());
        let mut wall = WallTime::new(t0 + Duration::from_secs(60));
        wall.interrupt(t0, &end);
        assert_eq!(*end.0.borrow(), [Signal::SIGTERM]);
        assert_eq!(wall.next_signal(), Some(t0 + GRACE));
        assert!(!wall.timed_out);
        // Ignored SIGTERM: killed a grace later.
        wall.enforce(t0 + GRACE, &end);
        assert_eq!(*end.0.borrow(), [Signal::SIGTERM, Signal::SIGKILL]);
        // A second interruption before the grace is over kills at once.
        let end = Noting(RefCell::default());
        let mut wall = WallTime::new(t0 + Duration::from_secs(60));
        wall.interrupt(t0, &end);
        wall.interrupt(t0 + Duration::from_millis(100), &end);
        assert_eq!(*end.0.borrow(), [Signal::SIGTERM, Signal::SIGKILL]);
        // The deadline passing during the grace does not push the kill back.
        let end = Noting(RefCell::default());
        let mut wall = WallTime::new(t0 + Duration::from_millis(500));
        wall.interrupt(t0, &end);
        wall.enforce(t0 + Duration::from_millis(500), &end);
        assert_eq!(wall.next_signal(), Some(t0 + GRACE));
    }

    #[test]
    fn a_poll_waits_until_the_earliest_wake_and_at_most_a_minute() {
        let t0 = Instant::now();
        assert_eq!(poll_wait_ms(t0, [None, None]), 60_000);
        let soon = Some(t0 + Duration::from_millis(250));
        assert_eq!(poll_wait_ms(t0, [Some(t0 + GRACE), soon]), 250);
        assert_eq!(poll_wait_ms(t0 + GRACE, [soon, None]), 0);
    }
}
