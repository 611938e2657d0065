//! How the other commands read: their tables, their YAML, and their JSON.

use serde_json::json;

use super::{print_diagnostics, print_json, Format, Print};
use crate::commands::bench::{ConsolidationFigures, Figures};
use crate::commands::catalog::Refreshed;
use crate::commands::convert::Conversion;
use crate::commands::explain::Explanation;
use crate::commands::init::Initialized;
use crate::commands::lint::{Linted, Rules};
use crate::commands::render::Rendered;
use crate::commands::simulate::Report;
use crate::commands::status::Status;
use crate::input::{manifest, workload};

impl Print for Initialized {
    fn print(&self, format: Format) -> anyhow::Result<()> {
        match format {
            Format::Json => print_json(&json!({ "written": self.file }))?,
            Format::Text => eprintln!(
                "wrote {}: review it, then run `jointer render -f {}`",
                self.file.display(),
                self.file.display()
            ),
        }
        Ok(())
    }
}

impl Print for Rendered {
    fn print(&self, format: Format) -> anyhow::Result<()> {
        match format {
            Format::Json => print_json(&json!({ "objects": self.objects, "crds": self.crds })),
            Format::Text => {
                let mut out = String::new();
                for crd in &self.crds {
                    out.push_str("---\n");
                    out.push_str(&jointer_controller::crds::to_yaml(crd)?);
                }
                print!("{out}");
                print!("{}", manifest::to_yaml_stream(&self.objects)?);
                Ok(())
            }
        }
    }
}

/// The rule list reads the same in both formats: it is documentation.
impl Print for Rules {
    fn print(&self, _: Format) -> anyhow::Result<()> {
        for (rule, why) in self.0 {
            println!("{rule:<28} {why}");
        }
        Ok(())
    }
}

impl Print for Linted {
    fn print(&self, format: Format) -> anyhow::Result<()> {
        match format {
            Format::Json => print_json(&json!({
                "ok": !self.failed,
                "diagnostics": self.findings,
            }))?,
            Format::Text => {
                print_diagnostics(&self.findings);
                eprintln!(
                    "{} object(s) checked, {} finding(s)",
                    self.objects,
                    self.findings.len()
                );
            }
        }
        Ok(())
    }
}

/// Converted YAML on stdout, what changed on stderr.
impl Print for Conversion {
    fn print(&self, format: Format) -> anyhow::Result<()> {
        match format {
            Format::Json => print_json(&serde_json::to_value(self)?)?,
            Format::Text => {
                let mut out = String::new();
                for doc in &self.documents {
                    out.push_str("---\n");
                    out.push_str(&serde_yaml::to_string(doc)?);
                }
                print!("{out}");
                for c in &self.changes {
                    eprintln!("{}: {}: {}", c.file, c.object, c.change);
                }
            }
        }
        Ok(())
    }
}

impl Print for Refreshed {
    fn print(&self, format: Format) -> anyhow::Result<()> {
        let on_demand = self.cached.prices.on_demand.len();
        let spot = self.spot_prices();
        match format {
            Format::Json => print_json(&json!({
                "region": self.region,
                "cache": self.path,
                "on_demand_prices": on_demand,
                "spot_prices": spot,
            }))?,
            Format::Text => eprintln!(
                "cached {on_demand} on-demand and {spot} spot prices for {} in {}",
                self.region,
                self.path.display()
            ),
        }
        Ok(())
    }
}

impl Print for Explanation {
    fn print(&self, format: Format) -> anyhow::Result<()> {
        match format {
            Format::Json => print_json(self)?,
            Format::Text => {
                let kind = if self.pod.contains('/') {
                    "pod"
                } else {
                    "node"
                };
                println!("{kind} {}: {}", self.pod, self.message);
                for r in &self.reasons {
                    println!("  NodePool {}: {}", r.nodepool, r.reason);
                }
            }
        }
        Ok(())
    }
}

/// Rows padded to their widest cell, two spaces apart, trailing blanks trimmed.
fn table<const N: usize>(header: [String; N], rows: &[[String; N]]) {
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("{}", cells.join("  ").trim_end());
    }
}

fn gib(bytes: i64) -> String {
    format!("{:.1}Gi", bytes as f64 / f64::from(1u32 << 30))
}

impl Print for Status {
    fn print(&self, format: Format) -> anyhow::Result<()> {
        match format {
            Format::Json => print_json(self)?,
            Format::Text => print_status(self),
        }
        Ok(())
    }
}

fn print_status(s: &Status) {
    let rows: Vec<[String; 7]> = s
        .nodepools
        .iter()
        .map(|p| {
            let mut nodes = p.nodes.to_string();
            if p.disrupting > 0 {
                nodes = format!("{nodes} ({} going)", p.disrupting);
            }
            let mut cost = format!("{:.4}", p.cost_per_hour);
            if p.unpriced > 0 {
                cost = format!("{cost} +{} unpriced", p.unpriced);
            }
            let allowed = |k: &str| p.disruptable_now.get(k).copied().unwrap_or(0);
            [
                p.name.clone(),
                p.node_class.clone(),
                nodes,
                format!("{:.1}", p.cpu),
                gib(p.memory),
                cost,
                format!(
                    "{}/{}/{}/{}",
                    allowed("underutilized"),
                    allowed("empty"),
                    allowed("drifted"),
                    allowed("unhealthy")
                ),
            ]
        })
        .collect();
    let header = [
        "NODEPOOL",
        "EC2NODECLASS",
        "NODES",
        "CPU",
        "MEMORY",
        "$/HOUR",
        "DISRUPTABLE NOW (underutilized/empty/drifted/unhealthy)",
    ]
    .map(String::from);
    table(header, &rows);
    println!();
    for c in &s.node_classes {
        match &c.message {
            None => println!("EC2NodeClass {}: Ready", c.name),
            Some(why) => println!("EC2NodeClass {}: not Ready: {why}", c.name),
        }
    }
    if !s.capacity_buffers.is_empty() {
        println!();
        let rows: Vec<[String; 4]> = s
            .capacity_buffers
            .iter()
            .map(|b| {
                let satisfied = match (&b.error, b.satisfied) {
                    (Some(why), _) => format!("no: {why}"),
                    (None, true) => "yes".to_string(),
                    (None, false) => "no: waiting for capacity".to_string(),
                };
                [
                    format!("{}/{}", b.namespace, b.name),
                    b.replicas.to_string(),
                    b.ready.to_string(),
                    satisfied,
                ]
            })
            .collect();
        let header = ["CAPACITYBUFFER", "REPLICAS", "WITH ROOM", "SATISFIED"].map(String::from);
        table(header, &rows);
    }
    let nodes: usize = s.nodepools.iter().map(|p| p.nodes).sum();
    println!(
        "Total: {nodes} node(s), ${:.4}/hour (${:.2}/month)",
        s.cost_per_hour,
        s.cost_per_hour * 730.0
    );
}

impl Print for Report {
    fn print(&self, format: Format) -> anyhow::Result<()> {
        match format {
            Format::Json => print_json(&serde_json::to_value(self)?)?,
            Format::Text => print_simulation(self),
        }
        Ok(())
    }
}

/// One row per NodeClaim, totals, then unschedulable pods.
fn print_simulation(r: &Report) {
    println!(
        "Simulating {} in {} (prices: {})",
        r.input, r.region, r.price_source
    );
    println!();
    let header = [
        "NODEPOOL",
        "INSTANCE TYPE",
        "ZONE",
        "CAPACITY",
        "$/HOUR",
        "CPU",
        "MEMORY",
        "PODS",
    ]
    .map(String::from);
    let rows: Vec<[String; 8]> = r
        .nodeclaims
        .iter()
        .map(|n| {
            let owners: Vec<String> = workload::owners(&n.pods)
                .into_iter()
                .map(|(o, c)| format!("{}×{c}", o.rsplit('/').next().unwrap_or(&o)))
                .collect();
            [
                n.nodepool.clone(),
                n.instance_type.clone(),
                n.zone.clone(),
                n.capacity_type.clone(),
                format!("{:.4}", n.price_per_hour),
                format!("{}/{}", n.cpu_requested, n.cpu_allocatable),
                format!("{}/{}", n.memory_requested, n.memory_allocatable),
                format!(
                    "{}/{} ({})",
                    n.pods.len(),
                    n.pods_allocatable,
                    owners.join(", ")
                ),
            ]
        })
        .collect();
    table(header, &rows);
    println!();
    println!(
        "Total: {} node(s) for {} pod(s), ${:.4}/hour (${:.2}/month); requests use {:.0}% of CPU and {:.0}% of memory allocatable.",
        r.nodes, r.pods_scheduled, r.total_price_per_hour, r.total_price_per_month, r.cpu_utilization * 100.0, r.memory_utilization * 100.0
    );
    match r.price_source {
        "estimated" => println!("Prices are estimates from the embedded catalog's model, not AWS list prices (`jointer catalog refresh` fetches real ones)."),
        "cached" => println!("Prices come from the cache `jointer catalog refresh` wrote; types it had no price for keep the estimate."),
        _ => {}
    }
    if r.refused_if_bound_last > 0 {
        println!(
            "{} spread pod(s) would be refused if kube-scheduler bound them after the others: they may wait for another provisioning round.",
            r.refused_if_bound_last
        );
    }
    if !r.unschedulable.is_empty() {
        println!();
        println!("Unschedulable ({}):", r.unschedulable.len());
        for u in &r.unschedulable {
            println!("  {}: {}", u.pod, u.reason);
        }
    }
}

/// The checker's first problems on stderr, then the figures.
impl Print for Figures {
    fn print(&self, format: Format) -> anyhow::Result<()> {
        for p in &self.problems {
            eprintln!("plan check: {p}");
        }
        match format {
            Format::Json => print_json(&serde_json::to_value(self)?)?,
            Format::Text => print_figures(self),
        }
        Ok(())
    }
}

fn print_figures(f: &Figures) {
    println!("profile            {}", f.profile);
    println!("pods               {}", f.pods);
    println!("instance types     {}", f.instance_types);
    println!("nodes              {}", f.nodes);
    println!("unschedulable      {}", f.unschedulable);
    println!(
        "solve              {:.3} s ({:.0} pods/s)",
        f.solve_seconds, f.pods_per_second
    );
    println!("price              ${:.2}/hour", f.price_per_hour);
    if let (Some(l), Some(g)) = (f.lower_bound_per_hour, f.gap_percent) {
        println!("lower bound        ${l:.2}/hour (gap {g:.1} %)");
    }
    if let Some(rss) = f.peak_rss_bytes {
        println!("peak memory        {:.1} MB", rss as f64 / 1e6);
    }
    println!(
        "plan verified      {}",
        if f.plan_verified { "yes" } else { "NO" }
    );
    println!(
        "bound last         {} spread pods refused if bound after every other pod",
        f.refused_if_bound_last
    );
}

impl Print for ConsolidationFigures {
    fn print(&self, format: Format) -> anyhow::Result<()> {
        match format {
            Format::Json => print_json(&serde_json::to_value(self)?)?,
            Format::Text => print_consolidation(self),
        }
        Ok(())
    }
}

fn print_consolidation(f: &ConsolidationFigures) {
    println!("pods               {} ({} left)", f.pods, f.pods_left);
    println!("nodes              {}", f.nodes);
    println!("cluster built in   {:.3} s", f.build_seconds);
    println!("decision           {:.3} s", f.decision_seconds);
    if !f.searched.is_empty() {
        let searched: Vec<String> = f
            .searched
            .iter()
            .map(|s| format!("{} {:.3} s", s.method, s.seconds))
            .collect();
        println!("searched           {}", searched.join(", "));
    }
    match f.method {
        Some(m) => println!(
            "command            {m}: {} node(s), {} replacement(s), saving ${:.2}/hour",
            f.candidates, f.replacements, f.saving_per_hour
        ),
        None => println!("command            none (every node kept)"),
    }
    println!("kept with a reason {}", f.kept);
    println!(
        "price              ${:.2}/hour now; a fresh solve of the pods left ${:.2}/hour",
        f.price_per_hour, f.fresh_solve_per_hour
    );
    if let Some(rss) = f.peak_rss_bytes {
        println!("peak memory        {:.1} MB", rss as f64 / 1e6);
    }
}
