//! The audit trail (docs/audit.md): one append-only JSON-lines file, every record
//! hash-chained to the one before and made durable before the decision takes
//! effect (`log`), the record format and chain (`record`), verification
//! (`verify`), signed checkpoints that anchor it off the host
//! (`checkpoint`), the whole chain read back across rotations (`chain`), and
//! the times records are filtered by (`time_bound`); every record names the
//! machine that wrote it (`machine`). Values
//! of arguments and env keys are never written: records hold argv shapes
//! with placeholder names, env key names, and hashes.

pub(crate) mod chain;
pub(crate) mod checkpoint;
pub(crate) mod events;
pub(crate) mod forward;
pub(crate) mod group_sync;
pub(crate) mod lifecycle;
pub(crate) mod log;
pub(crate) mod machine;
pub(crate) mod ocsf;
pub(crate) mod record;
pub(crate) mod time_bound;
pub(crate) mod verify;
pub(crate) mod watch;

pub(crate) use log::{AuditError, AuditLog, Unsynced};
pub(crate) use record::Kind;
