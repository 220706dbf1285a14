//! Handles and legacy descriptors: what they hold, and the registry of live ones (by address),
//! shared by the sub-libraries (see `shared`).

use crate::*;
use std::collections::HashMap;

// ==================================================================== descriptors

#[derive(Debug, Clone, Copy)]
pub struct Tensor {
    pub dtype: c_int,
    pub nb: usize,
    pub dims: [i64; 8],
    pub strides: [i64; 8],
}

#[derive(Debug, Clone, Copy)]
pub struct Filter {
    pub dtype: c_int,
    pub format: c_int,
    pub nb: usize,
    pub dims: [i64; 8],
}

#[derive(Debug, Clone, Copy)]
pub struct ConvDesc {
    pub nb: usize,
    pub pad: [i64; 3],
    pub stride: [i64; 3],
    pub dil: [i64; 3],
    pub mode: c_int,
    pub compute: c_int,
    pub groups: i64,
    pub math: c_int,
}

#[derive(Debug, Clone, Copy)]
pub struct Activation {
    pub mode: c_int,
    pub coef: f64,
}

#[derive(Debug, Clone, Copy)]
pub struct PoolDesc {
    pub mode: c_int,
    pub nb: usize,
    pub window: [i64; 3],
    pub pad: [i64; 3],
    pub stride: [i64; 3],
}

#[derive(Debug, Clone, Copy)]
pub enum Obj {
    Handle { stream: usize },
    Tensor(Option<Tensor>),
    Filter(Option<Filter>),
    Conv(ConvDesc),
    Activation(Activation),
    Pool(Option<PoolDesc>),
}

/// Live handles and descriptors, by address: an unknown or destroyed one is CUDNN_STATUS_BAD_PARAM
/// rather than undefined behaviour.
pub fn objs() -> std::sync::MutexGuard<'static, HashMap<usize, Obj>> {
    crate::shared::shared()
        .objs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

pub fn create(out: *mut Handle, o: Obj) -> Status {
    if out.is_null() {
        return BAD_PARAM_NULL_POINTER;
    }
    let addr = Box::into_raw(Box::new(0u64)) as usize;
    objs().insert(addr, o);
    // SAFETY: non-null output pointer.
    unsafe { *out = addr as Handle };
    SUCCESS
}

pub fn destroy(h: Handle) -> Status {
    match objs().remove(&(h as usize)) {
        Some(_) => {
            // SAFETY: the address came from Box::into_raw in `create` and is removed once.
            drop(unsafe { Box::from_raw(h as *mut u64) });
            SUCCESS
        }
        None => BAD_PARAM,
    }
}

pub fn get(h: *const c_void) -> Result<Obj, Status> {
    objs().get(&(h as usize)).copied().ok_or(BAD_PARAM)
}

pub fn set(h: Handle, o: Obj) {
    objs().insert(h as usize, o);
}

pub fn tensor(h: *const c_void) -> Result<Tensor, Status> {
    match get(h)? {
        Obj::Tensor(Some(t)) => Ok(t),
        _ => Err(BAD_PARAM),
    }
}

pub fn filter(h: *const c_void) -> Result<Filter, Status> {
    match get(h)? {
        Obj::Filter(Some(f)) => Ok(f),
        _ => Err(BAD_PARAM),
    }
}

pub fn conv_desc(h: *const c_void) -> Result<ConvDesc, Status> {
    match get(h)? {
        Obj::Conv(c) => Ok(c),
        _ => Err(BAD_PARAM),
    }
}

pub fn handle_stream(h: Handle) -> Result<Handle, Status> {
    match get(h)? {
        Obj::Handle { stream } => Ok(stream as Handle),
        _ => Err(BAD_PARAM),
    }
}
