//! A pure interpreter for the classic-BPF subset this module emits, so a
//! filter can be tested value for value without a kernel. [`check`] refuses
//! what the kernel's loader would refuse for these opcodes (empty or too long
//! programs, jumps past the end, misaligned or out-of-bounds loads, a last
//! instruction that is not a `ret`) and every opcode outside the subset;
//! [`run`] (built for the tests) checks first, then executes. Jumps only go
//! forward, so a checked program always terminates within its length.

use thiserror::Error;

#[cfg(test)]
use super::abi::SeccompData;
use super::abi::SECCOMP_DATA_SIZE;
use super::bpf::{op, SockFilter};

/// `BPF_MAXINSNS`: the kernel refuses longer filters.
pub(crate) const MAX_INSTRUCTIONS: usize = 4096;

/// Why a program was refused or could not be run.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InterpError {
    /// The program has no instructions.
    #[error("program is empty")]
    Empty,
    /// The program is longer than [`MAX_INSTRUCTIONS`].
    #[error("program has {0} instructions, more than {MAX_INSTRUCTIONS}")]
    TooLong(usize),
    /// An opcode outside the supported subset.
    #[error("unsupported opcode {code:#06x} at instruction {pc}")]
    UnknownOpcode {
        /// Index of the instruction.
        pc: usize,
        /// Its opcode.
        code: u16,
    },
    /// A jump lands past the last instruction.
    #[error("jump at instruction {pc} lands past the end")]
    JumpOutOfRange {
        /// Index of the jump.
        pc: usize,
    },
    /// A load that is misaligned or outside `struct seccomp_data`.
    #[error("load at instruction {pc} reads offset {offset}, outside seccomp_data or misaligned")]
    BadLoad {
        /// Index of the load.
        pc: usize,
        /// The offset it reads.
        offset: u32,
    },
    /// The last instruction is not a `ret`, so execution could fall off.
    #[error("last instruction is not a return")]
    MissingReturn,
}

/// Checks `program` as the kernel would before accepting it.
pub(crate) fn check(program: &[SockFilter]) -> Result<(), InterpError> {
    if program.is_empty() {
        return Err(InterpError::Empty);
    }
    if program.len() > MAX_INSTRUCTIONS {
        return Err(InterpError::TooLong(program.len()));
    }
    for (pc, insn) in program.iter().enumerate() {
        check_instruction(program.len(), pc, *insn)?;
    }
    match program.last() {
        Some(insn) if insn.code == op::RET_K => Ok(()),
        _ => Err(InterpError::MissingReturn),
    }
}

fn check_instruction(len: usize, pc: usize, insn: SockFilter) -> Result<(), InterpError> {
    let lands = |skip: usize| pc.checked_add(1 + skip).is_some_and(|target| target < len);
    let in_range = match insn.code {
        op::LD_W_ABS => {
            let fits = (insn.k as usize) < SECCOMP_DATA_SIZE && insn.k.is_multiple_of(4);
            return if fits {
                Ok(())
            } else {
                Err(InterpError::BadLoad { pc, offset: insn.k })
            };
        }
        op::RET_K => true,
        op::JA => usize::try_from(insn.k).is_ok_and(lands),
        op::JEQ_K | op::JGT_K | op::JGE_K | op::JSET_K => {
            lands(insn.jt.into()) && lands(insn.jf.into())
        }
        code => return Err(InterpError::UnknownOpcode { pc, code }),
    };
    if in_range {
        Ok(())
    } else {
        Err(InterpError::JumpOutOfRange { pc })
    }
}

/// Runs `program` on `data` and returns what the filter returns (a
/// `SECCOMP_RET_*` value). The program is checked first, so a program the
/// kernel would refuse is an error even if the bad instruction is never reached.
#[cfg(test)]
pub(crate) fn run(program: &[SockFilter], data: &SeccompData) -> Result<u32, InterpError> {
    run_counting_steps(program, data).map(|(value, _)| value)
}

/// Like [`run`], but also returns how many instructions were executed, the
/// cost the kernel pays on this path (the `ret` included).
#[cfg(test)]
pub(crate) fn run_counting_steps(
    program: &[SockFilter],
    data: &SeccompData,
) -> Result<(u32, usize), InterpError> {
    check(program)?;
    let bytes = data.to_bytes();
    let mut accumulator = 0u32;
    let mut pc = 0usize;
    // Each step moves pc forward by at least one, so this ends within
    // `program.len()` steps; the bound makes that plain.
    for step in 1..=program.len() {
        let insn = *program.get(pc).ok_or(InterpError::JumpOutOfRange { pc })?;
        let skip = match insn.code {
            op::LD_W_ABS => {
                accumulator =
                    load_word(&bytes, insn.k).ok_or(InterpError::BadLoad { pc, offset: insn.k })?;
                0
            }
            op::RET_K => return Ok((insn.k, step)),
            op::JA => usize::try_from(insn.k).map_err(|_| InterpError::JumpOutOfRange { pc })?,
            op::JEQ_K => branch(accumulator == insn.k, insn),
            op::JGT_K => branch(accumulator > insn.k, insn),
            op::JGE_K => branch(accumulator >= insn.k, insn),
            op::JSET_K => branch(accumulator & insn.k != 0, insn),
            code => return Err(InterpError::UnknownOpcode { pc, code }),
        };
        pc = pc
            .checked_add(1 + skip)
            .ok_or(InterpError::JumpOutOfRange { pc })?;
    }
    Err(InterpError::MissingReturn)
}

#[cfg(test)]
fn branch(taken: bool, insn: SockFilter) -> usize {
    usize::from(if taken { insn.jt } else { insn.jf })
}

#[cfg(test)]
fn load_word(bytes: &[u8; SECCOMP_DATA_SIZE], offset: u32) -> Option<u32> {
    let start = usize::try_from(offset).ok()?;
    let word = bytes.get(start..start.checked_add(4)?)?;
    Some(u32::from_le_bytes([word[0], word[1], word[2], word[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::seccomp::abi::AUDIT_ARCH_X86_64;

    fn ret(k: u32) -> SockFilter {
        SockFilter::stmt(op::RET_K, k)
    }

    #[test]
    fn loads_compare_and_return() {
        let program = [
            SockFilter::stmt(op::LD_W_ABS, 4),
            SockFilter::jump(op::JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
            ret(1),
            SockFilter::stmt(op::LD_W_ABS, 16),
            SockFilter::jump(op::JSET_K, 0x10, 0, 1),
            ret(2),
            SockFilter::jump(op::JGT_K, 5, 0, 1),
            ret(3),
            SockFilter::jump(op::JGE_K, 5, 0, 1),
            SockFilter::stmt(op::JA, 1),
            ret(4),
            ret(5),
        ];
        let with_arg = |arg| run(&program, &SeccompData::x86_64(0, [arg, 0, 0, 0, 0, 0])).unwrap();
        assert_eq!(with_arg(0x10), 2);
        assert_eq!(with_arg(6), 3);
        assert_eq!(with_arg(5), 5);
        assert_eq!(with_arg(4), 4);
        let foreign = SeccompData {
            arch: 3,
            ..SeccompData::x86_64(0, [0; 6])
        };
        assert_eq!(run(&program, &foreign).unwrap(), 1);
    }

    #[test]
    fn programs_the_kernel_would_refuse_are_errors() {
        let data = SeccompData::x86_64(0, [0; 6]);
        assert_eq!(run(&[], &data), Err(InterpError::Empty));
        assert_eq!(
            run(&vec![ret(0); MAX_INSTRUCTIONS + 1], &data),
            Err(InterpError::TooLong(4097))
        );
        let alu_and = SockFilter::stmt(0x54, 1);
        assert_eq!(
            run(&[alu_and, ret(0)], &data),
            Err(InterpError::UnknownOpcode { pc: 0, code: 0x54 })
        );
        let far = SockFilter::jump(op::JEQ_K, 0, 0, 1);
        assert_eq!(
            run(&[far, ret(0)], &data),
            Err(InterpError::JumpOutOfRange { pc: 0 })
        );
        let ja_far = SockFilter::stmt(op::JA, u32::MAX);
        assert_eq!(
            run(&[ja_far, ret(0)], &data),
            Err(InterpError::JumpOutOfRange { pc: 0 })
        );
        for offset in [2, 64, u32::MAX] {
            let load = SockFilter::stmt(op::LD_W_ABS, offset);
            assert_eq!(
                run(&[load, ret(0)], &data),
                Err(InterpError::BadLoad { pc: 0, offset })
            );
        }
        let no_ret = SockFilter::stmt(op::LD_W_ABS, 0);
        assert_eq!(
            run(&[ret(0), no_ret], &data),
            Err(InterpError::MissingReturn)
        );
    }

    #[test]
    fn an_unreached_bad_instruction_is_still_refused() {
        let data = SeccompData::x86_64(0, [0; 6]);
        let program = [ret(7), SockFilter::stmt(0xffff, 0), ret(0)];
        assert_eq!(
            run(&program, &data),
            Err(InterpError::UnknownOpcode {
                pc: 1,
                code: 0xffff
            })
        );
    }
}
