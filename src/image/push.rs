//! Uploading a built image with the OCI distribution protocol (the `oci-client` crate): each
//! blob only when the registry lacks it, then the manifest under a tag derived from its digest
//! (so an immutable-tag repository accepts a re-push of the same image and refuses nothing).

use std::time::Instant;

use anyhow::{Context as _, Result};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};

use super::Image;
use crate::progress::Progress;

/// A registry endpoint and its credentials (ECR: `https://<account>.dkr.ecr.<region>.…`,
/// user `AWS` and the authorization token's password).
pub struct Registry {
    pub endpoint: String,
    pub username: String,
    pub password: String,
}

impl Registry {
    /// The host[:port] references name, and whether it speaks plain HTTP (a local registry).
    fn host(&self) -> (&str, bool) {
        match self.endpoint.strip_prefix("http://") {
            Some(host) => (host.trim_end_matches('/'), true),
            None => (
                self.endpoint
                    .trim_start_matches("https://")
                    .trim_end_matches('/'),
                false,
            ),
        }
    }
}

/// Reads a blob's bytes when it has to be uploaded.
type BlobBytes<'a> = dyn Fn() -> Result<Vec<u8>> + 'a;

/// What a push did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pushed {
    pub blobs: usize,
    pub bytes: usize,
    pub skipped: usize,
}

/// The tag an image is pushed under: the version and the digest's first 12 hex digits.
pub fn tag(image: &Image) -> String {
    let hex = image.digest().trim_start_matches("sha256:");
    format!("{}-{}", image.provenance.version, &hex[..hex.len().min(12)])
}

/// Pushes `image` to `repository` in `registry`.
pub async fn push(
    image: &Image,
    registry: &Registry,
    repository: &str,
    progress: &dyn Progress,
) -> Result<Pushed> {
    let (host, plain_http) = registry.host();
    let client = Client::new(ClientConfig {
        protocol: if plain_http {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        ..Default::default()
    });
    let reference = Reference::with_tag(host.to_string(), repository.to_string(), tag(image));
    let auth = RegistryAuth::Basic(registry.username.clone(), registry.password.clone());
    client
        .auth(&reference, &auth, RegistryOperation::Push)
        .await
        .with_context(|| format!("logging in to {host}"))?;
    let mut pushed = Pushed::default();
    let layer = || image.layer.bytes();
    let config = || Ok(image.config.bytes.clone());
    let blobs: [(&str, &str, &BlobBytes); 2] = [
        ("layer", &image.layer.digest, &layer),
        ("config", &image.config.digest, &config),
    ];
    for (what, digest, bytes) in blobs {
        let exists = client
            .blob_exists(&reference, digest)
            .await
            .with_context(|| format!("asking {host}/{repository} for blob {digest}"))?;
        if exists {
            progress.note(&format!(
                "  {what} {} already in the registry",
                short(digest)
            ));
            pushed.skipped += 1;
            continue;
        }
        let bytes = bytes()?;
        let size = bytes.len();
        let started = Instant::now();
        client
            .push_blob(&reference, bytes, digest)
            .await
            .with_context(|| format!("pushing the {what} blob {digest} to {host}/{repository}"))?;
        let secs = started.elapsed().as_secs_f64();
        progress.note(&format!(
            "  {what} {} pushed: {} in {secs:.1} s ({}/s)",
            short(digest),
            megabytes(size),
            megabytes((size as f64 / secs.max(0.001)) as usize)
        ));
        pushed.blobs += 1;
        pushed.bytes += size;
    }
    let content_type = http::HeaderValue::from_static(super::oci::MANIFEST_MEDIA_TYPE);
    client
        .push_manifest_raw(&reference, image.manifest.bytes.clone(), content_type)
        .await
        .with_context(|| {
            format!(
                "pushing the manifest {} to {host}/{repository}",
                image.digest()
            )
        })?;
    progress.note(&format!(
        "  manifest {} tagged {}",
        short(image.digest()),
        reference.tag().unwrap_or_default()
    ));
    Ok(pushed)
}

fn short(digest: &str) -> &str {
    &digest[..digest.len().min("sha256:".len() + 12)]
}

fn megabytes(bytes: usize) -> String {
    format!("{:.1} MB", bytes as f64 / 1_000_000.0)
}
