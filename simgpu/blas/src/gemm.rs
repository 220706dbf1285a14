//! One GEMM call, checked: D = epilogue(alpha op(A) op(B) + beta C), over a batch; real
//! arithmetic in data mode, range checks only in shape mode, and its time on the stream.

use crate::driver::Sim;
use crate::epilogue::{self, Epilogue};
use crate::matrix::{Matrix, tf32};
use crate::types::*;
use half::{bf16, f16};
use simgpu_model::gemm::{GemmEstimate, GemmShape, Math};
use std::ffi::{CStr, c_int, c_void};

/// How the products are accumulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accum {
    F16,
    F32,
    F64,
    I32,
}

/// How inputs are rounded before they are multiplied (the reduced-precision compute types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    None,
    Tf32,
    F16,
    Bf16,
}

/// The arithmetic of one GEMM, from its compute type, data types and math mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compute {
    pub accum: Accum,
    pub round: Round,
    pub math: Math,
    /// Type of alpha and beta.
    pub scale: c_int,
}

/// The scale type cublasGemmEx implies for a compute type and C type.
pub fn implied_scale(compute: c_int, c_type: c_int) -> c_int {
    match compute {
        COMPUTE_16F | COMPUTE_16F_PEDANTIC => R_16F,
        COMPUTE_32I | COMPUTE_32I_PEDANTIC => R_32I,
        COMPUTE_64F | COMPUTE_64F_PEDANTIC => R_64F,
        _ if c_type == R_64F => R_64F,
        _ => R_32F,
    }
}

/// cuBLAS's table of supported (compute, scale, A/B, C) combinations for real types.
/// `tf32_math`: the handle's math mode allows TF32 for FP32 GEMMs; `tensor_cores`: the device has
/// them (without, TF32 requests run as plain FP32). Complex types are not simulated.
pub fn compute_for(
    compute: c_int,
    scale: c_int,
    ab: (c_int, c_int),
    c: c_int,
    tf32_math: bool,
    tensor_cores: bool,
) -> Result<Compute, Status> {
    let (a, b) = ab;
    let known = [
        COMPUTE_16F,
        COMPUTE_16F_PEDANTIC,
        COMPUTE_32F,
        COMPUTE_32F_PEDANTIC,
        COMPUTE_64F,
        COMPUTE_64F_PEDANTIC,
        COMPUTE_32I,
        COMPUTE_32I_PEDANTIC,
        COMPUTE_32F_FAST_16F,
        COMPUTE_32F_FAST_16BF,
        COMPUTE_32F_FAST_TF32,
        COMPUTE_32F_EMULATED_16BFX9,
        COMPUTE_64F_EMULATED_FIXEDPOINT,
    ];
    if !known.contains(&compute) {
        return Err(INVALID_VALUE);
    }
    if a != b {
        return Err(NOT_SUPPORTED);
    }
    let tc_round = |r: Round| if tensor_cores { r } else { Round::None };
    let ok = |accum, round, math| {
        Ok(Compute {
            accum,
            round,
            math,
            scale,
        })
    };
    match compute {
        COMPUTE_16F | COMPUTE_16F_PEDANTIC if scale == R_16F && a == R_16F && c == R_16F => {
            ok(Accum::F16, Round::None, Math::Fp16)
        }
        // Integer GEMMs run at the FP16 rate in this model (an assumption: no INT8 rate in the
        // profiles).
        COMPUTE_32I | COMPUTE_32I_PEDANTIC if scale == R_32I && a == R_8I && c == R_32I => {
            ok(Accum::I32, Round::None, Math::Fp16)
        }
        COMPUTE_32F | COMPUTE_32F_PEDANTIC if scale == R_32F => match (a, c) {
            (R_32F, R_32F) if tf32_math && compute == COMPUTE_32F && tensor_cores => {
                ok(Accum::F32, Round::Tf32, Math::Tf32)
            }
            (R_32F, R_32F) => ok(Accum::F32, Round::None, Math::Fp32),
            (R_16F, R_16F | R_32F) => ok(Accum::F32, Round::None, Math::Fp16),
            (R_16BF, R_16BF | R_32F) => ok(Accum::F32, Round::None, Math::Bf16),
            (R_8I, R_32F) => ok(Accum::F32, Round::None, Math::Fp16),
            _ => Err(NOT_SUPPORTED),
        },
        COMPUTE_32F_FAST_16F if scale == R_32F && a == R_32F && c == R_32F => {
            ok(Accum::F32, tc_round(Round::F16), Math::Fp16)
        }
        COMPUTE_32F_FAST_16BF if scale == R_32F && a == R_32F && c == R_32F => {
            ok(Accum::F32, tc_round(Round::Bf16), Math::Bf16)
        }
        COMPUTE_32F_FAST_TF32 if scale == R_32F && a == R_32F && c == R_32F => ok(
            Accum::F32,
            tc_round(Round::Tf32),
            if tensor_cores { Math::Tf32 } else { Math::Fp32 },
        ),
        COMPUTE_64F | COMPUTE_64F_PEDANTIC if scale == R_64F && a == R_64F && c == R_64F => {
            ok(Accum::F64, Round::None, Math::Fp64)
        }
        _ => Err(NOT_SUPPORTED),
    }
}

/// Reads a scale (alpha or beta) of type `t`: from the host, or from the device in device pointer
/// mode. None: a device scale in shape mode, whose value the simulator does not know.
pub fn scalar(
    s: &Sim,
    p: *const c_void,
    device: bool,
    t: c_int,
    what: &CStr,
) -> Result<Option<f64>, Status> {
    if p.is_null() {
        return Err(INVALID_VALUE);
    }
    let n = elem_bytes(t).ok_or(NOT_SUPPORTED)?;
    let mut raw = vec![0u8; n];
    if device {
        s.read(p as u64, &mut raw, what)?;
        if !s.data_mode() {
            return Ok(None);
        }
    } else {
        // SAFETY: a host scale points to one value of the scale type (the API's contract).
        unsafe { std::ptr::copy_nonoverlapping(p as *const u8, raw.as_mut_ptr(), n) };
    }
    Ok(crate::matrix::decode(t, &raw).first().copied())
}

/// One checked GEMM call (or a strided batch of them).
#[derive(Debug, Clone)]
pub struct Gemm {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub batch: u64,
    pub trans_a: bool,
    pub trans_b: bool,
    /// A as stored: m x k (k x m transposed); B: k x n (n x k transposed); C and D: m x n.
    pub a: Matrix,
    pub b: Matrix,
    pub c: Matrix,
    pub d: Matrix,
    pub compute: Compute,
    pub alpha: Option<f64>,
    pub beta: Option<f64>,
    pub epilogue: Epilogue,
    /// Workspace the call may use (bounds split-k), and where it is (0: the library's own).
    pub workspace: u64,
    pub workspace_ptr: u64,
    /// The (tile, k split) an algorithm fixed; None: the fastest the workspace allows.
    pub config: Option<([u32; 2], u32)>,
}

fn round_in(r: Round, v: f64) -> f64 {
    match r {
        Round::None => v,
        Round::Tf32 => tf32(v as f32) as f64,
        Round::F16 => f16::from_f64(v).to_f64(),
        Round::Bf16 => bf16::from_f64(v).to_f64(),
    }
}

/// op(X) of one batch as a dense column-major rows x cols array.
fn dense_op(x: &Matrix, vals: &[f64], trans: bool, rows: u64, cols: u64, r: Round) -> Vec<f64> {
    let mut out = Vec::with_capacity((rows * cols) as usize);
    for j in 0..cols {
        for i in 0..rows {
            let v = if trans {
                vals[x.at(j, i)]
            } else {
                vals[x.at(i, j)]
            };
            out.push(round_in(r, v));
        }
    }
    out
}

/// m x n = (m x k) (k x n), all dense column-major, accumulated in T.
fn product<T>(m: usize, n: usize, k: usize, a: &[f64], b: &[f64], cast: impl Fn(f64) -> T) -> Vec<T>
where
    T: Copy + Default + std::ops::Add<Output = T> + std::ops::Mul<Output = T>,
{
    let a: Vec<T> = a.iter().map(|&v| cast(v)).collect();
    let mut out = vec![T::default(); m * n];
    for j in 0..n {
        let col = &mut out[j * m..(j + 1) * m];
        for l in 0..k {
            let bv = cast(b[l + j * k]);
            let acol = &a[l * m..(l + 1) * m];
            for (o, &av) in col.iter_mut().zip(acol) {
                *o = *o + av * bv;
            }
        }
    }
    out
}

impl Gemm {
    pub fn shape(&self) -> GemmShape {
        GemmShape {
            m: self.m,
            n: self.n,
            k: self.k,
            batch: self.batch,
            in_bytes: self.a.esz() as u64,
            out_bytes: self.d.esz() as u64,
            reads_c: self.beta != Some(0.0),
        }
    }

    /// The model's estimate for this call.
    pub fn estimate(&self, s: &Sim) -> GemmEstimate {
        match self.config {
            Some((tile, split)) => {
                s.profile
                    .gemm_option(&self.shape(), self.compute.math, tile, split)
            }
            None => s
                .profile
                .gemm_time(&self.shape(), self.compute.math, self.workspace),
        }
    }

    /// Runs the call on `stream`: arithmetic in data mode, range checks in shape mode, then the
    /// kernel's simulated time.
    pub fn run(&self, s: &Sim, stream: *mut c_void, what: &CStr) -> Result<GemmEstimate, Status> {
        let est = self.estimate(s);
        if est.workspace > self.workspace {
            return Err(INVALID_VALUE);
        }
        if est.workspace > 0 && self.workspace_ptr != 0 {
            // The split's partial sums go to the workspace: it must be mapped.
            s.check(self.workspace_ptr, est.workspace as usize, what)?;
        }
        self.execute(s, what)?;
        s.submit(stream, est.seconds)?;
        Ok(est)
    }

    /// The call's effect on memory without its time: arithmetic in data mode, range checks in
    /// shape mode.
    pub fn execute(&self, s: &Sim, what: &CStr) -> Result<(), Status> {
        if self.m > 0 && self.n > 0 {
            for bi in 0..self.batch {
                if s.data_mode() {
                    self.compute_batch(s, bi, what)?;
                } else {
                    self.check_batch(s, bi, what)?;
                }
            }
        }
        Ok(())
    }

    fn check_batch(&self, s: &Sim, bi: u64, what: &CStr) -> Result<(), Status> {
        if self.k > 0 {
            self.a.check(s, bi, what)?;
            self.b.check(s, bi, what)?;
        }
        if self.beta != Some(0.0) {
            self.c.check(s, bi, what)?;
        }
        self.d.check(s, bi, what)?;
        self.epilogue
            .check(s, bi, self.m, self.n, self.d.dtype, what)
    }

    fn compute_batch(&self, s: &Sim, bi: u64, what: &CStr) -> Result<(), Status> {
        let (m, n, k) = (self.m, self.n, self.k);
        let r = self.compute.round;
        let (a, b) = if k > 0 {
            let av = self.a.load(s, bi, what)?;
            let bv = self.b.load(s, bi, what)?;
            (
                dense_op(&self.a, &av, self.trans_a, m, k, r),
                dense_op(&self.b, &bv, self.trans_b, k, n, r),
            )
        } else {
            (Vec::new(), Vec::new())
        };
        let alpha = self.alpha.unwrap_or(1.0);
        let beta = self.beta.unwrap_or(0.0);
        // beta == 0: C is not read (it may hold anything, NaN included).
        let c = if beta != 0.0 {
            Some(self.c.load(s, bi, what)?)
        } else {
            None
        };
        let (mu, nu, ku) = (m as usize, n as usize, k as usize);
        let cv = |i: u64, j: u64| c.as_ref().map_or(0.0, |c| c[self.c.at(i, j)]);
        let mut t: Vec<f64> = match self.compute.accum {
            Accum::F32 | Accum::F16 => {
                let acc = product(mu, nu, ku, &a, &b, |v| v as f32);
                let (al, be) = (alpha as f32, beta as f32);
                (0..mu * nu)
                    .map(|x| {
                        let (i, j) = ((x % mu) as u64, (x / mu) as u64);
                        let v = if beta != 0.0 {
                            al * acc[x] + be * cv(i, j) as f32
                        } else {
                            al * acc[x]
                        };
                        if self.compute.accum == Accum::F16 {
                            f16::from_f32(v).to_f64()
                        } else {
                            v as f64
                        }
                    })
                    .collect()
            }
            Accum::F64 | Accum::I32 => {
                let acc = product(mu, nu, ku, &a, &b, |v| v);
                (0..mu * nu)
                    .map(|x| {
                        let (i, j) = ((x % mu) as u64, (x / mu) as u64);
                        alpha * acc[x] + if beta != 0.0 { beta * cv(i, j) } else { 0.0 }
                    })
                    .collect()
            }
        };
        let ops = epilogue::Operands {
            m,
            n,
            k,
            a: &a,
            b: &b,
        };
        self.epilogue
            .apply(s, bi, &ops, &mut t, self.d.dtype, what)?;
        self.d.store(s, bi, what, |i, j| t[(i + j * m) as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (tests need no crate for it).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn val(&mut self) -> f64 {
            (self.next() % 2001) as f64 / 1000.0 - 1.0
        }
    }

    #[test]
    fn product_of_strided_transposed_operands_matches_a_naive_reference() {
        let mut r = Lcg(7);
        for _ in 0..40 {
            let (m, n, k) = (1 + r.next() % 9, 1 + r.next() % 9, 1 + r.next() % 9);
            let (ta, tb) = (r.next() % 2 == 1, r.next() % 2 == 1);
            let (ar, ac) = if ta { (k, m) } else { (m, k) };
            let (br, bc) = if tb { (n, k) } else { (k, n) };
            let a = Matrix::col(0, R_32F, ar, ac, (ar + r.next() % 3) as i64, 0);
            let b = Matrix::col(0, R_32F, br, bc, (br + r.next() % 3) as i64, 0);
            let av: Vec<f64> = (0..a.extent()).map(|_| r.val()).collect();
            let bv: Vec<f64> = (0..b.extent()).map(|_| r.val()).collect();
            let da = dense_op(&a, &av, ta, m, k, Round::None);
            let db = dense_op(&b, &bv, tb, k, n, Round::None);
            let got = product(m as usize, n as usize, k as usize, &da, &db, |v| v as f32);
            for i in 0..m {
                for j in 0..n {
                    let mut want = 0.0;
                    for l in 0..k {
                        let x = if ta { av[a.at(l, i)] } else { av[a.at(i, l)] };
                        let y = if tb { bv[b.at(j, l)] } else { bv[b.at(l, j)] };
                        want += x * y;
                    }
                    let g = got[(i + j * m) as usize] as f64;
                    assert!((g - want).abs() < 1e-5, "{m}x{n}x{k} {ta} {tb}: {g} {want}");
                }
            }
        }
    }

    #[test]
    fn supported_combinations_follow_cublas_table() {
        let f = |c, s, ab, o| compute_for(c, s, (ab, ab), o, false, true).map(|x| x.math);
        assert_eq!(f(COMPUTE_32F, R_32F, R_32F, R_32F), Ok(Math::Fp32));
        assert_eq!(f(COMPUTE_32F, R_32F, R_16F, R_16F), Ok(Math::Fp16));
        assert_eq!(f(COMPUTE_32F, R_32F, R_16BF, R_32F), Ok(Math::Bf16));
        assert_eq!(
            f(COMPUTE_32F_FAST_TF32, R_32F, R_32F, R_32F),
            Ok(Math::Tf32)
        );
        assert_eq!(f(COMPUTE_64F, R_64F, R_64F, R_64F), Ok(Math::Fp64));
        assert_eq!(f(COMPUTE_16F, R_16F, R_16F, R_16F), Ok(Math::Fp16));
        // Mixed or mismatched types are not supported; an unknown compute type is invalid.
        assert_eq!(f(COMPUTE_16F, R_16F, R_32F, R_32F), Err(NOT_SUPPORTED));
        assert_eq!(f(COMPUTE_32F, R_32F, R_32F, R_16F), Err(NOT_SUPPORTED));
        assert_eq!(f(COMPUTE_64F, R_64F, R_32F, R_32F), Err(NOT_SUPPORTED));
        assert_eq!(f(0, R_32F, R_32F, R_32F), Err(INVALID_VALUE));
        assert_eq!(
            compute_for(COMPUTE_32F, R_32F, (R_16F, R_32F), R_32F, false, true),
            Err(NOT_SUPPORTED)
        );
        // TF32 math mode turns plain FP32 GEMMs into TF32 ones, not pedantic ones, and only
        // where there are tensor cores.
        let tf = |c, tc| compute_for(c, R_32F, (R_32F, R_32F), R_32F, true, tc).unwrap();
        assert_eq!(tf(COMPUTE_32F, true).round, Round::Tf32);
        assert_eq!(tf(COMPUTE_32F_PEDANTIC, true).round, Round::None);
        assert_eq!(tf(COMPUTE_32F, false).round, Round::None);
        assert_eq!(tf(COMPUTE_32F_FAST_TF32, false).math, Math::Fp32);
    }
}
