//! The one thing every controller is given: the API client, the cloud behind its trait, the
//! watch caches, the settings, the metrics and the Event recorder.

use std::sync::Arc;

use kube::runtime::events::Recorder;

use super::nominations::Nominations;
use super::stores::{Feeds, Stores};
use crate::cloud::{CloudProvider, InterruptionQueue};
use crate::metrics::Metrics;
use crate::settings::Settings;

pub struct Context {
    pub client: kube::Client,
    pub cloud: Arc<dyn CloudProvider>,
    /// Where interruption messages arrive; None turns interruption handling off.
    pub queue: Option<Arc<dyn InterruptionQueue>>,
    pub stores: Stores,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// Nodes and NodeClaims the provisioner just planned pending pods onto.
    pub nominations: Nominations,
}

impl Context {
    /// A context over fresh watch caches (the returned feeds keep them filled).
    pub fn new(
        client: kube::Client,
        cloud: Arc<dyn CloudProvider>,
        queue: Option<Arc<dyn InterruptionQueue>>,
        settings: Settings,
        metrics: Arc<Metrics>,
        identity: &str,
    ) -> (Context, Feeds) {
        let (stores, feeds) = Stores::start(&client);
        let reporter = kube::runtime::events::Reporter {
            controller: "jointer-controller".into(),
            instance: Some(identity.to_string()),
        };
        let recorder = Recorder::new(client.clone(), reporter);
        let nominations = Nominations::new(settings.batch_max);
        let ctx = Context {
            client,
            cloud,
            queue,
            stores,
            settings,
            metrics,
            recorder,
            nominations,
        };
        (ctx, feeds)
    }
}
