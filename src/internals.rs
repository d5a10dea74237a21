//! The inner items the integration tests, benches and the binary reach,
//! and nothing else. Every other module is private to the crate, so rustc
//! sees an item nobody uses (`unreachable_pub` and `dead_code` are on);
//! this list is the one place the crate's insides are opened, each for a
//! named user. It is not an API: nothing here is stable.
//!
//! Each name is taken from the module that defines it, not through a
//! re-export: rustc counts an intermediate `pub use` as unreachable.

/// `spawnd`'s `main` (src/main.rs).
pub use crate::cli::main;

/// The static build's allocator (src/main.rs) and the raw kernel calls the
/// host-kernel tests make directly.
pub mod sys {
    pub use crate::sys::confine::{install_seccomp_filter_on_current_thread, SockFilter};
    #[cfg(all(target_env = "musl", feature = "musl-dlmalloc"))]
    pub use crate::sys::heap::Heap;
    pub use crate::sys::nflog::read_logged_packets;
    pub use crate::sys::process::{clone_process, exit_immediately};
}

/// The audit chain, for the tests that rebuild it and the append bench.
pub mod audit {
    pub use crate::audit::log::AuditLog;
    pub use crate::audit::record::Kind;
    pub use crate::audit::verify::verify;
    /// How a record's hash and the head's MAC are made.
    pub mod record {
        pub use crate::audit::record::{chain_hash, head_mac, GENESIS};
    }
}

/// The operator config, for tests that run the pipeline in process.
pub mod config {
    pub use crate::config::{Config, DEFAULT_SYSTEM_PATHS};
}

/// The daemon's protocol schema (docs/protocol.schema.json).
pub mod daemon {
    pub use crate::daemon::params::protocol_schema;
}

/// Network grants and what a learning run records.
pub mod egress {
    /// A manifest's network grant.
    pub mod grant {
        pub use crate::egress::grant::Grant;
    }
    /// What a learning run saw of the network.
    pub mod learning {
        pub use crate::egress::learning::Learning;
    }
}

/// The spawn pipeline, run in process by the network-learning test.
pub mod pipeline {
    pub use crate::pipeline::prepared::Prepared;
    pub use crate::pipeline::{run, Spawn};
}

/// The AppArmor profile's name and what it attaches to.
pub mod host_policy {
    pub use crate::host_policy::{APPARMOR_PROFILE_ATTACHES_TO, APPARMOR_PROFILE_NAME};
}

/// Manifests, for the gate bench and the tests that build plans by hand.
pub mod manifest {
    pub use crate::manifest::limits::Limits;
    pub use crate::manifest::model::{Manifest, Sha256Digest, Tier, Verified};
    pub use crate::manifest::validate::{parse_manifest, LoadOptions};
    /// The environment names spawnd reserves (docs/manifest.md).
    pub mod env_keys {
        pub use crate::manifest::env_keys::RESERVED_ENV;
    }
}

/// Who asked for a spawn.
pub mod origin {
    pub use crate::origin::{Origin, Via};
}

/// A spawn plan, built by hand by the network-namespace test.
pub mod plan {
    pub use crate::plan::{CwdPlan, FsPlan, ProgramPlan, SpawnPlan};
}

/// The gate, for its bench and the denial reasons docs/cli.md lists.
pub mod policy {
    pub use crate::policy::gate::decide;
    pub use crate::policy::inspector::{
        ContentChanged, ProgramFacts, ProgramFault, ProgramInspector,
    };
    pub use crate::policy::reason::REASONS;
    pub use crate::policy::request::{Access, Caller, GateContext, Request};
}

/// Hashing a program file.
pub mod program {
    pub use crate::program::hash_file;
}

/// The connector store and keyring, for the provenance bench and the
/// refusals docs/cli.md lists.
pub mod provenance {
    pub use crate::provenance::keyring::Keyring;
    pub use crate::provenance::refusal::REFUSALS;
    pub use crate::provenance::store::Store;
    /// The manifests installed connectors serve.
    pub mod serve {
        pub use crate::provenance::serve::installed_manifests;
    }
    /// Re-checking installed content before a spawn.
    pub mod recheck {
        pub use crate::provenance::recheck::recheck_verified;
    }
}

/// The relay's refusal reasons docs/cli.md lists.
pub mod relay {
    pub use crate::relay::events::reason;
}

/// The sandbox's launch order, built by hand by the network-namespace test,
/// and the seccomp filter's pieces the host-kernel tests load.
pub mod sandbox {
    /// Starting a sandbox from a plan.
    pub mod launch {
        pub use crate::sandbox::launch::{launch_order, LimitsVia, StdinSource};
    }
    /// The network namespace's listeners.
    pub mod network {
        pub use crate::sandbox::network::Listeners;
    }
    /// The launch order's design.
    pub mod order {
        pub use crate::sandbox::order::{Design, RunAs};
    }
    /// The pre-made spare sandbox.
    pub mod spare {
        pub use crate::sandbox::spare::Spare;
    }
    /// The mount steps.
    pub mod spec {
        pub use crate::sandbox::spec::steps_mountable_ahead;
    }
    /// The seccomp filter's ABI and BPF opcodes.
    pub mod seccomp {
        pub use crate::sandbox::seccomp::{abi, bpf};
    }
}

/// The typed result of a spawn.
pub mod spawn_result {
    pub use crate::spawn_result::{SpawnResult, SpawnStatus};
}
