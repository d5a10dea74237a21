//! The allocator of the static musl build with the feature `musl-dlmalloc`
//! (on by default; `src/main.rs` installs it). It takes 15–17% off a whole
//! `spawnd run` against musl's own allocator (`scripts/bench-musl-features`;
//! docs/benchmarks.md, "The musl runtime features").
//!
//! musl's own allocator unmaps mid-sized blocks as soon as they are free and
//! maps them again on the next request: about 100 mmap/munmap pairs in one
//! `spawnd run`. Here small blocks come from dlmalloc (one heap behind
//! one lock, as spawnd's threads are few), and blocks of [`MAP_THRESHOLD`] and
//! up get pages of their own, unmapped when freed (grown with `mremap`), so
//! a long-running daemon's resident memory follows what it holds, as with
//! glibc's `M_MMAP_THRESHOLD`.
//!
//! Fork: the lock is a futex in this process's memory, so a child forked
//! while another thread held it would wait forever on its first allocation.
//! spawnd clones only while single-threaded (sandboxes, spawners, spare sandboxes);
//! the daemon's threads start credential helpers through `posix_spawn`, and
//! restart a spawner through `Command` with a `pre_exec` step
//! (`pass_fd_as_3`) that allocates nothing — no code between a fork and an
//! exec in a multi-threaded spawnd may allocate.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::{Mutex, MutexGuard, PoisonError};

use dlmalloc::Dlmalloc;

/// Blocks this large or larger are mapped on their own.
pub(crate) const MAP_THRESHOLD: usize = 128 << 10;

const PAGE: usize = 4096;

/// See the module documentation.
pub struct Heap;

/// The small blocks' heap, shared by every [`Heap`].
static SMALL: Mutex<Dlmalloc> = Mutex::new(Dlmalloc::new());

/// dlmalloc under the lock. dlmalloc asserts its invariants (a corrupted
/// heap panics); unwinding out of the allocator is undefined behaviour, and
/// the panic's own allocation would wait on this lock forever, so a panic
/// while it is held aborts the process.
struct Locked(MutexGuard<'static, Dlmalloc>);

impl Drop for Locked {
    fn drop(&mut self) {
        if std::thread::panicking() {
            std::process::abort();
        }
    }
}

fn small() -> Locked {
    // Poisoned only by a panic under the lock, which aborts (above).
    Locked(SMALL.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Whether `layout` gets pages of its own.
fn mapped(layout: &Layout) -> bool {
    layout.size() >= MAP_THRESHOLD && layout.align() <= PAGE
}

fn pages(size: usize) -> usize {
    size.div_ceil(PAGE) * PAGE
}

// SAFETY: every block comes from exactly one of the two sources, chosen by
// `mapped(layout)`; GlobalAlloc's contract passes the same layout (size and
// align) to `dealloc` and `realloc`, so each block goes back where it came
// from. dlmalloc is used only under the lock.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if mapped(&layout) {
            return map(layout.size());
        }
        // SAFETY: dlmalloc accepts any size and power-of-two alignment.
        unsafe { small().0.malloc(layout.size(), layout.align()) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if mapped(&layout) {
            // Fresh anonymous pages are zero.
            return map(layout.size());
        }
        // SAFETY: as in `alloc`.
        unsafe { small().0.calloc(layout.size(), layout.align()) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if mapped(&layout) {
            // SAFETY: `ptr` is the start of a mapping of `pages(size)` bytes
            // made by `map` (the layout is the one it was allocated with).
            unsafe { libc::munmap(ptr.cast(), pages(layout.size())) };
            return;
        }
        // SAFETY: `ptr` came from this dlmalloc with this size and align.
        unsafe { small().0.free(ptr, layout.size(), layout.align()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: GlobalAlloc's contract: `new_size`, rounded up to the
        // alignment, does not overflow, and the alignment is a power of two.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (mapped(&layout), mapped(&new_layout)) {
            // SAFETY: `ptr` was made by `map` for `layout.size()` bytes.
            (true, true) => unsafe { remap(ptr, layout.size(), new_size) },
            // SAFETY: `ptr` came from this dlmalloc with this layout.
            (false, false) => unsafe {
                small()
                    .0
                    .realloc(ptr, layout.size(), layout.align(), new_size)
            },
            // Across the threshold: copy into the other source.
            _ => {
                // SAFETY: a valid layout of non-zero size (above).
                let new = unsafe { self.alloc(new_layout) };
                if !new.is_null() {
                    // SAFETY: both blocks hold at least the bytes copied and
                    // do not overlap; `ptr` is freed with its own layout.
                    unsafe {
                        std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                new
            }
        }
    }
}

/// Moves or resizes a block made by [`map`] to `new_size` bytes, or null
/// (the block then stays as it was).
///
/// # Safety
/// `ptr` must be a live block that [`map`] made for `size` bytes.
unsafe fn remap(ptr: *mut u8, size: usize, new_size: usize) -> *mut u8 {
    // SAFETY: `ptr` starts a private mapping of `pages(size)` bytes that only
    // this block uses (the caller's promise); MREMAP_MAYMOVE lets the kernel
    // pick a new place.
    let moved = unsafe {
        libc::mremap(
            ptr.cast(),
            pages(size),
            pages(new_size),
            libc::MREMAP_MAYMOVE,
        )
    };
    if moved == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        moved.cast()
    }
}

/// Private anonymous pages for `size` bytes (zeroed by the kernel), or null.
fn map(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping touches no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            pages(size),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_mapped_blocks_hold_their_bytes_across_reallocation() {
        let heap = Heap;
        for (from, to) in [
            (16, 64),
            (1000, MAP_THRESHOLD + 1),
            (MAP_THRESHOLD, 3 * MAP_THRESHOLD),
            (3 * MAP_THRESHOLD, 100),
            (MAP_THRESHOLD + 5, MAP_THRESHOLD + 9),
        ] {
            let layout = Layout::from_size_align(from, 8).unwrap();
            // SAFETY: a valid layout; every block is freed with its layout.
            unsafe {
                let p = heap.alloc_zeroed(layout);
                assert!(!p.is_null());
                assert!((0..from).all(|i| *p.add(i) == 0));
                for i in 0..from {
                    *p.add(i) = (i % 251) as u8;
                }
                let q = heap.realloc(p, layout, to);
                assert!(!q.is_null());
                assert!((0..from.min(to)).all(|i| *q.add(i) == (i % 251) as u8));
                heap.dealloc(q, Layout::from_size_align(to, 8).unwrap());
            }
        }
    }

    #[test]
    fn a_freed_large_block_goes_back_to_the_kernel() {
        // In a forked child, the only thread there: no other thread of the
        // test harness can map something into the freed range before it is
        // checked. The mapped path makes system calls only (no lock).
        // SAFETY: fork; the child makes system calls and writes to its own
        // mapping only, then leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io_error());
        if pid == 0 {
            let heap = Heap;
            let layout = Layout::from_size_align(4 << 20, 16).unwrap();
            // SAFETY: a valid layout, freed with it; mincore only reads the
            // page table for the range.
            let unmapped = unsafe {
                let p = heap.alloc(layout);
                if p.is_null() {
                    libc::_exit(2);
                }
                p.write_bytes(1, layout.size());
                heap.dealloc(p, layout);
                let mut vec = [0u8; 1];
                libc::mincore(p.cast(), PAGE, vec.as_mut_ptr()) == -1
            };
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(if unmapped { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the freed block's pages are still mapped (status {status:#x})"
        );
    }

    fn io_error() -> std::io::Error {
        std::io::Error::last_os_error()
    }
}
