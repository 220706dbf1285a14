//! cuBLASLt's opaque objects (matmul descriptors, matrix layouts, preferences) as attribute
//! tables: each attribute has the size the header gives it and a default; setting one with the
//! wrong size, or one that does not exist, is CUBLAS_STATUS_INVALID_VALUE, as in cublasLt.h.

use simgpu_blas::types::*;
use std::collections::BTreeMap;
use std::ffi::c_void;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Desc,
    Layout,
    Pref,
}

// cublasLtMatmulDescAttributes_t
pub const DESC_COMPUTE_TYPE: u32 = 0;
pub const DESC_SCALE_TYPE: u32 = 1;
pub const DESC_POINTER_MODE: u32 = 2;
pub const DESC_TRANSA: u32 = 3;
pub const DESC_TRANSB: u32 = 4;
pub const DESC_TRANSC: u32 = 5;
pub const DESC_FILL_MODE: u32 = 6;
pub const DESC_EPILOGUE: u32 = 7;
pub const DESC_BIAS_POINTER: u32 = 8;
pub const DESC_BIAS_BATCH_STRIDE: u32 = 10;
pub const DESC_EPILOGUE_AUX_POINTER: u32 = 11;
pub const DESC_EPILOGUE_AUX_LD: u32 = 12;
pub const DESC_EPILOGUE_AUX_BATCH_STRIDE: u32 = 13;
pub const DESC_SM_COUNT_TARGET: u32 = 15;
pub const DESC_A_SCALE_POINTER: u32 = 17;
pub const DESC_EPILOGUE_AUX_DATA_TYPE: u32 = 22;
pub const DESC_FAST_ACCUM: u32 = 25;
pub const DESC_BIAS_DATA_TYPE: u32 = 26;

// cublasLtMatrixLayoutAttribute_t
pub const LAYOUT_TYPE: u32 = 0;
pub const LAYOUT_ORDER: u32 = 1;
pub const LAYOUT_ROWS: u32 = 2;
pub const LAYOUT_COLS: u32 = 3;
pub const LAYOUT_LD: u32 = 4;
pub const LAYOUT_BATCH_COUNT: u32 = 5;
pub const LAYOUT_STRIDED_BATCH_OFFSET: u32 = 6;
pub const LAYOUT_PLANE_OFFSET: u32 = 7;
pub const LAYOUT_BATCH_MODE: u32 = 8;

// cublasLtMatmulPreferenceAttributes_t
pub const PREF_SEARCH_MODE: u32 = 0;
pub const PREF_MAX_WORKSPACE_BYTES: u32 = 1;
pub const PREF_REDUCTION_SCHEME_MASK: u32 = 3;
pub const PREF_MIN_ALIGNMENT_A_BYTES: u32 = 5;
pub const PREF_MIN_ALIGNMENT_D_BYTES: u32 = 8;
pub const PREF_MAX_WAVES_COUNT: u32 = 9;
pub const PREF_IMPL_MASK: u32 = 12;

// cublasLtOrder_t
pub const ORDER_COL: i32 = 0;
pub const ORDER_ROW: i32 = 1;

const FILL_MODE_FULL: i32 = 2;

/// (attribute, size in bytes, default) of each kind, from cublasLt.h (CUDA 13.2).
fn table(kind: Kind) -> &'static [(u32, usize, i64)] {
    match kind {
        Kind::Desc => &[
            (DESC_COMPUTE_TYPE, 4, 0),
            (DESC_SCALE_TYPE, 4, 0),
            (DESC_POINTER_MODE, 4, 0),
            (DESC_TRANSA, 4, OP_N as i64),
            (DESC_TRANSB, 4, OP_N as i64),
            (DESC_TRANSC, 4, OP_N as i64),
            (DESC_FILL_MODE, 4, FILL_MODE_FULL as i64),
            (DESC_EPILOGUE, 4, 1),
            (DESC_BIAS_POINTER, 8, 0),
            (DESC_BIAS_BATCH_STRIDE, 8, 0),
            (DESC_EPILOGUE_AUX_POINTER, 8, 0),
            (DESC_EPILOGUE_AUX_LD, 8, 0),
            (DESC_EPILOGUE_AUX_BATCH_STRIDE, 8, 0),
            (14, 8, 0), // ALPHA_VECTOR_BATCH_STRIDE
            (DESC_SM_COUNT_TARGET, 4, 0),
            (DESC_A_SCALE_POINTER, 8, 0),
            (18, 8, 0), // B_SCALE_POINTER
            (19, 8, 0), // C_SCALE_POINTER
            (20, 8, 0), // D_SCALE_POINTER
            (21, 8, 0), // AMAX_D_POINTER
            (DESC_EPILOGUE_AUX_DATA_TYPE, 4, -1),
            (23, 8, 0), // EPILOGUE_AUX_SCALE_POINTER
            (24, 8, 0), // EPILOGUE_AUX_AMAX_POINTER
            (DESC_FAST_ACCUM, 1, 0),
            (DESC_BIAS_DATA_TYPE, 4, -1),
            (31, 4, 0), // A_SCALE_MODE
            (32, 4, 0), // B_SCALE_MODE
            (33, 4, 0), // C_SCALE_MODE
            (34, 4, 0), // D_SCALE_MODE
            (35, 4, 0), // EPILOGUE_AUX_SCALE_MODE
            (36, 8, 0), // D_OUT_SCALE_POINTER
            (37, 4, 0), // D_OUT_SCALE_MODE
            (38, 8, 0), // EMULATION_DESCRIPTOR
            (39, 8, 0), // ALPHA_BATCH_STRIDE
            (40, 8, 0), // BETA_BATCH_STRIDE
        ],
        Kind::Layout => &[
            (LAYOUT_TYPE, 4, 0),
            (LAYOUT_ORDER, 4, ORDER_COL as i64),
            (LAYOUT_ROWS, 8, 0),
            (LAYOUT_COLS, 8, 0),
            (LAYOUT_LD, 8, 0),
            (LAYOUT_BATCH_COUNT, 4, 1),
            (LAYOUT_STRIDED_BATCH_OFFSET, 8, 0),
            (LAYOUT_PLANE_OFFSET, 8, 0),
            (LAYOUT_BATCH_MODE, 4, 0),
        ],
        Kind::Pref => &[
            (PREF_SEARCH_MODE, 4, 0),
            (PREF_MAX_WORKSPACE_BYTES, 8, 0),
            (PREF_REDUCTION_SCHEME_MASK, 4, 7),
            (PREF_MIN_ALIGNMENT_A_BYTES, 4, 256),
            (6, 4, 256), // MIN_ALIGNMENT_B_BYTES
            (7, 4, 256), // MIN_ALIGNMENT_C_BYTES
            (PREF_MIN_ALIGNMENT_D_BYTES, 4, 256),
            (PREF_MAX_WAVES_COUNT, 4, 0), // float 0.0
            (PREF_IMPL_MASK, 8, -1),
        ],
    }
}

/// One descriptor, layout or preference.
#[derive(Debug, Clone, PartialEq)]
pub struct Obj {
    pub kind: Kind,
    vals: BTreeMap<u32, Vec<u8>>,
}

fn spec(kind: Kind, attr: u32) -> Option<(usize, i64)> {
    table(kind)
        .iter()
        .find(|(a, _, _)| *a == attr)
        .map(|&(_, n, d)| (n, d))
}

impl Obj {
    pub fn new(kind: Kind) -> Obj {
        let vals = table(kind)
            .iter()
            .map(|&(a, n, d)| (a, d.to_le_bytes()[..n].to_vec()))
            .collect();
        Obj { kind, vals }
    }

    /// Sets from bytes the caller gives: the attribute must exist and the size match.
    pub fn set_bytes(&mut self, attr: u32, buf: *const c_void, size: usize) -> Result<(), Status> {
        let (n, _) = spec(self.kind, attr).ok_or(INVALID_VALUE)?;
        if buf.is_null() || size != n {
            return Err(INVALID_VALUE);
        }
        // SAFETY: buf points to `size` readable bytes (the API's contract), checked non-null.
        let b = unsafe { std::slice::from_raw_parts(buf as *const u8, n) };
        self.vals.insert(attr, b.to_vec());
        Ok(())
    }

    /// cublasLt*GetAttribute: size 0 asks for the size; otherwise it must match.
    pub fn get_bytes(
        &self,
        attr: u32,
        buf: *mut c_void,
        size: usize,
        written: *mut usize,
    ) -> Result<(), Status> {
        let (n, _) = spec(self.kind, attr).ok_or(INVALID_VALUE)?;
        if size == 0 {
            if written.is_null() {
                return Err(INVALID_VALUE);
            }
            // SAFETY: non-null output pointer.
            unsafe { *written = n };
            return Ok(());
        }
        if buf.is_null() || size != n {
            return Err(INVALID_VALUE);
        }
        let v = &self.vals[&attr];
        // SAFETY: buf holds `size` == n writable bytes.
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), buf as *mut u8, n) };
        if !written.is_null() {
            // SAFETY: non-null output pointer.
            unsafe { *written = n };
        }
        Ok(())
    }

    /// Sets a value from Rust (creation arguments).
    pub fn put(&mut self, attr: u32, v: i64) {
        if let Some((n, _)) = spec(self.kind, attr) {
            self.vals.insert(attr, v.to_le_bytes()[..n].to_vec());
        }
    }

    /// An attribute as a sign-extended integer (4- and 1-byte ones are signed in the header
    /// except the few unsigned ones, whose values stay small).
    pub fn int(&self, attr: u32) -> i64 {
        let v = &self.vals[&attr];
        match v.len() {
            1 => v[0] as i8 as i64,
            4 => i32::from_le_bytes(v[..4].try_into().unwrap()) as i64,
            _ => i64::from_le_bytes(v[..8].try_into().unwrap()),
        }
    }

    pub fn u64(&self, attr: u32) -> u64 {
        self.int(attr) as u64
    }

    pub fn f32(&self, attr: u32) -> f32 {
        f32::from_le_bytes(self.vals[&attr][..4].try_into().unwrap())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_checked_and_get_reports_the_size() {
        let mut d = Obj::new(Kind::Desc);
        let t: i32 = OP_T;
        let p = &t as *const i32 as *const c_void;
        assert_eq!(d.set_bytes(DESC_TRANSA, p, 4), Ok(()));
        assert_eq!(d.set_bytes(DESC_TRANSA, p, 8), Err(INVALID_VALUE));
        assert_eq!(d.set_bytes(9, p, 4), Err(INVALID_VALUE), "no attribute 9");
        assert_eq!(
            d.set_bytes(DESC_TRANSA, std::ptr::null(), 4),
            Err(INVALID_VALUE)
        );
        assert_eq!(d.int(DESC_TRANSA), OP_T as i64);
        let mut n = 0usize;
        assert_eq!(
            d.get_bytes(DESC_BIAS_POINTER, std::ptr::null_mut(), 0, &mut n),
            Ok(())
        );
        assert_eq!(n, 8);
        let mut out = 0i32;
        let o = &mut out as *mut i32 as *mut c_void;
        assert_eq!(d.get_bytes(DESC_TRANSA, o, 2, &mut n), Err(INVALID_VALUE));
        assert_eq!(d.get_bytes(DESC_TRANSA, o, 4, &mut n), Ok(()));
        assert_eq!((out, n), (OP_T, 4));
        // Defaults from the header.
        assert_eq!(d.int(DESC_EPILOGUE), 1);
        assert_eq!(d.int(DESC_BIAS_DATA_TYPE), -1);
        let p = Obj::new(Kind::Pref);
        assert_eq!(p.int(PREF_MIN_ALIGNMENT_A_BYTES), 256);
        assert_eq!(p.u64(PREF_IMPL_MASK), u64::MAX);
        assert_eq!(p.f32(PREF_MAX_WAVES_COUNT), 0.0);
    }
}
