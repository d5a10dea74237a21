//! What the by-name table says about a call, worked out from its row alone,
//! and the argument sets that probe every test a row makes: shared by the
//! walks of every number through each architecture's compiled filter.

use super::syscalls::{self, Decision, ENOSYS, EPERM, OPEN_CREATE_FLAGS, SETID_BITS};
use super::{Action, FilterOptions};

/// What the table says `name` gets for `args`, worked out from its row
/// alone (not from the compiled program or `Policy::evaluate`).
pub(super) fn expected_from_the_table(
    options: FilterOptions,
    name: &str,
    args: [u64; 6],
) -> Action {
    match syscalls::decision(options, name) {
        None => panic!("{name} has no decision"),
        Some(Decision::Allow) => Action::Allow,
        Some(Decision::Refuse) => EPERM,
        Some(Decision::Absent) => ENOSYS,
        Some(Decision::Checked {
            conditions,
            otherwise,
        }) => conditions
            .iter()
            .find(|c| c.test.matches(args[usize::from(c.arg)]))
            .map_or(otherwise, |c| c.action),
    }
}

/// Argument sets that cross every test the table makes: zeros, all ones,
/// the set-id bits, creating flags, and each alone in the high half.
pub(super) fn probing_args() -> Vec<[u64; 6]> {
    let setid = u64::from(SETID_BITS);
    let create = u64::from(OPEN_CREATE_FLAGS);
    let mut sets = vec![[0; 6], [u64::MAX; 6], [1, 2, 3, 4, 5, 6]];
    for value in [setid, create, setid | create, 1, 2, 10] {
        sets.push([value; 6]);
        sets.push([value << 32; 6]);
        sets.push([0, value, value, value, 0, 0]);
    }
    sets.push([0, create, setid, 0, 0, 0]);
    sets.push([0, 0, create, setid, 0, 0]);
    sets
}
