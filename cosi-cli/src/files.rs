//! Files the operator names — the client config and the certificates it names, configs and
//! patches to send, PEM files to copy — read with a bound. A path that names something huge or
//! endless (`--config /dev/zero`, a log file named by mistake) is refused once it passes the
//! bound, instead of filling memory until the process is killed.

use std::io::{self, Read};
use std::path::Path;

/// The most a client config may hold (contexts with inline certificates take a few kilobytes
/// each).
pub const MAX_CLIENT_CONFIG: u64 = 16 << 20;

/// The most a PEM file (a CA, a certificate, a key) may hold.
pub const MAX_PEM: u64 = 1 << 20;

/// The most a machine config, or all the patches of one change together, may hold: half of
/// what a node accepts in one message (the rest is the request around it), and far more than
/// any machine config (tens of kilobytes).
pub const MAX_CONFIG_CHANGE: u64 = cosi_api::server::MAX_MESSAGE_SIZE as u64 / 2;

/// The bytes of `path`, if it holds at most `limit` of them; a longer file is an error of kind
/// [`io::ErrorKind::FileTooLarge`] that says the limit and what the file was taken for
/// (`what`: "a client config").
pub fn read(path: &Path, limit: u64, what: &str) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!(
                "is larger than {} MiB, more than {what} holds; is it the right file?",
                limit >> 20
            ),
        ));
    }
    Ok(bytes)
}

/// [`read`] as text; text that is not UTF-8 is an error of kind [`io::ErrorKind::InvalidData`].
pub fn read_text(path: &Path, limit: u64, what: &str) -> io::Result<String> {
    String::from_utf8(read(path, limit, what)?).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "is not UTF-8 text (byte {} is not), so it is not {what}",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_of_exactly_the_limit_is_read_and_one_byte_more_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![b'x'; 1 << 20]).unwrap();
        assert_eq!(read(&path, 1 << 20, "a test").unwrap().len(), 1 << 20);
        std::fs::write(&path, vec![b'x'; (1 << 20) + 1]).unwrap();
        let e = read(&path, 1 << 20, "a test").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(
            e.to_string(),
            "is larger than 1 MiB, more than a test holds; is it the right file?"
        );
    }

    #[test]
    fn an_endless_file_is_refused_at_the_limit() {
        let e = read(Path::new("/dev/zero"), 1 << 20, "a test").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
    }

    #[test]
    fn text_that_is_not_utf8_says_where() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"ab\xffc").unwrap();
        assert_eq!(
            read_text(&path, 1 << 20, "a test").unwrap_err().to_string(),
            "is not UTF-8 text (byte 2 is not), so it is not a test"
        );
    }
}
