//! The bundled controller's image on the test world: `apply` creates the ECR repository,
//! builds the image from the workspace's controller binary and pushes it to the real OCI
//! registry behind the gap layer's ECR, and pins the Deployment to its digest. The image
//! pulled back holds a binary that runs; a converged apply pushes nothing; another binary
//! is drift; a controller whose image is missing fails `apply --wait` fast; teardown removes
//! the repository.

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use serde_json::Value;

use crate::support::testenv::{self, clear_calls, gap, mutating_calls, registry_writes};
use crate::support::world::Setup;

async fn deployment_image(namespace: &str) -> String {
    let api: Api<Deployment> = Api::namespaced(testenv::kube().await, namespace);
    let d = api
        .get("jointer-controller")
        .await
        .expect("controller Deployment");
    d.spec.template.spec.expect("pod spec").containers[0]
        .image
        .clone()
        .expect("image")
}

/// Pulls `reference` (`host/repo@sha256:…`) from the registry ECR's token points at, unpacks
/// its layer into `dir` and returns the manifest.
async fn pull_and_unpack(ecr: &aws_sdk_ecr::Client, reference: &str, dir: &Path) -> Value {
    let auth = ecr.get_authorization_token().send().await.expect("token");
    let data = &auth.authorization_data.expect("data")[0];
    let endpoint = data.proxy_endpoint.clone().expect("proxy endpoint");
    let token = base64::engine::general_purpose::STANDARD
        .decode(data.authorization_token.clone().expect("token"))
        .expect("base64");
    let token = String::from_utf8(token).expect("utf8");
    let (user, password) = token.split_once(':').expect("user:password");
    let (_, path) = reference.split_once('/').expect("host/path");
    let (repo, digest) = path.split_once('@').expect("@digest");
    let host = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let client = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    });
    let r =
        oci_client::Reference::with_digest(host.to_string(), repo.to_string(), digest.to_string());
    let auth = oci_client::secrets::RegistryAuth::Basic(user.into(), password.into());
    let (manifest, got) = client
        .pull_manifest_raw(&r, &auth, &[oci_client::manifest::OCI_IMAGE_MEDIA_TYPE])
        .await
        .expect("pull manifest");
    assert_eq!(
        got, digest,
        "the registry serves the manifest under the pinned digest"
    );
    let manifest: Value = serde_json::from_slice(&manifest).expect("manifest JSON");
    let layer = manifest["layers"][0]["digest"]
        .as_str()
        .expect("layer digest")
        .to_string();
    let mut gz = Vec::new();
    client
        .pull_blob(&r, layer.as_str(), &mut gz)
        .await
        .expect("pull layer");
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice())
        .read_to_end(&mut tar)
        .expect("gunzip");
    tar::Archive::new(tar.as_slice())
        .unpack(dir)
        .expect("unpack");
    manifest
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_builds_pushes_and_pins_the_controller_image() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("img", "identity: pod-identity").await;
    let ecr = aws_sdk_ecr::Client::new(&testenv::aws().await);
    let repository = format!("jointer-controller/{}", s.cluster);
    let uri_prefix = format!("123456789012.dkr.ecr.us-east-1.amazonaws.com/{repository}@sha256:");

    let plan = s.jointer(&["plan"]);
    assert_eq!(plan.code, 0, "{plan:#?}");
    assert!(plan.stdout.contains(&format!("+ ecr repository {repository}  (immutable tags, scan on push, keeps the newest 10 images)")), "{}", plan.stdout);
    assert!(
        plan.stdout.contains(&format!("+ image {uri_prefix}")),
        "{}",
        plan.stdout
    );
    assert!(plan.stdout.contains("(built from 0.1.0"), "{}", plan.stdout);

    let started = Instant::now();
    s.apply();
    let cold = started.elapsed();
    let pinned = deployment_image("kube-system").await;
    assert!(pinned.starts_with(&uri_prefix), "{pinned}");
    let described = ecr
        .describe_repositories()
        .repository_names(&repository)
        .send()
        .await
        .expect("repository");
    let repo = &described.repositories.expect("repositories")[0];
    assert_eq!(
        repo.image_tag_mutability.as_ref().map(|m| m.as_str()),
        Some("IMMUTABLE")
    );
    assert!(repo
        .image_scanning_configuration
        .as_ref()
        .is_some_and(|c| c.scan_on_push));
    let policy = ecr
        .get_lifecycle_policy()
        .repository_name(&repository)
        .send()
        .await
        .expect("policy");
    let policy: Value =
        serde_json::from_str(&policy.lifecycle_policy_text.expect("text")).expect("json");
    assert_eq!(policy["rules"][0]["selection"]["countNumber"], 10);

    // The image holds the controller, runnable, as the non-root user.
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = pull_and_unpack(&ecr, &pinned, dir.path()).await;
    assert_eq!(manifest["layers"].as_array().map(Vec::len), Some(1));
    let version = std::process::Command::new(dir.path().join("usr/local/bin/jointer-controller"))
        .arg("--version")
        .output()
        .expect("run the image's binary");
    assert!(
        String::from_utf8_lossy(&version.stdout).contains(env!("CARGO_PKG_VERSION")),
        "{version:?}"
    );
    assert!(dir
        .path()
        .join("etc/ssl/certs/ca-certificates.crt")
        .is_file());

    // Converged: nothing is pushed, nothing on AWS changes.
    gap("DELETE", "/_gap/registry/requests", None);
    clear_calls();
    let started = Instant::now();
    let again = s.apply();
    let warm = started.elapsed();
    assert!(!again.stdout.contains("+ image"), "{}", again.stdout);
    assert_eq!(mutating_calls(), Vec::<String>::new());
    assert_eq!(registry_writes(&repository), Vec::<String>::new());
    s.in_sync();

    // Another controller binary (a source change) is drift, and apply pushes only what
    // changed: the new layer, config and manifest.
    let changed = s.ws.path("jointer-controller");
    let mut bytes = std::fs::read(
        Path::new(env!("CARGO_BIN_EXE_jointer")).with_file_name("jointer-controller"),
    )
    .expect("binary");
    bytes.extend_from_slice(b"\0a source change");
    std::fs::write(&changed, &bytes).expect("write binary");
    let changed = changed.display().to_string();
    let env = [("JOINTER_CONTROLLER_BINARY", changed.as_str())];
    let drift =
        s.ws.jointer_with_env(&["drift", "-f", "jointer.yaml"], &env);
    assert_eq!(drift.code, 2, "{drift:#?}");
    assert!(
        drift.stdout.contains(&format!("image {uri_prefix}"))
            && drift.stdout.contains("missing: built from 0.1.0"),
        "{}",
        drift.stdout
    );
    assert!(
        drift
            .stdout
            .contains("Deployment kube-system/jointer-controller")
            && drift.stdout.contains("containers[0].image"),
        "{}",
        drift.stdout
    );
    gap("DELETE", "/_gap/registry/requests", None);
    let applied =
        s.ws.jointer_with_env(&["apply", "--yes", "-f", "jointer.yaml"], &env);
    assert_eq!(applied.code, 0, "{applied:#?}");
    let repinned = deployment_image("kube-system").await;
    assert!(
        repinned.starts_with(&uri_prefix) && repinned != pinned,
        "{repinned}"
    );
    let pushes: Vec<String> = registry_writes(&repository);
    assert!(
        pushes.iter().any(|r| r.contains("/manifests/")),
        "{pushes:?}"
    );
    assert!(
        applied.stderr.contains("layer sha256:") && applied.stderr.contains("pushed"),
        "{}",
        applied.stderr
    );

    // A published image that does not exist: apply --wait names the pull failure at once.
    s.ws.write(
        "jointer.yaml",
        &format!(
            "cluster: {{ name: {}, region: us-east-1 }}\nidentity: pod-identity\ncontroller:\n  image: {{ repository: 123456789012.dkr.ecr.us-east-1.amazonaws.com/{repository}, tag: missing }}\n",
            s.cluster
        ),
    );
    let started = Instant::now();
    let failed = s.jointer(&["apply", "--yes", "--wait", "--timeout", "300s"]);
    let failed_after = started.elapsed();
    assert_eq!(failed.code, 1, "{failed:#?}");
    assert!(
        failed.stderr.contains("cannot pull image") && failed.stderr.contains(":missing"),
        "{}",
        failed.stderr
    );
    assert!(
        failed_after < Duration::from_secs(120),
        "failed after {failed_after:?}"
    );

    let down = s.jointer(&["teardown", "--yes"]);
    assert_eq!(down.code, 0, "{down:#?}");
    let gone = ecr
        .describe_repositories()
        .repository_names(&repository)
        .send()
        .await;
    assert!(
        gone.is_err(),
        "the repository jointer created is gone: {gone:?}"
    );
    eprintln!(
        "figures: cold apply with image build and push {:.1} s; converged apply {:.1} s; apply --wait on a missing image failed after {:.1} s",
        cold.as_secs_f64(),
        warm.as_secs_f64(),
        failed_after.as_secs_f64()
    );
}
