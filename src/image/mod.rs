//! The bundled controller's OCI image, built the way `ko` builds Go images: no Docker and no
//! base image — the controller binary from this workspace, a CA bundle (compiled into jointer
//! from Mozilla's roots) and a non-root user in one deterministic layer, so the same source
//! gives the same digest and a converged `apply` has nothing to push. `push` uploads it.

pub mod binary;
pub mod layer;
pub mod oci;
pub mod push;

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::progress::Progress;
use layer::{Entry, Layer};
use oci::{Blob, Provenance};

/// Where the image says its source lives.
pub const SOURCE: &str = "https://github.com/jointer-dev/jointer";

/// Bumped whenever the layer's layout changes, so a cached layer of another layout is not reused.
const LAYOUT: u32 = 1;

/// A built image: its one layer, config and manifest.
#[derive(Debug, Clone)]
pub struct Image {
    pub architecture: &'static str,
    pub provenance: Provenance,
    pub layer: LayerBlob,
    pub config: Blob,
    pub manifest: Blob,
}

impl Image {
    /// The manifest digest a Deployment pins (`sha256:…`).
    pub fn digest(&self) -> &str {
        &self.manifest.digest
    }

    /// `built from 0.1.0, 1a2b3c4d5e6f, linux/amd64` — what the plan says about it.
    pub fn origin(&self) -> String {
        let revision = match &self.provenance.revision {
            Some(r) => format!(", {}", short(r)),
            None => String::new(),
        };
        format!(
            "built from {}{revision}, linux/{}",
            self.provenance.version, self.architecture
        )
    }
}

fn short(revision: &str) -> String {
    let (head, dirty) = match revision.strip_suffix("-dirty") {
        Some(h) => (h, "-dirty"),
        None => (revision, ""),
    };
    format!("{}{dirty}", &head[..head.len().min(12)])
}

/// Finds (or builds) the controller binary and assembles its image.
pub fn build(progress: &dyn Progress) -> Result<Image> {
    let binary = binary::locate(progress)?;
    let architecture = binary::architecture()?;
    let layer = cached_layer(&binary.path, progress)?;
    let provenance = Provenance {
        version: env!("CARGO_PKG_VERSION").to_string(),
        revision: binary.revision,
        source: SOURCE.to_string(),
    };
    let config = oci::config(architecture, &layer.diff_id, &provenance);
    let manifest = oci::manifest(&config, &layer.digest, layer.size);
    Ok(Image {
        architecture,
        provenance,
        layer,
        config,
        manifest,
    })
}

/// The layer's files around `binary` (`size` bytes, streamed).
fn entries(binary: Box<dyn Read + '_>, size: u64) -> Vec<Entry<'_>> {
    vec![
        Entry::dir("etc", 0o755),
        Entry::file(
            "etc/passwd",
            0o644,
            b"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n".to_vec(),
        ),
        Entry::file("etc/group", 0o644, b"nonroot:x:65532:\n".to_vec()),
        Entry::dir("etc/ssl", 0o755),
        Entry::dir("etc/ssl/certs", 0o755),
        Entry::file(oci::CA_BUNDLE.trim_start_matches('/'), 0o644, ca_bundle()),
        Entry::dir("tmp", 0o1777),
        Entry::dir("usr", 0o755),
        Entry::dir("usr/local", 0o755),
        Entry::dir("usr/local/bin", 0o755),
        Entry {
            path: oci::ENTRYPOINT.trim_start_matches('/').to_string(),
            mode: 0o755,
            content: layer::Content::Reader(binary, size),
        },
    ]
}

/// Mozilla's root CAs (as webpki-root-certs ships them) as one PEM bundle.
fn ca_bundle() -> Vec<u8> {
    let mut pem = String::new();
    for cert in webpki_root_certs::TLS_SERVER_ROOT_CERTS {
        let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    pem.into_bytes()
}

/// The compressed layer as the image names it, and where its bytes are: a plan needs only
/// the digests, so a cached layer is read from disk only when it is pushed.
#[derive(Debug, Clone)]
pub struct LayerBlob {
    pub digest: String,
    pub diff_id: String,
    pub size: usize,
    source: BlobSource,
}

#[derive(Debug, Clone)]
enum BlobSource {
    Memory(Vec<u8>),
    File(PathBuf),
}

impl LayerBlob {
    /// The compressed bytes, checked against the digest (a cache file changed since it was
    /// written is refused, naming it).
    pub fn bytes(&self) -> Result<Vec<u8>> {
        match &self.source {
            BlobSource::Memory(bytes) => Ok(bytes.clone()),
            BlobSource::File(path) => {
                let bytes =
                    std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
                anyhow::ensure!(
                    layer::sha256(&bytes) == self.digest,
                    "the cached image layer {} does not match its digest {}: delete it and run again",
                    path.display(),
                    self.digest
                );
                Ok(bytes)
            }
        }
    }
}

/// What the cache keeps beside a compressed layer.
#[derive(Serialize, Deserialize)]
struct CachedDigests {
    digest: String,
    diff_id: String,
    size: usize,
}

/// `$JOINTER_IMAGE_CACHE_DIR`, else `images/` in jointer's cache directory.
fn cache_dir() -> Option<PathBuf> {
    std::env::var_os("JOINTER_IMAGE_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| crate::commands::catalog::cache_dir().map(|d| d.join("images")))
}

/// The layer for `binary`, from the cache when this binary (by content) was packed before:
/// compressing a large binary is most of a build's time. A binary whose path, size, mtime
/// and inode were seen before is not even hashed again (as make trusts mtimes).
fn cached_layer(binary: &Path, progress: &dyn Progress) -> Result<LayerBlob> {
    let Some(dir) = cache_dir() else {
        return pack(binary, progress).map(in_memory);
    };
    let stamp = dir.join("stamps").join(stamp_of(binary)?);
    let key = match std::fs::read_to_string(&stamp) {
        Ok(key) => key.trim().to_string(),
        Err(_) => format!("{}-{LAYOUT}", file_sha256(binary)?),
    };
    let (gz, meta) = (
        dir.join(format!("{key}.tar.gz")),
        dir.join(format!("{key}.json")),
    );
    let cached = std::fs::read_to_string(&meta)
        .ok()
        .and_then(|t| serde_json::from_str::<CachedDigests>(&t).ok())
        .filter(|d| std::fs::metadata(&gz).is_ok_and(|m| m.len() as usize == d.size));
    let blob = match cached {
        Some(d) => LayerBlob {
            digest: d.digest,
            diff_id: d.diff_id,
            size: d.size,
            source: BlobSource::File(gz),
        },
        None => {
            let built = pack(binary, progress)?;
            // Best effort: a cache that cannot be written only costs the next run the packing.
            match store(&gz, &meta, &built) {
                Ok(()) => LayerBlob {
                    size: built.gzip.len(),
                    digest: built.digest,
                    diff_id: built.diff_id,
                    source: BlobSource::File(gz),
                },
                Err(_) => in_memory(built),
            }
        }
    };
    let _ = write_atomic(&stamp, key.as_bytes());
    Ok(blob)
}

fn in_memory(layer: Layer) -> LayerBlob {
    LayerBlob {
        size: layer.gzip.len(),
        digest: layer.digest,
        diff_id: layer.diff_id,
        source: BlobSource::Memory(layer.gzip),
    }
}

fn pack(binary: &Path, progress: &dyn Progress) -> Result<Layer> {
    progress.note(&format!(
        "packing {} into the image layer",
        binary.display()
    ));
    let file = File::open(binary).with_context(|| format!("reading {}", binary.display()))?;
    let size = file.metadata()?.len();
    layer::build(entries(Box::new(BufReader::new(file)), size))
        .with_context(|| format!("packing {}", binary.display()))
}

/// A name for the binary's identity on disk: canonical path, size, mtime and inode.
fn stamp_of(binary: &Path) -> Result<String> {
    use std::os::unix::fs::MetadataExt;
    let path = binary
        .canonicalize()
        .with_context(|| format!("reading {}", binary.display()))?;
    let m = std::fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?;
    let id = format!(
        "{}\0{}\0{}.{}\0{}\0{LAYOUT}",
        path.display(),
        m.len(),
        m.mtime(),
        m.mtime_nsec(),
        m.ino()
    );
    Ok(layer::sha256(id.as_bytes())
        .trim_start_matches("sha256:")
        .to_string())
}

fn store(gz: &Path, meta: &Path, layer: &Layer) -> io::Result<()> {
    let digests = serde_json::to_vec(&CachedDigests {
        digest: layer.digest.clone(),
        diff_id: layer.diff_id.clone(),
        size: layer.gzip.len(),
    })?;
    write_atomic(gz, &layer.gzip)?;
    write_atomic(meta, &digests)
}

/// Writes through a temporary file renamed into place: a killed run leaves no half file.
fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::fs::write(tmp.path(), bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn file_sha256(path: &Path) -> Result<String> {
    let mut file = File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut hashing = layer::Hashing::new(io::sink());
    io::copy(&mut file, &mut hashing).with_context(|| format!("reading {}", path.display()))?;
    Ok(hashing.digest().trim_start_matches("sha256:").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_bundle_holds_every_root_as_pem() {
        let pem = String::from_utf8(ca_bundle()).expect("utf8");
        assert_eq!(
            pem.matches("-----BEGIN CERTIFICATE-----").count(),
            webpki_root_certs::TLS_SERVER_ROOT_CERTS.len()
        );
        assert!(pem.lines().all(|l| l.len() <= 64 || l.starts_with("-----")));
    }

    #[test]
    fn a_revision_is_shortened_and_keeps_dirty() {
        assert_eq!(short("0123456789abcdef0123"), "0123456789ab");
        assert_eq!(short("0123456789abcdef-dirty"), "0123456789ab-dirty");
    }
}
