//! The OCI documents that name the layer: the image config (platform, entrypoint, user,
//! labels) and the image manifest. Serialised from fixed structures, so the same inputs give
//! the same bytes and digests.

use serde_json::json;

use super::layer::{sha256, OWNER};

pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// Where the controller binary sits in the image.
pub const ENTRYPOINT: &str = "/usr/local/bin/jointer-controller";
pub const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// What the image says about itself (`org.opencontainers.image.*` labels).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    pub version: String,
    /// The git revision of the workspace the binary was built from, when known.
    pub revision: Option<String>,
    pub source: String,
}

/// A document and its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    pub bytes: Vec<u8>,
    pub digest: String,
}

impl Blob {
    fn of(value: serde_json::Value) -> Blob {
        let bytes = serde_json::to_vec(&value).unwrap_or_default();
        Blob {
            digest: sha256(&bytes),
            bytes,
        }
    }
}

/// The image config for one layer with `diff_id`, on linux/`architecture` (`amd64`, `arm64`).
pub fn config(architecture: &str, diff_id: &str, provenance: &Provenance) -> Blob {
    let mut labels = serde_json::Map::new();
    labels.insert(
        "org.opencontainers.image.source".into(),
        provenance.source.clone().into(),
    );
    labels.insert(
        "org.opencontainers.image.version".into(),
        provenance.version.clone().into(),
    );
    if let Some(revision) = &provenance.revision {
        labels.insert(
            "org.opencontainers.image.revision".into(),
            revision.clone().into(),
        );
    }
    Blob::of(json!({
        "architecture": architecture,
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {
            "User": format!("{OWNER}:{OWNER}"),
            "Entrypoint": [ENTRYPOINT],
            "Env": [
                "PATH=/usr/local/bin",
                format!("SSL_CERT_FILE={CA_BUNDLE}"),
            ],
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "jointer image build"}],
    }))
}

/// The image manifest naming `config` and the one layer.
pub fn manifest(config: &Blob, layer_digest: &str, layer_size: usize) -> Blob {
    Blob::of(json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {
            "mediaType": CONFIG_MEDIA_TYPE,
            "digest": config.digest,
            "size": config.bytes.len(),
        },
        "layers": [{
            "mediaType": LAYER_MEDIA_TYPE,
            "digest": layer_digest,
            "size": layer_size,
        }],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provenance(revision: Option<&str>) -> Provenance {
        Provenance {
            version: "0.1.0".into(),
            revision: revision.map(str::to_string),
            source: "https://example.com/jointer".into(),
        }
    }

    #[test]
    fn the_config_runs_the_controller_as_65532_with_its_labels() {
        let c = config("amd64", "sha256:00", &provenance(Some("abc")));
        let v: serde_json::Value = serde_json::from_slice(&c.bytes).expect("json");
        assert_eq!(v["config"]["User"], "65532:65532");
        assert_eq!(v["config"]["Entrypoint"][0], ENTRYPOINT);
        assert_eq!(v["architecture"], "amd64");
        assert_eq!(v["rootfs"]["diff_ids"][0], "sha256:00");
        let labels = &v["config"]["Labels"];
        assert_eq!(labels["org.opencontainers.image.version"], "0.1.0");
        assert_eq!(labels["org.opencontainers.image.revision"], "abc");
        assert!(config("amd64", "sha256:00", &provenance(None)).bytes != c.bytes);
        assert_eq!(c, config("amd64", "sha256:00", &provenance(Some("abc"))));
    }

    #[test]
    fn the_manifest_names_the_config_and_layer_by_digest_and_size() {
        let c = config("arm64", "sha256:00", &provenance(None));
        let m = manifest(&c, "sha256:11", 42);
        let v: serde_json::Value = serde_json::from_slice(&m.bytes).expect("json");
        assert_eq!(v["mediaType"], MANIFEST_MEDIA_TYPE);
        assert_eq!(v["config"]["digest"], c.digest.as_str());
        assert_eq!(v["config"]["size"], c.bytes.len());
        assert_eq!(v["layers"][0]["digest"], "sha256:11");
        assert_eq!(v["layers"][0]["size"], 42);
        assert_eq!(m.digest, sha256(&m.bytes));
    }
}
