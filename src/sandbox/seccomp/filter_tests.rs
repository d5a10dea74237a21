//! Tests of the compiled default program as a whole: its shape (arch check,
//! x32 check, then a binary search tree whose depth bounds the cost of every
//! unlisted syscall), its reported length, and its id, which is stable for
//! the same policy and changes when any rule does.

use std::sync::OnceLock;

use super::abi::{self, SeccompData};
use super::bpf::op;
use super::syscalls::{ENOSYS, EPERM};
use super::{compile, default_policy, interp, Filter};

fn filter() -> &'static Filter {
    static FILTER: OnceLock<Filter> = OnceLock::new();
    FILTER.get_or_init(|| compile(&default_policy()).unwrap())
}
#[test]
fn the_program_checks_arch_then_x32_then_dispatches_with_a_tree() {
    let program = &filter().instructions;
    assert_eq!(program[0].code, op::LD_W_ABS);
    assert_eq!(program[0].k, abi::OFFSET_ARCH);
    assert_eq!(
        (program[1].code, program[1].k),
        (op::JEQ_K, abi::AUDIT_ARCH_X86_64)
    );
    assert_eq!(
        (program[2].code, program[2].k),
        (op::LD_W_ABS, abi::OFFSET_NR)
    );
    assert_eq!(
        (program[3].code, program[3].k),
        (op::JGE_K, abi::X32_SYSCALL_BIT)
    );
    assert_eq!(
        program[4].code,
        op::JGE_K,
        "the dispatch starts with a split"
    );
    // Unlisted and fixed-action syscalls cost the 4-instruction prologue,
    // ceil(log2(58)) = 6 splits, one jeq and the ret; a linear chain would
    // need up to 58 comparisons.
    let policy = default_policy();
    let splits = usize::BITS - (policy.rules.len() - 1).leading_zeros();
    let budget = 4 + usize::try_from(splits).unwrap() + 1 + 1;
    let conditional: Vec<i64> = policy
        .rules
        .iter()
        .filter(|rule| !rule.conditions.is_empty())
        .map(|rule| rule.nr)
        .collect();
    for nr in 0..460 {
        let data = SeccompData::native(nr, [0; 6]);
        let (_, steps) = interp::run_counting_steps(program, &data).unwrap();
        if !conditional.contains(&i64::from(nr)) {
            assert!(steps <= budget, "nr {nr}: {steps} steps, budget {budget}");
        }
    }
}

#[test]
fn the_program_length_is_reported_and_small() {
    let len = filter().len();
    println!(
        "default seccomp program: {len} instructions, id {}",
        filter().id()
    );
    assert!(len > 100, "{len}");
    assert!(
        len < 200,
        "{len}: a trampoline or duplicate handler crept in"
    );
    assert!(!filter().is_empty());
    assert_eq!(filter().to_bytes().len(), len * 8);
}

#[test]
fn the_id_is_stable_and_changes_with_any_rule() {
    let id = filter().id();
    assert_eq!(compile(&default_policy()).unwrap().id(), id);
    assert!(id.starts_with("sha256:"));
    let digest = &id["sha256:".len()..];
    assert_eq!(digest.len(), 64);
    assert!(digest
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));

    let mut enosys_ptrace = default_policy();
    enosys_ptrace.rules[0].otherwise = ENOSYS;
    let mut open_ioctl = default_policy();
    let ioctl = open_ioctl
        .rules
        .iter_mut()
        .find(|rule| rule.name == "ioctl")
        .unwrap();
    ioctl.conditions.pop();
    let mut deny_by_default = default_policy();
    deny_by_default.default = EPERM;
    for changed in [enosys_ptrace, open_ioctl, deny_by_default] {
        assert_ne!(compile(&changed).unwrap().id(), id);
    }
}

#[test]
fn rule_order_in_the_policy_does_not_change_the_program() {
    let mut reversed = default_policy();
    reversed.rules.reverse();
    assert_eq!(compile(&reversed).unwrap(), *filter());
}
