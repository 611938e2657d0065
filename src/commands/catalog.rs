//! Real prices for the embedded catalog: `jointer catalog refresh` fetches on-demand prices
//! (Pricing `GetProducts`) and current spot prices (EC2 `DescribeSpotPriceHistory`) into a
//! local cache, which `simulate` then prefers over the estimate model.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use jointer_controller::cloud::aws::pricing;
use jointer_controller::core::catalog::PriceOverrides;
use serde::{Deserialize, Serialize};

use crate::progress::Progress;

/// A region's cached prices and when they were fetched.
#[derive(Debug, Serialize, Deserialize)]
pub struct CachedPrices {
    pub region: String,
    /// Seconds since the Unix epoch.
    pub fetched_at: u64,
    pub prices: PriceOverrides,
}

/// `$JOINTER_CACHE_DIR`, else `$XDG_CACHE_HOME/jointer`, else `~/.cache/jointer`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("JOINTER_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("jointer"))
}

fn cache_file(region: &str) -> Option<PathBuf> {
    cache_dir().map(|d| d.join("prices").join(format!("{region}.json")))
}

/// The cached prices for `region`, if any (an unreadable cache is ignored with a warning:
/// the estimate still works).
pub fn load(region: &str, progress: &dyn Progress) -> Option<CachedPrices> {
    let path = cache_file(region)?;
    let text = std::fs::read_to_string(&path).ok()?;
    match serde_json::from_str(&text) {
        Ok(cached) => Some(cached),
        Err(e) => {
            progress.warn(&format!("ignoring the price cache {}: {e}; run `jointer catalog refresh --region {region}` to rebuild it", path.display()));
            None
        }
    }
}

/// `jointer catalog refresh`: what was cached, and where.
pub struct Refreshed {
    pub region: String,
    pub cached: CachedPrices,
    pub path: PathBuf,
}

impl Refreshed {
    pub fn spot_prices(&self) -> usize {
        self.cached.prices.spot.values().map(|z| z.len()).sum()
    }
}

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
    let prices = PriceOverrides { on_demand, spot };

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
