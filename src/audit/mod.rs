//! The audit trail (docs/audit.md): one append-only JSON-lines file, every record
//! hash-chained to the one before and made durable before the decision takes
//! effect (`log`), the record format and chain (`record`), verification
//! (`verify`), signed checkpoints that anchor it off the host
//! (`checkpoint`), the whole chain read back across rotations (`chain`), and
//! the times records are filtered by (`time_bound`); every record names the
//! machine that wrote it (`machine`). Values
//! of arguments and env keys are never written: records hold argv shapes
//! with placeholder names, env key names, and hashes.

pub mod chain;
pub mod checkpoint;
pub mod events;
pub mod forward;
pub mod group_sync;
pub mod lifecycle;
pub mod log;
pub mod machine;
pub mod ocsf;
pub mod record;
pub mod time_bound;
pub mod verify;
pub mod watch;

pub use log::{AuditError, AuditLog, Unsynced};
pub use record::Kind;
pub use verify::{verify, Verified};
