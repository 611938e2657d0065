//! The one way the controller calls AWS: every SDK call goes through [`metered`], which counts
//! it in `cloudprovider_calls_total{service,operation}` and turns a failure into a typed
//! [`CloudError::Api`] naming the service, the operation and AWS's error code.

use std::future::Future;

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use crate::cloud::CloudError;
use crate::metrics::Metrics;

/// Sends one SDK call (the future of `….send()`), metered, its error typed.
pub async fn metered<T, E, R>(
    metrics: &Metrics,
    service: &'static str,
    operation: &'static str,
    call: impl Future<Output = Result<T, SdkError<E, R>>>,
) -> Result<T, CloudError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    let out = call.await;
    metrics.call(service, operation, &out);
    out.map_err(|e| api_error(service, operation, e))
}

/// A failed call as a [`CloudError::Api`]: the service's error code when it answered, else
/// what kind of failure it was.
pub fn api_error<E, R>(
    service: &'static str,
    operation: &'static str,
    e: SdkError<E, R>,
) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    let code = match &e {
        SdkError::ServiceError(s) => s.err().code().unwrap_or("Unknown").to_string(),
        SdkError::TimeoutError(_) => "timeout".into(),
        SdkError::DispatchFailure(_) => "dispatch".into(),
        SdkError::ResponseError(_) => "response".into(),
        SdkError::ConstructionFailure(_) => "construction".into(),
        _ => "Unknown".into(),
    };
    let message = e
        .message()
        .map(str::to_string)
        .unwrap_or_else(|| DisplayErrorContext(&e).to_string());
    CloudError::Api {
        service,
        operation,
        code,
        message,
    }
}

impl CloudError {
    /// The AWS error code of a failed call.
    pub fn code(&self) -> Option<&str> {
        match self {
            CloudError::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Whether AWS answered with one of `codes`.
    pub fn is(&self, codes: &[&str]) -> bool {
        self.code().is_some_and(|c| codes.contains(&c))
    }
}

/// EC2 and SQS error codes the controller acts on (not failures).
pub mod codes {
    /// A queue URL whose queue is gone (SQS's query and JSON protocols).
    pub const QUEUE_MISSING: &[&str] = &[
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
    ];
    /// DescribeLaunchTemplates by a name no template has.
    pub const TEMPLATE_NOT_FOUND: &[&str] = &[
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidLaunchTemplateId.NotFound",
    ];
    /// CreateLaunchTemplate raced by another launch with the same content.
    pub const TEMPLATE_EXISTS: &[&str] = &["InvalidLaunchTemplateName.AlreadyExistsException"];
    /// An instance EC2 no longer knows (long terminated) or never did.
    pub const INSTANCE_UNKNOWN: &[&str] =
        &["InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"];
    /// IAM: the entity does not exist.
    pub const NO_SUCH_ENTITY: &[&str] = &["NoSuchEntity"];
}
