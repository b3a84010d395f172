//! The disk backend: a [`cosi_core::State`] kept in a redb file, served from memory.
//!
//! The file is the source of truth at open: [`DiskState::open`] loads every resource and the
//! retained change log into the in-memory machinery of this crate, which then serves every read
//! and watch — except the changes a watch starting before the in-memory window missed, which
//! are read back from the durable log (`file::read_changes`). Writes go through a single committer ([`commit_log`]): it validates each write in
//! arrival order against the committed state plus the writes before it in the same batch, writes
//! the whole batch as one redb transaction, and only after the commit is durable publishes the
//! batch to memory (and so to watchers) and acknowledges each writer. Concurrent writers thus
//! share one fsync (group commit), readers never see a write that is not yet durable, and a
//! failed commit changes nothing, neither in the file nor in memory.
//!
//! The on-disk format and the commit protocol are written down in `docs/disk-format.md`.
//!
//! Modules: [`record`] (bytes of one resource / change, on the crate's record codec),
//! [`file`] (tables, open, load, the one write path), [`commit_log`] (batching, validation,
//! publication), [`state`] (the `State` impl).

mod commit_log;
mod file;
mod record;
mod recovery;
mod state;

use crate::MemoryOptions;

pub use state::DiskState;

/// When a write counts as done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DiskDurability {
    /// A write returns after its transaction is on stable storage (redb
    /// `Durability::Immediate`: the commit is fsynced). Survives a process crash and a power
    /// loss. The default.
    #[default]
    Immediate,
    /// Relaxed: a write returns once its transaction is committed without being made durable
    /// (redb `Durability::None`); the store makes it durable with the next checkpoint (every
    /// [`DiskOptions::checkpoint_interval`] changes) and when it closes. A crash of the process
    /// or of the machine loses the writes acknowledged since the last durable commit; the file is
    /// never half-written: it opens at that commit. For state that can be rebuilt.
    Eventual,
}

/// Options of [`DiskState::open`].
///
/// ```
/// use cosi_state::{DiskDurability, DiskOptions};
/// let options = DiskOptions {
///     durability: DiskDurability::Eventual,
///     ..DiskOptions::default()
/// };
/// assert_eq!(options.retained_changes, DiskOptions::default().retained_changes);
/// ```
#[derive(Clone, Debug)]
pub struct DiskOptions {
    /// When a write is acknowledged. Default: [`DiskDurability::Immediate`].
    pub durability: DiskDurability,
    /// How many changes per kind the durable change log keeps, so that a watch can resume
    /// exactly after a bookmark taken before a restart, or older than what the in-memory
    /// window keeps. An older bookmark gets a catch-up or a resync. Default: 4096.
    pub retained_changes: usize,
    /// The most writes one transaction takes. Default: 1024.
    pub max_batch: usize,
    /// How many changes the durable log may hold beyond the resources table before a commit
    /// folds them into it (a checkpoint). A commit otherwise writes only its log entries, which
    /// keeps a durable write close to the cost of one raw redb insert; an open replays at most
    /// this many changes. 0 counts as 1 (every commit folds). Default: 1024.
    pub checkpoint_interval: usize,
    /// How many writes may wait for the committer before writers wait to enqueue. Default: 4096.
    pub queue_capacity: usize,
    /// redb's page cache, in bytes. Reads are served from memory, so this only speeds up writes.
    /// Default: 16 MiB.
    pub cache_size: usize,
    /// Sizing of the in-memory collections that serve reads and watches (history window,
    /// destroy markers). Default: [`MemoryOptions::default`].
    pub memory: MemoryOptions,
    /// Wait for each commit in a blocking task, for tests on a paused tokio clock.
    ///
    /// A paused clock jumps to the next timer whenever its (current-thread) runtime idles, which
    /// it does while the committer thread works: every timeout guard around a write would fire at
    /// once. tokio does not advance a paused clock while a blocking task runs, so with this set
    /// writes and `close` wait in one. Costs a thread hand-off per write; leave it off outside
    /// tests (`cosi_controllers::testing::disk_options` sets it). Default: false.
    pub paused_clock: bool,
}

/// The message a caught panic carried (`panic!` and `assert!` carry a `&str` or a `String`).
fn panic_message(panic: &(dyn std::any::Any + Send)) -> Option<String> {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
}

impl Default for DiskOptions {
    fn default() -> Self {
        DiskOptions {
            durability: DiskDurability::Immediate,
            retained_changes: 4096,
            max_batch: 1024,
            checkpoint_interval: 1024,
            queue_capacity: 4096,
            cache_size: 16 << 20,
            memory: MemoryOptions::default(),
            paused_clock: false,
        }
    }
}
