//! `memcpy` and `memmove` for the static musl build on x86_64, in place of
//! musl's, with the feature `musl-small-memcpy` (on by default). What it
//! buys is measured by `scripts/bench-musl-features` (docs/benchmarks.md,
//! "The musl runtime features"): nothing a single `spawnd run` shows, a few
//! percent of the daemon's round trip and of its throughput under load.
//!
//! Most of spawnd's copies are a few dozen bytes (JSON, formatting, frames):
//! about 2,000 per daemon spawn, 22 bytes on average. musl's memcpy starts
//! every copy with byte steps around a `rep movsq`, several times the cost of
//! glibc's for such sizes (known elsewhere too: astral-sh/uv#10610).
//!
//! Here a copy of up to 64 bytes is loads then stores (of 2×32, 2×16, 2×8,
//! 2×4 or 3×1 bytes, the second half overlapping the first); longer forward
//! copies are one `rep movsb` (fast on CPUs with ERMS/FSRM, correct on all); a
//! `memmove` whose destination overlaps the source from above copies 16-byte
//! chunks from the end. Every load and store is inline assembly, so the
//! compiler can neither turn this code back into a call to `memcpy` nor
//! reorder it across the overlap (in unoptimized builds too).
//!
//! With these two symbols defined here, the linker does not take musl's
//! `memcpy.o` / `memmove.o` from libc.a (it pulls an archive member only for a
//! symbol still undefined).

use std::arch::asm;

/// Copies up to this many bytes with loads and stores alone (`rep movsb`
/// has a start-up cost on CPUs without FSRM).
const SMALL: usize = 64;

/// Copies `n` bytes (at most [`SMALL`]): every load before any store, so the
/// regions may overlap.
///
/// # Safety
/// `src` readable and `dest` writable for `n` bytes.
#[inline(always)]
unsafe fn small(dest: *mut u8, src: *const u8, n: usize) {
    if n >= 32 {
        // SAFETY: 32 <= n: the first and the last 32 bytes lie within both
        // regions (the caller's promise).
        unsafe {
            asm!(
                "movups {a}, [{s}]",
                "movups {b}, [{s} + 16]",
                "movups {c}, [{s} + {n} - 32]",
                "movups {e}, [{s} + {n} - 16]",
                "movups [{d}], {a}",
                "movups [{d} + 16], {b}",
                "movups [{d} + {n} - 32], {c}",
                "movups [{d} + {n} - 16], {e}",
                s = in(reg) src,
                d = in(reg) dest,
                n = in(reg) n,
                a = out(xmm_reg) _,
                b = out(xmm_reg) _,
                c = out(xmm_reg) _,
                e = out(xmm_reg) _,
                options(nostack, preserves_flags),
            )
        }
    } else if n >= 16 {
        // SAFETY: 16 <= n: [src, src+16) and [src+n-16, src+n) lie within the
        // source, likewise for dest (the caller's promise).
        unsafe {
            asm!(
                "movups {a}, [{s}]",
                "movups {b}, [{s} + {n} - 16]",
                "movups [{d}], {a}",
                "movups [{d} + {n} - 16], {b}",
                s = in(reg) src,
                d = in(reg) dest,
                n = in(reg) n,
                a = out(xmm_reg) _,
                b = out(xmm_reg) _,
                options(nostack, preserves_flags),
            )
        }
    } else if n >= 8 {
        // SAFETY: as above, with 8-byte words.
        unsafe {
            asm!(
                "mov {a}, qword ptr [{s}]",
                "mov {b}, qword ptr [{s} + {n} - 8]",
                "mov qword ptr [{d}], {a}",
                "mov qword ptr [{d} + {n} - 8], {b}",
                s = in(reg) src,
                d = in(reg) dest,
                n = in(reg) n,
                a = out(reg) _,
                b = out(reg) _,
                options(nostack, preserves_flags),
            )
        }
    } else if n >= 4 {
        // SAFETY: as above, with 4-byte words.
        unsafe {
            asm!(
                "mov {a:e}, dword ptr [{s}]",
                "mov {b:e}, dword ptr [{s} + {n} - 4]",
                "mov dword ptr [{d}], {a:e}",
                "mov dword ptr [{d} + {n} - 4], {b:e}",
                s = in(reg) src,
                d = in(reg) dest,
                n = in(reg) n,
                a = out(reg) _,
                b = out(reg) _,
                options(nostack, preserves_flags),
            )
        }
    } else if n > 0 {
        // 1 to 3 bytes: the first, the middle and the last (some the same).
        // SAFETY: 0, n/2 and n-1 are all below n.
        unsafe {
            asm!(
                "movzx {a:e}, byte ptr [{s}]",
                "movzx {b:e}, byte ptr [{s} + {h}]",
                "movzx {c:e}, byte ptr [{s} + {n} - 1]",
                "mov byte ptr [{d}], {a:l}",
                "mov byte ptr [{d} + {h}], {b:l}",
                "mov byte ptr [{d} + {n} - 1], {c:l}",
                s = in(reg) src,
                d = in(reg) dest,
                n = in(reg) n,
                h = in(reg) n / 2,
                a = out(reg) _,
                b = out(reg) _,
                c = out(reg) _,
                options(nostack, preserves_flags),
            )
        }
    }
}

/// Copies `n` bytes upwards, one byte after the other as far as the result
/// shows: correct when `dest` is below `src` or the regions are apart.
///
/// # Safety
/// As for [`small`].
#[inline(always)]
unsafe fn forward(dest: *mut u8, src: *const u8, n: usize) {
    // SAFETY: rep movsb copies rcx bytes from rsi to rdi upwards (the ABI
    // leaves the direction flag clear); the caller promises both regions.
    unsafe {
        asm!(
            "rep movsb",
            inout("rcx") n => _,
            inout("rsi") src => _,
            inout("rdi") dest => _,
            options(nostack, preserves_flags),
        )
    }
}

/// Copies `n` (> 16) bytes when `dest` lies above `src` within the source:
/// 16-byte chunks from the end down, each loaded before it is stored, and the
/// first 16 bytes, loaded before anything was stored, stored last.
///
/// # Safety
/// As for [`small`], and `n > 16`.
#[inline(always)]
unsafe fn backward(dest: *mut u8, src: *const u8, n: usize) {
    // SAFETY: the first 16 bytes of both regions (n > 16); the head stays in
    // xmm0 until the end (the chunks below use xmm1).
    unsafe {
        asm!(
            "movups xmm0, [{s}]",
            "2:",
            "sub {end}, 16",
            "movups xmm1, [{s} + {end}]",
            "movups [{d} + {end}], xmm1",
            "cmp {end}, 16",
            "ja 2b",
            "movups [{d}], xmm0",
            s = in(reg) src,
            d = in(reg) dest,
            end = inout(reg) n => _,
            out("xmm0") _,
            out("xmm1") _,
            options(nostack),
        )
    }
}

/// C's `memcpy`: the regions must not overlap.
///
/// # Safety
/// `src` readable and `dest` writable for `n` bytes, apart from each other.
#[no_mangle]
pub unsafe extern "C" fn memcpy(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller's promise, which both helpers need.
    unsafe {
        if n <= SMALL {
            small(dest, src, n)
        } else {
            forward(dest, src, n)
        }
    }
    dest
}

/// C's `memmove`: the regions may overlap.
///
/// # Safety
/// `src` readable and `dest` writable for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn memmove(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller's promise; `small` loads everything before it stores,
    // `forward` is right unless dest lies within (src, src+n), and that case
    // (n > SMALL there) goes to `backward`.
    unsafe {
        if n <= SMALL {
            small(dest, src, n)
        } else if (dest as usize).wrapping_sub(src as usize) >= n {
            forward(dest, src, n)
        } else {
            backward(dest, src, n)
        }
    }
    dest
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A byte-by-byte copy through a temporary: what memmove must produce.
    fn expected(buf: &[u8], dst: usize, src: usize, n: usize) -> Vec<u8> {
        let mut out = buf.to_vec();
        let tmp: Vec<u8> = buf[src..src + n].to_vec();
        for (i, b) in tmp.into_iter().enumerate() {
            out[dst + i] = b;
        }
        out
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + 3) as u8).collect()
    }

    #[test]
    fn memmove_matches_a_byte_copy_for_every_size_and_overlap() {
        let len = 700;
        for n in (0..=300).chain([511, 512, 513, 600]) {
            for src in [0usize, 1, 3, 8, 15, 16, 17, 40] {
                for dst in [0usize, 1, 2, 5, 8, 16, 31, 33, 41, 60] {
                    if src + n > len || dst + n > len {
                        continue;
                    }
                    let mut buf = pattern(len);
                    let want = expected(&buf, dst, src, n);
                    let base = buf.as_mut_ptr();
                    // SAFETY: both ranges lie within `buf`.
                    let ret = unsafe { memmove(base.add(dst), base.add(src), n) };
                    assert_eq!(ret, base.wrapping_add(dst));
                    assert!(buf == want, "memmove n={n} src={src} dst={dst}");
                }
            }
        }
    }

    #[test]
    fn memcpy_copies_every_size_between_separate_buffers() {
        for n in (0..=300).chain([1000, 4096, 65537]) {
            for off in [0usize, 1, 7, 8, 13] {
                let from = pattern(n + off);
                let mut to = vec![0xAAu8; n + off + 8];
                // SAFETY: separate buffers, each with room for n bytes at off.
                let ret = unsafe { memcpy(to.as_mut_ptr().add(off), from.as_ptr().add(off), n) };
                assert_eq!(ret, to.as_mut_ptr().wrapping_add(off));
                assert_eq!(
                    &to[off..off + n],
                    &from[off..off + n],
                    "memcpy n={n} off={off}"
                );
                assert!(to[..off].iter().all(|&b| b == 0xAA));
                assert!(to[off + n..].iter().all(|&b| b == 0xAA));
            }
        }
    }
}
