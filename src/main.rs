//! The `spawnd` binary: everything lives in the library; `main` maps the
//! outcome to the process exit code.

/// In the static musl build with `musl-dlmalloc`, in place of musl's allocator
/// (see the module).
#[cfg(all(target_env = "musl", feature = "musl-dlmalloc"))]
#[global_allocator]
static ALLOCATOR: spawnd::internals::sys::Heap = spawnd::internals::sys::Heap;

fn main() {
    std::process::exit(spawnd::internals::main());
}
