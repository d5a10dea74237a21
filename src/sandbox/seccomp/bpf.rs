//! Classic BPF instructions and a small program builder with labels. Jumps
//! name a [`Label`] instead of an offset; [`ProgramBuilder::finish`] lays the
//! program out and resolves them. Conditional jump offsets are only 8 bits
//! wide, so a conditional whose target lies more than 255 instructions ahead
//! gets a `ja` trampoline (32-bit offset) right after it. Classic BPF only
//! jumps forward, which keeps every program loop-free; jumping back is an
//! error here, as in the kernel.

use thiserror::Error;

pub use crate::sys::SockFilter;

impl SockFilter {
    /// A non-jump instruction.
    pub const fn stmt(code: u16, k: u32) -> Self {
        Self {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }

    /// A conditional jump with resolved offsets.
    pub const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Self {
        Self { code, jt, jf, k }
    }

    /// The instruction's 8 bytes as the kernel reads them on x86_64 (little
    /// endian). This serialization is what a filter id hashes, so it must
    /// never change.
    pub fn to_le_bytes(self) -> [u8; 8] {
        let [c0, c1] = self.code.to_le_bytes();
        let [k0, k1, k2, k3] = self.k.to_le_bytes();
        [c0, c1, self.jt, self.jf, k0, k1, k2, k3]
    }
}

impl From<SockFilter> for libc::sock_filter {
    fn from(insn: SockFilter) -> Self {
        libc::sock_filter {
            code: insn.code,
            jt: insn.jt,
            jf: insn.jf,
            k: insn.k,
        }
    }
}

/// The opcodes this module emits and its interpreter accepts.
pub mod op {
    // libc spells these as u32 bit fields; every combination fits in u16.
    const fn code(bits: u32) -> u16 {
        bits as u16
    }

    /// `BPF_LD|BPF_W|BPF_ABS`: A = the 32-bit word at offset k.
    pub const LD_W_ABS: u16 = code(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS);
    /// `BPF_JMP|BPF_JEQ|BPF_K`: jump on A == k.
    pub const JEQ_K: u16 = code(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K);
    /// `BPF_JMP|BPF_JGT|BPF_K`: jump on A > k (unsigned).
    pub const JGT_K: u16 = code(libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K);
    /// `BPF_JMP|BPF_JGE|BPF_K`: jump on A >= k (unsigned).
    pub const JGE_K: u16 = code(libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K);
    /// `BPF_JMP|BPF_JSET|BPF_K`: jump on A & k != 0.
    pub const JSET_K: u16 = code(libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K);
    /// `BPF_JMP|BPF_JA`: skip k instructions unconditionally.
    pub const JA: u16 = code(libc::BPF_JMP | libc::BPF_JA);
    /// `BPF_RET|BPF_K`: return k.
    pub const RET_K: u16 = code(libc::BPF_RET | libc::BPF_K);
}

/// The test of a conditional jump; all compare the accumulator with `k`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JumpOp {
    /// A == k.
    Eq,
    /// A > k, unsigned.
    Gt,
    /// A >= k, unsigned.
    Ge,
    /// A & k != 0.
    Set,
}

impl JumpOp {
    /// The opcode of this test with a constant operand.
    pub const fn code(self) -> u16 {
        match self {
            JumpOp::Eq => op::JEQ_K,
            JumpOp::Gt => op::JGT_K,
            JumpOp::Ge => op::JGE_K,
            JumpOp::Set => op::JSET_K,
        }
    }
}

/// A jump target, created by [`ProgramBuilder::new_label`] and placed once
/// with [`ProgramBuilder::bind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Label(usize);

/// Why a program could not be laid out.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BpfError {
    /// A label was bound twice.
    #[error("label {0} is bound twice")]
    LabelBoundTwice(usize),
    /// A label that this builder did not create.
    #[error("label {0} was not created by this builder")]
    UnknownLabel(usize),
    /// A jump names a label that was never bound.
    #[error("label {0} is used but never bound")]
    UnboundLabel(usize),
    /// A jump goes backwards or to itself; classic BPF only jumps forward.
    #[error("jump at item {item} to label {label} does not go forward")]
    BackwardJump {
        /// The jumping item.
        item: usize,
        /// The label it names.
        label: usize,
    },
    /// A label is bound after the last instruction.
    #[error("label {0} points past the last instruction")]
    LabelPastEnd(usize),
    /// A jump is farther than even `ja` can reach.
    #[error("jump at instruction {0} is out of reach")]
    JumpOutOfReach(usize),
}

#[derive(Clone, Copy, Debug)]
enum Item {
    Stmt(SockFilter),
    Cond {
        op: JumpOp,
        k: u32,
        jt: Label,
        jf: Label,
    },
    Ja(Label),
}

/// Builds a program from statements and label-addressed jumps.
#[derive(Debug, Default)]
pub struct ProgramBuilder {
    items: Vec<Item>,
    /// For each label, the index of the item it is bound before.
    labels: Vec<Option<usize>>,
}

impl ProgramBuilder {
    /// An empty program.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh, unbound label.
    pub fn new_label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Places `label` at the next instruction to be pushed.
    pub fn bind(&mut self, label: Label) -> Result<(), BpfError> {
        match self.labels.get_mut(label.0) {
            Some(slot @ None) => {
                *slot = Some(self.items.len());
                Ok(())
            }
            Some(Some(_)) => Err(BpfError::LabelBoundTwice(label.0)),
            None => Err(BpfError::UnknownLabel(label.0)),
        }
    }

    /// `A = *(u32 *)(data + offset)`.
    pub fn load_word(&mut self, offset: u32) {
        self.items
            .push(Item::Stmt(SockFilter::stmt(op::LD_W_ABS, offset)));
    }

    /// `return value`.
    pub fn ret(&mut self, value: u32) {
        self.items
            .push(Item::Stmt(SockFilter::stmt(op::RET_K, value)));
    }

    /// `if (A op k) goto jt else goto jf`.
    pub fn jump_if(&mut self, op: JumpOp, k: u32, jt: Label, jf: Label) {
        self.items.push(Item::Cond { op, k, jt, jf });
    }

    /// `goto target`.
    pub fn jump(&mut self, target: Label) {
        self.items.push(Item::Ja(target));
    }

    /// Resolves every label and returns the instructions.
    pub fn finish(self) -> Result<Vec<SockFilter>, BpfError> {
        let targets = self.resolve_targets()?;
        let trampolines = self.plan_trampolines(&targets);
        let addresses = self.layout(&trampolines);
        let mut program = Vec::with_capacity(addresses.last().copied().unwrap_or(0));
        for (index, item) in self.items.iter().enumerate() {
            let here = addresses[index];
            let to = |label: Label| addresses[targets[label.0]];
            match *item {
                Item::Stmt(insn) => program.push(insn),
                Item::Ja(label) => program.push(ja(here, to(label))?),
                Item::Cond { op, k, jt, jf } => {
                    // Trampolines sit right after the jump: true branch first.
                    let (far_t, far_f) = trampolines[index];
                    let bounce_t = here + 1;
                    let bounce_f = here + 1 + usize::from(far_t);
                    let jt_off = offset_u8(here, if far_t { bounce_t } else { to(jt) })?;
                    let jf_off = offset_u8(here, if far_f { bounce_f } else { to(jf) })?;
                    program.push(SockFilter::jump(op.code(), k, jt_off, jf_off));
                    if far_t {
                        program.push(ja(bounce_t, to(jt))?);
                    }
                    if far_f {
                        program.push(ja(bounce_f, to(jf))?);
                    }
                }
            }
        }
        Ok(program)
    }

    /// For each label some jump names, the item it points at; refuses
    /// unbound labels, labels past the end and jumps that do not go forward.
    /// Labels no jump names map to item 0 and are never read.
    fn resolve_targets(&self) -> Result<Vec<usize>, BpfError> {
        let mut targets = vec![0; self.labels.len()];
        for (item, used) in self.items.iter().enumerate() {
            for label in labels_of(used) {
                let target = match self.labels.get(label.0) {
                    Some(Some(target)) if *target < self.items.len() => *target,
                    Some(Some(_)) => return Err(BpfError::LabelPastEnd(label.0)),
                    Some(None) => return Err(BpfError::UnboundLabel(label.0)),
                    None => return Err(BpfError::UnknownLabel(label.0)),
                };
                if target <= item {
                    return Err(BpfError::BackwardJump {
                        item,
                        label: label.0,
                    });
                }
                targets[label.0] = target;
            }
        }
        Ok(targets)
    }

    /// Which conditional jumps need a `ja` trampoline for their true and
    /// false branch. Adding a trampoline only moves code further apart, so
    /// the flags only ever switch on and the loop reaches a fixed point.
    fn plan_trampolines(&self, targets: &[usize]) -> Vec<(bool, bool)> {
        let mut far = vec![(false, false); self.items.len()];
        loop {
            let addresses = self.layout(&far);
            let mut changed = false;
            for (index, item) in self.items.iter().enumerate() {
                if let Item::Cond { jt, jf, .. } = *item {
                    let skip = |label: Label| addresses[targets[label.0]] - (addresses[index] + 1);
                    let (far_t, far_f) = far[index];
                    let wanted = (far_t || skip(jt) > 255, far_f || skip(jf) > 255);
                    changed |= wanted != far[index];
                    far[index] = wanted;
                }
            }
            if !changed {
                return far;
            }
        }
    }

    /// The address of each item, plus one past the end.
    fn layout(&self, far: &[(bool, bool)]) -> Vec<usize> {
        let mut addresses = Vec::with_capacity(self.items.len() + 1);
        let mut next = 0;
        for (item, (far_t, far_f)) in self.items.iter().zip(far) {
            addresses.push(next);
            next += match item {
                Item::Cond { .. } => 1 + usize::from(*far_t) + usize::from(*far_f),
                _ => 1,
            };
        }
        addresses.push(next);
        addresses
    }
}

fn labels_of(item: &Item) -> Vec<Label> {
    match *item {
        Item::Stmt(_) => Vec::new(),
        Item::Cond { jt, jf, .. } => vec![jt, jf],
        Item::Ja(label) => vec![label],
    }
}

/// The 8-bit skip from the jump at `from` to `to`.
fn offset_u8(from: usize, to: usize) -> Result<u8, BpfError> {
    to.checked_sub(from + 1)
        .and_then(|skip| u8::try_from(skip).ok())
        .ok_or(BpfError::JumpOutOfReach(from))
}

/// A `ja` at `from` that lands on `to`.
fn ja(from: usize, to: usize) -> Result<SockFilter, BpfError> {
    to.checked_sub(from + 1)
        .and_then(|skip| u32::try_from(skip).ok())
        .map(|skip| SockFilter::stmt(op::JA, skip))
        .ok_or(BpfError::JumpOutOfReach(from))
}
