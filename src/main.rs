//! The `spawnd` binary: everything lives in the library; `main` maps the
//! outcome to the process exit code.

fn main() {
    std::process::exit(spawnd::cli::main());
}
