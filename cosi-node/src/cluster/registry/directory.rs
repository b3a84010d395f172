//! [`DirectoryRegistry`]: affiliates as files in a directory the nodes share (one machine's
//! in the demo; a shared mount between machines elsewhere). Each node writes `<nodeId>.json` (its published affiliate) and
//! rewrites it every `refresh`; the file's modification time is its heartbeat. A file not
//! rewritten for `ttl` belongs to a node that is gone, and leaves the view: that is the lease.
//! The node also scans the directory every `refresh` — expiry is a matter of time, so this
//! registry is time-driven by nature — and removes its own file when it withdraws or stops.
//! Writes go through a temporary file and a rename, so a reader never sees half a file.
//!
//! The peers sharing the directory may be other machines, and anything in it may be theirs:
//! the temporary file has a random name and is created exclusively, never through a link, so
//! a planted link cannot redirect this node's write. Reading, only regular files named
//! `<nodeId>.json` count: each is opened without following a link or waiting on a FIFO, and
//! read no further than [`MAX_AFFILIATE_BYTES`]. A file dated more than a few seconds in the
//! future is not live (it would never expire), and a file expired for ten TTLs is deleted. A
//! scan keeps at most [`MAX_AFFILIATES`] live files and skips at most 64 times as many other
//! entries, so junk cannot hide live nodes unless it is that plentiful.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{
    insert_bounded, AffiliateRegistry, RegistryHealth, RegistryShared, RegistryView, Shared,
    TaskGuard, ViewChanges, MAX_AFFILIATES,
};
use crate::cluster::{
    decode_remote, encode_remote, validate_node_id, Affiliate, MAX_AFFILIATE_BYTES,
};

/// Settings of a [`DirectoryRegistry`].
#[derive(Clone, Debug)]
pub struct DirectoryRegistryOptions {
    /// The shared directory (created if missing).
    pub directory: PathBuf,
    /// How long a file lives without being rewritten.
    pub ttl: Duration,
    /// How often this node rewrites its file and scans the others (a third of `ttl` by
    /// default).
    pub refresh: Duration,
}

impl DirectoryRegistryOptions {
    /// A registry in `directory` with a time to live; refreshes at a third of it.
    pub fn new(directory: impl Into<PathBuf>, ttl: Duration) -> Self {
        DirectoryRegistryOptions {
            directory: directory.into(),
            ttl,
            refresh: ttl / 3,
        }
    }
}

/// A registry in a shared directory. See the module docs.
#[derive(Debug, Clone)]
pub struct DirectoryRegistry {
    shared: Shared,
    directory: PathBuf,
    _task: Arc<TaskGuard>,
}

impl DirectoryRegistry {
    /// Starts the registry's task. Must be called inside a tokio runtime.
    pub fn start(options: DirectoryRegistryOptions) -> Self {
        let shared: Shared = Arc::new(RegistryShared::default());
        let directory = options.directory.clone();
        let task = tokio::spawn(run(shared.clone(), options));
        DirectoryRegistry {
            shared,
            directory,
            _task: Arc::new(TaskGuard(task)),
        }
    }

    /// The shared directory.
    pub fn directory(&self) -> &Path {
        &self.directory
    }
}

impl AffiliateRegistry for DirectoryRegistry {
    fn name(&self) -> &str {
        "directory"
    }

    fn publish(&self, local: Option<Affiliate>) {
        self.shared.publish(local);
    }

    fn view(&self) -> RegistryView {
        self.shared.view()
    }

    fn subscribe(&self) -> ViewChanges {
        self.shared.subscribe()
    }
}

/// Removes this node's file when the registry stops (also when its task is aborted).
struct OwnFile(Option<PathBuf>);

impl Drop for OwnFile {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

async fn run(shared: Shared, options: DirectoryRegistryOptions) {
    let mut local = shared.local();
    let mut ticks = tokio::time::interval(options.refresh.max(Duration::from_millis(10)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut own = OwnFile(None);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            changed = local.changed() => if changed.is_err() { return },
        }
        let published = local.borrow_and_update().clone();
        let directory = options.directory.clone();
        let ttl = options.ttl;
        let previous = own.0.clone();
        let outcome =
            tokio::task::spawn_blocking(move || round(&directory, previous, published, ttl))
                .await
                .unwrap_or_else(|e| Err(format!("the registry round failed: {e}")));
        match outcome {
            Ok((path, affiliates)) => {
                own.0 = path;
                shared.update(|view| {
                    view.affiliates = affiliates;
                    view.health = RegistryHealth::Healthy;
                });
            }
            Err(error) => {
                tracing::warn!(directory = %options.directory.display(), %error, "the directory registry is unreachable");
                shared.unreachable(error);
            }
        }
    }
}

type Round = (
    Option<PathBuf>,
    std::collections::BTreeMap<String, Affiliate>,
);

/// How far in the future a file's modification time may be (clocks of the machines sharing
/// the directory differ a little); a file dated later is not live, and is skipped with a
/// warning, since a date in the future would otherwise never expire.
const MAX_CLOCK_SKEW: Duration = Duration::from_secs(5);

/// A file not rewritten for this many TTLs is deleted when a scan meets it, so the files of
/// nodes gone for good (and temporary files of interrupted writes) do not pile up.
const DELETE_AFTER_TTLS: u32 = 10;

/// The most entries one scan skips (other names, expired files, temporary files, files that
/// are not valid affiliates) before it stops. Only live affiliates count towards
/// [`MAX_AFFILIATES`]; this separate, much larger bound keeps a directory filled with junk from
/// making a scan endless, and only past it can junk hide live files.
const MAX_SKIPPED_ENTRIES: usize = 64 * MAX_AFFILIATES;

/// One refresh: write (or remove) this node's file, then read the live files.
fn round(
    directory: &Path,
    previous: Option<PathBuf>,
    published: Option<Affiliate>,
    ttl: Duration,
) -> Result<Round, String> {
    let describe =
        |what: &str, path: &Path, e: std::io::Error| format!("{what} {}: {e}", path.display());
    std::fs::create_dir_all(directory).map_err(|e| describe("cannot create", directory, e))?;
    let path = published
        .as_ref()
        .map(|a| directory.join(format!("{}.json", a.node_id)));
    if let Some(previous) = previous.filter(|p| Some(p) != path.as_ref()) {
        let _ = std::fs::remove_file(previous);
    }
    if let (Some(path), Some(affiliate)) = (&path, &published) {
        write_own_file(
            directory,
            &affiliate.node_id,
            path,
            &encode_remote(affiliate),
        )?;
    }
    let affiliates = scan(directory, ttl, MAX_SKIPPED_ENTRIES)
        .map_err(|e| describe("cannot read", directory, e))?;
    Ok((path, affiliates))
}

/// Writes this node's file: into a new temporary file of a random name — created exclusively
/// and never through a link, so a peer cannot make this node write anywhere else — synced,
/// then renamed into place (which replaces whatever has the file's name, a link included,
/// rather than following it). The temporary file is removed if any step fails.
fn write_own_file(
    directory: &Path,
    node_id: &str,
    path: &Path,
    bytes: &[u8],
) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| format!("cannot name a temporary file: {e}"))?;
    let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let temporary = directory.join(format!(".{node_id}.{suffix}.tmp"));
    let describe = |what: &str, path: &Path, e: std::io::Error| {
        format!("cannot {what} {}: {e}", path.display())
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&temporary)
        .map_err(|e| describe("create", &temporary, e))?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| describe("write", &temporary, e))
        .and_then(|()| {
            std::fs::rename(&temporary, path).map_err(|e| describe("rename to", path, e))
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// How a directory entry's modification time places it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Freshness {
    Live,
    Expired,
    /// Expired for [`DELETE_AFTER_TTLS`] TTLs: to delete.
    Dead,
    /// Dated more than [`MAX_CLOCK_SKEW`] in the future (or undated).
    Future,
}

fn freshness(modified: std::io::Result<SystemTime>, now: SystemTime, ttl: Duration) -> Freshness {
    let Ok(modified) = modified else {
        return Freshness::Future;
    };
    match now.duration_since(modified) {
        Ok(age) if age > ttl.saturating_mul(DELETE_AFTER_TTLS) => Freshness::Dead,
        Ok(age) if age > ttl => Freshness::Expired,
        Ok(_) => Freshness::Live,
        Err(ahead) if ahead.duration() > MAX_CLOCK_SKEW => Freshness::Future,
        Err(_) => Freshness::Live,
    }
}

/// Reads the live affiliates in `directory`: the regular files named `<nodeId>.json`, rewritten
/// within `ttl`, that decode as that node's affiliate; at most [`MAX_AFFILIATES`] of them, and
/// at most `max_skipped` ([`MAX_SKIPPED_ENTRIES`]) other entries skipped on the way. Deletes affiliate files
/// and temporary files that have been dead for [`DELETE_AFTER_TTLS`] TTLs.
fn scan(
    directory: &Path,
    ttl: Duration,
    max_skipped: usize,
) -> std::io::Result<std::collections::BTreeMap<String, Affiliate>> {
    let now = SystemTime::now();
    let mut affiliates = std::collections::BTreeMap::new();
    let mut skipped = 0usize;
    // Entries named like affiliates that cannot be one: counted, and reported once per scan
    let mut refused = 0usize;
    let mut example = None;
    for entry in std::fs::read_dir(directory)? {
        if affiliates.len() >= MAX_AFFILIATES {
            tracing::warn!(directory = %directory.display(), "the registry view is full ({MAX_AFFILIATES}); the rest of the directory is not read");
            break;
        }
        if skipped >= max_skipped {
            tracing::warn!(directory = %directory.display(), "stopped the scan after skipping {max_skipped} entries that are no live affiliates");
            break;
        }
        match read_entry(entry, now, ttl) {
            Entry::Affiliate(affiliate) => insert_bounded("directory", &mut affiliates, affiliate),
            Entry::Other => skipped += 1,
            Entry::Refused(why) => {
                skipped += 1;
                refused += 1;
                example.get_or_insert(why);
            }
        }
    }
    if let Some(example) = example {
        tracing::warn!(directory = %directory.display(), refused, %example, "skipping files named like affiliates that are no valid live affiliate");
    }
    Ok(affiliates)
}

/// What a directory entry turned out to be.
enum Entry {
    Affiliate(Affiliate),
    /// Another name, a temporary file, an expired file: nothing to report.
    Other,
    /// Named like an affiliate but unusable (not a regular file, too long, dated in the
    /// future, not a valid affiliate): why.
    Refused(String),
}

fn read_entry(entry: std::io::Result<std::fs::DirEntry>, now: SystemTime, ttl: Duration) -> Entry {
    let Ok(entry) = entry else {
        return Entry::Other;
    };
    let name = entry.file_name();
    let Some(name) = name.to_str() else {
        return Entry::Other;
    };
    let Some(node_id) = name
        .strip_suffix(".json")
        .filter(|id| validate_node_id(id).is_ok())
    else {
        if is_temporary_name(name) {
            // A write interrupted for good leaves its temporary file behind
            if let Ok(metadata) = entry.metadata() {
                if freshness(metadata.modified(), now, ttl) == Freshness::Dead {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        return Entry::Other;
    };
    // The entry's own metadata (it does not follow a link)
    let Ok(metadata) = entry.metadata() else {
        return Entry::Other;
    };
    match freshness(metadata.modified(), now, ttl) {
        Freshness::Live => {}
        Freshness::Expired => return Entry::Other,
        Freshness::Dead => {
            let _ = std::fs::remove_file(entry.path());
            return Entry::Other;
        }
        Freshness::Future => {
            return Entry::Refused(format!(
                "{name}: modified more than {MAX_CLOCK_SKEW:?} in the future"
            ))
        }
    }
    // Only regular files are opened: a device node could do anything when opened
    if !metadata.file_type().is_file() {
        return Entry::Refused(format!("{name}: not a regular file"));
    }
    let bytes = match read_affiliate_file(&entry.path()) {
        Ok(bytes) => bytes,
        Err(error) => return Entry::Refused(format!("{name}: {error}")),
    };
    match decode_remote(node_id, &bytes) {
        Ok(affiliate) => Entry::Affiliate(affiliate),
        Err(error) => Entry::Refused(format!("{name}: {error}")),
    }
}

/// Whether `name` is a temporary file of [`write_own_file`]: `.<nodeId>.<16 hex digits>.tmp`.
fn is_temporary_name(name: &str) -> bool {
    let Some((node_id, random)) = name
        .strip_prefix('.')
        .and_then(|n| n.strip_suffix(".tmp"))
        .and_then(|n| n.split_once('.'))
    else {
        return false;
    };
    validate_node_id(node_id).is_ok()
        && random.len() == 16
        && random.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Reads an affiliate file, whatever a peer put in its place since it was listed: opened
/// without following a link and without blocking (a FIFO opens at once), then checked on the
/// open handle — a regular file of at most [`MAX_AFFILIATE_BYTES`] — and read no further than
/// one byte past that bound, so a file that grows is refused too.
fn read_affiliate_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;

    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits())
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.file_type().is_file() {
        return Err(Error::new(ErrorKind::InvalidData, "not a regular file"));
    }
    let too_long = || {
        Error::new(
            ErrorKind::InvalidData,
            format!("longer than {MAX_AFFILIATE_BYTES} bytes"),
        )
    };
    if metadata.len() > MAX_AFFILIATE_BYTES as u64 {
        return Err(too_long());
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(MAX_AFFILIATE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() > MAX_AFFILIATE_BYTES {
        return Err(too_long());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    //! Rounds on a real directory planted with what a hostile peer could put there.

    use std::os::unix::fs::symlink;
    use std::sync::mpsc;

    use super::*;
    use crate::cluster::encode_node_id;

    /// Bounds the wait on a scan that must not block; only a broken system takes this long.
    const EVENT_TIMEOUT: Duration = Duration::from_secs(30);
    const TTL: Duration = Duration::from_secs(30);

    fn affiliate(n: u8) -> Affiliate {
        Affiliate {
            node_id: encode_node_id(&[n; 32]),
            addresses: vec!["192.0.2.1".parse().unwrap()],
            hostname: format!("node-{n}"),
            nodename: format!("node-{n}"),
            operating_system: "cosi-node (test)".into(),
            machine_type: "worker".into(),
            conditions: vec![],
        }
    }

    fn file_of(directory: &Path, affiliate: &Affiliate) -> PathBuf {
        directory.join(format!("{}.json", affiliate.node_id))
    }

    /// Writes `affiliate`'s file as its node would, last modified at `modified`.
    fn plant(directory: &Path, affiliate: &Affiliate, modified: SystemTime) -> PathBuf {
        let path = file_of(directory, affiliate);
        std::fs::write(&path, encode_remote(affiliate)).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        path
    }

    /// The node ids one round of a node that publishes nothing sees.
    fn scan_ids(directory: &Path) -> Vec<String> {
        let (_, affiliates) = round(directory, None, None, TTL).unwrap();
        affiliates.into_keys().collect()
    }

    #[test]
    fn a_scan_stops_after_skipping_its_bound_of_entries() {
        let directory = tempfile::tempdir().unwrap();
        let long_dead = SystemTime::now() - TTL * (DELETE_AFTER_TTLS + 1);
        for n in 0..5 {
            plant(directory.path(), &affiliate(n), long_dead);
        }
        let left = || std::fs::read_dir(directory.path()).unwrap().count();
        // A scan deletes each long-dead file it meets, so what is left shows how far it read:
        // two entries skipped, then it stops.
        assert!(scan(directory.path(), TTL, 2).unwrap().is_empty());
        assert_eq!(left(), 3);
        // The next scan reads on.
        assert!(scan(directory.path(), TTL, 2).unwrap().is_empty());
        assert_eq!(left(), 1);
    }

    /// Runs `work` on another thread and waits for its end (an event), so a call that blocks
    /// fails the test instead of hanging it.
    fn in_time<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || done.send(work()));
        finished
            .recv_timeout(EVENT_TIMEOUT)
            .expect("the call returned without blocking")
    }

    fn absent(path: &Path) -> bool {
        std::fs::symlink_metadata(path).err().map(|e| e.kind())
            == Some(std::io::ErrorKind::NotFound)
    }

    #[test]
    fn the_own_file_is_not_written_through_a_link_at_a_temporary_name() {
        let directory = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let mine = affiliate(1);
        symlink(
            &victim,
            directory.path().join(format!(".{}.json.tmp", mine.node_id)),
        )
        .unwrap();

        round(directory.path(), None, Some(mine.clone()), TTL).unwrap();

        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let own = file_of(directory.path(), &mine);
        assert!(std::fs::symlink_metadata(&own)
            .unwrap()
            .file_type()
            .is_file());
        assert_eq!(std::fs::read(&own).unwrap(), encode_remote(&mine));
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_file() {
        let directory = tempfile::tempdir().unwrap();
        let mine = affiliate(1);
        // A directory in the way of the rename
        let own = file_of(directory.path(), &mine);
        std::fs::create_dir(&own).unwrap();
        std::fs::write(own.join("inside"), b"x").unwrap();

        let error = round(directory.path(), None, Some(mine), TTL).unwrap_err();

        assert!(error.starts_with("cannot rename to"), "{error}");
        let names: Vec<_> = std::fs::read_dir(directory.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [own.file_name().unwrap()]);
    }

    #[test]
    fn a_link_named_like_an_affiliate_file_is_not_followed() {
        let directory = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let other = affiliate(2);
        let target = plant(outside.path(), &other, SystemTime::now());
        symlink(&target, file_of(directory.path(), &other)).unwrap();

        assert_eq!(scan_ids(directory.path()), Vec::<String>::new());
    }

    #[test]
    fn a_fifo_named_like_an_affiliate_file_does_not_block_the_scan() {
        let directory = tempfile::tempdir().unwrap();
        let live = affiliate(2);
        plant(directory.path(), &live, SystemTime::now());
        nix::unistd::mkfifo(
            &file_of(directory.path(), &affiliate(3)),
            nix::sys::stat::Mode::S_IRWXU,
        )
        .unwrap();

        let path = directory.path().to_path_buf();
        assert_eq!(in_time(move || scan_ids(&path)), [live.node_id]);
    }

    #[test]
    fn the_reader_opens_a_fifo_without_blocking_and_refuses_it() {
        let directory = tempfile::tempdir().unwrap();
        let fifo = file_of(directory.path(), &affiliate(3));
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();

        let error = in_time(move || read_affiliate_file(&fifo)).unwrap_err();

        assert_eq!(error.to_string(), "not a regular file");
    }

    #[test]
    fn the_reader_does_not_follow_a_link() {
        let directory = tempfile::tempdir().unwrap();
        let other = affiliate(2);
        let target = plant(directory.path(), &other, SystemTime::now());
        let link = directory.path().join("link.json");
        symlink(&target, &link).unwrap();

        let error = read_affiliate_file(&link).unwrap_err();

        assert_eq!(error.raw_os_error(), Some(nix::libc::ELOOP));
    }

    #[test]
    fn the_reader_refuses_a_file_longer_than_the_limit() {
        let directory = tempfile::tempdir().unwrap();
        let path = file_of(directory.path(), &affiliate(2));
        std::fs::write(&path, vec![b' '; MAX_AFFILIATE_BYTES + 1]).unwrap();

        let error = read_affiliate_file(&path).unwrap_err();

        assert_eq!(error.to_string(), "longer than 16384 bytes");
    }

    #[test]
    fn junk_entries_do_not_count_towards_the_affiliates_a_scan_keeps() {
        let directory = tempfile::tempdir().unwrap();
        let live: Vec<_> = (1..=3).map(affiliate).collect();
        for affiliate in &live {
            plant(directory.path(), affiliate, SystemTime::now());
        }
        for n in 0..20_000 {
            std::fs::File::create(directory.path().join(format!("junk-{n}"))).unwrap();
        }

        let mut ids: Vec<_> = live.iter().map(|a| a.node_id.clone()).collect();
        ids.sort();
        assert_eq!(scan_ids(directory.path()), ids);
    }

    #[test]
    fn a_file_expired_for_ten_ttls_is_deleted() {
        let directory = tempfile::tempdir().unwrap();
        let long_ago = SystemTime::now() - TTL * DELETE_AFTER_TTLS - Duration::from_secs(60);
        let dead = plant(directory.path(), &affiliate(2), long_ago);

        assert_eq!(scan_ids(directory.path()), Vec::<String>::new());
        assert!(absent(&dead));
    }

    #[test]
    fn a_temporary_file_dead_for_ten_ttls_is_deleted() {
        let directory = tempfile::tempdir().unwrap();
        let long_ago = SystemTime::now() - TTL * DELETE_AFTER_TTLS - Duration::from_secs(60);
        let temporary = directory
            .path()
            .join(format!(".{}.0123456789abcdef.tmp", affiliate(2).node_id));
        std::fs::File::create(&temporary)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();

        scan_ids(directory.path());

        assert!(absent(&temporary));
    }

    #[test]
    fn a_file_dated_past_the_clock_skew_is_not_live() {
        let directory = tempfile::tempdir().unwrap();
        let ahead = SystemTime::now() + MAX_CLOCK_SKEW + Duration::from_secs(60);
        plant(directory.path(), &affiliate(2), ahead);

        assert_eq!(scan_ids(directory.path()), Vec::<String>::new());
    }
}
