//! What depends on the kernel the tests run on. The kernel matrix runs this
//! suite in every guest, down to the oldest kernel spawnd supports, on
//! x86_64 and aarch64; each concern has a module of its own. The tests use
//! the test binary itself and spawnd, no other program (an aarch64 guest
//! has no others).

/// The daemon's peer identity (docs/daemon.md, "Who may ask"): root and a
/// uid that `[[access]]` allows are served from the daemon's own user
/// namespace, and refused (`caller_not_allowed`) from another one.
///
/// Each check runs against the kernel as it is and against the kernel as
/// one before 6.5 answers: the daemon started under a seccomp filter that
/// fails `getsockopt(SO_PEERPIDFD)` with `ENOPROTOOPT`, so the daemon
/// identifies peers by pid even here (on a kernel without the option, both
/// daemons take that way).
///
/// The peers are this test binary run again ([`talk_as_told`]), as root or
/// as uid 65534, connecting either itself or from a child cloned into a
/// new user namespace.
mod peer_identity {
    use std::io::Read;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    use std::path::{Path, PathBuf};

    use nix::sys::socket::{
        connect, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, UnixAddr,
    };
    use nix::sys::time::TimeVal;
    use nix::sys::wait::{waitpid, WaitStatus};
    use serde_json::{json, Value};
    use spawnd::internals::sandbox::seccomp::abi;
    use spawnd::internals::sandbox::seccomp::bpf::op;
    use spawnd::internals::sys::{
        clone_process, exit_immediately, install_seccomp_filter_on_current_thread, SockFilter,
    };

    use crate::daemon_harness::{Daemon, CONNECTOR};
    use crate::harness::world;

    /// The unprivileged uid (and gid) the access rule allows.
    const NOBODY: u32 = 65534;
    /// `SO_PEERPIDFD` from `<asm-generic/socket.h>`.
    const SO_PEERPIDFD: u32 = 77;
    /// Tells a run of this binary that it is a peer: the daemon's socket.
    const PEER_SOCKET: &str = "HOST_KERNEL_PEER_SOCKET";
    /// Set (to 1) when that peer connects from a new user namespace.
    const PEER_USERNS: &str = "HOST_KERNEL_PEER_USERNS";
    /// What the peer prints before the daemon's answer (on the line libtest
    /// starts with the test's name).
    const ANSWER: &str = "the daemon answered: ";

    /// How the kernel under the daemon answers `SO_PEERPIDFD`.
    #[derive(Clone, Copy, Debug)]
    enum Kernel {
        /// As it does (a pidfd from 6.5 on).
        AsItIs,
        /// As kernels before 6.5 do: `ENOPROTOOPT`.
        WithoutSoPeerpidfd,
    }

    const KERNELS: [Kernel; 2] = [Kernel::AsItIs, Kernel::WithoutSoPeerpidfd];

    /// A peer: who it runs as, and where.
    #[derive(Clone, Copy, Debug)]
    struct Peer {
        uid: u32,
        other_user_namespace: bool,
    }

    /// A daemon that allows root (by default) and [`NOBODY`] (by a rule
    /// without `other_user_namespaces`) to act for the test connector.
    fn daemon(name: &str, kernel: Kernel) -> Daemon {
        let name = format!("peer-{name}-{kernel:?}");
        let extra = format!("[[access]]\nconnector = {CONNECTOR:?}\nuids = [{NOBODY}]\n");
        match kernel {
            Kernel::AsItIs => Daemon::start(&name, &extra),
            // A seccomp filter belongs to the thread that installed it and to
            // the processes it starts from then on: a thread of its own
            // starts the daemon, and the rest of the tests keep the kernel's
            // answer.
            Kernel::WithoutSoPeerpidfd => std::thread::spawn(move || {
                without_so_peerpidfd_on_this_thread();
                Daemon::start(&name, &extra)
            })
            .join()
            .unwrap(),
        }
    }

    /// Makes `getsockopt(SOL_SOCKET, SO_PEERPIDFD)` fail with `ENOPROTOOPT`
    /// on the calling thread and everything it starts afterwards.
    fn without_so_peerpidfd_on_this_thread() {
        let arg_low = |i| abi::arg_low_offset(i).unwrap();
        let program = [
            SockFilter::stmt(op::LD_W_ABS, abi::OFFSET_ARCH),
            SockFilter::jump(op::JEQ_K, abi::Arch::NATIVE.audit_arch(), 0, 7),
            SockFilter::stmt(op::LD_W_ABS, abi::OFFSET_NR),
            SockFilter::jump(op::JEQ_K, libc::SYS_getsockopt as u32, 0, 5),
            SockFilter::stmt(op::LD_W_ABS, arg_low(1)),
            SockFilter::jump(op::JEQ_K, libc::SOL_SOCKET as u32, 0, 3),
            SockFilter::stmt(op::LD_W_ABS, arg_low(2)),
            SockFilter::jump(op::JEQ_K, SO_PEERPIDFD, 0, 1),
            SockFilter::stmt(op::RET_K, abi::SECCOMP_RET_ERRNO | libc::ENOPROTOOPT as u32),
            SockFilter::stmt(op::RET_K, abi::SECCOMP_RET_ALLOW),
        ];
        // Root may install a filter without no-new-privileges; where it may
        // not (no CAP_SYS_ADMIN), this thread takes no-new-privileges first.
        if install_seccomp_filter_on_current_thread(&program).is_err() {
            nix::sys::prctl::set_no_new_privs().unwrap();
            install_seccomp_filter_on_current_thread(&program).unwrap();
        }
    }

    /// This test binary, where uid 65534 may run it.
    fn this_binary() -> &'static Path {
        static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
        COPY.get_or_init(|| {
            let copy = world().path("host_kernel-peer");
            std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
            std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            copy
        })
    }

    /// `connectors_status` asked by `peer`: the daemon's answer.
    fn ask(d: &Daemon, peer: Peer) -> Value {
        let mut cmd = std::process::Command::new(this_binary());
        cmd.args([
            "--exact",
            "host_kernel::peer_identity::talk_as_told",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PEER_SOCKET, &d.socket)
        .env(
            PEER_USERNS,
            if peer.other_user_namespace { "1" } else { "0" },
        );
        if peer.uid != 0 {
            // std drops the supplementary groups too when it changes the uid.
            cmd.uid(peer.uid).gid(peer.uid);
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let answer = stdout
            .lines()
            .find_map(|l| l.split_once(ANSWER).map(|(_, a)| a))
            .unwrap_or_else(|| {
                panic!(
                    "{peer:?} got no answer: {stdout}{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        serde_json::from_str(answer).unwrap_or_else(|e| panic!("{peer:?}: {e}: {answer}"))
    }

    fn assert_served(d: &Daemon, peer: Peer, kernel: Kernel) {
        let answer = ask(d, peer);
        assert!(
            answer["result"]["connectors"][CONNECTOR].is_object(),
            "{peer:?} under {kernel:?}: {answer}"
        );
    }

    fn assert_refused(d: &Daemon, peer: Peer, kernel: Kernel) {
        let answer = ask(d, peer);
        assert_eq!(
            answer["error"]["data"]["reason"], "caller_not_allowed",
            "{peer:?} under {kernel:?}: {answer}"
        );
    }

    #[test]
    fn root_is_served() {
        for kernel in KERNELS {
            let d = daemon("root", kernel);
            let root = Peer {
                uid: 0,
                other_user_namespace: false,
            };
            assert_served(&d, root, kernel);
        }
    }

    #[test]
    fn an_allowed_uid_is_served() {
        for kernel in KERNELS {
            let d = daemon("allowed", kernel);
            let nobody = Peer {
                uid: NOBODY,
                other_user_namespace: false,
            };
            assert_served(&d, nobody, kernel);
        }
    }

    /// Root and the allowed uid alike, each from a user namespace of its own
    /// (root's keeps uid 0 as the daemon sees it).
    #[test]
    fn a_peer_in_another_user_namespace_is_refused() {
        for kernel in KERNELS {
            let d = daemon("userns", kernel);
            for uid in [0, NOBODY] {
                let peer = Peer {
                    uid,
                    other_user_namespace: true,
                };
                assert_refused(&d, peer, kernel);
            }
        }
    }

    /// A peer's side when this binary runs as one (see [`ask`]); otherwise
    /// nothing. It asks `connectors_status` and prints the answer line after
    /// [`ANSWER`].
    #[test]
    fn talk_as_told() {
        let Some(socket) = std::env::var_os(PEER_SOCKET) else {
            return;
        };
        let addr = UnixAddr::new(Path::new(&socket)).unwrap();
        let request = format!(
            "{}\n",
            json!({"jsonrpc": "2.0", "id": 1, "method": "connectors_status"})
        );
        let mut answer = vec![0u8; 1 << 20];
        let flags = match std::env::var(PEER_USERNS).as_deref() {
            Ok("1") => libc::CLONE_NEWUSER,
            _ => 0,
        };
        let (from_child, to_child) = nix::unistd::pipe().unwrap();
        // A clone: this process has other threads (the test harness's), and
        // only a new process may enter a new user namespace. The child uses
        // what is made above and allocates nothing.
        let pid = clone_process(flags).unwrap();
        if pid == 0 {
            drop(from_child);
            let code = match talk(&addr, request.as_bytes(), &mut answer) {
                Ok(n) => match nix::unistd::write(&to_child, &answer[..n]) {
                    Ok(_) => 0,
                    Err(_) => 2,
                },
                Err(_) => 1,
            };
            exit_immediately(code);
        }
        drop(to_child);
        let mut got = Vec::new();
        std::fs::File::from(from_child)
            .read_to_end(&mut got)
            .unwrap();
        let status = waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
        assert_eq!(
            status,
            WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 0)
        );
        println!("{ANSWER}{}", String::from_utf8_lossy(&got).trim_end());
    }

    /// Connects to `addr`, sends `request` and reads the answer line into
    /// `answer`; its length. No allocation: it runs in a clone of a process
    /// with other threads.
    fn talk(addr: &UnixAddr, request: &[u8], answer: &mut [u8]) -> nix::Result<usize> {
        let s: OwnedFd = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )?;
        // The daemon hashes its peer's executable (this test binary, tens
        // of MB) before it answers the first request: under an emulated
        // kernel on a busy host that has taken more than 30 s.
        let timeout = TimeVal::from(libc::timeval {
            tv_sec: 180,
            tv_usec: 0,
        });
        setsockopt(&s, sockopt::ReceiveTimeout, &timeout)?;
        connect(s.as_raw_fd(), addr)?;
        let mut sent = 0;
        while sent < request.len() {
            sent += nix::unistd::write(&s, &request[sent..])?;
        }
        let mut got = 0;
        while got < answer.len() && !answer[..got].contains(&b'\n') {
            match nix::unistd::read(&s, &mut answer[got..])? {
                0 => break,
                n => got += n,
            }
        }
        Ok(got)
    }
}
