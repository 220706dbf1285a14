//! cuBLASLt's epilogues (cublasLtEpilogue_t): bias, ReLU and GELU with their auxiliary outputs
//! (the ReLU bit-mask, the GELU input), their gradients, and the bias gradients.

use crate::driver::Sim;
use crate::matrix::{decode, encode};
use crate::types::*;
use std::ffi::{CStr, c_int};

// cublasLtEpilogue_t
pub const DEFAULT: u32 = 1;
pub const RELU: u32 = 2;
pub const RELU_AUX: u32 = RELU | AUX;
pub const BIAS: u32 = 4;
pub const RELU_BIAS: u32 = RELU | BIAS;
pub const RELU_AUX_BIAS: u32 = RELU_AUX | BIAS;
pub const DRELU: u32 = 8 | AUX;
pub const DRELU_BGRAD: u32 = DRELU | BGRAD;
pub const GELU: u32 = 32;
pub const GELU_AUX: u32 = GELU | AUX;
pub const GELU_BIAS: u32 = GELU | BIAS;
pub const GELU_AUX_BIAS: u32 = GELU_AUX | BIAS;
pub const DGELU: u32 = 64 | AUX;
pub const DGELU_BGRAD: u32 = DGELU | BGRAD;
pub const BGRADA: u32 = 256;
pub const BGRADB: u32 = 512;
const AUX: u32 = 128;
const BGRAD: u32 = 16;

pub const ALL: [u32; 16] = [
    DEFAULT,
    RELU,
    RELU_AUX,
    BIAS,
    RELU_BIAS,
    RELU_AUX_BIAS,
    DRELU,
    DRELU_BGRAD,
    GELU,
    GELU_AUX,
    GELU_BIAS,
    GELU_AUX_BIAS,
    DGELU,
    DGELU_BGRAD,
    BGRADA,
    BGRADB,
];

/// The epilogue of one matmul and its vectors (the matmul descriptor's attributes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Epilogue {
    pub kind: u32,
    pub bias: u64,
    /// Type of the bias vector (0 = that of D).
    pub bias_type: Option<c_int>,
    pub bias_stride: i64,
    pub aux: u64,
    pub aux_ld: i64,
    pub aux_stride: i64,
    pub aux_type: Option<c_int>,
}

impl Default for Epilogue {
    fn default() -> Self {
        Epilogue {
            kind: DEFAULT,
            bias: 0,
            bias_type: None,
            bias_stride: 0,
            aux: 0,
            aux_ld: 0,
            aux_stride: 0,
            aux_type: None,
        }
    }
}

/// The GEMM's inputs an epilogue may reduce: op(A) (m x k) and op(B) (k x n), dense
/// column-major.
pub struct Operands<'a> {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub a: &'a [f64],
    pub b: &'a [f64],
}

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const GELU_C: f64 = 0.044_715;

/// GELU, tanh approximation (assumption: the form cuBLASLt's epilogue computes).
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + GELU_C * x * x * x)).tanh())
}

/// d GELU / dx of the same approximation.
pub fn gelu_grad(x: f64) -> f64 {
    let th = (SQRT_2_OVER_PI * (x + GELU_C * x * x * x)).tanh();
    0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * x * x)
}

impl Epilogue {
    pub fn known(kind: u32) -> bool {
        ALL.contains(&kind)
    }

    fn uses_bias(&self) -> bool {
        self.kind & (BIAS | BGRAD | BGRADA | BGRADB) != 0
    }

    fn uses_aux(&self) -> bool {
        self.kind & AUX != 0
    }

    fn relu_mask(&self) -> bool {
        self.kind & (RELU | 8) != 0
    }

    /// Elements of the bias (or bias-gradient) vector: D's rows, or its columns for BGRADB.
    fn bias_len(&self, m: u64, n: u64) -> u64 {
        if self.kind == BGRADB { n } else { m }
    }

    /// The checks cuBLASLt makes of the epilogue against D (m x n): bias and auxiliary pointers
    /// set where the epilogue needs them, and the auxiliary leading dimension's rules (at least
    /// m; a multiple of 128 bits for the ReLU mask, of 8 elements for the GELU input).
    pub fn validate(&self, m: u64) -> Result<(), Status> {
        if !Self::known(self.kind) {
            return Err(INVALID_VALUE);
        }
        if self.uses_bias() && self.bias == 0 {
            return Err(INVALID_VALUE);
        }
        if self.uses_aux() {
            let unit = if self.relu_mask() { 128 } else { 8 };
            if self.aux == 0
                || self.aux_ld < m as i64
                || self.aux_ld % unit != 0
                || self.aux_stride % unit != 0
            {
                return Err(INVALID_VALUE);
            }
        }
        Ok(())
    }

    fn aux_elem(&self, d_type: c_int) -> c_int {
        self.aux_type.unwrap_or(d_type)
    }

    fn bias_elem(&self, d_type: c_int) -> c_int {
        self.bias_type.unwrap_or(d_type)
    }

    /// Bytes and base address of the auxiliary matrix of batch `bi`.
    fn aux_range(&self, bi: u64, m: u64, n: u64, d_type: c_int) -> (u64, usize) {
        let span = (self.aux_ld as u64 * (n - 1) + m) as usize;
        if self.relu_mask() {
            let first = bi as i64 * self.aux_stride;
            let start = (first / 8) as u64;
            let bits = (first % 8) as usize + span;
            (self.aux + start, bits.div_ceil(8))
        } else {
            let esz = elem_bytes(self.aux_elem(d_type)).unwrap_or(4);
            let base = self.aux as i64 + bi as i64 * self.aux_stride * esz as i64;
            (base as u64, span * esz)
        }
    }

    fn bias_range(&self, bi: u64, m: u64, n: u64, d_type: c_int) -> (u64, usize) {
        let esz = elem_bytes(self.bias_elem(d_type)).unwrap_or(4);
        let base = self.bias as i64 + bi as i64 * self.bias_stride * esz as i64;
        (base as u64, self.bias_len(m, n) as usize * esz)
    }

    /// Shape mode: the vectors the epilogue touches must be mapped.
    pub fn check(
        &self,
        s: &Sim,
        bi: u64,
        m: u64,
        n: u64,
        d_type: c_int,
        what: &CStr,
    ) -> Result<(), Status> {
        if self.uses_bias() {
            let (p, len) = self.bias_range(bi, m, n, d_type);
            s.check(p, len, what)?;
        }
        if self.uses_aux() {
            let (p, len) = self.aux_range(bi, m, n, d_type);
            s.check(p, len, what)?;
        }
        Ok(())
    }

    /// Applies the epilogue to `t` (alpha op(A) op(B) + beta C, m x n column-major) of batch
    /// `bi`, reading and writing the bias and auxiliary vectors.
    pub fn apply(
        &self,
        s: &Sim,
        bi: u64,
        g: &Operands,
        t: &mut [f64],
        d_type: c_int,
        what: &CStr,
    ) -> Result<(), Status> {
        let (m, n) = (g.m, g.n);
        let at = |i: u64, j: u64| (i + j * m) as usize;
        let kind = self.kind;
        let bias_t = self.bias_elem(d_type);
        let bias_esz = elem_bytes(bias_t).unwrap_or(4);
        if kind & BIAS != 0 {
            let (p, len) = self.bias_range(bi, m, n, d_type);
            let mut raw = vec![0u8; len];
            s.read(p, &mut raw, what)?;
            let bias = decode(bias_t, &raw);
            for j in 0..n {
                for i in 0..m {
                    t[at(i, j)] += bias[i as usize];
                }
            }
        }
        if self.uses_aux() {
            let (p, len) = self.aux_range(bi, m, n, d_type);
            let mut raw = vec![0u8; len];
            s.read(p, &mut raw, what)?;
            let bit0 = if self.relu_mask() {
                (bi as i64 * self.aux_stride % 8) as u64
            } else {
                0
            };
            let aux_t = self.aux_elem(d_type);
            let aux_esz = elem_bytes(aux_t).unwrap_or(4);
            let ld = self.aux_ld as u64;
            let forward = kind & (RELU | GELU) != 0;
            for j in 0..n {
                for i in 0..m {
                    let x = at(i, j);
                    if self.relu_mask() {
                        let bit = bit0 + i + j * ld;
                        let (byte, mask) = ((bit / 8) as usize, 1u8 << (bit % 8));
                        if forward {
                            // The mask records where the ReLU passed its input.
                            if t[x] > 0.0 {
                                raw[byte] |= mask;
                            } else {
                                raw[byte] &= !mask;
                            }
                        } else if raw[byte] & mask == 0 {
                            t[x] = 0.0;
                        }
                    } else {
                        let o = ((i + j * ld) as usize) * aux_esz;
                        if forward {
                            // The GELU input, kept for the backward pass.
                            encode(aux_t, t[x], &mut raw[o..o + aux_esz]);
                        } else {
                            t[x] *= gelu_grad(decode(aux_t, &raw[o..o + aux_esz])[0]);
                        }
                    }
                }
            }
            if forward {
                s.write(p, &raw, what)?;
            }
        }
        if kind & RELU != 0 {
            t.iter_mut().for_each(|v| *v = v.max(0.0));
        } else if kind & GELU != 0 {
            t.iter_mut().for_each(|v| *v = gelu(*v));
        }
        let grad: Option<Vec<f64>> = if kind & BGRAD != 0 {
            Some((0..m).map(|i| (0..n).map(|j| t[at(i, j)]).sum()).collect())
        } else if kind == BGRADA {
            let k = g.k as usize;
            Some(
                (0..m as usize)
                    .map(|i| (0..k).map(|l| g.a[i + l * m as usize]).sum())
                    .collect(),
            )
        } else if kind == BGRADB {
            let k = g.k as usize;
            Some(
                (0..n as usize)
                    .map(|j| (0..k).map(|l| g.b[l + j * k]).sum())
                    .collect(),
            )
        } else {
            None
        };
        if let Some(grad) = grad {
            let (p, _) = self.bias_range(bi, m, n, d_type);
            let mut raw = vec![0u8; grad.len() * bias_esz];
            for (x, v) in grad.iter().enumerate() {
                encode(bias_t, *v, &mut raw[x * bias_esz..(x + 1) * bias_esz]);
            }
            s.write(p, &raw, what)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_and_its_gradient_agree() {
        for x in [-3.0, -0.5, 0.0, 0.7, 2.5] {
            let h = 1e-6;
            let num = (gelu(x + h) - gelu(x - h)) / (2.0 * h);
            assert!((num - gelu_grad(x)).abs() < 1e-6, "{x}");
        }
        assert!((gelu(1.0) - 0.841_192).abs() < 1e-5);
    }

    #[test]
    fn epilogue_values_compose_from_flags() {
        assert_eq!(RELU_AUX, 130);
        assert_eq!(RELU_AUX_BIAS, 134);
        assert_eq!(DRELU, 136);
        assert_eq!(DRELU_BGRAD, 152);
        assert_eq!(GELU_AUX_BIAS, 164);
        assert_eq!(DGELU, 192);
        assert_eq!(DGELU_BGRAD, 208);
    }

    #[test]
    fn aux_needs_a_pointer_and_a_proper_leading_dimension() {
        let mut e = Epilogue {
            kind: RELU_AUX,
            aux: 0x1000,
            aux_ld: 128,
            ..Epilogue::default()
        };
        assert_eq!(e.validate(100), Ok(()));
        assert_eq!(e.validate(129), Err(INVALID_VALUE));
        e.aux_ld = 136;
        assert_eq!(
            e.validate(100),
            Err(INVALID_VALUE),
            "not a multiple of 128 bits"
        );
        e.kind = GELU_AUX;
        assert_eq!(e.validate(100), Ok(()), "a multiple of 8 elements");
        e.kind = BIAS;
        assert_eq!(e.validate(100), Err(INVALID_VALUE), "no bias pointer");
        e.kind = 3;
        assert_eq!(e.validate(100), Err(INVALID_VALUE));
    }
}
