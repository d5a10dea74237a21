//! Turns checked policy rules into a classic-BPF program. The shape is fixed:
//! a prologue kills foreign architectures (and, on x86_64, x32 numbers); the
//! numbers left are cut into ranges of consecutive numbers that go to the
//! same place (a rule's handler or `ret`, or the default's `ret`), the last
//! range running to the top of the 32-bit number space, and a binary search
//! tree of `jge` on the ranges' starts dispatches to them;
//! handlers test the low 32 bits of arguments, and one `ret` per distinct
//! action ends the program. A table that decides every number costs no more
//! than its runs of equal decisions. Everything jumps forward, so the
//! program is loop-free.

use super::abi::{self, Arch};
use super::bpf::{JumpOp, Label, ProgramBuilder, SockFilter};
use super::policy::{Action, ArgTest, CheckedRule, Condition};
use super::CompileError;

/// The program for `arch`'s calls: `rules` (sorted by number, no
/// duplicates) with `default` for every syscall they do not list.
pub(super) fn generate(
    arch: Arch,
    default: Action,
    rules: &[CheckedRule<'_>],
) -> Result<Vec<SockFilter>, CompileError> {
    let mut gen = Codegen::default();
    gen.prologue(arch)?;
    let ranges = gen.ranges(default, rules);
    gen.tree(&ranges)?;
    gen.handlers()?;
    gen.returns()?;
    Ok(gen.builder.finish()?)
}

/// Argument tests shared by every syscall whose rule has the same conditions
/// (chmod, fchmod, creat, mkdir and mknod test one mode argument alike), so
/// each distinct handler is emitted once.
#[derive(Clone, Copy, Debug)]
struct Handler<'a> {
    name: &'static str,
    conditions: &'a [Condition],
    otherwise: Action,
    label: Label,
}

#[derive(Default)]
struct Codegen<'a> {
    builder: ProgramBuilder,
    /// One `ret` per distinct action, emitted last in first-use order.
    returns: Vec<(Action, Label)>,
    handlers: Vec<Handler<'a>>,
}

impl<'a> Codegen<'a> {
    /// Kill calls from any other architecture (i386 `int 0x80` on x86_64,
    /// 32-bit arm on aarch64, …) and, on x86_64, x32 numbers before looking
    /// at the number: the same number means another syscall under another
    /// ABI. Leaves `nr` in A.
    fn prologue(&mut self, arch: Arch) -> Result<(), CompileError> {
        let kill = self.return_label(Action::KillProcess);
        let native = self.builder.new_label();
        self.builder.load_word(abi::OFFSET_ARCH);
        self.builder
            .jump_if(JumpOp::Eq, arch.audit_arch(), native, kill);
        self.builder.bind(native)?;
        self.builder.load_word(abi::OFFSET_NR);
        if arch.has_x32_bit() {
            let plain = self.builder.new_label();
            self.builder
                .jump_if(JumpOp::Ge, abi::X32_SYSCALL_BIT, kill, plain);
            self.builder.bind(plain)?;
        }
        Ok(())
    }

    /// Where the tree sends a listed syscall: its action's `ret` when the
    /// rule has no conditions, else its (possibly shared) handler.
    fn dispatch_target(&mut self, rule: &CheckedRule<'a>) -> Label {
        if rule.conditions.is_empty() {
            return self.return_label(rule.otherwise);
        }
        let same = |handler: &&Handler<'a>| {
            handler.conditions == rule.conditions && handler.otherwise == rule.otherwise
        };
        if let Some(handler) = self.handlers.iter().find(same) {
            return handler.label;
        }
        let label = self.builder.new_label();
        self.handlers.push(Handler {
            name: rule.name,
            conditions: rule.conditions,
            otherwise: rule.otherwise,
            label,
        });
        label
    }

    /// The label of the `ret` for `action`, created on first use.
    fn return_label(&mut self, action: Action) -> Label {
        if let Some((_, label)) = self.returns.iter().find(|(known, _)| *known == action) {
            return *label;
        }
        let label = self.builder.new_label();
        self.returns.push((action, label));
        label
    }

    /// Where each number goes, as `(first number, target)` ranges in order,
    /// each running to the next one's start and the last to `u32::MAX`, with
    /// neighbours that share a target merged. `rules` are sorted by number
    /// without duplicates, all below `X32_SYSCALL_BIT`; numbers between and
    /// above them take `default` (on x86_64 the prologue has already killed
    /// those from `X32_SYSCALL_BIT` up).
    fn ranges(&mut self, default: Action, rules: &[CheckedRule<'a>]) -> Vec<(u32, Label)> {
        let default = self.return_label(default);
        let mut ranges: Vec<(u32, Label)> = Vec::new();
        let mut add = |start: u32, target: Label| {
            if ranges.last().map(|&(_, last)| last) != Some(target) {
                ranges.push((start, target));
            }
        };
        let mut next = 0;
        for rule in rules {
            if rule.nr > next {
                add(next, default);
            }
            add(rule.nr, self.dispatch_target(rule));
            next = rule.nr + 1;
        }
        if next < abi::X32_SYSCALL_BIT {
            add(next, default);
        }
        ranges
    }

    /// Binary search on the ranges with A = nr: `jge` on the first number of
    /// the upper half splits them, and a half that is one range is its target.
    fn tree(&mut self, ranges: &[(u32, Label)]) -> Result<(), CompileError> {
        match ranges {
            // `ranges` always covers 0; were it ever empty, fail closed.
            [] => {
                let kill = self.return_label(Action::KillProcess);
                self.builder.jump(kill);
                Ok(())
            }
            [(_, target)] => {
                self.builder.jump(*target);
                Ok(())
            }
            _ => {
                let (low, high) = ranges.split_at(ranges.len() / 2);
                let (low_label, high_label) = (self.subtree(low), self.subtree(high));
                self.builder
                    .jump_if(JumpOp::Ge, high[0].0, high_label, low_label);
                for (half, label) in [(low, low_label), (high, high_label)] {
                    if half.len() > 1 {
                        self.builder.bind(label)?;
                        self.tree(half)?;
                    }
                }
                Ok(())
            }
        }
    }

    /// The label a split jumps to for `ranges`: the target of a single range,
    /// else a fresh label for the subtree.
    fn subtree(&mut self, ranges: &[(u32, Label)]) -> Label {
        match ranges {
            [(_, target)] => *target,
            _ => self.builder.new_label(),
        }
    }

    fn handlers(&mut self) -> Result<(), CompileError> {
        for handler in self.handlers.clone() {
            self.handler(&handler)?;
        }
        Ok(())
    }

    /// Conditions in order, first hit wins; the last miss goes to `otherwise`.
    /// An argument is loaded once for a run of conditions on it.
    fn handler(&mut self, handler: &Handler<'a>) -> Result<(), CompileError> {
        self.builder.bind(handler.label)?;
        let mut loaded = None;
        for (index, condition) in handler.conditions.iter().enumerate() {
            if loaded != Some(condition.arg) {
                let offset = abi::arg_low_offset(condition.arg).ok_or(
                    CompileError::ArgumentIndexOutOfRange {
                        name: handler.name,
                        arg: condition.arg,
                    },
                )?;
                self.builder.load_word(offset);
                loaded = Some(condition.arg);
            }
            let hit = self.return_label(condition.action);
            let last = index + 1 == handler.conditions.len();
            let miss = if last {
                self.return_label(handler.otherwise)
            } else {
                self.builder.new_label()
            };
            let (op, k, on_true, on_false) = match condition.test {
                ArgTest::Equals(value) => (JumpOp::Eq, value, hit, miss),
                ArgTest::AnyBitsSet(mask) => (JumpOp::Set, mask, hit, miss),
                ArgTest::NoBitsSet(mask) => (JumpOp::Set, mask, miss, hit),
            };
            self.builder.jump_if(op, k, on_true, on_false);
            if !last {
                self.builder.bind(miss)?;
            }
        }
        Ok(())
    }

    fn returns(&mut self) -> Result<(), CompileError> {
        for (action, label) in self.returns.clone() {
            self.builder.bind(label)?;
            self.builder.ret(action.seccomp_ret());
        }
        Ok(())
    }
}
