//! Moving tensors between the simulated device and dense host vectors, and timing.

use crate::*;

// ==================================================================== moving tensors

/// Reads a float tensor into a dense logical-order vector.
pub fn load(s: &Sim, t: &Tensor, ptr: *const c_void, what: &CStr) -> Result<Vec<f32>, Status> {
    let ext = extent(t);
    if ptr.is_null() {
        return Err(BAD_PARAM_NULL_POINTER);
    }
    if !data_mode(s) {
        // SAFETY: resolved from the simulated driver; checks the range only.
        drv(unsafe { (s.check)(ptr as u64, ext * 4, what.as_ptr()) })?;
        return Ok(Vec::new());
    }
    let mut raw = vec![0f32; ext];
    // SAFETY: raw holds ext * 4 writable bytes.
    drv(unsafe {
        (s.read)(
            ptr as u64,
            raw.as_mut_ptr() as *mut u8,
            ext * 4,
            what.as_ptr(),
        )
    })?;
    if row_major(t) && count(t) == ext {
        // Logical order already: data mode's cost is mostly here for large tensors.
        return Ok(raw);
    }
    let mut dense = Vec::with_capacity(count(t));
    walk(t, |off| dense.push(raw[off]));
    Ok(dense)
}

/// Writes a dense logical-order vector into a float tensor (strided gaps keep their bytes).
pub fn store(
    s: &Sim,
    t: &Tensor,
    ptr: *mut c_void,
    dense: &[f32],
    what: &CStr,
) -> Result<(), Status> {
    let ext = extent(t);
    if ptr.is_null() {
        return Err(BAD_PARAM_NULL_POINTER);
    }
    if !data_mode(s) {
        // SAFETY: resolved from the simulated driver; checks the range only.
        return drv(unsafe { (s.check)(ptr as u64, ext * 4, what.as_ptr()) });
    }
    if row_major(t) && dense.len() == ext {
        // SAFETY: dense holds ext * 4 readable bytes.
        return drv(unsafe {
            (s.write)(
                ptr as u64,
                dense.as_ptr() as *const u8,
                ext * 4,
                what.as_ptr(),
            )
        });
    }
    let mut raw = vec![0f32; ext];
    if count(t) != ext {
        // SAFETY: raw holds ext * 4 writable bytes.
        drv(unsafe {
            (s.read)(
                ptr as u64,
                raw.as_mut_ptr() as *mut u8,
                ext * 4,
                what.as_ptr(),
            )
        })?;
    }
    let mut i = 0;
    walk(t, |off| {
        raw[off] = dense[i];
        i += 1;
    });
    // SAFETY: raw holds ext * 4 readable bytes.
    drv(unsafe {
        (s.write)(
            ptr as u64,
            raw.as_ptr() as *const u8,
            ext * 4,
            what.as_ptr(),
        )
    })
}

/// Whether the tensor is packed in logical (row-major over dims) order, so that its memory is
/// its dense vector.
fn row_major(t: &Tensor) -> bool {
    let mut acc = 1;
    for i in (0..t.nb).rev() {
        if t.dims[i] != 1 && t.strides[i] != acc {
            return false;
        }
        acc *= t.dims[i];
    }
    true
}

/// Calls `f(offset)` for each element in logical (row-major over dims) order.
pub fn walk(t: &Tensor, mut f: impl FnMut(usize)) {
    let nb = t.nb;
    let mut idx = [0i64; 8];
    let total = count(t);
    for _ in 0..total {
        let off: i64 = (0..nb).map(|i| idx[i] * t.strides[i]).sum();
        f(off as usize);
        for i in (0..nb).rev() {
            idx[i] += 1;
            if idx[i] < t.dims[i] {
                break;
            }
            idx[i] = 0;
        }
    }
}

/// The filter as a tensor: KCRS packed, or KRSC packed for the NHWC filter format.
pub fn filter_tensor(f: &Filter) -> Tensor {
    let dims = &f.dims[..f.nb];
    let strides = packed_strides(
        dims,
        if f.format == TENSOR_NHWC {
            TENSOR_NHWC
        } else {
            TENSOR_NCHW
        },
    );
    let mut t = Tensor {
        dtype: f.dtype,
        nb: f.nb,
        dims: [1; 8],
        strides: [1; 8],
    };
    t.dims[..f.nb].copy_from_slice(dims);
    t.strides[..f.nb].copy_from_slice(&strides);
    t
}

pub fn require_float(ts: &[c_int]) -> Result<(), Status> {
    if ts.iter().all(|&t| t == DATA_FLOAT) {
        Ok(())
    } else {
        Err(NOT_SUPPORTED_DATA_TYPE)
    }
}

pub fn same_dims(a: &Tensor, b: &Tensor) -> Result<(), Status> {
    if a.nb == b.nb && a.dims[..a.nb] == b.dims[..b.nb] {
        Ok(())
    } else {
        Err(BAD_PARAM)
    }
}

pub fn submit(s: &Sim, h: Handle, seconds: f64, sync: bool) -> Result<(), Status> {
    let stream = handle_stream(h)?;
    // SAFETY: resolved from the simulated driver with this signature.
    drv(unsafe { (s.submit)(stream, seconds, sync as c_int) })
}
pub fn set_tensor(d: Handle, dtype: c_int, dims: &[i64], strides: &[i64]) -> Result<(), Status> {
    if !matches!(get(d)?, Obj::Tensor(_)) {
        return Err(BAD_PARAM);
    }
    if !(3..=8).contains(&dims.len())
        || dims.iter().any(|&v| v <= 0)
        || strides.iter().any(|&v| v <= 0)
    {
        return Err(BAD_PARAM);
    }
    if !(0..=14).contains(&dtype) {
        return Err(BAD_PARAM);
    }
    let mut t = Tensor {
        dtype,
        nb: dims.len(),
        dims: [1; 8],
        strides: [1; 8],
    };
    t.dims[..dims.len()].copy_from_slice(dims);
    t.strides[..dims.len()].copy_from_slice(strides);
    set(d, Obj::Tensor(Some(t)));
    Ok(())
}

/// Packed strides for `dims` in NCHW (row-major) or NHWC (channels last) order.
pub fn packed_strides(dims: &[i64], format: c_int) -> Vec<i64> {
    let n = dims.len();
    let mut order: Vec<usize> = (0..n).collect();
    if format == TENSOR_NHWC {
        order = std::iter::once(0)
            .chain(2..n)
            .chain(std::iter::once(1))
            .collect();
    }
    let mut strides = vec![0; n];
    let mut acc = 1;
    for &i in order.iter().rev() {
        strides[i] = acc;
        acc *= dims[i];
    }
    strides
}

pub fn elem_size(dtype: c_int) -> usize {
    match dtype {
        1 | 10 => 8,
        2 | 9 => 2,
        3 | 6 | 11 | 12 | 13 => 1,
        _ => 4,
    }
}

/// Elements from the first to one past the last addressed by the descriptor.
pub fn extent(t: &Tensor) -> usize {
    1 + (0..t.nb)
        .map(|i| ((t.dims[i] - 1) * t.strides[i]) as usize)
        .sum::<usize>()
}

pub fn count(t: &Tensor) -> usize {
    t.dims[..t.nb].iter().product::<i64>() as usize
}
/// Time of an elementwise pass over `elems` floats reading `reads` and writing one tensor.
pub fn elementwise_time(s: &Sim, elems: usize, tensors: usize) -> f64 {
    let bytes = (4 * elems * tensors) as f64;
    s.profile.kernel_time(4.0 * elems as f64, bytes, 1.0, false)
}
