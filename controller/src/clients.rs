//! How jointer and its controller reach Kubernetes and AWS: the standard discovery chains, so
//! the same code runs in CI, on a laptop and in a pod, and tests only point the standard
//! variables (`KUBECONFIG`, `AWS_ENDPOINT_URL`, `AWS_REGION`) at the local test environment.

#[cfg(feature = "aws")]
/// AWS configuration from the standard chain (environment, profiles, web identity for IRSA,
/// the EKS Pod Identity agent, IMDS). `AWS_ENDPOINT_URL` redirects every service client,
/// which is how tests reach the local AWS server.
pub async fn aws_config(region: Option<&str>) -> aws_config::SdkConfig {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(region) = region {
        loader = loader.region(aws_config::Region::new(region.to_string()));
    }
    loader.load().await
}

/// A Kubernetes client from `KUBECONFIG` (or the in-cluster service account), naming itself
/// `jointer-controller/<version>` so its requests can be told apart in the API server's audit
/// log and metrics (kube-rs sends no user agent of its own).
pub async fn kube_client() -> Result<kube::Client, kube::Error> {
    use http::header::{HeaderValue, USER_AGENT};
    let mut config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    config.headers.push((
        USER_AGENT,
        HeaderValue::from_static(concat!("jointer-controller/", env!("CARGO_PKG_VERSION"))),
    ));
    kube::Client::try_from(config)
}
