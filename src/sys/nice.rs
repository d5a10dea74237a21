//! A thread's nice value (`getpriority`/`setpriority`), for the spawner's
//! raised priority and the sandboxes' return from it (`sandbox::priority`).

use std::io;

use super::last_error;

/// The calling thread's nice value (`getpriority(PRIO_PROCESS, 0)`).
pub fn nice_value() -> io::Result<i32> {
    // SAFETY: errno is this thread's; getpriority reads no memory of ours.
    // -1 is a valid nice value, so errno, cleared first, tells an error.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
        if nice == -1 && *libc::__errno_location() != 0 {
            return Err(last_error("getpriority"));
        }
        Ok(nice)
    }
}

/// Sets the calling thread's nice value (`setpriority(PRIO_PROCESS, 0, nice)`):
/// raising it (a lower priority) is always allowed; lowering it takes
/// `CAP_SYS_NICE` or a `RLIMIT_NICE` that allows it.
pub fn set_nice_value(nice: i32) -> io::Result<()> {
    // SAFETY: a system call on this thread's own priority; no memory passed.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } < 0 {
        return Err(last_error("setpriority"));
    }
    Ok(())
}
