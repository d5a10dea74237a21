//! The spawner's scheduling priority, and the sandboxes' return to the
//! daemon's.
//!
//! Under load the spawner is the daemon's one serial stage: every sandbox
//! is cloned by it, one after the other, and with both CPUs busy (clients,
//! daemon threads, sandboxes being built, programs) it spent about two
//! thirds of its time waiting to be scheduled (`/proc/PID/schedstat`, 16
//! clients). So it asks for a nice value [`SPAWNER_BOOST`] below the
//! daemon's, which lets it take the CPU when a request comes: in
//! alternating runs, 16 clients got 3–4% more spawns per second. It needs
//! `CAP_SYS_NICE` (root has it; the shipped systemd unit keeps it); without
//! it the spawner stays at the daemon's priority, which changes nothing
//! but speed.
//!
//! A sandbox must not inherit the boost: a program would otherwise run ahead
//! of everything else on the host. So the first thing every init does — before
//! the request's setup, long before the program exists — is to set its nice
//! value back to the daemon's
//! ([`back_to_base`]); a raise is always allowed, and if it fails all the
//! same, nothing runs. A spare sandbox does the same as its first
//! step, before it prepares its base and waits for an order.

use std::sync::atomic::{AtomicI32, Ordering};

use super::{SetupError, Step};
use crate::sys::{nice_value, set_nice_value};

/// How much higher than the daemon's the spawner's priority is (nice units).
pub(crate) const SPAWNER_BOOST: i32 = 5;

/// Lowest nice value Linux has.
const HIGHEST_PRIORITY: i32 = -20;

/// The daemon's nice value, when this process (a spawner, or a sandbox
/// cloned from it) raised its priority above it; `NOT_RAISED` otherwise.
static BASE: AtomicI32 = AtomicI32::new(NOT_RAISED);
const NOT_RAISED: i32 = i32::MIN;

/// In the spawner, at its start: runs [`SPAWNER_BOOST`] nice units ahead of
/// the daemon when allowed. Returns the nice value it runs at.
pub(crate) fn raise_for_spawner() -> std::io::Result<i32> {
    let base = nice_value()?;
    let raised = (base - SPAWNER_BOOST).max(HIGHEST_PRIORITY);
    if raised == base {
        return Ok(base);
    }
    // Recorded first: a sandbox cloned from here must find it.
    BASE.store(base, Ordering::Relaxed);
    match set_nice_value(raised) {
        Ok(()) => Ok(raised),
        Err(e) => {
            BASE.store(NOT_RAISED, Ordering::Relaxed);
            Err(e)
        }
    }
}

/// In a sandbox's init, first: back to the daemon's nice value if the
/// spawner that cloned it runs above it.
pub(crate) fn back_to_base() -> Result<(), SetupError> {
    match BASE.load(Ordering::Relaxed) {
        NOT_RAISED => Ok(()),
        base => set_nice_value(base).map_err(|e| {
            SetupError::new(Step::Init, format!("setpriority back to nice {base}"), e)
        }),
    }
}
