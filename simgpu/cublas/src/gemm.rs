//! cuBLAS's GEMM entry points: checked as cuBLAS checks them, then run by the shared engine on
//! the handle's stream.

use crate::{Handle, State, run, state};
use simgpu_blas::driver::{Sim, sim};
use simgpu_blas::epilogue::Epilogue;
use simgpu_blas::gemm::{self, Gemm};
use simgpu_blas::matrix::Matrix;
use simgpu_blas::types::*;
use std::ffi::{CStr, c_int, c_longlong, c_void};

/// The workspace cuBLAS uses when the caller set none (assumption, after the sizes cuBLAS's
/// documentation recommends: 32 MiB on Hopper, 4 MiB before).
fn default_workspace(s: &Sim) -> u64 {
    if s.profile.compute_capability[0] >= 9 {
        32 << 20
    } else {
        4 << 20
    }
}

/// One GEMM call as the API gives it (pointers, types, leading dimensions, batch strides).
struct Call {
    ta: c_int,
    tb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    atype: c_int,
    lda: c_int,
    sa: i64,
    b: *const c_void,
    btype: c_int,
    ldb: c_int,
    sb: i64,
    beta: *const c_void,
    c: *mut c_void,
    ctype: c_int,
    ldc: c_int,
    sc: i64,
    batch: c_int,
    compute: c_int,
}

fn trans(op: c_int) -> Result<bool, Status> {
    match op {
        OP_N => Ok(false),
        OP_T | OP_C => Ok(true),
        _ => Err(INVALID_VALUE),
    }
}

/// The compute type an FP32 routine runs under the handle's math mode (cuBLAS 11+: TF32 math
/// mode makes FP32 GEMMs TF32; the deprecated tensor-op mode makes them FAST_16F).
fn effective_compute(compute: c_int, math: c_int) -> c_int {
    if compute != COMPUTE_32F {
        return compute;
    }
    match math & !DISALLOW_REDUCED_PRECISION_REDUCTION {
        TF32_TENSOR_OP_MATH => COMPUTE_32F_FAST_TF32,
        TENSOR_OP_MATH => COMPUTE_32F_FAST_16F,
        PEDANTIC_MATH => COMPUTE_32F_PEDANTIC,
        _ => COMPUTE_32F,
    }
}

/// Checks a call and builds the engine's GEMM; None: nothing to do (m, n or batch is 0).
fn build(s: &Sim, st: &State, c: &Call, what: &CStr) -> Result<Option<Gemm>, Status> {
    let (ta, tb) = (trans(c.ta)?, trans(c.tb)?);
    if c.m < 0 || c.n < 0 || c.k < 0 || c.batch < 0 {
        return Err(INVALID_VALUE);
    }
    let (m, n, k) = (c.m as u64, c.n as u64, c.k as u64);
    let (ar, ac) = if ta { (k, m) } else { (m, k) };
    let (br, bc) = if tb { (n, k) } else { (k, n) };
    if (c.lda as i64) < ar.max(1) as i64
        || (c.ldb as i64) < br.max(1) as i64
        || (c.ldc as i64) < m.max(1) as i64
    {
        return Err(INVALID_VALUE);
    }
    if c.alpha.is_null() || c.beta.is_null() {
        return Err(INVALID_VALUE);
    }
    let compute = effective_compute(c.compute, st.math);
    let scale = gemm::implied_scale(compute, c.ctype);
    let tc = s.profile.tensor_tflops.is_some();
    let cmp = gemm::compute_for(compute, scale, (c.atype, c.btype), c.ctype, false, tc)?;
    if m == 0 || n == 0 || c.batch == 0 {
        return Ok(None);
    }
    let device = st.pointer_mode == POINTER_MODE_DEVICE;
    let alpha = gemm::scalar(s, c.alpha, device, scale, what)?;
    let beta = gemm::scalar(s, c.beta, device, scale, what)?;
    let cm = Matrix::col(c.c as u64, c.ctype, m, n, c.ldc as i64, c.sc);
    let workspace = if st.user_workspace {
        st.workspace_bytes as u64
    } else {
        default_workspace(s)
    };
    Ok(Some(Gemm {
        m,
        n,
        k,
        batch: c.batch as u64,
        trans_a: ta,
        trans_b: tb,
        a: Matrix::col(c.a as u64, c.atype, ar, ac, c.lda as i64, c.sa),
        b: Matrix::col(c.b as u64, c.btype, br, bc, c.ldb as i64, c.sb),
        c: cm,
        d: cm,
        compute: cmp,
        alpha,
        beta,
        epilogue: Epilogue::default(),
        workspace,
        workspace_ptr: st.workspace as u64,
        config: None,
    }))
}

/// A GEMM entry point: handle, checks, then the engine on the handle's stream.
fn call(h: Handle, c: Call, what: &CStr) -> Status {
    run(|| {
        let st = state(h)?;
        let s = sim().ok_or(NOT_INITIALIZED)?;
        if let Some(g) = build(s, &st, &c, what)? {
            g.run(s, st.stream as *mut c_void, what)?;
        }
        Ok(())
    })
}

fn check_algo(algo: c_int) -> Result<(), Status> {
    let ok = (GEMM_DEFAULT..=GEMM_ALGO23).contains(&algo)
        || (GEMM_DEFAULT_TENSOR_OP..=GEMM_ALGO15_TENSOR_OP).contains(&algo)
        || algo == GEMM_AUTOTUNE;
    if ok { Ok(()) } else { Err(NOT_SUPPORTED) }
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSgemm_v2(
    h: Handle,
    ta: c_int,
    tb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f32,
    a: *const f32,
    lda: c_int,
    b: *const f32,
    ldb: c_int,
    beta: *const f32,
    c: *mut f32,
    ldc: c_int,
) -> Status {
    typed(
        h,
        [ta, tb, m, n, k],
        R_32F,
        COMPUTE_32F,
        alpha as _,
        a as _,
        lda,
        b as _,
        ldb,
        beta as _,
        c as _,
        ldc,
        c"cublasSgemm_v2",
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasDgemm_v2(
    h: Handle,
    ta: c_int,
    tb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f64,
    a: *const f64,
    lda: c_int,
    b: *const f64,
    ldb: c_int,
    beta: *const f64,
    c: *mut f64,
    ldc: c_int,
) -> Status {
    typed(
        h,
        [ta, tb, m, n, k],
        R_64F,
        COMPUTE_64F,
        alpha as _,
        a as _,
        lda,
        b as _,
        ldb,
        beta as _,
        c as _,
        ldc,
        c"cublasDgemm_v2",
    )
}

/// Sgemm / Dgemm: one type throughout.
fn typed(
    h: Handle,
    [ta, tb, m, n, k]: [c_int; 5],
    t: c_int,
    compute: c_int,
    alpha: *const c_void,
    a: *const c_void,
    lda: c_int,
    b: *const c_void,
    ldb: c_int,
    beta: *const c_void,
    c: *mut c_void,
    ldc: c_int,
    what: &CStr,
) -> Status {
    call(
        h,
        Call {
            ta,
            tb,
            m,
            n,
            k,
            alpha,
            a,
            atype: t,
            lda,
            sa: 0,
            b,
            btype: t,
            ldb,
            sb: 0,
            beta,
            c,
            ctype: t,
            ldc,
            sc: 0,
            batch: 1,
            compute,
        },
        what,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasGemmEx(
    h: Handle,
    ta: c_int,
    tb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    atype: c_int,
    lda: c_int,
    b: *const c_void,
    btype: c_int,
    ldb: c_int,
    beta: *const c_void,
    c: *mut c_void,
    ctype: c_int,
    ldc: c_int,
    compute: c_int,
    algo: c_int,
) -> Status {
    if let Err(e) = check_algo(algo) {
        return if state(h).is_err() {
            NOT_INITIALIZED
        } else {
            e
        };
    }
    call(
        h,
        Call {
            ta,
            tb,
            m,
            n,
            k,
            alpha,
            a,
            atype,
            lda,
            sa: 0,
            b,
            btype,
            ldb,
            sb: 0,
            beta,
            c,
            ctype,
            ldc,
            sc: 0,
            batch: 1,
            compute,
        },
        c"cublasGemmEx",
    )
}

/// cublasSgemmEx: FP32 scales and accumulation, A/B/C of the given types.
#[unsafe(no_mangle)]
pub extern "C" fn cublasSgemmEx(
    h: Handle,
    ta: c_int,
    tb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f32,
    a: *const c_void,
    atype: c_int,
    lda: c_int,
    b: *const c_void,
    btype: c_int,
    ldb: c_int,
    beta: *const f32,
    c: *mut c_void,
    ctype: c_int,
    ldc: c_int,
) -> Status {
    call(
        h,
        Call {
            ta,
            tb,
            m,
            n,
            k,
            alpha: alpha as _,
            a,
            atype,
            lda,
            sa: 0,
            b,
            btype,
            ldb,
            sb: 0,
            beta: beta as _,
            c,
            ctype,
            ldc,
            sc: 0,
            batch: 1,
            compute: COMPUTE_32F,
        },
        c"cublasSgemmEx",
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSgemmStridedBatched(
    h: Handle,
    ta: c_int,
    tb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f32,
    a: *const f32,
    lda: c_int,
    sa: c_longlong,
    b: *const f32,
    ldb: c_int,
    sb: c_longlong,
    beta: *const f32,
    c: *mut f32,
    ldc: c_int,
    sc: c_longlong,
    batch: c_int,
) -> Status {
    call(
        h,
        Call {
            ta,
            tb,
            m,
            n,
            k,
            alpha: alpha as _,
            a: a as _,
            atype: R_32F,
            lda,
            sa,
            b: b as _,
            btype: R_32F,
            ldb,
            sb,
            beta: beta as _,
            c: c as _,
            ctype: R_32F,
            ldc,
            sc,
            batch,
            compute: COMPUTE_32F,
        },
        c"cublasSgemmStridedBatched",
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasDgemmStridedBatched(
    h: Handle,
    ta: c_int,
    tb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f64,
    a: *const f64,
    lda: c_int,
    sa: c_longlong,
    b: *const f64,
    ldb: c_int,
    sb: c_longlong,
    beta: *const f64,
    c: *mut f64,
    ldc: c_int,
    sc: c_longlong,
    batch: c_int,
) -> Status {
    call(
        h,
        Call {
            ta,
            tb,
            m,
            n,
            k,
            alpha: alpha as _,
            a: a as _,
            atype: R_64F,
            lda,
            sa,
            b: b as _,
            btype: R_64F,
            ldb,
            sb,
            beta: beta as _,
            c: c as _,
            ctype: R_64F,
            ldc,
            sc,
            batch,
            compute: COMPUTE_64F,
        },
        c"cublasDgemmStridedBatched",
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasGemmStridedBatchedEx(
    h: Handle,
    ta: c_int,
    tb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    atype: c_int,
    lda: c_int,
    sa: c_longlong,
    b: *const c_void,
    btype: c_int,
    ldb: c_int,
    sb: c_longlong,
    beta: *const c_void,
    c: *mut c_void,
    ctype: c_int,
    ldc: c_int,
    sc: c_longlong,
    batch: c_int,
    compute: c_int,
    algo: c_int,
) -> Status {
    if let Err(e) = check_algo(algo) {
        return if state(h).is_err() {
            NOT_INITIALIZED
        } else {
            e
        };
    }
    call(
        h,
        Call {
            ta,
            tb,
            m,
            n,
            k,
            alpha,
            a,
            atype,
            lda,
            sa,
            b,
            btype,
            ldb,
            sb,
            beta,
            c,
            ctype,
            ldc,
            sc,
            batch,
            compute,
        },
        c"cublasGemmStridedBatchedEx",
    )
}

/// Pointer-array batches: the arrays live in device memory. In data mode each entry runs as its
/// own GEMM; in shape mode the arrays' ranges are checked (their contents are not known). One
/// kernel's time for the whole batch.
fn pointer_batched(h: Handle, mut c: Call, arrays: [*const c_void; 3], what: &CStr) -> Status {
    run(|| {
        let st = state(h)?;
        let s = sim().ok_or(NOT_INITIALIZED)?;
        let batch = c.batch;
        c.a = std::ptr::null();
        c.b = std::ptr::null();
        c.c = std::ptr::null_mut();
        let Some(mut g) = build(s, &st, &c, what)? else {
            return Ok(());
        };
        if arrays.iter().any(|p| p.is_null()) {
            return Err(INVALID_VALUE);
        }
        let n = batch as usize;
        let mut ptrs = [vec![0u8; n * 8], vec![0u8; n * 8], vec![0u8; n * 8]];
        for (p, buf) in arrays.iter().zip(ptrs.iter_mut()) {
            s.read(*p as u64, buf, what)?;
        }
        let est = g.estimate(s);
        if s.data_mode() {
            let at =
                |v: &Vec<u8>, i: usize| u64::from_le_bytes(v[i * 8..i * 8 + 8].try_into().unwrap());
            g.batch = 1;
            for i in 0..n {
                g.a.ptr = at(&ptrs[0], i);
                g.b.ptr = at(&ptrs[1], i);
                g.c.ptr = at(&ptrs[2], i);
                g.d.ptr = g.c.ptr;
                g.execute(s, what)?;
            }
        }
        s.submit(st.stream as *mut c_void, est.seconds)?;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSgemmBatched(
    h: Handle,
    ta: c_int,
    tb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f32,
    a: *const *const f32,
    lda: c_int,
    b: *const *const f32,
    ldb: c_int,
    beta: *const f32,
    c: *const *mut f32,
    ldc: c_int,
    batch: c_int,
) -> Status {
    let call = Call {
        ta,
        tb,
        m,
        n,
        k,
        alpha: alpha as _,
        a: std::ptr::null(),
        atype: R_32F,
        lda,
        sa: 0,
        b: std::ptr::null(),
        btype: R_32F,
        ldb,
        sb: 0,
        beta: beta as _,
        c: std::ptr::null_mut(),
        ctype: R_32F,
        ldc,
        sc: 0,
        batch,
        compute: COMPUTE_32F,
    };
    pointer_batched(h, call, [a as _, b as _, c as _], c"cublasSgemmBatched")
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasDgemmBatched(
    h: Handle,
    ta: c_int,
    tb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f64,
    a: *const *const f64,
    lda: c_int,
    b: *const *const f64,
    ldb: c_int,
    beta: *const f64,
    c: *const *mut f64,
    ldc: c_int,
    batch: c_int,
) -> Status {
    let call = Call {
        ta,
        tb,
        m,
        n,
        k,
        alpha: alpha as _,
        a: std::ptr::null(),
        atype: R_64F,
        lda,
        sa: 0,
        b: std::ptr::null(),
        btype: R_64F,
        ldb,
        sb: 0,
        beta: beta as _,
        c: std::ptr::null_mut(),
        ctype: R_64F,
        ldc,
        sc: 0,
        batch,
        compute: COMPUTE_64F,
    };
    pointer_batched(h, call, [a as _, b as _, c as _], c"cublasDgemmBatched")
}

/// y = alpha op(A) x + beta y, as a GEMM with one column: x is read as a transposed 1 x k
/// matrix whose leading dimension is incx, y written as a row-major m x 1 matrix with incy.
fn gemv(
    h: Handle,
    t: c_int,
    [op, m, n]: [c_int; 3],
    alpha: *const c_void,
    a: *const c_void,
    lda: c_int,
    x: *const c_void,
    incx: c_int,
    beta: *const c_void,
    y: *mut c_void,
    incy: c_int,
    what: &CStr,
) -> Status {
    run(|| {
        let st = state(h)?;
        let s = sim().ok_or(NOT_INITIALIZED)?;
        let ta = trans(op)?;
        if m < 0 || n < 0 || lda < m.max(1) || incx == 0 || incy == 0 {
            return Err(INVALID_VALUE);
        }
        // Negative increments (walking the vector backwards) are not simulated.
        if incx < 0 || incy < 0 {
            return Err(NOT_SUPPORTED);
        }
        if alpha.is_null() || beta.is_null() {
            return Err(INVALID_VALUE);
        }
        let (rows, cols) = if ta {
            (n as u64, m as u64)
        } else {
            (m as u64, n as u64)
        };
        if rows == 0 {
            return Ok(());
        }
        let compute = if t == R_64F { COMPUTE_64F } else { COMPUTE_32F };
        let cmp = gemm::compute_for(compute, t, (t, t), t, false, false)?;
        let device = st.pointer_mode == POINTER_MODE_DEVICE;
        let yv = Matrix {
            ptr: y as u64,
            dtype: t,
            rows,
            cols: 1,
            ld: incy as i64,
            row_major: true,
            stride: 0,
        };
        let g = Gemm {
            m: rows,
            n: 1,
            k: cols,
            batch: 1,
            trans_a: ta,
            trans_b: true,
            a: Matrix::col(a as u64, t, m as u64, n as u64, lda as i64, 0),
            b: Matrix::col(x as u64, t, 1, cols, incx as i64, 0),
            c: yv,
            d: yv,
            compute: cmp,
            alpha: gemm::scalar(s, alpha, device, t, what)?,
            beta: gemm::scalar(s, beta, device, t, what)?,
            epilogue: Epilogue::default(),
            workspace: 0,
            workspace_ptr: 0,
            config: None,
        };
        g.run(s, st.stream as *mut c_void, what)?;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSgemv_v2(
    h: Handle,
    op: c_int,
    m: c_int,
    n: c_int,
    alpha: *const f32,
    a: *const f32,
    lda: c_int,
    x: *const f32,
    incx: c_int,
    beta: *const f32,
    y: *mut f32,
    incy: c_int,
) -> Status {
    gemv(
        h,
        R_32F,
        [op, m, n],
        alpha as _,
        a as _,
        lda,
        x as _,
        incx,
        beta as _,
        y as _,
        incy,
        c"cublasSgemv_v2",
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasDgemv_v2(
    h: Handle,
    op: c_int,
    m: c_int,
    n: c_int,
    alpha: *const f64,
    a: *const f64,
    lda: c_int,
    x: *const f64,
    incx: c_int,
    beta: *const f64,
    y: *mut f64,
    incy: c_int,
) -> Status {
    gemv(
        h,
        R_64F,
        [op, m, n],
        alpha as _,
        a as _,
        lda,
        x as _,
        incx,
        beta as _,
        y as _,
        incy,
        c"cublasDgemv_v2",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn math_modes_change_only_plain_fp32_gemms() {
        assert_eq!(effective_compute(COMPUTE_32F, DEFAULT_MATH), COMPUTE_32F);
        assert_eq!(
            effective_compute(COMPUTE_32F, TF32_TENSOR_OP_MATH),
            COMPUTE_32F_FAST_TF32
        );
        assert_eq!(
            effective_compute(
                COMPUTE_32F,
                TF32_TENSOR_OP_MATH | DISALLOW_REDUCED_PRECISION_REDUCTION
            ),
            COMPUTE_32F_FAST_TF32
        );
        assert_eq!(
            effective_compute(COMPUTE_32F, TENSOR_OP_MATH),
            COMPUTE_32F_FAST_16F
        );
        assert_eq!(
            effective_compute(COMPUTE_32F, PEDANTIC_MATH),
            COMPUTE_32F_PEDANTIC
        );
        // An explicit compute type is left as asked.
        assert_eq!(
            effective_compute(COMPUTE_32F_PEDANTIC, TF32_TENSOR_OP_MATH),
            COMPUTE_32F_PEDANTIC
        );
        assert_eq!(
            effective_compute(COMPUTE_64F, TF32_TENSOR_OP_MATH),
            COMPUTE_64F
        );
    }

    #[test]
    fn operations_and_algorithms() {
        assert_eq!(trans(OP_N), Ok(false));
        assert_eq!(trans(OP_C), Ok(true));
        assert_eq!(trans(OP_CONJG), Err(INVALID_VALUE));
        assert_eq!(check_algo(GEMM_DEFAULT), Ok(()));
        assert_eq!(check_algo(GEMM_DEFAULT_TENSOR_OP), Ok(()));
        assert_eq!(check_algo(GEMM_AUTOTUNE), Ok(()));
        assert_eq!(check_algo(24), Err(NOT_SUPPORTED));
        assert_eq!(check_algo(-2), Err(NOT_SUPPORTED));
    }
}
