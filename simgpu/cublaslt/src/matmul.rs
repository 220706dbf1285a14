//! cublasLtMatmul and its algorithm machinery: the problem a descriptor and four layouts define,
//! checked as cuBLASLt checks it; the heuristic, which ranks the (tile, k split) configurations of
//! the performance model within the preference's workspace and wave limits; algorithm structures
//! (init, check, config attributes) that `cublasLtMatmul` accepts back.

use crate::attrs::{self, Kind, Obj};
use crate::{Handle, check_handle, obj, run};
use simgpu_blas::driver::{Sim, sim};
use simgpu_blas::epilogue::Epilogue;
use simgpu_blas::gemm::{self, Gemm};
use simgpu_blas::matrix::Matrix;
use simgpu_blas::types::*;
use simgpu_model::gemm::GemmEstimate;
use std::ffi::{c_int, c_void};

/// cublasLtMatmulAlgo_t: 8 opaque 64-bit words.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Algo {
    data: [u64; 8],
}

/// cublasLtMatmulHeuristicResult_t.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HeuristicResult {
    algo: Algo,
    workspace_size: usize,
    state: Status,
    waves_count: f32,
    reserved: [c_int; 4],
}

/// Marks an algorithm structure this library filled ("SIMGEMM1").
const MAGIC: u64 = 0x5349_4d47_454d_4d31;
/// Algorithm ids: one GEMM kernel family, configured by tile and split.
const ALGO_IDS: i32 = 1;

// cublasLtMatmulAlgoConfigAttributes_t, with their sizes.
const CONFIG_ID: c_int = 0;
const CONFIG_TILE_ID: c_int = 1;
const CONFIG_SPLITK_NUM: c_int = 2;
const CONFIG_REDUCTION_SCHEME: c_int = 3;
const CONFIG_CTA_SWIZZLING: c_int = 4;
const CONFIG_CUSTOM_OPTION: c_int = 5;
const CONFIG_STAGES_ID: c_int = 6;
const CONFIG_INNER_SHAPE_ID: c_int = 7;
const CONFIG_CLUSTER_SHAPE_ID: c_int = 8;

/// Word of the algorithm structure and size in bytes of each config attribute.
fn config_slot(attr: c_int) -> Option<(usize, usize)> {
    match attr {
        CONFIG_ID => Some((1, 4)),
        CONFIG_TILE_ID => Some((2, 4)),
        CONFIG_SPLITK_NUM => Some((3, 4)),
        CONFIG_REDUCTION_SCHEME => Some((4, 4)),
        CONFIG_CTA_SWIZZLING => Some((5, 4)),
        CONFIG_CUSTOM_OPTION => Some((6, 4)),
        CONFIG_STAGES_ID => Some((7, 4)),
        CONFIG_INNER_SHAPE_ID => Some((7, 2)),
        CONFIG_CLUSTER_SHAPE_ID => Some((7, 2)),
        _ => None,
    }
}

/// Bit offset inside a word shared by several attributes.
fn config_shift(attr: c_int) -> u32 {
    match attr {
        CONFIG_INNER_SHAPE_ID => 32,
        CONFIG_CLUSTER_SHAPE_ID => 48,
        _ => 0,
    }
}

/// cublasLtMatmulTile_t values of the tiles the model knows.
const TILES: [([u32; 2], u64); 6] = [
    ([64, 64], 15),
    ([64, 128], 17),
    ([128, 64], 18),
    ([128, 128], 20),
    ([128, 256], 23),
    ([256, 128], 24),
];
const TILE_UNDEFINED: u64 = 0;

fn tile_id(t: [u32; 2]) -> u64 {
    TILES
        .iter()
        .find(|(s, _)| *s == t)
        .map_or(TILE_UNDEFINED, |&(_, id)| id)
}

fn tile_of(id: u64) -> Option<[u32; 2]> {
    TILES.iter().find(|(_, i)| *i == id).map(|&(t, _)| t)
}

/// The types an algorithm was made for, packed into word 0's upper half.
fn type_key(compute: c_int, scale: c_int, t: [c_int; 4]) -> u64 {
    let b = |v: c_int| (v as u64) & 0xff;
    b(compute) | b(scale) << 8 | b(t[0]) << 16 | b(t[1]) << 24 | b(t[2]) << 32 | b(t[3]) << 40
}

impl Algo {
    fn new(key: u64, tile: [u32; 2], split: u32) -> Algo {
        let mut data = [0u64; 8];
        data[0] = MAGIC;
        data[1] = 0; // algorithm id
        data[2] = tile_id(tile);
        data[3] = split as u64;
        data[4] = if split > 1 { 2 } else { 0 }; // reduction scheme: COMPUTE_TYPE when split
        let mut a = Algo { data };
        a.set_key(key);
        a
    }

    // The type key lives in a word no config attribute uses.
    fn key(&self) -> u64 {
        self.data[0] ^ MAGIC
    }

    fn set_key(&mut self, key: u64) {
        self.data[0] = MAGIC ^ key;
    }

    fn valid(&self) -> bool {
        // The magic's upper 16 bits are never touched by a key of 48 bits.
        self.data[0] >> 48 == MAGIC >> 48 && (self.data[1] as i32) < ALGO_IDS
    }

    fn config(&self) -> Result<Option<([u32; 2], u32)>, Status> {
        let split = (self.data[3] as u32).max(1);
        match self.data[2] {
            TILE_UNDEFINED if split == 1 => Ok(None),
            TILE_UNDEFINED => Err(NOT_SUPPORTED),
            id => Ok(Some((tile_of(id).ok_or(NOT_SUPPORTED)?, split))),
        }
    }
}

/// The problem a descriptor and four layouts define, checked.
struct Problem {
    gemm: Gemm,
    key: u64,
    device_scales: bool,
}

fn layout_matrix(l: &Obj, ptr: *const c_void) -> Result<(Matrix, u64), Status> {
    let order = l.int(attrs::LAYOUT_ORDER) as i32;
    if order != attrs::ORDER_COL && order != attrs::ORDER_ROW {
        return Err(NOT_SUPPORTED);
    }
    if l.int(attrs::LAYOUT_PLANE_OFFSET) != 0 || l.int(attrs::LAYOUT_BATCH_MODE) != 0 {
        return Err(NOT_SUPPORTED);
    }
    let m = Matrix {
        ptr: ptr as u64,
        dtype: l.int(attrs::LAYOUT_TYPE) as c_int,
        rows: l.u64(attrs::LAYOUT_ROWS),
        cols: l.u64(attrs::LAYOUT_COLS),
        ld: l.int(attrs::LAYOUT_LD),
        row_major: order == attrs::ORDER_ROW,
        stride: l.int(attrs::LAYOUT_STRIDED_BATCH_OFFSET),
    };
    let need = if m.row_major { m.cols } else { m.rows };
    if m.ld < 0 || (m.ld as u64) < need.max(1) || elem_bytes(m.dtype).is_none() {
        return Err(INVALID_VALUE);
    }
    let batch = l.int(attrs::LAYOUT_BATCH_COUNT);
    if batch < 1 {
        return Err(INVALID_VALUE);
    }
    Ok((m, batch as u64))
}

fn trans(v: i64) -> Result<bool, Status> {
    match v as c_int {
        OP_N => Ok(false),
        OP_T | OP_C => Ok(true),
        _ => Err(INVALID_VALUE),
    }
}

fn problem(
    s: &Sim,
    desc: *const c_void,
    layouts: [*const c_void; 4],
    ptrs: [*const c_void; 4],
) -> Result<Problem, Status> {
    let d = obj(desc, Kind::Desc)?;
    let mut mats = Vec::with_capacity(4);
    for (l, p) in layouts.iter().zip(ptrs) {
        mats.push(layout_matrix(&obj(*l, Kind::Layout)?, p)?);
    }
    let [(a, ba), (b, bb), (c, bc), (dm, bd)] = [mats[0], mats[1], mats[2], mats[3]];
    let (ta, tb) = (
        trans(d.int(attrs::DESC_TRANSA))?,
        trans(d.int(attrs::DESC_TRANSB))?,
    );
    if d.int(attrs::DESC_TRANSC) != OP_N as i64 {
        return Err(NOT_SUPPORTED);
    }
    let (m, ka) = if ta {
        (a.cols, a.rows)
    } else {
        (a.rows, a.cols)
    };
    let (kb, n) = if tb {
        (b.cols, b.rows)
    } else {
        (b.rows, b.cols)
    };
    if ka != kb || (dm.rows, dm.cols) != (m, n) || (c.rows, c.cols) != (m, n) {
        return Err(INVALID_VALUE);
    }
    if ba != bd || bb != bd || bc != bd {
        return Err(INVALID_VALUE);
    }
    if c.dtype != dm.dtype || c.row_major != dm.row_major {
        return Err(NOT_SUPPORTED);
    }
    let compute = d.int(attrs::DESC_COMPUTE_TYPE) as c_int;
    let scale = d.int(attrs::DESC_SCALE_TYPE) as c_int;
    let cmp = gemm::compute_for(
        compute,
        scale,
        (a.dtype, b.dtype),
        c.dtype,
        false,
        s.profile.tensor_tflops.is_some(),
    )?;
    let device_scales = match d.int(attrs::DESC_POINTER_MODE) as c_int {
        POINTER_MODE_HOST => false,
        POINTER_MODE_DEVICE => true,
        // Device vectors of alpha: not simulated.
        2..=4 => return Err(NOT_SUPPORTED),
        _ => return Err(INVALID_VALUE),
    };
    let opt_type = |v: i64| (v >= 0).then_some(v as c_int);
    let epilogue = Epilogue {
        kind: d.int(attrs::DESC_EPILOGUE) as u32,
        bias: d.u64(attrs::DESC_BIAS_POINTER),
        bias_type: opt_type(d.int(attrs::DESC_BIAS_DATA_TYPE)),
        bias_stride: d.int(attrs::DESC_BIAS_BATCH_STRIDE),
        aux: d.u64(attrs::DESC_EPILOGUE_AUX_POINTER),
        aux_ld: d.int(attrs::DESC_EPILOGUE_AUX_LD),
        aux_stride: d.int(attrs::DESC_EPILOGUE_AUX_BATCH_STRIDE),
        aux_type: opt_type(d.int(attrs::DESC_EPILOGUE_AUX_DATA_TYPE)),
    };
    epilogue.validate(m)?;
    // FP8 scaling is not simulated.
    if (17..=21).any(|a| d.u64(a) != 0) {
        return Err(NOT_SUPPORTED);
    }
    let key = type_key(compute, scale, [a.dtype, b.dtype, c.dtype, dm.dtype]);
    Ok(Problem {
        gemm: Gemm {
            m,
            n,
            k: ka,
            batch: bd,
            trans_a: ta,
            trans_b: tb,
            a,
            b,
            c,
            d: dm,
            compute: cmp,
            alpha: None,
            beta: None,
            epilogue,
            workspace: 0,
            workspace_ptr: 0,
            config: None,
        },
        key,
        device_scales,
    })
}

fn null4() -> [*const c_void; 4] {
    [std::ptr::null(); 4]
}

fn result(algo: Algo, e: &GemmEstimate) -> HeuristicResult {
    HeuristicResult {
        algo,
        workspace_size: e.workspace as usize,
        state: SUCCESS,
        waves_count: e.waves,
        reserved: [0; 4],
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatmulAlgoGetHeuristic(
    h: Handle,
    desc: *const c_void,
    a: *const c_void,
    b: *const c_void,
    c: *const c_void,
    d: *const c_void,
    pref: *const c_void,
    requested: c_int,
    results: *mut HeuristicResult,
    returned: *mut c_int,
) -> Status {
    run(|| {
        check_handle(h)?;
        let s = sim().ok_or(NOT_INITIALIZED)?;
        if requested <= 0 || results.is_null() || returned.is_null() {
            return Err(INVALID_VALUE);
        }
        let p = problem(s, desc, [a, b, c, d], null4())?;
        let pref = obj(pref, Kind::Pref)?;
        let max_ws = pref.u64(attrs::PREF_MAX_WORKSPACE_BYTES);
        let max_waves = pref.f32(attrs::PREF_MAX_WAVES_COUNT);
        // Our kernels need only element alignment; a preference below it excludes them all.
        let g = &p.gemm;
        let need = [g.a.esz(), g.b.esz(), g.c.esz(), g.d.esz()];
        let aligned = (0..4)
            .all(|i| pref.int(attrs::PREF_MIN_ALIGNMENT_A_BYTES + i as u32) as usize >= need[i]);
        let mut n = 0usize;
        if aligned {
            let opts = s.profile.gemm_options(&g.shape(), g.compute.math, max_ws);
            for e in opts
                .iter()
                .filter(|e| max_waves <= 0.0 || e.waves <= max_waves)
                .take(requested as usize)
            {
                let algo = Algo::new(p.key, e.tile, e.split_k);
                // SAFETY: results holds `requested` entries (the API's contract); n < requested.
                unsafe { results.add(n).write(result(algo, e)) };
                n += 1;
            }
        }
        // SAFETY: non-null output pointer.
        unsafe { *returned = n as c_int };
        // No configuration fits: the real library answers NOT_SUPPORTED with zero results.
        if n == 0 { Err(NOT_SUPPORTED) } else { Ok(()) }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatmulAlgoInit(
    h: Handle,
    compute: c_int,
    scale: c_int,
    a: c_int,
    b: c_int,
    c: c_int,
    d: c_int,
    id: c_int,
    algo: *mut Algo,
) -> Status {
    run(|| {
        check_handle(h)?;
        let s = sim().ok_or(NOT_INITIALIZED)?;
        if algo.is_null() || !(0..ALGO_IDS).contains(&id) {
            return Err(INVALID_VALUE);
        }
        let tc = s.profile.tensor_tflops.is_some();
        gemm::compute_for(compute, scale, (a, b), c, false, tc)?;
        if c != d {
            return Err(NOT_SUPPORTED);
        }
        let mut al = Algo::new(type_key(compute, scale, [a, b, c, d]), [0, 0], 1);
        al.data[1] = id as u64;
        // SAFETY: non-null output pointer.
        unsafe { algo.write(al) };
        Ok(())
    })
}

fn read_algo(algo: *const Algo) -> Result<Algo, Status> {
    if algo.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: non-null pointer to an algorithm structure (the API's contract).
    let a = unsafe { algo.read() };
    if a.valid() { Ok(a) } else { Err(INVALID_VALUE) }
}

/// The estimate for `p` run with `algo`, and the workspace that needs.
fn with_algo(s: &Sim, p: &mut Problem, algo: &Algo) -> Result<GemmEstimate, Status> {
    if algo.key() != p.key {
        return Err(INVALID_VALUE);
    }
    p.gemm.config = algo.config()?;
    p.gemm.workspace = u64::MAX;
    Ok(p.gemm.estimate(s))
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatmulAlgoCheck(
    h: Handle,
    desc: *const c_void,
    a: *const c_void,
    b: *const c_void,
    c: *const c_void,
    d: *const c_void,
    algo: *const Algo,
    out: *mut HeuristicResult,
) -> Status {
    run(|| {
        check_handle(h)?;
        let s = sim().ok_or(NOT_INITIALIZED)?;
        let al = read_algo(algo)?;
        if out.is_null() {
            return Err(INVALID_VALUE);
        }
        let mut p = problem(s, desc, [a, b, c, d], null4())?;
        let e = with_algo(s, &mut p, &al)?;
        let mut r = result(al, &e);
        // The result's algo field is never updated by a check.
        // SAFETY: non-null pointer to a result structure; its algo may alias `algo`, so only
        // the other fields are written.
        unsafe {
            r.algo = (*out).algo;
            out.write(r);
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatmulAlgoConfigSetAttribute(
    algo: *mut Algo,
    attr: c_int,
    buf: *const c_void,
    size: usize,
) -> Status {
    run(|| {
        let mut al = read_algo(algo)?;
        let (word, n) = config_slot(attr).ok_or(INVALID_VALUE)?;
        // The id is read-only, set by cublasLtMatmulAlgoInit.
        if attr == CONFIG_ID || buf.is_null() || size != n {
            return Err(INVALID_VALUE);
        }
        let mut v = [0u8; 8];
        // SAFETY: buf holds `size` == n readable bytes (checked non-null).
        unsafe { std::ptr::copy_nonoverlapping(buf as *const u8, v.as_mut_ptr(), n) };
        let v = u64::from_le_bytes(v);
        let shift = config_shift(attr);
        let mask = if n == 8 {
            u64::MAX
        } else {
            ((1u64 << (8 * n)) - 1) << shift
        };
        al.data[word] = (al.data[word] & !mask) | (v << shift);
        // SAFETY: non-null pointer to an algorithm structure (read above).
        unsafe { algo.write(al) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatmulAlgoConfigGetAttribute(
    algo: *const Algo,
    attr: c_int,
    buf: *mut c_void,
    size: usize,
    written: *mut usize,
) -> Status {
    run(|| {
        let al = read_algo(algo)?;
        let (word, n) = config_slot(attr).ok_or(INVALID_VALUE)?;
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
        let v = (al.data[word] >> config_shift(attr)).to_le_bytes();
        // SAFETY: buf holds `size` == n writable bytes.
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), buf as *mut u8, n) };
        if !written.is_null() {
            // SAFETY: non-null output pointer.
            unsafe { *written = n };
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtMatmul(
    h: Handle,
    desc: *const c_void,
    alpha: *const c_void,
    a: *const c_void,
    adesc: *const c_void,
    b: *const c_void,
    bdesc: *const c_void,
    beta: *const c_void,
    c: *const c_void,
    cdesc: *const c_void,
    d: *mut c_void,
    ddesc: *const c_void,
    algo: *const Algo,
    workspace: *mut c_void,
    workspace_size: usize,
    stream: *mut c_void,
) -> Status {
    run(|| {
        check_handle(h)?;
        let s = sim().ok_or(NOT_INITIALIZED)?;
        let mut p = problem(s, desc, [adesc, bdesc, cdesc, ddesc], [a, b, c, d])?;
        let what = c"cublasLtMatmul";
        let st = p.gemm.compute.scale;
        p.gemm.alpha = gemm::scalar(s, alpha, p.device_scales, st, what)?;
        p.gemm.beta = gemm::scalar(s, beta, p.device_scales, st, what)?;
        let g = &p.gemm;
        let needs_ab = g.k > 0 && g.alpha != Some(0.0);
        if d.is_null() || (needs_ab && (a.is_null() || b.is_null())) {
            return Err(INVALID_VALUE);
        }
        if g.beta != Some(0.0) && c.is_null() {
            return Err(INVALID_VALUE);
        }
        if workspace.is_null() && workspace_size > 0 {
            return Err(INVALID_VALUE);
        }
        if !algo.is_null() {
            let al = read_algo(algo)?;
            with_algo(s, &mut p, &al)?;
        }
        p.gemm.workspace = workspace_size as u64;
        p.gemm.workspace_ptr = workspace as u64;
        p.gemm.run(s, stream, what)?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_sizes_match_the_header() {
        use cudarc::cublaslt::sys as lt;
        use std::mem::{offset_of, size_of};
        assert_eq!(size_of::<Algo>(), size_of::<lt::cublasLtMatmulAlgo_t>());
        type R = lt::cublasLtMatmulHeuristicResult_t;
        assert_eq!(size_of::<HeuristicResult>(), size_of::<R>());
        assert_eq!(
            offset_of!(HeuristicResult, workspace_size),
            offset_of!(R, workspaceSize)
        );
        assert_eq!(offset_of!(HeuristicResult, state), offset_of!(R, state));
        assert_eq!(
            offset_of!(HeuristicResult, waves_count),
            offset_of!(R, wavesCount)
        );
        use lt::cublasLtMatmulTile_t as T;
        for (t, theirs) in [
            ([64, 64], T::CUBLASLT_MATMUL_TILE_64x64),
            ([64, 128], T::CUBLASLT_MATMUL_TILE_64x128),
            ([128, 64], T::CUBLASLT_MATMUL_TILE_128x64),
            ([128, 128], T::CUBLASLT_MATMUL_TILE_128x128),
            ([128, 256], T::CUBLASLT_MATMUL_TILE_128x256),
            ([256, 128], T::CUBLASLT_MATMUL_TILE_256x128),
        ] {
            assert_eq!(tile_id(t), theirs as u64);
        }
        use lt::cublasLtMatmulAlgoConfigAttributes_t as C;
        assert_eq!(CONFIG_SPLITK_NUM, C::CUBLASLT_ALGO_CONFIG_SPLITK_NUM as i32);
        assert_eq!(
            CONFIG_CLUSTER_SHAPE_ID,
            C::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID as i32
        );
        use lt::cublasLtMatmulDescAttributes_t as D;
        assert_eq!(
            attrs::DESC_EPILOGUE,
            D::CUBLASLT_MATMUL_DESC_EPILOGUE as u32
        );
        assert_eq!(
            attrs::DESC_BIAS_DATA_TYPE,
            D::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE as u32
        );
        use lt::cublasLtMatrixLayoutAttribute_t as L;
        assert_eq!(
            attrs::LAYOUT_BATCH_MODE,
            L::CUBLASLT_MATRIX_LAYOUT_BATCH_MODE as u32
        );
        use lt::cublasLtMatmulPreferenceAttributes_t as P;
        assert_eq!(
            attrs::PREF_IMPL_MASK,
            P::CUBLASLT_MATMUL_PREF_IMPL_MASK as u32
        );
        assert_eq!(
            attrs::PREF_MIN_ALIGNMENT_D_BYTES,
            P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES as u32
        );
    }

    #[test]
    fn algo_words_round_trip_and_keep_the_magic() {
        let k = type_key(COMPUTE_32F, R_32F, [R_32F; 4]);
        let a = Algo::new(k, [128, 64], 4);
        assert!(a.valid());
        assert_eq!(a.key(), k);
        assert_eq!(a.config(), Ok(Some(([128, 64], 4))));
        let b = Algo::new(k, [0, 0], 1);
        assert_eq!(b.config(), Ok(None));
        assert!(!Algo { data: [0; 8] }.valid());
    }
}
