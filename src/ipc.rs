//! Frames between processes of this binary over a private `AF_UNIX` stream
//! socketpair (the daemon and its spawner, the spawner and a sandbox made
//! ahead): an 8-byte header (body length, descriptor count, both
//! little-endian u32) and the body, in one message with the descriptors
//! attached (`SCM_RIGHTS`). Bodies are [postcard](https://docs.rs/postcard):
//! both ends are this binary, and it decodes a launch order in about a third
//! of JSON's time, on the path from request to program. Bodies may hold
//! credential values: they are built in and read into buffers that are wiped
//! when dropped (a body that outgrows its buffer moves to a larger one and
//! the old one is wiped), and are decoded straight into their types with no
//! intermediate copy, so every enum is externally tagged (postcard has no
//! field names to look ahead for). What the frames say is the business of
//! their two ends (`crate::spawner::wire`, `crate::sandbox::spare`).

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use serde::Serialize;
use zeroize::Zeroizing;

use crate::sys::adopt_fd;

/// Largest body accepted (an order's argv and env are far smaller).
pub(crate) const MAX_BODY: usize = 16 << 20;
/// Most descriptors one frame between the daemon and its spawner carries.
pub(crate) const MAX_FDS: usize = 8;
/// Most descriptors any frame carries: an order handed to a sandbox made
/// ahead ([`crate::sandbox::spare`]) brings every scope's pinned descriptor.
pub(crate) const MAX_FRAME_FDS: usize = 128;

/// Sends one frame with `fds` attached.
pub(crate) fn send<T: Serialize>(
    sock: &UnixStream,
    body: &T,
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    let mut body_buf = WipingBuffer(Zeroizing::new(Vec::with_capacity(1 << 10)));
    postcard::to_io(body, &mut body_buf).map_err(std::io::Error::other)?;
    let bytes = body_buf.0;
    if bytes.len() > MAX_BODY || fds.len() > MAX_FRAME_FDS {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "frame of {} bytes and {} descriptors is over the limit",
                bytes.len(),
                fds.len()
            ),
        ));
    }
    let mut header = [0u8; 8];
    header[..4].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
    header[4..].copy_from_slice(&(fds.len() as u32).to_le_bytes());
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let control = [ControlMessage::ScmRights(&raw)];
    let control: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &control };
    // Header and body in one message: the receiver wakes once for the
    // whole frame (sent in two writes, a fast receiver woke for the header,
    // found the body not there yet and slept again — a second wake of a
    // process on the other core, ~50 µs on this VM, in every frame).
    let mut sent = 0;
    while sent == 0 {
        sent = match sendmsg::<()>(
            sock.as_raw_fd(),
            &[IoSlice::new(&header), IoSlice::new(&bytes)],
            control,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Ok(n) => n,
            Err(nix::Error::EINTR) => 0,
            Err(e) => return Err(e.into()),
        };
    }
    // What did not fit in the socket's buffer follows (the descriptors went
    // with the first byte).
    let mut writer = sock;
    if sent < header.len() {
        writer.write_all(&header[sent..])?;
        writer.write_all(&bytes)
    } else {
        writer.write_all(&bytes[sent - header.len()..])
    }
}

/// A growable byte buffer that wipes what it leaves behind: when a write
/// does not fit, the bytes move to a buffer twice as large and the old one
/// is zeroed as it is dropped (a plain `Vec` would free it as it was).
struct WipingBuffer(Zeroizing<Vec<u8>>);

impl Write for WipingBuffer {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        crate::vault::extend_wiped(&mut self.0, data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Receives one frame of at most [`MAX_FDS`] descriptors: `None` at end of stream.
pub(crate) fn recv<T: serde::de::DeserializeOwned>(
    sock: &UnixStream,
) -> std::io::Result<Option<(T, Vec<OwnedFd>)>> {
    recv_up_to(sock, MAX_FDS)
}

/// Receives one frame of at most `max_fds` (≤ [`MAX_FRAME_FDS`]) descriptors:
/// `None` at end of stream.
pub(crate) fn recv_up_to<T: serde::de::DeserializeOwned>(
    sock: &UnixStream,
    max_fds: usize,
) -> std::io::Result<Option<(T, Vec<OwnedFd>)>> {
    let mut header = [0u8; 8];
    let mut cmsg = nix::cmsg_space!([RawFd; MAX_FRAME_FDS]);
    let (got, fds) = loop {
        let mut iov = [IoSliceMut::new(&mut header)];
        match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => {
                let mut fds = Vec::new();
                for c in msg.cmsgs().map_err(std::io::Error::from)? {
                    if let ControlMessageOwned::ScmRights(list) = c {
                        fds.extend(list.into_iter().map(adopt_fd));
                    }
                }
                break (msg.bytes, fds);
            }
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    if got == 0 {
        return Ok(None);
    }
    let mut reader = sock;
    reader.read_exact(&mut header[got..])?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let nfds = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if len > MAX_BODY || nfds != fds.len() || nfds > max_fds.min(MAX_FRAME_FDS) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "bad frame: {len} bytes, {nfds} descriptors announced, {} received",
                fds.len()
            ),
        ));
    }
    let mut body = Zeroizing::new(vec![0u8; len]);
    reader.read_exact(&mut body)?;
    let (value, rest) = postcard::take_from_bytes(&body)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    if !rest.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("bad frame: {} bytes after its body", rest.len()),
        ));
    }
    Ok(Some((value, fds)))
}

/// A list of byte strings (argv, env entries) as a sequence of byte strings
/// in a frame: each written and read in one copy, where serde's default for
/// `Vec<u8>` moves it byte by byte. postcard writes a byte string exactly
/// as it writes a sequence of `u8` (its length, then the bytes), so the
/// frame's bytes are the same either way.
pub(crate) mod byte_strings {
    use serde::{Deserialize, Deserializer, Serializer};
    use serde_bytes::{ByteBuf, Bytes};

    pub(crate) fn serialize<S: Serializer>(list: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(list.iter().map(|b| Bytes::new(b)))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        Ok(Vec::<ByteBuf>::deserialize(d)?
            .into_iter()
            .map(ByteBuf::into_vec)
            .collect())
    }
}
