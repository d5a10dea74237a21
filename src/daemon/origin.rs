//! A peer's origin ([`crate::origin`]) as the daemon reads it once per
//! connection: `/proc/PID`'s executable, cgroup, start time and login uid,
//! kept only if the pidfd held for the peer still shows it alive once they
//! were read (so every read was of the process that connected), and the
//! executable's SHA-256.
//!
//! The hash is taken through the executable itself (`/proc/PID/exe` opened,
//! which reaches the file even in another mount namespace or after it was
//! deleted) and kept per file — device, inode, size, modification and
//! change times — so a program that connects often is hashed once, not per
//! connection. An executable over 256 MiB is not hashed (its path is
//! still recorded), so no peer makes the daemon read more than that for a
//! connection. A daemon that may not look at the peer's process (a service
//! user, another user's peer) records what it could read, without the
//! executable.

use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;

use crate::origin::{Origin, Via};

/// Executables hashed at most: past it the memory starts again empty.
const MAX_HASHED: usize = 256;

/// The largest executable hashed (256 MiB): a peer cannot make the daemon
/// read more than this for a connection; a larger one is recorded by path.
const MAX_EXE_BYTES: u64 = 256 << 20;

/// A file as its hash is kept by: device, inode, size, mtime, ctime (ns).
type FileKey = (u64, u64, u64, i128, i128);

static HASHED: Mutex<Option<HashMap<FileKey, String>>> = Mutex::new(None);

/// The origin of the peer at `pid`, whose process `pidfd` names.
pub(super) fn of_peer(pid: i32, pidfd: BorrowedFd<'_>) -> Origin {
    let Ok(pid) = u32::try_from(pid) else {
        return Origin::via(Via::Daemon);
    };
    let mut origin = Origin::of_process(Via::Daemon, pid);
    origin.exe_sha256 = exe_sha256(pid);
    if super::peer::still_running(pidfd) {
        origin
    } else {
        Origin::via(Via::Daemon)
    }
}

/// The SHA-256 of the executable of `pid`, from memory when that file was
/// hashed before.
fn exe_sha256(pid: u32) -> Option<String> {
    let file = std::fs::File::open(format!("/proc/{pid}/exe")).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.size() > MAX_EXE_BYTES {
        return None;
    }
    let key: FileKey = (
        meta.dev(),
        meta.ino(),
        meta.size(),
        i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
    );
    if let Some(hash) = lock().as_ref().and_then(|m| m.get(&key).cloned()) {
        return Some(hash);
    }
    let hash = crate::program::hash_file(&file).ok()?.to_string();
    let mut slot = lock();
    let map = slot.get_or_insert_with(HashMap::new);
    if map.len() >= MAX_HASHED {
        map.clear();
    }
    map.insert(key, hash.clone());
    Some(hash)
}

fn lock() -> std::sync::MutexGuard<'static, Option<HashMap<FileKey, String>>> {
    match HASHED.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_live_peer_is_read_with_its_executables_hash() {
        let me = std::process::id() as i32;
        let pidfd = crate::sys::pidfd_open(me).unwrap();
        let origin = of_peer(me, pidfd.as_fd());
        assert_eq!(origin.via, Via::Daemon);
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(origin.exe.as_deref(), Some(exe.to_str().unwrap()));
        let expected = crate::program::hash_file(&std::fs::File::open(&exe).unwrap())
            .unwrap()
            .to_string();
        assert_eq!(origin.exe_sha256.as_deref(), Some(expected.as_str()));
        assert!(origin.start_time.is_some() && origin.cgroup.is_some());
        // The second time it comes from memory, and is the same.
        assert_eq!(of_peer(me, pidfd.as_fd()).exe_sha256, origin.exe_sha256);
    }

    #[test]
    fn a_peer_that_exited_is_recorded_without_what_was_read() {
        let child = std::process::Command::new("/bin/true").spawn().unwrap();
        let pid = child.id() as i32;
        let pidfd = crate::sys::pidfd_open(pid).unwrap();
        let mut child = child;
        child.wait().unwrap();
        let origin = of_peer(pid, pidfd.as_fd());
        assert_eq!(origin, Origin::via(Via::Daemon));
    }
}
