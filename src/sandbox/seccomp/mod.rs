//! spawnd's seccomp filter, as pure data: a syscall [`Policy`] (the default
//! one decides every syscall by name in `syscalls.rs`, numbered per
//! architecture by `x86_64.rs` and `aarch64.rs`) is compiled into a
//! classic-BPF program ([`Filter`]) that the sandbox installs in the child as
//! its very last step before exec. Nothing in this module talks to the
//! kernel: installing is the sandbox layer's job, which can pass
//! `Filter::instructions` (laid out as `struct sock_filter`) to
//! `seccomp(SECCOMP_SET_MODE_FILTER)`.
//!
//! The compiler is spawnd's own, not a crate's: `seccompiler` has no
//! `SECCOMP_RET_USER_NOTIF` action (the traced filter of `spawnd learn` and
//! `run --trace` needs it) and tests a syscall's number in one long chain,
//! and `libseccomp` is a C library the static musl build would have to
//! build and link. Here a policy is plain data that the tests check by name, and every
//! compiled program is run through this module's interpreter against the
//! policy it came from. The syscall numbers themselves come from the
//! `syscalls` crate (`x86_64.rs`, `aarch64.rs`).
//!
//! Each program is for one [`Arch`]: it kills calls from any other
//! architecture (and on x86_64 any x32 number), dispatches on ranges of
//! syscall numbers with a binary search tree, and checks the low 32 bits of
//! arguments where a rule has conditions. [`filter_for`] compiles the policy
//! of the architecture spawnd is built for ([`Arch::NATIVE`]);
//! [`policy_for_arch`] and [`filter_for_arch`] build either one on any host,
//! so both are tested everywhere. The default policy denies by default: a
//! number no rule decides gets ENOSYS. Every compiled program is verified by
//! the interpreter's checker before it is returned, and [`interp::run`]
//! executes it on a [`SeccompData`] so tests can compare it with
//! [`Policy::evaluate`] value for value. The filter's [`Filter::id`] is a
//! SHA-256 of its bytes, for audit records.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

// The filter installed is the build target's (`Arch::NATIVE`); there is a
// syscall table for x86_64 and aarch64 only. x32 is refused too: its libc
// issues x32 numbers, which the x86_64 filter kills.
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_pointer_width = "64"
)))]
compile_error!("spawnd's seccomp filter is written for x86_64 and aarch64 Linux only");

pub(crate) mod aarch64;
pub mod abi;
pub mod bpf;
mod codegen;
pub(crate) mod interp;
mod policy;
pub(crate) mod syscalls;
pub(crate) mod x86_64;

#[cfg(test)]
mod aarch64_policy_tests;
#[cfg(test)]
mod aarch64_tests;
#[cfg(test)]
mod bpf_tests;
// The x86_64 policy's table tests name calls by `libc::SYS_*`, which are the
// build target's numbers: they run where those are x86_64's.
#[cfg(all(test, target_arch = "x86_64"))]
mod default_policy_tests;
#[cfg(test)]
mod filter_tests;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod table_probes;
#[cfg(all(test, target_arch = "x86_64"))]
mod x86_64_tests;

use sha2::{Digest, Sha256};
use thiserror::Error;

pub(crate) use abi::{Arch, SeccompData};
pub(crate) use bpf::SockFilter;
pub(crate) use interp::InterpError;
pub(crate) use policy::{Action, Condition, Policy, SyscallRule};

/// A compiled seccomp program.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Filter {
    /// The instructions, ready for `struct sock_fprog`.
    pub instructions: Vec<SockFilter>,
}

impl Filter {
    /// `sha256:` and the hex SHA-256 of the instructions, each serialized as
    /// 8 little-endian bytes (`code`, `jt`, `jf`, `k`). Stable across builds
    /// and machines; changes whenever any instruction changes.
    pub fn id(&self) -> String {
        format!("sha256:{}", hex::encode(Sha256::digest(self.to_bytes())))
    }

    /// The program as the kernel reads it: 8 bytes per instruction.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.instructions
            .iter()
            .flat_map(|insn| insn.to_le_bytes())
            .collect()
    }

    /// The inverse of [`Filter::to_bytes`]; `None` unless whole instructions.
    pub fn from_bytes(bytes: &[u8]) -> Option<Filter> {
        if !bytes.len().is_multiple_of(8) || bytes.is_empty() {
            return None;
        }
        let instructions = bytes
            .chunks_exact(8)
            .map(|c| SockFilter {
                code: u16::from_le_bytes([c[0], c[1]]),
                jt: c[2],
                jf: c[3],
                k: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        Some(Filter { instructions })
    }

    /// The number of instructions.
    pub fn len(&self) -> usize {
        self.instructions.len()
    }

    /// Whether there are no instructions (never true for a compiled filter).
    pub fn is_empty(&self) -> bool {
        self.instructions.is_empty()
    }
}

/// Why a policy could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CompileError {
    /// A rule's number is negative or in the x32 range.
    #[error("syscall {name} has number {nr}, outside 0..0x40000000")]
    SyscallNumberOutOfRange {
        /// The rule's name.
        name: &'static str,
        /// Its number.
        nr: i64,
    },
    /// Two rules list the same number.
    #[error("syscalls {first} and {second} both have number {nr}")]
    DuplicateSyscall {
        /// One rule's name.
        first: &'static str,
        /// The other rule's name.
        second: &'static str,
        /// The shared number.
        nr: u32,
    },
    /// A condition names an argument past the sixth.
    #[error("syscall {name} tests argument {arg}, but there are only 6")]
    ArgumentIndexOutOfRange {
        /// The rule's name.
        name: &'static str,
        /// The argument index.
        arg: u8,
    },
    /// An errno of 0 (fake success) or above 4095 (clamped by the kernel).
    #[error("{context} returns errno {errno}, outside 1..=4095")]
    InvalidErrno {
        /// The rule's name, or "default action".
        context: &'static str,
        /// The errno.
        errno: u16,
    },
    /// The program could not be laid out.
    #[error("laying out the program")]
    Layout(#[from] bpf::BpfError),
    /// The finished program fails the kernel-style check (too long, …).
    #[error("checking the compiled program")]
    Check(#[from] InterpError),
}

/// Compiles `policy` into a checked seccomp program.
pub(crate) fn compile(policy: &Policy) -> Result<Filter, CompileError> {
    let rules = policy.checked_rules()?;
    let instructions = codegen::generate(policy.arch, policy.default, &rules)?;
    interp::check(&instructions)?;
    Ok(Filter { instructions })
}

/// What a spawn may choose about its filter ([`FilterOptions::for_spawn`]).
/// The default refuses unix sockets and allows SysV IPC objects (the
/// sandbox's IPC limits hold them when spawnd is root). Each combination
/// compiles to one program, cached for the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FilterOptions {
    /// `socket(AF_UNIX, …)` and datagram `socketpair(AF_UNIX, …)` are
    /// allowed: for a manifest that grants the socket paths its program
    /// needs. Otherwise both get EPERM, so no host service is reachable
    /// through a socket a scope happens to expose (docs/sandbox.md); stream and
    /// seqpacket socketpairs, which stay connected to each other, are
    /// allowed either way.
    pub allow_unix_sockets: bool,
    /// `shmget`, `semget` and `msgget` may make SysV IPC objects: only where
    /// the sandbox's IPC namespace has the limits spawnd writes there (as
    /// root: see `crate::sandbox::mounts`). Otherwise they get EPERM, since
    /// the kernel's defaults let one namespace hold more memory than any
    /// spawn's limit, in objects that outlive their processes.
    pub allow_sysv_ipc: bool,
    /// `memfd_create` (sealed non-executable) is allowed: only where a
    /// memory cgroup counts a memfd's pages. The rlimits count them at
    /// most while they are mapped, so under rlimits a program could hold
    /// any amount of memory in memfds; there they get EPERM.
    pub allow_memfd: bool,
}

impl Default for FilterOptions {
    fn default() -> FilterOptions {
        FilterOptions::DEFAULT
    }
}

impl FilterOptions {
    /// `socket(AF_UNIX)` and datagram socketpairs refused: [`default_filter`].
    pub(crate) const DEFAULT: FilterOptions = FilterOptions {
        allow_unix_sockets: false,
        allow_sysv_ipc: true,
        allow_memfd: true,
    };
    /// `socket(AF_UNIX)` and any unix socketpair allowed, for a manifest that
    /// grants socket paths.
    #[cfg(test)]
    pub(crate) const WITH_UNIX_SOCKETS: FilterOptions = FilterOptions {
        allow_unix_sockets: true,
        allow_sysv_ipc: true,
        allow_memfd: true,
    };
    /// Every combination, for tests that walk them all.
    #[cfg(test)]
    pub(crate) const VARIANTS: [FilterOptions; 8] = {
        let mut all = [FilterOptions::DEFAULT; 8];
        let mut i = 0;
        while i < 8 {
            all[i] = FilterOptions {
                allow_unix_sockets: i & 1 != 0,
                allow_sysv_ipc: i & 2 != 0,
                allow_memfd: i & 4 != 0,
            };
            i += 1;
        }
        all
    };

    /// The options for a spawn: unix sockets where its manifest grants
    /// socket paths, SysV IPC objects where spawnd (`privileged`) writes
    /// the sandbox's IPC limits, memfds where a memory cgroup counts them.
    pub(crate) fn for_spawn(
        grants_unix_sockets: bool,
        privileged: bool,
        memory_cgroup: bool,
    ) -> FilterOptions {
        FilterOptions {
            allow_unix_sockets: grants_unix_sockets,
            allow_sysv_ipc: privileged,
            allow_memfd: memory_cgroup,
        }
    }
}

/// [`policy_for`]`(options)` compiled: the filter spawnd installs, for the
/// architecture it is built for.
pub(crate) fn filter_for(options: FilterOptions) -> Result<&'static Filter, CompileError> {
    filter_for_arch(Arch::NATIVE, options)
}

/// [`policy_for_arch`]`(arch, options)` compiled, once per process, arch
/// and options (the daemon would otherwise rebuild the same program for
/// every spawn).
pub(crate) fn filter_for_arch(
    arch: Arch,
    options: FilterOptions,
) -> Result<&'static Filter, CompileError> {
    type Compiled = std::sync::OnceLock<Result<Filter, CompileError>>;
    static CACHE: [[Compiled; 8]; 2] = [const { [const { std::sync::OnceLock::new() }; 8] }; 2];
    // Destructured, so that an option or arch added later cannot share a cache.
    let FilterOptions {
        allow_unix_sockets,
        allow_sysv_ipc,
        allow_memfd,
    } = options;
    let by_arch = match arch {
        Arch::X86_64 => &CACHE[0],
        Arch::Aarch64 => &CACHE[1],
    };
    let cache = &by_arch[usize::from(allow_unix_sockets)
        | usize::from(allow_sysv_ipc) << 1
        | usize::from(allow_memfd) << 2];
    cache
        .get_or_init(|| compile(&policy_for_arch(arch, options)))
        .as_ref()
        .map_err(Clone::clone)
}

/// The calls a traced filter hands to its listener when the policy lets
/// them run: every call that names a path to open, execute, create, remove
/// or rename, which is what the sandbox's mounts and Landlock decide on.
/// (`stat` and friends are left out: neither layer governs them, and they
/// are the bulk of a program's calls.)
pub(crate) const TRACED_CALLS: &[&str] = &[
    "open",
    "openat",
    "openat2",
    "creat",
    "execve",
    "execveat",
    "mkdir",
    "mkdirat",
    "mknod",
    "mknodat",
    "unlink",
    "unlinkat",
    "rmdir",
    "rename",
    "renameat",
    "renameat2",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "truncate",
];

/// `policy` for a traced run (`spawnd learn`, `run --trace`): each
/// refusal with EPERM, and each allowed call of [`TRACED_CALLS`], becomes
/// [`Action::Notify`]; everything else (ENOSYS for absent calls, kills) is
/// unchanged. The listener answers a notification with `policy`'s own
/// decision, so the traced filter allows and refuses exactly what `policy`
/// does (`traced_policy_decides_as_the_policy` checks it call by call).
pub(crate) fn traced_policy(policy: &Policy) -> Policy {
    let traced = |name: &str, action: Action| match action {
        Action::Allow if TRACED_CALLS.contains(&name) => Action::Notify,
        a if a == syscalls::EPERM => Action::Notify,
        a => a,
    };
    Policy {
        arch: policy.arch,
        default: policy.default,
        rules: policy
            .rules
            .iter()
            .map(|rule| SyscallRule {
                name: rule.name,
                nr: rule.nr,
                conditions: rule
                    .conditions
                    .iter()
                    .map(|c| Condition {
                        action: traced(rule.name, c.action),
                        ..*c
                    })
                    .collect(),
                otherwise: traced(rule.name, rule.otherwise),
            })
            .collect(),
    }
}

/// [`traced_policy`] of [`policy_for`]`(options)`, compiled once per
/// process and options.
pub(crate) fn traced_filter_for(options: FilterOptions) -> Result<&'static Filter, CompileError> {
    type Compiled = std::sync::OnceLock<Result<Filter, CompileError>>;
    static CACHE: [Compiled; 8] = [const { std::sync::OnceLock::new() }; 8];
    let FilterOptions {
        allow_unix_sockets,
        allow_sysv_ipc,
        allow_memfd,
    } = options;
    let cache = &CACHE[usize::from(allow_unix_sockets)
        | usize::from(allow_sysv_ipc) << 1
        | usize::from(allow_memfd) << 2];
    cache
        .get_or_init(|| compile(&traced_policy(&policy_for(options))))
        .as_ref()
        .map_err(Clone::clone)
}

/// The name of syscall `nr` on the native architecture, if its table has one.
pub(crate) fn syscall_name(nr: i64) -> Option<&'static str> {
    let nr = u32::try_from(nr).ok()?;
    syscall_table(Arch::NATIVE)
        .iter()
        .find(|(n, _)| *n == nr)
        .map(|(_, name)| *name)
}

/// The filter for a spawn that asks for nothing: [`FilterOptions::DEFAULT`].
#[cfg(all(test, target_arch = "x86_64"))]
pub(crate) fn default_filter() -> Result<&'static Filter, CompileError> {
    filter_for(FilterOptions::DEFAULT)
}

/// spawnd's policy with `options` for the architecture it is built for:
/// [`policy_for_arch`]`(`[`Arch::NATIVE`]`, options)`.
pub(crate) fn policy_for(options: FilterOptions) -> Policy {
    policy_for_arch(Arch::NATIVE, options)
}

/// spawnd's policy for `arch` with `options`: the decision [`syscalls`]
/// makes for each syscall of the architecture's table
/// ([`syscall_table`]), and ENOSYS for every number the table does not
/// assign (the unassigned gaps, x86_64's x32-only 512–547 when called
/// without the x32 bit, and anything newer than the table), so libcs fall
/// back to calls the filter knows. The rules test the same argument index
/// on both architectures: every checked call takes its arguments in the
/// same order on x86_64 and aarch64 (clone's flags are argument 0 on both,
/// only its later pointer arguments differ).
pub(crate) fn policy_for_arch(arch: Arch, options: FilterOptions) -> Policy {
    Policy {
        arch,
        default: syscalls::ENOSYS,
        rules: syscalls::rules(options, syscall_table(arch)),
    }
}

/// `(number, kernel name)` for every syscall `arch` assigns, in order.
pub(crate) fn syscall_table(arch: Arch) -> &'static [(u32, &'static str)] {
    match arch {
        Arch::X86_64 => x86_64::SYSCALLS.as_slice(),
        Arch::Aarch64 => aarch64::SYSCALLS.as_slice(),
    }
}

/// An architecture's table: for each number up to `newest`, the name
/// `crate_name` gives it, else the one `newer` gives it (a call the crate
/// does not number yet), in order. Looked up number by number, as
/// `Sysno::iter` (syscalls 0.8.1) stops before the crate's last call.
fn table_up_to(
    newest: u32,
    crate_name: impl Fn(u32) -> Option<&'static str>,
    newer: &[(u32, &'static str)],
) -> Vec<(u32, &'static str)> {
    (0..=newest)
        .filter_map(|nr| {
            let newer_name = || newer.iter().find(|&&(n, _)| n == nr).map(|&(_, name)| name);
            Some((nr, crate_name(nr).or_else(newer_name)?))
        })
        .collect()
}

/// [`policy_for`]`(`[`FilterOptions::DEFAULT`]`)`.
#[cfg(test)]
pub(crate) fn default_policy() -> Policy {
    policy_for(FilterOptions::DEFAULT)
}
