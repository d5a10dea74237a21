//! The file the kernel opens for execution along with a program: the
//! interpreter a `#!` script names on its first line, or the loader an ELF
//! file names in its `PT_INTERP` program header. Under
//! `exec = "declared"` each of these needs Landlock's execute right beside
//! the program itself (the kernel opens it with `open_exec`, which
//! Landlock checks like an `execve`), so the gate reads them here.
//!
//! A small parser of our own rather than an ELF crate: spawnd needs one
//! string from one program header, and none of `goblin`, `object` or `elf`
//! is a dependency (each would bring a whole object-file model for it).
//! Every offset and length read from the file is bounded and checked
//! before use; a file that is neither, or is malformed, names no
//! interpreter. Pure: the bytes come through the `read_at` it is handed.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// How many bytes of a `#!` line the kernel reads (`BINPRM_BUF_SIZE`).
const SHEBANG_BYTES: usize = 256;
/// The longest interpreter path the kernel takes (`PATH_MAX`).
const MAX_PATH_BYTES: u64 = 4096;
/// The most program headers a 64-bit or 32-bit ELF file can list.
const MAX_PROGRAM_HEADERS: u64 = 0xffff;
/// `PT_INTERP`.
const PT_INTERP: u64 = 3;

/// Reads up to `buf.len()` bytes at an offset, returning how many it read
/// (fewer at the end of the file).
pub(crate) type ReadAt<'a> = &'a dyn Fn(u64, &mut [u8]) -> std::io::Result<usize>;

/// What a file names for the kernel to run it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpreter {
    /// Its absolute path, as named.
    pub path: PathBuf,
    /// How it is named.
    pub kind: InterpreterKind,
}

/// How a file names its interpreter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterpreterKind {
    /// A `#!` script's first line.
    Shebang,
    /// An ELF file's `PT_INTERP` (its dynamic loader).
    ElfLoader,
}

/// The interpreter (`#!`) or loader (`PT_INTERP`) the file read through
/// `read_at` names, if it names one by an absolute path. A relative one
/// (the kernel resolves it against the working directory at each exec)
/// is not returned: no fixed file could be granted for it.
pub(crate) fn interpreter_of(read_at: ReadAt<'_>) -> Option<Interpreter> {
    let mut head = [0u8; SHEBANG_BYTES];
    let n = read_fully(read_at, 0, &mut head)?;
    let head = &head[..n];
    let (named, kind) = if let Some(line) = head.strip_prefix(b"#!") {
        (shebang_interpreter(line)?, InterpreterKind::Shebang)
    } else if head.starts_with(b"\x7fELF") {
        (elf_interpreter(read_at, head)?, InterpreterKind::ElfLoader)
    } else {
        return None;
    };
    named.starts_with(b"/").then(|| Interpreter {
        path: PathBuf::from(OsStr::from_bytes(&named)),
        kind,
    })
}

/// The interpreter of a `#!` line (after the `#!`): as the kernel reads it,
/// blanks skipped, then up to the next blank, end of line or NUL.
fn shebang_interpreter(line: &[u8]) -> Option<Vec<u8>> {
    let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
    let start = line.iter().position(|&b| b != b' ' && b != b'\t')?;
    let rest = &line[start..];
    let end = rest
        .iter()
        .position(|&b| matches!(b, b' ' | b'\t' | b'\0'))
        .unwrap_or(rest.len());
    Some(rest[..end].to_vec()).filter(|name| !name.is_empty())
}

/// The ELF header's fields that locate the program headers.
struct ElfLayout {
    is_64: bool,
    little_endian: bool,
    phoff: u64,
    phentsize: u64,
    phnum: u64,
}

impl ElfLayout {
    fn parse(head: &[u8]) -> Option<ElfLayout> {
        let is_64 = match head.get(4)? {
            1 => false,
            2 => true,
            _ => return None,
        };
        let little_endian = match head.get(5)? {
            1 => true,
            2 => false,
            _ => return None,
        };
        let r = Fields { little_endian };
        let (phoff, phentsize, phnum) = if is_64 {
            (r.u64(head, 0x20)?, r.u16(head, 0x36)?, r.u16(head, 0x38)?)
        } else {
            (r.u32(head, 0x1c)?, r.u16(head, 0x2a)?, r.u16(head, 0x2c)?)
        };
        let least = if is_64 { 56 } else { 32 };
        if u64::from(phentsize) < least || u64::from(phnum) > MAX_PROGRAM_HEADERS {
            return None;
        }
        Some(ElfLayout {
            is_64,
            little_endian,
            phoff,
            phentsize: phentsize.into(),
            phnum: phnum.into(),
        })
    }
}

/// The `PT_INTERP` string of an ELF file whose first bytes are `head`.
fn elf_interpreter(read_at: ReadAt<'_>, head: &[u8]) -> Option<Vec<u8>> {
    let layout = ElfLayout::parse(head)?;
    let r = Fields {
        little_endian: layout.little_endian,
    };
    let mut header = [0u8; 56];
    let header = &mut header[..if layout.is_64 { 56 } else { 32 }];
    for i in 0..layout.phnum {
        let at = layout.phoff.checked_add(i.checked_mul(layout.phentsize)?)?;
        if read_fully(read_at, at, header)? < header.len() {
            return None;
        }
        if r.u32(header, 0)? != PT_INTERP {
            continue;
        }
        let (offset, size) = if layout.is_64 {
            (r.u64(header, 0x08)?, r.u64(header, 0x20)?)
        } else {
            (r.u32(header, 0x04)?, r.u32(header, 0x10)?)
        };
        if size == 0 || size > MAX_PATH_BYTES {
            return None;
        }
        let mut name = vec![0u8; usize::try_from(size).ok()?];
        if read_fully(read_at, offset, &mut name)? < name.len() {
            return None;
        }
        // The kernel requires the string's last byte to be its NUL, and
        // stops at the first.
        if name.pop() != Some(0) {
            return None;
        }
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        name.truncate(end);
        return Some(name).filter(|n| !n.is_empty());
    }
    None
}

/// Reads integers of one byte order at bounded offsets.
struct Fields {
    little_endian: bool,
}

impl Fields {
    fn bytes<const N: usize>(&self, buf: &[u8], at: usize) -> Option<[u8; N]> {
        let mut out: [u8; N] = buf.get(at..at.checked_add(N)?)?.try_into().ok()?;
        if !self.little_endian {
            out.reverse();
        }
        Some(out)
    }

    fn u16(&self, buf: &[u8], at: usize) -> Option<u16> {
        self.bytes::<2>(buf, at).map(u16::from_le_bytes)
    }

    fn u32(&self, buf: &[u8], at: usize) -> Option<u64> {
        self.bytes::<4>(buf, at)
            .map(u32::from_le_bytes)
            .map(u64::from)
    }

    fn u64(&self, buf: &[u8], at: usize) -> Option<u64> {
        self.bytes::<8>(buf, at).map(u64::from_le_bytes)
    }
}

/// Fills `buf` from `offset` as far as the file goes; `None` on a read error.
fn read_fully(read_at: ReadAt<'_>, offset: u64, buf: &mut [u8]) -> Option<usize> {
    let mut done = 0;
    while done < buf.len() {
        let at = offset.checked_add(done as u64)?;
        match read_at(at, &mut buf[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    }
    Some(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(bytes: &[u8]) -> Option<PathBuf> {
        kind_and_path(bytes).map(|i| i.path)
    }

    fn kind_and_path(bytes: &[u8]) -> Option<Interpreter> {
        let read_at = |offset: u64, buf: &mut [u8]| -> std::io::Result<usize> {
            let start = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(bytes.len());
            let n = buf.len().min(bytes.len() - start);
            buf[..n].copy_from_slice(&bytes[start..start + n]);
            Ok(n)
        };
        interpreter_of(&read_at)
    }

    /// A minimal ELF64 (or ELF32) file with one `PT_LOAD` and one
    /// `PT_INTERP` header naming `interp` (NUL added).
    fn elf(is_64: bool, little_endian: bool, interp: &[u8]) -> Vec<u8> {
        let put = |out: &mut Vec<u8>, at: usize, value: u64, width: usize| {
            let le = value.to_le_bytes();
            let mut field = le[..width].to_vec();
            if !little_endian {
                field.reverse();
            }
            out[at..at + width].copy_from_slice(&field);
        };
        let (ehsize, phentsize) = if is_64 { (64, 56) } else { (52, 32) };
        let phoff = ehsize;
        let interp_at = phoff + 2 * phentsize;
        let mut out = vec![0u8; interp_at + interp.len() + 1];
        out[..4].copy_from_slice(b"\x7fELF");
        out[4] = if is_64 { 2 } else { 1 };
        out[5] = if little_endian { 1 } else { 2 };
        out[interp_at..interp_at + interp.len()].copy_from_slice(interp);
        if is_64 {
            put(&mut out, 0x20, phoff as u64, 8);
            put(&mut out, 0x36, phentsize as u64, 2);
            put(&mut out, 0x38, 2, 2);
        } else {
            put(&mut out, 0x1c, phoff as u64, 4);
            put(&mut out, 0x2a, phentsize as u64, 2);
            put(&mut out, 0x2c, 2, 2);
        }
        for (i, kind) in [1u64, PT_INTERP].into_iter().enumerate() {
            let h = phoff + i * phentsize;
            put(&mut out, h, kind, 4);
            if kind == PT_INTERP {
                let size = interp.len() as u64 + 1;
                if is_64 {
                    put(&mut out, h + 0x08, interp_at as u64, 8);
                    put(&mut out, h + 0x20, size, 8);
                } else {
                    put(&mut out, h + 0x04, interp_at as u64, 4);
                    put(&mut out, h + 0x10, size, 4);
                }
            }
        }
        out
    }

    #[test]
    fn a_scripts_interpreter_is_the_first_word_of_its_first_line() {
        assert_eq!(of(b"#!/bin/sh\necho hi\n"), Some("/bin/sh".into()));
        assert_eq!(
            of(b"#! \t/usr/bin/env python3 -u\n"),
            Some("/usr/bin/env".into())
        );
        assert_eq!(of(b"#!/bin/sh"), Some("/bin/sh".into()));
        // Nothing, or a relative name, grants nothing.
        assert_eq!(of(b"#!\n"), None);
        assert_eq!(of(b"#!   \n/bin/sh\n"), None);
        assert_eq!(of(b"#!sh\n"), None);
        assert_eq!(of(b"echo no shebang\n"), None);
        assert_eq!(of(b""), None);
    }

    #[test]
    fn an_elf_files_loader_is_its_pt_interp_in_every_class_and_byte_order() {
        for is_64 in [true, false] {
            for le in [true, false] {
                assert_eq!(
                    of(&elf(is_64, le, b"/lib64/ld-linux-x86-64.so.2")),
                    Some("/lib64/ld-linux-x86-64.so.2".into()),
                    "64-bit {is_64}, little-endian {le}"
                );
            }
        }
    }

    #[test]
    fn a_malformed_elf_file_names_no_loader() {
        let good = elf(true, true, b"/lib/ld.so");
        // Cut anywhere: a header or the string runs past the end.
        for len in [0, 4, 5, 20, 0x3a, 64, 64 + 56, 64 + 2 * 56, good.len() - 1] {
            assert_eq!(of(&good[..len]), None, "cut at {len}");
        }
        // No NUL at the string's end.
        let mut no_nul = good.clone();
        *no_nul.last_mut().unwrap() = b'x';
        assert_eq!(of(&no_nul), None);
        // A program header offset that overflows.
        let mut far = good.clone();
        far[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(of(&far), None);
        // An interpreter size beyond PATH_MAX.
        let mut huge = good.clone();
        let size_at = 64 + 56 + 0x20;
        huge[size_at..size_at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert_eq!(of(&huge), None);
        // A bad class or byte order.
        let mut class = good.clone();
        class[4] = 3;
        assert_eq!(of(&class), None);
        // An empty or relative loader.
        assert_eq!(of(&elf(true, true, b"")), None);
        assert_eq!(of(&elf(true, true, b"ld.so")), None);
    }

    #[test]
    fn each_names_its_kind() {
        let script = kind_and_path(b"#!/bin/sh\n").unwrap();
        assert_eq!(script.kind, InterpreterKind::Shebang);
        let elf = kind_and_path(&elf(true, true, b"/lib/ld.so")).unwrap();
        assert_eq!(elf.kind, InterpreterKind::ElfLoader);
    }

    #[test]
    fn a_static_elf_file_names_no_loader() {
        let mut file = elf(true, true, b"/lib/ld.so");
        // The PT_INTERP header made a second PT_LOAD.
        file[64 + 56] = 1;
        assert_eq!(of(&file), None);
    }
}
