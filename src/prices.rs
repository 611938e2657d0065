//! Real prices for the embedded catalog: `jointer catalog refresh` fetches on-demand prices
//! (Pricing `GetProducts`) and current spot prices (EC2 `DescribeSpotPriceHistory`) into a
//! local cache, which `simulate` then prefers over the estimate model.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use jointer_controller::catalog::PriceOverrides;
use serde::{Deserialize, Serialize};

/// The Pricing API is served from a few regions only; us-east-1 answers for all of them.
const PRICING_REGION: &str = "us-east-1";

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
pub fn load(region: &str) -> Option<CachedPrices> {
    let path = cache_file(region)?;
    let text = std::fs::read_to_string(&path).ok()?;
    match serde_json::from_str(&text) {
        Ok(cached) => Some(cached),
        Err(e) => {
            eprintln!("warning: ignoring the price cache {}: {e}; run `jointer catalog refresh --region {region}` to rebuild it", path.display());
            None
        }
    }
}

/// The on-demand USD/hour of one `GetProducts` price-list entry (a JSON document as a
/// string), with its instance type.
pub fn parse_price_list_entry(entry: &str) -> Option<(String, f64)> {
    let doc: serde_json::Value = serde_json::from_str(entry).ok()?;
    let instance_type = doc["product"]["attributes"]["instanceType"]
        .as_str()?
        .to_string();
    let terms = doc["terms"]["OnDemand"].as_object()?;
    let price = terms
        .values()
        .filter_map(|term| term["priceDimensions"].as_object())
        .flat_map(|dims| dims.values())
        .filter(|d| d["unit"].as_str() == Some("Hrs"))
        .filter_map(|d| d["pricePerUnit"]["USD"].as_str()?.parse::<f64>().ok())
        .find(|p| *p > 0.0)?;
    Some((instance_type, price))
}

fn term_match(field: &str, value: &str) -> anyhow::Result<aws_sdk_pricing::types::Filter> {
    Ok(aws_sdk_pricing::types::Filter::builder()
        .r#type(aws_sdk_pricing::types::FilterType::TermMatch)
        .field(field)
        .value(value)
        .build()?)
}

/// Fetches on-demand and spot prices for `region` and writes the cache; returns the cache.
pub async fn refresh(region: &str) -> anyhow::Result<(CachedPrices, PathBuf)> {
    let config = jointer_controller::clients::aws_config(Some(region)).await;
    let pricing_config = aws_sdk_pricing::config::Builder::from(&config)
        .region(aws_config::Region::new(PRICING_REGION))
        .build();
    let pricing = aws_sdk_pricing::Client::from_conf(pricing_config);
    let mut prices = PriceOverrides::default();

    let mut pages = pricing
        .get_products()
        .service_code("AmazonEC2")
        .filters(term_match("regionCode", region)?)
        .filters(term_match("operatingSystem", "Linux")?)
        .filters(term_match("tenancy", "Shared")?)
        .filters(term_match("preInstalledSw", "NA")?)
        .filters(term_match("capacitystatus", "Used")?)
        .into_paginator()
        .send();
    let mut page_count = 0;
    while let Some(page) = pages.next().await {
        let page = page.with_context(|| {
            format!("Pricing GetProducts for {region} failed (needs pricing:GetProducts)")
        })?;
        page_count += 1;
        for entry in page.price_list() {
            if let Some((instance_type, price)) = parse_price_list_entry(entry) {
                prices.on_demand.insert(instance_type, price);
            }
        }
        eprint!(
            "\rfetching on-demand prices: {page_count} page(s), {} types",
            prices.on_demand.len()
        );
    }
    eprintln!();

    let ec2 = aws_sdk_ec2::Client::new(&config);
    let mut pages = ec2
        .describe_spot_price_history()
        .product_descriptions("Linux/UNIX")
        .start_time(aws_sdk_ec2::primitives::DateTime::from(SystemTime::now()))
        .into_paginator()
        .send();
    // The newest price per (type, zone) wins.
    let mut newest: BTreeMap<(String, String), (i64, f64)> = BTreeMap::new();
    let mut page_count = 0;
    while let Some(page) = pages.next().await {
        let page = page.with_context(|| format!("EC2 DescribeSpotPriceHistory in {region} failed (needs ec2:DescribeSpotPriceHistory)"))?;
        page_count += 1;
        for item in page.spot_price_history() {
            let (Some(t), Some(zone), Some(price)) = (
                item.instance_type(),
                item.availability_zone(),
                item.spot_price().and_then(|p| p.parse::<f64>().ok()),
            ) else {
                continue;
            };
            let at = item.timestamp().map_or(0, |t| t.secs());
            let slot = newest
                .entry((t.as_str().to_string(), zone.to_string()))
                .or_insert((at, price));
            if at >= slot.0 {
                *slot = (at, price);
            }
        }
        eprint!(
            "\rfetching spot prices: {page_count} page(s), {} type×zone",
            newest.len()
        );
    }
    eprintln!();
    for ((t, zone), (_, price)) in newest {
        prices.spot.entry(t).or_default().insert(zone, price);
    }

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
    Ok((cached, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_on_demand_price_of_a_price_list_entry() {
        let entry = r#"{"product":{"attributes":{"instanceType":"m5.large","regionCode":"us-east-1"}},
            "terms":{"OnDemand":{"X.Y":{"priceDimensions":{"X.Y.Z":{"unit":"Hrs","pricePerUnit":{"USD":"0.0960000000"}}}}}}}"#;
        assert_eq!(
            parse_price_list_entry(entry),
            Some(("m5.large".to_string(), 0.096))
        );
        assert_eq!(parse_price_list_entry("{}"), None);
        let free = entry.replace("0.0960000000", "0.0000000000");
        assert_eq!(
            parse_price_list_entry(&free),
            None,
            "zero-priced terms are not prices"
        );
    }
}
