//! The spawn gate (docs/security.md, "The gate"): requests, the pure decision function, decisions
//! and denial reasons. Nothing here touches the kernel; the program file is
//! looked at only through the `ProgramInspector` the caller passes in.

mod checks;
mod connector;
mod decision;
mod executables;
pub(crate) mod gate;
pub(crate) mod inspector;
mod raw;
pub(crate) mod reason;
pub(crate) mod request;

pub(crate) use connector::select_served;
pub(crate) use decision::{Decision, Denial};
pub(crate) use gate::{action_network_entry, decide};
pub(crate) use inspector::{ContentChanged, ProgramFacts, ProgramFault, ProgramInspector};
pub(crate) use reason::{Reason, REASONS};
pub(crate) use request::{
    check_label, Access, AccessRule, Caller, ConnectorPin, GateContext, Request, RequestKind,
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
