//! The spawner process: single-threaded, forked from the daemon before any
//! other thread exists. It waits on two things — frames from the daemon and
//! SIGCHLD — and does only what needs a single-threaded parent: `launch`
//! (clone into the namespaces) and reaping; the daemon starts each
//! program itself and then says `Started`. Output,
//! timeouts and results stay with the daemon. When the daemon goes away, the
//! spawner exits, and its sandboxes die with it (their parent-death signal).

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use super::spares::SparePool;
use super::wire::{LaunchedFds, Reply, Request};
use crate::ipc::{recv, send};
use crate::sandbox::cgroup::{CgroupPool, SpawnCgroup};
use crate::sandbox::launch::{launch_order, Launched, LocalSandbox};
use crate::sandbox::{Cause, SetupError, Step};
use crate::supervise::InitExit;
use crate::sys::{pidfd_open, try_wait_with_usage};

enum Slot {
    /// Building its root; the program waits for the daemon's go-ahead.
    Launched(Launched),
    /// The program was started; reaped on SIGCHLD.
    Running(LocalSandbox),
}

/// A sandbox of the daemon's, and the socket its replies go on (it came
/// with the launch). A reply the daemon no longer reads (it dropped the
/// launch) is not an error of the spawner's: the daemon's end is the
/// shared socket.
struct Kept {
    replies: UnixStream,
    slot: Slot,
}

/// Serves the daemon on `sock` until it closes; returns the exit code.
pub(super) fn serve(sock: UnixStream) -> i32 {
    // Signals meant for the daemon's process group (Ctrl-C, a service
    // manager's SIGTERM) must not take the spawner down before the daemon
    // has drained: it ends when the daemon's socket closes.
    let mut blocked = SigSet::empty();
    for s in [
        Signal::SIGCHLD,
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
    ] {
        blocked.add(s);
    }
    if nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&blocked), None).is_err() {
        return 70;
    }
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    let Ok(sigfd) = SignalFd::with_flags(&chld, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
    else {
        return 70;
    };
    // Ahead of the daemon's threads and the sandboxes being built, when
    // allowed (see `sandbox::priority`); without CAP_SYS_NICE, as before.
    if let Err(e) = crate::sandbox::priority::raise_for_spawner() {
        if !matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) {
            tracing::warn!("spawner: cannot raise its priority: {e}");
        }
    }
    let mut slots: HashMap<u64, Kept> = HashMap::new();
    let mut pool = Some(SparePool::new());
    let mut cgroups = CgroupPool::new();
    loop {
        // Idle with work for the pool: look, don't wait, and do a step of it
        // if nothing came. Not while a sandbox waits for its go-ahead: a
        // clone (half a millisecond of kernel work) would take the CPU its
        // init and program need, on a machine with few cores.
        let awaiting_start = slots.values().any(|k| matches!(k.slot, Slot::Launched(_)));
        let running = !slots.is_empty();
        let filling = !awaiting_start && pool.as_ref().is_some_and(|p| p.wants_work(running));
        // Checking a kept cgroup pair is short; it goes first, when due.
        let check_in = cgroups.work_due_in().filter(|_| !awaiting_start);
        let checking = check_in.is_some_and(|d| d.is_zero());
        let (sock_ready, chld_ready) = {
            let mut fds = [
                PollFd::new(sock.as_fd(), PollFlags::POLLIN),
                PollFd::new(sigfd.as_fd(), PollFlags::POLLIN),
            ];
            let timeout = match (filling || checking, check_in) {
                (true, _) => PollTimeout::ZERO,
                (false, Some(later)) => PollTimeout::from(later.as_millis().clamp(1, 1000) as u16),
                (false, None) => PollTimeout::NONE,
            };
            match poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(nix::Error::EINTR) => continue,
                Err(_) => return 70,
            }
            let ready = |p: &PollFd<'_>| p.revents().is_some_and(|r| !r.is_empty());
            (ready(&fds[0]), ready(&fds[1]))
        };
        let due = check_in.is_some() && cgroups.work_due_in().is_some_and(|d| d.is_zero());
        if due && !sock_ready && !chld_ready {
            cgroups.work();
            continue;
        }
        if filling && !sock_ready && !chld_ready {
            if let Some(Err(e)) = pool.as_mut().map(SparePool::work) {
                tracing::warn!("spawner: spare sandboxes cannot be made ({e}); made at request time, retried in {} s", super::spares::RETRY_AFTER.as_secs());
            }
            continue;
        }
        if chld_ready {
            while let Ok(Some(_)) = sigfd.read_signal() {}
            reap(&mut slots, &mut cgroups);
        }
        if sock_ready {
            match recv::<Request>(&sock) {
                Ok(Some((request, fds))) => {
                    if let Err(e) = handle(&mut slots, pool.as_mut(), &mut cgroups, request, fds) {
                        tracing::error!("spawner: {e}; leaving");
                        return 0;
                    }
                }
                // The daemon is gone (or spoke garbage): leave; every sandbox
                // still here is killed by its parent-death signal.
                Ok(None) | Err(_) => return 0,
            }
        }
    }
}

/// Carries out one request. An error is the daemon's protocol broken (a
/// launch without a socket for its replies): the spawner leaves.
fn handle(
    slots: &mut HashMap<u64, Kept>,
    pool: Option<&mut SparePool>,
    cgroups: &mut CgroupPool,
    request: Request,
    fds: Vec<OwnedFd>,
) -> std::io::Result<()> {
    match request {
        Request::Launch { id, order, stdin } => {
            let mut fds = fds.into_iter();
            let (program, replies) = (fds.next(), fds.next());
            let Some(replies) = replies.map(UnixStream::from) else {
                return Err(std::io::Error::other(format!(
                    "launch {id} came without a socket for its replies"
                )));
            };
            let Some(program) = program else {
                let missing = Cause::Other("no descriptor for the program".into());
                failed(
                    &replies,
                    id,
                    SetupError::because(Step::Spawner, "launch", missing),
                );
                return Ok(());
            };
            // The filter crossed the frame as the kernel's bytes: read
            // back once, here.
            let launched = order.filter().and_then(|filter| {
                let spare = pool.and_then(|p| {
                    p.take((order.uid, order.gid, order.privileged), &order.spec.mounts)
                });
                let program = File::from(program);
                launch_order(
                    &order,
                    &filter.instructions,
                    program,
                    stdin,
                    spare,
                    Some(cgroups),
                )
            });
            match launched {
                Ok(mut launched) => {
                    let init_pid = launched.init_pid().unwrap_or(0);
                    let pidfd = pidfd_open(init_pid);
                    let stdin_w = launched.take_stdin();
                    let memory_dir = launched.open_cgroup_memory_dir().transpose();
                    let listeners = launched.take_listeners();
                    let pipes = launched.pipes();
                    let go_ahead = launched.go_ahead();
                    match (pidfd, pipes.zip(go_ahead), memory_dir) {
                        (Ok(pidfd), Some(([stdout, stderr, status], go_ahead)), Ok(memory_dir)) => {
                            let list = LaunchedFds {
                                stdout,
                                stderr,
                                status,
                                pidfd: pidfd.as_fd(),
                                go_ahead,
                                cgroup_memory: memory_dir.as_ref().map(AsFd::as_fd),
                                listeners: listeners.as_ref().map(|l| l.fds()).unwrap_or_default(),
                                stdin: stdin_w.as_ref().map(AsFd::as_fd),
                            }
                            .into_list();
                            let cgroup = memory_dir.is_some();
                            let sent = send(
                                &replies,
                                &Reply::Launched {
                                    id,
                                    init_pid,
                                    cgroup,
                                    listener_ports: listeners.as_ref().map(|l| l.ports()),
                                },
                                &list,
                            );
                            drop(list);
                            // The daemon holds the listeners now.
                            drop(listeners);
                            // Unread, the launch was dropped: the sandbox
                            // is killed as by an abort.
                            if sent.is_ok() {
                                slots.insert(
                                    id,
                                    Kept {
                                        replies,
                                        slot: Slot::Launched(launched),
                                    },
                                );
                            }
                            // With the reply on its way, stale cgroups (a
                            // `kill -9`'d spawnd's) are swept, now and then.
                            order.limits_via.sweep_stale_cgroups();
                        }
                        (Err(e), _, _) => failed(
                            &replies,
                            id,
                            SetupError::new(Step::Spawner, "pidfd_open(init)", e),
                        ),
                        (_, None, _) => {
                            failed(&replies, id, spawner_error("sandbox pipes", "missing"))
                        }
                        (_, _, Err(e)) => failed(
                            &replies,
                            id,
                            SetupError::new(Step::Spawner, "open the memory cgroup", e),
                        ),
                    }
                }
                Err(e) => failed(&replies, id, e),
            }
            Ok(())
        }
        // The daemon wrote the go-ahead itself; an init that has already
        // ended (its SIGCHLD came while it was not yet ours to reap) is
        // reaped now.
        Request::Started { id } => {
            match slots.remove(&id) {
                Some(Kept {
                    replies,
                    slot: Slot::Launched(launched),
                }) => match launched.started_elsewhere() {
                    Some(running) => {
                        let slot = Slot::Running(running);
                        slots.insert(id, Kept { replies, slot });
                        reap(slots, cgroups);
                    }
                    None => failed(&replies, id, spawner_error("start", "started twice")),
                },
                Some(
                    kept @ Kept {
                        slot: Slot::Running(_),
                        ..
                    },
                ) => {
                    failed(&kept.replies, id, spawner_error("start", "already started"));
                    slots.insert(id, kept);
                }
                // Nothing to tell: the launch's socket is closed, which its
                // reader takes as the sandbox gone.
                None => {
                    tracing::warn!("spawner: told sandbox {id} started, which it does not keep")
                }
            }
            Ok(())
        }
        Request::Abort { id } => {
            if let Some(Kept {
                slot: Slot::Launched(launched),
                ..
            }) = slots.remove(&id)
            {
                drop(launched);
            }
            Ok(())
        }
    }
}

/// Tells the daemon a launch failed; one it no longer reads needs no word.
fn failed(replies: &UnixStream, id: u64, error: SetupError) {
    let _ = send(replies, &Reply::Failed { id, error }, &[]);
}

/// A request the spawner cannot carry out: `what`, and why not.
fn spawner_error(what: &'static str, why: &str) -> SetupError {
    SetupError::because(Step::Spawner, what, Cause::Other(why.into()))
}

/// Reaps every started sandbox whose init has ended, reads its cgroup and
/// reports it; the cgroups then go back to the pool. Only inits of started
/// sandboxes are waited for: one still building its root is reaped by its
/// abort, never here, so a pid is never waited for twice (and never reused
/// while the daemon might signal it).
fn reap(slots: &mut HashMap<u64, Kept>, cgroups: &mut CgroupPool) {
    let running: Vec<(u64, i32)> = slots
        .iter()
        .filter_map(|(id, kept)| match &kept.slot {
            Slot::Running(r) => Some((*id, r.init_pid)),
            Slot::Launched(_) => None,
        })
        .collect();
    for (id, pid) in running {
        let Ok(Some(reaped)) = try_wait_with_usage(pid) else {
            continue;
        };
        let Some(Kept {
            replies,
            slot: Slot::Running(r),
        }) = slots.remove(&id)
        else {
            continue;
        };
        let (cgroup_peak_bytes, oom_killed) = r
            .cgroup
            .as_ref()
            .map_or((None, false), SpawnCgroup::readings);
        let exit = InitExit {
            init_status: reaped.status,
            cpu_ms: reaped.cpu_ms,
            max_rss_bytes: reaped.max_rss_bytes,
            cgroup_peak_bytes,
            oom_killed,
        };
        // A daemon that no longer reads it has let the sandbox go.
        let _ = send(&replies, &Reply::Exited { id, exit }, &[]);
        drop(replies);
        // The (empty) cgroups go back after the report: the caller is not
        // kept waiting.
        if let Some(cg) = r.cgroup {
            cgroups.give_back(cg);
        }
    }
}
