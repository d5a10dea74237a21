//! Property tests: the compiled program and the policy's linear reference
//! meaning ([`Policy::evaluate`]) agree on every input, for the default
//! policy of each architecture and for random policies of either large
//! enough to need long jumps; the
//! interpreter always terminates and never errors on compiled programs, and
//! never panics on arbitrary instruction soup.

use proptest::prelude::*;

use super::abi::{self, Arch, SeccompData};
use super::bpf::SockFilter;
use super::policy::ArgTest;
use super::{
    compile, default_policy, interp, policy_for_arch, Action, Condition, FilterOptions, Policy,
    SyscallRule,
};

/// The constants rules compare against, so random arguments hit them often.
fn interesting_values(policy: &Policy) -> Vec<u32> {
    let mut values = vec![0, 1, u32::MAX];
    for condition in policy.rules.iter().flat_map(|rule| &rule.conditions) {
        match condition.test {
            ArgTest::Equals(value) => values.extend([value, value ^ 1]),
            ArgTest::AnyBitsSet(mask) | ArgTest::NoBitsSet(mask) => {
                values.extend([mask, mask & mask.wrapping_neg(), !mask])
            }
        }
    }
    values
}

/// An argument: random, or an interesting low half under random high bits.
fn arg(values: Vec<u32>) -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        (prop::sample::select(values), any::<u32>())
            .prop_map(|(low, high)| u64::from(high) << 32 | u64::from(low)),
    ]
}

fn arch() -> impl Strategy<Value = u32> {
    prop_oneof![
        8 => Just(abi::AUDIT_ARCH_X86_64),
        8 => Just(abi::AUDIT_ARCH_AARCH64),
        1 => Just(abi::AUDIT_ARCH_I386),
        1 => Just(abi::AUDIT_ARCH_ARM),
        1 => any::<u32>(),
    ]
}

fn data(nr: impl Strategy<Value = i32>, values: Vec<u32>) -> impl Strategy<Value = SeccompData> {
    (nr, arch(), any::<u64>(), prop::array::uniform6(arg(values))).prop_map(
        |(nr, arch, instruction_pointer, args)| SeccompData {
            nr,
            arch,
            instruction_pointer,
            args,
        },
    )
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        Just(Action::Allow),
        Just(Action::KillProcess),
        // Few distinct errnos, so returns are shared as in real policies.
        prop::sample::select(vec![1u16, 38, 4095]).prop_map(Action::Errno),
    ]
}

fn condition() -> impl Strategy<Value = Condition> {
    let test = prop_oneof![
        prop_oneof![0u32..8, any::<u32>()].prop_map(ArgTest::Equals),
        any::<u32>().prop_map(ArgTest::AnyBitsSet),
        any::<u32>().prop_map(ArgTest::NoBitsSet),
    ];
    (0u8..6, test, action()).prop_map(|(arg, test, action)| Condition::new(arg, test, action))
}

/// Policies with up to 300 distinct numbers (some far apart), so trees get
/// deep and far conditional jumps need `ja` trampolines.
fn policy() -> impl Strategy<Value = Policy> {
    let numbers =
        prop::collection::btree_set(prop_oneof![9 => 0i64..500, 1 => 0i64..0x4000_0000], 0..300);
    let rule_parts =
        prop::collection::vec((prop::collection::vec(condition(), 0..4), action()), 300);
    let arch = prop::sample::select(Arch::ALL.to_vec());
    (arch, numbers, rule_parts, action()).prop_map(|(arch, numbers, parts, default)| Policy {
        arch,
        default,
        rules: numbers
            .into_iter()
            .zip(parts)
            .map(|(nr, (conditions, otherwise))| SyscallRule {
                name: "random",
                nr,
                conditions,
                otherwise,
            })
            .collect(),
    })
}

/// A random policy and 32 calls, most of them to numbers it lists.
fn policy_with_calls() -> impl Strategy<Value = (Policy, Vec<SeccompData>)> {
    policy().prop_flat_map(|policy| {
        let listed: Vec<i32> = policy
            .rules
            .iter()
            .filter_map(|rule| i32::try_from(rule.nr).ok())
            .collect();
        let nr = if listed.is_empty() {
            (0i32..500).boxed()
        } else {
            prop_oneof![prop::sample::select(listed), 0i32..500, any::<i32>()].boxed()
        };
        let calls = prop::collection::vec(data(nr, interesting_values(&policy)), 32);
        (Just(policy), calls)
    })
}

/// Any instruction, biased towards the supported opcodes and short jumps.
fn instruction() -> impl Strategy<Value = SockFilter> {
    let supported = prop::sample::select(vec![0x20u16, 0x15, 0x25, 0x35, 0x45, 0x05, 0x06]);
    let code = prop_oneof![4 => supported, 1 => any::<u16>()];
    let k = prop_oneof![0u32..80, any::<u32>()];
    (code, 0u8..8, 0u8..8, k).prop_map(|(code, jt, jf, k)| SockFilter { code, jt, jf, k })
}

fn agrees(
    program: &[SockFilter],
    policy: &Policy,
    data: &SeccompData,
) -> Result<(), TestCaseError> {
    let got = interp::run(program, data);
    prop_assert_eq!(got, Ok(policy.evaluate(data).seccomp_ret()), "{:?}", data);
    Ok(())
}

#[test]
fn the_default_program_agrees_with_the_table_for_every_number() {
    for (arch, options) in Arch::ALL
        .into_iter()
        .flat_map(|arch| FilterOptions::VARIANTS.map(|options| (arch, options)))
    {
        let policy = policy_for_arch(arch, options);
        let program = compile(&policy).unwrap().instructions;
        let values = interesting_values(&policy);
        let checked: Vec<i64> = policy
            .rules
            .iter()
            .filter(|rule| !rule.conditions.is_empty())
            .map(|rule| rule.nr)
            .collect();
        let numbers = (0..1024).chain([-1, i32::MIN, i32::MAX, 0x4000_0000, 0x4000_0029]);
        for nr in numbers {
            // Calls with argument tests get every pair of interesting values
            // (a flags test and a mode test decide open together); the rest one each.
            let pairs: Vec<(u32, u32)> = if checked.contains(&i64::from(nr)) {
                values
                    .iter()
                    .flat_map(|&a| values.iter().map(move |&b| (a, b)))
                    .collect()
            } else {
                values.iter().map(|&v| (v, v)).collect()
            };
            for (index, (a, b)) in pairs.into_iter().enumerate() {
                let high = u64::try_from(index % 7).unwrap() << 32;
                let (a, b) = (u64::from(a), u64::from(b));
                let args = [a, b | high, a | high, b, a, b | high];
                let data = SeccompData::call(arch, nr, args);
                let got = interp::run(&program, &data).unwrap();
                assert_eq!(got, policy.evaluate(&data).seccomp_ret(), "{data:?}");
            }
        }
    }
}

proptest! {
    #[test]
    fn the_default_program_agrees_with_the_table_on_random_calls(
        data in data(0i32..500, interesting_values(&default_policy())),
    ) {
        let policy = default_policy();
        let program = compile(&policy).unwrap().instructions;
        agrees(&program, &policy, &data)?;
    }

    #[test]
    fn the_aarch64_program_agrees_with_the_table_on_random_calls(
        data in data(0i32..500, interesting_values(&policy_for_arch(Arch::Aarch64, FilterOptions::DEFAULT))),
    ) {
        let policy = policy_for_arch(Arch::Aarch64, FilterOptions::DEFAULT);
        let program = compile(&policy).unwrap().instructions;
        agrees(&program, &policy, &data)?;
    }

    #[test]
    fn random_policies_compile_and_agree_with_their_reference(
        (policy, calls) in policy_with_calls(),
    ) {
        let filter = compile(&policy).unwrap();
        prop_assert!(filter.len() <= interp::MAX_INSTRUCTIONS);
        for data in &calls {
            agrees(&filter.instructions, &policy, data)?;
        }
    }

    #[test]
    fn the_interpreter_never_panics_on_arbitrary_programs(
        program in prop::collection::vec(instruction(), 0..24),
        data in data(0i32..500, vec![0]),
    ) {
        if let Ok(value) = interp::run(&program, &data) {
            prop_assert!(program.iter().any(|insn| insn.k == value));
        }
    }
}
