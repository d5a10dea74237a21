//! Kernel-facing code: turning an allowed `SpawnPlan` into a confined process.
//!
//! * `order` is the front door: it makes a decided spawn into one launch
//!   order (the spec, the Landlock ABI, the compiled seccomp filter, the
//!   program, credentials and stdin), started by `launch` here or by the
//!   daemon's spawner;
//! * `spec` decides, as pure data, the fresh root's mounts and the Landlock rules;
//! * `seccomp` compiles the syscall policy to BPF (pure; installed in the child);
//! * `launch` (parent) opens scopes, has `idmap` mount a root caller's
//!   scopes idmapped where their owner is not the program's uid, makes
//!   pipes, clones into new user, mount, pid, network, ipc and uts
//!   namespaces (or hands the order to a `spare`, a sandbox whose
//!   namespaces were made before the request), maps ids, joins cgroups,
//!   gives the go-ahead;
//! * `child` (inside) builds the root (`mounts`), drops privileges
//!   (`identity`), applies Landlock (`landlock`) and seccomp last, starts the
//!   program (which inherits all of it and executes the hashed fd) and stays
//!   as its init;
//! * `network` sets up a spawn's network grants inside its namespace (local
//!   routes, listeners handed to the parent);
//! * `status_pipe` is what init tells the parent (a failure, the layers in
//!   force, the program's end): encoded inside, decoded by the supervisor.
//!
//! The system calls it needs beyond `nix` and `landlock` are in the crate's
//! [`crate::sys`], the crate's kernel-facing layer.
//!
//! Where forking happens: `launch` must run in a single-threaded process (a
//! child cloned from a multi-threaded one may deadlock on a lock another
//! thread held, and a new user namespace cannot be created there), and it
//! refuses otherwise. `spawnd run` is single-threaded; the daemon forks a
//! single-threaded spawner before its runtime starts and
//! hands it each [`launch::LaunchOrder`] — plan, program descriptor, stdio and
//! credential values — over a socketpair with `SCM_RIGHTS`, never through
//! argv or an intermediate process's environment.

pub(crate) mod as_caller;
mod beneath;
pub(crate) mod cgroup;
mod child;
mod handover;
mod identity;
mod idmap;
pub(crate) mod landlock;
pub(crate) mod launch;
mod mounts;
pub(crate) mod network;
pub(crate) mod order;
mod prepare;
pub(crate) mod priority;
pub(crate) mod seccomp;
mod setup_error;
pub(crate) mod spare;
pub(crate) mod spec;
pub(crate) mod status_pipe;
pub(crate) mod threads;
pub(crate) mod trace;

pub(crate) use setup_error::{Cause, SetupError, Step};
