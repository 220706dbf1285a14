//! cuBLAS and cuBLASLt hooks: the GEMMs, traced as `cublas` records with the exact ranges of
//! their operands (from m, n, k, the leading dimensions, batch strides and types; for cuBLASLt
//! from the opaque layouts and matmul descriptor, read with the real getters), so that a memory
//! policy makes them resident before the library runs its kernel. One call is one record; it
//! counts as one library kernel when it has work (m, n and batch non-zero). A handle's workspace
//! (`cublasSetWorkspace_v2`) is an operand of each of its calls.

use super::{Pending, range};
use crate::ffi::cublas::{ALGO_BYTES, R_16F, R_32F, R_32I, R_64F, scale_type};
use crate::ffi::table;
use planner::trace::{Access, Event, Replay, TensorArg, Touch};
use std::ffi::{c_int, c_void};

type P = *mut c_void;
type C = *const c_void;

const NOT_INITIALIZED: c_int = 1;
const OP_N: c_int = 0;
const POINTER_MODE_DEVICE: c_int = 1;

/// Bytes of one element of a cudaDataType (complex types as their pairs).
fn elem_bytes(t: c_int) -> u64 {
    match t {
        1 | 4 => 8,           // R_64F, C_32F
        5 => 16,              // C_64F
        2 | 14 => 2,          // R_16F, R_16BF
        3 | 8 | 28 | 29 => 1, // R_8I, R_8U, R_8F_E4M3, R_8F_E5M2
        _ => 4,               // R_32F, R_32I, R_32U, C_16F, C_16BF
    }
}

/// Whether beta is non-zero, so that C is read; a device-resident beta cannot be read from
/// the host before the call, so C then counts as read.
fn beta_nonzero(beta: C, device: bool, ty: c_int) -> bool {
    if beta.is_null() || device {
        return true;
    }
    // SAFETY: in host pointer mode beta points to a host scalar of the scale type.
    unsafe {
        match ty {
            R_64F => *(beta as *const f64) != 0.0,
            R_16F => *(beta as *const u16) & 0x7fff != 0,
            R_32I => *(beta as *const i32) != 0,
            _ => *(beta as *const f32) != 0.0,
        }
    }
}

/// A host scalar of a scale type, as f64 (exact for these types); None for NULL or a type a
/// replay does not pass (half precision: such a call gets no lineage, so it is never replayed).
fn host_scalar(p: C, ty: c_int) -> Option<f64> {
    if p.is_null() {
        return None;
    }
    // SAFETY: in host pointer mode p points to a host scalar of the scale type.
    unsafe {
        match ty {
            R_64F => Some(*(p as *const f64)),
            R_32F => Some(f64::from(*(p as *const f32))),
            R_32I => Some(f64::from(*(p as *const i32))),
            _ => None,
        }
    }
}

/// A column-major matrix operand: rows x cols with leading dimension `ld`, `batch` of them
/// `stride` elements apart.
struct Mat {
    role: &'static str,
    ptr: u64,
    ty: c_int,
    rows: u64,
    cols: u64,
    ld: i64,
    batch: u64,
    stride: i64,
    access: Access,
}

impl Mat {
    fn elements(&self) -> u64 {
        if self.rows == 0 || self.cols == 0 || self.batch == 0 {
            return 0;
        }
        let one = (self.cols - 1) * self.ld.max(0) as u64 + self.rows;
        one + (self.batch - 1) * self.stride.max(0) as u64
    }

    fn push(&self, tensors: &mut Vec<TensorArg>, touches: &mut Vec<Touch>) {
        if self.ptr == 0 {
            return;
        }
        touches.extend(range(
            self.ptr,
            self.elements() * elem_bytes(self.ty),
            self.access,
        ));
        let (mut dims, mut strides) = (vec![self.rows as i64, self.cols as i64], vec![1, self.ld]);
        if self.batch > 1 {
            dims.insert(0, self.batch as i64);
            strides.insert(0, self.stride);
        }
        tensors.push(TensorArg {
            role: self.role.into(),
            ptr: self.ptr,
            dims,
            strides,
            access: self.access,
            uid: None,
        });
    }
}

/// An untyped buffer (workspace, bias or aux vector, pointer arrays).
fn buffer(
    role: &str,
    ptr: u64,
    bytes: u64,
    access: Access,
    tensors: &mut Vec<TensorArg>,
    touches: &mut Vec<Touch>,
) {
    if ptr == 0 || bytes == 0 {
        return;
    }
    touches.extend(range(ptr, bytes, access));
    tensors.push(TensorArg {
        role: role.into(),
        ptr,
        dims: vec![],
        strides: vec![],
        access,
        uid: None,
    });
}

fn record(
    api: &str,
    stream: Option<u64>,
    (m, n, k, batch): (u64, u64, u64, u64),
    tensors: Vec<TensorArg>,
    touches: Vec<Touch>,
) -> Option<Pending> {
    let p = Pending::new(Event::Cublas {
        api: api.into(),
        stream,
        m,
        n,
        k,
        batch,
        kernels: u32::from(m > 0 && n > 0 && batch > 0),
        tensors,
        touches,
        result: 0,
    });
    Some(p.timed(stream.unwrap_or(0)))
}

// ======================================================================= cuBLAS

/// What a cuBLAS handle says about a call: its stream and whether scalars are device pointers.
fn handle(h: P) -> (Option<u64>, bool) {
    let stream = table::cublasGetStream_v2().and_then(|get| {
        let mut s: P = std::ptr::null_mut();
        // SAFETY: a valid output pointer; h is the caller's handle.
        (unsafe { get(h, &mut s) } == 0).then_some(s as u64)
    });
    let device = table::cublasGetPointerMode_v2().is_some_and(|get| {
        let mut mode = 0;
        // SAFETY: a valid output pointer; h is the caller's handle.
        unsafe { get(h, &mut mode) == 0 && mode == POINTER_MODE_DEVICE }
    });
    (stream, device)
}

/// One cuBLAS GEMM as its arguments give it.
struct Gemm {
    trans: (c_int, c_int),
    mnk: (c_int, c_int, c_int),
    alpha: C,
    a: (C, c_int, c_int, i64),
    b: (C, c_int, c_int, i64),
    beta: C,
    c: (C, c_int, c_int, i64),
    batch: c_int,
    compute: c_int,
    /// cublasGemmAlgo_t (CUBLAS_GEMM_DEFAULT, -1, for the calls that take none).
    algo: c_int,
}

fn gemm(api: &str, h: P, g: Gemm) -> Option<Pending> {
    let (stream, device) = handle(h);
    let (m, n, k) = (
        g.mnk.0.max(0) as u64,
        g.mnk.1.max(0) as u64,
        g.mnk.2.max(0) as u64,
    );
    let batch = g.batch.max(0) as u64;
    let (ar, ac) = if g.trans.0 == OP_N { (m, k) } else { (k, m) };
    let (br, bc) = if g.trans.1 == OP_N { (k, n) } else { (n, k) };
    let c_read = beta_nonzero(g.beta, device, scale_type(g.compute, g.c.1));
    let mats = [
        ("A", g.a, ar, ac, Access::R),
        ("B", g.b, br, bc, Access::R),
        ("C", g.c, m, n, if c_read { Access::Rw } else { Access::W }),
    ];
    let (mut tensors, mut touches) = (Vec::new(), Vec::new());
    for (role, (ptr, ty, ld, stride), rows, cols, access) in mats {
        Mat {
            role,
            ptr: ptr as u64,
            ty,
            rows,
            cols,
            ld: ld as i64,
            batch,
            stride,
            access,
        }
        .push(&mut tensors, &mut touches);
    }
    push_workspace(h, &mut tensors, &mut touches);
    let p = record(api, stream, (m, n, k, batch), tensors, touches);
    super::runtime::with_lineage(p, || gemm_lineage(h, &g, device))
}

/// Lineage of a GEMM: what a replay passes besides its operands (see [`Replay::Gemm`]). None
/// in device pointer mode (alpha and beta are device memory the host cannot read first).
fn gemm_lineage(h: P, g: &Gemm, device: bool) -> Option<Replay> {
    if device {
        return None;
    }
    let scale = scale_type(g.compute, g.c.1);
    let math = table::cublasGetMathMode().and_then(|get| {
        let mut mode = 0;
        // SAFETY: a valid output pointer; h is the caller's handle.
        (unsafe { get(h, &mut mode) } == 0).then_some(mode)
    })?;
    Some(Replay::Gemm {
        trans: [g.trans.0, g.trans.1],
        types: [g.a.1, g.b.1, g.c.1],
        compute: g.compute,
        algo: g.algo,
        math,
        alpha: host_scalar(g.alpha, scale)?,
        beta: host_scalar(g.beta, scale)?,
    })
}

/// Pointer-array batches: the arrays are device memory the host cannot read before the call,
/// so only the arrays themselves are known.
fn batched(
    api: &str,
    h: P,
    mnk: (c_int, c_int, c_int),
    arrays: [C; 3],
    batch: c_int,
) -> Option<Pending> {
    let (stream, _) = handle(h);
    let batch = batch.max(0) as u64;
    let (mut tensors, mut touches) = (Vec::new(), Vec::new());
    for (role, p) in ["A_array", "B_array", "C_array"].into_iter().zip(arrays) {
        buffer(
            role,
            p as u64,
            8 * batch,
            Access::R,
            &mut tensors,
            &mut touches,
        );
    }
    push_workspace(h, &mut tensors, &mut touches);
    let dim = |v: c_int| v.max(0) as u64;
    record(
        api,
        stream,
        (dim(mnk.0), dim(mnk.1), dim(mnk.2), batch),
        tensors,
        touches,
    )
}

use super::hooks;

// SAFETY (every forwarded call in this table): `real` is the real function of the entry's own
// name and signature (see `hooks!`), called with the caller's arguments unchanged.
hooks! {
    libs = crate::ffi::real::CUBLAS, unavailable = NOT_INITIALIZED, names = (entry, real);
    [""] fn cublasSgemm_v2(h: P, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: C, a: C, lda: c_int, b: C,
        ldb: c_int, beta: C, c: P, ldc: c_int) =>
        gemm("cublasSgemm_v2", h, Gemm { trans: (ta, tb), mnk: (m, n, k), alpha, a: (a, R_32F, lda, 0), b: (b, R_32F, ldb, 0),
            beta, c: (c, R_32F, ldc, 0), batch: 1, compute: 68, algo: -1 });
    [""] fn cublasDgemm_v2(h: P, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: C, a: C, lda: c_int, b: C,
        ldb: c_int, beta: C, c: P, ldc: c_int) =>
        gemm("cublasDgemm_v2", h, Gemm { trans: (ta, tb), mnk: (m, n, k), alpha, a: (a, R_64F, lda, 0), b: (b, R_64F, ldb, 0),
            beta, c: (c, R_64F, ldc, 0), batch: 1, compute: 70, algo: -1 });
    [""] fn cublasGemmEx(h: P, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: C, a: C, at: c_int, lda: c_int,
        b: C, bt: c_int, ldb: c_int, beta: C, c: P, ct: c_int, ldc: c_int, compute: c_int, algo: c_int) =>
        gemm("cublasGemmEx", h, Gemm { trans: (ta, tb), mnk: (m, n, k), alpha, a: (a, at, lda, 0), b: (b, bt, ldb, 0),
            beta, c: (c, ct, ldc, 0), batch: 1, compute, algo });
    [""] fn cublasSgemmEx(h: P, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: C, a: C, at: c_int, lda: c_int,
        b: C, bt: c_int, ldb: c_int, beta: C, c: P, ct: c_int, ldc: c_int) =>
        gemm("cublasSgemmEx", h, Gemm { trans: (ta, tb), mnk: (m, n, k), alpha, a: (a, at, lda, 0), b: (b, bt, ldb, 0),
            beta, c: (c, ct, ldc, 0), batch: 1, compute: 68, algo: -1 });
    [""] fn cublasSgemmStridedBatched(h: P, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: C, a: C, lda: c_int,
        sa: i64, b: C, ldb: c_int, sb: i64, beta: C, c: P, ldc: c_int, sc: i64, batch: c_int) =>
        gemm("cublasSgemmStridedBatched", h, Gemm { trans: (ta, tb), mnk: (m, n, k), alpha, a: (a, R_32F, lda, sa),
            b: (b, R_32F, ldb, sb), beta, c: (c, R_32F, ldc, sc), batch, compute: 68, algo: -1 });
    [""] fn cublasDgemmStridedBatched(h: P, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: C, a: C, lda: c_int,
        sa: i64, b: C, ldb: c_int, sb: i64, beta: C, c: P, ldc: c_int, sc: i64, batch: c_int) =>
        gemm("cublasDgemmStridedBatched", h, Gemm { trans: (ta, tb), mnk: (m, n, k), alpha, a: (a, R_64F, lda, sa),
            b: (b, R_64F, ldb, sb), beta, c: (c, R_64F, ldc, sc), batch, compute: 70, algo: -1 });
    [""] fn cublasGemmStridedBatchedEx(h: P, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: C, a: C, at: c_int,
        lda: c_int, sa: i64, b: C, bt: c_int, ldb: c_int, sb: i64, beta: C, c: P, ct: c_int, ldc: c_int, sc: i64,
        batch: c_int, compute: c_int, algo: c_int) =>
        gemm("cublasGemmStridedBatchedEx", h, Gemm { trans: (ta, tb), mnk: (m, n, k), alpha, a: (a, at, lda, sa),
            b: (b, bt, ldb, sb), beta, c: (c, ct, ldc, sc), batch, compute, algo });
    [""] fn cublasSgemmBatched(h: P, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: C, a: C, lda: c_int, b: C,
        ldb: c_int, beta: C, c: C, ldc: c_int, batch: c_int) =>
        batched("cublasSgemmBatched", h, (m, n, k), [a, b, c], batch);
    [""] fn cublasDgemmBatched(h: P, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: C, a: C, lda: c_int, b: C,
        ldb: c_int, beta: C, c: C, ldc: c_int, batch: c_int) =>
        batched("cublasDgemmBatched", h, (m, n, k), [a, b, c], batch);
    [""] fn cublasSetWorkspace_v2(h: P, w: P, size: usize) => None,
        call = set_workspace(h, w, size, || unsafe { real(h, w, size) });
}

/// Each handle's workspace (`cublasSetWorkspace_v2`): device memory the handle's calls use
/// without naming it, which must be resident when they run.
static WORKSPACES: std::sync::Mutex<Option<std::collections::HashMap<usize, (u64, u64)>>> =
    std::sync::Mutex::new(None);

/// Forwards `cublasSetWorkspace_v2` (`real`) and, where cuBLAS took it, keeps the handle's
/// workspace (none for a null pointer or size 0: cuBLAS's own then).
fn set_workspace(h: P, w: P, size: usize, real: impl FnOnce() -> c_int) -> c_int {
    let status = real();
    if status == 0
        && let Ok(mut g) = WORKSPACES.lock()
    {
        let map = g.get_or_insert_with(Default::default);
        if w.is_null() || size == 0 {
            map.remove(&(h as usize));
        } else {
            map.insert(h as usize, (w as u64, size as u64));
        }
    }
    status
}

/// The handle's workspace as a call's operand (read and written, as cuDNN's workspace is).
fn push_workspace(h: P, tensors: &mut Vec<TensorArg>, touches: &mut Vec<Touch>) {
    let ws = WORKSPACES
        .lock()
        .ok()
        .and_then(|g| g.as_ref()?.get(&(h as usize)).copied());
    if let Some((ptr, size)) = ws {
        buffer("workspace", ptr, size, Access::Rw, tensors, touches);
    }
}

pub use lt::TABLE as LT_TABLE;

/// cuBLASLt: `cublasLtMatmul` (its own table: another library, and `hooks!` makes one table
/// per module).
mod lt {
    use super::*;
    use planner::trace::LtLayout;

    // cublasLtMatmulDescAttributes_t and cublasLtMatrixLayoutAttribute_t values.
    const DESC_COMPUTE_TYPE: u32 = 0;
    const DESC_SCALE_TYPE: u32 = 1;
    const DESC_POINTER_MODE: u32 = 2;
    const DESC_TRANSA: u32 = 3;
    const DESC_TRANSB: u32 = 4;
    const DESC_EPILOGUE: u32 = 7;
    const DESC_BIAS_POINTER: u32 = 8;
    const DESC_BIAS_BATCH_STRIDE: u32 = 10;
    const DESC_AUX_POINTER: u32 = 11;
    const DESC_AUX_LD: u32 = 12;
    const DESC_AUX_BATCH_STRIDE: u32 = 13;
    const DESC_AUX_DATA_TYPE: u32 = 22;
    const DESC_BIAS_DATA_TYPE: u32 = 26;
    const LAYOUT_TYPE: u32 = 0;
    const LAYOUT_ORDER: u32 = 1;
    const ORDER_ROW: u64 = 1;
    const LAYOUT_ROWS: u32 = 2;
    const LAYOUT_COLS: u32 = 3;
    const LAYOUT_LD: u32 = 4;
    const LAYOUT_BATCH_COUNT: u32 = 5;
    const LAYOUT_STRIDED_BATCH_OFFSET: u32 = 6;
    // cublasLtEpilogue_t bits.
    const EPI_RELU: u32 = 2;
    const EPI_BIAS: u32 = 4;
    const EPI_DRELU: u32 = 8;
    const EPI_BGRAD: u32 = 16;
    const EPI_DGELU: u32 = 64;
    const EPI_AUX: u32 = 128;
    const EPI_BGRADA: u32 = 256;
    const EPI_BGRADB: u32 = 512;

    type GetFn = unsafe extern "C" fn(C, u32, P, usize, *mut usize) -> c_int;

    /// An attribute of up to 8 bytes, zero-extended; None when the getter refuses it.
    fn attr(get: Option<GetFn>, d: C, a: u32, size: usize) -> Option<u64> {
        let get = get?;
        let mut v = 0u64;
        let mut written = 0usize;
        // SAFETY: v has 8 bytes; the getter writes at most `size` <= 8 bytes into it.
        (unsafe { get(d, a, (&mut v as *mut u64).cast(), size, &mut written) } == 0).then_some(v)
    }

    fn desc_get() -> Option<GetFn> {
        table::cublasLtMatmulDescGetAttribute()
    }

    /// The matrix as stored, and its logical (rows, cols).
    fn layout(role: &'static str, ptr: C, l: C, access: Access) -> (Mat, (u64, u64)) {
        let get = table::cublasLtMatrixLayoutGetAttribute();
        let a = |attr: u32, size: usize| self::attr(get, l, attr, size);
        let logical = (
            a(LAYOUT_ROWS, 8).unwrap_or(0),
            a(LAYOUT_COLS, 8).unwrap_or(0),
        );
        // Extents follow the storage order: a row-major matrix is its transpose in columns.
        let (rows, cols) = if a(LAYOUT_ORDER, 4) == Some(ORDER_ROW) {
            (logical.1, logical.0)
        } else {
            logical
        };
        let mat = Mat {
            role,
            ptr: ptr as u64,
            ty: a(LAYOUT_TYPE, 4).unwrap_or(0) as i32,
            rows,
            cols,
            ld: a(LAYOUT_LD, 8).unwrap_or(0) as i64,
            batch: (a(LAYOUT_BATCH_COUNT, 4).unwrap_or(1) as i32).max(1) as u64,
            stride: a(LAYOUT_STRIDED_BATCH_OFFSET, 8).unwrap_or(0) as i64,
            access,
        };
        (mat, logical)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn matmul(
        desc: C,
        alpha: C,
        (a, ad): (C, C),
        (b, bd): (C, C),
        beta: C,
        (c, cd): (C, C),
        (d, dd): (C, C),
        (ws, wss): (C, usize),
        algo: C,
        stream: P,
    ) -> Option<Pending> {
        let get = desc_get();
        let da = |attr: u32, size: usize| attr_of(get, desc, attr, size);
        let (d_mat, (m, n)) = layout("D", d, dd, Access::W);
        let compute = da(DESC_COMPUTE_TYPE, 4).unwrap_or(68) as i32;
        let scale = da(DESC_SCALE_TYPE, 4)
            .map(|v| v as i32)
            .unwrap_or_else(|| scale_type(compute, d_mat.ty));
        // Every pointer mode other than host (0) keeps beta on the device or makes it zero
        // (mode 3); only a host beta can be read here.
        let mode = da(DESC_POINTER_MODE, 4).unwrap_or(0) as i32;
        let c_read = match mode {
            0 => beta_nonzero(beta, false, scale),
            3 => false,
            _ => true,
        };
        let batch = d_mat.batch;
        let (a_mat, a_dims) = layout("A", a, ad, Access::R);
        // k: A is m x k (or k x m when transposed): the side that is not m.
        let k = if a_dims.0 == m { a_dims.1 } else { a_dims.0 };
        let (mut tensors, mut touches) = (Vec::new(), Vec::new());
        a_mat.push(&mut tensors, &mut touches);
        layout("B", b, bd, Access::R)
            .0
            .push(&mut tensors, &mut touches);
        // C and D may be the same matrix: C read-write when read, else only D's write counts.
        if c != d && c_read {
            layout("C", c, cd, Access::R)
                .0
                .push(&mut tensors, &mut touches);
        }
        let mut d_mat = d_mat;
        if c == d && c_read {
            d_mat.access = Access::Rw;
        }
        d_mat.push(&mut tensors, &mut touches);
        let epi = da(DESC_EPILOGUE, 4).unwrap_or(1) as u32;
        epilogue(
            epi,
            &da,
            (m, n, batch, d_mat.ty),
            &mut tensors,
            &mut touches,
        );
        buffer(
            "workspace",
            ws as u64,
            wss as u64,
            Access::Rw,
            &mut tensors,
            &mut touches,
        );
        let p = record(
            "cublasLtMatmul",
            Some(stream as u64),
            (m, n, k, batch),
            tensors,
            touches,
        );
        crate::hooks::runtime::with_lineage(p, || {
            // Only a host alpha and beta can be kept by value.
            if mode != 0 {
                return None;
            }
            Some(Replay::Lt {
                compute,
                scale,
                trans: [
                    da(DESC_TRANSA, 4).unwrap_or(0) as i32,
                    da(DESC_TRANSB, 4).unwrap_or(0) as i32,
                ],
                epilogue: epi,
                bias_type: da(DESC_BIAS_DATA_TYPE, 4).map(|v| v as i32),
                layouts: [ad, bd, cd, dd]
                    .into_iter()
                    .map(lt_layout)
                    .collect::<Option<Vec<_>>>()?,
                algo: (!algo.is_null()).then(|| {
                    // SAFETY: a cublasLtMatmulAlgo_t is 64 bytes of plain data.
                    let bytes =
                        unsafe { std::slice::from_raw_parts(algo as *const u8, ALGO_BYTES) };
                    bytes.to_vec()
                }),
                alpha: host_scalar(alpha, scale)?,
                beta: host_scalar(beta, scale)?,
            })
        })
    }

    /// A matrix layout's attributes, read with the real getter.
    fn lt_layout(l: C) -> Option<LtLayout> {
        let get = table::cublasLtMatrixLayoutGetAttribute();
        let a = |attr: u32, size: usize| self::attr(get, l, attr, size);
        Some(LtLayout {
            ty: a(LAYOUT_TYPE, 4)? as i32,
            order: a(LAYOUT_ORDER, 4).unwrap_or(0) as i32,
            rows: a(LAYOUT_ROWS, 8)?,
            cols: a(LAYOUT_COLS, 8)?,
            ld: a(LAYOUT_LD, 8)? as i64,
            batch: a(LAYOUT_BATCH_COUNT, 4).unwrap_or(1) as i32,
            stride: a(LAYOUT_STRIDED_BATCH_OFFSET, 8).unwrap_or(0) as i64,
        })
    }

    fn attr_of(get: Option<GetFn>, d: C, a: u32, size: usize) -> Option<u64> {
        attr(get, d, a, size)
    }

    /// The bias and auxiliary buffers the epilogue reads or writes.
    fn epilogue(
        epi: u32,
        da: &dyn Fn(u32, usize) -> Option<u64>,
        (m, n, batch, d_type): (u64, u64, u64, c_int),
        tensors: &mut Vec<TensorArg>,
        touches: &mut Vec<Touch>,
    ) {
        let bias = da(DESC_BIAS_POINTER, 8).unwrap_or(0);
        let grad = epi & (EPI_BGRAD | EPI_BGRADA | EPI_BGRADB) != 0;
        if bias != 0 && (epi & EPI_BIAS != 0 || grad) {
            let ty = da(DESC_BIAS_DATA_TYPE, 4)
                .map(|v| v as i32)
                .unwrap_or(d_type);
            let len = if epi & EPI_BGRADB != 0 { n } else { m };
            let stride = da(DESC_BIAS_BATCH_STRIDE, 8).unwrap_or(0);
            let elems = len + batch.saturating_sub(1) * stride;
            let access = if grad { Access::W } else { Access::R };
            buffer(
                "bias",
                bias,
                elems * elem_bytes(ty),
                access,
                tensors,
                touches,
            );
        }
        let aux = da(DESC_AUX_POINTER, 8).unwrap_or(0);
        if aux != 0 && epi & EPI_AUX != 0 {
            let ld = da(DESC_AUX_LD, 8).unwrap_or(m);
            let stride = da(DESC_AUX_BATCH_STRIDE, 8).unwrap_or(0);
            let elems =
                if n == 0 { 0 } else { ld * (n - 1) + m } + batch.saturating_sub(1) * stride;
            // ReLU's aux is a bit mask; GELU's holds the pre-activation in the aux type.
            let relu = epi & (EPI_RELU | EPI_DRELU) != 0;
            let bytes = if relu {
                elems.div_ceil(8)
            } else {
                let ty = da(DESC_AUX_DATA_TYPE, 4)
                    .map(|v| v as i32)
                    .unwrap_or(d_type);
                elems * elem_bytes(ty)
            };
            // The backward epilogues (DRELU, DGELU) read what the forward ones wrote.
            let access = if epi & (EPI_DRELU | EPI_DGELU) != 0 {
                Access::R
            } else {
                Access::W
            };
            buffer("aux", aux, bytes, access, tensors, touches);
        }
    }

    use crate::hooks::hooks;

    // SAFETY (every forwarded call in this table): `real` is the real function of the entry's
    // own name and signature (see `hooks!`), called with the caller's arguments unchanged.
    hooks! {
        libs = crate::ffi::real::CUBLASLT, unavailable = NOT_INITIALIZED, names = (entry, real);
        [""] fn cublasLtMatmul(lt: P, desc: C, alpha: C, a: C, ad: C, b: C, bd: C, beta: C, c: C, cd: C, d: P, dd: C,
            algo: C, ws: P, wss: usize, stream: P) =>
            matmul(desc, alpha, (a, ad), (b, bd), beta, (c, cd), (d as C, dd), (ws as C, wss), algo, stream);
    }
}
