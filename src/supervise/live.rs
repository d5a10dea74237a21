//! The live view of a run's output for the person (or CI log) watching
//! `spawnd run`: the program's stdout and stderr as they arrive, on
//! spawnd's own (or both on stderr, with `--json --live`).
//!
//! Writing to a terminal or a pipe can be slower than the program, or stop
//! when its reader stalls; supervision must never wait on it past what the
//! result keeps, or the wall time and Ctrl-C would wait too. So a thread
//! of its own writes, behind a bounded queue: output within the result's
//! cap is handed over waiting for room (it is bounded by the cap), output
//! past the cap only when there is room, up to [`LIVE_PAST_CAP`] bytes per
//! stream, and what does not fit is left out of the view, which says so.
//! The thread starts with the first chunk: the process is single-threaded
//! until its sandbox is cloned. At the end, what is queued is written as
//! long as the reader takes it; a reader that takes nothing for
//! [`STALLED`] is left behind, so a stalled pipe cannot keep spawnd from
//! ending.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::LiveOutput;

/// Bytes past a stream's cap the view shows at most; the result counts
/// everything the program wrote.
pub(crate) const LIVE_PAST_CAP: u64 = 64 << 20;

/// Chunks queued for the writer at most.
const QUEUE: usize = 64;

/// How long the view's end waits for a reader that takes nothing.
const STALLED: Duration = Duration::from_secs(2);

/// What the writer thread tells the view's end.
#[derive(Default)]
struct Progress {
    /// Bytes written so far.
    written: AtomicU64,
    /// The queue is closed and everything in it written.
    done: AtomicBool,
}

/// Where the view writes each stream.
#[derive(Debug, Clone, Copy)]
enum Targets {
    /// stdout to stdout, stderr to stderr.
    Own,
    /// Both to stderr.
    Stderr,
}

/// A stream's chunk, for the writer thread: which stream, and its bytes.
type Chunk = (u8, Vec<u8>);

/// The writer thread: its queue, its handle, what it reports.
type Writer = (SyncSender<Chunk>, JoinHandle<()>, Arc<Progress>);

/// A live view of a run's output; see the module documentation.
pub(crate) struct LiveView {
    targets: Targets,
    writer: Option<Writer>,
    /// Bytes past the cap shown, per stream.
    shown_past_cap: [u64; 2],
    /// Bytes past the cap left out of the view, per stream.
    left_out: [u64; 2],
}

impl LiveView {
    /// The program's stdout on spawnd's stdout, its stderr on spawnd's
    /// stderr (`spawnd run` without `--json`).
    pub(crate) fn terminal() -> LiveView {
        LiveView::new(Targets::Own)
    }

    /// Both streams on spawnd's stderr (`spawnd run --json --live`: stdout
    /// is the JSON result's).
    pub(crate) fn on_stderr() -> LiveView {
        LiveView::new(Targets::Stderr)
    }

    fn new(targets: Targets) -> LiveView {
        LiveView {
            targets,
            writer: None,
            shown_past_cap: [0; 2],
            left_out: [0; 2],
        }
    }

    /// The queue to the writer thread, started on first use.
    fn queue(&mut self) -> Option<&SyncSender<Chunk>> {
        if self.writer.is_none() {
            let (tx, rx) = sync_channel(QUEUE);
            let targets = self.targets;
            let progress = Arc::new(Progress::default());
            let reporting = progress.clone();
            let thread = std::thread::Builder::new()
                .name("spawnd-live".into())
                .spawn(move || write_all(&rx, targets, &reporting))
                .ok()?;
            self.writer = Some((tx, thread, progress));
        }
        self.writer.as_ref().map(|(tx, _, _)| tx)
    }
}

impl LiveOutput for LiveView {
    fn chunk(&mut self, which: u8, kept: &[u8]) {
        if let Some(tx) = self.queue() {
            let _ = tx.send((which, kept.to_vec()));
        }
    }

    fn past_cap(&mut self, which: u8, bytes: &[u8]) {
        let at = usize::from(which.min(1));
        let room = LIVE_PAST_CAP.saturating_sub(self.shown_past_cap[at]);
        let shown = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let mut left_out = (bytes.len() - shown) as u64;
        if shown > 0 {
            let chunk = bytes[..shown].to_vec();
            match self.queue().map(|tx| tx.try_send((which, chunk))) {
                Some(Ok(())) => self.shown_past_cap[at] += shown as u64,
                Some(Err(TrySendError::Full(_) | TrySendError::Disconnected(_))) | None => {
                    left_out += shown as u64;
                }
            }
        }
        self.left_out[at] += left_out;
    }

    fn skipped(&mut self, which: u8, bytes: u64) {
        self.left_out[usize::from(which.min(1))] += bytes;
    }
}

/// The view's end: what is queued is written, then a line for each stream
/// part of which was left out of the view.
impl Drop for LiveView {
    fn drop(&mut self) {
        if let Some((tx, thread, progress)) = self.writer.take() {
            drop(tx);
            let mut seen = progress.written.load(Ordering::Relaxed);
            let mut since = Instant::now();
            loop {
                if progress.done.load(Ordering::Acquire) {
                    let _ = thread.join();
                    break;
                }
                let now = progress.written.load(Ordering::Relaxed);
                if now != seen {
                    (seen, since) = (now, Instant::now());
                } else if since.elapsed() >= STALLED {
                    // Left blocked on its reader; it ends with the process.
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        for (which, name) in [(0, "stdout"), (1, "stderr")] {
            if self.left_out[which] > 0 {
                eprintln!(
                    "spawnd: {} bytes of {name} past the result's cap were left out of this live view (the view was slower than the program, or passed {} MiB past the cap)",
                    self.left_out[which],
                    LIVE_PAST_CAP >> 20
                );
            }
        }
    }
}

/// The writer thread: each chunk to its target, until the queue closes.
/// It writes to the descriptors themselves, not through the standard
/// streams' locks: blocked on a stalled reader, it must not hold a lock
/// spawnd's own messages need.
fn write_all(rx: &Receiver<Chunk>, targets: Targets, progress: &Progress) {
    use std::os::fd::AsFd;
    let (stdout, stderr) = (std::io::stdout(), std::io::stderr());
    for (which, bytes) in rx {
        let fd = match (targets, which) {
            (Targets::Own, 0) => stdout.as_fd(),
            _ => stderr.as_fd(),
        };
        let mut rest = bytes.as_slice();
        while !rest.is_empty() {
            match nix::unistd::write(fd, rest) {
                Ok(0) => break,
                Ok(n) => rest = &rest[n..],
                Err(nix::Error::EINTR) => continue,
                // A reader that went away: the view ends here.
                Err(_) => break,
            }
        }
        progress
            .written
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
    }
    progress.done.store(true, Ordering::Release);
}
