//! Tests of the compiled default programs as a whole: their shape (arch
//! check, on x86_64 the x32 check, then a binary search tree on ranges of
//! numbers whose depth bounds the cost of every syscall without argument
//! tests), their reported length, and the id, which is stable for the same
//! policy and changes when any rule does.

use std::sync::OnceLock;

use super::abi::{self, Arch, SeccompData};
use super::bpf::op;
use super::syscalls::{ENOSYS, EPERM};
use super::{
    compile, filter_for_arch, interp, policy_for_arch, Filter, FilterOptions, Policy, SyscallRule,
};

fn default_policy() -> Policy {
    policy_for_arch(Arch::X86_64, FilterOptions::DEFAULT)
}

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
    // Syscalls without argument tests cost the 4-instruction prologue,
    // ceil(log2(ranges)) splits and the ret, where the ranges are the runs
    // of consecutive numbers that go to the same place.
    let policy = default_policy();
    let ranges = dispatch_ranges(&policy);
    let splits = usize::BITS - (ranges - 1).leading_zeros();
    let budget = 4 + usize::try_from(splits).unwrap() + 1;
    assert!(budget <= 13, "{ranges} ranges: the tree is {splits} deep");
    let conditional: Vec<i64> = policy
        .rules
        .iter()
        .filter(|rule| !rule.conditions.is_empty())
        .map(|rule| rule.nr)
        .collect();
    for nr in 0..1024 {
        let data = SeccompData::x86_64(nr, [0; 6]);
        let (_, steps) = interp::run_counting_steps(program, &data).unwrap();
        if !conditional.contains(&i64::from(nr)) {
            assert!(steps <= budget, "nr {nr}: {steps} steps, budget {budget}");
        }
    }
}

#[test]
fn the_aarch64_program_checks_arch_then_dispatches_with_a_tree() {
    let policy = policy_for_arch(Arch::Aarch64, FilterOptions::DEFAULT);
    let program = &compile(&policy).unwrap().instructions;
    assert_eq!(
        (program[0].code, program[0].k),
        (op::LD_W_ABS, abi::OFFSET_ARCH)
    );
    assert_eq!(
        (program[1].code, program[1].k),
        (op::JEQ_K, abi::AUDIT_ARCH_AARCH64)
    );
    assert_eq!(
        (program[2].code, program[2].k),
        (op::LD_W_ABS, abi::OFFSET_NR)
    );
    assert_eq!(
        program[3].code,
        op::JGE_K,
        "no x32 check: the dispatch starts with a split"
    );
    assert_ne!(program[3].k, abi::X32_SYSCALL_BIT);
    // The 3-instruction prologue, the splits and the ret.
    let ranges = dispatch_ranges(&policy);
    let splits = usize::BITS - (ranges - 1).leading_zeros();
    let budget = 3 + usize::try_from(splits).unwrap() + 1;
    assert!(budget <= 12, "{ranges} ranges: the tree is {splits} deep");
    let conditional: Vec<i64> = policy
        .rules
        .iter()
        .filter(|rule| !rule.conditions.is_empty())
        .map(|rule| rule.nr)
        .collect();
    for nr in 0..1024 {
        let data = SeccompData::aarch64(nr, [0; 6]);
        let (_, steps) = interp::run_counting_steps(program, &data).unwrap();
        if !conditional.contains(&i64::from(nr)) {
            assert!(steps <= budget, "nr {nr}: {steps} steps, budget {budget}");
        }
    }
}

/// How many runs of consecutive numbers in `0..X32_SYSCALL_BIT` share a
/// destination: one rule's conditions and action, or the default.
fn dispatch_ranges(policy: &Policy) -> usize {
    let mut rules: Vec<&SyscallRule> = policy.rules.iter().collect();
    rules.sort_by_key(|rule| rule.nr);
    let place = |rule: Option<&SyscallRule>| match rule {
        Some(rule) if !rule.conditions.is_empty() => (rule.conditions.clone(), rule.otherwise),
        Some(rule) => (Vec::new(), rule.otherwise),
        None => (Vec::new(), policy.default),
    };
    let mut places = Vec::new();
    let mut next = 0;
    for rule in rules {
        if rule.nr > next {
            places.push(place(None));
        }
        places.push(place(Some(rule)));
        next = rule.nr + 1;
    }
    places.push(place(None));
    places.dedup();
    places.len()
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
    let with_unix = filter_for_arch(Arch::X86_64, FilterOptions::WITH_UNIX_SOCKETS).unwrap();
    println!(
        "with unix sockets: {} instructions, id {}",
        with_unix.len(),
        with_unix.id()
    );
    assert!(
        with_unix.len() > 100 && with_unix.len() < 200,
        "{}",
        with_unix.len()
    );
    for options in [FilterOptions::DEFAULT, FilterOptions::WITH_UNIX_SOCKETS] {
        let aarch64 = filter_for_arch(Arch::Aarch64, options).unwrap();
        println!(
            "aarch64 {options:?}: {} instructions, id {}",
            aarch64.len(),
            aarch64.id()
        );
        assert!(
            aarch64.len() > 80 && aarch64.len() < 200,
            "{}",
            aarch64.len()
        );
        assert_ne!(
            aarch64.id(),
            filter_for_arch(Arch::X86_64, options).unwrap().id()
        );
    }
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
    let ptrace = enosys_ptrace
        .rules
        .iter_mut()
        .find(|rule| rule.name == "ptrace")
        .unwrap();
    assert_eq!(ptrace.otherwise, EPERM);
    ptrace.otherwise = ENOSYS;
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

/// The traced program decides every call as the untraced policy does, but
/// hands the traced calls and the EPERM refusals to its listener: checked
/// on both architectures, for every number up to 1024 and argument values
/// that flip each condition's low bits.
#[test]
fn traced_policy_decides_as_the_policy() {
    use super::{policy::Action, traced_policy, TRACED_CALLS};
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let policy = policy_for_arch(arch, FilterOptions::DEFAULT);
        let traced = traced_policy(&policy);
        let program = compile(&traced).unwrap();
        let name = |nr: i32| {
            policy
                .rules
                .iter()
                .find(|r| r.nr == i64::from(nr))
                .map(|r| r.name)
        };
        let mut notified = 0;
        for nr in 0..1024 {
            for arg in [0u64, 1, 2, 0x80000, 0x40, 0xffff_ffff, 0x4_0000] {
                let data = SeccompData::call(arch, nr, [arg, arg, arg, arg, arg, arg]);
                let original = policy.evaluate(&data);
                let by_program =
                    Action::from_seccomp_ret(interp::run(&program.instructions, &data).unwrap());
                assert_eq!(by_program, Some(traced.evaluate(&data)), "{arch:?} nr {nr}");
                match traced.evaluate(&data) {
                    Action::Notify => {
                        notified += 1;
                        let traced_call = name(nr).is_some_and(|n| TRACED_CALLS.contains(&n));
                        assert!(
                            original == EPERM || (original == Action::Allow && traced_call),
                            "{arch:?} nr {nr}: notified for {original:?}"
                        );
                    }
                    other => assert_eq!(other, original, "{arch:?} nr {nr}"),
                }
            }
        }
        assert!(notified > 0);
        let openat = policy.rules.iter().find(|r| r.name == "openat").unwrap();
        let open_data = SeccompData::call(arch, openat.nr as i32, [0; 6]);
        assert_eq!(traced.evaluate(&open_data), Action::Notify);
        assert_ne!(ENOSYS, Action::Notify);
    }
}
