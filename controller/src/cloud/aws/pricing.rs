//! Real prices: on-demand from the Pricing API (`GetProducts`), spot from EC2
//! `DescribeSpotPriceHistory`. Used by the controller (refreshed in the background) and by
//! `jointer catalog refresh` (cached for `simulate`).

use std::collections::BTreeMap;
use std::time::SystemTime;

/// The Pricing API is served from a few regions only; us-east-1 answers for all of them.
pub const PRICING_REGION: &str = "us-east-1";

#[derive(Debug, thiserror::Error)]
#[error("{operation} failed ({permission}): {message}")]
pub struct PriceError {
    pub operation: &'static str,
    pub permission: &'static str,
    pub message: String,
}

/// A Pricing client for the AWS configuration (its own region: see [`PRICING_REGION`]).
pub fn pricing_client(config: &aws_config::SdkConfig) -> aws_sdk_pricing::Client {
    let pricing_config = aws_sdk_pricing::config::Builder::from(config)
        .region(aws_config::Region::new(PRICING_REGION))
        .build();
    aws_sdk_pricing::Client::from_conf(pricing_config)
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

fn term_match(field: &str, value: &str) -> Option<aws_sdk_pricing::types::Filter> {
    aws_sdk_pricing::types::Filter::builder()
        .r#type(aws_sdk_pricing::types::FilterType::TermMatch)
        .field(field)
        .value(value)
        .build()
        .ok()
}

/// On-demand Linux prices of `region`: type → USD/hour. `progress(pages, types)` after each page.
pub async fn on_demand(
    pricing: &aws_sdk_pricing::Client,
    region: &str,
    mut progress: impl FnMut(usize, usize),
) -> Result<BTreeMap<String, f64>, PriceError> {
    let filters = [
        ("regionCode", region),
        ("operatingSystem", "Linux"),
        ("tenancy", "Shared"),
        ("preInstalledSw", "NA"),
        ("capacitystatus", "Used"),
    ];
    let mut pages = pricing
        .get_products()
        .service_code("AmazonEC2")
        .set_filters(Some(
            filters
                .iter()
                .filter_map(|(f, v)| term_match(f, v))
                .collect(),
        ))
        .into_paginator()
        .send();
    let mut prices = BTreeMap::new();
    let mut page_count = 0;
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| PriceError {
            operation: "Pricing GetProducts",
            permission: "needs pricing:GetProducts",
            message: aws_sdk_pricing::error::DisplayErrorContext(e).to_string(),
        })?;
        page_count += 1;
        for entry in page.price_list() {
            if let Some((instance_type, price)) = parse_price_list_entry(entry) {
                prices.insert(instance_type, price);
            }
        }
        progress(page_count, prices.len());
    }
    Ok(prices)
}

/// Current Linux spot prices: type → zone → USD/hour (the newest record per pair).
/// `progress(pages, pairs)` after each page.
pub async fn spot(
    ec2: &aws_sdk_ec2::Client,
    mut progress: impl FnMut(usize, usize),
) -> Result<BTreeMap<String, BTreeMap<String, f64>>, PriceError> {
    let mut pages = ec2
        .describe_spot_price_history()
        .product_descriptions("Linux/UNIX")
        .start_time(aws_sdk_ec2::primitives::DateTime::from(SystemTime::now()))
        .into_paginator()
        .send();
    let mut newest: BTreeMap<(String, String), (i64, f64)> = BTreeMap::new();
    let mut page_count = 0;
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| PriceError {
            operation: "EC2 DescribeSpotPriceHistory",
            permission: "needs ec2:DescribeSpotPriceHistory",
            message: aws_sdk_ec2::error::DisplayErrorContext(e).to_string(),
        })?;
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
        progress(page_count, newest.len());
    }
    let mut out: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for ((t, zone), (_, price)) in newest {
        out.entry(t).or_default().insert(zone, price);
    }
    Ok(out)
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
