//! `jointer catalog refresh`: on-demand prices from the Pricing API, spot prices from EC2,
//! written as the region's cache.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use jointer_controller::cloud::aws::pricing;
use jointer_controller::core::catalog::PriceOverrides;

use super::{cache_file, CachedPrices, Refreshed};
use crate::progress::Progress;

/// Fetches on-demand and spot prices for `region` and writes the cache.
pub async fn refresh(region: &str, progress: &dyn Progress) -> anyhow::Result<Refreshed> {
    let config = jointer_controller::clients::aws_config(Some(region)).await;
    let pricing = pricing::pricing_client(&config);
    let on_demand = pricing::on_demand(&pricing, region, |pages, types| {
        progress.count(&format!(
            "fetching on-demand prices: {pages} page(s), {types} types"
        ))
    })
    .await?;
    progress.count_done();
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let spot = pricing::spot(&ec2, |pages, pairs| {
        progress.count(&format!(
            "fetching spot prices: {pages} page(s), {pairs} type×zone"
        ))
    })
    .await?;
    progress.count_done();
    store(region, PriceOverrides { on_demand, spot })
}

/// Writes `prices` as `region`'s cache, stamped now.
fn store(region: &str, prices: PriceOverrides) -> anyhow::Result<Refreshed> {
    let cached = CachedPrices {
        region: region.to_string(),
        fetched_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        prices,
    };
    let path = cache_file(region).context("no cache directory: set JOINTER_CACHE_DIR or HOME")?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // Write then rename: a crash never leaves a half-written cache behind.
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&cached)?)
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
    Ok(Refreshed {
        region: region.to_string(),
        cached,
        path,
    })
}
