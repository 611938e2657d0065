//! Leader election on a `coordination.k8s.io` Lease: of the replicas, only the holder acts.
//! A holder renews every few seconds; the Lease passes to another replica once it has not
//! been renewed for its duration. Writes carry the resourceVersion they read, so two replicas
//! racing for an expired Lease cannot both win.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};

pub const LEASE_NAME: &str = "jointer-controller-leader";
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
pub const RETRY: Duration = Duration::from_secs(2);

pub struct Elector {
    api: Api<Lease>,
    identity: String,
}

impl Elector {
    pub fn new(client: kube::Client, namespace: &str, identity: String) -> Elector {
        Elector {
            api: Api::namespaced(client, namespace),
            identity,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn spec(&self, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
            acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// One attempt to take or keep the Lease: `Ok(true)` while this replica holds it.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(LEASE_NAME).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.into()),
                    ..Default::default()
                },
                spec: Some(self.spec(None, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let ours = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        let expired = match (&spec.renew_time, spec.lease_duration_seconds) {
            (Some(MicroTime(renewed)), Some(seconds)) => {
                let age = Timestamp::now().duration_since(*renewed);
                age.as_secs() >= i64::from(seconds)
            }
            _ => true,
        };
        if !ours && !expired {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
        let acquired = if ours {
            spec.acquire_time.clone()
        } else {
            None
        };
        lease.spec = Some(self.spec(acquired, transitions));
        match self
            .api
            .replace(LEASE_NAME, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Hands the Lease over at shutdown, so a standby takes over at once.
    pub async fn release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(LEASE_NAME).await {
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() == Some(self.identity.as_str()) {
                spec.holder_identity = None;
                spec.renew_time = None;
                let _ = self
                    .api
                    .replace(LEASE_NAME, &PostParams::default(), &lease)
                    .await;
            }
        }
    }
}
