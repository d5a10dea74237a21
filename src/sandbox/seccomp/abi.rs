//! The kernel's seccomp ABI for the architectures spawnd filters (x86_64 and
//! aarch64), as plain Rust data: the [`Arch`]es and their audit architecture
//! values, the layout of `struct seccomp_data` that a filter reads, the x32
//! syscall bit and the encoding of filter return values. Nothing here talks
//! to the kernel; the numbers are those of `<linux/seccomp.h>` and
//! `<linux/audit.h>` (libc does not export the audit arch values). Both
//! architectures are little endian, so one layout serves both.

/// `AUDIT_ARCH_X86_64`: `EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`.
pub const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
/// `AUDIT_ARCH_I386`: what `seccomp_data.arch` holds for an `int 0x80` call.
pub const AUDIT_ARCH_I386: u32 = 0x4000_0003;
/// `AUDIT_ARCH_AARCH64`: `EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`.
pub const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;
/// `AUDIT_ARCH_ARM`: what `seccomp_data.arch` holds for a 32-bit (compat)
/// call on an aarch64 kernel.
pub const AUDIT_ARCH_ARM: u32 = 0x4000_0028;
/// `__X32_SYSCALL_BIT`: x32 syscalls are native numbers with this bit set.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// An architecture spawnd has a syscall table and a filter for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Arch {
    /// x86_64's native 64-bit ABI; x32 numbers are killed.
    X86_64,
    /// aarch64's native ABI, which numbers its calls by the generic table.
    Aarch64,
}

impl Arch {
    /// Every architecture, for tests that walk them all.
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The architecture spawnd is built for: its filter is the one installed.
    #[cfg(target_arch = "x86_64")]
    pub const NATIVE: Arch = Arch::X86_64;
    /// The architecture spawnd is built for: its filter is the one installed.
    #[cfg(target_arch = "aarch64")]
    pub const NATIVE: Arch = Arch::Aarch64;

    /// The `seccomp_data.arch` value of the architecture's native calls.
    pub const fn audit_arch(self) -> u32 {
        match self {
            Arch::X86_64 => AUDIT_ARCH_X86_64,
            Arch::Aarch64 => AUDIT_ARCH_AARCH64,
        }
    }

    /// Whether a native-arch call can carry [`X32_SYSCALL_BIT`] to select
    /// another ABI (x86_64's x32). aarch64 has no such bit: its 32-bit calls
    /// arrive as [`AUDIT_ARCH_ARM`] and fail the arch check.
    pub const fn has_x32_bit(self) -> bool {
        matches!(self, Arch::X86_64)
    }

    /// The architecture's name as Rust's `target_arch` spells it.
    pub const fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }
}

/// Byte offset of `nr` in `struct seccomp_data`.
pub const OFFSET_NR: u32 = 0;
/// Byte offset of `arch` in `struct seccomp_data`.
pub const OFFSET_ARCH: u32 = 4;
/// Byte offset of `instruction_pointer` in `struct seccomp_data`.
pub const OFFSET_INSTRUCTION_POINTER: u32 = 8;
/// Byte offset of `args[0]` in `struct seccomp_data`; `args[i]` is 8 bytes further each.
pub const OFFSET_ARGS: u32 = 16;
/// `sizeof(struct seccomp_data)`: loads must stay below it.
pub const SECCOMP_DATA_SIZE: usize = 64;
/// Number of syscall arguments in `struct seccomp_data`.
pub const ARG_COUNT: usize = 6;

/// `SECCOMP_RET_KILL_PROCESS`: kill the whole thread group.
pub const SECCOMP_RET_KILL_PROCESS: u32 = libc::SECCOMP_RET_KILL_PROCESS;
/// `SECCOMP_RET_ERRNO`: fail the syscall with the errno in the low 16 bits.
pub const SECCOMP_RET_ERRNO: u32 = libc::SECCOMP_RET_ERRNO;
/// `SECCOMP_RET_USER_NOTIF`: stop the call and ask the filter's listener.
pub const SECCOMP_RET_USER_NOTIF: u32 = libc::SECCOMP_RET_USER_NOTIF;
/// `SECCOMP_RET_ALLOW`: run the syscall.
pub const SECCOMP_RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
/// `SECCOMP_RET_DATA`: the bits of the return value that carry the errno.
pub const SECCOMP_RET_DATA: u32 = libc::SECCOMP_RET_DATA;
/// `MAX_ERRNO`: the kernel clamps larger errno data to this value.
pub const MAX_ERRNO: u16 = 4095;

/// Offset of the LOW 32 bits of `args[index]`. x86_64 and aarch64 are little
/// endian, so the
/// low half of the 64-bit argument comes first. The kernel truncates `int`
/// and `unsigned int` arguments to these bits, so this is the half a rule
/// must compare (snapd CVE-2019-7303: `TIOCSTI | 1 << 32` still injects).
/// Returns `None` for an index past the sixth argument.
pub const fn arg_low_offset(index: u8) -> Option<u32> {
    if (index as usize) < ARG_COUNT {
        Some(OFFSET_ARGS + 8 * index as u32)
    } else {
        None
    }
}

/// The kernel's `struct seccomp_data`: what a filter sees of one syscall.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeccompData {
    /// The syscall number (`int`; x32 calls carry [`X32_SYSCALL_BIT`]).
    pub nr: i32,
    /// The calling convention, an `AUDIT_ARCH_*` value.
    pub arch: u32,
    /// The user-space address of the syscall instruction.
    pub instruction_pointer: u64,
    /// The six raw 64-bit argument registers.
    pub args: [u64; ARG_COUNT],
}

impl SeccompData {
    /// A native call of `nr` on `arch` with `args` (instruction pointer zero).
    pub const fn call(arch: Arch, nr: i32, args: [u64; ARG_COUNT]) -> Self {
        Self {
            nr,
            arch: arch.audit_arch(),
            instruction_pointer: 0,
            args,
        }
    }

    /// A native x86_64 call of `nr` with `args` (instruction pointer zero).
    pub const fn x86_64(nr: i32, args: [u64; ARG_COUNT]) -> Self {
        Self::call(Arch::X86_64, nr, args)
    }

    /// A native aarch64 call of `nr` with `args` (instruction pointer zero).
    pub const fn aarch64(nr: i32, args: [u64; ARG_COUNT]) -> Self {
        Self::call(Arch::Aarch64, nr, args)
    }

    /// The struct as the kernel lays it out in memory (little endian), which
    /// is what `BPF_LD|BPF_W|BPF_ABS` loads 32-bit words from.
    pub fn to_bytes(&self) -> [u8; SECCOMP_DATA_SIZE] {
        let mut bytes = [0u8; SECCOMP_DATA_SIZE];
        bytes[0..4].copy_from_slice(&self.nr.to_le_bytes());
        bytes[4..8].copy_from_slice(&self.arch.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.instruction_pointer.to_le_bytes());
        for (chunk, arg) in bytes[16..].chunks_exact_mut(8).zip(self.args) {
            chunk.copy_from_slice(&arg.to_le_bytes());
        }
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_offsets_point_at_the_low_half_of_each_argument() {
        let data =
            SeccompData::x86_64(1, [0x1111_1111_0000_0000 | 0x5412, 0, 0, 0, 0, 7 << 32 | 9]);
        let bytes = data.to_bytes();
        let word = |offset: u32| {
            let at = offset as usize;
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        assert_eq!(word(arg_low_offset(0).unwrap()), 0x5412);
        assert_eq!(word(arg_low_offset(5).unwrap()), 9);
        assert_eq!(word(OFFSET_NR), 1);
        assert_eq!(word(OFFSET_ARCH), AUDIT_ARCH_X86_64);
        assert_eq!(arg_low_offset(6), None);
    }

    #[test]
    fn audit_arch_values_are_the_elf_machine_with_the_64bit_and_le_flags() {
        const AUDIT_ARCH_64BIT: u32 = 0x8000_0000;
        const AUDIT_ARCH_LE: u32 = 0x4000_0000;
        const EM_X86_64: u32 = 62;
        const EM_AARCH64: u32 = 183;
        const EM_ARM: u32 = 40;
        assert_eq!(
            AUDIT_ARCH_X86_64,
            EM_X86_64 | AUDIT_ARCH_64BIT | AUDIT_ARCH_LE
        );
        assert_eq!(
            AUDIT_ARCH_AARCH64,
            EM_AARCH64 | AUDIT_ARCH_64BIT | AUDIT_ARCH_LE
        );
        assert_eq!(AUDIT_ARCH_ARM, EM_ARM | AUDIT_ARCH_LE);
        assert_eq!(Arch::X86_64.audit_arch(), AUDIT_ARCH_X86_64);
        assert_eq!(Arch::Aarch64.audit_arch(), AUDIT_ARCH_AARCH64);
        assert_eq!(SeccompData::aarch64(56, [0; 6]).arch, AUDIT_ARCH_AARCH64);
        assert!(Arch::X86_64.has_x32_bit() && !Arch::Aarch64.has_x32_bit());
    }

    #[test]
    fn the_native_arch_is_the_build_target() {
        assert_eq!(Arch::NATIVE.name(), std::env::consts::ARCH);
    }

    #[test]
    fn return_values_match_the_kernel_uapi() {
        assert_eq!(SECCOMP_RET_ALLOW, 0x7fff_0000);
        assert_eq!(SECCOMP_RET_ERRNO, 0x0005_0000);
        assert_eq!(SECCOMP_RET_KILL_PROCESS, 0x8000_0000);
        assert_eq!(OFFSET_INSTRUCTION_POINTER, 8);
    }
}
