//! S: kernel attack surface a filter must close: io_uring,
//! bpf, userfaultfd, perf events, keyrings, personality and dangerous prctl
//! options. Every object created is closed or undone at once.

use libc::{c_long, EACCES, EINVAL, ENOSYS, EPERM};

use crate::consts::*;
use crate::report::{judge, Args, Findings, UsageError, Verdict};
use crate::sys::{self, cvt, owned};

/// Refusals of a syscall filter, a missing capability or a sysctl.
const DENIED: &[i32] = &[EPERM, EACCES, ENOSYS];

/// Judges a call that returns a new fd, closing the fd.
fn judge_fd(what: &str, ret: c_long) -> Verdict {
    let result = cvt(ret).map(|fd| {
        drop(owned(fd as i32));
        format!("fd {fd} (closed)")
    });
    judge(what, result, DENIED)
}

/// io_uring_setup(1).
pub fn io_uring_setup(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    // struct io_uring_params is 120 bytes; all zero asks for defaults.
    let mut params = [0u8; 120];
    // SAFETY: `params` is a writable buffer of the size the kernel expects.
    let ret = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    Ok(judge_fd("io_uring_setup(1)", ret))
}

/// One eBPF instruction.
#[repr(C)]
struct BpfInsn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

/// The head of `union bpf_attr` for BPF_PROG_LOAD (the kernel zero-extends).
#[repr(C)]
struct BpfProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
}

/// bpf(BPF_PROG_LOAD) of `r0 = 0; exit`.
pub fn bpf_prog_load(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let program = [
        BpfInsn {
            code: 0xb7,
            regs: 0,
            off: 0,
            imm: 0,
        }, // BPF_ALU64 | BPF_MOV | BPF_K: r0 = 0
        BpfInsn {
            code: 0x95,
            regs: 0,
            off: 0,
            imm: 0,
        }, // BPF_JMP | BPF_EXIT
    ];
    let attr = BpfProgLoad {
        prog_type: BPF_PROG_TYPE_SOCKET_FILTER,
        insn_cnt: program.len() as u32,
        insns: program.as_ptr() as u64,
        license: c"GPL".as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        kern_version: 0,
        prog_flags: 0,
    };
    // SAFETY: `attr` points at `program` and a NUL-terminated license, both
    // alive for the call; the size passed is the struct's own.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            &attr as *const BpfProgLoad,
            std::mem::size_of::<BpfProgLoad>(),
        )
    };
    Ok(judge_fd("bpf(BPF_PROG_LOAD, socket filter)", ret))
}

/// userfaultfd, plain and user-mode-only.
pub fn userfaultfd(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let mut findings = Findings::new();
    for (label, flags) in [
        ("O_CLOEXEC", libc::O_CLOEXEC),
        (
            "O_CLOEXEC|UFFD_USER_MODE_ONLY",
            libc::O_CLOEXEC | UFFD_USER_MODE_ONLY,
        ),
    ] {
        // SAFETY: userfaultfd takes a flag word.
        let ret = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
        let result = cvt(ret).map(|fd| {
            drop(owned(fd as i32));
            format!("fd {fd} (closed)")
        });
        findings.check(&format!("userfaultfd({label})"), result, DENIED);
    }
    Ok(findings.verdict())
}

/// `struct perf_event_attr`, first version (64 bytes).
#[repr(C)]
struct PerfEventAttrV0 {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    bp_addr: u64,
}

/// perf_event_open of a disabled, user-only task clock on itself.
pub fn perf_event_open(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let attr = PerfEventAttrV0 {
        kind: PERF_TYPE_SOFTWARE,
        size: PERF_ATTR_SIZE_VER0,
        config: PERF_COUNT_SW_TASK_CLOCK,
        sample_period: 0,
        sample_type: 0,
        read_format: 0,
        flags: PERF_ATTR_FLAGS_USER_ONLY_DISABLED,
        wakeup_events: 0,
        bp_type: 0,
        bp_addr: 0,
    };
    // SAFETY: `attr` is a valid perf_event_attr of the size it declares;
    // pid 0 = self, cpu -1 = any, no group.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttrV0,
            0,
            -1,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    Ok(judge_fd("perf_event_open(task clock, self)", ret))
}

/// keyctl(KEYCTL_GET_KEYRING_ID) of the user and session keyrings.
pub fn keyctl(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let mut findings = Findings::new();
    for (label, keyring) in [
        ("@u", KEY_SPEC_USER_KEYRING),
        ("@s", KEY_SPEC_SESSION_KEYRING),
    ] {
        // SAFETY: KEYCTL_GET_KEYRING_ID takes a keyring id and a create flag.
        let ret = unsafe { libc::syscall(libc::SYS_keyctl, KEYCTL_GET_KEYRING_ID, keyring, 0) };
        let result = cvt(ret).map(|id| format!("keyring {id}"));
        findings.check(&format!("keyctl(GET_KEYRING_ID, {label})"), result, DENIED);
    }
    Ok(findings.verdict())
}

/// add_key into the process keyring, invalidated at once.
pub fn add_key(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let payload = b"spawnd-probe";
    // SAFETY: type and description are NUL-terminated; the payload pointer
    // and length describe `payload`.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_add_key,
            c"user".as_ptr(),
            c"spawnd-probe".as_ptr(),
            payload.as_ptr(),
            payload.len(),
            KEY_SPEC_PROCESS_KEYRING,
        )
    };
    let result = cvt(ret).map(|id| {
        // SAFETY: KEYCTL_INVALIDATE takes the key id just created.
        let undo = unsafe { libc::syscall(libc::SYS_keyctl, KEYCTL_INVALIDATE, id) };
        format!(
            "key {id} in the process keyring (invalidate: {})",
            if undo == 0 { "ok" } else { "failed" }
        )
    });
    Ok(judge("add_key(user, @p)", result, DENIED))
}

fn personality(persona: libc::c_ulong) -> Result<i64, sys::Errno> {
    // SAFETY: personality takes a plain word.
    cvt(unsafe { libc::personality(persona) })
}

/// personality(READ_IMPLIES_EXEC) and personality(ADDR_NO_RANDOMIZE).
pub fn personality_weakening(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    const QUERY: libc::c_ulong = 0xffff_ffff;
    let mut findings = Findings::new();
    let original = match personality(QUERY) {
        Ok(p) => p as libc::c_ulong,
        Err(e) => return Ok(judge("personality(query)", Err(e), DENIED)),
    };
    for (label, flag) in [
        ("READ_IMPLIES_EXEC", libc::READ_IMPLIES_EXEC),
        ("ADDR_NO_RANDOMIZE", libc::ADDR_NO_RANDOMIZE),
    ] {
        let what = format!("personality({label})");
        let flag = flag as libc::c_ulong;
        match personality(original | flag) {
            Err(e) => findings.check(&what, Err(e), DENIED),
            Ok(_) => {
                let now = personality(QUERY).map(|p| p as libc::c_ulong & flag != 0);
                let _ = personality(original);
                match now {
                    Ok(true) => findings.escaped(format!("{what} took effect (restored)")),
                    Ok(false) => {
                        findings.refused(format!("{what} returned but did not take effect"))
                    }
                    Err(e) => findings.unclear(format!("{what} then query: {e}")),
                }
            }
        }
    }
    Ok(findings.verdict())
}

/// prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY).
pub fn prctl_set_ptracer_any(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let what = "prctl(PR_SET_PTRACER, ANY)";
    // SAFETY: prctl with integer arguments only.
    let ret = unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    match cvt(ret) {
        Ok(_) => {
            // SAFETY: as above; 0 clears the ptracer exception.
            unsafe { libc::prctl(libc::PR_SET_PTRACER, 0, 0, 0, 0) };
            Ok(Verdict::escaped(format!("{what} = 0 (reset to none)")))
        }
        Err(e) if e.0 == EINVAL => Ok(Verdict::blocked(format!(
            "{what}: EINVAL (no Yama LSM in this kernel: the option does not exist)"
        ))),
        Err(e) => Ok(judge(what, Err(e), DENIED)),
    }
}

/// prctl(PR_SET_MM, PR_SET_MM_MAP_SIZE): reachable means option 35 is not
/// filtered (the same entry point rewrites the memory map for CRIU).
pub fn prlimit_init(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through the pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut current) } != 0 {
        return Ok(judge(
            "getrlimit(RLIMIT_CORE)",
            Err(sys::Errno::last()),
            &[],
        ));
    }
    // Init's RLIMIT_CORE set to the value this process has (init's own is the
    // same or higher, so a success changes nothing that matters): the call
    // is what is judged.
    // SAFETY: prlimit64 reads one rlimit through the pointer; no old value.
    let ret = unsafe {
        libc::prlimit64(
            1,
            libc::RLIMIT_CORE,
            &current as *const libc::rlimit as *const libc::rlimit64,
            std::ptr::null_mut(),
        )
    };
    Ok(judge(
        "prlimit64(1 (init), RLIMIT_CORE, …)",
        cvt(ret).map(|_| "0".to_string()),
        DENIED,
    ))
}

pub fn prctl_set_mm(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let mut size: u32 = 0;
    // SAFETY: PR_SET_MM_MAP_SIZE writes one u32 through the pointer.
    let ret = unsafe {
        libc::prctl(
            libc::PR_SET_MM,
            libc::PR_SET_MM_MAP_SIZE,
            &mut size as *mut u32,
            0,
            0,
        )
    };
    let result = cvt(ret).map(|_| format!("0 (struct prctl_mm_map is {size} bytes)"));
    Ok(judge(
        "prctl(PR_SET_MM, PR_SET_MM_MAP_SIZE)",
        result,
        DENIED,
    ))
}
