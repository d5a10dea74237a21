//! One captured output stream: what is kept (redacted, within its cap, hashed
//! as kept), what was written in all, and whether anything was cut; and the
//! draining of its pipe as output arrives.

use std::os::fd::OwnedFd;

use sha2::{Digest, Sha256};

use super::redact;
use super::{Captured, LiveOutput};
use crate::manifest::Sha256Digest;

/// A stream being captured; its pipe is `None` once it has ended.
pub(super) struct Stream {
    pub(super) fd: Option<OwnedFd>,
    cap: u64,
    kept: Vec<u8>,
    total: u64,
    truncated: bool,
    hasher: Sha256,
    redactor: redact::Redactor,
}

impl Stream {
    pub(super) fn new(fd: OwnedFd, cap: u64, redactor: redact::Redactor) -> Stream {
        Stream {
            fd: Some(fd),
            cap,
            kept: Vec::new(),
            total: 0,
            truncated: false,
            hasher: Sha256::new(),
            redactor,
        }
    }

    /// Takes a chunk the child wrote; returns the bytes released now
    /// (redacted) for live forwarding: those kept within the cap, and
    /// those past it.
    fn take(&mut self, chunk: &[u8]) -> (Vec<u8>, Vec<u8>) {
        self.total += chunk.len() as u64;
        let released = self.redactor.push(chunk);
        self.keep(released)
    }

    /// The end of the stream: whatever the redactor held back.
    fn end(&mut self) -> (Vec<u8>, Vec<u8>) {
        let released = self.redactor.finish();
        self.keep(released)
    }

    fn keep(&mut self, mut bytes: Vec<u8>) -> (Vec<u8>, Vec<u8>) {
        let room = self.cap.saturating_sub(self.kept.len() as u64) as usize;
        let past = if bytes.len() > room {
            self.truncated = true;
            bytes.split_off(room)
        } else {
            Vec::new()
        };
        self.kept.extend_from_slice(&bytes);
        self.hasher.update(&bytes);
        (bytes, past)
    }

    pub(super) fn finish(mut self) -> Captured {
        let _ = self.end();
        // Still open: the drain after init's end stopped before the end of
        // the stream (a process outside the sandbox holds the pipe), so
        // what was kept is not all that was written.
        let truncated = self.truncated || self.fd.is_some();
        Captured {
            kept: self.kept,
            total: self.total,
            truncated,
            sha256: Sha256Digest(self.hasher.finalize().into()),
            redactions: self.redactor.replaced(),
        }
    }
}

/// The read buffer's size for output that comes in bulk.
pub(super) const CHUNK: usize = 64 * 1024;
/// Its size until a read fills it: a sandbox that writes little never pays
/// for zeroing (and faulting in) 64 KiB, 16 page faults.
pub(super) const FIRST_CHUNK: usize = 4 * 1024;

/// Grows the read buffer to [`CHUNK`] once a read has filled it. The old
/// buffer held raw output (credential values too): it is wiped, not left to
/// the allocator as a reallocation would.
fn grow_if_filled(buf: &mut Vec<u8>, n: usize) {
    if n == buf.len() && buf.len() < CHUNK {
        let old = std::mem::replace(buf, vec![0u8; CHUNK]);
        zeroize::Zeroize::zeroize(&mut { old });
    }
}

/// Reads what is available; returns true at EOF.
pub(super) fn read_some(fd: Option<&OwnedFd>, buf: &mut Vec<u8>, into: &mut Vec<u8>) -> bool {
    let Some(fd) = fd else { return true };
    loop {
        match nix::unistd::read(fd, buf) {
            Ok(0) => return true,
            Ok(n) => {
                into.extend_from_slice(&buf[..n]);
                grow_if_filled(buf, n);
            }
            Err(nix::Error::EAGAIN) => return false,
            Err(nix::Error::EINTR) => continue,
            Err(_) => return true,
        }
    }
}

/// Reads one drain takes at most before supervision looks at its clock and
/// its signals again: a program that writes faster than it is read keeps
/// its pipe always ready, and must not keep the wall time from being
/// enforced.
const MAX_READS_PER_DRAIN: usize = 16;

/// Hands released output to the live sink: what was kept, and what was
/// past the cap.
fn forward(
    live: &mut Option<Box<dyn LiveOutput + Send>>,
    which: u8,
    (kept, past): (Vec<u8>, Vec<u8>),
) {
    let Some(sink) = live.as_mut() else { return };
    if !kept.is_empty() {
        sink.chunk(which, &kept);
    }
    if !past.is_empty() {
        sink.past_cap(which, &past);
    }
}

/// Reads what the pipe holds now (at most [`MAX_READS_PER_DRAIN`] reads),
/// keeps it and forwards it live; at the end
/// of the stream, flushes what the redactor held back and drops the pipe.
pub(super) fn drain(
    stream: &mut Stream,
    buf: &mut Vec<u8>,
    which: u8,
    live: &mut Option<Box<dyn LiveOutput + Send>>,
) {
    let Some(fd) = stream.fd.take() else { return };
    for _ in 0..MAX_READS_PER_DRAIN {
        match nix::unistd::read(&fd, buf) {
            Ok(0) => {
                forward(live, which, stream.end());
                return;
            }
            Ok(n) => {
                forward(live, which, stream.take(&buf[..n]));
                grow_if_filled(buf, n);
            }
            Err(nix::Error::EAGAIN) => {
                stream.fd = Some(fd);
                return;
            }
            Err(nix::Error::EINTR) => continue,
            Err(_) => return,
        }
    }
    // More may be waiting: the next round of supervision reads on.
    stream.fd = Some(fd);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervise::set_nonblocking;
    use std::os::fd::AsFd;

    #[test]
    fn streams_keep_the_cap_hash_what_is_kept_and_count_everything() {
        let (r, _w) = nix::unistd::pipe().unwrap();
        let mut s = Stream::new(r, 4, redact::Redactor::new([]));
        assert_eq!(s.take(b"abc"), (b"abc".to_vec(), Vec::new()));
        // What is past the cap is not kept, and is handed on for a live
        // view.
        assert_eq!(s.take(b"defg"), (b"d".to_vec(), b"efg".to_vec()));
        let c = s.finish();
        assert_eq!(
            (c.kept.as_slice(), c.total, c.truncated),
            (&b"abcd"[..], 7, true)
        );
        assert_eq!(c.sha256, Sha256Digest(Sha256::digest(b"abcd").into()));
    }

    #[test]
    fn a_stream_cut_short_before_its_end_is_flagged_truncated() {
        let (r, w) = nix::unistd::pipe().unwrap();
        let mut s = Stream::new(r, 100, redact::Redactor::new([]));
        set_nonblocking(s.fd.as_ref().unwrap().as_fd()).unwrap();
        nix::unistd::write(&w, b"partial").unwrap();
        let mut buf = vec![0u8; 64];
        drain(&mut s, &mut buf, 0, &mut None);
        // The writer still holds the pipe: no end of stream yet.
        assert!(s.fd.is_some());
        let c = s.finish();
        assert_eq!((c.kept.as_slice(), c.truncated), (&b"partial"[..], true));

        let (r, w) = nix::unistd::pipe().unwrap();
        let mut s = Stream::new(r, 100, redact::Redactor::new([]));
        nix::unistd::write(&w, b"whole").unwrap();
        drop(w);
        drain(&mut s, &mut buf, 0, &mut None);
        let c = s.finish();
        assert_eq!((c.kept.as_slice(), c.truncated), (&b"whole"[..], false));
    }

    #[test]
    fn a_small_read_buffer_grows_once_a_read_fills_it_and_nothing_is_lost() {
        let (r, w) = nix::unistd::pipe().unwrap();
        let mut s = Stream::new(r, 100_000, redact::Redactor::new([]));
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        nix::unistd::write(&w, &data).unwrap();
        drop(w);
        let mut buf = vec![0u8; super::FIRST_CHUNK];
        drain(&mut s, &mut buf, 0, &mut None);
        assert_eq!(buf.len(), super::CHUNK);
        let c = s.finish();
        assert_eq!((c.kept.as_slice(), c.truncated), (&data[..], false));
    }

    #[test]
    fn output_past_the_cap_is_redacted_too() {
        let (r, _w) = nix::unistd::pipe().unwrap();
        let mut s = Stream::new(r, 2, redact::Redactor::new([("TOKEN", &b"s3cr3t"[..])]));
        let (kept, past) = s.take(b"x=s3cr3t;");
        assert_eq!(kept, b"x=");
        assert_eq!(past, b"[REDACTED:TOKEN];");
    }

    #[test]
    fn secrets_are_redacted_before_the_cap_and_the_hash() {
        let (r, _w) = nix::unistd::pipe().unwrap();
        let mut s = Stream::new(r, 100, redact::Redactor::new([("TOKEN", &b"s3cr3t"[..])]));
        let mut live = s.take(b"x=s3c").0;
        live.extend(s.take(b"r3t;").0);
        assert_eq!(live, b"x=[REDACTED:TOKEN];");
        let c = s.finish();
        assert_eq!(
            (c.kept.as_slice(), c.total),
            (&b"x=[REDACTED:TOKEN];"[..], 9)
        );
        assert_eq!(
            c.sha256,
            Sha256Digest(Sha256::digest(b"x=[REDACTED:TOKEN];").into())
        );
    }
}
