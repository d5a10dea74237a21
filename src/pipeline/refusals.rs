//! What a traced run's program ran into, each wall named by the layer that
//! put it there and the manifest key that would move it. The tracer
//! ([`crate::sandbox::trace`]) saw each path call's entry, not its result,
//! so a path the sandbox does not grant is a refusal only where the host
//! has something there (a probe for a file that exists nowhere fails the
//! same inside and out). Calls the seccomp filter refused are known for
//! certain: spawnd answered them.

use std::path::{Path, PathBuf};

use crate::sandbox::spec::{Access, MountKind, SandboxSpec};
use crate::sandbox::trace::{PathUse, Trace, Use};
pub(crate) use crate::spawn_result::Refusal;
use crate::spawn_result::{TraceReport, TracedPath};

/// Paths the sandbox provides itself, whose refusals are its design rather
/// than a manifest's gap.
const PROVIDED: &[&str] = &["/proc", "/dev", "/sys", "/tmp"];

/// The `trace` of a traced run's result: what was seen, and the refusals
/// among it (the spec decides what the sandbox granted; `exists` says
/// whether the host has a path).
pub(super) fn trace_report(
    trace: &Trace,
    spec: &SandboxSpec,
    exists: &dyn Fn(&Path) -> bool,
) -> TraceReport {
    TraceReport {
        refusals: refusals(trace, spec, exists),
        paths: trace
            .paths
            .iter()
            .map(|used| TracedPath {
                path: used.path.clone(),
                how: used.how,
                call: used.call.to_string(),
                calls: used.calls,
            })
            .collect(),
        executed: trace.executed.clone(),
        refused_calls: trace.refused.clone(),
        unresolved: trace.unresolved,
        dropped: trace.dropped,
        sync_wake_up: trace.sync_wake_up,
        error: trace.error.clone(),
    }
}

/// The walls in `trace`: seccomp's refusals first, then each path use the
/// sandbox did not grant, in path order.
pub(super) fn refusals(
    trace: &Trace,
    spec: &SandboxSpec,
    exists: &dyn Fn(&Path) -> bool,
) -> Vec<Refusal> {
    let mut out: Vec<Refusal> = trace.refused.iter().map(filter_refusal).collect();
    out.extend(
        trace
            .paths
            .iter()
            .filter_map(|used| path_refusal(used, spec, exists)),
    );
    out
}

/// A call the seccomp filter refused.
fn filter_refusal(r: &crate::spawn_result::RefusedCall) -> Refusal {
    Refusal {
        layer: "seccomp".into(),
        errno: errno_name(r.errno).into(),
        call: r.call.clone(),
        path: None,
        how: None,
        calls: r.calls,
        fix: match r.call.as_str() {
            "socket" | "socketpair" => "spawnd's seccomp filter refuses unix sockets unless the manifest grants socket paths (`unix_sockets`), and every raw, packet and netlink socket".to_string(),
            call => format!("spawnd's seccomp filter refuses {call} to every program (docs/security.md lists each refused call and why); no manifest key grants it"),
        },
    }
}

/// The wall a path the program used met, if one did: the sandbox's own
/// `/tmp` (not executable, or hiding the host's file), the files the
/// sandbox writes for itself (read-only), or a scope's rules.
fn path_refusal(
    used: &PathUse,
    spec: &SandboxSpec,
    exists: &dyn Fn(&Path) -> bool,
) -> Option<Refusal> {
    let refused = |layer: &str, errno: &str, fix: String| Refusal {
        layer: layer.into(),
        errno: errno.into(),
        call: used.call.to_string(),
        path: Some(used.path.clone()),
        how: Some(used.how),
        calls: used.calls,
        fix,
    };
    let in_a_scope = spec
        .landlock
        .iter()
        .any(|r| r.scope.is_some() && used.path.starts_with(&r.path));
    let in_own_tmp = used.path.starts_with("/tmp") && !in_a_scope;
    if in_own_tmp && used.how == Use::Execute && !spec.tmp_exec {
        // A program made in the sandbox's own /tmp and run from there.
        return Some(refused(
            "noexec",
            "EACCES",
            "the sandbox's /tmp does not allow execution; set tmp_exec = true in the manifest's limits".to_string(),
        ));
    }
    if in_own_tmp && matches!(used.how, Use::Read | Use::List | Use::Execute) && exists(&used.path)
    {
        // The host's file, hidden by the sandbox's own /tmp.
        return Some(refused(
            "mount_namespace",
            "ENOENT",
            format!(
                "the sandbox's /tmp is its own, without the host's {}; add it to fs_read",
                used.path.display()
            ),
        ));
    }
    if PROVIDED.iter().any(|p| used.path.starts_with(p)) && !in_a_scope {
        return None;
    }
    // The files the sandbox writes for itself (`/etc/passwd`, `/etc/hosts`…)
    // are there to read; the host's never are, and no scope changes them.
    if written_for_the_sandbox(spec, &used.path) {
        let writes = matches!(used.how, Use::Write | Use::Create | Use::Remove);
        return writes.then(|| {
            refused(
                "read_only_mount",
                "EROFS",
                format!(
                    "{} is the sandbox's own, written for it and read-only (docs/sandbox.md, \"The runtime\"); no scope changes it",
                    used.path.display()
                ),
            )
        });
    }
    // A new file's parent must exist; a read of nothing is a probe.
    let on_host = match used.how {
        Use::Create | Use::Write => exists(&used.path) || used.path.parent().is_some_and(exists),
        _ => exists(&used.path),
    };
    if !on_host {
        return None;
    }
    let new_file = used.how == Use::Write && !exists(&used.path);
    let (layer, errno, fix) = wall(spec, &used.path, used.how, new_file, exists)?;
    Some(refused(layer, errno, fix))
}

/// Whether `path` is a file the sandbox writes for itself ([`MountKind::File`]:
/// its identity files, and its resolver's configuration with network grants).
fn written_for_the_sandbox(spec: &SandboxSpec, path: &Path) -> bool {
    spec.mounts
        .iter()
        .any(|m| m.target == path && matches!(m.kind, MountKind::File { .. }))
}

/// What to say in place of "add `dir` to `key`" when that advice would be
/// wrong: a path that may hold secrets is withheld on purpose, and the
/// resolver's configuration is the sandbox's own once it has network
/// grants. When `dir` is fine but holds a secret, the advice says so.
fn advice(path: &Path, dir: &Path, key: &str, exists: &dyn Fn(&Path) -> bool) -> String {
    if let Some(secret) =
        crate::secret_paths::containing(path).or_else(|| crate::secret_paths::containing(dir))
    {
        return format!(
            "{} may hold secrets: it is withheld on purpose, and no scope is suggested for it",
            secret.display()
        );
    }
    if path == Path::new(crate::sandbox::spec::RESOLV_CONF) {
        return format!(
            "the sandbox has a resolver only with network grants (`network`), and then writes its own {}; the host's is never needed",
            path.display()
        );
    }
    match crate::secret_paths::inside(dir, None, exists) {
        Some(secret) => format!(
            "add {} to {key} (it holds {}, which may hold secrets: grant a narrower path if you can)",
            dir.display(),
            secret.display()
        ),
        None => format!("add {} to {key}", dir.display()),
    }
}

/// `path` with the sandbox's symbolic links among the system paths
/// followed (`/lib` → `usr/lib`), as the kernel follows them inside.
fn through_links(spec: &SandboxSpec, path: &Path) -> PathBuf {
    let mut path = path.to_path_buf();
    for _ in 0..8 {
        let link = spec.mounts.iter().find_map(|m| match &m.kind {
            MountKind::Symlink { target } if path.starts_with(&m.target) => {
                Some((m.target.clone(), target.clone()))
            }
            _ => None,
        });
        let Some((at, target)) = link else {
            break;
        };
        let rest = path
            .strip_prefix(&at)
            .unwrap_or(Path::new(""))
            .to_path_buf();
        let base = at.parent().unwrap_or(Path::new("/")).join(target);
        path = base.join(rest);
    }
    path
}

/// The wall `spec` puts in front of using `path` so, if any.
/// (`new_file`: a write that creates the file, granted by its directory.)
fn wall(
    spec: &SandboxSpec,
    path: &Path,
    how: Use,
    new_file: bool,
    exists: &dyn Fn(&Path) -> bool,
) -> Option<(&'static str, &'static str, String)> {
    let shown = path.display();
    let resolved = through_links(spec, path);
    let path = resolved.as_path();
    let dir = match how {
        Use::Create | Use::Remove => path.parent().unwrap_or(path),
        Use::Write if new_file => path.parent().unwrap_or(path),
        _ => path,
    };
    let key = match how {
        Use::Read | Use::List => "fs_read",
        Use::Execute => "fs_exec",
        Use::Write | Use::Create | Use::Remove => "fs_write",
    };
    let visible = spec
        .mounts
        .iter()
        .any(|m| m.target != Path::new("/") && path.starts_with(&m.target));
    if !visible {
        return Some((
            "mount_namespace",
            "ENOENT",
            format!(
                "{shown} is not in the sandbox; {}",
                advice(path, dir, key, exists)
            ),
        ));
    }
    if let (Use::Execute, Some(files)) = (how, &spec.executables) {
        let declared = path == spec.program || files.iter().any(|f| f.path == path);
        return (!declared).then(|| {
            (
                "landlock",
                "EACCES",
                format!("exec = \"declared\" lets only the declared programs and also_runs files be executed; pin {shown} in also_runs (`spawnd hash` prints its sha256)"),
            )
        });
    }
    let granted = spec
        .landlock
        .iter()
        .filter(|r| r.path != Path::new("/") && path.starts_with(&r.path))
        .max_by_key(|r| r.path.components().count())
        .map(|r| r.access);
    let (reads, writes, executes) = match granted {
        None => (false, false, false),
        Some(Access::Read) => (true, false, false),
        Some(Access::ReadExec) => (true, false, true),
        Some(Access::ReadWrite) => (true, true, false),
        Some(Access::ReadWriteExec) => (true, true, true),
        Some(Access::Device) => (true, true, false),
        Some(Access::UnixSocket) => (false, false, false),
    };
    match how {
        Use::Read | Use::List if !reads => Some((
            "landlock",
            "EACCES",
            format!(
                "Landlock grants no reading of {shown}; {}",
                advice(path, dir, "fs_read", exists)
            ),
        )),
        Use::Write | Use::Create | Use::Remove if !writes => Some((
            "read_only_mount",
            "EROFS",
            format!(
                "{shown} is on a read-only mount; {}",
                advice(path, dir, "fs_write", exists)
            ),
        )),
        Use::Execute if !executes => Some((
            "noexec",
            "EACCES",
            match crate::secret_paths::containing(path) {
                Some(_) => format!(
                    "{shown} is on a mount without execution (noexec, and Landlock grants none); {}",
                    advice(path, dir, "fs_exec", exists)
                ),
                None => format!(
                    "{shown} is on a mount without execution (noexec, and Landlock grants none); add it to fs_exec"
                ),
            },
        )),
        _ => None,
    }
}

/// The symbolic name of the errnos the filter answers with.
fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EPERM => "EPERM",
        libc::ENOSYS => "ENOSYS",
        libc::EACCES => "EACCES",
        _ => "errno",
    }
}

/// One line per refusal, for a person: the layer, the call and path, the
/// fix.
pub(crate) fn describe(r: &Refusal) -> String {
    let calls = match r.calls {
        1 => "1 call".to_string(),
        n => format!("{n} calls"),
    };
    let target = match (&r.path, r.how) {
        (Some(p), Some(how)) => format!("{} {} ({}, {calls})", r.call, p.display(), how.as_str()),
        (Some(p), None) => format!("{} {} ({calls})", r.call, p.display()),
        (None, _) => format!("{} ({calls})", r.call),
    };
    format!("refused by {} ({}): {target}; {}", r.layer, r.errno, r.fix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::spec::{LandlockRule, MountKind, MountStep};
    use crate::sandbox::trace::{PathUse, RefusedCall};

    fn spec() -> SandboxSpec {
        let mut spec = SandboxSpec {
            scopes: Vec::new(),
            mounts: Vec::new(),
            landlock: Vec::new(),
            cwd: "/tmp".into(),
            fresh_cwd: true,
            missing_read_scopes: Vec::new(),
            create_write_scopes: Vec::new(),
            tmpfs: crate::sandbox::spec::base_tmpfs_sizes(),
            tmp_exec: false,
            program_root_only: false,
            program: "/usr/bin/cc".into(),
            executables: None,
        };
        for (target, access) in [
            ("/usr", Access::ReadExec),
            ("/data", Access::Read),
            ("/out", Access::ReadWrite),
        ] {
            spec.mounts.push(MountStep {
                target: target.into(),
                kind: MountKind::Tmpfs {
                    mode: 0o755,
                    size: 1 << 20,
                },
            });
            spec.landlock.push(LandlockRule {
                path: target.into(),
                access,
                scope: None,
            });
        }
        spec.mounts.push(MountStep {
            target: "/lib".into(),
            kind: MountKind::Symlink {
                target: "usr/lib".into(),
            },
        });
        spec
    }

    fn used(path: &str, how: Use) -> PathUse {
        PathUse {
            path: path.into(),
            how,
            call: "openat",
            calls: 1,
        }
    }

    #[test]
    fn each_wall_is_named_by_its_layer_and_what_moves_it() {
        let trace = Trace {
            paths: vec![
                used("/usr/bin/cc", Use::Execute),
                used("/lib/libc.so.6", Use::Read),
                used("/data/new.txt", Use::Write),
                used("/data/in.txt", Use::Read),
                used("/data/out.txt", Use::Write),
                used("/home/u/.config/x", Use::Read),
                used("/out/a.o", Use::Create),
                used("/out/a.out", Use::Execute),
                used("/nowhere/probe", Use::Read),
                used("/tmp/t", Use::Write),
                used("/tmp/built", Use::Execute),
            ],
            refused: vec![RefusedCall {
                call: "ptrace".into(),
                errno: libc::EPERM,
                calls: 2,
            }],
            ..Trace::default()
        };
        let exists = |p: &Path| !p.starts_with("/nowhere");
        let found = refusals(&trace, &spec(), &exists);
        let got: Vec<(&str, Option<PathBuf>)> = found
            .iter()
            .map(|r| (r.layer.as_str(), r.path.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("seccomp", None),
                ("read_only_mount", Some("/data/new.txt".into())),
                ("read_only_mount", Some("/data/out.txt".into())),
                ("mount_namespace", Some("/home/u/.config/x".into())),
                ("noexec", Some("/out/a.out".into())),
                ("noexec", Some("/tmp/built".into())),
            ]
        );
    }

    #[test]
    fn the_sandboxs_own_files_are_no_refusal_and_secrets_are_never_suggested() {
        let mut spec = spec();
        for target in ["/etc/passwd", "/etc/hosts"] {
            spec.mounts.push(MountStep {
                target: target.into(),
                kind: MountKind::File {
                    contents: String::new(),
                },
            });
        }
        let trace = Trace {
            paths: vec![
                used("/etc/passwd", Use::Read),
                used("/etc/hosts", Use::Read),
                used("/etc/hosts", Use::Write),
                used("/etc/shadow", Use::Read),
                used("/etc/resolv.conf", Use::Read),
                used("/home/u/.ssh/id_rsa", Use::Read),
                used("/home/u", Use::List),
                used("/home/u/notes", Use::Read),
            ],
            ..Trace::default()
        };
        let on_host = |p: &Path| {
            [
                "/etc",
                "/etc/passwd",
                "/etc/hosts",
                "/etc/shadow",
                "/etc/resolv.conf",
                "/home/u",
                "/home/u/.ssh",
                "/home/u/.ssh/id_rsa",
                "/home/u/notes",
            ]
            .iter()
            .any(|h| p == Path::new(h))
        };
        let got = refusals(&trace, &spec, &on_host);
        let by_path = |p: &str| {
            got.iter()
                .find(|r| r.path.as_deref() == Some(Path::new(p)))
                .map(|r| (r.layer.clone(), r.fix.clone()))
        };
        assert_eq!(by_path("/etc/passwd"), None, "{got:?}");
        let (layer, fix) = by_path("/etc/hosts").unwrap();
        assert_eq!(layer, "read_only_mount");
        assert!(
            fix.contains("the sandbox's own") && !fix.contains("add "),
            "{fix}"
        );
        for (path, secret) in [
            ("/etc/shadow", "/etc/shadow"),
            ("/home/u/.ssh/id_rsa", "/home/u/.ssh"),
        ] {
            let (_, fix) = by_path(path).unwrap();
            assert!(
                fix.contains(&format!(
                    "{secret} may hold secrets: it is withheld on purpose"
                )) && !fix.contains("add "),
                "{fix}"
            );
        }
        let (_, fix) = by_path("/etc/resolv.conf").unwrap();
        assert!(
            fix.contains("network grants") && !fix.contains("add "),
            "{fix}"
        );
        // A scope that holds a secret is suggested with that said.
        let (_, fix) = by_path("/home/u").unwrap();
        assert!(
            fix.contains("add /home/u to fs_read (it holds /home/u/.ssh"),
            "{fix}"
        );
        let (_, fix) = by_path("/home/u/notes").unwrap();
        assert!(fix.ends_with("add /home/u/notes to fs_read"), "{fix}");
    }

    #[test]
    fn under_exec_declared_an_undeclared_program_is_landlocks_refusal() {
        let mut spec = spec();
        spec.executables = Some(vec![crate::sandbox::spec::ExecutableRule {
            path: "/usr/bin/as".into(),
            file: crate::plan::FileId::default(),
        }]);
        let trace = Trace {
            paths: vec![
                used("/usr/bin/cc", Use::Execute),
                used("/usr/bin/as", Use::Execute),
                used("/usr/bin/ld", Use::Execute),
            ],
            ..Trace::default()
        };
        let got = refusals(&trace, &spec, &|_: &Path| true);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            (got[0].layer.as_str(), got[0].path.as_deref()),
            ("landlock", Some(Path::new("/usr/bin/ld")))
        );
        assert!(got[0].fix.contains("also_runs"), "{}", got[0].fix);
    }
}
