//! The sandbox spec, value for value.

use std::path::{Path, PathBuf};

use super::*;
use crate::manifest::{Limits, Sha256Digest};
use crate::plan::FsPlan;

fn plan(fs: FsPlan, cwd: CwdPlan) -> SpawnPlan {
    SpawnPlan {
        fs,
        cwd,
        ..SpawnPlan::of_true()
    }
}

fn host(p: &Path) -> HostKind {
    match p.to_str().unwrap_or("") {
        "/bin" => HostKind::Symlink("usr/bin".into()),
        "/usr" | "/lib" | "/home/u/code" | "/home/u/code/out" | "/home/u/code/sub" => HostKind::Dir,
        "/etc/ld.so.cache" | "/home/u/.gitconfig" => HostKind::File,
        _ => HostKind::Missing,
    }
}

fn system() -> Vec<PathBuf> {
    ["/usr", "/lib", "/lib64", "/bin", "/etc/ld.so.cache"]
        .iter()
        .map(PathBuf::from)
        .collect()
}

#[test]
fn system_paths_are_bound_read_only_executable_and_links_stay_links() {
    let spec = build_spec(
        &plan(FsPlan::default(), CwdPlan::FreshTemp),
        &system(),
        &host,
    )
    .unwrap();
    let find = |t: &str| {
        spec.mounts
            .iter()
            .find(|m| m.target == Path::new(t))
            .map(|m| m.kind.clone())
    };
    assert_eq!(
        find("/usr"),
        Some(MountKind::Bind {
            source: BindSource::System("/usr".into()),
            dir: true,
            writable: false,
            exec: true
        })
    );
    assert_eq!(
        find("/bin"),
        Some(MountKind::Symlink {
            target: "usr/bin".into()
        })
    );
    assert_eq!(find("/lib64"), None, "missing system paths are left out");
    assert_eq!(
        find("/etc/ld.so.cache"),
        Some(MountKind::Bind {
            source: BindSource::System("/etc/ld.so.cache".into()),
            dir: false,
            writable: false,
            exec: true
        })
    );
    assert_eq!(
        (spec.cwd.as_path(), spec.fresh_cwd),
        (Path::new(FRESH_CWD), true)
    );
}

#[test]
fn scopes_mount_shallowest_first_with_write_and_exec_as_declared() {
    let fs = FsPlan {
        read: vec![
            "/home/u/code".into(),
            "/home/u/.gitconfig".into(),
            "/home/u/gone".into(),
        ],
        write: vec!["/home/u/code/out".into(), "/home/u/cache".into()],
        exec: vec!["/home/u/code/sub".into()],
        ..Default::default()
    };
    let spec = build_spec(
        &plan(fs, CwdPlan::Dir("/home/u/code".into())),
        &system(),
        &host,
    )
    .unwrap();
    let binds: Vec<(String, bool, bool)> = spec
        .mounts
        .iter()
        .filter_map(|m| match &m.kind {
            MountKind::Bind {
                source: BindSource::Scope(_),
                writable,
                exec,
                ..
            } => Some((m.target.display().to_string(), *writable, *exec)),
            _ => None,
        })
        .collect();
    assert_eq!(
        binds,
        [
            ("/home/u/.gitconfig".to_string(), false, false),
            ("/home/u/cache".to_string(), true, false),
            ("/home/u/code".to_string(), false, false),
            ("/home/u/code/out".to_string(), true, false),
            ("/home/u/code/sub".to_string(), false, true),
        ]
    );
    assert_eq!(spec.missing_read_scopes, [PathBuf::from("/home/u/gone")]);
    assert_eq!(spec.create_write_scopes, [PathBuf::from("/home/u/cache")]);
    assert!(spec.landlock.contains(&LandlockRule {
        scope: Some(3),
        path: "/home/u/code/out".into(),
        access: Access::ReadWrite
    }));
    assert!(spec.landlock.contains(&LandlockRule {
        scope: Some(4),
        path: "/home/u/code/sub".into(),
        access: Access::ReadExec
    }));
    assert!(!spec
        .landlock
        .iter()
        .any(|r| r.path == Path::new("/home/u/gone")));
    assert_eq!(
        (spec.cwd.as_path(), spec.fresh_cwd),
        (Path::new("/home/u/code"), false)
    );
}

#[test]
fn the_sandbox_provides_tmp_dev_and_proc_itself() {
    let spec = build_spec(&plan(FsPlan::default(), CwdPlan::FreshTemp), &[], &host).unwrap();
    let targets: Vec<String> = spec
        .mounts
        .iter()
        .map(|m| m.target.display().to_string())
        .collect();
    for t in [
        "/tmp",
        "/dev",
        "/dev/null",
        "/dev/urandom",
        "/dev/shm",
        "/proc",
        "/dev/fd",
    ] {
        assert!(targets.contains(&t.to_string()), "{t} in {targets:?}");
    }
    assert!(!targets.iter().any(|t| t.starts_with("/sys")));
    assert!(
        !spec
            .landlock
            .iter()
            .any(|r| matches!(r.access, Access::ReadExec | Access::ReadWriteExec)),
        "nothing but declared paths executes"
    );
}

#[test]
fn tmp_takes_the_manifests_size_and_executes_only_with_tmp_exec() {
    let spec_for = |limits: Limits| {
        let mut plan = plan(FsPlan::default(), CwdPlan::FreshTemp);
        plan.limits = limits;
        build_spec(&plan, &[], &host).unwrap()
    };
    let tmp_rule = |spec: &SandboxSpec| {
        spec.landlock
            .iter()
            .find(|r| r.path == Path::new("/tmp"))
            .map(|r| r.access)
    };
    let default = spec_for(Limits::default());
    assert_eq!(default.tmpfs, base_tmpfs_sizes());
    assert!(!default.tmp_exec);
    assert_eq!(tmp_rule(&default), Some(Access::ReadWrite));
    let spec = spec_for(Limits {
        max_memory_bytes: 64 << 20,
        tmp_size_bytes: Some(60 << 20),
        tmp_exec: true,
        ..Limits::default()
    });
    assert_eq!(
        spec.tmpfs,
        TmpfsSizes {
            tmp: 60 << 20,
            shm: 4 << 20
        }
    );
    assert!(spec.tmp_exec);
    assert_eq!(tmp_rule(&spec), Some(Access::ReadWriteExec));
    // The mounts every sandbox begins with stay the same: a spare's /tmp
    // is remounted for the request.
    assert!(after_base(&spec.mounts).is_some());
}

#[test]
fn scopes_over_managed_paths_and_missing_cwds_are_refused() {
    let fs = FsPlan {
        read: vec!["/proc/1".into()],
        ..FsPlan::default()
    };
    assert!(matches!(
        build_spec(&plan(fs, CwdPlan::FreshTemp), &[], &host),
        Err(SpecError::ManagedPath(..))
    ));
    let fs = FsPlan {
        read: vec!["/home/u/code".into()],
        ..FsPlan::default()
    };
    let missing = CwdPlan::Dir("/home/u/code/nope".into());
    assert_eq!(
        build_spec(&plan(fs, missing), &[], &host),
        Err(SpecError::MissingCwd("/home/u/code/nope".into()))
    );
}

/// A `/tmp` scope would bind the host's over the staging root, and `/tmp/work` is spawnd's own.
#[test]
fn scopes_at_or_above_the_staging_tmp_or_on_the_fresh_cwd_are_refused() {
    for bad in ["/tmp", "/", "/tmp/work", "/tmp/work/x"] {
        let fs = FsPlan {
            write: vec![bad.into()],
            ..FsPlan::default()
        };
        assert!(
            matches!(
                build_spec(&plan(fs, CwdPlan::FreshTemp), &[], &host),
                Err(SpecError::ManagedPath(..))
            ),
            "{bad}"
        );
    }
    let fs = FsPlan {
        write: vec!["/tmp/aileron".into()],
        ..FsPlan::default()
    };
    assert!(build_spec(&plan(fs, CwdPlan::FreshTemp), &[], &host).is_ok());
}

/// A script's copy is bound only where the sandbox alone makes the way to
/// it: not in a system path or a scope (host filesystems), not in /dev,
/// not over a system path that covers /tmp, not in the fresh cwd.
#[test]
fn only_a_program_path_on_the_sandboxs_own_filesystems_is_its_own() {
    let own = |program: &str, system: &[&str], cwd: CwdPlan| {
        let fs = FsPlan {
            read: vec!["/home/u/code".into()],
            ..FsPlan::default()
        };
        let mut plan = plan(fs, cwd);
        plan.program.resolved = program.into();
        let system: Vec<PathBuf> = system.iter().map(PathBuf::from).collect();
        let host = |p: &Path| match p.to_str() {
            Some("/tmp") => HostKind::Dir,
            _ => host(p),
        };
        build_spec(&plan, &system, &host)
            .unwrap()
            .program_path_is_the_sandboxs_own()
    };
    let fresh = || CwdPlan::FreshTemp;
    assert!(own("/home/u/bin/x.sh", &["/usr"], fresh()));
    assert!(own("/opt/tools/x.py", &["/usr"], fresh()));
    assert!(own("/tmp/t/x.sh", &["/usr"], fresh()));
    assert!(own(
        "/tmp/work/x.sh",
        &[],
        CwdPlan::Dir("/home/u/code".into())
    ));
    assert!(!own("/tmp/work/x.sh", &[], fresh()));
    assert!(!own("/home/u/code/x.sh", &["/usr"], fresh()));
    assert!(!own("/usr/bin/x.sh", &["/usr"], fresh()));
    assert!(!own("/bin/x.sh", &["/bin"], fresh()));
    assert!(!own("/dev/shm/x.sh", &[], fresh()));
    assert!(!own("/tmp/t/x.sh", &["/tmp"], fresh()));
}

#[test]
fn steps_mountable_ahead_are_the_system_paths_between_the_shared_steps_and_the_scopes() {
    let fs = FsPlan {
        read: vec!["/home/u/code".into()],
        ..FsPlan::default()
    };
    let mut spec = build_spec(&plan(fs, CwdPlan::FreshTemp), &system(), &host).unwrap();
    add_runtime_files(&mut spec, &nobody());
    let after = after_base(&spec.mounts).expect("begins with the shared steps");
    assert_eq!(after.len(), spec.mounts.len() - base_mounts().len());
    let targets: Vec<&Path> = steps_mountable_ahead(&spec.mounts)
        .iter()
        .map(|m| m.target.as_path())
        .collect();
    // /lib64 is missing on this host: left out; the scope comes after, and
    // the account files after it.
    assert_eq!(
        targets,
        ["/usr", "/lib", "/bin", "/etc/ld.so.cache"].map(Path::new)
    );
    assert_eq!(after[targets.len()].target, Path::new("/home/u/code"));
    // Without the shared steps first, nothing is the system's.
    assert!(after_base(&spec.mounts[1..]).is_none());
    assert!(steps_mountable_ahead(&spec.mounts[1..]).is_empty());
}

#[test]
fn without_scopes_the_account_files_are_mountable_ahead_too() {
    let mut spec = build_spec(
        &plan(FsPlan::default(), CwdPlan::FreshTemp),
        &system(),
        &host,
    )
    .unwrap();
    add_runtime_files(&mut spec, &nobody());
    let ahead = steps_mountable_ahead(&spec.mounts);
    // Every step after the shared ones: the system paths, then the files.
    assert_eq!(ahead, after_base(&spec.mounts).unwrap());
    let targets: Vec<&Path> = ahead.iter().map(|m| m.target.as_path()).collect();
    assert_eq!(
        targets,
        [
            "/usr",
            "/lib",
            "/bin",
            "/etc/ld.so.cache",
            "/etc/passwd",
            "/etc/group",
            "/etc/hosts",
            "/etc/nsswitch.conf"
        ]
        .map(Path::new)
    );
}

#[test]
fn account_files_under_a_bound_system_path_are_not_mounted_ahead() {
    // `system_paths` names /etc: the files are bound over the host's /etc,
    // where a host mount or rename could take their place while a spare
    // waits, so they wait for the order.
    let host_with_etc = |p: &Path| match p.to_str().unwrap_or("") {
        "/etc" => HostKind::Dir,
        _ => host(p),
    };
    let mut system = system();
    system.push("/etc".into());
    let mut spec = build_spec(
        &plan(FsPlan::default(), CwdPlan::FreshTemp),
        &system,
        &host_with_etc,
    )
    .unwrap();
    add_runtime_files(&mut spec, &nobody());
    let targets: Vec<&Path> = steps_mountable_ahead(&spec.mounts)
        .iter()
        .map(|m| m.target.as_path())
        .collect();
    assert!(targets.contains(&Path::new("/etc")), "{targets:?}");
    assert!(
        !targets.iter().any(|t| t.starts_with("/etc/passwd")),
        "{targets:?}"
    );
}

fn nobody() -> RuntimeIdentity {
    RuntimeIdentity {
        uid: 65534,
        gid: 65534,
        user: "nobody".into(),
        group: "nogroup".into(),
    }
}

#[test]
fn a_granted_socket_is_bound_in_unless_a_scope_shows_it_and_gets_the_only_connect_right() {
    let fs = FsPlan {
        read: vec!["/home/u/code".into()],
        unix_sockets: vec![
            "/home/u/code/agent.sock".into(),
            "/home/u/.gitconfig".into(),
            "/run/gone.sock".into(),
        ],
        ..FsPlan::default()
    };
    let spec = build_spec(&plan(fs, CwdPlan::FreshTemp), &system(), &host).unwrap();
    // The one inside a scope is not bound again; the other is, read-only;
    // a missing one is left out and noted.
    assert!(!spec
        .scopes
        .contains(&PathBuf::from("/home/u/code/agent.sock")));
    let bound = spec
        .mounts
        .iter()
        .find(|m| m.target == Path::new("/home/u/.gitconfig"))
        .map(|m| m.kind.clone());
    assert!(
        matches!(
            bound,
            Some(MountKind::Bind {
                writable: false,
                exec: false,
                dir: false,
                ..
            })
        ),
        "{bound:?}"
    );
    assert!(spec
        .missing_read_scopes
        .contains(&PathBuf::from("/run/gone.sock")));
    let connect: Vec<(&Path, Option<usize>)> = spec
        .landlock
        .iter()
        .filter(|r| r.access == Access::UnixSocket)
        .map(|r| (r.path.as_path(), r.scope))
        .collect();
    let index = spec
        .scopes
        .iter()
        .position(|s| s == Path::new("/home/u/.gitconfig"));
    assert_eq!(
        connect,
        [
            (Path::new("/home/u/code/agent.sock"), None),
            (Path::new("/home/u/.gitconfig"), index)
        ]
    );
}

#[test]
fn the_account_files_name_root_nobody_and_the_programs_own_identity() {
    let who = |uid, gid| RuntimeIdentity {
        uid,
        gid,
        user: "alice".into(),
        group: "staff".into(),
    };
    let [(passwd_path, passwd), (group_path, group), (hosts_path, hosts), (ns_path, ns)] =
        runtime_files(&who(1000, 50));
    assert_eq!(
        (passwd_path, group_path, hosts_path, ns_path),
        (
            "/etc/passwd",
            "/etc/group",
            "/etc/hosts",
            "/etc/nsswitch.conf"
        )
    );
    assert_eq!(
        passwd,
        "root:x:0:0:root:/root:/usr/sbin/nologin\nalice:x:1000:50::/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    );
    assert_eq!(group, "root:x:0:\nstaff:x:50:\nnogroup:x:65534:\n");
    assert!(hosts.starts_with("127.0.0.1 localhost\n"));
    assert!(ns.contains("passwd: files\n") && ns.contains("hosts: files dns\n"));
    // nobody is listed once, with the sandbox's home.
    let [(_, passwd), (_, group), ..] = runtime_files(&who(65534, 65534));
    assert_eq!(
        passwd,
        "root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/tmp:/usr/sbin/nologin\n"
    );
    assert_eq!(group, "root:x:0:\nnogroup:x:65534:\n");
}

#[test]
fn only_plain_host_names_reach_the_account_files() {
    assert_eq!(account_name(Some("alice"), "user"), "alice");
    assert_eq!(account_name(Some("svc.ci-1_x"), "user"), "svc.ci-1_x");
    for odd in ["", "-rf", "a:b", "a\nroot:x:0:0", "é", &"x".repeat(33)] {
        assert_eq!(account_name(Some(odd), "user"), "user", "{odd:?}");
    }
    assert_eq!(account_name(None, "group"), "group");
}

#[test]
fn a_learning_plan_names_the_stub_as_its_resolver_as_a_granted_one_does() {
    let resolver = |spec: &SandboxSpec| {
        spec.mounts
            .iter()
            .filter(|m| m.target == Path::new(RESOLV_CONF))
            .map(|m| m.kind.clone())
            .collect::<Vec<_>>()
    };
    let stub = vec![MountKind::File {
        contents: RESOLVER_CONFIG.to_string(),
    }];
    let mut granted = plan(FsPlan::default(), CwdPlan::FreshTemp);
    granted.network = vec!["api.example.com:443".parse().unwrap()];
    let mut learning = plan(FsPlan::default(), CwdPlan::FreshTemp);
    learning.network_learning = Some(crate::egress::learning::Learning::Record);
    for with_stub in [granted, learning] {
        assert!(with_stub.uses_relay());
        assert_eq!(resolver(&build_spec(&with_stub, &[], &host).unwrap()), stub);
    }
    let none = plan(FsPlan::default(), CwdPlan::FreshTemp);
    assert!(!none.uses_relay());
    assert!(resolver(&build_spec(&none, &[], &host).unwrap()).is_empty());
}

#[test]
fn only_a_path_root_alone_may_change_is_bound_over_for_a_script() {
    use std::os::unix::fs::PermissionsExt;
    assert!(only_root_may_change(std::path::Path::new("/usr/bin")));
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("tool");
    std::fs::write(&f, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = nix::unistd::geteuid().is_root();
    assert_eq!(only_root_may_change(&f), root);
    // Writable by its group: another user could change it.
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o775)).unwrap();
    assert!(!only_root_may_change(&f));
    // A world-writable directory on the way without the sticky bit.
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(!only_root_may_change(&f));
    assert!(!only_root_may_change(&d.path().join("missing")));
}

mod exec_declared {
    use super::*;
    use crate::plan::{ExecPlan, ExecutableFile, FileId, GrantedAs};

    fn file(path: &str, granted_as: GrantedAs, ino: u64) -> ExecutableFile {
        ExecutableFile {
            path: path.into(),
            granted_as,
            sha256: Sha256Digest([0; 32]),
            file: FileId { dev: 8, ino },
        }
    }

    fn declared_plan(files: Vec<ExecutableFile>) -> SpawnPlan {
        let mut p = plan(
            FsPlan {
                exec: vec!["/home/u/code/sub".into()],
                write: vec!["/home/u/code/out".into()],
                ..FsPlan::default()
            },
            CwdPlan::FreshTemp,
        );
        p.limits.tmp_exec = true;
        p.exec = ExecPlan::Declared { files };
        p
    }

    #[test]
    fn no_directory_grants_execution_and_each_declared_file_does() {
        let spec = build_spec(
            &declared_plan(vec![
                file("/usr/bin/true", GrantedAs::Program, 1),
                file("/usr/bin/node", GrantedAs::AlsoRuns, 2),
                file("/usr/lib/ld.so", GrantedAs::Loader, 3),
            ]),
            &system(),
            &host,
        )
        .unwrap();
        let executing: Vec<&Path> = spec
            .landlock
            .iter()
            .filter(|r| matches!(r.access, Access::ReadExec | Access::ReadWriteExec))
            .map(|r| r.path.as_path())
            .collect();
        assert_eq!(executing, Vec::<&Path>::new());
        // The program gets its rule from its descriptor, not here.
        assert_eq!(
            spec.executables,
            Some(vec![
                ExecutableRule {
                    path: "/usr/bin/node".into(),
                    file: FileId { dev: 8, ino: 2 }
                },
                ExecutableRule {
                    path: "/usr/lib/ld.so".into(),
                    file: FileId { dev: 8, ino: 3 }
                },
            ])
        );
        // The mounts are those of the default: shared libraries still map.
        let default = build_spec(
            &plan(declared_plan(vec![]).fs, CwdPlan::FreshTemp),
            &system(),
            &host,
        );
        let mut default = default.unwrap();
        default.tmp_exec = true;
        assert_eq!(
            spec.mounts
                .iter()
                .filter(|m| m.target != Path::new("/tmp"))
                .collect::<Vec<_>>(),
            default
                .mounts
                .iter()
                .filter(|m| m.target != Path::new("/tmp"))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_declared_file_in_a_writable_scope_is_refused() {
        let e = build_spec(
            &declared_plan(vec![file("/home/u/code/out/tool", GrantedAs::AlsoRuns, 4)]),
            &system(),
            &host,
        )
        .unwrap_err();
        assert_eq!(
            e,
            SpecError::ExecutableInWritable(
                "/home/u/code/out/tool".into(),
                "/home/u/code/out".into()
            )
        );
    }

    #[test]
    fn the_default_leaves_execution_to_the_rules() {
        let spec = build_spec(
            &plan(FsPlan::default(), CwdPlan::FreshTemp),
            &system(),
            &host,
        )
        .unwrap();
        assert_eq!(spec.executables, None);
        assert!(spec
            .landlock
            .iter()
            .any(|r| r.path == Path::new("/usr") && r.access == Access::ReadExec));
    }
}
