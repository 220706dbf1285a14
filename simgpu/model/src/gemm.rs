//! GEMM time, as cuBLAS and cuBLASLt kernels take it on the simulated device.
//!
//! A GEMM is cut into output tiles, one thread block each; the device runs `sm_count` of them at
//! a time (one wave), so the time is the number of waves times the time of one tile on one SM,
//! or the time to move the operands if that is longer. This is the model of NVIDIA's *Matrix
//! Multiplication Background User's Guide* (DU-09799-001): the tile sizes cuBLAS uses (§2.3) and
//! the tile and wave quantization that make small and odd-sized GEMMs slower per flop (§3). Like
//! cuBLAS's heuristic, the estimate picks the tile (and a split of the k dimension, when there are
//! too few tiles to fill the device and workspace allows) that finishes first.

use crate::Profile;
use serde::Deserialize;

/// GEMM rates of a profile beyond `fp32_tflops` / `tensor_tflops` (each sourced in the profile).
#[derive(Debug, Clone, Deserialize)]
pub struct GemmRates {
    /// FP16 inputs with FP32 accumulation (tensor cores where the device has them).
    pub fp16_tflops: f64,
    /// BF16 inputs with FP32 accumulation.
    pub bf16_tflops: f64,
    /// FP64 GEMM (DGEMM; tensor cores on Hopper).
    pub fp64_tflops: f64,
    /// Fraction of peak a large SIMT (CUDA-core) GEMM tile sustains.
    pub simt_efficiency: f64,
    /// Fraction of peak a large tensor-core GEMM tile sustains.
    pub tensor_efficiency: f64,
    /// Output tile sizes (rows x columns) the library chooses from.
    pub tiles: Vec<[u32; 2]>,
    /// Depth of one main-loop step: k is padded up to a multiple of it.
    pub k_step: u32,
}

/// The arithmetic a GEMM runs, which decides its peak rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Math {
    /// FP32 on CUDA cores.
    Fp32,
    /// FP32 data, TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32 or TF32 math mode).
    Tf32,
    /// FP16 inputs (tensor cores where present).
    Fp16,
    /// BF16 inputs.
    Bf16,
    /// FP64.
    Fp64,
}

/// One GEMM (or a batch of equal GEMMs): D (m x n) = op(A) (m x k) op(B) (k x n) [+ C].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmShape {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub batch: u64,
    /// Bytes of one element of A and B.
    pub in_bytes: u64,
    /// Bytes of one element of C and D.
    pub out_bytes: u64,
    /// Whether C is read (beta != 0).
    pub reads_c: bool,
}

/// What the model decided for one GEMM.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmEstimate {
    /// Simulated seconds on the device.
    pub seconds: f64,
    /// The chosen output tile (rows, columns).
    pub tile: [u32; 2],
    /// Parts the k dimension is split into (1: none).
    pub split_k: u32,
    /// Workspace bytes the split needs (partial sums in FP32).
    pub workspace: u64,
    /// Thread blocks over what one wave holds: cuBLASLt's `wavesCount`.
    pub waves: f32,
}

const SPLITS: [u32; 5] = [1, 2, 4, 8, 16];

impl Profile {
    fn gemm_rate(&self, math: Math) -> (f64, f64) {
        let g = self.gemm.as_ref();
        let simt = g.map_or(0.8, |g| g.simt_efficiency);
        let tensor = g.map_or(0.75, |g| g.tensor_efficiency);
        let has_tc = self.tensor_tflops.is_some();
        let eff = |tc: bool| if tc { tensor } else { simt };
        match math {
            Math::Fp32 => (self.fp32_tflops, simt),
            // Without tensor cores TF32 is not available and cuBLAS runs plain FP32.
            Math::Tf32 => match self.tensor_tflops {
                Some(t) => (t, tensor),
                None => (self.fp32_tflops, simt),
            },
            Math::Fp16 => (g.map_or(self.fp32_tflops, |g| g.fp16_tflops), eff(has_tc)),
            Math::Bf16 => (g.map_or(self.fp32_tflops, |g| g.bf16_tflops), eff(has_tc)),
            Math::Fp64 => (g.map_or(self.fp32_tflops / 2.0, |g| g.fp64_tflops), simt),
        }
    }

    fn gemm_tiles(&self) -> Vec<[u32; 2]> {
        match &self.gemm {
            Some(g) if !g.tiles.is_empty() => g.tiles.clone(),
            _ => vec![[128, 128], [128, 64], [64, 64]],
        }
    }

    /// The time of a GEMM run with output tile `tile` and k split `split` ways (the split's
    /// partial sums need `split * m * n * batch * 4` bytes of workspace).
    pub fn gemm_option(
        &self,
        s: &GemmShape,
        math: Math,
        tile: [u32; 2],
        split: u32,
    ) -> GemmEstimate {
        let (tflops, eff) = self.gemm_rate(math);
        let sms = self.sm_count.max(1) as f64;
        let per_sm = tflops * 1e12 * eff / sms;
        let k_step = self.gemm.as_ref().map_or(32, |g| g.k_step.max(1)) as u64;
        let (m, n, k, batch) = (s.m.max(1), s.n.max(1), s.k, s.batch.max(1));
        let split = split.max(1);
        let [tm, tn] = [tile[0].max(1), tile[1].max(1)];
        let bytes = (batch
            * ((m * k + k * n) * s.in_bytes + m * n * s.out_bytes * (1 + s.reads_c as u64)))
            as f64;
        let mem = if bytes > 0.0 {
            bytes / (self.mem_bw_gbs * 1e9 * (bytes / (bytes + self.half_util_bytes)))
        } else {
            0.0
        };
        let workspace = if split > 1 {
            split as u64 * m * n * batch * 4
        } else {
            0
        };
        let blocks = m.div_ceil(tm as u64) * n.div_ceil(tn as u64) * batch;
        let kpart = k.div_ceil(split as u64).div_ceil(k_step).max(1) * k_step;
        let total = blocks * split as u64;
        let waves = total.div_ceil(self.sm_count.max(1) as u64);
        let tile_flops = 2.0 * tm as f64 * tn as f64 * kpart as f64;
        let mut t = waves as f64 * tile_flops / per_sm;
        if split > 1 {
            // The partial sums are written, read back and reduced.
            t += 2.0 * workspace as f64 / (self.mem_bw_gbs * 1e9);
        }
        GemmEstimate {
            seconds: t.max(mem).max(self.kernel_min_us * 1e-6),
            tile: [tm, tn],
            split_k: split,
            workspace,
            waves: (total as f64 / sms) as f32,
        }
    }

    /// Every (tile, split) the library would consider with at most `max_workspace` bytes of
    /// workspace, fastest first. Splits are only considered when the tiles alone leave SMs idle.
    pub fn gemm_options(&self, s: &GemmShape, math: Math, max_workspace: u64) -> Vec<GemmEstimate> {
        let mut v = Vec::new();
        let (m, n, batch) = (s.m.max(1), s.n.max(1), s.batch.max(1));
        for tile in self.gemm_tiles() {
            let blocks =
                m.div_ceil(tile[0].max(1) as u64) * n.div_ceil(tile[1].max(1) as u64) * batch;
            for split in SPLITS {
                let e = self.gemm_option(s, math, tile, split);
                if split > 1 && (e.workspace > max_workspace || blocks >= self.sm_count as u64) {
                    continue;
                }
                v.push(e);
            }
        }
        v.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
        v
    }

    /// The time of a GEMM with at most `max_workspace` bytes of workspace: its fastest option.
    pub fn gemm_time(&self, s: &GemmShape, math: Math, max_workspace: u64) -> GemmEstimate {
        self.gemm_options(s, math, max_workspace)[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(m: u64, n: u64, k: u64) -> GemmShape {
        GemmShape {
            m,
            n,
            k,
            batch: 1,
            in_bytes: 4,
            out_bytes: 4,
            reads_c: false,
        }
    }

    fn tflops(p: &Profile, s: &GemmShape, math: Math) -> f64 {
        let e = p.gemm_time(s, math, 0);
        2.0 * (s.m * s.n * s.k * s.batch) as f64 / e.seconds / 1e12
    }

    #[test]
    fn large_gemms_approach_the_sustained_peak_and_small_ones_do_not() {
        let (p, _) = Profile::load("h100").unwrap();
        let g = p.gemm.clone().unwrap();
        let big = tflops(&p, &shape(8192, 8192, 8192), Math::Fp32);
        assert!(big > 0.9 * p.fp32_tflops * g.simt_efficiency, "{big}");
        assert!(big <= p.fp32_tflops * g.simt_efficiency * 1.0001, "{big}");
        let small = tflops(&p, &shape(64, 64, 64), Math::Fp32);
        assert!(small < 0.01 * big, "{small}");
        // Tensor cores: TF32 and FP16 are several times FP32 on a large GEMM.
        let tf32 = tflops(&p, &shape(8192, 8192, 8192), Math::Tf32);
        let fp16 = tflops(&p, &shape(8192, 8192, 8192), Math::Fp16);
        assert!(tf32 > 5.0 * big && fp16 > 1.9 * tf32, "{tf32} {fp16}");
    }

    #[test]
    fn one_row_more_than_a_wave_costs_far_more_than_a_row() {
        let (p, _) = Profile::load("h100").unwrap();
        // 132 SMs: 132 tiles of 128x128 fill one wave; one row more needs a second wave of
        // 128-row tiles, or smaller tiles in 5 waves of a quarter each (the cheapest: +25%).
        let full = p.gemm_time(&shape(128 * 132, 128, 4096), Math::Fp32, 0);
        let over = p.gemm_time(&shape(128 * 132 + 1, 128, 4096), Math::Fp32, 0);
        assert_eq!(full.tile, [128, 128]);
        assert!(over.seconds > 1.2 * full.seconds, "{full:?} {over:?}");
    }

    #[test]
    fn split_k_only_with_workspace_and_helps_thin_deep_gemms() {
        let (p, _) = Profile::load("h100").unwrap();
        let s = shape(128, 128, 65536);
        let none = p.gemm_time(&s, Math::Fp32, 0);
        let some = p.gemm_time(&s, Math::Fp32, 32 << 20);
        assert_eq!(none.split_k, 1);
        assert!(some.split_k > 1 && some.workspace <= 32 << 20, "{some:?}");
        assert!(some.seconds < none.seconds / 4.0, "{none:?} {some:?}");
    }

    #[test]
    fn pascal_has_no_tensor_cores() {
        let (p, _) = Profile::load("p100").unwrap();
        let s = shape(4096, 4096, 4096);
        let fp32 = p.gemm_time(&s, Math::Fp32, 0).seconds;
        assert_eq!(p.gemm_time(&s, Math::Tf32, 0).seconds, fp32);
        let fp16 = p.gemm_time(&s, Math::Fp16, 0).seconds;
        assert!((fp32 / fp16 - 2.0).abs() < 0.05, "{fp32} {fp16}");
    }
}
