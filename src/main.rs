//! The `spawnd` binary: everything lives in the library; `main` maps the
//! outcome to the process exit code.

/// In the static musl build, dlmalloc in place of musl's allocator, which
/// maps and unmaps memory for every mid-sized block (about 100 mmap/munmap
/// pairs in one `spawnd run`, 0.4 ms).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() {
    spawnd::sandbox::sys::allocator_survives_fork();
    std::process::exit(spawnd::cli::main());
}
