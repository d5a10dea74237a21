//! The escape suite: hostile programs run through the real `spawnd run`, each
//! attack checked from inside by `spawnd-probe` and, where it matters, from
//! outside. Every attack runs twice: with spawnd as root and as the
//! unprivileged user nobody (65534). Groups follow docs/security.md: T terminal,
//! S syscall filter, F filesystem, X exec/identity, N IPC/network, R resources,
//! C policy integrity.

use crate::harness;

use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use harness::{world, As, World};

/// A host process the sandbox must not reach.
struct HostSleeper(Child);

impl HostSleeper {
    fn start() -> HostSleeper {
        HostSleeper(Command::new("sleep").arg("300").spawn().unwrap())
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for HostSleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn p(w: &World, rel: &str) -> String {
    w.path(rel).display().to_string()
}

fn blocked(who: As, attack: &str, args: &[&str]) {
    world().attack(who, attack, args).assert_blocked();
}

macro_rules! as_root_and_nobody {
    ($($(#[$meta:meta])* $name:ident => $body:expr;)*) => {
        mod as_root {
            use super::*;
            $( $(#[$meta])* #[test] fn $name() { let f: fn(As) = $body; f(As::Root) } )*
        }
        mod as_nobody {
            use super::*;
            $( $(#[$meta])* #[test] fn $name() { let f: fn(As) = $body; f(As::Nobody) } )*
        }
        /// The same attacks, the sandbox launched by a forked spawner (the daemon's path).
        mod via_spawner {
            use super::*;
            $( $(#[$meta])* #[test] fn $name() { let f: fn(As) = $body; f(As::RootViaSpawner) } )*
        }
    };
}

as_root_and_nobody! {
    // T — terminal and session
    t1_tiocsti_is_refused => |who| blocked(who, "tiocsti", &[]);
    t2_tiocsti_with_high_bits_is_refused => |who| blocked(who, "tiocsti-high-bits", &[]);
    t3_tioclinux_is_refused => |who| blocked(who, "tioclinux", &[]);
    t4_no_process_outside_the_sandbox_can_be_signalled => |who| blocked(who, "kill-parent-group", &[]);

    // S — syscall filter
    #[cfg(target_arch = "x86_64")]
    s5_x32_syscalls_are_killed => |who| blocked(who, "x32-syscall", &[]);
    #[cfg(target_arch = "x86_64")]
    s5_i386_int80_is_killed => |who| blocked(who, "int80-i386", &[]);
    s6_clone3_with_a_new_user_namespace_is_refused => |who| blocked(who, "clone3-newuser", &[]);
    s6_clone_with_a_new_user_namespace_is_refused => |who| blocked(who, "clone-newuser", &[]);
    s7_nested_user_namespaces_are_refused => |who| blocked(who, "unshare-user", &[]);
    s7_new_mount_and_network_namespaces_are_refused => |who| { blocked(who, "unshare-mount", &[]); blocked(who, "unshare-net", &[]); };
    s8_setns_is_refused => |who| blocked(who, "setns", &[]);
    s16_chroot_is_refused => |who| blocked(who, "chroot", &[]);
    s9_a_host_process_cannot_be_traced_read_or_robbed_of_fds => |who| {
        let host = HostSleeper::start();
        for attack in ["ptrace-attach", "process-vm-readv", "pidfd-getfd"] {
            blocked(who, attack, &[&host.pid()]);
        }
    };
    s10_io_uring_is_refused => |who| blocked(who, "io-uring-setup", &[]);
    s11_to_s13_bpf_userfaultfd_and_perf_are_refused => |who| { for a in ["bpf-prog-load", "userfaultfd", "perf-event-open"] { blocked(who, a, &[]); } };
    s14_kernel_keyrings_are_out_of_reach => |who| { blocked(who, "keyctl", &[]); blocked(who, "add-key", &[]); };
    s15_personality_cannot_weaken_the_process => |who| blocked(who, "personality-read-implies-exec", &[]);
    s16_the_mount_family_is_refused => |who| { for a in ["mount-tmpfs", "umount-root", "pivot-root", "open-tree", "fsopen"] { blocked(who, a, &[]); } };
    s18_dangerous_prctl_options_are_refused => |who| { blocked(who, "prctl-set-ptracer-any", &[]); blocked(who, "prctl-set-mm", &[]); };
    s19_privileged_leftovers_are_refused => |who| {
        for a in ["init-module", "kexec-load", "open-by-handle-at", "reboot", "settimeofday", "acct", "swapon"] {
            blocked(who, a, &[]);
        }
        // Port I/O privileges: an x86 call, absent elsewhere.
        #[cfg(target_arch = "x86_64")]
        blocked(who, "iopl", &[]);
    };
    s20_the_program_has_no_privileges_and_runs_filtered => |who| blocked(who, "no-new-privs-and-caps", &[]);
    s21_the_program_cannot_change_its_inits_limits_but_may_change_its_own => |who| {
        blocked(who, "prlimit-init", &[]);
        let out = world().run(who, "sh", &[("script", "ulimit -n 100 && ulimit -n")], &[]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["data"]["stdout"]["text"], "100\n", "{v}");
    };
    s9_the_sandboxs_own_init_cannot_be_hijacked_through_proc => |who| {
        let script = "exec 3>/proc/1/mem && echo ESCAPED-mem; readlink /proc/1/fd/0 && echo ESCAPED-fd; cat /proc/1/environ && echo ESCAPED-environ; grep -q 'Seccomp:.2' /proc/1/status || echo ESCAPED-unfiltered-init; true";
        let out = world().run(who, "sh", &[("script", script)], &[]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let text = v["data"]["stdout"]["text"].as_str().unwrap_or("");
        assert!(!text.contains("ESCAPED"), "{text}");
    };
    s9_the_sandboxs_own_init_catches_no_signal_the_program_could_send => |who| {
        // Init waits for signals with sigwaitinfo and catches none: no
        // handler the program could trigger (with kill(1, …) or a SIGIO
        // aimed at pid 1) to interrupt init's waits; what the kernel
        // queues from inside the sandbox, even a signal init passes on for
        // spawnd, is dropped, never passed on to the program.
        let script = "grep '^SigCgt' /proc/1/status; for s in SEGV BUS TERM INT HUP QUIT USR1 USR2; do kill -$s 1; done; sleep 0.2; echo still-here";
        let out = world().run(who, "sh", &[("script", script)], &[]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let text = v["data"]["stdout"]["text"].as_str().unwrap_or("");
        assert!(text.contains("SigCgt:\t0000000000000000"), "{text}");
        assert!(text.contains("still-here"), "{text}");
        assert_eq!(v["data"]["exit_code"], 0, "{v}");
    };

    // F — filesystem
    f_host_files_outside_the_scopes_cannot_be_read => |who| {
        let w = world();
        for path in [p(w, "outside/secret.txt"), "/etc/shadow".into(), "/etc/gshadow".into(), "/root/.bashrc".into(), "/home".into()] {
            blocked(who, "read-host-file", &[&path]);
        }
        // (/etc inside holds the system paths' files and the account files
        // written for the sandbox; benign.rs checks those show no host
        // account.)
        for dir in [p(w, "outside"), "/var".into(), "/root".into(), "/home".into(), "/opt".into()] {
            blocked(who, "list-host-dir", &[&dir]);
        }
    };
    f_a_read_scope_cannot_be_written => |who| blocked(who, "write-read-scope", &[&p(world(), "ro")]);
    f29_a_binary_written_into_a_write_scope_cannot_be_executed => |who| blocked(who, "write-then-exec", &[&p(world(), "rw")]);
    f30_fileless_memfd_execution_is_refused => |who| blocked(who, "memfd-exec", &[]);
    f25_host_processes_are_invisible_in_proc => |who| {
        let host = HostSleeper::start();
        blocked(who, "proc-host-pids", &[&host.pid()]);
        blocked(who, "proc-1-root", &["etc/shadow"]);
    };
    f26_f27_no_descriptor_leaks_in_and_none_can_be_reopened_for_writing => |who| {
        blocked(who, "leaked-fds", &[]);
        blocked(who, "reopen-fd-rw", &[]);
    };
    f32_devices_cannot_be_made_and_dev_is_minimal => |who| {
        blocked(who, "mknod-char", &[&p(world(), "rw")]);
        blocked(who, "mknod-char", &["/tmp"]);
        blocked(who, "dev-listing", &[]);
    };
    f33_procfs_and_sysfs_are_not_writable_or_visible => |who| { for a in ["sysrq", "proc-sys-write", "sys-visible"] { blocked(who, a, &[]); } };
    f24_a_read_only_file_cannot_be_hard_linked_into_a_write_scope => |who| {
        let w = world();
        blocked(who, "link-escape", &[&p(w, "ro/readable.txt"), &p(w, "rw")]);
    };
    f24_a_read_only_file_cannot_be_renamed_into_a_write_scope => |who| {
        let w = world();
        let dst = format!("{}/renamed-{:?}", p(w, "rw"), who);
        blocked(who, "rename-escape", &[&p(w, "ro/readable.txt"), &dst]);
    };
    f37_disk_filling_stops_at_the_file_size_limit => |who| blocked(who, "disk-fill", &[&p(world(), "rw"), "268435456"]);

    // X — exec and identity
    x_a_program_outside_the_scopes_cannot_be_executed => |who| {
        let w = world();
        let outside = w.path("outside/true-copy");
        if !outside.exists() {
            let _ = std::fs::copy("/usr/bin/true", &outside);
        }
        blocked(who, "exec-outside", &[&outside.display().to_string()]);
        blocked(who, "exec-outside", &["/sbin/../../root/anything"]);
    };

    x44_under_exec_declared_only_declared_programs_run => |who| only_declared_programs_run(who);
    x44_a_changed_also_runs_file_refuses_the_spawn => |who| a_changed_also_runs_file_refuses_the_spawn(who);

    x41_a_script_runs_the_bytes_that_were_hashed_even_when_its_file_is_swapped => |who| {
        a_swapped_script_runs_what_was_hashed(who)
    };
    x42_a_program_rewritten_in_place_after_the_gate_never_runs_the_new_bytes => |who| {
        a_program_rewritten_in_place_runs_what_was_hashed(who)
    };

    // N — IPC and network
    n50_the_hosts_loopback_tcp_listener_is_unreachable => |who| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        blocked(who, "tcp-connect", &[&addr]);
    };
    n49_there_is_no_route_out => |who| blocked(who, "tcp-connect-external", &[]);
    n54_the_sandboxs_loopback_is_its_own_on_any_port => |who| {
        // The host holds the port; inside, the program binds it all the
        // same and its own client reaches its own server.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port().to_string();
        blocked(who, "loopback-own", &[&port]);
    };
    n54_mptcp_to_a_host_listener_is_refused => |who| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        blocked(who, "mptcp-connect", &[&listener.local_addr().unwrap().to_string()]);
    };
    n45_a_host_pathname_socket_is_unreachable => |who| {
        let path = world().path(&format!("outside/host-{}.sock", std::process::id() ^ (who as u32)));
        let _ = std::fs::remove_file(&path);
        let _listener = UnixListener::bind(&path).unwrap();
        blocked(who, "unix-connect", &[&path.display().to_string()]);
    };
    n46_a_host_abstract_socket_is_unreachable => |who| {
        let name = format!("spawnd-test-{}-{}", std::process::id(), who as u8);
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let _listener = UnixListener::bind_addr(&addr).unwrap();
        blocked(who, "abstract-connect", &[&name]);
    };
    n49_n53_raw_netlink_and_vsock_sockets_are_refused => |who| { for a in ["netlink-socket", "packet-socket", "vsock-socket"] { blocked(who, a, &[]); } };
    n_udp_to_a_host_loopback_listener_does_not_arrive => |who| {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        blocked(who, "udp-send", &[&sock.local_addr().unwrap().to_string()]);
    };
    n47_host_processes_cannot_be_signalled => |who| {
        let host = HostSleeper::start();
        blocked(who, "kill-host-pid", &[&host.pid()]);
    };
    n48_host_sysv_shared_memory_is_invisible => |who| {
        let out = Command::new("ipcmk").args(["-M", "4096"]).output().unwrap();
        let id: String = String::from_utf8_lossy(&out.stdout).chars().filter(char::is_ascii_digit).collect();
        let report = world().attack(who, "sysv-shm", &[&id]);
        let _ = Command::new("ipcrm").args(["-m", &id]).status();
        report.assert_blocked();
    };
    n_the_host_name_is_not_visible => |who| {
        let host = String::from_utf8(std::fs::read("/proc/sys/kernel/hostname").unwrap()).unwrap();
        blocked(who, "hostname", &[host.trim()]);
    };

    // R — resources and lifecycle
    r55_a_fork_bomb_is_capped => |who| blocked(who, "fork-bomb", &[]);
    r56_a_memory_bomb_is_stopped => |who| {
        let r = world().attack(who, "memory-bomb", &["1024"]);
        let killed = r.envelope["data"]["signal"] == 9;
        assert!(killed || r.probe["outcome"] == "blocked", "memory bomb survived: {}", r.envelope["data"]);
        // Under cgroups, the kernel's OOM killer did it, and the result says so.
        if killed && r.envelope["data"]["isolation"]["limits_via"] != "rlimits" {
            assert_eq!(r.envelope["data"]["oom_killed"], true, "{}", r.envelope["data"]);
        }
    };
    r56_the_private_tmpfs_mounts_hold_no_more_than_the_memory_limit => |who| {
        // The manifest's limit is 256 MiB: /tmp and /dev/shm together hold
        // at most that (tmpfs pages are memory that rlimits do not count).
        let code = "import os\ndef fill(d):\n    n = 0\n    try:\n        with open(d + '/fill', 'wb', buffering=0) as f:\n            while n < 1024:\n                f.write(b'x' * (1 << 20)); n += 1\n    except OSError:\n        pass\n    os.unlink(d + '/fill')\n    return n\nprint(fill('/tmp'), fill('/dev/shm'))\n";
        let out = world().run(who, "py", &[("code", code)], &[]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let text = v["data"]["stdout"]["text"].as_str().unwrap_or("");
        let mib: Vec<u64> = text.split_whitespace().filter_map(|n| n.parse().ok()).collect();
        assert_eq!(mib.len(), 2, "{v}");
        assert!(mib[0] > 0 && mib[1] > 0, "{v}");
        assert!(mib[0] + mib[1] <= 256, "tmpfs held {mib:?} MiB under a 256 MiB limit: {v}");
    };
    r56_sysv_shared_memory_never_outlives_its_last_attach => |who| {
        // As root, spawnd writes the sandbox's IPC limits (a detached
        // segment is destroyed at once); without root it cannot, and SysV
        // IPC objects are refused instead.
        let code = "import ctypes, ctypes.util, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmat.restype = ctypes.c_void_p\nshm = libc.shmget(0, 1 << 20, 0o1600)\nif shm < 0:\n    print('shmget refused', ctypes.get_errno())\nelse:\n    addr = libc.shmat(shm, None, 0)\n    ctypes.memset(addr, 1, 1 << 20)\n    libc.shmdt(ctypes.c_void_p(addr))\n    buf = ctypes.create_string_buffer(256)\n    print('kept' if libc.shmctl(shm, 2, buf) == 0 else 'gone')\nprint('msgget', 'refused' if libc.msgget(0, 0o1600) < 0 else 'made')\n";
        let out = world().run(who, "py", &[("code", code)], &[]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let text = v["data"]["stdout"]["text"].as_str().unwrap_or("");
        if who.is_root() {
            assert_eq!(text, "gone\nmsgget made\n", "{v}");
        } else {
            assert_eq!(text, format!("shmget refused {}\nmsgget refused\n", libc::EPERM), "{v}");
        }
    };
    r56_memfds_hold_no_memory_beyond_the_limit => |who| {
        // 300 MiB in sealed memfds under a 256 MiB limit: a memory cgroup
        // counts their pages (the program is killed, or its writes fail);
        // under rlimits, which would not, memfds cannot be made at all.
        let code = "import os\nheld = []\ntry:\n    for i in range(30):\n        fd = os.memfd_create('m', os.MFD_CLOEXEC | 8)\n        os.write(fd, b'x' * (10 << 20))\n        held.append(fd)\n    print('HELD', 10 * len(held))\nexcept OSError as e:\n    print('refused', e.errno, 'after', 10 * len(held))\n";
        let out = world().run(who, "py", &[("code", code)], &[]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let data = &v["data"];
        let text = data["stdout"]["text"].as_str().unwrap_or("");
        assert!(!text.contains("HELD"), "300 MiB held in memfds under a 256 MiB limit: {v}");
        if data["isolation"]["limits_via"] == "rlimits" {
            assert_eq!(text, format!("refused {} after 0\n", libc::EPERM), "{v}");
        }
    };
    r64_no_core_dump_is_written => |who| {
        let w = world();
        let r = world().attack(who, "core-dump", &[&p(w, "rw")]);
        assert_eq!(r.probe["outcome"], "blocked", "{}", r.envelope["data"]);
        assert!(!std::fs::read_dir(w.path("rw")).unwrap().flatten().any(|e| e.file_name().to_string_lossy().starts_with("core")));
    };
}

/// Runs `spawnd run` in the background and returns it.
fn spawn_run(w: &World, who: As, op: &str, args: &[(&str, &str)], extra: &[&str]) -> Child {
    w.command(who, op, args, extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn r58_a_daemon_that_double_forks_and_setsids_does_not_outlive_the_run() {
    let w = world();
    let token = format!("{}/rw/daemon-{}", w.dir.display(), std::process::id());
    let r = w.attack(As::Root, "daemonize", &[&token]);
    assert_eq!(r.envelope["ok"], true, "{}", r.envelope);
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(
        harness::host_processes_with(&token).is_empty(),
        "the daemon survived the run"
    );
}

/// Kills spawnd mid-run — the program still running, its double-forked daemon
/// up — and checks every process of its sandbox is gone within a second.
fn assert_killing_spawnd_kills_the_sandbox(who: As, extra: &[&str], label: &str) {
    let w = world();
    let token = format!(
        "{}/rw/victim-{}-{label}",
        w.dir.display(),
        std::process::id()
    );
    let mut child = spawn_run(
        w,
        who,
        "probe2",
        &[("attack", "daemonize"), ("a1", &token), ("a2", "30")],
        extra,
    );
    // spawnd's own argv holds the token too: only the sandbox's processes count.
    let spawnd = child.id() as i32;
    let sandboxed = || -> Vec<i32> {
        harness::host_processes_with(&token)
            .into_iter()
            .filter(|pid| *pid != spawnd)
            .collect()
    };
    let started = std::time::Instant::now();
    while !Path::new(&token).exists() {
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err);
            panic!("{label}: spawnd ended ({status}) before the daemon started: {err}");
        }
        assert!(
            started.elapsed().as_secs() < 10,
            "{label}: the daemon never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        !sandboxed().is_empty(),
        "{label}: no sandboxed process seen from the host"
    );
    let _ = child.kill();
    let _ = child.wait();
    let killed = std::time::Instant::now();
    while !sandboxed().is_empty() {
        assert!(
            killed.elapsed().as_millis() < 1000,
            "{label}: sandbox processes outlived spawnd by more than 1 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn r59_killing_spawnd_kills_the_whole_sandbox_within_a_second() {
    assert_killing_spawnd_kills_the_sandbox(As::Root, &[], "same-uid");
}

/// Through the spawner (the daemon's path): killing spawnd takes the spawner
/// and every sandbox it made with it.
#[test]
fn r59_killing_spawnd_kills_its_spawner_and_the_sandbox() {
    assert_killing_spawnd_kills_the_sandbox(As::RootViaSpawner, &[], "via-spawner");
}

/// Changing uid clears the parent-death signal; it is set again.
#[test]
fn r59_killing_spawnd_kills_the_sandbox_when_the_child_runs_as_another_uid() {
    let w = world();
    let cfg = w.config_with(As::Root, "run-as", "[sandbox]\nrun_as = \"65534:65534\"\n");
    assert_killing_spawnd_kills_the_sandbox(
        As::Root,
        &["--config", &cfg.display().to_string()],
        "run-as",
    );
}

/// How long a run of the probe that ends at once takes here, from spawnd's
/// start to its exit: the setup and teardown every wall-time bound below
/// stands on. A few milliseconds on real hardware; seconds under a
/// software-emulated CPU (the kernel matrix's guests), which a fixed bound
/// would count against the wall time.
fn a_plain_run_takes() -> std::time::Duration {
    let started = std::time::Instant::now();
    let out = world().run(As::Root, "probe1", &[("attack", "sleep"), ("a1", "0")], &[]);
    assert!(
        out.status.code().is_some(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    started.elapsed()
}

/// A stdin source that never delivers must not stall the timeout.
#[test]
fn r57_a_stdin_that_never_ends_does_not_stall_the_wall_time() {
    let w = world();
    let plain = a_plain_run_takes();
    let started = std::time::Instant::now();
    let mut child = w
        .command(
            As::Root,
            "probe1",
            &[("attack", "sleep"), ("a1", "60")],
            &["--stdin-file", "-", "--timeout", "1s"],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let _held_open = child.stdin.take();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(124));
    assert!(
        started.elapsed() < plain + std::time::Duration::from_secs(5),
        "took {:?} (a plain run {plain:?})",
        started.elapsed()
    );
}

#[test]
fn r57_the_wall_time_ends_a_sleeper_with_exit_124_and_kills_one_that_ignores_sigterm() {
    let w = world();
    let plain = a_plain_run_takes();
    for attack in ["sleep", "ignore-sigterm", "cpu-spin"] {
        let started = std::time::Instant::now();
        let out = w.run(
            As::Root,
            "probe1",
            &[("attack", attack), ("a1", "60")],
            &["--timeout", "1s"],
        );
        let elapsed = started.elapsed();
        assert_eq!(
            out.status.code(),
            Some(124),
            "{attack}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["data"]["timed_out"], true);
        // The wall time, SIGTERM's grace, and 1.5 s to spare, past what a
        // run costs here anyway.
        assert!(
            elapsed < plain + std::time::Duration::from_millis(1000 + 1500 + 1500),
            "{attack} took {elapsed:?} (a plain run {plain:?})"
        );
    }
}

#[test]
fn r60_an_output_flood_is_capped_flagged_and_hashed_over_what_is_returned() {
    let w = world();
    let out = w.run(
        As::Root,
        "sh",
        &[("script", "yes spawnd | head -c 10000000")],
        &[],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &v["data"]["stdout"];
    assert_eq!(
        (
            s["truncated"].as_bool(),
            s["bytes"].as_u64(),
            s["total_bytes"].as_u64()
        ),
        (Some(true), Some(1_048_576), Some(10_000_000)),
        "{s}"
    );
    use sha2::Digest;
    let text = s["text"].as_str().unwrap();
    assert_eq!(
        s["sha256"],
        format!(
            "sha256:{}",
            hex::encode(sha2::Sha256::digest(text.as_bytes()))
        )
    );
}

#[test]
fn stdin_is_fed_without_deadlock_even_when_the_child_never_reads_it() {
    let w = world();
    let big = vec![b'x'; 8 << 20];
    let mut child = w
        .command(
            As::Root,
            "sh",
            &[("script", "echo started")],
            &["--stdin-file", "-"],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = std::io::Write::write_all(&mut stdin, &big);
    });
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(child.wait().unwrap().success(), "{out}");
    let _ = writer.join();
    let fed = w.run(
        As::Root,
        "sh",
        &[("script", "wc -c")],
        &["--stdin-file", &p(w, "ro/readable.txt")],
    );
    let v: serde_json::Value = serde_json::from_slice(&fed.stdout).unwrap();
    assert_eq!(
        v["data"]["stdout"]["text"].as_str().map(str::trim),
        Some("25")
    );
}

#[test]
fn the_child_gets_exactly_the_declared_environment() {
    let w = world();
    let out = w
        .command(
            As::Root,
            "probe0",
            &[("attack", "env-dump")],
            &["--env", "SENTINEL=from-the-caller"],
        )
        .env("LEAKY_HOST_VAR", "must-not-appear")
        .output()
        .unwrap();
    let r = harness::Report::from_output(&out);
    let env: serde_json::Value = serde_json::from_str(r.probe["detail"].as_str().unwrap_or("{}"))
        .unwrap_or_else(|_| r.probe["detail"].clone());
    let keys: Vec<&String> = env
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    // The declared keys, and spawnd's runtime defaults (PATH is the
    // manifest's own here); nothing of the invoking environment.
    assert_eq!(keys, ["HOME", "LANG", "PATH", "SENTINEL"], "{env}");
    assert_eq!(env["SENTINEL"], "from-the-caller");
    assert_eq!(
        (&env["HOME"], &env["LANG"], &env["PATH"]),
        (
            &serde_json::json!("/tmp"),
            &serde_json::json!("C.UTF-8"),
            &serde_json::json!("/usr/bin:/bin")
        ),
        "{env}"
    );
}

#[test]
fn f38_a_setuid_binary_gives_nobody_nothing() {
    let w = world();
    let suid = w.path("ro/id-setuid");
    if !suid.exists() {
        std::fs::copy("/usr/bin/id", &suid).unwrap();
        std::fs::set_permissions(&suid, std::os::unix::fs::PermissionsExt::from_mode(0o4755))
            .unwrap();
    }
    w.attack(As::Nobody, "setuid-binary", &[&suid.display().to_string()])
        .assert_blocked();
}

#[test]
fn x40_what_was_hashed_is_what_ran_even_when_the_file_is_swapped() {
    // A racer swaps the program between two binaries while runs go on; every
    // run's recorded sha256 must match what ran (true exits 0, false exits 1).
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let prog = dir.path().join("flip");
    let (t, f) = (dir.path().join("t"), dir.path().join("f"));
    std::fs::copy("/usr/bin/true", &t).unwrap();
    std::fs::copy("/usr/bin/false", &f).unwrap();
    std::fs::copy(&t, &prog).unwrap();
    let manifest = dir.path().join("flip.toml");
    std::fs::write(&manifest, format!("[connector]\nname = \"local://t/flip\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"{}\" }}]\n[capabilities.spawn.operations.x]\nargv = \"flip\"\n", prog.display())).unwrap();
    let hash = |p: &std::path::Path| {
        use sha2::Digest;
        format!(
            "sha256:{}",
            hex::encode(sha2::Sha256::digest(std::fs::read(p).unwrap()))
        )
    };
    let (ht, hf) = (hash(&t), hash(&f));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let racer = {
        let (stop, prog, t, f, dir) = (
            stop.clone(),
            prog.clone(),
            t.clone(),
            f.clone(),
            dir.path().to_path_buf(),
        );
        std::thread::spawn(move || {
            let mut flip = false;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let tmp = dir.join("next");
                std::fs::copy(if flip { &t } else { &f }, &tmp).unwrap();
                std::fs::rename(&tmp, &prog).unwrap();
                flip = !flip;
            }
        })
    };
    for _ in 0..30 {
        let out = Command::new(env!("CARGO_BIN_EXE_spawnd"))
            .env("SPAWND_CONFIG", world().config(As::Root))
            .args(["run", "--json", "--manifest"])
            .arg(&manifest)
            .args(["--op", "x"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let sha = v["data"]["program"]["sha256"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let code = v["data"]["exit_code"].as_i64();
        match code {
            Some(0) => assert_eq!(sha, ht, "exit 0 but the recorded hash is not true's"),
            Some(1) => assert_eq!(sha, hf, "exit 1 but the recorded hash is not false's"),
            other => panic!("unexpected result {other:?}: {v}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    racer.join().unwrap();
}

/// The `#!` script counterpart of x40: a racer swaps the script between
/// two versions while runs go on, each run executing it by its declared
/// path (the interpreter reads it by that path). Every run's recorded
/// sha256 must match what ran (one version exits 0, the other 1), and the
/// script sees its declared path whichever ran.
fn a_swapped_script_runs_what_was_hashed(who: As) {
    use std::os::unix::fs::PermissionsExt;
    let w = world();
    let dir = w.path(&format!("outside/flip-script-{who:?}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let prog = dir.join("flip.sh");
    let (t, f) = (dir.join("t.sh"), dir.join("f.sh"));
    for (file, code) in [(&t, 0), (&f, 1)] {
        std::fs::write(file, format!("#!/usr/bin/bash\necho \"$0\"\nexit {code}\n")).unwrap();
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::copy(&t, &prog).unwrap();
    let manifest = dir.join("flip.toml");
    std::fs::write(&manifest, format!("[connector]\nname = \"local://t/flip-script\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"{}\" }}]\n[capabilities.spawn.operations.x]\nargv = \"flip.sh\"\n", prog.display())).unwrap();
    let hash = |p: &std::path::Path| {
        use sha2::Digest;
        format!(
            "sha256:{}",
            hex::encode(sha2::Sha256::digest(std::fs::read(p).unwrap()))
        )
    };
    let (ht, hf) = (hash(&t), hash(&f));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let racer = {
        let (stop, prog, t, f, dir) = (
            stop.clone(),
            prog.clone(),
            t.clone(),
            f.clone(),
            dir.clone(),
        );
        std::thread::spawn(move || {
            let mut flip = false;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let tmp = dir.join("next");
                std::fs::copy(if flip { &t } else { &f }, &tmp).unwrap();
                std::fs::rename(&tmp, &prog).unwrap();
                flip = !flip;
            }
        })
    };
    let mut seen = [0; 2];
    for _ in 0..30 {
        let out = w
            .command_for(who, &manifest, "x", &[], &[])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let sha = v["data"]["program"]["sha256"]
            .as_str()
            .unwrap_or("")
            .to_string();
        match v["data"]["exit_code"].as_i64() {
            Some(0) => {
                assert_eq!(sha, ht, "exit 0 but the recorded hash is not t.sh's");
                seen[0] += 1;
            }
            Some(1) => {
                assert_eq!(sha, hf, "exit 1 but the recorded hash is not f.sh's");
                seen[1] += 1;
            }
            other => panic!("unexpected result {other:?}: {v}"),
        }
        assert_eq!(
            v["data"]["stdout"]["text"].as_str(),
            Some(format!("{}\n", prog.display()).as_str()),
            "{v}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    racer.join().unwrap();
    eprintln!("runs of t.sh and f.sh: {seen:?}");
}

/// A pinned program in a directory its owner may write is rewritten in
/// place, over and over, between two binaries: the pinned one exits 0,
/// the other 1. Rewriting in place (not renaming) changes the very inode
/// the gate opened and hashed; whatever the timing, the run is the pinned
/// bytes (exit 0), a denial (the gate hashed the other bytes: exit 3), or
/// nothing at all (the bytes changed after the gate: exit 5), never the
/// other program.
fn a_program_rewritten_in_place_runs_what_was_hashed(who: As) {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let w = world();
    let dir = w.path(&format!("outside/rewrite-{who:?}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let prog = dir.join("tool");
    let good = std::fs::read("/usr/bin/true").unwrap();
    let bad = std::fs::read("/usr/bin/false").unwrap();
    std::fs::write(&prog, &good).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o777)).unwrap();
    let pin = {
        use sha2::Digest;
        format!("sha256:{}", hex::encode(sha2::Sha256::digest(&good)))
    };
    let manifest = dir.join("rewrite.toml");
    std::fs::write(&manifest, format!("[connector]\nname = \"local://t/rewrite\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"{}\", hash = \"{pin}\" }}]\n[capabilities.spawn.operations.x]\nargv = \"tool\"\n", prog.display())).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let racer = {
        let (stop, prog) = (stop.clone(), prog.clone());
        std::thread::spawn(move || {
            let mut flip = false;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // ETXTBSY while a sandbox executes it: try again.
                if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(&prog) {
                    let bytes = if flip { &good } else { &bad };
                    let _ = f.write_all(bytes);
                    let _ = f.set_len(bytes.len() as u64);
                }
                flip = !flip;
            }
        })
    };
    let mut seen = std::collections::BTreeMap::<i32, u32>::new();
    for _ in 0..40 {
        let out = w
            .command_for(who, &manifest, "x", &[], &[])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let code = out.status.code().unwrap_or(-1);
        *seen.entry(code).or_default() += 1;
        match code {
            0 => assert_eq!(v["data"]["program"]["sha256"], pin, "{v}"),
            3 | 5 => {}
            _ => {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                panic!("ESCAPED: the other program ran (exit {code}): {v}");
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    racer.join().unwrap();
    eprintln!("exit codes over 40 runs: {seen:?}");
}

/// A descriptor opened for writing while its owner could write the file
/// stays writable after root takes the file (`chown`, `chmod`): a program
/// held open so runs from a sealed copy (bound at its path: the mount
/// table inside shows the copy there), and once nobody holds it, from the
/// file itself.
#[test]
fn x43_a_program_someone_holds_open_for_writing_runs_from_a_copy() {
    use std::os::unix::fs::PermissionsExt;
    let w = world();
    let dir = w.path("outside/held-open");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let prog = dir.join("cat");
    std::fs::copy("/usr/bin/cat", &prog).unwrap();
    std::os::unix::fs::chown(&prog, Some(65534), Some(65534)).unwrap();
    let mut holder = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "bash",
            "-c",
            "exec 3<>\"$0\"; echo held; exec sleep 60",
        ])
        .arg(&prog)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "held\n");
    std::os::unix::fs::chown(&prog, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let manifest = dir.join("held.toml");
    std::fs::write(&manifest, format!("[connector]\nname = \"local://t/held\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"{}\" }}]\n[capabilities.spawn.operations.x]\nargv = \"cat /proc/self/mountinfo\"\n", prog.display())).unwrap();
    let mounts_of_the_program = || {
        let out = w
            .command_for(As::Root, &manifest, "x", &[], &[])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let text = v["data"]["stdout"]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{v}"))
            .to_string();
        text.lines()
            .filter(|l| l.split(' ').nth(4) == prog.to_str())
            .map(|l| l.split(' ').nth(3).unwrap_or("").to_string())
            .collect::<Vec<_>>()
    };
    let held = mounts_of_the_program();
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(
        held,
        vec!["/copy".to_string()],
        "held open for writing, it must run from its copy"
    );
    let free = mounts_of_the_program();
    assert!(
        !free.contains(&"/copy".to_string()),
        "root's own file runs as itself: {free:?}"
    );
}

#[test]
fn a_kernel_without_the_required_landlock_abi_runs_nothing() {
    let w = world();
    let cfg = w.config_with(As::Root, "strict", "[sandbox]\nlandlock_min_abi = 99\n");
    let out = w
        .command(
            As::Root,
            "true",
            &[],
            &["--config", &cfg.display().to_string()],
        )
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Landlock"));
    // Allowed by the gate, yet not run: both are on record.
    let log = std::fs::read_to_string(w.audit_log(As::Root)).unwrap();
    assert!(
        log.lines().any(|l| l.contains("\"kind\":\"exit\"")
            && l.contains("setup_failed")
            && l.contains("spawnd requires at least 99")),
        "no exit record for the unstarted spawn"
    );
}

/// A symlink planted in a writable scope by one run must not
/// redirect a scope (or a mount target) of a later run to host paths. The
/// later run is another connector's, whose read scopes lie where the first
/// one could write (a read scope nested in the same manifest's write scope
/// is refused outright).
fn assert_planted_symlinks_do_not_redirect_later_runs(who: As) {
    let w = world();
    let nest = w.path(&format!("rw/nest-{who:?}"));
    let _ = std::fs::remove_dir_all(&nest);
    std::fs::create_dir_all(&nest).unwrap();
    std::fs::set_permissions(&nest, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let manifest_with = |name: &str, scopes: &str| {
        let path = w.path(&format!("outside/{name}-{who:?}.toml"));
        std::fs::write(&path, format!(
            "[connector]\nname = \"local://t/{name}\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/bash\" }}]\n{scopes}\n[capabilities.spawn.operations.sh]\nargv = [\"bash\", \"-c\", \"{{script}}\"]\n",
        )).unwrap();
        path
    };
    let planter = manifest_with(
        "nest-planter",
        &format!("fs_write = [\"{}\"]", nest.display()),
    );
    let reader = manifest_with(
        "nest-reader",
        &format!(
            "fs_read = [\"{n}/sub\", \"{n}/deep/er\"]",
            n = nest.display()
        ),
    );
    let run = |manifest: &std::path::Path, script: &str| {
        let mut cmd = who.spawnd_run(&w.spawnd);
        cmd.env("SPAWND_CONFIG", w.config(who))
            .args(["--json", "--manifest"])
            .arg(manifest)
            .args(["--op", "sh", "--arg", &format!("script={script}")])
            .output()
            .unwrap()
    };
    let outside = w.path("outside");
    let plant = format!(
        "ln -s {o} {n}/sub && mkdir -p {n}/deep && ln -s /etc {n}/deep/er",
        o = outside.display(),
        n = nest.display()
    );
    let first = run(&planter, &plant);
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stdout)
    );
    let second = run(
        &reader,
        &format!(
            "cat {n}/sub/secret.txt; cat {n}/deep/er/shadow; ls {n}/deep/er",
            n = nest.display()
        ),
    );
    let text = String::from_utf8_lossy(&second.stdout);
    assert!(
        !text.contains("host secret") && !text.contains("root:"),
        "a planted symlink exposed host files: {text}"
    );
    assert_eq!(
        second.status.code(),
        Some(5),
        "the later run must refuse the symlinked scope: {text}"
    );
    assert!(text.contains("symlink"), "{text}");
}

#[test]
fn f22_planted_symlinks_do_not_redirect_later_runs_as_root() {
    assert_planted_symlinks_do_not_redirect_later_runs(As::Root);
}

#[test]
fn f22_planted_symlinks_do_not_redirect_later_runs_as_nobody() {
    assert_planted_symlinks_do_not_redirect_later_runs(As::Nobody);
}

/// A scope at `/tmp` bound the staging root and
/// undid Landlock's write limits; it is refused. /proc's sensitive entries are
/// read-only and memfds are noexec by default in every sandbox.
#[test]
fn f33_a_tmp_scope_is_refused_and_sensitive_proc_entries_are_read_only() {
    let w = world();
    let manifest = w.path("outside/tmp-scope.toml");
    std::fs::write(&manifest, "[connector]\nname = \"local://t/tmp\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{ path = \"/usr/bin/true\" }]\nfs_write = [\"/tmp\"]\n[capabilities.spawn.operations.x]\nargv = \"true\"\n").unwrap();
    let out = Command::new(&w.spawnd)
        .env("SPAWND_CONFIG", w.config(As::Root))
        .args(["run", "--json", "--manifest"])
        .arg(&manifest)
        .args(["--op", "x"])
        .output()
        .unwrap();
    assert_ne!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("/tmp"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    for who in [As::Root, As::Nobody] {
        let script = "for f in /proc/irq/default_smp_affinity /proc/sys/kernel/ns_last_pid; do [ -e $f ] && (echo 1 > $f) 2>/dev/null && echo ESCAPED-$f; done; echo memfd_noexec=$(cat /proc/sys/vm/memfd_noexec)";
        let out = w.run(who, "sh", &[("script", script)], &[]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let text = v["data"]["stdout"]["text"].as_str().unwrap_or("");
        assert!(!text.contains("ESCAPED"), "{text}");
        // Writable only for a sandbox whose root is the host's root; for an
        // unprivileged spawnd the seccomp rule on memfd_create carries it alone (F30).
        // Kernels before 6.3 have no such sysctl: there the seccomp rule
        // carries it for root too (F30).
        let kernel_has_it = Path::new("/proc/sys/vm/memfd_noexec").exists();
        if who.is_root() && kernel_has_it {
            assert!(text.contains("memfd_noexec=2"), "{text}");
        }
    }
}

// ---------------------------------------------------------------------------
// Set-id modes, the newer syscalls and host unix sockets
//: the default-deny seccomp filter, checked from outside the
// sandbox where it matters (the host file's mode, the host listener's
// queue), as root, as nobody and via the spawner.
// ---------------------------------------------------------------------------

mod setid_new_syscalls_and_unix_sockets {
    use super::*;
    use std::io::ErrorKind;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    const SETID: u32 = 0o6000;

    /// A name prefix for one identity's files in `rw/`, unique to this test process.
    fn tag(who: As, what: &str) -> String {
        format!("setid-{what}-{who:?}-{}", std::process::id())
    }

    /// The host's view of what the probe left in `rw/` under `tag`: (name, mode).
    fn tagged_modes(w: &World, tag: &str) -> Vec<(String, u32)> {
        std::fs::read_dir(w.path("rw"))
            .unwrap()
            .flatten()
            .filter(|entry| entry.file_name().to_string_lossy().starts_with(tag))
            .map(|entry| {
                let mode = std::fs::symlink_metadata(entry.path()).unwrap().mode();
                (entry.file_name().to_string_lossy().into_owned(), mode)
            })
            .collect()
    }

    fn remove_tagged(w: &World, tag: &str) {
        for (name, _) in tagged_modes(w, tag) {
            let path = w.path(&format!("rw/{name}"));
            let _ = std::fs::remove_file(&path).or_else(|_| std::fs::remove_dir(&path));
        }
    }

    as_root_and_nobody! {
        x_chmod_and_fchmod_cannot_set_a_setid_bit_on_a_file_in_a_write_scope => |who| {
            let w = world();
            let tag = tag(who, "chmod");
            let file = w.path(&format!("rw/{tag}"));
            let r = w.attack(who, "setid-chmod", &[&file.display().to_string()]);
            let made = tagged_modes(w, &tag);
            remove_tagged(w, &tag);
            assert_eq!(made.len(), 1, "the probe's file is missing: {made:?}; probe: {}", r.probe);
            let (_, mode) = made[0];
            assert_eq!(mode & SETID, 0, "the host file's mode is {mode:o}; probe: {}", r.probe);
            r.assert_blocked();
        };
        x_no_file_or_directory_is_created_with_a_setid_bit => |who| {
            let w = world();
            let tag = tag(who, "create");
            remove_tagged(w, &tag);
            let r = w.attack(who, "setid-create", &[&p(w, "rw"), &tag]);
            let made = tagged_modes(w, &tag);
            remove_tagged(w, &tag);
            for (name, mode) in &made {
                assert_eq!(mode & SETID, 0, "{name} has mode {mode:o} on the host; probe: {}", r.probe);
            }
            r.assert_blocked();
        };
        s_openat2_gets_enosys_so_callers_fall_back_to_openat => |who| {
            let w = world();
            let tag = tag(who, "openat2");
            remove_tagged(w, &tag);
            let r = w.attack(who, "openat2-create", &[&p(w, "rw"), &tag]);
            let made = tagged_modes(w, &tag);
            remove_tagged(w, &tag);
            assert!(made.is_empty(), "openat2 created {made:?}; probe: {}", r.probe);
            r.assert_blocked();
            assert!(r.probe["detail"].as_str().unwrap_or("").contains("ENOSYS"), "{}", r.probe);
        };
        s_memfd_secret_listmount_and_statmount_are_refused => |who| {
            blocked(who, "memfd-secret", &[]);
            blocked(who, "listmount-statmount", &[]);
        };
        n_a_host_unix_listener_in_a_read_scope_gets_no_connection => |who| {
            let w = world();
            let path = w.path(&format!("ro/host-{}-{who:?}.sock", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let listener = UnixListener::bind(&path).unwrap();
            listener.set_nonblocking(true).unwrap();
            // Connectable by any uid: only the sandbox stands in the way.
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
            let r = w.attack(who, "unix-connect", &[&path.display().to_string()]);
            let accepted = listener.accept();
            let _ = std::fs::remove_file(&path);
            assert!(
                matches!(&accepted, Err(e) if e.kind() == ErrorKind::WouldBlock),
                "the host listener got a connection from the sandbox: {accepted:?}; probe: {}",
                r.probe
            );
            r.assert_blocked();
        };
        n_a_host_datagram_socket_in_a_read_scope_gets_nothing_from_a_socketpair => |who| {
            let w = world();
            let path = w.path(&format!("ro/host-{}-{who:?}.dgram", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let host = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
            host.set_nonblocking(true).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
            let r = w.attack(who, "unix-dgram-pair-sendto", &[&path.display().to_string()]);
            let mut buf = [0u8; 64];
            let received = host.recv(&mut buf);
            let _ = std::fs::remove_file(&path);
            assert!(
                matches!(&received, Err(e) if e.kind() == ErrorKind::WouldBlock),
                "the host datagram socket received from the sandbox: {received:?}; probe: {}",
                r.probe
            );
            r.assert_blocked();
        };
    }
}

// ---------------------------------------------------------------------------
// C67 — the program may not write its own policy, whatever path reaches it:
// a write scope is compared with the manifest, the config and the audit
// log's directory by device and inode, so a hard link or a bind mount into
// the scope is refused as a plain path inside it is. Judged from outside:
// the manifest on the host is unchanged, and a next run cannot use what
// the program would have written.
// ---------------------------------------------------------------------------

mod c67_policy_files_by_inode {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A manifest over one write scope (and `extra_write`), whose `rewrite`
    /// operation copies the scope's `next.toml` over `target`, and whose
    /// `escaped` operation (in the rewritten policy only) writes a marker
    /// outside every scope the original grants.
    fn policy(tag: &str, scope: &Path, target: &Path, escape_to: Option<&Path>) -> String {
        let mut write = vec![scope.display().to_string()];
        write.extend(escape_to.map(|p| p.display().to_string()));
        let mut text = format!(
            "[connector]\nname = \"local://test/c67-{tag}\"\nversion = \"1.0.0\"\n[capabilities.spawn]\nprograms = [{{ path = \"/usr/bin/bash\" }}]\nfs_write = {write:?}\n[capabilities.spawn.operations.rewrite]\nargv = [\"bash\", \"-c\", \"cat {scope}/next.toml > {target}\"]\n",
            scope = scope.display(),
            target = target.display(),
        );
        if let Some(out) = escape_to {
            text.push_str(&format!(
                "[capabilities.spawn.operations.escaped]\nargv = [\"bash\", \"-c\", \"echo escaped > {}/marker\"]\n",
                out.display()
            ));
        }
        text
    }

    /// A directory made afresh (what an earlier test process left removed),
    /// writable by the program: a root caller's program runs as 65534, and
    /// each manifest here is made writable by it (mode 0666) as a caller's
    /// own manifest in its checkout is writable by the caller's program.
    /// Only the way to the file is under test.
    fn fresh_dir(path: &Path) {
        let _ = std::fs::remove_dir_all(path);
        std::fs::create_dir_all(path).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
    }

    /// Writes the policy the program would put in place into the scope.
    fn plant_next(tag: &str, scope: &Path, target: &Path, out: &Path) {
        std::fs::write(
            scope.join("next.toml"),
            policy(tag, scope, target, Some(out)),
        )
        .unwrap();
    }

    fn run(w: &World, manifest: &Path, op: &str) -> (Option<i32>, serde_json::Value) {
        let out = w
            .command_for(As::Root, manifest, op, &[], &[])
            .output()
            .unwrap();
        let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
            serde_json::Value::String(String::from_utf8_lossy(&out.stdout).into_owned())
        });
        (out.status.code(), v)
    }

    /// Runs `rewrite` then `escaped` with `manifest`: the first is refused
    /// (exit 4, its message containing `said`), the manifest keeps `text`,
    /// and the second finds no such operation and leaves no marker.
    fn assert_the_policy_held(w: &World, manifest: &Path, text: &str, out: &Path, said: &str) {
        let (code, v) = run(w, manifest, "rewrite");
        let after = std::fs::read_to_string(manifest).unwrap();
        let (next_code, next) = run(w, manifest, "escaped");
        assert!(
            !out.join("marker").exists(),
            "the next run used the policy the program wrote: {next}"
        );
        assert_ne!(next_code, Some(0), "{next}");
        assert_eq!(after, text, "the program rewrote its manifest: {v}");
        assert_eq!(code, Some(4), "{v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(said), "{v}");
        assert!(message.contains("nothing was run"), "{v}");
    }

    /// `mount --bind` (as root), undone when dropped.
    struct Bound(std::path::PathBuf);

    impl Bound {
        fn new(from: &Path, onto: &Path) -> Bound {
            let ok = Command::new("mount")
                .arg("--bind")
                .arg(from)
                .arg(onto)
                .status()
                .unwrap()
                .success();
            assert!(
                ok,
                "mount --bind {} {} (needs root)",
                from.display(),
                onto.display()
            );
            Bound(onto.to_path_buf())
        }
    }

    impl Drop for Bound {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }

    #[test]
    fn c67_a_manifest_hard_linked_into_a_write_scope_runs_nothing() {
        let w = world();
        let home = w.path("outside/c67-link");
        let scope = w.path("rw/c67-link");
        let out = w.path("outside/c67-link-out");
        fresh_dir(&home);
        fresh_dir(&scope);
        let _ = std::fs::remove_dir_all(&out);
        let manifest = home.join("m.toml");
        let link = scope.join("m.toml");
        let text = policy("link", &scope, &link, None);
        std::fs::write(&manifest, &text).unwrap();
        std::fs::set_permissions(&manifest, std::fs::Permissions::from_mode(0o666)).unwrap();
        std::fs::hard_link(&manifest, &link).unwrap();
        plant_next("link", &scope, &link, &out);
        assert_the_policy_held(
            w,
            &manifest,
            &text,
            &out,
            &format!(
                "the manifest {} has 2 links and the write scope {} is on its filesystem",
                manifest.display(),
                scope.display()
            ),
        );
    }

    #[test]
    fn c67_a_manifests_directory_bind_mounted_into_a_write_scope_runs_nothing() {
        let w = world();
        let home = w.path("outside/c67-bind");
        let scope = w.path("rw/c67-bind");
        let out = w.path("outside/c67-bind-out");
        fresh_dir(&home);
        fresh_dir(&scope);
        let _ = std::fs::remove_dir_all(&out);
        let manifest = home.join("m.toml");
        let inside = scope.join("policy");
        std::fs::create_dir(&inside).unwrap();
        let target = inside.join("m.toml");
        let text = policy("bind", &scope, &target, None);
        std::fs::write(&manifest, &text).unwrap();
        std::fs::set_permissions(&manifest, std::fs::Permissions::from_mode(0o666)).unwrap();
        plant_next("bind", &scope, &target, &out);
        let _bound = Bound::new(&home, &inside);
        assert_the_policy_held(
            w,
            &manifest,
            &text,
            &out,
            &format!(
                "fs_write {} holds the manifest ({}) through the mount at {}",
                scope.display(),
                manifest.display(),
                inside.display()
            ),
        );
    }

    #[test]
    fn c67_a_write_scope_that_is_a_bind_mount_of_the_manifests_directory_runs_nothing() {
        let w = world();
        let home = w.path("outside/c67-alias");
        let scope = w.path("rw/c67-alias");
        let out = w.path("outside/c67-alias-out");
        fresh_dir(&home);
        fresh_dir(&scope);
        let _ = std::fs::remove_dir_all(&out);
        let manifest = home.join("m.toml");
        let target = scope.join("m.toml");
        let text = policy("alias", &scope, &target, None);
        std::fs::write(&manifest, &text).unwrap();
        std::fs::set_permissions(&manifest, std::fs::Permissions::from_mode(0o666)).unwrap();
        let _bound = Bound::new(&home, &scope);
        plant_next("alias", &scope, &target, &out);
        assert_the_policy_held(
            w,
            &manifest,
            &text,
            &out,
            &format!(
                "fs_write {} holds the manifest ({})",
                scope.display(),
                manifest.display()
            ),
        );
    }

    /// The usual layout, a manifest with one link beside the scope it names
    /// on the same filesystem, still runs.
    #[test]
    fn c67_a_manifest_with_one_link_outside_its_write_scope_runs() {
        let w = world();
        let home = w.path("outside/c67-plain");
        let scope = w.path("rw/c67-plain");
        fresh_dir(&home);
        fresh_dir(&scope);
        let manifest = home.join("m.toml");
        let target = scope.join("written.toml");
        let text = policy("plain", &scope, &target, None);
        std::fs::write(&manifest, &text).unwrap();
        std::fs::write(scope.join("next.toml"), "copied\n").unwrap();
        let (code, v) = run(w, &manifest, "rewrite");
        assert_eq!(code, Some(0), "{v}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "copied\n");
        assert_eq!(std::fs::read_to_string(&manifest).unwrap(), text);
    }
}

/// What a `#!` script under `exec = "declared"` tries (its write scope is
/// also an fs_exec scope and /tmp allows execution, so only Landlock's
/// per-file grants stand in the way): the undeclared `touch`, a copy of it
/// in the write scope and one it wrote into /tmp, each asked to leave a
/// marker on the host; `id`; and the also_runs `mkdir`. It also loads a
/// shared library with `dlopen` (mapped, not executed: no grant needed).
const EXEC_ATTEMPTS: &str = r#"
import ctypes, json, os, shutil, subprocess
rw = "RW"
open(rw + "/marker-started", "w").close()
out = {}
def attempt(name, argv):
    try:
        out[name] = "ran:%d" % subprocess.run(argv, capture_output=True).returncode
    except OSError as e:
        out[name] = "errno:%d" % e.errno
attempt("system", ["/usr/bin/touch", rw + "/marker-system"])
attempt("id", ["/usr/bin/id"])
shutil.copy("/usr/bin/touch", rw + "/touch-copy")
os.chmod(rw + "/touch-copy", 0o755)
attempt("scope_copy", [rw + "/touch-copy", rw + "/marker-scope-copy"])
with open("/tmp/own", "wb") as f:
    f.write(open("/usr/bin/touch", "rb").read())
os.chmod("/tmp/own", 0o755)
attempt("tmp_own", ["/tmp/own", rw + "/marker-tmp-own"])
attempt("also_runs", ["/usr/bin/mkdir", rw + "/marker-also-runs"])
try:
    ctypes.CDLL("libm.so.6").cos
    out["dlopen"] = "ok"
except OSError as e:
    out["dlopen"] = str(e)
print(json.dumps(out))
"#;

/// A world for one `exec = "declared"` case: its write scope (emptied),
/// the script, and a manifest with `exec` and the pin given for `mkdir`.
fn exec_world(
    who: As,
    case: &str,
    exec: &str,
    mkdir_pin: &str,
) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let w = world();
    let rw = w.path(&format!("exec-{case}-{who:?}"));
    let _ = std::fs::remove_dir_all(&rw);
    std::fs::create_dir(&rw).unwrap();
    std::fs::set_permissions(&rw, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let script = w.path(&format!("outside/attempt-{case}-{who:?}.py"));
    let text = format!(
        "#!/usr/bin/python3 -I\n{}",
        EXEC_ATTEMPTS.replace("\"RW\"", &format!("{:?}", rw.display().to_string()))
    );
    std::fs::write(&script, text).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let manifest = w.path(&format!("outside/exec-{case}-{who:?}.toml"));
    std::fs::write(
        &manifest,
        format!(
            r#"[connector]
name = "local://test/exec-declared"
version = "1.0.0"

[capabilities.spawn]
programs = [{{ path = "{script}" }}]
exec = "{exec}"
also_runs = [{{ path = "/usr/bin/mkdir", hash = "{mkdir_pin}" }}]
fs_write = ["{rw}"]
fs_exec = ["{rw}"]
env_set = {{ PATH = "/usr/bin:/bin" }}

[capabilities.spawn.limits]
tmp_exec = true

[capabilities.spawn.operations.attempt]
argv = ["{script}"]
"#,
            script = script.display(),
            rw = rw.display(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&manifest, std::fs::Permissions::from_mode(0o644)).unwrap();
    (rw, manifest)
}

fn sha256_of(path: &str) -> String {
    let out = Command::new(&world().spawnd)
        .args(["hash", path])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.split_whitespace()
        .find(|t| t.starts_with("sha256:"))
        .unwrap_or_else(|| panic!("spawnd hash {path}: {text}"))
        .to_string()
}

fn run_attempts(who: As, manifest: &Path) -> (serde_json::Value, serde_json::Value) {
    let out = world()
        .command_for(who, manifest, "attempt", &[], &[])
        .output()
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    let text = v["data"]["stdout"]["text"].as_str().unwrap_or("");
    let attempts = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("the script reported nothing: {v}"));
    (v, attempts)
}

fn only_declared_programs_run(who: As) {
    let pin = sha256_of("/usr/bin/mkdir");
    let eacces = format!("errno:{}", libc::EACCES);
    let (rw, manifest) = exec_world(who, "declared", "declared", &pin);
    let (v, attempts) = run_attempts(who, &manifest);
    assert_eq!(v["ok"], true, "{v}");
    // The declared script ran, and so did the also_runs program.
    assert!(rw.join("marker-started").exists(), "{v}");
    assert_eq!(attempts["also_runs"], "ran:0", "{attempts}");
    assert!(rw.join("marker-also-runs").is_dir(), "{attempts}");
    // Nothing undeclared ran, wherever it was: judged by its markers.
    for (name, marker) in [
        ("system", "marker-system"),
        ("scope_copy", "marker-scope-copy"),
        ("tmp_own", "marker-tmp-own"),
    ] {
        assert_eq!(attempts[name], eacces, "ESCAPED: {name} ran: {attempts}");
        assert!(!rw.join(marker).exists(), "ESCAPED: {name} left its marker");
    }
    assert_eq!(attempts["id"], eacces, "{attempts}");
    // Shared libraries are mapped, not executed: no grant, and they load.
    assert_eq!(attempts["dlopen"], "ok", "{attempts}");
    let execute = &v["data"]["isolation"]["landlock"]["execute"];
    assert_eq!(execute["policy"], "declared", "{execute}");
    let granted: Vec<(String, String)> = execute["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["granted_as"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let python = std::fs::canonicalize("/usr/bin/python3").unwrap();
    let loader = std::fs::canonicalize("/lib64/ld-linux-x86-64.so.2")
        .or_else(|_| std::fs::canonicalize("/lib/ld-linux-aarch64.so.1"))
        .unwrap();
    for (path, why) in [
        (python.to_str().unwrap(), "interpreter"),
        ("/usr/bin/mkdir", "also_runs"),
        (loader.to_str().unwrap(), "loader"),
    ] {
        assert!(
            granted.contains(&(path.to_string(), why.to_string())),
            "{path} as {why}: {granted:?}"
        );
    }
    assert_eq!(execute["count"], granted.len(), "{execute}");
    assert!(
        !granted
            .iter()
            .any(|(p, _)| p.contains("libc.so") || p.contains("libm.so")),
        "{granted:?}"
    );
    // The audit trail says the same.
    let log = std::fs::read_to_string(world().audit_log(who)).unwrap();
    assert!(
        log.contains("\"limited_to\":\"declared programs"),
        "no declared exec in the audit log"
    );

    // The same attempts under the default all run: the refusals above are
    // exec = "declared"'s, not the mounts'.
    let (rw, manifest) = exec_world(who, "scopes", "scopes", &pin);
    let (v, attempts) = run_attempts(who, &manifest);
    for name in ["system", "scope_copy", "tmp_own", "also_runs", "id"] {
        assert_eq!(
            attempts[name], "ran:0",
            "{name} under scopes: {attempts}\n{v}"
        );
    }
    assert!(rw.join("marker-scope-copy").exists());
    assert_eq!(
        v["data"]["isolation"]["landlock"]["execute"]["policy"], "scopes",
        "{v}"
    );
}

fn a_changed_also_runs_file_refuses_the_spawn(who: As) {
    let wrong = sha256_of("/usr/bin/true");
    let (rw, manifest) = exec_world(who, "wrong-pin", "declared", &wrong);
    let out = world()
        .command_for(who, &manifest, "attempt", &[], &[])
        .output()
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(out.status.code(), Some(3), "{v}");
    assert_eq!(
        v["error"]["details"]["reason"], "program_hash_mismatch",
        "{v}"
    );
    let message = v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
        + &v.to_string();
    assert!(message.contains("also_runs /usr/bin/mkdir"), "{v}");
    assert!(!rw.join("marker-started").exists(), "the script ran");
}
