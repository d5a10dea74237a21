//! spawnd: a Linux sandbox supervisor for the *spawn primitive*.
//!
//! Untrusted callers ask spawnd to run a local CLI. spawnd checks the request
//! against the connector's TOML manifest and, when it is allowed, runs the
//! program confined. Data flows one way:
//!
//! ```text
//! request ─► manifest (parse → validate) ─► policy (the gate: pure) ─► plan (SpawnPlan: pure data)
//!         ─► sandbox ─► supervise ─► audit ─► response
//! ```
//!
//! * [`manifest`], [`template`], [`policy`], [`plan`], [`interpreter`], [`printable`] and
//!   [`secret_paths`] are pure: no kernel,
//!   no file I/O beyond the text they are handed (the gate looks at the program
//!   file only through a [`policy::ProgramInspector`]).
//! * [`egress`] is the pure core of network grants, what spawnd decides a sandboxed
//!   program may reach, on values and bytes alone.
//! * [`relay`] carries a spawn's granted connections and answers its DNS queries, on the
//!   listeners the sandbox makes in the program's network namespace.
//! * [`provenance`] says which bytes a connector is and who vouches for them: content
//!   hashes, publisher signatures, the keyring and the content-addressed store.
//! * [`metrics`] counts what operators watch (spawns, denials, round trips, relay, audit flushes).
//! * [`program`], [`config`], [`kernel_features`], [`host_policy`] and [`cli`] do I/O at the edges.
//! * [`failure`] is what every command ends in, a success or a failure of a kind,
//!   for every layer to use.
//! * [`sys`] is the only module allowed `unsafe_code`: the kernel-facing calls that `nix`
//!   and `landlock` do not offer safely, and the start of the sandboxed program.
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod audit;
mod cli;
mod client;
mod config;
mod connectors;
mod daemon;
mod draft;
mod duration;
mod egress;
mod failure;
#[doc(hidden)]
pub mod fuzzing;
mod host_policy;
#[doc(hidden)]
pub mod internals;
mod interpreter;
mod ipc;
mod kernel_features;
mod manifest;
mod metrics;
mod netlink;
mod origin;
mod pipeline;
mod plan;
mod policy;
mod printable;
mod program;
mod provenance;
mod relay;
mod rpc;
mod sandbox;
mod secret_paths;
mod shares;
mod spawn_result;
mod spawner;
mod supervise;
mod sys;
mod template;
mod vault;
