//! The `spawnd` binary: everything lives in the library; `main` maps the
//! outcome to the process exit code.

/// In the static musl build, in place of musl's allocator (see the module).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: spawnd::sys::heap::Heap = spawnd::sys::heap::Heap::new();

fn main() {
    std::process::exit(spawnd::cli::main());
}
