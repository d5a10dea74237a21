//! Replacing credential values in captured output with `[REDACTED:KEY]`
//! before anyone sees or hashes it (docs/operations.md, "Credentials"). Streaming: a value split across
//! reads is still found, because bytes that could begin one are held back
//! until the next read (or the end) decides. The values live in wiped memory.

use zeroize::Zeroizing;

/// A streaming replacer of secret values in one output stream.
pub(crate) struct Redactor {
    /// (value, replacement), longest value first so the longest match wins.
    secrets: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)>,
    /// Bytes held back: they may be the start of a value.
    pending: Zeroizing<Vec<u8>>,
    /// Values replaced so far.
    replaced: u64,
}

impl Redactor {
    /// A redactor for `(key, value)` pairs; empty values are ignored.
    pub(crate) fn new<'a>(secrets: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Redactor {
        let mut list: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)> = secrets
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| {
                (
                    Zeroizing::new(v.to_vec()),
                    format!("[REDACTED:{k}]").into_bytes(),
                )
            })
            .collect();
        list.sort_by_key(|s| std::cmp::Reverse(s.0.len()));
        Redactor {
            secrets: list,
            pending: Zeroizing::new(Vec::new()),
            replaced: 0,
        }
    }

    /// How many values were replaced so far (the audit record counts them).
    pub(crate) fn replaced(&self) -> u64 {
        self.replaced
    }

    /// Takes a chunk; returns what can be released now.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.secrets.is_empty() {
            return chunk.to_vec();
        }
        crate::vault::extend_wiped(&mut self.pending, chunk);
        let mut out = Vec::with_capacity(self.pending.len());
        let mut i = 0;
        let buf = &*self.pending;
        'scan: while i < buf.len() {
            let rest = &buf[i..];
            for (value, replacement) in &self.secrets {
                if rest.starts_with(value) {
                    out.extend_from_slice(replacement);
                    i += value.len();
                    self.replaced += 1;
                    continue 'scan;
                }
            }
            // The end of what we have may be the start of a value: wait.
            if self
                .secrets
                .iter()
                .any(|(v, _)| v.len() > rest.len() && v.starts_with(rest))
            {
                break;
            }
            out.push(buf[i]);
            i += 1;
        }
        self.pending.drain(..i);
        out
    }

    /// The end of the stream: releases what was held back.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut *self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(secrets: &[(&str, &[u8])], chunks: &[&[u8]]) -> Vec<u8> {
        let mut r = Redactor::new(secrets.iter().copied());
        let mut out = Vec::new();
        for c in chunks {
            out.extend(r.push(c));
        }
        out.extend(r.finish());
        out
    }

    #[test]
    fn every_value_replaced_is_counted_once() {
        let mut r = Redactor::new([("A", &b"sekrit"[..]), ("B", &b"other"[..])]);
        let _ = r.push(b"sek");
        assert_eq!(r.replaced(), 0, "a held-back prefix is not counted");
        let _ = r.push(b"rit other sekri");
        let _ = r.push(b"t sekri");
        let _ = r.finish();
        assert_eq!(
            r.replaced(),
            3,
            "the prefix released at the end is not a value"
        );
    }

    #[test]
    fn values_are_replaced_also_when_split_across_reads() {
        let s: &[(&str, &[u8])] = &[("GH_TOKEN", b"ghp_secret123")];
        assert_eq!(
            run(s, &[b"token=ghp_secret123\n"]),
            b"token=[REDACTED:GH_TOKEN]\n"
        );
        assert_eq!(
            run(s, &[b"token=ghp_se", b"cret123 and ghp_secret123"]),
            b"token=[REDACTED:GH_TOKEN] and [REDACTED:GH_TOKEN]"
        );
        assert_eq!(
            run(s, &[b"g", b"h", b"p", b"_secret12", b"3"]),
            b"[REDACTED:GH_TOKEN]"
        );
        assert_eq!(
            run(s, &[b"ghp_secret12"]),
            b"ghp_secret12",
            "a prefix at the end is released"
        );
        assert_eq!(run(s, &[b"ghp_secret12", b"4"]), b"ghp_secret124");
        assert_eq!(
            run(&[("K", b"")], &[b"abc"]),
            b"abc",
            "empty values redact nothing"
        );
    }

    #[test]
    fn the_longest_value_wins_and_overlaps_resolve_left_to_right() {
        let s: &[(&str, &[u8])] = &[("A", b"abc"), ("B", b"abcdef")];
        assert_eq!(run(s, &[b"xabcdefx abcx"]), b"x[REDACTED:B]x [REDACTED:A]x");
        let s: &[(&str, &[u8])] = &[("A", b"aa")];
        assert_eq!(run(s, &[b"aaa"]), b"[REDACTED:A]a");
    }

    proptest! {
        /// However the output is cut into reads, the result is the same as
        /// replacing in one piece, and the value never survives.
        #[test]
        fn chunking_never_changes_the_result(
            text in proptest::collection::vec(prop_oneof![Just(b's'), Just(b'e'), Just(b'k'), any::<u8>()], 0..200),
            cuts in proptest::collection::vec(0usize..200, 0..10),
        ) {
            let secret: &[u8] = b"sek";
            let s: &[(&str, &[u8])] = &[("K", secret)];
            let whole = run(s, &[&text]);
            let mut cuts = cuts;
            cuts.retain(|c| *c <= text.len());
            cuts.sort_unstable();
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut at = 0;
            for c in cuts { chunks.push(&text[at..c]); at = c; }
            chunks.push(&text[at..]);
            prop_assert_eq!(&run(s, &chunks), &whole);
            prop_assert!(!whole.windows(3).any(|w| w == secret));
        }
    }
}
