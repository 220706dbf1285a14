//! Time of the kernels a framework ships in its fatbins (torch's own kernels), which the
//! simulator cannot run: a cost from what the driver knows at launch: the kernel's demangled
//! name, grid, block, shared memory, its first integer parameter, and the bytes of the device
//! memory its pointer parameters reach.
//!
//! Most such kernels are memory-bound: `(half_util_bytes + bytes / occupancy) / (bandwidth *
//! efficiency)`, floored at `kernel_min`: the profile's small-launch curve (a latency's worth of
//! bytes), and an occupancy that says whether the threads can keep enough bytes in flight
//! (Little's law): `min(1, threads * min(bytes per thread, max in flight per thread) / (SMs *
//! bytes in flight per SM))`. Named families differ:
//!
//! * element-wise kernels (`int N` or `int64 numel` first): `N * arrays * element size` bytes,
//!   not the allocations (which the caching allocator makes larger than the tensors);
//! * other kernels: the bytes their pointers reach, at most `max_bytes_per_thread` per thread
//!   (unless the name says the kernel strides over its grid);
//! * reductions, softmax and normalisations: memory-bound at a lower efficiency (tree
//!   reductions, several passes over a row, a second pass for the statistics);
//! * multi-tensor optimizer kernels: at most `blocks * 65536 elements * depth` bytes per launch
//!   (torch's `kChunkSize`), the rest of the tensors' segments is not theirs;
//! * attention (flash / memory-efficient) and GEMM-like kernels torch runs itself: arithmetic
//!   estimated from the bytes and the grid, at a fraction of the peak.
//!
//! `bytes` (the reach of the pointers) is conservative: from each pointer to the end of its
//! allocation, overlaps counted once. A view or a tensor inside a caching allocator's segment
//! counts the rest of the segment; the caps above bound that for the families that have one.

use crate::Profile;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The profile's constants for this model (`torch_kernels` in the profile JSON).
#[derive(Debug, Clone, Deserialize)]
pub struct TorchKernelModel {
    /// Fraction of peak memory bandwidth a streaming kernel reaches.
    pub stream_efficiency: f64,
    /// Fractions of `stream_efficiency` for the families that reach less.
    pub reduction_efficiency: f64,
    pub softmax_efficiency: f64,
    pub norm_efficiency: f64,
    /// Bytes in flight per SM that saturate memory bandwidth (latency x bandwidth / SMs).
    pub bytes_in_flight_per_sm: f64,
    /// Most bytes one thread keeps in flight (vector loads, unrolling).
    pub max_bytes_in_flight_per_thread: f64,
    /// Most bytes one thread of a kernel that does not stride over its grid touches.
    pub max_bytes_per_thread: f64,
    /// Fraction of the tensor-core (half precision) or FP32 peak attention kernels reach.
    pub attention_efficiency: f64,
    /// Fraction of peak torch's own GEMM-like kernels reach.
    pub gemm_efficiency: f64,
    pub sources: BTreeMap<String, String>,
}

impl TorchKernelModel {
    pub fn validate(&self, profile: &str) -> Result<(), String> {
        let fractions = [
            ("stream_efficiency", self.stream_efficiency),
            ("reduction_efficiency", self.reduction_efficiency),
            ("softmax_efficiency", self.softmax_efficiency),
            ("norm_efficiency", self.norm_efficiency),
            ("attention_efficiency", self.attention_efficiency),
            ("gemm_efficiency", self.gemm_efficiency),
        ];
        for (n, v) in fractions {
            if !(v > 0.0 && v <= 1.0) {
                return Err(format!(
                    "profile {profile}: torch_kernels.{n} must be in (0, 1], is {v}"
                ));
            }
            if !self.sources.contains_key(n) {
                return Err(format!(
                    "profile {profile}: torch_kernels.{n} has no source"
                ));
            }
        }
        let positive = [
            ("bytes_in_flight_per_sm", self.bytes_in_flight_per_sm),
            (
                "max_bytes_in_flight_per_thread",
                self.max_bytes_in_flight_per_thread,
            ),
            ("max_bytes_per_thread", self.max_bytes_per_thread),
        ];
        for (n, v) in positive {
            if !v.is_finite() || v <= 0.0 || !self.sources.contains_key(n) {
                return Err(format!(
                    "profile {profile}: torch_kernels.{n} must be positive and sourced, is {v}"
                ));
            }
        }
        Ok(())
    }
}

/// Kernel families with their own cost rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    Elementwise,
    Reduction,
    Softmax,
    Norm,
    MultiTensor,
    Attention,
    Gemm,
    /// Everything else: memory-bound over the bytes its pointers reach.
    Memory,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Elementwise => "elementwise",
            Family::Reduction => "reduction",
            Family::Softmax => "softmax",
            Family::Norm => "norm",
            Family::MultiTensor => "multi_tensor",
            Family::Attention => "attention",
            Family::Gemm => "gemm",
            Family::Memory => "memory",
        }
    }
}

/// What the driver knows about one launch.
#[derive(Debug, Clone, Default)]
pub struct KernelLaunch<'a> {
    /// Demangled name (the mangled one works less well: families are matched on words).
    pub name: &'a str,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared: u32,
    /// The first parameter's value when it is a 4- or 8-byte integer.
    pub first_int: Option<i64>,
    /// Bytes reached from the pointer parameters (union of pointer..end of allocation).
    pub pointed_bytes: f64,
    /// The packed parameter block (for structs the model reads: torch's ReduceConfig).
    pub params: &'a [u8],
}

/// The model's answer, with what it used (for reports and for checking it).
#[derive(Debug, Clone, PartialEq)]
pub struct KernelCost {
    pub family: Family,
    pub bytes: f64,
    pub flops: f64,
    pub seconds: f64,
}

/// torch's `kChunkSize` (ATen/native/cuda/MultiTensorApply.cuh): elements per block.
const MULTI_TENSOR_CHUNK: f64 = 65536.0;

/// The kernel's name without its parameter list (the last top-level parenthesis), where the
/// family words and the template arguments are.
fn head(name: &str) -> &str {
    if !name.ends_with(')') {
        return name;
    }
    let mut depth = 0i32;
    for (i, c) in name.char_indices().rev() {
        match c {
            ')' | '>' => depth += 1,
            '(' | '<' => {
                depth -= 1;
                if depth == 0 {
                    return if i > 0 { &name[..i] } else { name };
                }
            }
            _ => {}
        }
    }
    name
}

pub fn classify(name: &str) -> Family {
    let h = head(name);
    let has = |w: &str| h.contains(w);
    let lower = h.to_ascii_lowercase();
    if has("multi_tensor_apply") {
        Family::MultiTensor
    } else if lower.contains("flash")
        || lower.contains("fmha")
        || lower.contains("attention_kernel")
        || lower.contains("attention_backward")
    {
        Family::Attention
    } else if lower.contains("softmax") {
        Family::Softmax
    } else if lower.contains("norm")
        && !lower.contains("normal")
        && !lower.contains("renorm")
        && !lower.contains("norm_kernel_cuda")
        || has("GammaBetaBackward")
        || has("compute_gI")
    {
        Family::Norm
    } else if has("reduce_kernel")
        || lower.contains("reduce")
        || lower.contains("scan")
        || has("cub::")
    {
        Family::Reduction
    } else if lower.contains("gemm") && !lower.contains("gemv") || has("cutlass::Kernel") {
        Family::Gemm
    } else if has("elementwise") {
        Family::Elementwise
    } else {
        Family::Memory
    }
}

/// Size of the first scalar type named in the kernel's template arguments (the functor's).
pub fn element_size(name: &str) -> f64 {
    let h = head(name);
    let types: [(&str, f64); 15] = [
        ("cutlass::half_t", 2.0),
        ("cutlass::bfloat16_t", 2.0),
        ("c10::complex<double>", 16.0),
        ("c10::complex<float>", 8.0),
        ("c10::complex<c10::Half>", 4.0),
        ("c10::Half", 2.0),
        ("c10::BFloat16", 2.0),
        ("__half", 2.0),
        ("__nv_bfloat16", 2.0),
        ("double", 8.0),
        ("float", 4.0),
        ("long", 8.0),
        ("int", 4.0),
        ("short", 2.0),
        ("bool", 1.0),
    ];
    let at = |w: &str| {
        h.match_indices(w)
            .find(|(i, _)| {
                // A whole word: not part of a longer identifier.
                let before = h[..*i].chars().next_back();
                let after = h[i + w.len()..].chars().next();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
            .map(|(i, _)| i)
    };
    types
        .iter()
        .filter_map(|(w, s)| at(w).map(|i| (i, *s)))
        .min_by_key(|(i, _)| *i)
        .map(|(_, s)| s)
        .unwrap_or(4.0)
}

/// (inputs per output, outputs) of torch's `ReduceOp`'s `ReduceConfig` (Reduce.cuh), which
/// follows the small `ops` and `ident` members at the start of the block: `int
/// element_size_bytes, num_inputs, num_outputs, step_input, step_output, ctas_per_output`.
/// Found as the first 4-aligned run in the first 64 bytes with the element size the name gives,
/// positive counts and steps; `None` when there is none.
pub fn reduce_config(params: &[u8], elem: f64) -> Option<(f64, f64)> {
    let word = |at: usize| -> Option<i32> {
        Some(i32::from_le_bytes(params.get(at..at + 4)?.try_into().ok()?))
    };
    (0..64).step_by(4).find_map(|at| {
        let w: Vec<i32> = (0..6).map(|i| word(at + 4 * i)).collect::<Option<_>>()?;
        (w[0] as f64 == elem && w[1..].iter().all(|&v| v >= 1))
            .then_some((w[1] as f64, w[2] as f64))
    })
}

/// Queries per block and head dimension of an attention kernel, from its template arguments:
/// `Flash_fwd_kernel_traits<D, kBlockM, ...>`, `fmha_cutlassF_..._64x64_k64` or
/// `AttentionKernel<T, Arch, aligned, queries, keys, max_k, ...>`.
fn attention_shape(name: &str) -> (f64, Option<f64>) {
    let nums_after = |key: &str| -> Option<Vec<f64>> {
        let i = name.find(key)? + key.len();
        let inner: String = name[i..].chars().take_while(|&c| c != '>').collect();
        Some(inner.split(',').filter_map(template_number).collect())
    };
    if let Some(v) = nums_after("_kernel_traits<")
        && v.len() >= 2
    {
        return (v[1], Some(v[0]));
    }
    if let Some(v) = nums_after("AttentionKernel<")
        && v.len() >= 3
    {
        return (v[0], Some(v[2]));
    }
    if let Some(v) = nums_after("AttentionBackwardKernel<")
        && v.len() >= 3
    {
        return (v[0], Some(v[2]));
    }
    (128.0, None)
}

/// A template argument as a number, as demanglers write it: `3`, `3ul`, `(unsigned long)3`.
fn template_number(s: &str) -> Option<f64> {
    let s = s.trim();
    let s = match s.strip_prefix('(') {
        Some(rest) => &rest[rest.find(')')? + 1..],
        None => s,
    };
    let digits: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// The `N` of `std::array<char*, N>` in the name: the element-wise kernel's operands.
fn operands(name: &str) -> Option<f64> {
    let i = name.find("std::array<char*, ")? + "std::array<char*, ".len();
    template_number(&name[i..])
}

/// The depth of a `TensorListMetadata<depth>` (tensors per list entry: params, grads, states).
fn list_depth(name: &str) -> Option<f64> {
    let i = name.find("TensorListMetadata<")? + "TensorListMetadata<".len();
    template_number(&name[i..])
}

fn half_precision(name: &str) -> bool {
    let h = head(name);
    ["Half", "BFloat16", "half", "bf16", "fp16"]
        .iter()
        .any(|w| h.contains(w))
}

/// Seconds (and what they came from) for one launch of a fatbin kernel.
pub fn cost(p: &Profile, m: &TorchKernelModel, l: &KernelLaunch) -> KernelCost {
    let family = classify(l.name);
    let threads = l
        .grid
        .iter()
        .chain(&l.block)
        .map(|&x| x as f64)
        .product::<f64>();
    let elem = element_size(l.name);
    let reach = l.pointed_bytes.max(0.0);
    let (bytes, eff) = match family {
        Family::Elementwise => {
            let n = l.first_int.filter(|n| *n > 0).map(|n| n as f64);
            let own = n.map(|n| n * operands(l.name).unwrap_or(2.0) * elem);
            let b = match own {
                Some(o) if reach > 0.0 => o.min(reach),
                Some(o) => o,
                None => reach,
            };
            (b, 1.0)
        }
        Family::MultiTensor => {
            let cap = l.grid[0].max(1) as f64
                * MULTI_TENSOR_CHUNK
                * list_depth(l.name).unwrap_or(2.0)
                * elem;
            (reach.min(cap), 1.0)
        }
        // torch's reduce_kernel gives a thread up to 16 x 256 values before it splits the
        // input over more blocks (Reduce.cuh); other reductions (losses, cub's sorts and scans)
        // get the per-thread cap of kernels that do not stride over their grid.
        Family::Reduction => {
            let own = reduce_config(l.params, elem).map(|(inputs, outputs)| {
                // The input once, the outputs once.
                (inputs * outputs + outputs) * elem
            });
            let per_thread = if l.name.contains("reduce_kernel") {
                16.0 * 256.0 * elem
            } else {
                m.max_bytes_per_thread
            };
            let cap = threads * per_thread;
            let b = match own {
                Some(o) if reach > 0.0 => o.min(reach),
                Some(o) => o,
                None => reach.min(cap),
            };
            (b, m.reduction_efficiency)
        }
        Family::Softmax => (reach, m.softmax_efficiency),
        Family::Norm => (reach, m.norm_efficiency),
        Family::Memory if !l.name.contains("grid_stride") => {
            (reach.min(threads * m.max_bytes_per_thread), 1.0)
        }
        Family::Attention | Family::Gemm | Family::Memory => (reach, 1.0),
    };
    let per_thread = (bytes / threads.max(1.0)).min(m.max_bytes_in_flight_per_thread);
    let occupancy =
        (threads * per_thread / (p.sm_count as f64 * m.bytes_in_flight_per_sm)).min(1.0);
    // (bytes + half_util_bytes) / bw is the profile's small-launch curve; too few threads
    // slow the streaming part only.
    let bw = p.mem_bw_gbs * 1e9 * m.stream_efficiency * eff;
    let mut t = if bytes > 0.0 {
        p.half_util_bytes / bw + bytes / (bw * occupancy.max(1e-4))
    } else {
        0.0
    };
    // Half-precision arithmetic at the device's FP16 rate (tensor cores where it has them).
    let peak = match (half_precision(l.name), &p.gemm) {
        (true, Some(g)) => g.fp16_tflops * 1e12,
        _ => p.fp32_tflops * 1e12,
    };
    let flops = match family {
        Family::Attention => {
            // Forward 4*S*S*D per (batch, head); backward 2.5 times that (FlashAttention-2).
            // Both torch kernels put query tiles on grid.x and batch and heads on y and z
            // (flash: ceil(S/kBlockM), B, H; memory-efficient: ceil(S/queries), H, B); the
            // tile and the head dimension are template arguments of the name. Without them:
            // 128-query tiles and D from the bytes (Q, K, V and the output: four B*H*S*D).
            let (tile, d) = attention_shape(l.name);
            let s = l.grid[0].max(1) as f64 * tile;
            let bh = (l.grid[1].max(1) * l.grid[2].max(1)) as f64;
            let d = d.unwrap_or_else(|| (bytes / (4.0 * elem * bh * s)).clamp(16.0, 256.0));
            let bwd = l.name.contains("bwd") || l.name.contains("Backward");
            4.0 * s * s * d * bh * if bwd { 2.5 } else { 1.0 }
        }
        Family::Gemm => {
            // Square operands assumed: three n*n matrices in the bytes, 2*n^3 multiply-adds.
            let n = (bytes / (3.0 * elem)).sqrt();
            2.0 * n * n * n
        }
        _ => 0.0,
    };
    if flops > 0.0 {
        let e = match family {
            Family::Attention => m.attention_efficiency,
            _ => m.gemm_efficiency,
        };
        let u = flops / (flops + p.half_util_flops);
        t = t.max(flops / (peak * e * u));
    }
    KernelCost {
        family,
        bytes,
        flops,
        seconds: t.max(p.kernel_min_us * 1e-6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> Profile {
        Profile::load("h100").unwrap().0
    }

    const ADD: &str = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul>)";

    #[test]
    fn families_by_name() {
        let cases = [
            (ADD, Family::Elementwise),
            (
                "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>)",
                Family::Reduction,
            ),
            (
                "void (anonymous namespace)::softmax_warp_forward<float, float, float, 11, false, false, 32>(float*, float const*, int, int, int, bool const*, int, bool)",
                Family::Softmax,
            ),
            (
                "void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, float, float, float, int>(int)",
                Family::Norm,
            ),
            (
                "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, true>(int, float, float const*, float const*, float const*, float*, float*, float*)",
                Family::Norm,
            ),
            (
                "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<3>, at::native::(anonymous namespace)::FusedAdagradMathFunctor<float>, float const*, double>(at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<3>)",
                Family::MultiTensor,
            ),
            (
                "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::half_t>, false, false, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
                Family::Attention,
            ),
            (
                "void at::native::(anonymous namespace)::fused_dropout_kernel<float, float, unsigned int, 1, 1, bool>(int)",
                Family::Memory,
            ),
            (
                "void at::native::(anonymous namespace)::normal_kernel<float>(int)",
                Family::Memory,
            ),
        ];
        for (n, f) in cases {
            assert_eq!(classify(n), f, "{n}");
        }
        assert_eq!(element_size(ADD), 4.0);
        assert_eq!(element_size("void k<c10::Half, float>(int)"), 2.0);
        assert_eq!(element_size("void k<integer_thing, double>(int)"), 8.0);
        assert_eq!(operands(ADD), Some(2.0));
        // cpp_demangle's spelling of an unsigned long template argument.
        assert_eq!(
            operands("k<std::array<char*, (unsigned long)3> >(int)"),
            Some(3.0)
        );
        assert_eq!(template_number("(unsigned int)64"), Some(64.0));
        assert_eq!(
            list_depth("multi_tensor_apply_kernel<TensorListMetadata<4>, F>"),
            Some(4.0)
        );
    }

    fn model(p: &Profile) -> TorchKernelModel {
        p.torch_kernels.clone()
    }

    #[test]
    fn elementwise_time_is_its_bytes_over_the_bandwidth_it_reaches() {
        let p = h100();
        let m = model(&p);
        // 64 Mi floats added in place: 512 MiB moved. Independent figure: at the profile's
        // 3.35 TB/s and stream efficiency, plus the small-launch term.
        let n = 64 << 20;
        let l = KernelLaunch {
            name: ADD,
            grid: [(n / 512) as u32, 1, 1],
            block: [128, 1, 1],
            first_int: Some(n as i64),
            pointed_bytes: 4.0 * (n as f64) * 3.0, // the allocations are larger than touched
            ..Default::default()
        };
        let c = cost(&p, &m, &l);
        let bytes = 2.0 * 4.0 * n as f64;
        assert_eq!(c.bytes, bytes);
        let want = (bytes + p.half_util_bytes) / (3350e9 * m.stream_efficiency);
        assert!(
            (c.seconds - want).abs() / want < 1e-9,
            "{} vs {want}",
            c.seconds
        );
        // 0.1 to 0.2 ms: what a 512 MiB stream takes on an H100.
        assert!(c.seconds > 1.5e-4 && c.seconds < 2.2e-4, "{}", c.seconds);
    }

    #[test]
    fn small_and_underfilled_launches_are_slower_per_byte() {
        let p = h100();
        let m = model(&p);
        let tiny = cost(
            &p,
            &m,
            &KernelLaunch {
                name: ADD,
                grid: [1, 1, 1],
                block: [128, 1, 1],
                first_int: Some(4),
                ..Default::default()
            },
        );
        // A launch latency's worth: at least the floor, under 3 us (a tiny kernel on an H100).
        assert!(
            tiny.seconds >= p.kernel_min_us * 1e-6 && tiny.seconds < 3e-6,
            "{}",
            tiny.seconds
        );
        let big = |grid: u32| {
            cost(
                &p,
                &m,
                &KernelLaunch {
                    name: "void at::native::(anonymous namespace)::copy_grid_stride_kernel<float>(float*, float const*)",
                    grid: [grid, 1, 1],
                    block: [256, 1, 1],
                    pointed_bytes: 1e9,
                    ..Default::default()
                },
            )
            .seconds
        };
        // 8 blocks of 256 threads cannot keep 132 SMs' worth of loads in flight.
        assert!(big(8) > 10.0 * big(100_000));
        // A kernel that does not stride over its grid touches at most its threads' share of a
        // large allocation its pointer sits in (a tensor inside a caching-allocator segment).
        let one_block = cost(
            &p,
            &m,
            &KernelLaunch {
                name: "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, int>(int, float const*)",
                grid: [1, 1, 1],
                block: [256, 1, 1],
                pointed_bytes: 2e6,
                ..Default::default()
            },
        );
        assert_eq!(one_block.bytes, 256.0 * m.max_bytes_per_thread);
        // A loss that gathers one value per row from a large input does not read all of it.
        let nll = cost(
            &p,
            &m,
            &KernelLaunch {
                name: "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)",
                grid: [1, 1, 1],
                block: [256, 1, 1],
                pointed_bytes: 5e8,
                ..Default::default()
            },
        );
        assert_eq!(nll.family, Family::Reduction);
        // torch's reduce_kernel: its ReduceConfig says how much it reads (here 3072 x 4096
        // floats into 3072 outputs), not the 450 MB segment its input sits in.
        let mut block = vec![0u8; 1048];
        let config = [4i32, 4096, 3072, 1, 1, 2, 0, 0, 0, 0, 0, 32, 16, 512];
        for (i, v) in config.iter().enumerate() {
            block[8 + 4 * i..12 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        let red = cost(
            &p,
            &m,
            &KernelLaunch {
                name: "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t<float, F>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, F>, unsigned int, float, 4, 4>)",
                grid: [24, 64, 1],
                block: [32, 4, 1],
                pointed_bytes: 4.5e8,
                params: &block,
                ..Default::default()
            },
        );
        assert_eq!(reduce_config(&block, 4.0), Some((4096.0, 3072.0)));
        assert_eq!(red.bytes, (4096.0 * 3072.0 + 3072.0) * 4.0);
        assert_eq!(reduce_config(&[0u8; 64], 4.0), None);
        assert!(nll.seconds < 50e-6, "{}", nll.seconds);
    }

    #[test]
    fn families_cost_more_or_are_capped_as_they_should() {
        let p = h100();
        let m = model(&p);
        let launch = |name: &'static str, grid: u32| KernelLaunch {
            name,
            grid: [grid, 1, 1],
            block: [256, 1, 1],
            pointed_bytes: 4e8,
            ..Default::default()
        };
        let mem = cost(&p, &m, &launch("void k<float>(float*)", 100_000));
        let red = cost(
            &p,
            &m,
            &launch("void at::native::reduce_kernel<512, 1>(float*)", 100_000),
        );
        let soft = cost(
            &p,
            &m,
            &launch("void softmax_warp_forward<float>(float*)", 100_000),
        );
        let norm = cost(
            &p,
            &m,
            &launch("void layer_norm_kernel<float>(float*)", 100_000),
        );
        assert!(
            red.seconds > mem.seconds && soft.seconds > mem.seconds && norm.seconds > mem.seconds
        );
        // One launch of a multi-tensor kernel covers its blocks' chunks, not the segments.
        let mt = cost(
            &p,
            &m,
            &launch(
                "void multi_tensor_apply_kernel<TensorListMetadata<3>, F<float> >(TensorListMetadata<3>)",
                10,
            ),
        );
        assert_eq!(mt.bytes, 10.0 * 65536.0 * 3.0 * 4.0);
        // Attention is arithmetic-bound: more time than streaming its bytes.
        let att = cost(
            &p,
            &m,
            &KernelLaunch {
                name: "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::half_t> >(pytorch_flash::Flash_fwd_params)",
                grid: [4, 32, 12],
                block: [128, 1, 1],
                pointed_bytes: 4.0 * 32.0 * 12.0 * 512.0 * 64.0 * 2.0,
                ..Default::default()
            },
        );
        assert_eq!(att.family, Family::Attention);
        assert_eq!(
            attention_shape(
                "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)"
            ),
            (64.0, Some(64.0))
        );
        // B=32, H=12, S=512, D=64: 4*S*S*D*B*H = 25.8 GFLOP; FlashAttention-2 reaches 35% of
        // the H100's 989 dense FP16 TFLOPS (FlashAttention-3 paper): 74.6 us.
        let want = 4.0 * 512.0 * 512.0 * 64.0 * 32.0 * 12.0;
        assert!((att.flops - want).abs() / want < 1e-9, "{}", att.flops);
        let published = want / (0.35 * 989e12);
        assert!(
            (att.seconds - published).abs() / published < 0.05,
            "{} vs {published}",
            att.seconds
        );
    }
}
