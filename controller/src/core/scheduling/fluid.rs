//! The fluid relaxation of node buying: the cheapest *fractional* mix of instance types whose
//! allocatable covers a demand's CPU, memory and pod count. No real plan can be cheaper, so it
//! is the benchmark's lower bound; its mix is also what the packer buys whole nodes of.

use minilp::{ComparisonOp, OptimizationDirection, Problem};

use super::resources::Resources;

/// GiB keeps the memory coefficients well scaled for the simplex.
const GIB: f64 = (1u64 << 30) as f64;

/// For types offered at `(price per hour, allocatable)`, the optimal mix covering `demand`:
/// its price per hour and the (fractional) copies of each offered type, in order.
pub fn fluid_mix(offered: &[(f64, Resources)], demand: Resources) -> Option<(f64, Vec<f64>)> {
    let mut lp = Problem::new(OptimizationDirection::Minimize);
    let vars: Vec<_> = offered
        .iter()
        .map(|(price, _)| lp.add_var(*price, (0.0, f64::INFINITY)))
        .collect();
    let row = |dim: fn(&Resources) -> f64| -> Vec<_> {
        vars.iter()
            .zip(offered)
            .map(|(x, (_, a))| (*x, dim(a)))
            .collect()
    };
    lp.add_constraint(row(|a| a.cpu as f64), ComparisonOp::Ge, demand.cpu as f64);
    lp.add_constraint(
        row(|a| a.memory as f64 / GIB),
        ComparisonOp::Ge,
        demand.memory as f64 / GIB,
    );
    lp.add_constraint(row(|a| a.pods as f64), ComparisonOp::Ge, demand.pods as f64);
    let solution = lp.solve().ok()?;
    Some((
        solution.objective(),
        vars.iter().map(|x| solution[*x]).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_a_cpu_type_and_a_memory_type_to_cover_a_balanced_demand() {
        let cpu_type = (
            1.0,
            Resources {
                cpu: 4000,
                memory: 4 << 30,
                pods: 100,
                ..Resources::ZERO
            },
        );
        let mem_type = (
            1.0,
            Resources {
                cpu: 1000,
                memory: 16 << 30,
                pods: 100,
                ..Resources::ZERO
            },
        );
        let demand = Resources {
            cpu: 5000,
            memory: 20 << 30,
            pods: 10,
            ..Resources::ZERO
        };
        let (price, copies) = fluid_mix(&[cpu_type, mem_type], demand).unwrap();
        assert!(
            (price - 2.0).abs() < 1e-6,
            "one of each covers it exactly: {price}"
        );
        assert!(copies.iter().all(|c| (c - 1.0).abs() < 1e-6), "{copies:?}");
    }
}
