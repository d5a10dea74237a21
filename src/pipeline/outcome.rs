//! A gate's denial as the [`Failure`] a spawn ends in.

use crate::failure::{Failure, FailureKind};

/// A denial as a failure: exit code, a message naming the reason, the denial object as details.
pub(crate) fn denial_failure(denial: &crate::policy::Denial) -> Failure {
    let mut message = format!("denied ({}): {}", denial.reason.as_str(), denial.message);
    message.push_str(&format!("\n  requested: {}", denial.requested));
    if !denial.granted.is_empty() {
        message.push_str(&format!("\n  granted:   {}", denial.granted.join(", ")));
    }
    let kind = match denial.exit_code() {
        4 => FailureKind::Credential,
        6 => FailureKind::NotFound,
        _ => FailureKind::Denied,
    };
    Failure::new(kind, message).with_details(denial)
}
