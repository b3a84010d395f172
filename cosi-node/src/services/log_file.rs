//! A service's log file: `<dir>/<service>.log`, capped in size and rotated.
//!
//! When a write would take the file past `max_bytes`, the file is renamed to `.log.1` (the
//! older `.log.1` to `.log.2`, and so on up to `keep` generations; the oldest is deleted) and a
//! new file is started. So a service's files never take more than about
//! `max_bytes × (keep + 1)` bytes. The writer runs as its own task, fed by a bounded queue
//! ([`super::logs`]); the service never waits for the disk.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::logs::{FileCommand, FileFeed, LogLine};

/// How a service's log file is capped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogFileOptions {
    /// Rotate before the file would exceed this size (default 1 MiB).
    pub max_bytes: u64,
    /// Rotated generations kept (`.log.1` … `.log.N`, default 2).
    pub keep: usize,
    /// Lines queued for the writer before new ones are dropped from the file (default 4096).
    pub queue: usize,
}

impl Default for LogFileOptions {
    fn default() -> Self {
        LogFileOptions {
            max_bytes: 1024 * 1024,
            keep: 2,
            queue: 4096,
        }
    }
}

/// An open, size-capped log file.
#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    file: File,
    size: u64,
    options: LogFileOptions,
}

impl RotatingFile {
    /// Opens (appending to) `path`.
    pub fn open(path: PathBuf, options: LogFileOptions) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let size = file.metadata()?.len();
        Ok(RotatingFile {
            path,
            file,
            size,
            options,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of rotated generation `n` (1 = the newest rotated file).
    pub fn generation(path: &Path, n: usize) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    /// Appends one record (a line with its newline), rotating first if it would not fit.
    pub fn append(&mut self, record: &[u8]) -> io::Result<()> {
        let len = record.len() as u64;
        if self.size > 0 && self.size + len > self.options.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(record)?;
        self.size += len;
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        if self.options.keep == 0 {
            self.file = File::create(&self.path)?;
            self.size = 0;
            return Ok(());
        }
        let oldest = Self::generation(&self.path, self.options.keep);
        match std::fs::remove_file(&oldest) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        for n in (1..self.options.keep).rev() {
            let from = Self::generation(&self.path, n);
            if from.exists() {
                std::fs::rename(&from, Self::generation(&self.path, n + 1))?;
            }
        }
        std::fs::rename(&self.path, Self::generation(&self.path, 1))?;
        self.file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

/// One record of the file: `2024-05-01T10:00:00.123Z stderr the text\n`.
pub(crate) fn record_of(line: &LogLine) -> Vec<u8> {
    format!(
        "{} {} {}\n",
        humantime::format_rfc3339_millis(line.time),
        line.stream,
        line.text
    )
    .into_bytes()
}

/// Starts the writer of `file`; returns what feeds it. The task ends when the feed is dropped.
pub(crate) fn spawn_writer(file: RotatingFile) -> FileFeed {
    let (queue, mut lines) = mpsc::channel::<FileCommand>(file.options.queue.max(1));
    let dropped = Arc::new(AtomicU64::new(0));
    let counter = dropped.clone();
    tokio::spawn(async move {
        let mut file = Some(file);
        let mut batch = Vec::new();
        loop {
            if lines.recv_many(&mut batch, 256).await == 0 {
                return;
            }
            let mut bytes = Vec::new();
            let lost = counter.swap(0, Ordering::Relaxed);
            if lost > 0 {
                bytes.extend_from_slice(
                    format!(
                        "{} supervisor [{lost} lines dropped: the log file fell behind]\n",
                        humantime::format_rfc3339_millis(std::time::SystemTime::now())
                    )
                    .as_bytes(),
                );
            }
            let mut flushes = Vec::new();
            let mut records: Vec<Vec<u8>> = Vec::with_capacity(batch.len() + 1);
            if !bytes.is_empty() {
                records.push(bytes);
            }
            for command in batch.drain(..) {
                match command {
                    FileCommand::Line(line) => records.push(record_of(&line)),
                    FileCommand::Flush(done) => flushes.push(done),
                }
            }
            let Some(mut open) = file.take() else { return };
            // The disk may block; keep it off the runtime's workers.
            let result = tokio::task::spawn_blocking(move || {
                let mut failure = None;
                for record in &records {
                    if let Err(e) = open.append(record) {
                        failure = Some(e);
                        break;
                    }
                }
                (open, failure)
            })
            .await;
            match result {
                Ok((open, failure)) => {
                    if let Some(error) = failure {
                        tracing::warn!(path = %open.path.display(), %error, "writing a service log file failed");
                    }
                    file = Some(open);
                    for done in flushes {
                        let _ = done.send(());
                    }
                }
                Err(_) => return,
            }
        }
    });
    FileFeed { queue, dropped }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_rotates_and_the_oldest_generation_goes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("svc.log");
        let options = LogFileOptions {
            max_bytes: 10,
            keep: 2,
            queue: 1,
        };
        let mut file = RotatingFile::open(path.clone(), options).unwrap();
        for record in ["aaaaaa\n", "bbbbbb\n", "cccccc\n", "dddddd\n"] {
            file.append(record.as_bytes()).unwrap();
        }
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(&path), "dddddd\n");
        assert_eq!(read(&RotatingFile::generation(&path, 1)), "cccccc\n");
        assert_eq!(read(&RotatingFile::generation(&path, 2)), "bbbbbb\n");
        assert!(!RotatingFile::generation(&path, 3).exists());
    }
}
