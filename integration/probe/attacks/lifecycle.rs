//! R: resources and lifecycle: fork and memory bombs,
//! output floods, daemons that outlive the run, hangs, ignored SIGTERM and
//! core dumps. Every bomb has a hard upper bound and cleans up after itself;
//! the attacks whose effect is only visible from outside (daemonize,
//! output-flood) report "blocked" and leave the judgement to the test.

use std::fs::File;
use std::io::Write;
use std::time::{Duration, Instant};

use libc::{EAGAIN, ENOMEM};

use crate::child::{exit_now, fork, kill, pipe, wait};
use crate::consts::{DAEMON_SLEEP_SECS, FORK_BOMB_DEFAULT_MAX, LONG_RUN_DEFAULT_SECS};
use crate::report::{Args, UsageError, Verdict};
use crate::sys::{self, cvt, Errno};

/// In a fork-bomb child: die with the parent, otherwise wait forever.
fn pause_until_parent_dies(parent: i32) -> ! {
    // SAFETY: prctl and getppid take plain integers.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    // SAFETY: as above.
    if unsafe { libc::getppid() } != parent {
        exit_now(0);
    }
    loop {
        // SAFETY: pause has no arguments; it returns only after a signal.
        unsafe { libc::pause() };
    }
}

/// Forks pausing children until failure or MAX, then kills them all.
pub fn fork_bomb(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let max: u64 = args.parsed_or(0, "MAX", FORK_BOMB_DEFAULT_MAX)?;
    let parent = sys::getpid();
    let mut children = Vec::new();
    let stop = loop {
        if children.len() as u64 >= max {
            break None;
        }
        match fork() {
            Ok(0) => pause_until_parent_dies(parent),
            Ok(pid) => children.push(pid),
            Err(e) => break Some(e),
        }
    };
    for &pid in &children {
        let _ = kill(pid, libc::SIGKILL);
    }
    let reaped = children.iter().filter(|&&pid| wait(pid).is_ok()).count();
    let detail = format!(
        "forked {} children (killed and reaped {reaped})",
        children.len()
    );
    Ok(match stop {
        None => Verdict::escaped(format!("{detail}: reached MAX {max} without a limit")),
        Some(e) if e.0 == EAGAIN => Verdict::blocked(format!("{detail}, then fork: EAGAIN")),
        Some(e) => Verdict::unclear(format!("{detail}, then fork: {e}")),
    })
}

/// Allocates and touches MIB MiB.
pub fn memory_bomb(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let total: usize = args.parsed::<usize>(0, "MIB")?.saturating_mul(1 << 20);
    const CHUNK: usize = 64 << 20;
    let mut maps: Vec<(*mut u8, usize)> = Vec::new();
    let mut touched = 0usize;
    let mut failure = None;
    while touched < total {
        let len = CHUNK.min(total - touched);
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: an anonymous private mapping; no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            failure = Some(Errno::last());
            break;
        }
        let base = ptr.cast::<u8>();
        for offset in (0..len).step_by(4096) {
            // SAFETY: `offset` < `len`, inside the writable mapping just made.
            unsafe { base.add(offset).write_volatile(1) };
        }
        maps.push((base, len));
        touched += len;
    }
    for (base, len) in maps {
        // SAFETY: each (base, len) is a mapping made above and not used again.
        unsafe { libc::munmap(base.cast(), len) };
    }
    let detail = format!("allocated and touched {}", sys::mib(touched as u64));
    Ok(match failure {
        None => Verdict::escaped(format!("{detail} and survived")),
        Some(e) if e.is_one_of(&[ENOMEM, EAGAIN]) => {
            Verdict::blocked(format!("{detail}, then mmap: {e}"))
        }
        Some(e) => Verdict::unclear(format!("{detail}, then mmap: {e}")),
    })
}

/// Writes BYTES of 'x' to stdout; reports on stderr.
pub fn output_flood(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let total: u64 = args.parsed(0, "BYTES")?;
    let chunk = vec![b'x'; 64 * 1024];
    let mut written: u64 = 0;
    let mut failure = None;
    while written < total {
        let len = (total - written).min(chunk.len() as u64) as usize;
        // SAFETY: `chunk` holds at least `len` readable bytes; fd 1 is stdout.
        match cvt(unsafe { libc::write(1, chunk.as_ptr().cast(), len) } as i64) {
            Ok(n) => written += n as u64,
            Err(Errno(libc::EINTR)) => {}
            Err(Errno(libc::EAGAIN)) => wait_writable(1),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let end = failure.map_or("completed".to_string(), |e| format!("then write: {e}"));
    Ok(Verdict::blocked(format!(
        "wrote {written} of {total} bytes to stdout, {end} (the cap is judged outside)"
    )))
}

/// Blocks until `fd` can take more output (for a non-blocking stdout).
fn wait_writable(fd: i32) {
    let mut poll = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: `poll` is one valid pollfd.
    unsafe { libc::poll(&mut poll, 1, -1) };
}

/// Sleeps until `deadline`, resuming after signals.
fn sleep_until(deadline: Instant) {
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left);
    }
}

/// The daemon grandchild: record the pid, detach stdio, sleep, leave.
fn run_daemon(pidfile: &str, report: File) -> ! {
    let pid = sys::getpid();
    let written = std::fs::write(pidfile, format!("{pid}\n")).map_err(Errno::from);
    let message = match written {
        Ok(()) => format!("daemon pid {pid} (in its pid namespace) written to {pidfile}"),
        Err(e) => format!("daemon pid {pid} running, but writing {pidfile}: {e}"),
    };
    let mut report = report;
    let _ = report.write_all(message.as_bytes());
    drop(report);
    if let Ok(null) = sys::open("/dev/null", libc::O_RDWR) {
        for fd in 0..3 {
            // SAFETY: dup2 of an open fd onto a std fd.
            unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), fd) };
        }
    }
    sleep_until(Instant::now() + Duration::from_secs(DAEMON_SLEEP_SECS));
    let _ = std::fs::remove_file(pidfile);
    exit_now(0)
}

/// Double fork + setsid.
pub fn daemonize(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(2)?;
    let pidfile = args.required(0, "PIDFILE")?;
    let linger = Duration::from_secs(args.parsed_or(1, "LINGER", 0u64)?);
    let (read_end, write_end) = match pipe() {
        Ok(pair) => pair,
        Err(e) => return Ok(Verdict::unclear(format!("pipe: {e}"))),
    };
    let middle = match fork() {
        Ok(0) => {
            drop(read_end);
            // SAFETY: setsid takes no arguments; this child is not a group leader.
            unsafe { libc::setsid() };
            match fork() {
                Ok(0) => run_daemon(pidfile, File::from(write_end)),
                Ok(_) => exit_now(0),
                Err(_) => exit_now(1),
            }
        }
        Ok(pid) => pid,
        Err(e) => return Ok(Verdict::unclear(format!("fork: {e}"))),
    };
    drop(write_end);
    let exit = wait(middle);
    let mut message = String::new();
    let _ = std::io::Read::read_to_string(&mut File::from(read_end), &mut message);
    if message.is_empty() {
        message = format!("no daemon reported back (middle child: {exit:?})");
    }
    // Stay alive a while if asked, so a test can kill spawnd mid-run.
    sleep_until(Instant::now() + linger);
    Ok(Verdict::blocked(format!(
        "{message}; its argv holds the pidfile path; the test must check it is gone"
    )))
}

fn seconds(args: &Args<'_>, default: Option<u64>) -> Result<Duration, UsageError> {
    args.at_most(1)?;
    let secs: f64 = match default {
        Some(d) => args.parsed_or(0, "SECONDS", d as f64)?,
        None => args.parsed(0, "SECONDS")?,
    };
    if !(0.0..=1e9).contains(&secs) {
        return Err(UsageError(format!("SECONDS out of range: {secs}")));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Sleeps SECONDS.
pub fn sleep(args: &Args<'_>) -> Result<Verdict, UsageError> {
    let duration = seconds(args, None)?;
    sleep_until(Instant::now() + duration);
    Ok(Verdict::escaped(format!(
        "slept {duration:?} without being stopped"
    )))
}

/// Spins on the CPU.
pub fn cpu_spin(args: &Args<'_>) -> Result<Verdict, UsageError> {
    let duration = seconds(args, Some(LONG_RUN_DEFAULT_SECS))?;
    let start = Instant::now();
    let mut spins: u64 = 0;
    while start.elapsed() < duration {
        for _ in 0..10_000 {
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
    }
    Ok(Verdict::escaped(format!(
        "spun {duration:?} ({spins} iterations) without being stopped"
    )))
}

/// Ignores SIGTERM and sleeps.
pub fn ignore_sigterm(args: &Args<'_>) -> Result<Verdict, UsageError> {
    let duration = seconds(args, Some(LONG_RUN_DEFAULT_SECS))?;
    // SAFETY: SIG_IGN installs no handler code.
    unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
    sleep_until(Instant::now() + duration);
    Ok(Verdict::escaped(format!(
        "ignored SIGTERM and lived {duration:?} without being stopped"
    )))
}

/// Dies by SIGSEGV with the default action (Rust's own handler is removed).
fn crash() {
    // SAFETY: restoring the default action and raising a signal at ourselves.
    unsafe {
        libc::signal(libc::SIGSEGV, libc::SIG_DFL);
        libc::raise(libc::SIGSEGV);
    }
    exit_now(3)
}

/// Raises RLIMIT_CORE as far as allowed, reports, then crashes.
pub fn core_dump(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    if let Some(dir) = args.optional(0) {
        if let Err(e) = std::env::set_current_dir(dir) {
            return Ok(Verdict::unclear(format!(
                "chdir({dir}): {}",
                Errno::from(e)
            )));
        }
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid out-pointer.
    unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut limit) };
    let raise = libc::rlimit {
        rlim_cur: limit.rlim_max,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: `raise` is a valid rlimit.
    let raised = cvt(unsafe { libc::setrlimit(libc::RLIMIT_CORE, &raise) });
    // SAFETY: as above.
    unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut limit) };
    // SAFETY: PR_GET_DUMPABLE takes no pointer.
    let dumpable = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) };
    let pattern = sys::read_file("/proc/sys/kernel/core_pattern").map(|p| p.trim().to_string());
    let detail = format!(
        "setrlimit(RLIMIT_CORE, hard): {:?}; now soft {} hard {}; dumpable {dumpable}; core_pattern {:?}; raising SIGSEGV",
        raised.map_err(|e| e.to_string()),
        limit.rlim_cur,
        limit.rlim_max,
        pattern.as_ref().map_err(|e| e.to_string()),
    );
    // A piped core_pattern hands the dump to a host helper whatever
    // RLIMIT_CORE says (the kernel only passes the limit along).
    let piped = pattern.as_ref().is_ok_and(|p| p.starts_with('|'));
    let verdict = if dumpable == 1 && (limit.rlim_cur > 0 || piped) {
        Verdict::escaped(format!("a core can be written: {detail}"))
    } else {
        Verdict::blocked(detail)
    };
    Ok(verdict.and_then(crash))
}
