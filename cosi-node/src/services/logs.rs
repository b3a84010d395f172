//! A service's captured output: lines cut from its stdout and stderr, the last N kept in memory,
//! a follow stream, and (through [`super::log_file`]) a size-capped file.
//!
//! A follow stream ends when the service is removed: its runner closes the book
//! ([`LogBook::close`]) as it retires, whoever else still holds it.
//!
//! Nothing here may slow the service down or grow without bound because of a reader:
//! - lines are cut at [`MAX_LINE`] bytes (a program that never prints a newline costs one
//!   line's worth of memory);
//! - the ring keeps the last `capacity` lines;
//! - followers read from a bounded broadcast buffer. Writing into it never waits: a follower
//!   that falls more than [`FOLLOW_BUFFER`] lines behind loses the oldest lines it has not read,
//!   and reads one [`LogItem::Skipped`] saying how many, then goes on with the live lines
//!   (drop-oldest, never block the writer);
//! - the file writer is fed through a bounded queue; when the disk is slower than the service,
//!   lines are dropped from the file (counted, and noted in the file) — never from the ring.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use futures::Stream;
use tokio::sync::{broadcast, mpsc};

/// The longest line kept, in bytes; the rest of a longer line is dropped and the line is marked.
pub const MAX_LINE: usize = 16 * 1024;
/// How many lines a follower may fall behind before it skips.
pub const FOLLOW_BUFFER: usize = 1024;
/// What a cut line ends with.
pub const TRUNCATED_MARK: &str = " [line truncated]";

/// Which pipe a line came from.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum LogStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl fmt::Display for LogStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        })
    }
}

/// One line of a service's output.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LogLine {
    /// When the supervisor read it.
    pub time: SystemTime,
    /// Which pipe.
    pub stream: LogStream,
    /// The text, without the newline; invalid UTF-8 replaced.
    pub text: String,
}

/// What a log reader receives.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum LogItem {
    /// A line.
    Line(Arc<LogLine>),
    /// This many lines went by while the reader was too slow; they are in the ring and the
    /// file, not in this stream.
    Skipped(u64),
}

/// Cuts a byte stream into lines of at most [`MAX_LINE`] bytes.
///
/// ```
/// use cosi_node::services::LineSplitter;
/// let mut lines = LineSplitter::default();
/// assert_eq!(lines.push(b"one\ntw"), vec!["one".to_string()]);
/// assert_eq!(lines.push(b"o\r\n"), vec!["two".to_string()]);
/// assert_eq!(lines.finish(), None);
/// ```
#[derive(Debug, Default)]
pub struct LineSplitter {
    partial: Vec<u8>,
    /// The current line was cut; drop bytes until its newline.
    discarding: bool,
}

impl LineSplitter {
    /// Feeds bytes; returns the lines they complete.
    pub fn push(&mut self, mut bytes: &[u8]) -> Vec<String> {
        let mut lines = Vec::new();
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let (chunk, rest, ends) = match newline {
                Some(at) => (&bytes[..at], &bytes[at + 1..], true),
                None => (bytes, &[][..], false),
            };
            bytes = rest;
            if self.discarding {
                if ends {
                    self.discarding = false;
                }
                continue;
            }
            let room = MAX_LINE - self.partial.len();
            if chunk.len() > room {
                self.partial.extend_from_slice(&chunk[..room]);
                let mut line = text_of(&self.partial);
                line.push_str(TRUNCATED_MARK);
                lines.push(line);
                self.partial.clear();
                self.discarding = !ends;
                continue;
            }
            self.partial.extend_from_slice(chunk);
            if ends {
                lines.push(text_of(&self.partial));
                self.partial.clear();
            }
        }
        lines
    }

    /// The last line, if the stream ended without a newline.
    pub fn finish(&mut self) -> Option<String> {
        self.discarding = false;
        if self.partial.is_empty() {
            return None;
        }
        let line = text_of(&self.partial);
        self.partial.clear();
        Some(line)
    }
}

fn text_of(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    String::from_utf8_lossy(bytes).into_owned()
}

/// The output of one service: the ring of its last lines, the followers' buffer, and the
/// queue to its log file. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct LogBook {
    lines: Mutex<Lines>,
    capacity: usize,
    file: Option<FileFeed>,
}

/// The ring and the followers' channel, under one lock: a follower's tail and its live lines
/// neither overlap nor leave a gap.
#[derive(Debug)]
struct Lines {
    ring: VecDeque<Arc<LogLine>>,
    /// `None` once the book is closed: followers have read their last line.
    live: Option<broadcast::Sender<Arc<LogLine>>>,
}

/// The bounded queue to a log file writer, and what it had to drop.
#[derive(Debug)]
pub(crate) struct FileFeed {
    pub(crate) queue: mpsc::Sender<FileCommand>,
    pub(crate) dropped: Arc<AtomicU64>,
}

/// What the file writer is sent.
#[derive(Debug)]
pub(crate) enum FileCommand {
    /// A line to append.
    Line(Arc<LogLine>),
    /// Answer once every line queued before is written.
    Flush(tokio::sync::oneshot::Sender<()>),
}

impl LogBook {
    /// A book keeping the last `capacity` lines, with no file.
    pub fn new(capacity: usize) -> Self {
        Self::with_file(capacity, None)
    }

    pub(crate) fn with_file(capacity: usize, file: Option<FileFeed>) -> Self {
        let (live, _) = broadcast::channel(FOLLOW_BUFFER);
        LogBook {
            lines: Mutex::new(Lines {
                ring: VecDeque::with_capacity(capacity.min(1024)),
                live: Some(live),
            }),
            capacity: capacity.max(1),
            file,
        }
    }

    fn lines(&self) -> std::sync::MutexGuard<'_, Lines> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a line. Never waits.
    pub fn push(&self, stream: LogStream, text: String) {
        let line = Arc::new(LogLine {
            time: SystemTime::now(),
            stream,
            text,
        });
        {
            let mut lines = self.lines();
            if lines.ring.len() == self.capacity {
                lines.ring.pop_front();
            }
            lines.ring.push_back(line.clone());
            // No receiver is not an error.
            if let Some(live) = &lines.live {
                let _ = live.send(line.clone());
            }
        }
        if let Some(file) = &self.file {
            if file.queue.try_send(FileCommand::Line(line)).is_err() {
                file.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The last `n` lines, oldest first.
    pub fn tail(&self, n: usize) -> Vec<Arc<LogLine>> {
        let lines = self.lines();
        let skip = lines.ring.len().saturating_sub(n);
        lines.ring.iter().skip(skip).cloned().collect()
    }

    /// A reader: the last `tail` lines, then (with `follow`) every new line until the book is
    /// closed or dropped (the service was removed), or the reader is dropped.
    pub fn read(&self, tail: usize, follow: bool) -> LogReader {
        let lines = self.lines();
        let skip = lines.ring.len().saturating_sub(tail);
        let backlog = lines.ring.iter().skip(skip).cloned().collect();
        let live = if follow {
            lines.live.as_ref().map(broadcast::Sender::subscribe)
        } else {
            None
        };
        LogReader { backlog, live }
    }

    /// Ends every follow: each follower reads the lines it has not read yet, then the end.
    /// A reader made later gets its tail only. Lines pushed after this are kept in the ring
    /// and the file, not followed.
    pub fn close(&self) {
        self.lines().live = None;
    }

    /// Waits until every line recorded so far is in the log file (at once without a file).
    pub async fn flush(&self) {
        if let Some(file) = &self.file {
            let (done, written) = tokio::sync::oneshot::channel();
            if file.queue.send(FileCommand::Flush(done)).await.is_ok() {
                let _ = written.await;
            }
        }
    }

    /// Lines the file writer had to drop because it fell behind.
    pub fn dropped_from_file(&self) -> u64 {
        self.file
            .as_ref()
            .map_or(0, |f| f.dropped.load(Ordering::Relaxed))
    }
}

/// Reads a service's log: a tail, then live lines. See [`LogBook::read`].
#[derive(Debug)]
pub struct LogReader {
    backlog: VecDeque<Arc<LogLine>>,
    live: Option<broadcast::Receiver<Arc<LogLine>>>,
}

impl LogReader {
    /// The next item; `None` at the end (no follow and the tail is read, or the service is
    /// gone).
    pub async fn next(&mut self) -> Option<LogItem> {
        if let Some(line) = self.backlog.pop_front() {
            return Some(LogItem::Line(line));
        }
        let live = self.live.as_mut()?;
        match live.recv().await {
            Ok(line) => Some(LogItem::Line(line)),
            Err(broadcast::error::RecvError::Lagged(n)) => Some(LogItem::Skipped(n)),
            Err(broadcast::error::RecvError::Closed) => {
                self.live = None;
                None
            }
        }
    }

    /// The reader as a stream (for a server-streaming API).
    pub fn into_stream(self) -> impl Stream<Item = LogItem> + Send + 'static {
        futures::stream::unfold(self, |mut reader| async move {
            let item = reader.next().await?;
            Some((item, reader))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_longer_than_the_limit_is_cut_and_marked_and_its_rest_dropped() {
        let mut lines = LineSplitter::default();
        let long = vec![b'x'; MAX_LINE + 10];
        assert!(lines.push(&long[..MAX_LINE - 1]).is_empty());
        let out = lines.push(&long[MAX_LINE - 1..]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].len(), MAX_LINE + TRUNCATED_MARK.len());
        assert!(out[0].ends_with(TRUNCATED_MARK));
        assert_eq!(lines.push(b"yyy\nnext\n"), vec!["next".to_string()]);
    }

    /// Every line a reader yields, until its end. On a paused clock, a reader that waits for
    /// lines nobody will push fails at once (the clock skips to the timeout).
    async fn read_to_end(mut reader: LogReader) -> Vec<String> {
        let mut read = Vec::new();
        loop {
            let next = tokio::time::timeout(std::time::Duration::from_secs(60), reader.next());
            match next.await.expect("the reader ended") {
                Some(LogItem::Line(line)) => read.push(line.text.clone()),
                Some(LogItem::Skipped(n)) => panic!("skipped {n}"),
                None => return read,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_reads_what_it_has_not_read_then_ends_when_the_book_is_closed() {
        let book = LogBook::new(10);
        book.push(LogStream::Stdout, "before".into());
        let follower = book.read(10, true);
        book.push(LogStream::Stdout, "pending".into());
        book.close();
        assert_eq!(read_to_end(follower).await, ["before", "pending"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_follow_asked_for_after_the_book_is_closed_gets_its_tail_only() {
        let book = LogBook::new(10);
        book.push(LogStream::Stdout, "one".into());
        book.push(LogStream::Stdout, "two".into());
        book.close();
        assert_eq!(read_to_end(book.read(1, true)).await, ["two"]);
    }

    #[test]
    fn ring_keeps_the_last_lines_only() {
        let book = LogBook::new(3);
        for i in 0..5 {
            book.push(LogStream::Stdout, format!("line {i}"));
        }
        let tail: Vec<_> = book.tail(10).iter().map(|l| l.text.clone()).collect();
        assert_eq!(tail, ["line 2", "line 3", "line 4"]);
    }
}
