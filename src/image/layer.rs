//! The image's one layer: a tar archive built so the same files always give the same bytes
//! (entries in path order, mtime 0, owner 65532 — the conventional non-root user — and no
//! host user or group names), gzip-compressed with a fixed header. Its two digests are what
//! the OCI config (`diff_id`, of the tar) and the manifest (of the gzip) name.

use std::io::{self, Read, Write};

use flate2::write::GzEncoder;
use flate2::Compression;
use sha2::{Digest, Sha256};

/// The owner of every entry, and the user the container runs as.
pub const OWNER: u64 = 65532;

/// What an entry holds.
pub enum Content<'a> {
    Dir,
    Bytes(Vec<u8>),
    /// Streamed, so a large binary is not held in memory twice.
    Reader(Box<dyn Read + 'a>, u64),
}

pub struct Entry<'a> {
    /// Relative to the root, without a leading `/` (`usr/local/bin/x`).
    pub path: String,
    pub mode: u32,
    pub content: Content<'a>,
}

impl<'a> Entry<'a> {
    pub fn dir(path: &str, mode: u32) -> Entry<'a> {
        Entry {
            path: path.to_string(),
            mode,
            content: Content::Dir,
        }
    }

    pub fn file(path: &str, mode: u32, bytes: Vec<u8>) -> Entry<'a> {
        Entry {
            path: path.to_string(),
            mode,
            content: Content::Bytes(bytes),
        }
    }
}

/// A compressed layer and its digests (`sha256:…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    pub gzip: Vec<u8>,
    /// Of the compressed bytes: the manifest's layer descriptor.
    pub digest: String,
    /// Of the uncompressed tar: the config's `rootfs.diff_ids`.
    pub diff_id: String,
}

/// Builds the layer from `entries`, in path order whatever order they come in.
pub fn build(mut entries: Vec<Entry<'_>>) -> io::Result<Layer> {
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    // gzip header: no file name, mtime 0; the OS byte is fixed by the encoder.
    let gzip = GzEncoder::new(Vec::new(), Compression::default());
    let mut tar = tar::Builder::new(Hashing::new(gzip));
    for entry in entries {
        let mut header = tar::Header::new_ustar();
        header.set_mode(entry.mode);
        header.set_uid(OWNER);
        header.set_gid(OWNER);
        header.set_mtime(0);
        match entry.content {
            Content::Dir => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                tar.append_data(&mut header, format!("{}/", entry.path), io::empty())?;
            }
            Content::Bytes(bytes) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(bytes.len() as u64);
                tar.append_data(&mut header, &entry.path, bytes.as_slice())?;
            }
            Content::Reader(reader, size) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(size);
                tar.append_data(&mut header, &entry.path, reader.take(size))?;
            }
        }
    }
    let hashing = tar.into_inner()?;
    let diff_id = digest_of(hashing.hasher);
    let gzip = hashing.inner.finish()?;
    Ok(Layer {
        digest: sha256(&gzip),
        diff_id,
        gzip,
    })
}

/// `sha256:<hex>` of `bytes`, the form OCI descriptors use.
pub fn sha256(bytes: &[u8]) -> String {
    digest_of(Sha256::new_with_prefix(bytes))
}

fn digest_of(hasher: Sha256) -> String {
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

/// Hashes what passes through it on the way to `inner`.
pub struct Hashing<W> {
    inner: W,
    hasher: Sha256,
}

impl<W> Hashing<W> {
    pub fn new(inner: W) -> Self {
        Hashing {
            inner,
            hasher: Sha256::new(),
        }
    }

    /// `sha256:<hex>` of everything written.
    pub fn digest(self) -> String {
        digest_of(self.hasher)
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(binary: &[u8]) -> Vec<Entry<'static>> {
        vec![
            Entry::file("usr/local/bin/app", 0o755, binary.to_vec()),
            Entry::dir("usr", 0o755),
            Entry::dir("usr/local", 0o755),
            Entry::dir("usr/local/bin", 0o755),
        ]
    }

    #[test]
    fn the_same_files_give_the_same_digests() {
        let a = build(entries(b"binary")).expect("layer");
        let b = build(entries(b"binary")).expect("layer");
        assert_eq!(a, b);
        let c = build(entries(b"binary2")).expect("layer");
        assert_ne!(a.digest, c.digest);
        assert_ne!(a.diff_id, c.diff_id);
        assert_eq!(a.digest, sha256(&a.gzip));
    }

    #[test]
    fn entries_are_sorted_owned_by_65532_and_dated_0() {
        let layer = build(entries(b"#!")).expect("layer");
        let tar_bytes = {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(layer.gzip.as_slice())
                .read_to_end(&mut out)
                .expect("gunzip");
            out
        };
        assert_eq!(layer.diff_id, sha256(&tar_bytes));
        let mut archive = tar::Archive::new(tar_bytes.as_slice());
        let mut seen = Vec::new();
        for entry in archive.entries().expect("entries") {
            let entry = entry.expect("entry");
            let h = entry.header();
            assert_eq!(h.uid().expect("uid"), OWNER);
            assert_eq!(h.gid().expect("gid"), OWNER);
            assert_eq!(h.mtime().expect("mtime"), 0);
            assert_eq!(h.username().expect("user"), Some(""));
            seen.push(entry.path().expect("path").display().to_string());
        }
        assert_eq!(
            seen,
            ["usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/app"]
        );
    }
}
