//! Leader election on a `coordination.k8s.io` Lease: of the replicas, only the holder acts.
//! A holder renews every few seconds; the Lease passes to another replica once it has not
//! been renewed for its duration. Writes carry the resourceVersion they read, so two replicas
//! racing for an expired Lease cannot both win.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};

pub const LEASE_NAME: &str = "jointer-controller-leader";
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
pub const RETRY: Duration = Duration::from_secs(2);

/// How leading ended.
pub enum Led<T> {
    /// The Lease was taken by another replica or could not be renewed: stop acting at once.
    Lost(&'static str),
    /// The work ended by itself.
    Done(T),
}

/// Waits for the Lease (a standby replica stays here), then runs `work` — made only once
/// elected — while renewing the Lease every [`RETRY`]. `leader` is set to 1 while leading.
/// Dropping the returned future (a signal, a crash) stops the work without releasing the
/// Lease; [`Elector::release`] hands it over.
pub async fn lead<W, F, T>(
    elector: &Elector,
    leader: &prometheus_client::metrics::gauge::Gauge<i64, std::sync::atomic::AtomicI64>,
    work: W,
) -> Led<T>
where
    W: FnOnce() -> F,
    F: Future<Output = T>,
{
    loop {
        match elector.try_acquire_or_renew().await {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "leader election"),
        }
        tokio::time::sleep(RETRY).await;
    }
    leader.set(1);
    tracing::info!(identity = %elector.identity(), "elected leader");
    let renew = async {
        let mut failures: u64 = 0;
        loop {
            tokio::time::sleep(RETRY).await;
            match elector.try_acquire_or_renew().await {
                Ok(true) => failures = 0,
                Ok(false) => return "the leader Lease was taken by another replica",
                Err(e) => {
                    failures += 1;
                    tracing::warn!(error = %e, "renewing the leader Lease");
                    if failures * RETRY.as_secs() >= LEASE_DURATION.as_secs() {
                        return "could not renew the leader Lease";
                    }
                }
            }
        }
    };
    let led = tokio::select! {
        why = renew => Led::Lost(why),
        done = work() => Led::Done(done),
    };
    leader.set(0);
    led
}

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
