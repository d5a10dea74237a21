//! How many threads this process has, and the check made before every clone
//! into new namespaces: only a single-threaded process may do it.

use super::prepare::prep;
use super::{SetupError, Step};

/// The child of a multi-threaded process may deadlock on a lock another thread
/// held at `clone` (allocator, stdio), and `unshare(CLONE_NEWUSER)` fails there:
/// refuse rather than risk it. The daemon launches from its single-threaded spawner.
///
/// A thread that was joined just before (the gate's hashing reader) can
/// still be counted for a moment: the kernel wakes the joiner as the thread
/// starts to exit, before it leaves the thread group. So a count above one
/// is read again for up to [`EXITING_WITHIN`] before it is an error.
pub(super) fn ensure_single_threaded() -> Result<(), SetupError> {
    let count = || thread_count().map_err(prep("count threads (/proc/self/task)"));
    let since = std::time::Instant::now();
    let mut threads = count()?;
    while threads != 1 && since.elapsed() < EXITING_WITHIN {
        std::thread::sleep(std::time::Duration::from_micros(200));
        threads = count()?;
    }
    if threads != 1 {
        return Err(SetupError::new(
            Step::Prepare,
            format!("launch from a process with {threads} threads"),
            std::io::Error::from_raw_os_error(libc::EDEADLK),
        ));
    }
    Ok(())
}

/// How long a joined thread is given to leave the thread group.
const EXITING_WITHIN: std::time::Duration = std::time::Duration::from_millis(100);

/// The number of threads of this process: procfs gives `/proc/self/task`
/// two links plus one per thread (`proc_task_getattr`), so one `statx`
/// answers what reading `/proc/self/status` (a dozen system calls and the
/// whole status text generated) did. Any other count is an error.
pub(crate) fn thread_count() -> std::io::Result<u32> {
    use std::os::unix::fs::MetadataExt;
    let links = std::fs::metadata("/proc/self/task")?.nlink();
    links
        .checked_sub(2)
        .filter(|&n| n > 0)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            std::io::Error::other(format!(
                "/proc/self/task has {links} links; expected 2 plus one per thread"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::thread_count;

    fn threads_in_status() -> u32 {
        std::fs::read_to_string("/proc/self/status")
            .expect("status")
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("Threads:")
    }

    /// The link count agrees with `Threads:` in /proc/self/status (read
    /// before and after it, so a test thread starting or ending between the
    /// readings is not taken for a mismatch), with a thread of ours running.
    #[test]
    fn thread_count_agrees_with_proc_status() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let ours = std::thread::spawn(move || {
            let _ = rx.recv();
        });
        let mut agreed = None;
        for _ in 0..1000 {
            let (before, counted, after) = (
                threads_in_status(),
                thread_count().expect("count"),
                threads_in_status(),
            );
            if before == after {
                assert_eq!(counted, before);
                agreed = Some(counted);
                break;
            }
        }
        drop(tx);
        ours.join().expect("join");
        let counted = agreed.expect("threads kept changing");
        assert!(counted >= 2, "{counted}");
    }
}
