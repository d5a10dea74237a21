//! `SandboxSpec`: everything the sandbox will do for one spawn, decided as
//! plain data before any process is created — the mount table of the fresh
//! root, the Landlock rules, the identity, the working directory. Pure: what
//! exists on the host is asked through a function, so tests need no kernel.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::manifest::Limits;
use crate::plan::{CwdPlan, ExecPlan, FileId, GrantedAs, SpawnPlan, RUNTIME_HOME};

/// What a host path is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostKind {
    /// A directory.
    Dir,
    /// Any other file.
    File,
    /// A symbolic link, with its target as written.
    Symlink(PathBuf),
    /// Nothing there.
    Missing,
}

/// Where a bind mount comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BindSource {
    /// A system path, bound by path.
    System(PathBuf),
    /// A manifest scope, bound from the descriptor opened for it (index into `SandboxSpec::scopes`).
    Scope(usize),
}

/// One step of building the fresh root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MountKind {
    /// A private tmpfs.
    Tmpfs {
        /// Directory mode.
        mode: u32,
        /// Size cap in bytes.
        size: u64,
    },
    /// The sandbox's own procfs.
    Proc,
    /// A host device node bound onto an empty file.
    Device {
        /// The host node, e.g. `/dev/null`.
        host: PathBuf,
    },
    /// A symbolic link (system paths that are links on the host).
    Symlink {
        /// Its target.
        target: PathBuf,
    },
    /// The program file itself, bound read-only (executable) at its path,
    /// if that path still holds the file the gate hashed; if it was replaced
    /// meanwhile, nothing is bound and init runs the hashed descriptor.
    Program,
    /// A small file made by init with these contents, bound read-only over
    /// the target (a file of a system path, or one created in the fresh
    /// root): the DNS configuration of a spawn with network grants.
    File {
        /// Its contents.
        contents: String,
    },
    /// A bind mount.
    Bind {
        /// Where from.
        source: BindSource,
        /// Whether the source is a directory.
        dir: bool,
        /// Read-write (else read-only).
        writable: bool,
        /// Executable (else noexec).
        exec: bool,
    },
}

/// A mount step at a path inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountStep {
    /// Path inside the sandbox.
    pub target: PathBuf,
    /// What goes there.
    pub kind: MountKind,
}

/// Landlock access for a path inside the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Read files and list directories.
    Read,
    /// Read and execute.
    ReadExec,
    /// Read, write, create, remove, rename within (no execute, no device nodes).
    ReadWrite,
    /// Read-write and execute (`fs_exec` over `fs_write`).
    ReadWriteExec,
    /// Read and write existing files only (device nodes).
    Device,
    /// Connect to this pathname socket: a `unix_sockets` grant. Landlock
    /// governs connecting from ABI 9; below, there is nothing to grant.
    UnixSocket,
}

/// A Landlock rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockRule {
    /// Path inside the sandbox.
    pub path: PathBuf,
    /// What it grants.
    pub access: Access,
    /// For a scope: its index in `SandboxSpec::scopes`; the rule is then made
    /// from the verified descriptor, not by walking the path again.
    pub scope: Option<usize>,
}

/// A file `exec = "declared"` grants Landlock's execute right: a rule on
/// the file found at `path` inside the sandbox, made only if it is still
/// the file the gate opened (`file`), so nothing put there since gains it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutableRule {
    /// Path inside the sandbox (where the host shows it).
    pub path: PathBuf,
    /// The device and inode the gate opened and hashed.
    pub file: FileId,
}

/// The decided sandbox for one spawn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// Scope sources to open (O_PATH) before the child is created, in order.
    pub scopes: Vec<PathBuf>,
    /// Mount steps, in order.
    pub mounts: Vec<MountStep>,
    /// Landlock rules (the program file itself is added from its descriptor).
    pub landlock: Vec<LandlockRule>,
    /// Working directory inside.
    pub cwd: PathBuf,
    /// Whether `cwd` is a fresh directory to create in the private /tmp.
    pub fresh_cwd: bool,
    /// `fs_read` scopes that do not exist and were left out.
    pub missing_read_scopes: Vec<PathBuf>,
    /// `fs_write` scopes that do not exist and must be created first.
    pub create_write_scopes: Vec<PathBuf>,
    /// The sizes the private /tmp and /dev/shm are given for this request.
    pub tmpfs: TmpfsSizes,
    /// Whether files in the private /tmp may be executed (`tmp_exec`):
    /// its mount then allows it, and so does its Landlock rule.
    pub tmp_exec: bool,
    /// Where the program is inside the sandbox, on a read-only mount that
    /// allows execution (a system path, or [`MountKind::Program`]): init
    /// executes it from there when it is the file the gate hashed, so
    /// `/proc/self/exe` is not the host's writable file, whose mode and
    /// times a program owning it could change.
    pub program: PathBuf,
    /// A `#!` script under a system path whose every directory and the
    /// file itself only root may change ([`bind_root_only_script`]): its
    /// sealed copy is bound over it, so its interpreter is given its path.
    #[serde(default)]
    pub program_root_only: bool,
    /// `exec = "declared"`: no rule of [`SandboxSpec::landlock`] grants
    /// execution, and these files (besides the program, by its descriptor)
    /// are the only ones that may be executed. `None`: the default, where
    /// the rules' own access says.
    pub executables: Option<Vec<ExecutableRule>>,
}

impl SandboxSpec {
    /// Whether the program's path lies on a filesystem of the sandbox's
    /// own: its fresh root, or its private /tmp. No other step of the spec
    /// (a system path, a scope, a link, a device, /dev, /proc) stands at or
    /// above it, and it is not under the fresh working directory, which
    /// init creates new. A `#!` script's copy is bound only there
    /// ([`super::mounts`]), so that nothing outside the sandbox can change
    /// the way to it.
    pub fn program_path_is_the_sandboxs_own(&self) -> bool {
        if self.fresh_cwd && self.program.starts_with(&self.cwd) {
            return false;
        }
        self.mounts.iter().all(|m| {
            let private_tmp =
                matches!(m.kind, MountKind::Tmpfs { .. }) && m.target == Path::new(STAGED_TMP);
            matches!(m.kind, MountKind::Program)
                || private_tmp
                || !self.program.starts_with(&m.target)
        })
    }
}

/// The size caps of the private /tmp and /dev/shm, from the limits
/// ([`Limits::tmp_bytes`], [`Limits::shm_bytes`]). They are mounted at
/// [`base_tmpfs_sizes`] with the shared steps (a spare sandbox knows no
/// request) and resized when the request's differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TmpfsSizes {
    /// /tmp.
    pub tmp: u64,
    /// /dev/shm.
    pub shm: u64,
}

impl TmpfsSizes {
    /// Together they hold at most the memory limit: tmpfs pages are memory
    /// that rlimits do not count (a cgroup's memory controller does, so
    /// there the limit binds them twice over). /dev/shm gets a quarter, at
    /// most 64 MiB (docker's default), /tmp the rest, or its own size
    /// (`tmp_size_bytes`, which the manifest bounds by the memory limit)
    /// with /dev/shm in what it leaves; each at least 1 MiB, since a size
    /// of 0 would mean no cap at all.
    pub fn for_limits(limits: &Limits) -> TmpfsSizes {
        TmpfsSizes {
            tmp: limits.tmp_bytes(),
            shm: limits.shm_bytes(),
        }
    }
}

/// Why a plan cannot be turned into a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A scope overlaps a path the sandbox manages itself.
    #[error("scope {0} overlaps {1}, which the sandbox provides itself; declare a path outside /proc, /dev and /sys")]
    ManagedPath(PathBuf, &'static str),
    /// A read-only or executable scope lies inside a writable one.
    #[error("scope {0} lies inside the writable scope {1}: the program could rename a directory above it and put its own files at this path on the host; narrow fs_write to directories beside it, or drop {0}")]
    NestedInWritable(PathBuf, PathBuf),
    /// The working directory does not exist.
    #[error("the working directory {0} does not exist on the host; create it or request another")]
    MissingCwd(PathBuf),
    /// A file `exec = "declared"` grants lies in a writable scope.
    #[error("{0} may be executed (exec = \"declared\") and lies in the writable scope {1}: the program could rewrite its pinned bytes in place and run them; keep executables outside fs_write scopes")]
    ExecutableInWritable(PathBuf, PathBuf),
}

/// Paths the sandbox builds itself; no scope may sit on or under them.
const MANAGED: &[&str] = &["/proc", "/dev", "/sys"];
/// Where the sandbox's private /tmp lives.
const STAGED_TMP: &str = "/tmp";
/// The fresh working directory when neither request nor manifest names one.
pub(crate) const FRESH_CWD: &str = "/tmp/work";
/// The sizes the shared steps mount the private /tmp and /dev/shm at:
/// those of the default memory limit, so a request with that limit needs
/// no resize.
pub(crate) fn base_tmpfs_sizes() -> TmpfsSizes {
    TmpfsSizes::for_limits(&Limits::default())
}
/// The device nodes of the minimal /dev.
pub(crate) const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// Builds the spec. `host` tells what each host path is; `system_paths` is the
/// operator's read-only runtime.
pub(crate) fn build_spec(
    plan: &SpawnPlan,
    system_paths: &[PathBuf],
    host: &dyn Fn(&Path) -> HostKind,
) -> Result<SandboxSpec, SpecError> {
    for scope in plan
        .fs
        .read
        .iter()
        .chain(&plan.fs.write)
        .chain(&plan.fs.exec)
        .chain(&plan.fs.unix_sockets)
    {
        if let Some(managed) = MANAGED
            .iter()
            .find(|m| scope.starts_with(m) || Path::new(m).starts_with(scope))
        {
            return Err(SpecError::ManagedPath(scope.clone(), managed));
        }
        // The sandbox's /tmp is private: a scope at /tmp or above it would
        // bind the host's over it. Scopes below /tmp (`/tmp/x`) are bound
        // from the host as usual.
        if Path::new(STAGED_TMP).starts_with(scope) {
            return Err(SpecError::ManagedPath(scope.clone(), STAGED_TMP));
        }
        if scope.starts_with(FRESH_CWD) || Path::new(FRESH_CWD).starts_with(scope) {
            return Err(SpecError::ManagedPath(scope.clone(), FRESH_CWD));
        }
    }
    // docs/sandbox.md: the expanded paths, so `~/` and absolute scopes are compared
    // too (the manifest's lint compares each form with itself).
    for inner in plan.fs.read.iter().chain(&plan.fs.exec) {
        if let Some(outer) = plan
            .fs
            .write
            .iter()
            .find(|w| inner != *w && inner.starts_with(w))
        {
            return Err(SpecError::NestedInWritable(inner.clone(), outer.clone()));
        }
    }
    let mut spec = SandboxSpec {
        scopes: Vec::new(),
        mounts: base_mounts(),
        landlock: base_rules(),
        cwd: PathBuf::from(FRESH_CWD),
        fresh_cwd: true,
        missing_read_scopes: Vec::new(),
        create_write_scopes: Vec::new(),
        tmpfs: TmpfsSizes::for_limits(&plan.limits),
        tmp_exec: plan.limits.tmp_exec,
        program: plan.program.resolved.clone(),
        program_root_only: false,
        executables: None,
    };
    if spec.tmp_exec {
        allow_execution_in_tmp(&mut spec.landlock);
    }
    add_system_paths(&mut spec, system_paths, host);
    add_scopes(&mut spec, plan, host);
    add_program(&mut spec, system_paths, host);
    add_resolver(&mut spec, plan);
    if let ExecPlan::Declared { files } = &plan.exec {
        limit_execution_to_declared_files(&mut spec, plan, files)?;
    }
    if let CwdPlan::Dir(dir) = &plan.cwd {
        let created = spec.create_write_scopes.iter().any(|w| dir.starts_with(w));
        if host(dir) != HostKind::Dir && !created {
            return Err(SpecError::MissingCwd(dir.clone()));
        }
        spec.cwd = dir.clone();
        spec.fresh_cwd = false;
    }
    Ok(spec)
}

/// `exec = "declared"`: every directory rule loses its execute right
/// (system paths, `fs_exec` scopes, `/tmp` with `tmp_exec`), and each
/// granted file gets one of its own. The mounts stay as they are: a mount
/// that allows execution is also what lets shared libraries be mapped
/// executable, which Landlock does not govern (mmap is not execve). The
/// program itself is left out, as its rule is made on the descriptor it
/// runs from; so is any file in a writable scope, which is refused: the
/// program could write new bytes into that same file and execute them.
fn limit_execution_to_declared_files(
    spec: &mut SandboxSpec,
    plan: &SpawnPlan,
    files: &[crate::plan::ExecutableFile],
) -> Result<(), SpecError> {
    for rule in &mut spec.landlock {
        rule.access = match rule.access {
            Access::ReadExec => Access::Read,
            Access::ReadWriteExec => Access::ReadWrite,
            other => other,
        };
    }
    let mut rules = Vec::new();
    for f in files {
        if f.granted_as == GrantedAs::Program || f.path == plan.program.resolved {
            continue;
        }
        if let Some(scope) = plan.fs.write.iter().find(|w| f.path.starts_with(w)) {
            return Err(SpecError::ExecutableInWritable(
                f.path.clone(),
                scope.clone(),
            ));
        }
        rules.push(ExecutableRule {
            path: f.path.clone(),
            file: f.file,
        });
    }
    spec.executables = Some(rules);
    Ok(())
}

/// A sandbox's mount steps after the shared ones ([`base_mounts`]), or
/// `None` when they do not begin with them.
pub(crate) fn after_base(mounts: &[MountStep]) -> Option<&[MountStep]> {
    // Asked several times per launch in the spawner: built once.
    static BASE: std::sync::OnceLock<Vec<MountStep>> = std::sync::OnceLock::new();
    mounts.strip_prefix(BASE.get_or_init(base_mounts).as_slice())
}

/// The steps a sandbox's mounts go on with after the shared ones that need
/// nothing of the request's descriptors: the system paths (binds by path
/// and symbolic links) and the small files made for it (`/etc/passwd` and
/// the others of [`add_runtime_files`]), up to the first scope or the
/// program's own bind. What a daemon's requests share, so a spare sandbox
/// can mount them early; a request with scopes shares only the system
/// paths, as its files come after its scopes.
///
/// A small file goes ahead only when it lands in the fresh root itself,
/// not at or under a system path bound or linked before it (`system_paths`
/// may name `/etc`): there, while the spare waits, a host mount propagating
/// onto the bind or a rename on the host could take the file's place.
pub fn steps_mountable_ahead(mounts: &[MountStep]) -> &[MountStep] {
    let rest = after_base(mounts).unwrap_or_default();
    let n = rest
        .iter()
        .enumerate()
        .take_while(|(i, m)| match m.kind {
            MountKind::Symlink { .. }
            | MountKind::Bind {
                source: BindSource::System(_),
                ..
            } => true,
            MountKind::File { .. } => !rest[..*i]
                .iter()
                .any(|earlier| m.target.starts_with(&earlier.target)),
            _ => false,
        })
        .count();
    &rest[..n]
}

/// The mount steps every sandbox begins with, whatever its request: the
/// private /tmp, the minimal /dev and /dev/shm, its own /proc.
pub(crate) fn base_mounts() -> Vec<MountStep> {
    let mut m = vec![
        MountStep {
            target: "/tmp".into(),
            kind: MountKind::Tmpfs {
                mode: 0o1777,
                size: base_tmpfs_sizes().tmp,
            },
        },
        MountStep {
            target: "/dev".into(),
            kind: MountKind::Tmpfs {
                mode: 0o755,
                size: 1 << 20,
            },
        },
    ];
    m.extend(DEVICES.iter().map(|d| MountStep {
        target: Path::new("/dev").join(d),
        kind: MountKind::Device {
            host: Path::new("/dev").join(d),
        },
    }));
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        m.push(MountStep {
            target: Path::new("/dev").join(link),
            kind: MountKind::Symlink {
                target: target.into(),
            },
        });
    }
    m.push(MountStep {
        target: "/dev/shm".into(),
        kind: MountKind::Tmpfs {
            mode: 0o1777,
            size: base_tmpfs_sizes().shm,
        },
    });
    m.push(MountStep {
        target: "/proc".into(),
        kind: MountKind::Proc,
    });
    m
}

/// `tmp_exec`: the private /tmp's rule grants execution too.
fn allow_execution_in_tmp(rules: &mut [LandlockRule]) {
    for rule in rules
        .iter_mut()
        .filter(|r| r.scope.is_none() && r.path == Path::new(STAGED_TMP))
    {
        rule.access = Access::ReadWriteExec;
    }
}

fn base_rules() -> Vec<LandlockRule> {
    let mut r = vec![
        LandlockRule {
            scope: None,
            path: "/tmp".into(),
            access: Access::ReadWrite,
        },
        LandlockRule {
            scope: None,
            path: "/dev/shm".into(),
            access: Access::ReadWrite,
        },
        LandlockRule {
            scope: None,
            path: "/proc".into(),
            access: Access::Read,
        },
        LandlockRule {
            scope: None,
            path: "/".into(),
            access: Access::Read,
        },
    ];
    r.extend(DEVICES.iter().map(|d| LandlockRule {
        scope: None,
        path: Path::new("/dev").join(d),
        access: Access::Device,
    }));
    r
}

fn add_system_paths(
    spec: &mut SandboxSpec,
    system_paths: &[PathBuf],
    host: &dyn Fn(&Path) -> HostKind,
) {
    for path in system_paths {
        let kind = match host(path) {
            HostKind::Missing => continue,
            HostKind::Symlink(target) => MountKind::Symlink { target },
            HostKind::Dir => MountKind::Bind {
                source: BindSource::System(path.clone()),
                dir: true,
                writable: false,
                exec: true,
            },
            HostKind::File => MountKind::Bind {
                source: BindSource::System(path.clone()),
                dir: false,
                writable: false,
                exec: true,
            },
        };
        if !matches!(kind, MountKind::Symlink { .. }) {
            spec.landlock.push(LandlockRule {
                scope: None,
                path: path.clone(),
                access: Access::ReadExec,
            });
        }
        spec.mounts.push(MountStep {
            target: path.clone(),
            kind,
        });
    }
}

/// The program, bound read-only and executable at its own path (last, so
/// it lands on top of any scope holding it), unless a system path shows it:
/// those are read-only and executable already.
fn add_program(spec: &mut SandboxSpec, system_paths: &[PathBuf], host: &dyn Fn(&Path) -> HostKind) {
    let shown = system_paths
        .iter()
        .any(|p| spec.program.starts_with(p) && matches!(host(p), HostKind::Dir | HostKind::File));
    if !shown {
        spec.mounts.push(MountStep {
            target: spec.program.clone(),
            kind: MountKind::Program,
        });
    }
}

/// For a `#!` script (`script`) the system paths show, whose path only
/// root can change on the host ([`only_root_may_change`]): a
/// [`MountKind::Program`] step binds its sealed copy over it, so that it
/// runs by its path (`$0`, `__file__`, and the modules beside it, as the
/// interpreter finds them) rather than as `/dev/fd/3`. Elsewhere on a host
/// filesystem a host process could rename a directory on the way, or
/// replace the file, and with it the bind, between the exec and the
/// interpreter's open: there the script keeps running from its descriptor.
pub(crate) fn bind_root_only_script(
    spec: &mut SandboxSpec,
    script: bool,
    chain_ok: impl FnOnce(&Path) -> bool,
) {
    let has_program_step = spec
        .mounts
        .iter()
        .any(|m| matches!(m.kind, MountKind::Program));
    if !script || has_program_step || !chain_ok(&spec.program) {
        return;
    }
    spec.mounts.push(MountStep {
        target: spec.program.clone(),
        kind: MountKind::Program,
    });
    spec.program_root_only = true;
}

/// Whether only root may change `path` on the host: the file and every
/// directory above it are owned by root and writable by no one else (a
/// sticky directory, `/tmp`, counts: no one else may rename or remove
/// root's entries there). Symbolic links are not followed.
pub(crate) fn only_root_may_change(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let mut at = Some(path);
    while let Some(p) = at {
        let Ok(m) = std::fs::symlink_metadata(p) else {
            return false;
        };
        let writable_by_others = m.mode() & 0o022 != 0;
        let sticky_dir = m.is_dir() && m.mode() & 0o1000 != 0;
        if m.uid() != 0 || m.file_type().is_symlink() || (writable_by_others && !sticky_dir) {
            return false;
        }
        if on_a_filesystem_its_server_owns(p) {
            return false;
        }
        at = p.parent();
    }
    true
}

/// Whether `path` lies on a filesystem whose ownership and contents a
/// server reports (FUSE, NFS, SMB, 9P, Ceph…): what it calls root-owned
/// its server may change or swap at will, so a bind over it could vanish
/// between exec and an interpreter's open.
fn on_a_filesystem_its_server_owns(path: &Path) -> bool {
    nix::sys::statfs::statfs(path).map_or(true, |fs| super::prepare::server_reported(&fs))
}

/// With network grants (or learning), the sandbox resolves names through
/// spawnd's DNS stub on its own loopback, and nothing else:
/// `/etc/resolv.conf` says so, bound over whatever the system paths show
/// there (last, over any scope). Without grants there is no resolver to
/// name.
fn add_resolver(spec: &mut SandboxSpec, plan: &SpawnPlan) {
    if !plan.uses_relay() {
        return;
    }
    spec.mounts.push(MountStep {
        target: RESOLV_CONF.into(),
        kind: MountKind::File {
            contents: RESOLVER_CONFIG.to_string(),
        },
    });
}

/// The resolver configuration's path.
pub(crate) const RESOLV_CONF: &str = "/etc/resolv.conf";
/// A sandbox with network grants asks spawnd's DNS stub, and only it.
pub(crate) const RESOLVER_CONFIG: &str = "nameserver 127.0.0.1\n";

/// Who the program is inside the sandbox, as the files that name it say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeIdentity {
    /// Its uid.
    pub uid: u32,
    /// Its gid.
    pub gid: u32,
    /// The user name the host gives that uid (or a neutral one).
    pub user: String,
    /// The group name the host gives that gid (or a neutral one).
    pub group: String,
}

/// The identity files every sandbox gets in `/etc`, written for it, never
/// copied from the host: `passwd` and `group` naming root, nobody and the
/// program's own identity (so `whoami`, `id` and `getpass` work, and the
/// host's accounts stay unseen), `hosts` naming the loopback, and
/// `nsswitch.conf` saying to read them. Each comes last, over any scope:
/// written in place on the fresh root where nothing is there, else bound
/// over whatever the system paths or a scope show there.
pub(crate) fn add_runtime_files(spec: &mut SandboxSpec, who: &RuntimeIdentity) {
    for (target, contents) in runtime_files(who) {
        spec.mounts.push(MountStep {
            target: target.into(),
            kind: MountKind::File { contents },
        });
    }
}

/// The files [`add_runtime_files`] puts in place, and their contents.
pub(crate) fn runtime_files(who: &RuntimeIdentity) -> [(&'static str, String); 4] {
    let mut passwd = String::from("root:x:0:0:root:/root:/usr/sbin/nologin\n");
    let mut group = String::from("root:x:0:\n");
    if who.uid != 0 && who.uid != NOBODY_ID {
        passwd.push_str(&format!(
            "{}:x:{}:{}::{RUNTIME_HOME}:/bin/sh\n",
            who.user, who.uid, who.gid
        ));
    }
    if who.gid != 0 && who.gid != NOBODY_ID {
        group.push_str(&format!("{}:x:{}:\n", who.group, who.gid));
    }
    passwd.push_str(&format!(
        "nobody:x:{NOBODY_ID}:{NOBODY_ID}:nobody:{}:/usr/sbin/nologin\n",
        if who.uid == NOBODY_ID {
            RUNTIME_HOME
        } else {
            "/nonexistent"
        }
    ));
    group.push_str(&format!("nogroup:x:{NOBODY_ID}:\n"));
    [
        ("/etc/passwd", passwd),
        ("/etc/group", group),
        ("/etc/hosts", HOSTS_CONFIG.to_string()),
        ("/etc/nsswitch.conf", NSSWITCH_CONFIG.to_string()),
    ]
}

/// The kernel's overflow id, `nobody` and `nogroup`.
const NOBODY_ID: u32 = 65534;

/// Every sandbox knows the loopback's names, and asks its resolver (with
/// network grants, spawnd's stub) for every other.
pub(crate) const HOSTS_CONFIG: &str =
    "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n";

/// Accounts from the files above, names from `hosts` then DNS.
const NSSWITCH_CONFIG: &str =
    "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n";

/// A name fit for `passwd` and `group`: the host's, when it is plain
/// (letters, digits, `_`, `-`, `.`, not first a `-`), else `fallback`.
pub(crate) fn account_name(host_name: Option<&str>, fallback: &str) -> String {
    match host_name {
        Some(name)
            if !name.is_empty()
                && name.len() <= 32
                && !name.starts_with('-')
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')) =>
        {
            name.to_string()
        }
        _ => fallback.to_string(),
    }
}

/// Scopes are mounted shallowest first, so a nested scope lands on top of its parent.
fn add_scopes(spec: &mut SandboxSpec, plan: &SpawnPlan, host: &dyn Fn(&Path) -> HostKind) {
    let exec = |p: &Path| plan.fs.exec.iter().any(|e| p.starts_with(e));
    // Path → writable; a path listed both ways is writable.
    let mut scopes: std::collections::BTreeMap<PathBuf, bool> = std::collections::BTreeMap::new();
    for (paths, writable) in [
        (&plan.fs.read, false),
        (&plan.fs.exec, false),
        (&plan.fs.write, true),
    ] {
        for p in paths {
            *scopes.entry(p.clone()).or_insert(false) |= writable;
        }
    }
    // A granted unix socket no scope shows is bound in by itself, read-only
    // (connecting to a socket needs no write access to its mount).
    for socket in &plan.fs.unix_sockets {
        let shown = plan
            .fs
            .read
            .iter()
            .chain(&plan.fs.exec)
            .chain(&plan.fs.write)
            .any(|s| socket.starts_with(s));
        if !shown {
            scopes.entry(socket.clone()).or_insert(false);
        }
    }
    let mut entries: Vec<(PathBuf, bool)> = scopes.into_iter().collect();
    entries.sort_by_key(|(p, _)| p.components().count());
    for (path, writable) in entries {
        let dir = match host(&path) {
            HostKind::Dir | HostKind::Symlink(_) => true,
            HostKind::File => false,
            HostKind::Missing if writable => {
                spec.create_write_scopes.push(path.clone());
                true
            }
            HostKind::Missing => {
                spec.missing_read_scopes.push(path);
                continue;
            }
        };
        let exec = exec(&path);
        let access = match (writable, exec) {
            (false, false) => Access::Read,
            (false, true) => Access::ReadExec,
            (true, false) => Access::ReadWrite,
            (true, true) => Access::ReadWriteExec,
        };
        spec.landlock.push(LandlockRule {
            scope: Some(spec.scopes.len()),
            path: path.clone(),
            access,
        });
        spec.mounts.push(MountStep {
            target: path.clone(),
            kind: MountKind::Bind {
                source: BindSource::Scope(spec.scopes.len()),
                dir,
                writable,
                exec,
            },
        });
        spec.scopes.push(path);
    }
    // Where Landlock governs connect() (ABI 9), only the granted sockets may
    // be connected to, wherever they are: no scope's rights include it.
    for socket in &plan.fs.unix_sockets {
        if spec.missing_read_scopes.contains(socket) {
            continue;
        }
        spec.landlock.push(LandlockRule {
            scope: spec.scopes.iter().position(|s| s == socket),
            path: socket.clone(),
            access: Access::UnixSocket,
        });
    }
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
