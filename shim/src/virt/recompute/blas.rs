//! Replays of cuBLAS and cuBLASLt GEMMs: the recorded function called again with the recorded
//! parameters (lineage: [`Replay::Gemm`], [`Replay::Lt`]) and the operands' current addresses,
//! through Marmoset's own handles, on the back-access's stream. A GEMM with beta 0 writes its
//! output from its two operands (and a bias) alone, so the replay rebuilds it bit for bit when
//! the same kernel runs: the same function, types, compute type, algorithm and math mode.
//! cuBLASLt's matmul descriptor and layouts are made anew from the recorded attributes (the
//! framework destroyed its own), and the recorded algorithm is passed as it was.

use crate::ffi::cublas::{ALGO_BYTES, scale_type};
use crate::ffi::{call, call_why};
use planner::trace::{LtLayout, Replay, TensorArg};
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

type P = *mut c_void;
type C = *const c_void;

/// A cuBLAS call's sizes, as its record gives them.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub batch: u64,
}

/// Marmoset's own cuBLAS and cuBLASLt handles (created once); the lock also keeps one replay's
/// stream and math mode from another's.
static HANDLES: Mutex<(usize, usize)> = Mutex::new((0, 0));

/// A scalar as cuBLAS reads it for a scale type (cudaDataType): float, double or int32.
enum Scalar {
    F32(f32),
    F64(f64),
    I32(i32),
}

impl Scalar {
    fn of(v: f64, ty: c_int) -> Result<Scalar, String> {
        match ty {
            0 => Ok(Scalar::F32(v as f32)),
            1 => Ok(Scalar::F64(v)),
            10 => Ok(Scalar::I32(v as i32)),
            _ => Err(format!("scale type {ty} is not replayed")),
        }
    }
    fn ptr(&self) -> C {
        match self {
            Scalar::F32(x) => x as *const f32 as C,
            Scalar::F64(x) => x as *const f64 as C,
            Scalar::I32(x) => x as *const i32 as C,
        }
    }
}

/// Replays the cuBLAS call `api` on `stream`; `tensors`: its operands now; `(ws, ws_bytes)`:
/// the workspace the replay brought (cuBLASLt's).
pub fn replay(
    api: &str,
    replay: &Replay,
    shape: Shape,
    tensors: &[TensorArg],
    ws: (u64, u64),
    stream: u64,
    corrupt: bool,
) -> Result<(), String> {
    let arg = |role: &str| {
        tensors
            .iter()
            .find(|t| t.role == role)
            .ok_or_else(|| format!("no {role} operand"))
    };
    let mut handles = HANDLES
        .lock()
        .map_err(|_| "the cuBLAS replay handles' lock is poisoned")?;
    match replay {
        Replay::Gemm {
            trans,
            types,
            compute,
            algo,
            math,
            alpha,
            beta,
        } => {
            if handles.0 == 0 {
                let mut h: P = std::ptr::null_mut();
                call_why!(cublasCreate_v2(&mut h))?;
                handles.0 = h as usize;
            }
            let h = handles.0 as P;
            call_why!(cublasSetStream_v2(h, stream as P))?;
            call_why!(cublasSetMathMode(h, *math))?;
            call_why!(cublasSetPointerMode_v2(h, 0))?;
            let scale = scale_type(*compute, types[2]);
            // MARMOSET_TEST_CORRUPT_REPLAY: a deliberately wrong replay, for MARMOSET_VERIFY.
            let a = Scalar::of(if corrupt { -alpha } else { *alpha }, scale)?;
            let b = Scalar::of(*beta, scale)?;
            let (ma, mb, mc) = (arg("A")?, arg("B")?, arg("C")?);
            gemm(
                api,
                h,
                shape,
                *trans,
                *types,
                (*compute, *algo),
                (&a, &b),
                [ma, mb, mc],
            )
        }
        Replay::Lt {
            compute,
            scale,
            trans,
            epilogue,
            bias_type,
            layouts,
            algo,
            alpha,
            beta,
        } => {
            if handles.1 == 0 {
                let mut h: P = std::ptr::null_mut();
                call_why!(cublasLtCreate(&mut h))?;
                handles.1 = h as usize;
            }
            let a = Scalar::of(if corrupt { -alpha } else { *alpha }, *scale)?;
            let b = Scalar::of(*beta, *scale)?;
            let [la, lb, lc, ld] = layouts.as_slice() else {
                return Err("the matmul's four layouts were not recorded".into());
            };
            let d = arg("D")?;
            // Beta 0: C is not read, and was recorded only where it is D.
            let c = tensors.iter().find(|t| t.role == "C").unwrap_or(d);
            let bias = tensors.iter().find(|t| t.role == "bias").map(|t| t.ptr);
            let algo = algo.as_deref().map(words).transpose()?;
            let desc = Desc::new(*compute, *scale)?;
            desc.set(DESC_TRANSA, &trans[0])?;
            desc.set(DESC_TRANSB, &trans[1])?;
            desc.set(DESC_EPILOGUE, epilogue)?;
            if let Some(bias) = bias {
                desc.set(DESC_BIAS_POINTER, &bias)?;
            }
            if let Some(t) = bias_type {
                desc.set(DESC_BIAS_DATA_TYPE, t)?;
            }
            let (la, lb, lc, ld) = (
                Layout::of(la)?,
                Layout::of(lb)?,
                Layout::of(lc)?,
                Layout::of(ld)?,
            );
            let algo_ptr = algo.as_ref().map_or(std::ptr::null(), |v| v.as_ptr() as C);
            call_why!(cublasLtMatmul(
                handles.1 as P,
                desc.0 as P,
                a.ptr(),
                arg("A")?.ptr as C,
                la.0 as P,
                arg("B")?.ptr as C,
                lb.0 as P,
                b.ptr(),
                c.ptr as C,
                lc.0 as P,
                d.ptr as P,
                ld.0 as P,
                algo_ptr,
                ws.0 as P,
                ws.1 as usize,
                stream as P
            ))
        }
        _ => Err("no cuBLAS lineage".into()),
    }
}

/// A classic GEMM, by the function that ran: A, B and C's leading dimensions from their
/// recorded strides ([1, ld], or [stride, 1, ld] for a strided batch).
#[allow(clippy::too_many_arguments)]
fn gemm(
    api: &str,
    h: P,
    s: Shape,
    [ta, tb]: [i32; 2],
    [at, bt, ct]: [i32; 3],
    (compute, algo): (i32, i32),
    (alpha, beta): (&Scalar, &Scalar),
    ops: [&TensorArg; 3],
) -> Result<(), String> {
    let dim = |v: u64| c_int::try_from(v).map_err(|_| format!("dimension {v} out of range"));
    let (m, n, k, batch) = (dim(s.m)?, dim(s.n)?, dim(s.k)?, dim(s.batch)?);
    let ld = |t: &TensorArg| -> Result<c_int, String> {
        let ld = *t.strides.last().ok_or("an operand without strides")?;
        c_int::try_from(ld).map_err(|_| format!("leading dimension {ld} out of range"))
    };
    let stride = |t: &TensorArg| -> i64 {
        if t.strides.len() == 3 {
            t.strides[0]
        } else {
            0
        }
    };
    let [a, b, c] = ops;
    let (pa, pb, pc) = (a.ptr as C, b.ptr as C, c.ptr as P);
    let (lda, ldb, ldc) = (ld(a)?, ld(b)?, ld(c)?);
    let (al, be) = (alpha.ptr(), beta.ptr());
    match api {
        "cublasSgemm_v2" => call_why!(cublasSgemm_v2(
            h, ta, tb, m, n, k, al, pa, lda, pb, ldb, be, pc, ldc
        )),
        "cublasDgemm_v2" => call_why!(cublasDgemm_v2(
            h, ta, tb, m, n, k, al, pa, lda, pb, ldb, be, pc, ldc
        )),
        "cublasGemmEx" => call_why!(cublasGemmEx(
            h, ta, tb, m, n, k, al, pa, at, lda, pb, bt, ldb, be, pc, ct, ldc, compute, algo
        )),
        "cublasSgemmEx" => call_why!(cublasSgemmEx(
            h, ta, tb, m, n, k, al, pa, at, lda, pb, bt, ldb, be, pc, ct, ldc
        )),
        "cublasSgemmStridedBatched" => call_why!(cublasSgemmStridedBatched(
            h,
            ta,
            tb,
            m,
            n,
            k,
            al,
            pa,
            lda,
            stride(a),
            pb,
            ldb,
            stride(b),
            be,
            pc,
            ldc,
            stride(c),
            batch
        )),
        "cublasDgemmStridedBatched" => call_why!(cublasDgemmStridedBatched(
            h,
            ta,
            tb,
            m,
            n,
            k,
            al,
            pa,
            lda,
            stride(a),
            pb,
            ldb,
            stride(b),
            be,
            pc,
            ldc,
            stride(c),
            batch
        )),
        "cublasGemmStridedBatchedEx" => call_why!(cublasGemmStridedBatchedEx(
            h,
            ta,
            tb,
            m,
            n,
            k,
            al,
            pa,
            at,
            lda,
            stride(a),
            pb,
            bt,
            ldb,
            stride(b),
            be,
            pc,
            ct,
            ldc,
            stride(c),
            batch,
            compute,
            algo
        )),
        other => Err(format!("{other} is not replayed")),
    }
}

// cublasLtMatmulDescAttributes_t and cublasLtMatrixLayoutAttribute_t values.
const DESC_TRANSA: u32 = 3;
const DESC_TRANSB: u32 = 4;
const DESC_EPILOGUE: u32 = 7;
const DESC_BIAS_POINTER: u32 = 8;
const DESC_BIAS_DATA_TYPE: u32 = 26;
const LAYOUT_ORDER: u32 = 1;
const LAYOUT_BATCH_COUNT: u32 = 5;
const LAYOUT_STRIDED_BATCH_OFFSET: u32 = 6;

/// A matmul descriptor of Marmoset's, destroyed when dropped.
struct Desc(usize);

impl Desc {
    fn new(compute: c_int, scale: c_int) -> Result<Desc, String> {
        let mut d: P = std::ptr::null_mut();
        call_why!(cublasLtMatmulDescCreate(&mut d, compute, scale))?;
        Ok(Desc(d as usize))
    }

    /// Sets an attribute to the bytes of `v` (the attribute's own type).
    fn set<T>(&self, attr: u32, v: &T) -> Result<(), String> {
        call_why!(cublasLtMatmulDescSetAttribute(
            self.0 as P,
            attr,
            v as *const T as C,
            std::mem::size_of::<T>()
        ))
    }
}

impl Drop for Desc {
    fn drop(&mut self) {
        let _ = call!(cublasLtMatmulDescDestroy(self.0 as P));
    }
}

/// A matrix layout of Marmoset's from recorded attributes, destroyed when dropped.
struct Layout(usize);

impl Layout {
    fn of(l: &LtLayout) -> Result<Layout, String> {
        let mut p: P = std::ptr::null_mut();
        call_why!(cublasLtMatrixLayoutCreate(
            &mut p, l.ty, l.rows, l.cols, l.ld
        ))?;
        let layout = Layout(p as usize);
        let set = |attr: u32, v: C, size: usize| {
            call_why!(cublasLtMatrixLayoutSetAttribute(
                layout.0 as P,
                attr,
                v,
                size
            ))
        };
        if l.order != 0 {
            set(LAYOUT_ORDER, &l.order as *const i32 as C, 4)?;
        }
        if l.batch != 1 {
            set(LAYOUT_BATCH_COUNT, &l.batch as *const i32 as C, 4)?;
        }
        if l.stride != 0 {
            set(LAYOUT_STRIDED_BATCH_OFFSET, &l.stride as *const i64 as C, 8)?;
        }
        Ok(layout)
    }
}

impl Drop for Layout {
    fn drop(&mut self) {
        let _ = call!(cublasLtMatrixLayoutDestroy(self.0 as P));
    }
}

/// The recorded algorithm's bytes as cuBLASLt takes a cublasLtMatmulAlgo_t (8-byte aligned).
fn words(b: &[u8]) -> Result<Vec<u64>, String> {
    if b.len() != ALGO_BYTES {
        return Err(format!(
            "the recorded algorithm is {} bytes, not {ALGO_BYTES}",
            b.len()
        ));
    }
    Ok(b.chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_algorithm_reads_back_as_its_words() {
        let bytes: Vec<u8> = (0..64u8).collect();
        let w = words(&bytes).unwrap();
        assert_eq!(w.len(), 8);
        assert_eq!(w[0], u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]));
        assert!(words(&[0, 255]).is_err());
    }
}
