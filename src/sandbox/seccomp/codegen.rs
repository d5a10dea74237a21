//! Turns checked policy rules into a classic-BPF program. The shape is fixed:
//! a prologue kills foreign architectures and x32 numbers, a binary search
//! tree on the syscall number (`jge` on sorted numbers, `jeq` at the leaves)
//! dispatches to a per-syscall handler or straight to a return, handlers test
//! the low 32 bits of arguments, and one `ret` per distinct action ends the
//! program. Everything jumps forward, so the program is loop-free.

use super::abi;
use super::bpf::{JumpOp, Label, ProgramBuilder, SockFilter};
use super::policy::{Action, ArgTest, CheckedRule, Condition};
use super::CompileError;

/// The program for `rules` (sorted by number, no duplicates) with `default`
/// for every syscall they do not list.
pub(super) fn generate(
    default: Action,
    rules: &[CheckedRule<'_>],
) -> Result<Vec<SockFilter>, CompileError> {
    let mut gen = Codegen::default();
    gen.prologue()?;
    let entries: Vec<(u32, Label)> = rules
        .iter()
        .map(|rule| (rule.nr, gen.dispatch_target(rule)))
        .collect();
    let default_label = gen.return_label(default);
    gen.tree(&entries, default_label)?;
    gen.handlers()?;
    gen.returns()?;
    Ok(gen.builder.finish()?)
}

/// Argument tests shared by every syscall whose rule has the same conditions
/// (socket and socketpair), so each distinct handler is emitted once.
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
    /// Kill calls from any other architecture (i386 `int 0x80`, …) and x32
    /// numbers before looking at the number: the same number means another
    /// syscall under another ABI (threats S5). Leaves `nr` in A.
    fn prologue(&mut self) -> Result<(), CompileError> {
        let kill = self.return_label(Action::KillProcess);
        let native = self.builder.new_label();
        self.builder.load_word(abi::OFFSET_ARCH);
        self.builder
            .jump_if(JumpOp::Eq, abi::AUDIT_ARCH_X86_64, native, kill);
        self.builder.bind(native)?;
        let plain = self.builder.new_label();
        self.builder.load_word(abi::OFFSET_NR);
        self.builder
            .jump_if(JumpOp::Ge, abi::X32_SYSCALL_BIT, kill, plain);
        Ok(self.builder.bind(plain)?)
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

    /// Binary search on the sorted numbers with A = nr: `jge` splits the
    /// range in halves, a leaf checks its one number with `jeq`.
    fn tree(&mut self, entries: &[(u32, Label)], default: Label) -> Result<(), CompileError> {
        match entries {
            [] => self.builder.jump(default),
            [(nr, target)] => self.builder.jump_if(JumpOp::Eq, *nr, *target, default),
            _ => {
                let (left, right) = entries.split_at(entries.len() / 2);
                let (left_label, right_label) =
                    (self.builder.new_label(), self.builder.new_label());
                self.builder
                    .jump_if(JumpOp::Ge, right[0].0, right_label, left_label);
                self.builder.bind(left_label)?;
                self.tree(left, default)?;
                self.builder.bind(right_label)?;
                self.tree(right, default)?;
            }
        }
        Ok(())
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
            let (op, k) = match condition.test {
                ArgTest::Equals(value) => (JumpOp::Eq, value),
                ArgTest::AnyBitsSet(mask) => (JumpOp::Set, mask),
            };
            self.builder.jump_if(op, k, hit, miss);
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
