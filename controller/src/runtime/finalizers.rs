//! Finalizers: what keeps an object (NodeClaim, EC2NodeClass) until the controller has cleaned
//! up what it made for it on AWS.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

async fn write<K>(api: &Api<K>, obj: &K, finalizers: Vec<String>) -> Result<(), kube::Error>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
    )
    .await?;
    Ok(())
}

/// Adds `finalizer` unless the object has it.
pub async fn ensure<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    if obj.finalizers().iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let mut finalizers = obj.finalizers().to_vec();
    finalizers.push(finalizer.to_string());
    write(api, obj, finalizers).await
}

/// Removes `finalizer`, letting the deletion finish.
pub async fn release<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let finalizers = obj
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    write(api, obj, finalizers).await
}
