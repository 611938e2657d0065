//! IAM is eventually consistent: a role or OIDC provider created a moment ago may not yet be
//! visible to EKS, or to IAM's own check of a trust policy's principals (usually a few seconds,
//! rarely up to a minute). A call naming such a principal is retried while AWS answers with an
//! error that means "not visible yet"; any other error fails at once.

use std::future::Future;
use std::time::{Duration, Instant};

use aws_sdk_eks::error::{ProvideErrorMetadata, SdkError};

use crate::progress::Progress;

/// How long a principal may take to become visible before the call's error is reported.
pub const PROPAGATION_WAIT: Duration = Duration::from_secs(60);

/// Whether an error is the one AWS returns for a principal it cannot see yet:
/// `eks:CreateAccessEntry` → "The specified principalArn is invalid: invalid principal.",
/// `eks:CreatePodIdentityAssociation` → "Role provided in the request does not exist",
/// `iam:CreateRole`/`UpdateAssumeRolePolicy` → "Invalid principal in policy".
pub fn not_visible_yet(code: &str, message: &str) -> bool {
    match code {
        "InvalidParameterException" => {
            message.contains("principalArn is invalid: invalid principal")
                || message.contains("Role provided in the request does not exist")
        }
        "MalformedPolicyDocument" => message.contains("Invalid principal in policy"),
        _ => false,
    }
}

/// Runs `call` until it succeeds, fails with another error, or the principal it names is still
/// invisible after [`PROPAGATION_WAIT`]; each wait is reported to `progress`.
pub async fn retry_until_visible<T, E, R, F, Fut>(
    progress: &dyn Progress,
    principal: &str,
    mut call: F,
) -> Result<T, SdkError<E, R>>
where
    E: ProvideErrorMetadata,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, R>>>,
{
    let started = Instant::now();
    let mut pause = Duration::from_secs(1);
    loop {
        match call().await {
            Err(e) if invisible(&e) && started.elapsed() + pause <= PROPAGATION_WAIT => {
                progress.note_inline(&format!(
                    "(IAM has not propagated {principal} yet, retrying in {} s) ",
                    pause.as_secs()
                ));
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(8));
            }
            result => return result,
        }
    }
}

fn invisible<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    e.as_service_error().is_some_and(|s| {
        not_visible_yet(
            s.code().unwrap_or_default(),
            s.message().unwrap_or_default(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_not_yet_visible_answers_are_retried() {
        assert!(not_visible_yet(
            "InvalidParameterException",
            "The specified principalArn is invalid: invalid principal."
        ));
        assert!(not_visible_yet(
            "InvalidParameterException",
            "Role provided in the request does not exist"
        ));
        assert!(not_visible_yet(
            "MalformedPolicyDocument",
            "Invalid principal in policy: \"Federated\":\"arn:aws:iam::1:oidc-provider/x\""
        ));
        // A malformed ARN or a forbidden principal never becomes valid by waiting.
        assert!(!not_visible_yet(
            "InvalidParameterException",
            "The principalArn parameter format is not valid"
        ));
        assert!(!not_visible_yet(
            "InvalidParameterException",
            "The caller is not allowed to modify access entries with a principalArn value of a Service Linked Role"
        ));
        assert!(!not_visible_yet(
            "MalformedPolicyDocument",
            "Has prohibited field Resource"
        ));
        assert!(!not_visible_yet(
            "AccessDenied",
            "Invalid principal in policy"
        ));
    }
}
