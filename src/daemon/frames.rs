//! Request lines as frames, at most `max_frame_bytes` each. A line over
//! the cap is one [`Frame::TooLong`], and the rest of it is read and
//! dropped up to its newline, so the peer can finish writing it and read
//! the error, and the connection goes on.
//!
//! Hand-written rather than `tokio_util`'s `LinesCodec`: that codec reports
//! such a line as an error, after which a framed stream ends, so the
//! connection would close under a peer still writing; it reports a line
//! that is not UTF-8 as an I/O error, with the same end.

use bytes::{Buf, BytesMut};
use tokio_util::codec::Decoder;

/// One frame of a connection.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Frame {
    /// A request line, without its line ending.
    Line(String),
    /// A line that is not UTF-8.
    NotUtf8,
    /// A line over the cap (its bytes are dropped).
    TooLong,
}

/// The decoder of [`Frame`]s.
pub(super) struct RequestLines {
    max: usize,
    /// Where the search for a newline goes on in the buffer.
    searched: usize,
    /// The rest of a line over the cap is being dropped.
    discarding: bool,
}

impl RequestLines {
    /// Frames of at most `max` bytes.
    pub(super) fn new(max: usize) -> RequestLines {
        RequestLines {
            max,
            searched: 0,
            discarding: false,
        }
    }

    /// Whether the rest of a line over the cap is still being dropped.
    pub(super) fn discarding(&self) -> bool {
        self.discarding
    }
}

impl Decoder for RequestLines {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<Frame>> {
        loop {
            if self.discarding {
                match memchr::memchr(b'\n', buf) {
                    Some(at) => {
                        buf.advance(at + 1);
                        self.discarding = false;
                        continue;
                    }
                    None => {
                        buf.clear();
                        return Ok(None);
                    }
                }
            }
            let read_to = buf.len().min(self.max.saturating_add(1));
            let found = memchr::memchr(b'\n', &buf[self.searched.min(read_to)..read_to]);
            match found {
                Some(offset) => {
                    let at = self.searched.min(read_to) + offset;
                    self.searched = 0;
                    let line = buf.split_to(at + 1);
                    let line = line[..at].strip_suffix(b"\r").unwrap_or(&line[..at]);
                    return Ok(Some(match std::str::from_utf8(line) {
                        Ok(text) => Frame::Line(text.to_string()),
                        Err(_) => Frame::NotUtf8,
                    }));
                }
                None if buf.len() > self.max => {
                    self.searched = 0;
                    self.discarding = true;
                    return Ok(Some(Frame::TooLong));
                }
                None => {
                    self.searched = read_to;
                    return Ok(None);
                }
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<Frame>> {
        if let Some(frame) = self.decode(buf)? {
            return Ok(Some(frame));
        }
        // A last line without its newline is still a request.
        if buf.is_empty() || self.discarding {
            buf.clear();
            return Ok(None);
        }
        self.searched = 0;
        let line = buf.split_to(buf.len());
        Ok(Some(match std::str::from_utf8(&line) {
            Ok(text) => Frame::Line(text.to_string()),
            Err(_) => Frame::NotUtf8,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(max: usize, chunks: &[&[u8]]) -> Vec<Frame> {
        let mut d = RequestLines::new(max);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            while let Some(f) = d.decode(&mut buf).unwrap() {
                out.push(f);
            }
        }
        while let Some(f) = d.decode_eof(&mut buf).unwrap() {
            out.push(f);
        }
        out
    }

    #[test]
    fn a_line_over_the_cap_is_one_frame_and_the_next_line_is_whole() {
        let line = |s: &str| Frame::Line(s.to_string());
        assert_eq!(
            frames(4, &[b"ab\r\ncd", b"\n", b"toolong", b"stillgoing\nok\n"]),
            [line("ab"), line("cd"), Frame::TooLong, line("ok")]
        );
        assert_eq!(frames(4, &[b"abcd\n"]), [line("abcd")]);
        assert_eq!(frames(4, &[b"abcde\nx"]), [Frame::TooLong, line("x")]);
        assert_eq!(frames(4, &[b"\xff\n"]), [Frame::NotUtf8]);
        assert_eq!(frames(4, &[b"abcdefgh"]), [Frame::TooLong]);
    }
}
