//! The attack table: every attack's name, threat group, arguments, one-line
//! description and function. Groups follow docs/security.md (T terminal, S syscall
//! filter, F filesystem, X exec/identity, N IPC/network, R resources).
//!
//! An `about` text that says "no control" names the reason the attack cannot
//! succeed even unconfined as root on a machine like the dev VM. The attacks
//! on x86-only entry points (x32, i386, iopl) are in x86_64 builds only.

mod abi;
mod exec;
mod fs_read;
mod fs_write;
mod info;
mod kernel;
mod lifecycle;
mod modes;
mod mounts;
mod net;
mod privileged;
mod terminal;
mod tracing;

use crate::report::{Args, UsageError, Verdict};

/// Where the one JSON report line goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// Standard output (every attack but output-flood).
    Stdout,
    /// Standard error (output-flood, whose stdout is the flood).
    Stderr,
}

/// One attack.
pub struct Attack {
    /// Kebab-case name used on the command line.
    pub name: &'static str,
    /// Threat group letter.
    pub group: char,
    /// Argument synopsis.
    pub usage: &'static str,
    /// What it does and what "blocked" means.
    pub about: &'static str,
    /// Where the report goes.
    pub channel: Channel,
    /// Performs it.
    pub run: fn(&Args<'_>) -> Result<Verdict, UsageError>,
}

const fn attack(
    name: &'static str,
    group: char,
    usage: &'static str,
    about: &'static str,
    run: fn(&Args<'_>) -> Result<Verdict, UsageError>,
) -> Attack {
    Attack {
        name,
        group,
        usage,
        about,
        channel: Channel::Stdout,
        run,
    }
}

/// Finds an attack by name.
pub fn find(name: &str) -> Option<&'static Attack> {
    ATTACKS.iter().find(|attack| attack.name == name)
}

/// Every attack, grouped as in docs/security.md.
pub static ATTACKS: &[Attack] = &[
    // T: terminal and session
    attack("tiocsti", 'T', "[TEXT]", "ioctl(TIOCSTI) pushes TEXT (default \"x\") into the tty on fds 0-2 and /dev/tty (stops after the first success); blocked if every target refuses (EPERM/ENOTTY/EBADF/EIO) or cannot be opened. Control needs a tty on stdin (e.g. run under script(1))", terminal::tiocsti),
    attack("tiocsti-high-bits", 'T', "[TEXT]", "as tiocsti, but the raw ioctl cmd is TIOCSTI | 1<<32 (kernel ignores the high bits; a 64-bit seccomp compare does not). Control needs a tty on stdin", terminal::tiocsti_high_bits),
    attack("tioclinux", 'T', "", "ioctl(TIOCLINUX, TIOCL_GETSHIFTSTATE) (read-only) on fds 0-2, /dev/tty, /dev/tty0, /dev/console; blocked if all refuse (EPERM/ENOTTY/EBADF) or cannot be opened. Control needs a VT (/dev/tty0 as root)", terminal::tioclinux),
    attack("kill-parent-group", 'T', "", "kill(-1, 0): escaped if any process but itself (and its namespace's init) can be signalled, or its process group is led from outside its pid namespace (kill(0, sig) would reach the supervisor)", terminal::kill_parent_group),
    // S: syscall filter
    #[cfg(target_arch = "x86_64")]
    attack("x32-syscall", 'S', "", "getpid with the x32 bit (nr | 0x40000000) in a child; blocked if the child dies by SIGSYS or gets ENOSYS/EPERM. No control on kernels without CONFIG_X86_X32_ABI (ENOSYS, e.g. the dev VM)", abi::x32_syscall),
    #[cfg(target_arch = "x86_64")]
    attack("int80-i386", 'S', "", "i386 getpid through `int 0x80` in a child; blocked if the child dies by SIGSYS (or SIGSEGV: no ia32 emulation) or gets ENOSYS/EPERM", abi::int80_i386),
    attack("clone3-newuser", 'S', "", "raw clone3(CLONE_NEWUSER) in a child; blocked on ENOSYS/EPERM (or ENOSPC/EUSERS: namespace limit)", abi::clone3_newuser),
    attack("clone-newuser", 'S', "", "raw clone(CLONE_NEWUSER|SIGCHLD) in a child; blocked on EPERM/ENOSYS (or ENOSPC/EUSERS)", abi::clone_newuser),
    attack("unshare-user", 'S', "", "unshare(CLONE_NEWUSER) in a child; blocked on EPERM/ENOSYS (or ENOSPC/EUSERS)", abi::unshare_user),
    attack("unshare-mount", 'S', "", "unshare(CLONE_NEWNS) in a child; blocked on EPERM/ENOSYS", abi::unshare_mount),
    attack("unshare-net", 'S', "", "unshare(CLONE_NEWNET) in a child; blocked on EPERM/ENOSYS", abi::unshare_net),
    attack("setns", 'S', "", "setns(open(/proc/self/ns/net), CLONE_NEWNET) (rejoins its own netns: no effect); blocked on EPERM/ENOSYS or if the ns file cannot be opened", abi::setns),
    attack("ptrace-attach", 'S', "PID", "ptrace(PTRACE_SEIZE, PID) (attaches without stopping; the kernel detaches when the probe exits); blocked on EPERM/ESRCH/EACCES/ENOSYS", tracing::ptrace_attach),
    attack("process-vm-readv", 'S', "PID", "process_vm_readv of 16 bytes at PID's first readable mapping; escaped on success or EFAULT (access granted); blocked on EPERM/ESRCH/EACCES/ENOSYS", tracing::process_vm_readv),
    attack("pidfd-getfd", 'S', "PID", "pidfd_open(PID) then pidfd_getfd of its fds 0-2; escaped on a stolen fd or EBADF (access granted); blocked on EPERM/ESRCH/EACCES/ENOSYS", tracing::pidfd_getfd),
    attack("io-uring-setup", 'S', "", "io_uring_setup(1); blocked on EPERM/ENOSYS/EACCES", kernel::io_uring_setup),
    attack("bpf-prog-load", 'S', "", "bpf(BPF_PROG_LOAD) of a 2-instruction socket filter; blocked on EPERM/EACCES/ENOSYS", kernel::bpf_prog_load),
    attack("userfaultfd", 'S', "", "userfaultfd(O_CLOEXEC), then with UFFD_USER_MODE_ONLY; blocked if both get EPERM/EACCES/ENOSYS", kernel::userfaultfd),
    attack("perf-event-open", 'S', "", "perf_event_open of a user-only software counter on itself; blocked on EPERM/EACCES/ENOSYS", kernel::perf_event_open),
    attack("keyctl", 'S', "", "keyctl(KEYCTL_GET_KEYRING_ID) of @u and @s; blocked if both get EPERM/EACCES/ENOSYS", kernel::keyctl),
    attack("add-key", 'S', "", "add_key(\"user\") into its own process keyring (gone at exit; invalidated at once); blocked on EPERM/EACCES/ENOSYS", kernel::add_key),
    attack("personality-read-implies-exec", 'S', "", "personality(READ_IMPLIES_EXEC) and personality(ADDR_NO_RANDOMIZE), checked by query and restored; blocked if neither takes effect", kernel::personality_weakening),
    attack("mount-tmpfs", 'S', "[DIR]", "mount(tmpfs) on DIR (default /tmp), then unmounted; blocked on EPERM/EACCES/ENOSYS. Runs in a private mount-ns copy when the probe can make one", mounts::mount_tmpfs),
    attack("umount-root", 'S', "", "umount2(\"/\", MNT_DETACH); blocked on EPERM/EINVAL(locked mount)/ENOSYS. Never touches the host: runs in a private mount-ns copy, or in place only without CAP_SYS_ADMIN over the initial namespace", mounts::umount_root),
    attack("pivot-root", 'S', "", "pivot_root(\".\", \".\") onto a tmpfs at /tmp; blocked on EPERM/ENOSYS; EINVAL/EBUSY past the privilege check is inconclusive. Same host safety as umount-root", mounts::pivot_root),
    attack("open-tree", 'S', "", "open_tree(\"/\", OPEN_TREE_CLONE) (a detached copy, closed at once); blocked on EPERM/ENOSYS", mounts::open_tree),
    attack("fsopen", 'S', "", "fsopen(\"tmpfs\") (a filesystem context, never mounted); blocked on EPERM/ENOSYS", mounts::fsopen),
    attack("prctl-set-ptracer-any", 'S', "", "prctl(PR_SET_PTRACER, ANY), reset after; blocked on EPERM/ENOSYS, or EINVAL (no Yama LSM: no control on the dev VM)", kernel::prctl_set_ptracer_any),
    attack("prlimit-init", 'S', "", "prlimit64(1, RLIMIT_CORE, the caller's own value): init shares the program's uid, so only the filter stands between the program and init's limits; blocked on EPERM/EACCES/ENOSYS", kernel::prlimit_init),
    attack("prctl-set-mm", 'S', "", "prctl(PR_SET_MM, PR_SET_MM_MAP_SIZE) (the unprivileged checkpoint/restore entry, read-only); blocked on EPERM/ENOSYS", kernel::prctl_set_mm),
    attack("init-module", 'S', "", "finit_module(/dev/null): can never load anything; escaped if past the privilege check (EINVAL/ENOEXEC); blocked on EPERM/ENOSYS. No control without CONFIG_MODULES (ENOSYS on the dev VM)", privileged::init_module),
    attack("kexec-load", 'S', "", "kexec_load with 17 segments (> KEXEC_SEGMENT_MAX: never loads); escaped on EINVAL (past the privilege check); blocked on EPERM/ENOSYS. No control without CONFIG_KEXEC (dev VM)", privileged::kexec_load),
    attack("open-by-handle-at", 'S', "", "name_to_handle_at(\"/\") then open_by_handle_at (\"shocker\"); escaped on an fd (or ESTALE/EINVAL past the privilege check); blocked on EPERM/EACCES/ENOSYS", privileged::open_by_handle_at),
    #[cfg(target_arch = "x86_64")]
    attack("iopl", 'S', "", "iopl(3), dropped back to 0; blocked on EPERM/ENOSYS. No control without CONFIG_X86_IOPL_IOPERM (ENOSYS on the dev VM)", privileged::iopl),
    attack("reboot", 'S', "", "reboot(LINUX_REBOOT_CMD_CAD_OFF) only (never a real reboot), restored to CAD_ON if it was on; blocked on EPERM/ENOSYS or EINVAL (pid namespace ignores it)", privileged::reboot),
    attack("settimeofday", 'S', "", "settimeofday to the time read just before (a microseconds step); blocked on EPERM/ENOSYS", privileged::settimeofday),
    attack("acct", 'S', "", "acct(a path that does not exist): the privilege check comes first; blocked only on EPERM/ENOSYS (ENOENT means it was allowed)", privileged::acct),
    attack("swapon", 'S', "", "swapon(a path that does not exist); blocked only on EPERM/ENOSYS (ENOENT means it was allowed)", privileged::swapon),
    attack("no-new-privs-and-caps", 'S', "", "reads /proc/self/status: escaped if NoNewPrivs != 1, any of CapInh/CapPrm/CapEff/CapBnd/CapAmb != 0, or Seccomp != 2", privileged::no_new_privs_and_caps),
    attack("chroot", 'S', "", "chroot(\"/\") in a child (needs CAP_SYS_CHROOT); blocked on EPERM/EACCES/ENOSYS", abi::chroot),
    attack("openat2-create", 'S', "DIR TAG", "openat2 creating DIR/TAG-openat2 with mode 04755 (seccomp cannot read the mode inside struct open_how); blocked only on ENOSYS, the answer that makes libcs fall back to openat", modes::openat2_create),
    attack("memfd-secret", 'S', "", "memfd_secret(O_CLOEXEC), closed at once; blocked on EPERM/ENOSYS. No control without CONFIG_SECRETMEM or with secretmem disabled (ENOSYS)", modes::memfd_secret),
    attack("listmount-statmount", 'S', "", "listmount(LSMT_ROOT) and statmount of the root mount (read only); blocked if both get EPERM/ENOSYS. No control before Linux 6.8 (ENOSYS)", modes::listmount_statmount),
    // F: filesystem
    attack("read-host-file", 'F', "PATH", "open(PATH, O_RDONLY) and read 1 byte; blocked if open fails (EACCES/EPERM/ENOENT/...)", fs_read::read_host_file),
    attack("list-host-dir", 'F', "PATH", "lists directory PATH; escaped if it lists at least one entry; blocked if it cannot be opened or is empty", fs_read::list_host_dir),
    attack("write-read-scope", 'F', "DIR", "creates a file in DIR (meant read-only), removed after; blocked on EROFS/EACCES/EPERM/ENOENT", fs_write::write_read_scope),
    attack("write-then-exec", 'F', "DIR", "copies /bin/true into DIR, chmod 755, execs it in a child, removes it; escaped if it ran; blocked if the copy or the exec is refused", fs_write::write_then_exec),
    attack("memfd-exec", 'F', "", "memfd_create with flags 0, MFD_EXEC and MFD_NOEXEC_SEAL, /bin/true written in, execveat(AT_EMPTY_PATH) in a child; escaped if any ran", fs_write::memfd_exec),
    attack("proc-host-pids", 'F', "[PID...]", "escaped if /proc shows more than 4 pids or any PID given", fs_read::proc_host_pids),
    attack("proc-1-root", 'F', "PATH [PID]", "opens /proc/1/root/PATH (or /proc/PID/root/PATH) and reads 1 byte; blocked if the open fails (EACCES/ENOENT/...). Control: give a host PID when the host's pid 1 is protected (dev VM)", fs_read::proc_1_root),
    attack("reopen-fd-rw", 'F', "", "reopens every regular-file fd through /proc/self/fd/N with O_RDWR; blocked if none exists or every reopen is refused. Control: run with a read-only file on stdin", fs_read::reopen_fd_rw),
    attack("leaked-fds", 'F', "", "escaped if /proc/self/fd lists anything but 0, 1, 2 and the listing's own fd", fs_read::leaked_fds),
    attack("mknod-char", 'F', "[DIR]", "mknod DIR/<name> c 1 1 (default DIR /tmp), removed after; blocked on EPERM/EACCES/EROFS", fs_write::mknod_char),
    attack("dev-listing", 'F', "", "escaped if /dev holds anything beyond null zero full random urandom shm fd stdin stdout stderr pts ptmx tty", fs_read::dev_listing),
    attack("sysrq", 'F', "", "opens /proc/sysrq-trigger for writing (never writes); escaped if the open succeeds. No control without CONFIG_MAGIC_SYSRQ (ENOENT on the dev VM)", fs_write::sysrq),
    attack("proc-sys-write", 'F', "", "writes /proc/sys/kernel/hostname with its own current value (no change); blocked on EACCES/EPERM/EROFS/ENOENT", fs_write::proc_sys_write),
    attack("sys-visible", 'F', "", "escaped if /sys/fs/cgroup or /sys/kernel lists any entry", fs_read::sys_visible),
    attack("link-escape", 'F', "RO_FILE RW_DIR", "link(RO_FILE, RW_DIR/<name>), removed after; escaped if the link succeeds and opens for writing (O_APPEND, nothing written)", fs_write::link_escape),
    attack("disk-fill", 'F', "DIR [MAX_BYTES]", "writes a file in DIR until an error or MAX_BYTES (default 2 GiB), then removes it; blocked if it stops early with EFBIG/ENOSPC/EDQUOT", fs_write::disk_fill),
    attack("rename-escape", 'F', "SRC DST", "rename(SRC, DST) across scopes (e.g. a protected dir into a writable one), renamed back if it worked; blocked on EXDEV/EACCES/EPERM/EROFS/ENOENT", fs_write::rename_escape),
    // X: exec and identity
    attack("setuid-binary", 'X', "PATH", "executes `PATH -u` (e.g. a 4755 root-owned copy of id) and reads its final credentials; escaped if its euid became 0 or it gained capabilities the probe lacks. Control: run as a non-root user", exec::setuid_binary),
    attack("exec-outside", 'X', "PATH [ARG...]", "executes PATH (outside the scopes) in a child; escaped if the exec succeeded; blocked on EACCES/EPERM/ENOENT", exec::exec_outside),
    attack("setid-chmod", 'X', "FILE", "creates FILE 0644 (replacing it), then chmod 04755 (x86_64 only: aarch64 has no chmod), fchmod 02755, fchmodat 06755 and fchmodat2 04755 (raw syscalls); escaped if FILE ends with a set-id bit; blocked if each call is refused (EPERM/EACCES; ENOSYS for fchmodat2 on kernels before 6.6). FILE is left for the suite to check from outside", modes::setid_chmod),
    attack("setid-create", 'X', "DIR TAG", "creates DIR/TAG-{open,openat,creat,mknod,mknodat,mkdir,mkdirat} (aarch64: the *at calls only, it has no others) with set-id modes (raw syscalls), and an O_TMPFILE file with 04755 linked to DIR/TAG-tmpfile through /proc/self/fd; escaped if anything has a set-id bit; blocked if every call is refused (EPERM/EACCES). Inconclusive when a call goes through without the bits (the kernel drops them from mkdir's mode itself). What was made is left for the suite", modes::setid_create),
    // N: IPC and network
    attack("tcp-connect", 'N', "IP:PORT", "TCP connect (3 s timeout); escaped if it connects", net::tcp_connect),
    attack("tcp-connect-external", 'N', "", "TCP connect to 1.1.1.1:443 and [2606:4700::1111]:443; blocked only if each fails with ENETUNREACH/EPERM/EACCES (or no IPv6 at all)", net::tcp_connect_external),
    attack("mptcp-connect", 'N', "IP:PORT", "connect with IPPROTO_MPTCP (which Landlock TCP rules once missed); escaped if it connects; blocked as tcp-connect, or EPROTONOSUPPORT/ENOPROTOOPT (no MPTCP)", net::mptcp_connect),
    attack("loopback-own", 'N', "PORT", "bind 127.0.0.1:PORT (a port a host listener holds) and listen, connect, and read a nonce back through the accepted connection; blocked when its own server answers its own client (the loopback is the sandbox's); escaped when the port is taken (the host's loopback is shared) or another server answers; a loopback that does not work at all also fails", net::loopback_own),
    attack("unix-connect", 'N', "PATH", "connect to the UNIX socket PATH; escaped if it connects; blocked on ENOENT/EACCES/EPERM/ECONNREFUSED", net::unix_connect),
    attack("abstract-connect", 'N', "NAME", "connect to the abstract UNIX socket @NAME; escaped if it connects; blocked on ECONNREFUSED/EPERM", net::abstract_connect),
    attack("unix-dgram-pair-sendto", 'N', "PATH", "socketpair(AF_UNIX, SOCK_DGRAM), one end disconnected with connect(AF_UNSPEC), then sendto the UNIX socket PATH (a host datagram service) without socket(AF_UNIX); escaped if the datagram is sent; blocked on EPERM/EACCES (socketpair or sendto), ENOENT/ECONNREFUSED/ENOTDIR", modes::unix_dgram_pair_sendto),
    attack("netlink-socket", 'N', "", "socket(AF_NETLINK, NETLINK_ROUTE); blocked on EPERM/EACCES/EAFNOSUPPORT", net::netlink_socket),
    attack("packet-socket", 'N', "", "socket(AF_PACKET, SOCK_RAW); blocked on EPERM/EACCES/EAFNOSUPPORT", net::packet_socket),
    attack("vsock-socket", 'N', "", "socket(AF_VSOCK) (never connects); blocked on EPERM/EACCES/EAFNOSUPPORT", net::vsock_socket),
    attack("udp-send", 'N', "IP:PORT", "UDP send of one datagram; escaped if sent to a non-loopback address, or to loopback without ICMP port-unreachable (a listener got it)", net::udp_send),
    attack("kill-host-pid", 'N', "PID", "kill(PID, 0); blocked on ESRCH/EPERM", net::kill_host_pid),
    attack("sysv-shm", 'N', "SHMID", "shmctl(IPC_STAT) and shmat(SHM_RDONLY) on a host segment id; blocked on EINVAL (not in this IPC ns)/EACCES/EPERM/EIDRM", net::sysv_shm),
    attack("hostname", 'N', "HOST_HOSTNAME", "escaped if uname's nodename equals HOST_HOSTNAME", net::hostname),
    // R: resources and lifecycle
    attack("fork-bomb", 'R', "[MAX]", "forks pausing children until failure or MAX (default 10000), then kills them all; blocked if it stops below MAX with EAGAIN. Never run unconfined without a small MAX", lifecycle::fork_bomb),
    attack("memory-bomb", 'R', "MIB", "allocates and touches MIB MiB; escaped if it survives (an OOM kill leaves no report); blocked on ENOMEM", lifecycle::memory_bomb),
    Attack { channel: Channel::Stderr, ..attack("output-flood", 'R', "BYTES", "writes BYTES of 'x' to stdout as fast as it can; reports on STDERR, always blocked (the supervisor's caps are checked from outside)", lifecycle::output_flood) },
    attack("daemonize", 'R', "PIDFILE [LINGER]", "double fork + setsid; the grandchild writes its pid (as seen in its pid ns) to PIDFILE, points stdio at /dev/null and sleeps 300 s with PIDFILE in its argv; reports blocked once the daemon is up (after LINGER seconds, default 0; the test checks from outside that it is gone)", lifecycle::daemonize),
    attack("sleep", 'R', "SECONDS", "sleeps SECONDS; escaped if it was not stopped in time (for timeout tests)", lifecycle::sleep),
    attack("cpu-spin", 'R', "[SECONDS]", "spins on the CPU SECONDS (default 600); escaped if not stopped", lifecycle::cpu_spin),
    attack("ignore-sigterm", 'R', "[SECONDS]", "ignores SIGTERM and sleeps SECONDS (default 600); escaped if not stopped", lifecycle::ignore_sigterm),
    attack("core-dump", 'R', "[DIR]", "raises RLIMIT_CORE to its hard limit (chdir DIR first), reports, then dies by SIGSEGV (exit status 139, not 0/1); escaped if a core could be written (dumpable, and soft limit > 0 or core_pattern pipes to a helper)", lifecycle::core_dump),
    attack("env-dump", 'R', "", "detail is a JSON object of the environment; always blocked", info::env_dump),
    attack("whoami", 'R', "", "detail is a JSON object: uids, gids, groups, caps, no_new_privs, seccomp, pid, ppid, cwd, hostname; always blocked", info::whoami),
];
