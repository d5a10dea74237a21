//! Tests of the BPF builder: labels resolve to the right instructions, far
//! conditional targets get `ja` trampolines that keep both branches right,
//! malformed label use is refused, and `SockFilter` has the kernel's layout.

use std::mem::{align_of, offset_of, size_of};

use super::abi::{Arch, SeccompData};
use super::bpf::{op, BpfError, JumpOp, ProgramBuilder, SockFilter};
use super::policy::ArgTest;
use super::{compile, interp, Action, Condition, Policy, SyscallRule};

fn run_with_nr(program: &[SockFilter], nr: i32) -> u32 {
    interp::run(program, &SeccompData::x86_64(nr, [0; 6])).unwrap()
}

#[test]
fn sock_filter_has_the_kernel_layout() {
    assert_eq!(size_of::<SockFilter>(), 8);
    assert_eq!(size_of::<SockFilter>(), size_of::<libc::sock_filter>());
    assert_eq!(align_of::<SockFilter>(), align_of::<libc::sock_filter>());
    assert_eq!(
        offset_of!(SockFilter, jt),
        offset_of!(libc::sock_filter, jt)
    );
    assert_eq!(
        offset_of!(SockFilter, jf),
        offset_of!(libc::sock_filter, jf)
    );
    assert_eq!(offset_of!(SockFilter, k), offset_of!(libc::sock_filter, k));
    let insn = SockFilter::jump(op::JEQ_K, 0x1234_5678, 1, 2);
    assert_eq!(
        insn.to_le_bytes(),
        [0x15, 0x00, 1, 2, 0x78, 0x56, 0x34, 0x12]
    );
    let raw = libc::sock_filter::from(insn);
    assert_eq!((raw.code, raw.jt, raw.jf, raw.k), (0x15, 1, 2, 0x1234_5678));
}

#[test]
fn labels_resolve_to_forward_offsets() {
    let mut builder = ProgramBuilder::new();
    let (yes, no) = (builder.new_label(), builder.new_label());
    builder.load_word(0);
    builder.jump_if(JumpOp::Eq, 7, yes, no);
    builder.bind(no).unwrap();
    builder.ret(0);
    builder.bind(yes).unwrap();
    builder.ret(1);
    let program = builder.finish().unwrap();
    assert_eq!(program[1], SockFilter::jump(op::JEQ_K, 7, 1, 0));
    assert_eq!(run_with_nr(&program, 7), 1);
    assert_eq!(run_with_nr(&program, 8), 0);
}

/// `if nr == 1` with each branch going either to the next instruction or
/// past `gap` filler returns (true branch: 200, false branch: 300).
fn far_program(gap: usize, far_true: bool, far_false: bool) -> Vec<SockFilter> {
    let mut builder = ProgramBuilder::new();
    let (near, far_t, far_f) = (
        builder.new_label(),
        builder.new_label(),
        builder.new_label(),
    );
    builder.load_word(0);
    let jt = if far_true { far_t } else { near };
    let jf = if far_false { far_f } else { near };
    builder.jump_if(JumpOp::Eq, 1, jt, jf);
    builder.bind(near).unwrap();
    builder.ret(100);
    for filler in 0..gap {
        builder.ret(u32::try_from(filler).unwrap());
    }
    builder.bind(far_t).unwrap();
    builder.ret(200);
    builder.bind(far_f).unwrap();
    builder.ret(300);
    builder.finish().unwrap()
}

#[test]
fn far_conditional_targets_get_ja_trampolines() {
    for (far_true, far_false) in [(true, false), (false, true), (true, true)] {
        for gap in [250, 253, 254, 255, 256, 1000] {
            let program = far_program(gap, far_true, far_false);
            let hit = if far_true { 200 } else { 100 };
            let miss = if far_false { 300 } else { 100 };
            assert_eq!(run_with_nr(&program, 1), hit, "gap {gap}");
            assert_eq!(run_with_nr(&program, 2), miss, "gap {gap}");
            let trampolines = program.iter().filter(|insn| insn.code == op::JA).count();
            let needed = usize::from(far_true) + usize::from(far_false);
            if gap >= 256 {
                assert_eq!(trampolines, needed, "gap {gap}");
            } else if gap <= 250 {
                assert_eq!(trampolines, 0, "gap {gap}");
            }
        }
    }
}

#[test]
fn a_policy_too_big_for_short_jumps_still_compiles_right() {
    let rules = (0..400)
        .map(|nr| SyscallRule {
            name: "many",
            nr,
            conditions: vec![Condition::new(
                2,
                ArgTest::Equals(u32::try_from(nr).unwrap()),
                Action::Errno(1),
            )],
            otherwise: if nr % 2 == 0 {
                Action::Allow
            } else {
                Action::KillProcess
            },
        })
        .collect();
    let policy = Policy {
        arch: Arch::X86_64,
        default: Action::Errno(38),
        rules,
    };
    let filter = compile(&policy).unwrap();
    assert!(filter.instructions.iter().any(|insn| insn.code == op::JA));
    for nr in 0..450 {
        for arg in [
            0,
            1,
            u64::try_from(nr).unwrap(),
            1 << 32 | u64::try_from(nr).unwrap(),
        ] {
            let data = SeccompData::x86_64(nr, [0, 0, arg, 0, 0, 0]);
            let got = interp::run(&filter.instructions, &data).unwrap();
            assert_eq!(got, policy.evaluate(&data).seccomp_ret(), "{data:?}");
        }
    }
}

#[test]
fn malformed_label_use_is_refused() {
    let mut builder = ProgramBuilder::new();
    let unbound = builder.new_label();
    builder.jump(unbound);
    builder.ret(0);
    assert_eq!(builder.finish(), Err(BpfError::UnboundLabel(0)));

    let mut builder = ProgramBuilder::new();
    let twice = builder.new_label();
    builder.bind(twice).unwrap();
    assert_eq!(builder.bind(twice), Err(BpfError::LabelBoundTwice(0)));

    let mut builder = ProgramBuilder::new();
    let back = builder.new_label();
    builder.bind(back).unwrap();
    builder.jump(back);
    builder.ret(0);
    assert_eq!(
        builder.finish(),
        Err(BpfError::BackwardJump { item: 0, label: 0 })
    );

    let mut builder = ProgramBuilder::new();
    let end = builder.new_label();
    builder.jump(end);
    builder.bind(end).unwrap();
    assert_eq!(builder.finish(), Err(BpfError::LabelPastEnd(0)));

    let mut other = ProgramBuilder::new();
    let foreign = other.new_label();
    let mut builder = ProgramBuilder::new();
    assert_eq!(builder.bind(foreign), Err(BpfError::UnknownLabel(0)));
    builder.jump(foreign);
    builder.ret(0);
    assert_eq!(builder.finish(), Err(BpfError::UnknownLabel(0)));
}
