//! Resource vectors: the few resources node scheduling is decided on, as plain integers, so
//! the solver's fit checks are a handful of comparisons.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Add, AddAssign, Sub};

use crate::api::Quantity;

/// CPU in millicores, memory and ephemeral storage in bytes, pods and devices as counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    pub cpu: i64,
    pub memory: i64,
    pub pods: i64,
    pub ephemeral_storage: i64,
    pub nvidia_gpu: i64,
    pub amd_gpu: i64,
    pub neuron: i64,
}

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
pub const AMD_GPU: &str = "amd.com/gpu";
pub const NEURON: &str = "aws.amazon.com/neuron";

/// A resource name this model does not track (the pod then fits no instance type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownResource(pub String);

impl Resources {
    pub const ZERO: Resources = Resources {
        cpu: 0,
        memory: 0,
        pods: 0,
        ephemeral_storage: 0,
        nvidia_gpu: 0,
        amd_gpu: 0,
        neuron: 0,
    };

    pub fn cpu_memory(cpu_millis: i64, memory_bytes: i64) -> Self {
        Resources {
            cpu: cpu_millis,
            memory: memory_bytes,
            ..Resources::ZERO
        }
    }

    fn slot(&mut self, name: &str) -> Option<&mut i64> {
        Some(match name {
            CPU => &mut self.cpu,
            MEMORY => &mut self.memory,
            PODS => &mut self.pods,
            EPHEMERAL_STORAGE => &mut self.ephemeral_storage,
            NVIDIA_GPU => &mut self.nvidia_gpu,
            AMD_GPU => &mut self.amd_gpu,
            NEURON => &mut self.neuron,
            _ => return None,
        })
    }

    /// From a Kubernetes resource list; CPU in millicores, everything else in whole units
    /// (rounded up). Unknown names (hugepages, vendor devices) are returned separately.
    pub fn from_quantities(list: &BTreeMap<String, Quantity>) -> (Self, Vec<UnknownResource>) {
        let mut out = Resources::ZERO;
        let mut unknown = Vec::new();
        for (name, q) in list {
            let value = if name == CPU {
                q.millis()
            } else {
                q.units_ceil()
            };
            let value = i64::try_from(value).unwrap_or(i64::MAX);
            match out.slot(name) {
                Some(slot) => *slot = slot.saturating_add(value),
                None if value > 0 => unknown.push(UnknownResource(name.clone())),
                None => {}
            }
        }
        (out, unknown)
    }

    /// Sets one tracked resource; false when `name` is not one this model tracks.
    pub fn set(&mut self, name: &str, value: i64) -> bool {
        match self.slot(name) {
            Some(slot) => {
                *slot = value;
                true
            }
            None => false,
        }
    }

    pub fn get(&self, name: &str) -> Option<i64> {
        let mut copy = *self;
        copy.slot(name).map(|v| *v)
    }

    /// Every dimension of `self` is at most `capacity`'s.
    #[inline]
    pub fn fits_in(&self, capacity: &Resources) -> bool {
        self.cpu <= capacity.cpu
            && self.memory <= capacity.memory
            && self.pods <= capacity.pods
            && self.ephemeral_storage <= capacity.ephemeral_storage
            && self.nvidia_gpu <= capacity.nvidia_gpu
            && self.amd_gpu <= capacity.amd_gpu
            && self.neuron <= capacity.neuron
    }

    /// Each dimension of `self` that is set (non-zero), else `fallback`'s: a partial
    /// specification completed by defaults.
    pub fn or(&self, fallback: &Resources) -> Resources {
        let pick = |a: i64, b: i64| if a > 0 { a } else { b };
        Resources {
            cpu: pick(self.cpu, fallback.cpu),
            memory: pick(self.memory, fallback.memory),
            pods: pick(self.pods, fallback.pods),
            ephemeral_storage: pick(self.ephemeral_storage, fallback.ephemeral_storage),
            nvidia_gpu: pick(self.nvidia_gpu, fallback.nvidia_gpu),
            amd_gpu: pick(self.amd_gpu, fallback.amd_gpu),
            neuron: pick(self.neuron, fallback.neuron),
        }
    }

    /// Element-wise maximum.
    pub fn max(&self, o: &Resources) -> Resources {
        Resources {
            cpu: self.cpu.max(o.cpu),
            memory: self.memory.max(o.memory),
            pods: self.pods.max(o.pods),
            ephemeral_storage: self.ephemeral_storage.max(o.ephemeral_storage),
            nvidia_gpu: self.nvidia_gpu.max(o.nvidia_gpu),
            amd_gpu: self.amd_gpu.max(o.amd_gpu),
            neuron: self.neuron.max(o.neuron),
        }
    }

    /// Each dimension by which `self` exceeds `capacity`: (name, requested, available).
    pub fn shortfalls(&self, capacity: &Resources) -> Vec<(&'static str, i64, i64)> {
        [
            (CPU, self.cpu, capacity.cpu),
            (MEMORY, self.memory, capacity.memory),
            (PODS, self.pods, capacity.pods),
            (
                EPHEMERAL_STORAGE,
                self.ephemeral_storage,
                capacity.ephemeral_storage,
            ),
            (NVIDIA_GPU, self.nvidia_gpu, capacity.nvidia_gpu),
            (AMD_GPU, self.amd_gpu, capacity.amd_gpu),
            (NEURON, self.neuron, capacity.neuron),
        ]
        .into_iter()
        .filter(|(_, want, have)| want > have)
        .collect()
    }
}

impl Add for Resources {
    type Output = Resources;
    fn add(self, o: Resources) -> Resources {
        Resources {
            cpu: self.cpu + o.cpu,
            memory: self.memory + o.memory,
            pods: self.pods + o.pods,
            ephemeral_storage: self.ephemeral_storage + o.ephemeral_storage,
            nvidia_gpu: self.nvidia_gpu + o.nvidia_gpu,
            amd_gpu: self.amd_gpu + o.amd_gpu,
            neuron: self.neuron + o.neuron,
        }
    }
}

impl AddAssign for Resources {
    fn add_assign(&mut self, o: Resources) {
        *self = *self + o;
    }
}

impl Sub for Resources {
    type Output = Resources;
    /// Saturates at zero: allocatable never goes negative.
    fn sub(self, o: Resources) -> Resources {
        Resources {
            cpu: (self.cpu - o.cpu).max(0),
            memory: (self.memory - o.memory).max(0),
            pods: (self.pods - o.pods).max(0),
            ephemeral_storage: (self.ephemeral_storage - o.ephemeral_storage).max(0),
            nvidia_gpu: (self.nvidia_gpu - o.nvidia_gpu).max(0),
            amd_gpu: (self.amd_gpu - o.amd_gpu).max(0),
            neuron: (self.neuron - o.neuron).max(0),
        }
    }
}

/// `cpu` as cores (`1.5`), memory with a binary unit (`3.5Gi`).
pub fn format_amount(name: &str, value: i64) -> String {
    match name {
        CPU => {
            let cores = format!("{:.3}", value as f64 / 1000.0);
            cores
                .trim_end_matches('0')
                .trim_end_matches('.')
                .to_string()
        }
        MEMORY | EPHEMERAL_STORAGE => {
            const GI: f64 = (1u64 << 30) as f64;
            const MI: f64 = (1u64 << 20) as f64;
            let v = value as f64;
            if v >= GI {
                format!("{:.2}Gi", v / GI).replace(".00Gi", "Gi")
            } else {
                format!("{:.0}Mi", (v / MI).ceil())
            }
        }
        _ => value.to_string(),
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cpu {}, memory {}, pods {}",
            format_amount(CPU, self.cpu),
            format_amount(MEMORY, self.memory),
            self.pods
        )?;
        for (name, v) in [
            (NVIDIA_GPU, self.nvidia_gpu),
            (AMD_GPU, self.amd_gpu),
            (NEURON, self.neuron),
        ] {
            if v > 0 {
                write!(f, ", {name} {v}")?;
            }
        }
        Ok(())
    }
}
