//! The syscall policy as a value: which syscalls get which [`Action`], and
//! under which argument [`Condition`]s. This file also holds the policy's
//! meaning written the obvious way ([`Policy::evaluate`], a linear scan), which
//! the compiled BPF program must agree with, and the validation that turns a
//! `Policy` into the sorted, range-checked rules the code generator reads.

use super::abi::{self, Arch, SeccompData};
use super::CompileError;

/// What the filter does with a syscall.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Let the syscall run.
    Allow,
    /// Fail the syscall with this errno (1..=4095) without running it.
    Errno(u16),
    /// Kill the whole process (`SECCOMP_RET_KILL_PROCESS`).
    KillProcess,
    /// Stop the call and ask the filter's listener
    /// (`SECCOMP_RET_USER_NOTIF`): only in a traced filter
    /// ([`super::traced_policy`]), whose listener answers with the
    /// untraced policy's own decision.
    Notify,
}

impl Action {
    /// The 32-bit value a `BPF_RET` instruction returns for this action.
    pub const fn seccomp_ret(self) -> u32 {
        match self {
            Action::Allow => abi::SECCOMP_RET_ALLOW,
            Action::Errno(errno) => abi::SECCOMP_RET_ERRNO | (errno as u32 & abi::SECCOMP_RET_DATA),
            Action::KillProcess => abi::SECCOMP_RET_KILL_PROCESS,
            Action::Notify => abi::SECCOMP_RET_USER_NOTIF,
        }
    }

    /// The action a return value encodes, if it is one this module emits.
    pub const fn from_seccomp_ret(value: u32) -> Option<Action> {
        match value {
            abi::SECCOMP_RET_ALLOW => Some(Action::Allow),
            abi::SECCOMP_RET_KILL_PROCESS => Some(Action::KillProcess),
            abi::SECCOMP_RET_USER_NOTIF => Some(Action::Notify),
            _ if value & !abi::SECCOMP_RET_DATA == abi::SECCOMP_RET_ERRNO => {
                Some(Action::Errno((value & abi::SECCOMP_RET_DATA) as u16))
            }
            _ => None,
        }
    }
}

/// A test on the LOW 32 bits of one syscall argument. The high half is never
/// looked at: the kernel truncates `int`/`unsigned int` arguments, so a rule
/// on the full 64 bits could be dodged by setting high bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgTest {
    /// The low 32 bits equal this value (`BPF_JEQ`).
    Equals(u32),
    /// The low 32 bits share at least one set bit with this mask (`BPF_JSET`).
    AnyBitsSet(u32),
    /// The low 32 bits share no set bit with this mask (`BPF_JSET` with its
    /// branches swapped).
    NoBitsSet(u32),
}

impl ArgTest {
    /// Whether the test holds for a raw 64-bit argument register.
    pub const fn matches(self, arg: u64) -> bool {
        let low = arg as u32;
        match self {
            ArgTest::Equals(value) => low == value,
            ArgTest::AnyBitsSet(mask) => low & mask != 0,
            ArgTest::NoBitsSet(mask) => low & mask == 0,
        }
    }
}

/// "If argument `arg` passes `test`, take `action`."
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Condition {
    /// The argument index, 0..=5.
    pub arg: u8,
    /// The test on the argument's low 32 bits.
    pub test: ArgTest,
    /// The action when the test holds.
    pub action: Action,
}

impl Condition {
    /// A condition on argument `arg`.
    pub const fn new(arg: u8, test: ArgTest, action: Action) -> Self {
        Self { arg, test, action }
    }
}

/// The rule for one syscall: its conditions are tried in order and the first
/// that holds decides; if none holds, `otherwise` decides.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SyscallRule {
    /// The syscall's name, for messages (`"ptrace"`).
    pub name: &'static str,
    /// The syscall number on the policy's architecture.
    pub nr: i64,
    /// Argument conditions, first match wins.
    pub conditions: Vec<Condition>,
    /// The action when no condition holds (or there are none).
    pub otherwise: Action,
}

impl SyscallRule {
    /// A rule that takes `action` whatever the arguments.
    pub fn always(name: &'static str, nr: i64, action: Action) -> Self {
        Self {
            name,
            nr,
            conditions: Vec::new(),
            otherwise: action,
        }
    }
}

/// A whole seccomp policy for one architecture. Calls from another
/// architecture (and, on x86_64, x32 calls) are always killed; listed
/// syscalls follow their rule; the rest get `default`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Policy {
    /// The architecture whose calls the policy decides, and whose numbers
    /// its rules carry.
    pub arch: Arch,
    /// The action for syscalls no rule lists.
    pub default: Action,
    /// One rule per syscall number; order does not matter.
    pub rules: Vec<SyscallRule>,
}

impl Policy {
    /// The reference meaning of the policy, written as a plain linear scan:
    /// the compiled filter must return `evaluate(data).seccomp_ret()` for
    /// every input. The syscall number is compared unsigned, as BPF does, so
    /// on x86_64 negative numbers fall into the x32 range and are killed; on
    /// aarch64 they match no rule and get `default`.
    pub fn evaluate(&self, data: &SeccompData) -> Action {
        if data.arch != self.arch.audit_arch() {
            return Action::KillProcess;
        }
        if self.arch.has_x32_bit() && data.nr as u32 >= abi::X32_SYSCALL_BIT {
            return Action::KillProcess;
        }
        let Some(rule) = self.rules.iter().find(|rule| rule.nr == i64::from(data.nr)) else {
            return self.default;
        };
        rule.conditions
            .iter()
            .find(|condition| {
                let arg = data.args.get(usize::from(condition.arg)).copied();
                arg.is_some_and(|arg| condition.test.matches(arg))
            })
            .map_or(rule.otherwise, |condition| condition.action)
    }

    /// The rules checked and sorted by number, ready for code generation.
    pub(super) fn checked_rules(&self) -> Result<Vec<CheckedRule<'_>>, CompileError> {
        check_action("default action", self.default)?;
        let mut checked = self
            .rules
            .iter()
            .map(CheckedRule::new)
            .collect::<Result<Vec<_>, _>>()?;
        checked.sort_by_key(|rule| rule.nr);
        if let Some(pair) = checked.windows(2).find(|pair| pair[0].nr == pair[1].nr) {
            return Err(CompileError::DuplicateSyscall {
                first: pair[0].name,
                second: pair[1].name,
                nr: pair[0].nr,
            });
        }
        Ok(checked)
    }
}

/// A rule whose number, argument indexes and errnos have been checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CheckedRule<'a> {
    pub name: &'static str,
    pub nr: u32,
    pub conditions: &'a [Condition],
    pub otherwise: Action,
}

impl<'a> CheckedRule<'a> {
    fn new(rule: &'a SyscallRule) -> Result<Self, CompileError> {
        let nr = u32::try_from(rule.nr)
            .ok()
            .filter(|nr| *nr < abi::X32_SYSCALL_BIT)
            .ok_or(CompileError::SyscallNumberOutOfRange {
                name: rule.name,
                nr: rule.nr,
            })?;
        check_action(rule.name, rule.otherwise)?;
        for condition in &rule.conditions {
            check_action(rule.name, condition.action)?;
            if abi::arg_low_offset(condition.arg).is_none() {
                return Err(CompileError::ArgumentIndexOutOfRange {
                    name: rule.name,
                    arg: condition.arg,
                });
            }
        }
        Ok(Self {
            name: rule.name,
            nr,
            conditions: &rule.conditions,
            otherwise: rule.otherwise,
        })
    }
}

/// Errno 0 would fake success without running the call, and the kernel
/// clamps anything above 4095, so both are refused rather than guessed at.
fn check_action(context: &'static str, action: Action) -> Result<(), CompileError> {
    match action {
        Action::Errno(errno) if errno == 0 || errno > abi::MAX_ERRNO => {
            Err(CompileError::InvalidErrno { context, errno })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_round_trips_through_its_return_value() {
        for action in [
            Action::Allow,
            Action::KillProcess,
            Action::Errno(1),
            Action::Errno(4095),
        ] {
            assert_eq!(Action::from_seccomp_ret(action.seccomp_ret()), Some(action));
        }
        assert_eq!(Action::Errno(1).seccomp_ret(), 0x0005_0001);
        assert_eq!(Action::from_seccomp_ret(0x0003_0000), None);
    }

    #[test]
    fn arg_tests_look_only_at_the_low_32_bits() {
        assert!(ArgTest::Equals(0x5412).matches(0x5412 | 1 << 32));
        assert!(!ArgTest::AnyBitsSet(0x10).matches(0x10 << 32));
        assert!(ArgTest::AnyBitsSet(0x18).matches(0x8));
        assert!(ArgTest::NoBitsSet(0x40).matches(0x40 << 32 | 0x80));
        assert!(!ArgTest::NoBitsSet(0x40).matches(0x40 | 1 << 32));
    }

    #[test]
    fn evaluate_takes_the_first_condition_that_holds() {
        let rule = SyscallRule {
            name: "demo",
            nr: 7,
            conditions: vec![
                Condition::new(1, ArgTest::Equals(3), Action::Errno(1)),
                Condition::new(1, ArgTest::AnyBitsSet(1), Action::KillProcess),
            ],
            otherwise: Action::Errno(2),
        };
        let policy = Policy {
            arch: Arch::X86_64,
            default: Action::Allow,
            rules: vec![rule],
        };
        let call = |nr, arg1| policy.evaluate(&SeccompData::x86_64(nr, [0, arg1, 0, 0, 0, 0]));
        assert_eq!(call(7, 3), Action::Errno(1));
        assert_eq!(call(7, 5), Action::KillProcess);
        assert_eq!(call(7, 4), Action::Errno(2));
        assert_eq!(call(8, 3), Action::Allow);
        assert_eq!(call(-1, 0), Action::KillProcess);
    }

    #[test]
    fn evaluate_kills_the_other_architecture_and_x32_numbers_only_on_x86_64() {
        let policy = |arch| Policy {
            arch,
            default: Action::Errno(38),
            rules: vec![SyscallRule::always("demo", 7, Action::Allow)],
        };
        let (x86_64, aarch64) = (policy(Arch::X86_64), policy(Arch::Aarch64));
        let args = [0; 6];
        assert_eq!(
            x86_64.evaluate(&SeccompData::x86_64(7, args)),
            Action::Allow
        );
        assert_eq!(
            aarch64.evaluate(&SeccompData::aarch64(7, args)),
            Action::Allow
        );
        assert_eq!(
            x86_64.evaluate(&SeccompData::aarch64(7, args)),
            Action::KillProcess
        );
        assert_eq!(
            aarch64.evaluate(&SeccompData::x86_64(7, args)),
            Action::KillProcess
        );
        let arm = SeccompData {
            arch: abi::AUDIT_ARCH_ARM,
            ..SeccompData::aarch64(7, args)
        };
        assert_eq!(aarch64.evaluate(&arm), Action::KillProcess);
        // No x32 ABI on aarch64: a number with that bit is just unknown.
        let high = 0x4000_0007;
        assert_eq!(
            x86_64.evaluate(&SeccompData::x86_64(high, args)),
            Action::KillProcess
        );
        assert_eq!(
            aarch64.evaluate(&SeccompData::aarch64(high, args)),
            Action::Errno(38)
        );
        assert_eq!(
            aarch64.evaluate(&SeccompData::aarch64(-1, args)),
            Action::Errno(38)
        );
    }

    #[test]
    fn checking_refuses_bad_numbers_indexes_errnos_and_duplicates() {
        let bad = |rule: SyscallRule| Policy {
            arch: Arch::X86_64,
            default: Action::Allow,
            rules: vec![rule],
        };
        let err = |policy: Policy| policy.checked_rules().map(|_| ()).unwrap_err();
        assert!(matches!(
            err(bad(SyscallRule::always("x32", 0x4000_0000, Action::Allow))),
            CompileError::SyscallNumberOutOfRange {
                nr: 0x4000_0000,
                ..
            }
        ));
        assert!(matches!(
            err(bad(SyscallRule::always("neg", -1, Action::Allow))),
            CompileError::SyscallNumberOutOfRange { .. }
        ));
        assert!(matches!(
            err(bad(SyscallRule::always("zero", 1, Action::Errno(0)))),
            CompileError::InvalidErrno { errno: 0, .. }
        ));
        let mut six = SyscallRule::always("six", 1, Action::Allow);
        six.conditions
            .push(Condition::new(6, ArgTest::Equals(0), Action::KillProcess));
        assert!(matches!(
            err(bad(six)),
            CompileError::ArgumentIndexOutOfRange { arg: 6, .. }
        ));
        let twice = Policy {
            arch: Arch::X86_64,
            default: Action::Allow,
            rules: vec![
                SyscallRule::always("a", 5, Action::Allow),
                SyscallRule::always("b", 5, Action::KillProcess),
            ],
        };
        assert!(matches!(
            err(twice),
            CompileError::DuplicateSyscall { nr: 5, .. }
        ));
        let default = Policy {
            arch: Arch::X86_64,
            default: Action::Errno(5000),
            rules: vec![],
        };
        assert!(matches!(
            err(default),
            CompileError::InvalidErrno { errno: 5000, .. }
        ));
    }
}
