//! Reading the end of an audit log back: its last complete record and a
//! torn line after it (left by a crash), without reading the whole file.

use std::fs::File;

use serde_json::{Map, Value};

use super::Head;

/// What the end of the log says: its last complete record and a torn line after it.
pub(super) struct Tail {
    /// `seq` and `hash` of the last newline-terminated record, if any.
    pub(super) last: Option<Head>,
    /// That record itself (the writer checks which key sealed it).
    pub(super) record: Option<Map<String, Value>>,
    /// Offset and length of a last line without its newline.
    pub(super) torn: Option<(u64, u64)>,
}

/// Reads the end of the log, from a small window that doubles until it holds
/// the last complete line (records are a few hundred bytes; the whole file is
/// read only when it is one huge line).
pub(super) fn read_tail(file: &File) -> std::io::Result<Tail> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    let mut window = len.min(8 << 10);
    loop {
        let start = len - window;
        let mut buf = vec![0u8; window as usize];
        file.read_exact_at(&mut buf, start)?;
        // The last newline ends the last complete record; whatever follows is torn.
        let end = buf.iter().rposition(|b| *b == b'\n');
        let torn_from = end.map_or(0, |e| e + 1);
        let complete = &buf[..end.unwrap_or(0)];
        let line_start = complete.iter().rposition(|b| *b == b'\n').map(|i| i + 1);
        if (end.is_none() || line_start.is_none()) && start > 0 {
            window = (window * 2).min(len);
            continue;
        }
        let torn = (torn_from < buf.len()).then(|| {
            let at = start + torn_from as u64;
            (at, len - at)
        });
        let record = end.and_then(|_| {
            serde_json::from_slice::<Map<String, Value>>(&complete[line_start.unwrap_or(0)..]).ok()
        });
        let last = record.as_ref().and_then(|record| {
            Some(Head::at(
                record.get("seq")?.as_u64()?,
                record.get("hash")?.as_str()?,
            ))
        });
        return Ok(Tail { last, record, torn });
    }
}

#[cfg(test)]
mod tests {
    use super::read_tail;
    use std::io::Write;

    fn tail_of(bytes: &[u8]) -> (Option<u64>, Option<(u64, u64)>) {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        let t = read_tail(&f).unwrap();
        (t.last.map(|h| h.seq), t.torn)
    }

    fn line(seq: u64, pad: usize) -> String {
        format!(
            "{{\"seq\":{seq},\"hash\":\"h{seq}\",\"pad\":\"{}\"}}\n",
            "x".repeat(pad)
        )
    }

    #[test]
    fn empty_and_single_lines() {
        assert_eq!(tail_of(b""), (None, None));
        assert_eq!(tail_of(line(1, 0).as_bytes()), (Some(1), None));
        assert_eq!(tail_of(b"{\"seq\":1"), (None, Some((0, 8))));
    }

    #[test]
    fn last_record_and_torn_line_beyond_the_first_window() {
        // Records longer than the first window force it to grow.
        let mut log = String::new();
        for seq in 1..=3 {
            log.push_str(&line(seq, 20_000));
        }
        assert_eq!(tail_of(log.as_bytes()), (Some(3), None));
        let at = log.len() as u64;
        log.push_str("{\"seq\":4,\"ha");
        assert_eq!(tail_of(log.as_bytes()), (Some(3), Some((at, 12))));
        let mut small = line(1, 0) + &line(2, 0);
        let at = small.len() as u64;
        small.push_str(&"y".repeat(30_000));
        assert_eq!(tail_of(small.as_bytes()), (Some(2), Some((at, 30_000))));
    }
}
