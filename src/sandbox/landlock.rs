//! Landlock over the same paths as the mounts, at the best ABI the kernel
//! offers: filesystem access per scope (execute only where granted, no device
//! creation), abstract unix sockets and signals scoped to the sandbox
//! (ABI ≥ 6). Every feature of the detected ABI is a hard requirement: the
//! kernel enforces all of it or the spawn fails — there is no silent best
//! effort.
//!
//! TCP is left to the network namespace: Landlock's TCP rights are per
//! port, for every address alike, so denying them would also deny the
//! program its own loopback (a test suite's local server or database). The
//! namespace holds only `lo`: without grants every other destination has
//! no route; with them every address is the sandbox's own, and what no
//! listener of spawnd's serves is refused and logged by nf_tables rules
//! ([`super::network`]), whatever the port.

use std::os::fd::{AsFd, BorrowedFd};

use landlock::{
    Access as _, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use serde::Serialize;

use super::spec::{Access, ExecutableRule, LandlockRule};
use super::{SetupError, Step};

/// What was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct LandlockApplied {
    /// The ABI whose features were all enforced.
    pub abi: u32,
    /// Abstract unix sockets and signals scoped (ABI ≥ 6).
    pub scoped: bool,
}

fn rights(access: Access, abi: ABI, is_dir: bool) -> BitFlags<AccessFs> {
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    // Connecting to a socket (ResolveUnix, ABI 9) is no scope's right: only
    // the sockets a manifest lists get it ([`Access::UnixSocket`]).
    let write = AccessFs::from_write(abi)
        & !(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev | AccessFs::ResolveUnix);
    let all = AccessFs::from_all(abi);
    let set = match access {
        Access::Read => read,
        Access::ReadExec => read | AccessFs::Execute,
        Access::ReadWrite => read | write,
        Access::ReadWriteExec => read | write | AccessFs::Execute,
        Access::Device => AccessFs::ReadFile | AccessFs::WriteFile,
        Access::UnixSocket => AccessFs::ResolveUnix.into(),
    };
    let set = set & all;
    if is_dir {
        set
    } else {
        set & AccessFs::from_file(abi)
    }
}

/// Restricts the calling process (and everything it will execute) to
/// `rules` (scopes by their verified descriptors, other paths opened now)
/// and the program's descriptor (for a `#!` script run by its path, its
/// copy bound there). A `#!` script run from its descriptor, a sealed memfd
/// copy, gets no rule: Landlock refuses rules on files of the kernel's
/// internal mounts, and does not govern access to them.
///
/// With `executables` (`exec = "declared"`), no rule of `rules` grants
/// execution, whatever its access says, and each of those files gets a
/// rule to read and execute it alone ([`add_executable_rules`]).
pub(crate) fn restrict_current_process(
    rules: &[LandlockRule],
    scope_fds: &[std::os::fd::OwnedFd],
    program: Option<BorrowedFd<'_>>,
    executables: Option<&[ExecutableRule]>,
    kernel_abi: u32,
) -> Result<LandlockApplied, SetupError> {
    let abi = ABI::from(kernel_abi as i32);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(fail("handle fs access"))?;
    let scoped = kernel_abi >= 6;
    if scoped {
        ruleset = ruleset
            .scope(Scope::from_all(abi))
            .map_err(fail("scope signals and abstract sockets"))?;
    }
    let mut created = ruleset.create().map_err(fail("create ruleset"))?;
    let is_dir = |fd: BorrowedFd<'_>| {
        nix::sys::stat::fstat(fd)
            .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
            .unwrap_or(false)
    };
    for rule in rules {
        // A right this ABI does not know (a socket's, below ABI 9) is no rule.
        if rights(rule.access, abi, true).is_empty() {
            continue;
        }
        let rights_for = |is_dir: bool| {
            let granted = rights(rule.access, abi, is_dir);
            match executables {
                Some(_) => granted & !AccessFs::Execute,
                None => granted,
            }
        };
        created = match rule.scope.and_then(|i| scope_fds.get(i)) {
            Some(fd) => created
                .add_rule(PathBeneath::new(fd, rights_for(is_dir(fd.as_fd()))))
                .map_err(fail(&format!("rule for scope {}", rule.path.display())))?,
            None => {
                let fd = match PathFd::new(&rule.path) {
                    Ok(fd) => fd,
                    Err(_) if !rule.path.exists() => continue,
                    Err(e) => {
                        return Err(SetupError::new(
                            Step::Landlock,
                            format!("landlock open {}", rule.path.display()),
                            std::io::Error::other(e.to_string()),
                        ))
                    }
                };
                let dir = is_dir(fd.as_fd());
                created
                    .add_rule(PathBeneath::new(fd, rights_for(dir)))
                    .map_err(fail(&format!("rule for {}", rule.path.display())))?
            }
        };
    }
    if let Some(files) = executables {
        created = add_executable_rules(created, files, abi)?;
    }
    if let Some(program) = program {
        let program_rights = (AccessFs::ReadFile | AccessFs::Execute) & AccessFs::from_file(abi);
        created = created
            .add_rule(PathBeneath::new(program, program_rights))
            .map_err(fail("rule for the program"))?;
    }
    let status = created.restrict_self().map_err(fail("restrict_self"))?;
    if status.ruleset != RulesetStatus::FullyEnforced || !status.no_new_privs {
        return Err(SetupError::new(
            Step::Landlock,
            "landlock restrict_self",
            std::io::Error::other(format!("not fully enforced: {:?}", status.ruleset)),
        ));
    }
    Ok(LandlockApplied {
        abi: kernel_abi,
        scoped,
    })
}

/// One rule per file `exec = "declared"` grants: read and execute, on the
/// file found at its path, which must be the very file the gate opened
/// (same device and inode: a bind shows its source's), else nothing runs.
/// A file the sandbox does not show gets no rule: it cannot be executed
/// there anyway.
fn add_executable_rules(
    mut created: landlock::RulesetCreated,
    files: &[ExecutableRule],
    abi: ABI,
) -> Result<landlock::RulesetCreated, SetupError> {
    let file_rights = (AccessFs::ReadFile | AccessFs::Execute) & AccessFs::from_file(abi);
    for file in files {
        let fd = match PathFd::new(&file.path) {
            Ok(fd) => fd,
            Err(_) if !file.path.exists() => continue,
            Err(e) => {
                return Err(SetupError::new(
                    Step::Landlock,
                    format!("landlock open {}", file.path.display()),
                    std::io::Error::other(e.to_string()),
                ))
            }
        };
        let st = nix::sys::stat::fstat(fd.as_fd()).map_err(|e| {
            SetupError::new(
                Step::Landlock,
                format!("fstat({}) for landlock", file.path.display()),
                e.into(),
            )
        })?;
        if st.st_dev != file.file.dev || st.st_ino != file.file.ino {
            return Err(SetupError::new(Step::Landlock,
                format!(
                    "landlock: {} is no longer the file the gate hashed (device {}, inode {}; found {}, {})",
                    file.path.display(),
                    file.file.dev,
                    file.file.ino,
                    st.st_dev,
                    st.st_ino
                ),
                std::io::Error::from_raw_os_error(libc::ESTALE),
            ));
        }
        created = created
            .add_rule(PathBeneath::new(fd, file_rights))
            .map_err(fail(&format!(
                "executable rule for {}",
                file.path.display()
            )))?;
    }
    Ok(created)
}

/// A Landlock error as a step error naming `what`.
fn fail(what: &str) -> impl Fn(landlock::RulesetError) -> SetupError {
    let what = what.to_string();
    move |e| {
        SetupError::new(
            Step::Landlock,
            format!("landlock {what}"),
            std::io::Error::other(e.to_string()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_granted_socket_may_be_connected_to_where_landlock_governs_it() {
        for access in [Access::Read, Access::ReadWrite, Access::ReadWriteExec] {
            assert!(!rights(access, ABI::V9, true).contains(AccessFs::ResolveUnix));
        }
        assert_eq!(
            rights(Access::UnixSocket, ABI::V9, false),
            BitFlags::from(AccessFs::ResolveUnix)
        );
        // Below ABI 9 there is nothing to grant, and no rule is made.
        assert!(rights(Access::UnixSocket, ABI::V7, false).is_empty());
        // Writing still creates sockets and everything else it did.
        assert!(rights(Access::ReadWrite, ABI::V9, true).contains(AccessFs::MakeSock));
    }
}
