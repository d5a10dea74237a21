//! Kernel-facing code. All of spawnd's `unsafe_code` lives in `sys.rs`, one
//! wrapper per system call that the safe crates (`nix`, `landlock`) do not
//! cover, each with a `// SAFETY:` comment. The launcher that builds the
//! sandbox itself (namespaces, mounts, Landlock, seccomp) comes with `spawnd run`.

pub mod sys;
