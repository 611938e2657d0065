//! The committed CRDs in `manifests/crds/` must be exactly what the types generate.

use std::path::Path;

#[test]
fn committed_crds_are_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/crds");
    let mut stale = Vec::new();
    for (file, crd) in jointer_controller::crds::all() {
        let expected = jointer_controller::crds::to_yaml(&crd).expect("CRD serializes");
        let committed = std::fs::read_to_string(dir.join(&file)).unwrap_or_default();
        if committed != expected {
            stale.push(file);
        }
    }
    assert!(
        stale.is_empty(),
        "stale or missing CRDs in manifests/crds: {stale:?}; regenerate them with \
         `cargo run -p jointer-controller -- crds --out manifests/crds`"
    );
}

/// Karpenter's own kinds are cluster-scoped `v1`, NodeOverlay `v1alpha1` as upstream serves
/// it; CapacityBuffer is the autoscaling group's namespaced `v1beta1`, as Cluster Autoscaler
/// and upstream Karpenter serve it.
#[test]
fn every_crd_is_served_at_its_upstream_version_and_scope_with_status() {
    for (file, crd) in jointer_controller::crds::all() {
        let versions = &crd.spec.versions;
        let (version, scope) = if crd.spec.group == jointer_controller::api::AUTOSCALING_GROUP {
            ("v1beta1", "Namespaced")
        } else if crd.spec.names.kind == "NodeOverlay" {
            ("v1alpha1", "Cluster")
        } else {
            ("v1", "Cluster")
        };
        assert_eq!(versions.len(), 1, "{file}");
        assert_eq!(versions[0].name, version, "{file}");
        assert!(
            versions[0]
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{file}"
        );
        assert_eq!(crd.spec.scope, scope, "{file}");
    }
}
