//! The scheduling core: pure functions from pods, NodePools, instance types and existing nodes
//! to a plan of NodeClaims (and a reason for every pod that cannot be placed). No I/O.

pub mod checker;
pub mod fluid;
pub mod instance_type;
pub mod overhead;
pub mod pod;
pub mod pool_input;
pub mod problem;
pub mod requirements;
pub mod resources;
pub mod solver;
pub mod topology;

pub use instance_type::{Buyable, CapacityType, InstanceType, Offering};
pub use pod::{PodKey, SchedPod};
pub use problem::{
    ExistingNode, Limits, MinValuesPolicy, NodeClaimPlan, Plan, PodOrder, Policies, PoolInput,
    PreferencePolicy, Problem, Rejection, Unschedulable,
};
pub use requirements::{Requirement, Requirements};
pub use resources::Resources;
pub use solver::{solve, solve_with};
