//! The spawn gate (docs/security.md, "The gate"): requests, the pure decision function, decisions
//! and denial reasons. Nothing here touches the kernel; the program file is
//! looked at only through the `ProgramInspector` the caller passes in.

mod checks;
mod connector;
mod decision;
mod executables;
mod gate;
mod inspector;
mod raw;
mod reason;
mod request;

pub use connector::select_served;
pub use decision::{Decision, Denial};
pub use gate::{
    action_network_entry, decide, ActionEntryError, ACTION_NETWORK_PREFIX, MAX_ACTION_GRANT_BYTES,
};
pub use inspector::{ContentChanged, ProgramFacts, ProgramFault, ProgramInspector};
pub use reason::{Reason, ReasonInfo, REASONS};
pub use request::{
    check_label, Access, AccessRule, Caller, ConnectorPin, GateContext, Request, RequestKind,
    MAX_LABEL_BYTES,
};

#[cfg(test)]
mod action_network_tests;
#[cfg(test)]
mod connector_tests;
#[cfg(test)]
mod hostile_request_tests;
#[cfg(test)]
mod reference_behaviour_tests;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
