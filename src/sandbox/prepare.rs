//! What the parent prepares for a launch, outside the hot path of `clone`:
//! scopes resolved once (symlinked paths refused), missing write scopes
//! created without following links, argv and the exact env as C strings,
//! the program's rlimits, and the uid/gid maps written for the child.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;

use super::beneath::{open_beneath, open_beneath_made, Create};
use super::child::ScopeId;
use super::launch::LimitsVia;
use super::spec::SandboxSpec;
use super::{SetupError, Step};
use crate::plan::{EnvSource, SpawnPlan};

pub(super) fn prep(
    what: impl Into<std::borrow::Cow<'static, str>>,
) -> impl FnOnce(std::io::Error) -> SetupError {
    let what = what.into();
    move |e| SetupError::new(Step::Prepare, what, e)
}

pub(super) fn nix_prep(
    what: impl Into<std::borrow::Cow<'static, str>>,
) -> impl FnOnce(nix::Error) -> SetupError {
    let what = what.into();
    move |e| SetupError::new(Step::Prepare, what, e.into())
}

/// The refusal of a scope whose path passes through a symlink (to `to`).
fn through_a_symlink(path: &Path, to: &Path) -> SetupError {
    SetupError::new(
        Step::Prepare,
        format!(
            "scope {} resolves through a symlink to {}; declare the real path in the manifest",
            path.display(),
            to.display()
        ),
        std::io::Error::from_raw_os_error(libc::ELOOP),
    )
}

/// The first component of `path` that is a symlink, if any (read with
/// `lstat`, for the message only: the refusal stands either way).
fn symlink_on_the_way(path: &Path) -> Option<std::path::PathBuf> {
    path.ancestors()
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()))
        .map(Path::to_path_buf)
}

/// Resolves a scope once, here: what it is now (device and inode). A scope
/// whose path passes through a symlink is refused: the link could be changed
/// by whoever can write where it lives, so the manifest must name the real path.
/// With `check`, the identity in force must also have that access to it
/// (see [`super::as_caller`]).
pub(super) fn identify_scope(
    path: &Path,
    check: Option<(nix::unistd::AccessFlags, u32)>,
) -> Result<ScopeId, SetupError> {
    let fd = open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).map_err(|e| {
        // A host with `fs.protected_symlinks = 1` (every systemd distribution)
        // refuses to follow a link planted in a sticky directory with EACCES
        // before the check below sees it: name the link, not the errno.
        if let Some(link) = symlink_on_the_way(path) {
            return through_a_symlink(path, &link);
        }
        let mut step = format!("open({}, O_PATH)", path.display());
        if let Some((_, uid)) = check {
            step.push_str(&format!(
                " as the caller (uid {uid}), who must be able to reach it"
            ));
        }
        SetupError::new(Step::Prepare, step, e.into())
    })?;
    if let Some((need, uid)) = check {
        super::as_caller::check_scope(
            std::os::fd::AsFd::as_fd(&fd),
            path,
            need,
            super::as_caller::Checked::Caller(uid),
        )?;
    }
    let st = nix::sys::stat::fstat(&fd).map_err(nix_prep(format!("fstat({})", path.display())))?;
    let canonical = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&fd)
    ))
    .map_err(prep(format!("resolve {}", path.display())))?;
    if canonical != path {
        return Err(through_a_symlink(path, &canonical));
    }
    Ok(ScopeId {
        canonical,
        dev: st.st_dev,
        ino: st.st_ino,
        pinned: fd,
        idmapped: None,
    })
}

/// Who a missing `fs_write` scope spawnd creates belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CreatedOwner {
    /// The identity in force (the caller's, when created as the caller).
    Creator,
    /// This uid and gid.
    Set(u32, u32),
    /// The owner of the directory it is made in (root launching for
    /// itself: as the program would have left it, writing that directory
    /// idmapped, docs/sandbox.md "Scopes of a root caller").
    OfParent,
}

/// A missing `fs_write` scope is created, mode 0700, owned as `owner`
/// says — walking from `/` without following any symlink. Returns each
/// scope this call made, with a descriptor for it, so a later owner
/// change applies to exactly these directories (one that appeared since
/// the plan is left as it is, and checked as any scope).
pub(super) fn create_write_scopes(
    spec: &SandboxSpec,
    owner: CreatedOwner,
) -> Result<Vec<(std::path::PathBuf, OwnedFd)>, SetupError> {
    let mut created = Vec::new();
    if spec.create_write_scopes.is_empty() {
        return Ok(created);
    }
    let root = open(
        "/",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(nix_prep("open(/)"))?;
    for dir in &spec.create_write_scopes {
        let rel = dir.strip_prefix("/").unwrap_or(dir);
        let owner = match owner {
            CreatedOwner::Creator => None,
            CreatedOwner::Set(uid, gid) => Some((uid, gid)),
            CreatedOwner::OfParent => existing_parent_owner(&root, rel)?,
        };
        let (fd, made) = open_beneath_made(&root, rel, Create::Dir(0o700))?;
        // A directory that came meanwhile is someone's own: never given away.
        if !made {
            continue;
        }
        if let Some((uid, gid)) = owner {
            chown_created(&fd, dir, uid, gid)?;
        }
        created.push((dir.clone(), fd));
    }
    Ok(created)
}

/// The owner of the nearest directory above `rel` (beneath `root`) that
/// exists: the one a missing scope is made in.
fn existing_parent_owner(root: &OwnedFd, rel: &Path) -> Result<Option<(u32, u32)>, SetupError> {
    let mut at = rel.parent();
    while let Some(dir) = at {
        match open_beneath(root, dir, Create::Nothing) {
            Ok(fd) => {
                let st = nix::sys::stat::fstat(&fd)
                    .map_err(nix_prep(format!("fstat(/{})", dir.display())))?;
                return Ok(Some((st.st_uid, st.st_gid)));
            }
            Err(_) if !dir.as_os_str().is_empty() => at = dir.parent(),
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// Gives a directory spawnd created to `uid`:`gid`.
pub(super) fn chown_created(
    fd: &OwnedFd,
    dir: &Path,
    uid: u32,
    gid: u32,
) -> Result<(), SetupError> {
    nix::unistd::fchownat(
        fd,
        "",
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
        nix::fcntl::AtFlags::AT_EMPTY_PATH,
    )
    .map_err(nix_prep(format!("chown {}", dir.display())))
}

pub(super) fn is_script(program: &File) -> bool {
    let mut head = [0u8; 2];
    matches!(program.read_at(&mut head, 0), Ok(2)) && &head == b"#!"
}

/// Whether only root may write the file behind `program`, so that it may
/// run from the very descriptor the gate hashed: owned by root and
/// writable by no group or other (an ACL granting another user write
/// shows in the group bits), on a filesystem whose ownership the kernel
/// keeps itself (not FUSE, NFS, SMB…: a server reports those), and open
/// for writing by no one now (a descriptor opened while its owner could
/// write it stays writable after a `chown`; a read lease says so, where
/// spawnd may take one). Anyone else who may write it could rewrite it in
/// place between the gate's hash and the exec.
pub(super) fn only_root_may_write(program: &File) -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let owned = program
        .metadata()
        .is_ok_and(|m| m.uid() == 0 && m.mode() & 0o022 == 0);
    let local = nix::sys::statfs::fstatfs(program).is_ok_and(|fs| !server_reported(&fs));
    // Where no lease may be taken (spawnd unprivileged, the file root's),
    // the owner and mode decide: only root could have opened it for writing.
    let no_writer = !matches!(crate::sys::file_open_for_writing(program.as_fd()), Ok(true));
    owned && local && no_writer
}

/// Whether a filesystem's type is one whose ownership and contents a
/// server reports (FUSE, NFS, SMB, 9P, Ceph, AFS).
pub(super) fn server_reported(fs: &nix::sys::statfs::Statfs) -> bool {
    // The type's width and sign are the C library's (`i64` with glibc, an
    // unsigned word with musl): widened to one type here, once.
    #[allow(clippy::unnecessary_cast)]
    let kind = fs.filesystem_type().0 as i64;
    const FUSE: i64 = 0x6573_5546;
    const NFS: i64 = 0x6969;
    const SMB: i64 = 0x517b;
    const CIFS: i64 = 0xff53_4d42;
    const SMB2: i64 = 0xfe53_4d42;
    const V9FS: i64 = 0x0102_1997;
    const CEPH: i64 = 0x00c3_6400;
    const AFS: i64 = 0x5346_414f;
    [FUSE, NFS, SMB, CIFS, SMB2, V9FS, CEPH, AFS].contains(&kind)
}

/// The largest program copied before it runs ([`sealed_copy`]): the copy
/// is memory.
const SEALED_COPY_LIMIT: u64 = 256 << 20;

/// A copy of the program the gate hashed: a memfd written here, sealed
/// against every change of its bytes and size, and hashed as it is written.
/// The copy must have the digest the gate decided on, else nothing runs:
/// what was hashed is what runs even if the file changed in place
/// meanwhile. A `#!` script always runs from one (it reaches its
/// interpreter as `/dev/fd/3`, and the host file's own descriptor there
/// would let the program `fchmod` or `futimens` its script on the host,
/// docs/sandbox.md), and so does any program someone other than root may
/// rewrite ([`only_root_may_write`]).
pub(super) fn sealed_copy(script: &File, decided: &[u8; 32]) -> Result<File, SetupError> {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    use nix::sys::memfd::{memfd_create, MFdFlags};
    use sha2::Digest;
    let flags = MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING;
    // MFD_EXEC: executable even where `vm.memfd_noexec` makes memfds
    // non-executable by default; kernels before 6.3 do not know the flag.
    let memfd = memfd_create(
        c"spawnd-program",
        flags | MFdFlags::from_bits_retain(libc::MFD_EXEC as libc::c_uint),
    )
    .or_else(|e| match e {
        nix::Error::EINVAL => memfd_create(c"spawnd-program", flags),
        e => Err(e),
    })
    .map_err(nix_prep("memfd_create(the program's copy)"))?;
    let copy = File::from(memfd);
    let len = script.metadata().map_err(prep("fstat(the program)"))?.len();
    if len > SEALED_COPY_LIMIT {
        return Err(SetupError::new(Step::Prepare,
            format!("the program is {len} bytes, and one others than root may write is copied before it runs, up to {SEALED_COPY_LIMIT} bytes; make it root's (owned by root, writable by no one else)"),
            std::io::Error::from_raw_os_error(libc::EFBIG),
        ));
    }
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut offset = 0u64;
    // At most the length it had when the copy began, plus one byte to see
    // whether it grew: a grown file cannot have the gate's digest anyway.
    loop {
        let room = usize::try_from((len + 1).saturating_sub(offset)).unwrap_or(buf.len());
        let want = buf.len().min(room);
        if want == 0 {
            break;
        }
        let n = match script.read_at(&mut buf[..want], offset) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(SetupError::new(
                    Step::Prepare,
                    "read the program to copy it",
                    e,
                ))
            }
        };
        let chunk = &buf[..n];
        hasher.update(chunk);
        copy.write_all_at(chunk, offset)
            .map_err(prep("write the program's copy"))?;
        offset += n as u64;
    }
    if hasher.finalize().as_slice() != decided {
        return Err(SetupError::new(
            Step::Prepare,
            "the program changed after the gate hashed it; nothing of it ran",
            std::io::Error::from_raw_os_error(libc::ESTALE),
        ));
    }
    let seals = SealFlag::F_SEAL_SEAL
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_WRITE;
    fcntl(&copy, FcntlArg::F_ADD_SEALS(seals)).map_err(nix_prep("seal the program's copy"))?;
    Ok(copy)
}

/// C strings that may hold credential values (the program's environment):
/// their bytes are zeroed when dropped, so a spawner that outlives the
/// launch keeps no copy in freed memory for later forks to inherit.
pub(super) struct WipedCStrings(Vec<CString>);

impl WipedCStrings {
    pub(super) fn new(items: Vec<CString>) -> WipedCStrings {
        WipedCStrings(items)
    }
}

impl std::ops::Deref for WipedCStrings {
    type Target = [CString];
    fn deref(&self) -> &[CString] {
        &self.0
    }
}

impl Drop for WipedCStrings {
    fn drop(&mut self) {
        for item in self.0.drain(..) {
            // The same allocation, handed back without a copy.
            zeroize::Zeroize::zeroize(&mut item.into_bytes_with_nul());
        }
    }
}

pub(super) fn to_cstrings<'b>(
    items: impl Iterator<Item = &'b [u8]>,
) -> Result<Vec<CString>, SetupError> {
    items
        .map(|b| {
            CString::new(b).map_err(|_| {
                SetupError::new(
                    Step::Prepare,
                    "argv/env",
                    std::io::Error::from_raw_os_error(libc::EINVAL),
                )
            })
        })
        .collect()
}

/// `KEY=VALUE` for exactly the plan's keys: request and fixed values, then credentials.
pub(super) fn env_entries(
    plan: &SpawnPlan,
    credentials: &[(String, crate::vault::Secret)],
) -> Result<Vec<Vec<u8>>, SetupError> {
    let mut out = Vec::new();
    for entry in &plan.env {
        let value: &[u8] = match entry.source {
            EnvSource::Request | EnvSource::Fixed | EnvSource::Default => plan
                .env_values
                .get(&entry.key)
                .map(String::as_bytes)
                .unwrap_or_default(),
            EnvSource::Credential => match credentials.iter().find(|(k, _)| *k == entry.key) {
                Some((_, secret)) => secret.expose(),
                None => {
                    return Err(SetupError::new(
                        Step::Prepare,
                        format!("credential {}", entry.key),
                        std::io::Error::from_raw_os_error(libc::ENOKEY),
                    ))
                }
            },
        };
        let mut kv = entry.key.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(value);
        out.push(kv);
    }
    Ok(out)
}

pub(super) fn rlimits(
    l: &crate::manifest::Limits,
    via: &LimitsVia,
) -> Vec<(nix::sys::resource::Resource, u64)> {
    use nix::sys::resource::Resource;
    let mut v = vec![
        (Resource::RLIMIT_CORE, 0),
        (Resource::RLIMIT_FSIZE, l.max_file_size_bytes),
        (Resource::RLIMIT_NOFILE, l.max_open_files),
    ];
    if matches!(via, LimitsVia::Rlimits) {
        v.push((Resource::RLIMIT_DATA, l.max_memory_bytes));
        v.push((Resource::RLIMIT_AS, address_space_bound(l.max_memory_bytes)));
        v.push((Resource::RLIMIT_NPROC, l.max_processes));
    }
    v
}

/// The address space a process may map without a memory cgroup: its
/// memory limit and 4 GiB more. `RLIMIT_DATA` bounds the memory a program
/// writes (its heap and private mappings) at the limit itself; runtimes
/// such as V8 and the JVM reserve gigabytes of address space they never
/// touch, which a bound at the limit itself refuses at start-up. This one
/// bounds what `RLIMIT_DATA` does not count, shared mappings, per process.
pub(super) fn address_space_bound(max_memory_bytes: u64) -> u64 {
    max_memory_bytes.saturating_add(4 << 30)
}

/// Writes `/proc/PID/{uid_map,setgroups,gid_map}`. Root maps 0 too, so init
/// can build the root before it becomes `uid`; an ordinary user maps only itself.
pub(super) fn write_id_maps(
    pid: i32,
    uid: u32,
    gid: u32,
    privileged: bool,
) -> Result<(), SetupError> {
    let proc_dir = Path::new("/proc").join(pid.to_string());
    let map = |id: u32| {
        if privileged && id != 0 {
            format!("0 0 1\n{id} {id} 1\n")
        } else {
            format!("{id} {id} 1\n")
        }
    };
    let write = |file: &str, text: &str| {
        std::fs::write(proc_dir.join(file), text)
            .map_err(|e| SetupError::new(Step::MapIds, format!("write /proc/{pid}/{file}"), e))
    };
    write("uid_map", &map(uid))?;
    if !privileged {
        write("setgroups", "deny")?;
    }
    write("gid_map", &map(gid))
}
