//! cuDNN convolution algorithms in the simulator: support rules, workspace and arithmetic cost.
//!
//! Algorithms are indexed by their cuDNN enum values (`cudnnConvolutionFwdAlgo_t` and friends).
//! Every algorithm cuDNN enumerates is present; `DIRECT` forward and `WINOGRAD` backward-filter
//! are enumerated by cuDNN but never implemented there, so they are never supported here either.
//!
//! Workspaces follow the structure of each method (all float32, 4 bytes; `Cg = C / groups`):
//! * implicit GEMM: none; precomputed implicit GEMM: one int32 offset and one 16-bit mask per
//!   output position (`6 * P * Q` bytes);
//! * GEMM: the im2col buffer of the whole mini-batch, `N * C * R * S * P * Q * 4`;
//! * FFT: frequency-domain copies (complex float, Hermitian half-spectrum of the padded input
//!   plane `Hp x (Wp/2 + 1)`) of every input plane of the batch, of every filter, and of one
//!   image's output planes at a time;
//! * FFT_TILING: the same with 32 x 32 tiles: every filter, and the tiles of every image;
//! * Winograd (fused): none; Winograd non-fused: the transformed 6 x 6 tiles of inputs, filters
//!   and outputs (F(4x4, 3x3), or F(2x2, 5x5)).
//!
//! So the workspace of GEMM, FFT, FFT_TILING and Winograd non-fused grows with the batch, which
//! is what makes micro-batching pay off (the μ-cuDNN paper's observation, checked in the tests
//! on the p100 profile for AlexNet conv2).

use crate::Profile;

pub const FWD_ALGOS: usize = 8;
pub const BWD_DATA_ALGOS: usize = 6;
pub const BWD_FILTER_ALGOS: usize = 7;

/// The three convolution directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    Fwd,
    BwdData,
    BwdFilter,
}

impl Dir {
    pub fn algo_count(self) -> usize {
        match self {
            Dir::Fwd => FWD_ALGOS,
            Dir::BwdData => BWD_DATA_ALGOS,
            Dir::BwdFilter => BWD_FILTER_ALGOS,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dir::Fwd => "forward",
            Dir::BwdData => "backward-data",
            Dir::BwdFilter => "backward-filter",
        }
    }
}

/// The method an algorithm uses, which decides its rules, workspace and cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    ImplicitGemm,
    PrecompGemm,
    Gemm,
    Direct,
    Fft,
    FftTiling,
    Winograd,
    WinogradNonfused,
    /// Backward-filter ALGO_3: implicit GEMM with a small reduction buffer.
    ReductionGemm,
}

/// The method of algorithm `algo` in direction `dir`.
pub fn method(dir: Dir, algo: usize) -> Option<Method> {
    use Method::*;
    match dir {
        Dir::Fwd => [
            ImplicitGemm,
            PrecompGemm,
            Gemm,
            Direct,
            Fft,
            FftTiling,
            Winograd,
            WinogradNonfused,
        ]
        .get(algo)
        .copied(),
        Dir::BwdData => [
            ImplicitGemm,
            PrecompGemm,
            Fft,
            FftTiling,
            Winograd,
            WinogradNonfused,
        ]
        .get(algo)
        .copied(),
        Dir::BwdFilter => [
            ImplicitGemm,
            PrecompGemm,
            Fft,
            ReductionGemm,
            Winograd,
            WinogradNonfused,
            FftTiling,
        ]
        .get(algo)
        .copied(),
    }
}

/// Whether an algorithm gives the same bits run after run (cuDNN: the atomics-based ones do not).
pub fn deterministic(dir: Dir, algo: usize) -> bool {
    !matches!(
        (dir, algo),
        (Dir::BwdData, 0) | (Dir::BwdFilter, 0) | (Dir::BwdFilter, 3)
    )
}

/// A convolution's shape. Spatial arrays are (depth, height, width); 2-d convolutions have
/// depth 1, filter depth 1, pad 0, stride 1, dilation 1 in the first slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Geom {
    pub n: u64,
    pub c: u64,
    pub k: u64,
    pub groups: u64,
    pub spatial_dims: usize,
    pub input: [u64; 3],
    pub filter: [u64; 3],
    pub pad: [u64; 3],
    pub stride: [u64; 3],
    pub dilation: [u64; 3],
}

impl Geom {
    /// A 2-d convolution (the common case; also what the layer lists describe).
    #[allow(clippy::too_many_arguments)]
    pub fn conv2d(
        n: u64,
        c: u64,
        h: u64,
        w: u64,
        k: u64,
        r: u64,
        s: u64,
        pad: (u64, u64),
        stride: (u64, u64),
        dilation: (u64, u64),
        groups: u64,
    ) -> Geom {
        Geom {
            n,
            c,
            k,
            groups,
            spatial_dims: 2,
            input: [1, h, w],
            filter: [1, r, s],
            pad: [0, pad.0, pad.1],
            stride: [1, stride.0, stride.1],
            dilation: [1, dilation.0, dilation.1],
        }
    }

    /// Output spatial size, as cudnnGetConvolutionNdForwardOutputDim computes it, or None when
    /// the filter does not fit the padded input.
    pub fn output(&self) -> Option<[u64; 3]> {
        let mut out = [1; 3];
        for (i, o) in out.iter_mut().enumerate() {
            let span = self.dilation[i] * (self.filter[i].max(1) - 1) + 1;
            let padded = self.input[i] + 2 * self.pad[i];
            if span > padded || self.stride[i] == 0 {
                return None;
            }
            *o = (padded - span) / self.stride[i] + 1;
        }
        Some(out)
    }

    /// The same convolution over a different batch size.
    pub fn with_batch(&self, n: u64) -> Geom {
        Geom { n, ..*self }
    }

    fn cg(&self) -> u64 {
        self.c / self.groups.max(1)
    }

    fn filter_volume(&self) -> u64 {
        self.filter.iter().product()
    }

    fn unit_stride_and_dilation(&self) -> bool {
        self.stride.iter().all(|&s| s == 1) && self.dilation.iter().all(|&d| d == 1)
    }

    /// Multiply-adds times two: the arithmetic of the direct method, the same for all directions.
    pub fn direct_flops(&self) -> f64 {
        let out: u64 = self.output().map(|o| o.iter().product()).unwrap_or(0);
        2.0 * (self.n * self.k * self.cg() * self.filter_volume() * out) as f64
    }
}

/// Why an algorithm does not support a convolution (cuDNN returns CUDNN_STATUS_NOT_SUPPORTED).
pub type Unsupported = &'static str;

/// cuDNN's support rules, float32 data.
pub fn support(dir: Dir, algo: usize, g: &Geom) -> Result<(), Unsupported> {
    let m = method(dir, algo).ok_or("no such algorithm")?;
    if g.output().is_none() {
        return Err("filter larger than the padded input");
    }
    let two_d = g.spatial_dims == 2;
    let [_, r, s] = g.filter;
    match m {
        Method::ImplicitGemm | Method::PrecompGemm | Method::ReductionGemm => Ok(()),
        Method::Gemm => {
            if two_d {
                Ok(())
            } else {
                Err("GEMM is 2-d only")
            }
        }
        Method::Direct => Err("cuDNN does not implement this algorithm"),
        Method::Fft => {
            if !two_d {
                return Err("FFT is 2-d only");
            }
            if !g.unit_stride_and_dilation() {
                return Err("FFT needs stride 1 and dilation 1");
            }
            if g.input[1] + 2 * g.pad[1] > 256 || g.input[2] + 2 * g.pad[2] > 256 {
                return Err("FFT needs the padded input at most 256 x 256");
            }
            if r <= g.pad[1] || s <= g.pad[2] {
                return Err("FFT needs the filter larger than the padding");
            }
            Ok(())
        }
        Method::FftTiling => {
            if !g.unit_stride_and_dilation() {
                return Err("FFT_TILING needs stride 1 and dilation 1");
            }
            if g.filter.iter().any(|&f| f > 32) {
                return Err("FFT_TILING needs filters of at most 32 x 32");
            }
            if r <= g.pad[1] || s <= g.pad[2] {
                return Err("FFT_TILING needs the filter larger than the padding");
            }
            Ok(())
        }
        Method::Winograd => {
            if dir == Dir::BwdFilter {
                return Err("cuDNN does not implement this algorithm");
            }
            if two_d && g.unit_stride_and_dilation() && r == 3 && s == 3 {
                Ok(())
            } else {
                Err("WINOGRAD needs a 2-d 3x3 filter, stride 1, dilation 1")
            }
        }
        Method::WinogradNonfused => {
            if two_d && g.unit_stride_and_dilation() && r == s && (r == 3 || r == 5) {
                Ok(())
            } else {
                Err("WINOGRAD_NONFUSED needs a 2-d 3x3 or 5x5 filter, stride 1, dilation 1")
            }
        }
    }
}

/// Bytes of a complex half-spectrum plane of `h x w`.
fn spectrum_plane(h: u64, w: u64) -> u64 {
    h * (w / 2 + 1) * 8
}

const TILE: u64 = 32;

/// Output tiles of FFT_TILING (each 32 x 32 transform yields `32 - f + 1` outputs per side).
fn fft_tiles(g: &Geom) -> u64 {
    let out = g.output().unwrap_or([1; 3]);
    (1..3)
        .map(|i| out[i].div_ceil(TILE + 1 - g.filter[i].min(TILE)))
        .product::<u64>()
        * out[0]
}

/// Winograd non-fused: (outputs per tile side, tiles) for the filter size.
fn winograd_tiles(g: &Geom) -> (u64, u64) {
    let out = g.output().unwrap_or([1; 3]);
    let m = if g.filter[1] == 5 { 2 } else { 4 };
    (m, out[1].div_ceil(m) * out[2].div_ceil(m))
}

/// Workspace bytes of algorithm `algo` (0 when unsupported).
pub fn workspace(dir: Dir, algo: usize, g: &Geom) -> u64 {
    if support(dir, algo, g).is_err() {
        return 0;
    }
    let out = g.output().unwrap_or([1; 3]);
    let out_vol: u64 = out.iter().product();
    let in_vol: u64 = g.input.iter().product();
    let (n, c, k, cg) = (g.n, g.c, g.k, g.cg());
    let hp = g.input[1] + 2 * g.pad[1];
    let wp = g.input[2] + 2 * g.pad[2];
    // Planes read as "input" and written as "output" by the direction.
    let (in_ch, out_ch) = match dir {
        Dir::Fwd => (c, k),
        Dir::BwdData => (k, c),
        Dir::BwdFilter => (c, k),
    };
    match method(dir, algo).unwrap() {
        Method::ImplicitGemm | Method::Winograd | Method::Direct => 0,
        Method::PrecompGemm => match dir {
            Dir::Fwd => 6 * out_vol,
            Dir::BwdData => 6 * in_vol,
            Dir::BwdFilter => 4 * k * cg * g.filter_volume(),
        },
        Method::ReductionGemm => 4 * k * cg * g.filter_volume() / 4 + 4 * k,
        Method::Gemm => n * c * g.filter_volume() * out_vol * 4,
        Method::Fft => {
            let plane = spectrum_plane(hp, wp);
            match dir {
                Dir::BwdFilter => plane * (n * c + n * k + k * cg),
                _ => plane * (n * in_ch + k * cg + out_ch),
            }
        }
        Method::FftTiling => {
            let plane = spectrum_plane(TILE, TILE);
            plane * (k * cg + n * (in_ch + out_ch) * fft_tiles(g))
        }
        Method::WinogradNonfused => {
            let (_, tiles) = winograd_tiles(g);
            let t = 36 * 4;
            t * (n * (c + k) * tiles + k * cg)
        }
    }
}

/// (flops, bytes moved beyond the tensors themselves) of algorithm `algo`.
pub fn cost(dir: Dir, algo: usize, g: &Geom) -> (f64, f64) {
    let direct = g.direct_flops();
    let ws = workspace(dir, algo, g) as f64;
    let (n, c, k, cg) = (g.n as f64, g.c as f64, g.k as f64, g.cg() as f64);
    let tensors = 4.0
        * (g.n * g.c * g.input.iter().product::<u64>()
            + g.k * g.cg() * g.filter_volume()
            + g.n * g.k * g.output().unwrap_or([1; 3]).iter().product::<u64>()) as f64;
    let fft_flops = |planes: f64, h: f64, w: f64, products: f64| {
        let elems = h * (w / 2.0 + 1.0);
        let transform = 5.0 * h * w * (h * w).log2().max(1.0) / 2.0;
        planes * transform + 8.0 * products * elems
    };
    match method(dir, algo) {
        None | Some(Method::Direct) => (direct, tensors),
        Some(Method::ImplicitGemm) | Some(Method::PrecompGemm) | Some(Method::ReductionGemm) => {
            (direct, tensors)
        }
        Some(Method::Gemm) => (direct, tensors + 2.0 * ws),
        Some(Method::Winograd) => (direct / 2.25, tensors),
        Some(Method::WinogradNonfused) => {
            let (m, _) = winograd_tiles(g);
            let taps = (g.filter[1] * g.filter[2]) as f64;
            let reduction = (m * m) as f64 * taps / 36.0;
            (direct / reduction, tensors + 2.0 * ws)
        }
        Some(Method::Fft) => {
            let hp = (g.input[1] + 2 * g.pad[1]) as f64;
            let wp = (g.input[2] + 2 * g.pad[2]) as f64;
            let planes = n * c + k * cg + n * k;
            (fft_flops(planes, hp, wp, n * k * cg), tensors + 2.0 * ws)
        }
        Some(Method::FftTiling) => {
            let tiles = fft_tiles(g) as f64;
            let t = TILE as f64;
            let planes = n * (c + k) * tiles + k * cg;
            (
                fft_flops(planes, t, t, n * k * cg * tiles),
                tensors + 2.0 * ws,
            )
        }
    }
}

/// Seconds algorithm `algo` takes on `profile` (None when unsupported).
pub fn time(p: &Profile, dir: Dir, algo: usize, g: &Geom, tensor_op: bool) -> Option<f64> {
    support(dir, algo, g).ok()?;
    let eff = match dir {
        Dir::Fwd => p.algo_efficiency.fwd[algo],
        Dir::BwdData => p.algo_efficiency.bwd_data[algo],
        Dir::BwdFilter => p.algo_efficiency.bwd_filter[algo],
    };
    let (flops, bytes) = cost(dir, algo, g);
    // Tensor cores help the GEMM-shaped methods only.
    let gemm_like = matches!(
        method(dir, algo),
        Some(Method::ImplicitGemm | Method::PrecompGemm | Method::Gemm | Method::ReductionGemm)
    );
    Some(p.kernel_time(flops, bytes, eff, tensor_op && gemm_like))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = 1048576.0;

    fn alexnet_conv2(n: u64) -> Geom {
        Geom::conv2d(n, 64, 27, 27, 192, 5, 5, (2, 2), (1, 1), (1, 1), 1)
    }

    #[test]
    fn output_dims() {
        let g = Geom::conv2d(2, 3, 224, 224, 64, 11, 11, (2, 2), (4, 4), (1, 1), 1);
        assert_eq!(g.output().unwrap(), [1, 55, 55]);
        let d = Geom::conv2d(1, 1, 7, 7, 1, 3, 3, (0, 0), (1, 1), (2, 2), 1);
        assert_eq!(d.output().unwrap(), [1, 3, 3]);
        let bad = Geom::conv2d(1, 1, 2, 2, 1, 5, 5, (0, 0), (1, 1), (1, 1), 1);
        assert!(bad.output().is_none());
    }

    #[test]
    fn support_rules() {
        let g3 = Geom::conv2d(8, 16, 32, 32, 16, 3, 3, (1, 1), (1, 1), (1, 1), 1);
        let strided = Geom::conv2d(8, 16, 32, 32, 16, 3, 3, (1, 1), (2, 2), (1, 1), 1);
        let big = Geom::conv2d(8, 16, 300, 300, 16, 3, 3, (1, 1), (1, 1), (1, 1), 1);
        assert!(support(Dir::Fwd, 6, &g3).is_ok());
        assert!(support(Dir::Fwd, 6, &strided).is_err());
        assert!(support(Dir::Fwd, 4, &strided).is_err());
        assert!(support(Dir::Fwd, 4, &big).is_err());
        assert!(support(Dir::Fwd, 5, &big).is_ok());
        assert!(support(Dir::Fwd, 3, &g3).is_err());
        assert!(support(Dir::BwdFilter, 4, &g3).is_err());
        assert!(support(Dir::Fwd, 6, &alexnet_conv2(1)).is_err());
        assert!(support(Dir::Fwd, 7, &alexnet_conv2(1)).is_ok());
        for a in [0, 1] {
            assert!(support(Dir::Fwd, a, &strided).is_ok());
        }
    }

    #[test]
    fn workspaces_grow_with_the_batch_where_the_method_does() {
        for dir in [Dir::Fwd, Dir::BwdData, Dir::BwdFilter] {
            for algo in 0..dir.algo_count() {
                let small = workspace(dir, algo, &alexnet_conv2(8));
                let large = workspace(dir, algo, &alexnet_conv2(64));
                let grows = matches!(
                    method(dir, algo).unwrap(),
                    Method::Gemm | Method::Fft | Method::FftTiling | Method::WinogradNonfused
                ) && support(dir, algo, &alexnet_conv2(8)).is_ok();
                assert_eq!(large > small, grows, "{dir:?} algo {algo}");
            }
        }
    }

    /// The μ-cuDNN paper's observations for AlexNet conv2 forward on the P100.
    #[test]
    fn p100_alexnet_conv2_matches_the_mucudnn_paper() {
        let (p, _) = Profile::load("p100").unwrap();
        let g = alexnet_conv2(256);
        let limit = 64.0 * MIB;
        let algos: Vec<(usize, f64, f64)> = (0..FWD_ALGOS)
            .filter_map(|a| {
                time(&p, Dir::Fwd, a, &g, false).map(|t| (a, t, workspace(Dir::Fwd, a, &g) as f64))
            })
            .collect();
        let fastest = algos.iter().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
        // The paper (Fig. 9): an FFT-based method is the fastest, and needs far more than 64 MiB.
        assert!(
            matches!(fastest.0, 4 | 5),
            "an FFT method is fastest: {algos:?}"
        );
        assert!(
            fastest.2 > 1.5 * limit,
            "FFT needs far more than 64 MiB: {}",
            fastest.2 / MIB
        );
        let fit = algos
            .iter()
            .filter(|a| a.2 <= limit)
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap();
        assert!(fit.0 <= 2, "fastest fitting is GEMM-family: {fit:?}");
        assert!(
            fit.1 > 3.0 * fastest.1,
            "several times slower: {fit:?} vs {fastest:?}"
        );
        assert!(fit.2 < 8192.0, "the paper: 4.3 KiB, got {}", fit.2);
        let micro = workspace(Dir::Fwd, 4, &alexnet_conv2(32)) as f64 / MIB;
        assert!(
            micro < 64.0 && (micro - 48.9).abs() / 48.9 < 0.15,
            "FFT at 32: {micro} MiB"
        );
    }

    #[test]
    fn tensor_ops_speed_up_gemm_on_h100_only() {
        let (h, _) = Profile::load("h100").unwrap();
        let (p, _) = Profile::load("p100").unwrap();
        let g = alexnet_conv2(256);
        assert!(
            time(&h, Dir::Fwd, 1, &g, true).unwrap() < time(&h, Dir::Fwd, 1, &g, false).unwrap()
        );
        assert_eq!(
            time(&p, Dir::Fwd, 1, &g, true),
            time(&p, Dir::Fwd, 1, &g, false)
        );
        assert_eq!(
            time(&h, Dir::Fwd, 4, &g, true),
            time(&h, Dir::Fwd, 4, &g, false)
        );
    }
}
