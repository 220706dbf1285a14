//! The simulated GPU's device model: profiles and the performance model.
//!
//! Everything the simulated libraries print or report is *simulated*: the figures come from this
//! model, not from a GPU. The model in short:
//!
//! * A **device profile** (`simgpu/profiles/*.json`, embedded at build time) gives peak FP32
//!   and tensor-core throughput, memory bandwidth, PCIe bandwidth per direction, host call and
//!   launch costs, a per-algorithm efficiency for every cuDNN convolution algorithm, and two
//!   utilisation constants. Every constant carries its public source (or says it is an
//!   assumption) in the profile's `sources` map.
//! * **Kernel time** = `kernel_min` floor, or `max(flops / (peak * eff * u_f), bytes / (bw * u_b))`
//!   where `u_f = f / (f + half_util_flops)` and `u_b = b / (b + half_util_bytes)`: small launches
//!   fill the device badly, large ones approach the efficiency the algorithm can reach.
//! * **Copies** take `copy_latency + bytes / pcie` on the copy engine of their direction; pageable
//!   host memory runs at `pageable_factor` of that and blocks the host.
//! * **Convolutions**: each algorithm has cuDNN's support rules ([`conv::support`]), a workspace
//!   that follows the algorithm's structure ([`conv::workspace`]) and an arithmetic count that
//!   follows its method ([`conv::cost`]): direct/implicit GEMM count every multiply-add, GEMM adds
//!   the traffic of its im2col buffer, FFT counts transforms and the frequency-domain products,
//!   Winograd counts the reduced multiplies of its tile transform.
//! * **GEMMs** (cuBLAS, cuBLASLt): tiles and waves at the rate of the data type and math mode
//!   (FP32, TF32, FP16, BF16, FP64), see [`gemm`].
//! * **A framework's own kernels** (from its fatbins, which the simulator cannot run): memory-bound
//!   over the bytes their pointer parameters reach, with rules for element-wise, reduction,
//!   softmax, normalisation, multi-tensor optimizer, attention and GEMM-like kernels, see
//!   [`kernels`].

pub mod conv;
pub mod gemm;
pub mod kernels;
pub mod nccl;
pub mod size;

use serde::Deserialize;
use std::collections::BTreeMap;

/// Per-direction efficiency of every cuDNN algorithm, indexed by the algorithm's enum value.
#[derive(Debug, Clone, Deserialize)]
pub struct AlgoEfficiency {
    pub fwd: Vec<f64>,
    pub bwd_data: Vec<f64>,
    pub bwd_filter: Vec<f64>,
}

/// One device profile (see the crate documentation for how each constant is used).
#[derive(Debug, Clone, Deserialize)]
pub struct Profile {
    pub name: String,
    pub device_name: String,
    pub compute_capability: [i32; 2],
    pub sm_count: u32,
    pub memory_bytes: u64,
    pub fp32_tflops: f64,
    pub tensor_tflops: Option<f64>,
    pub mem_bw_gbs: f64,
    pub pcie_h2d_gbs: f64,
    pub pcie_d2h_gbs: f64,
    pub pageable_factor: f64,
    pub api_call_us: f64,
    pub launch_us: f64,
    pub kernel_min_us: f64,
    pub copy_latency_us: f64,
    pub half_util_flops: f64,
    pub half_util_bytes: f64,
    pub algo_efficiency: AlgoEfficiency,
    /// The fraction of the memory bandwidth cuDNN's batch normalisation passes reach (the
    /// statistics, then the normalisation); 1 where a profile does not say.
    #[serde(default = "full")]
    pub batch_norm_efficiency: f64,
    /// GEMM rates and efficiencies for cuBLAS / cuBLASLt ([`gemm`]); absent in older profiles.
    #[serde(default)]
    pub gemm: Option<gemm::GemmRates>,
    /// The cost model of the kernels in a framework's fatbins ([`kernels`]).
    pub torch_kernels: kernels::TorchKernelModel,
    /// Collectives between the devices of one machine ([`nccl`]); absent in older profiles.
    #[serde(default)]
    pub nccl: Option<nccl::NcclModel>,
    pub sources: BTreeMap<String, String>,
}

fn full() -> f64 {
    1.0
}

/// The profiles built into the simulator, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    ("h100", include_str!("../../profiles/h100.json")),
    ("h200", include_str!("../../profiles/h200.json")),
    ("p100", include_str!("../../profiles/p100.json")),
];

/// Where the simulator's report (SIMGPU_REPORT) of the process working on device `physical`
/// goes on a machine of several devices: `base` with `.dev<physical>` before its extension
/// (`report.json` -> `report.dev1.json`). On a machine of one device the report is `base`.
pub fn per_device_report(base: &str, physical: u32) -> String {
    let p = std::path::Path::new(base);
    match (p.file_stem(), p.extension()) {
        (Some(stem), Some(ext)) => p
            .with_file_name(format!(
                "{}.dev{physical}.{}",
                stem.to_string_lossy(),
                ext.to_string_lossy()
            ))
            .to_string_lossy()
            .into_owned(),
        _ => format!("{base}.dev{physical}"),
    }
}

/// Direction of a copy between host and device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyDir {
    H2D,
    D2H,
    D2D,
}

impl Profile {
    /// Parses a profile from JSON text and checks that its numbers make sense.
    pub fn from_json(text: &str) -> Result<Profile, String> {
        let p: Profile = serde_json::from_str(text).map_err(|e| format!("bad profile: {e}"))?;
        p.validate()?;
        Ok(p)
    }

    /// A built-in profile by name, or a JSON file by path.
    pub fn load(name_or_path: &str) -> Result<(Profile, String), String> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Ok((Profile::from_json(text)?, text.to_string()));
        }
        if name_or_path.contains('/') || name_or_path.ends_with(".json") {
            let text = std::fs::read_to_string(name_or_path)
                .map_err(|e| format!("cannot read profile {name_or_path}: {e}"))?;
            return Ok((Profile::from_json(&text)?, text));
        }
        let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        Err(format!(
            "unknown profile {name_or_path:?}: accepted are {} or a path to a profile .json",
            names.join(", ")
        ))
    }

    fn validate(&self) -> Result<(), String> {
        let positive = [
            ("fp32_tflops", self.fp32_tflops),
            ("mem_bw_gbs", self.mem_bw_gbs),
            ("pcie_h2d_gbs", self.pcie_h2d_gbs),
            ("pcie_d2h_gbs", self.pcie_d2h_gbs),
            ("pageable_factor", self.pageable_factor),
            ("half_util_flops", self.half_util_flops),
            ("half_util_bytes", self.half_util_bytes),
        ];
        for (n, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!(
                    "profile {}: {n} must be positive, is {v}",
                    self.name
                ));
            }
        }
        let e = &self.algo_efficiency;
        if e.fwd.len() != conv::FWD_ALGOS || e.bwd_data.len() != conv::BWD_DATA_ALGOS {
            return Err(format!(
                "profile {}: algo_efficiency has the wrong length",
                self.name
            ));
        }
        if e.bwd_filter.len() != conv::BWD_FILTER_ALGOS {
            return Err(format!(
                "profile {}: algo_efficiency has the wrong length",
                self.name
            ));
        }
        self.torch_kernels.validate(&self.name)?;
        if self.memory_bytes == 0 {
            return Err(format!("profile {}: memory_bytes is 0", self.name));
        }
        Ok(())
    }

    fn peak_flops(&self, tensor_op: bool) -> f64 {
        match (tensor_op, self.tensor_tflops) {
            (true, Some(t)) => t * 1e12,
            _ => self.fp32_tflops * 1e12,
        }
    }

    /// Seconds a kernel takes that does `flops` arithmetic at efficiency `eff` and moves `bytes`.
    pub fn kernel_time(&self, flops: f64, bytes: f64, eff: f64, tensor_op: bool) -> f64 {
        let mut t: f64 = 0.0;
        if flops > 0.0 {
            let util = flops / (flops + self.half_util_flops);
            t = t.max(flops / (self.peak_flops(tensor_op) * eff.max(1e-3) * util));
        }
        if bytes > 0.0 {
            let util = bytes / (bytes + self.half_util_bytes);
            t = t.max(bytes / (self.mem_bw_gbs * 1e9 * util));
        }
        t.max(self.kernel_min_us * 1e-6)
    }

    /// Seconds a copy of `bytes` takes on its engine (pageable: at the staged rate).
    pub fn copy_time(&self, dir: CopyDir, bytes: u64, pageable: bool) -> f64 {
        let b = bytes as f64;
        let lat = self.copy_latency_us * 1e-6;
        match dir {
            CopyDir::D2D => lat + 2.0 * b / (self.mem_bw_gbs * 1e9),
            CopyDir::H2D | CopyDir::D2H => {
                let bw = if dir == CopyDir::H2D {
                    self.pcie_h2d_gbs
                } else {
                    self.pcie_d2h_gbs
                } * 1e9;
                let bw = if pageable {
                    bw * self.pageable_factor
                } else {
                    bw
                };
                lat + b / bw
            }
        }
    }

    /// Host seconds spent in one API call that is not a launch.
    pub fn api_call(&self) -> f64 {
        self.api_call_us * 1e-6
    }

    /// Host seconds spent issuing one kernel.
    pub fn launch(&self) -> f64 {
        self.launch_us * 1e-6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_parse_and_cite_every_constant() {
        for (name, text) in BUILTIN {
            let p = Profile::from_json(text).unwrap();
            assert_eq!(&p.name, name);
            for key in [
                "memory_bytes",
                "fp32_tflops",
                "mem_bw_gbs",
                "pcie_h2d_gbs",
                "launch_us",
                "algo_efficiency",
                "gemm.fp16_tflops",
                "gemm.bf16_tflops",
                "gemm.fp64_tflops",
                "gemm.simt_efficiency",
                "gemm.tensor_efficiency",
                "gemm.tiles",
            ] {
                assert!(p.sources.contains_key(key), "{name}: no source for {key}");
            }
            assert!(
                p.batch_norm_efficiency == 1.0 || p.sources.contains_key("batch_norm_efficiency"),
                "{name}: no source for batch_norm_efficiency"
            );
            assert!(p.batch_norm_efficiency > 0.0 && p.batch_norm_efficiency <= 1.0);
            assert!(p.device_name.contains("simulated"));
            assert!(p.gemm.is_some(), "{name}: no GEMM rates");
        }
    }

    #[test]
    fn small_kernels_are_less_efficient_than_large_ones() {
        let (p, _) = Profile::load("h100").unwrap();
        let small = 1e6 / p.kernel_time(1e6, 0.0, 1.0, false);
        let large = 1e12 / p.kernel_time(1e12, 0.0, 1.0, false);
        assert!(small < 0.1 * large, "small {small} large {large}");
        assert!(large > 0.99 * p.fp32_tflops * 1e12);
    }

    #[test]
    fn pageable_copies_are_slower() {
        let (p, _) = Profile::load("p100").unwrap();
        let pinned = p.copy_time(CopyDir::H2D, 1 << 30, false);
        let pageable = p.copy_time(CopyDir::H2D, 1 << 30, true);
        assert!(pageable > 2.0 * pinned);
        // 1 GiB at 12 GB/s: 89 ms.
        assert!((pinned - (1u64 << 30) as f64 / 12e9).abs() < 1e-4);
    }

    #[test]
    fn unknown_profile_names_what_is_accepted() {
        let e = Profile::load("v100x").unwrap_err();
        assert!(e.contains("h100") && e.contains("p100"), "{e}");
    }
}
