//! Real prices for the embedded catalog: `jointer catalog refresh` fetches on-demand prices
//! (Pricing `GetProducts`) and current spot prices (EC2 `DescribeSpotPriceHistory`) into a
//! local cache, which `simulate` then prefers over the estimate model.

// Fetching prices is AWS; reading the cache is not (`simulate` does it offline).
#[cfg(feature = "aws")]
mod refresh;

use std::path::PathBuf;

use jointer_controller::core::catalog::PriceOverrides;
use serde::{Deserialize, Serialize};

#[cfg(feature = "aws")]
pub use refresh::refresh;

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
