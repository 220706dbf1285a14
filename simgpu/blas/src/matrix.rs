//! Matrices in device memory as cuBLAS sees them: a typed element pointer, rows and columns as
//! stored, a leading dimension, column- or row-major order, and a batch stride; loading one into
//! host numbers and storing it back, through the simulated driver.

use crate::driver::Sim;
use crate::types::*;
use half::{bf16, f16};
use std::ffi::{CStr, c_int};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Matrix {
    pub ptr: u64,
    pub dtype: c_int,
    pub rows: u64,
    pub cols: u64,
    pub ld: i64,
    pub row_major: bool,
    /// Elements from one matrix of a batch to the next.
    pub stride: i64,
}

impl Matrix {
    /// Column-major, as every cuBLAS (not Lt) matrix.
    pub fn col(ptr: u64, dtype: c_int, rows: u64, cols: u64, ld: i64, stride: i64) -> Matrix {
        Matrix {
            ptr,
            dtype,
            rows,
            cols,
            ld,
            row_major: false,
            stride,
        }
    }

    pub fn esz(&self) -> usize {
        elem_bytes(self.dtype).unwrap_or(4)
    }

    /// Offset in elements of element (i, j).
    pub fn at(&self, i: u64, j: u64) -> usize {
        if self.row_major {
            (i as i64 * self.ld + j as i64) as usize
        } else {
            (i as i64 + j as i64 * self.ld) as usize
        }
    }

    /// Elements one matrix spans, from its first element to its last.
    pub fn extent(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            0
        } else {
            self.at(self.rows - 1, self.cols - 1) + 1
        }
    }

    /// Whether the leading dimension leaves no gap between columns (rows when row-major).
    fn dense(&self) -> bool {
        self.ld as u64 == if self.row_major { self.cols } else { self.rows }
    }

    fn base(&self, batch: u64) -> u64 {
        (self.ptr as i64 + batch as i64 * self.stride * self.esz() as i64) as u64
    }

    /// Checks that matrix `batch` lies in mapped device memory.
    pub fn check(&self, s: &Sim, batch: u64, what: &CStr) -> Result<(), Status> {
        s.check(self.base(batch), self.extent() * self.esz(), what)
    }

    /// The bytes of matrix `batch`, decoded: `extent()` numbers, gaps included.
    pub fn load(&self, s: &Sim, batch: u64, what: &CStr) -> Result<Vec<f64>, Status> {
        let mut raw = vec![0u8; self.extent() * self.esz()];
        s.read(self.base(batch), &mut raw, what)?;
        Ok(decode(self.dtype, &raw))
    }

    /// Stores `value(i, j)` into every element of matrix `batch`; the gaps the leading dimension
    /// leaves keep their bytes.
    pub fn store(
        &self,
        s: &Sim,
        batch: u64,
        what: &CStr,
        value: impl Fn(u64, u64) -> f64,
    ) -> Result<(), Status> {
        let esz = self.esz();
        let mut raw = vec![0u8; self.extent() * esz];
        if !self.dense() {
            s.read(self.base(batch), &mut raw, what)?;
        }
        for j in 0..self.cols {
            for i in 0..self.rows {
                let o = self.at(i, j) * esz;
                encode(self.dtype, value(i, j), &mut raw[o..o + esz]);
            }
        }
        s.write(self.base(batch), &raw, what)
    }
}

/// Decodes device bytes of type `t` into numbers.
pub fn decode(t: c_int, raw: &[u8]) -> Vec<f64> {
    match t {
        R_32F => raw
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        R_64F => raw
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        R_16F => raw
            .chunks_exact(2)
            .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f64())
            .collect(),
        R_16BF => raw
            .chunks_exact(2)
            .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f64())
            .collect(),
        R_32I => raw
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        R_8I => raw.iter().map(|&b| b as i8 as f64).collect(),
        _ => Vec::new(),
    }
}

/// Encodes one number as type `t` (round to nearest; integers saturate).
pub fn encode(t: c_int, v: f64, out: &mut [u8]) {
    match t {
        R_32F => out.copy_from_slice(&(v as f32).to_le_bytes()),
        R_64F => out.copy_from_slice(&v.to_le_bytes()),
        R_16F => out.copy_from_slice(&f16::from_f32(v as f32).to_le_bytes()),
        R_16BF => out.copy_from_slice(&bf16::from_f32(v as f32).to_le_bytes()),
        R_32I => out.copy_from_slice(&(v.round() as i32).to_le_bytes()),
        R_8I => out[0] = v.round().clamp(-128.0, 127.0) as i8 as u8,
        _ => {}
    }
}

/// Rounds an FP32 value to TF32 (10 explicit mantissa bits, to nearest even), as tensor cores
/// read FP32 inputs under CUBLAS_COMPUTE_32F_FAST_TF32.
pub fn tf32(x: f32) -> f32 {
    let b = x.to_bits();
    if (b & 0x7f80_0000) == 0x7f80_0000 {
        return x;
    }
    let lsb = (b >> 13) & 1;
    f32::from_bits(b.wrapping_add(0xfff + lsb) & !0x1fff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tf32_keeps_ten_mantissa_bits() {
        assert_eq!(tf32(1.0), 1.0);
        // 1 + 2^-10 is representable, 1 + 2^-11 rounds to even (1.0), 1 + 3 * 2^-11 rounds up.
        assert_eq!(tf32(1.0 + 2f32.powi(-10)), 1.0 + 2f32.powi(-10));
        assert_eq!(tf32(1.0 + 2f32.powi(-11)), 1.0);
        assert_eq!(tf32(1.0 + 3.0 * 2f32.powi(-11)), 1.0 + 2.0 * 2f32.powi(-10));
        assert!(tf32(f32::NAN).is_nan());
        assert_eq!(tf32(f32::INFINITY), f32::INFINITY);
    }

    #[test]
    fn offsets_follow_order_and_leading_dimension() {
        let mut m = Matrix::col(0, R_32F, 3, 2, 5, 0);
        assert_eq!(m.at(2, 1), 7);
        assert_eq!(m.extent(), 8);
        m.row_major = true;
        assert_eq!(m.at(2, 1), 11);
        assert_eq!(m.extent(), 12);
    }

    #[test]
    fn encode_decode_round_trip() {
        for t in [R_32F, R_64F, R_16F, R_16BF] {
            let mut raw = vec![0u8; elem_bytes(t).unwrap()];
            encode(t, -2.5, &mut raw);
            assert_eq!(decode(t, &raw), vec![-2.5], "type {t}");
        }
    }
}
