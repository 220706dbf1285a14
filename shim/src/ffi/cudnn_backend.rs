//! cuDNN's backend (graph) API as Marmoset calls it for itself: descriptors it creates,
//! finalizes and destroys, attributes it sets and reads back (descriptor-valued ones into
//! descriptors it creates, as the real library requires), variant packs of its own; and the
//! lives of the program's execution plans, so that a recomputation replays an execution only
//! through the very plan that ran it. μ-cuDNN and recomputation both stand on this.

use super::table;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

type P = *mut c_void;
type C = *const c_void;

// cudnnBackendDescriptorType_t
pub const POINTWISE_DESCRIPTOR: c_int = 0;
pub const CONVOLUTION_DESCRIPTOR: c_int = 1;
pub const ENGINE_DESCRIPTOR: c_int = 2;
pub const ENGINECFG_DESCRIPTOR: c_int = 3;
pub const EXECUTION_PLAN_DESCRIPTOR: c_int = 5;
pub const KNOB_CHOICE_DESCRIPTOR: c_int = 7;
pub const OP_CONV_FWD: c_int = 10;
pub const OP_CONV_BWD_FILTER: c_int = 11;
pub const OP_CONV_BWD_DATA: c_int = 12;
pub const OP_POINTWISE: c_int = 13;
pub const OPERATIONGRAPH_DESCRIPTOR: c_int = 15;
pub const VARIANT_PACK_DESCRIPTOR: c_int = 16;
pub const TENSOR_DESCRIPTOR: c_int = 17;

// cudnnBackendAttributeType_t
pub const TYPE_HANDLE: c_int = 0;
pub const TYPE_DATA_TYPE: c_int = 1;
pub const TYPE_BOOLEAN: c_int = 2;
pub const TYPE_INT64: c_int = 3;
pub const TYPE_FLOAT: c_int = 4;
pub const TYPE_DOUBLE: c_int = 5;
pub const TYPE_VOID_PTR: c_int = 6;
pub const TYPE_BACKEND_DESCRIPTOR: c_int = 15;

// cudnnBackendAttributeName_t
pub const ENGINEHEUR_OPERATION_GRAPH: c_int = 201;
pub const ENGINEHEUR_RESULTS: c_int = 202;
pub const ENGINECFG_ENGINE: c_int = 300;
pub const ENGINECFG_KNOB_CHOICES: c_int = 302;
pub const PLAN_HANDLE: c_int = 400;
pub const PLAN_ENGINE_CONFIG: c_int = 401;
pub const PLAN_WORKSPACE_SIZE: c_int = 402;
pub const OP_PW_DESCRIPTOR: c_int = 750;
pub const OP_PW_X: c_int = 751;
pub const OP_PW_B: c_int = 752;
pub const OP_PW_Y: c_int = 753;
pub const OP_PW_ALPHA1: c_int = 754;
pub const OP_PW_ALPHA2: c_int = 755;
pub const GRAPH_HANDLE: c_int = 800;
pub const GRAPH_OPS: c_int = 801;
pub const TENSOR_BYTE_ALIGNMENT: c_int = 900;
pub const TENSOR_DATA_TYPE: c_int = 901;
pub const TENSOR_DIMENSIONS: c_int = 902;
pub const TENSOR_STRIDES: c_int = 903;
pub const TENSOR_UNIQUE_ID: c_int = 906;
pub const TENSOR_IS_VIRTUAL: c_int = 907;
pub const PACK_UNIQUE_IDS: c_int = 1000;
pub const PACK_DATA_POINTERS: c_int = 1001;
pub const PACK_WORKSPACE: c_int = 1003;
pub const ENGINE_OPERATION_GRAPH: c_int = 1300;
pub const ENGINE_GLOBAL_INDEX: c_int = 1301;

// ==================================================================== descriptors and attributes

pub fn create(ty: c_int) -> Option<usize> {
    let f = table::cudnnBackendCreateDescriptor()?;
    let mut d: P = std::ptr::null_mut();
    // SAFETY: a valid output pointer.
    (unsafe { f(ty, &mut d) } == 0 && !d.is_null()).then_some(d as usize)
}

pub fn destroy(d: usize) {
    super::variant_pack::destroyed(d);
    if let Some(f) = table::cudnnBackendDestroyDescriptor() {
        // SAFETY: d is a descriptor Marmoset created.
        unsafe { f(d as P) };
    }
}

pub fn finalize(d: usize) -> Option<()> {
    let f = table::cudnnBackendFinalize()?;
    // SAFETY: d is a descriptor Marmoset created.
    (unsafe { f(d as P) } == 0).then_some(())
}

/// Sets attribute `name` of `d` to the `n` values of type `ty` at `v`.
pub fn set(d: usize, name: c_int, ty: c_int, n: usize, v: C) -> Option<()> {
    let f = table::cudnnBackendSetAttribute()?;
    // SAFETY: v points to n values of type ty (the callers' contract).
    (unsafe { f(d as P, name, ty, n as i64, v) } == 0).then_some(())
}

pub fn set_desc(d: usize, name: c_int, children: &[usize]) -> Option<()> {
    set(
        d,
        name,
        TYPE_BACKEND_DESCRIPTOR,
        children.len(),
        children.as_ptr() as C,
    )
}

/// The count of an attribute's elements.
pub fn count(d: usize, name: c_int, ty: c_int) -> Option<usize> {
    let get = table::cudnnBackendGetAttribute()?;
    let mut n = -1i64;
    // SAFETY: a count query: a valid count pointer, no array.
    (unsafe { get(d as C, name, ty, 0, &mut n, std::ptr::null_mut()) } == 0 && n >= 0)
        .then_some(n as usize)
}

/// The raw bytes of an attribute of at most `max` elements of `size` bytes each.
pub fn raw(d: usize, name: c_int, ty: c_int, max: usize, size: usize) -> Option<(usize, Vec<u8>)> {
    let get = table::cudnnBackendGetAttribute()?;
    let mut n = 0i64;
    let mut v = vec![0u8; max * size + 8];
    // SAFETY: v holds `max` elements of `size` bytes.
    if unsafe { get(d as C, name, ty, max as i64, &mut n, v.as_mut_ptr() as P) } != 0 {
        return None;
    }
    let n = (n.max(0) as usize).min(max);
    v.truncate(n * size);
    Some((n, v))
}

/// An INT64 attribute of up to 16 elements.
pub fn i64s(d: usize, name: c_int) -> Option<Vec<i64>> {
    let (_, b) = raw(d, name, TYPE_INT64, 16, 8)?;
    Some(
        b.chunks_exact(8)
            .map(|c| i64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
    )
}

pub fn i64_of(d: usize, name: c_int) -> Option<i64> {
    i64s(d, name)?.first().copied()
}

/// Descriptor-valued attributes, read into descriptors of the given types Marmoset creates (the
/// real library fills caller-made descriptors and refuses a type that differs).
pub fn children(d: usize, name: c_int, types: &[c_int]) -> Option<Vec<usize>> {
    let made: Vec<usize> = types.iter().map_while(|&t| create(t)).collect();
    let ok = made.len() == types.len() && {
        let get = table::cudnnBackendGetAttribute()?;
        let mut n = 0i64;
        // SAFETY: `made` holds types.len() descriptors.
        let r = unsafe {
            get(
                d as C,
                name,
                TYPE_BACKEND_DESCRIPTOR,
                made.len() as i64,
                &mut n,
                made.as_ptr() as P,
            )
        };
        r == 0 && n as usize == made.len()
    };
    if !ok {
        made.into_iter().for_each(destroy);
        return None;
    }
    Some(made)
}

pub fn child(d: usize, name: c_int, ty: c_int) -> Option<usize> {
    children(d, name, &[ty])?.first().copied()
}

// ==================================================================== variant packs

/// A finalized variant pack of these unique ids, data pointers and workspace (the caller
/// destroys it); None if cuDNN refuses it.
pub fn pack(ids: &[i64], ptrs: &[i64], ws: i64) -> Option<usize> {
    let d = create(VARIANT_PACK_DESCRIPTOR)?;
    let ok = set(d, PACK_WORKSPACE, TYPE_VOID_PTR, 1, &ws as *const i64 as C).is_some()
        && set(
            d,
            PACK_DATA_POINTERS,
            TYPE_VOID_PTR,
            ptrs.len(),
            ptrs.as_ptr() as C,
        )
        .is_some()
        && set(d, PACK_UNIQUE_IDS, TYPE_INT64, ids.len(), ids.as_ptr() as C).is_some()
        && finalize(d).is_some();
    if !ok {
        destroy(d);
        return None;
    }
    // Kept, as the program's packs are: cuDNN does not give a pack's ids back.
    super::variant_pack::made(
        d,
        super::variant_pack::Pack {
            uids: ids.to_vec(),
            ptrs: ptrs.iter().map(|&p| p as u64).collect(),
            workspace: Some(ws as u64),
        },
    );
    Some(d)
}

/// Executes the program's execution plan `plan` again on handle `h` (its stream set), with a
/// variant pack of Marmoset's own: the unique ids, the current pointers, a workspace.
pub fn replay_execute(
    h: usize,
    plan: usize,
    ids: &[i64],
    ptrs: &[i64],
    ws: i64,
) -> Result<(), String> {
    let exec = table::cudnnBackendExecute().ok_or("cuDNN has no cudnnBackendExecute")?;
    let d = pack(ids, ptrs, ws).ok_or("building the variant pack failed")?;
    // SAFETY: h is Marmoset's cuDNN handle, plan the program's execution plan (alive: its life
    // checked by the caller), d the variant pack finalized here.
    let r = unsafe { exec(h as P, plan as P, d as P) };
    destroy(d);
    match r {
        0 => Ok(()),
        r => Err(format!("cudnnBackendExecute returned {r}")),
    }
}

// ==================================================================== the lives of plans

/// Execution plans by address: how many were created there, and whether the last is alive.
static LIVES: Mutex<Option<HashMap<usize, (u64, bool)>>> = Mutex::new(None);

/// After a successful cudnnBackendCreateDescriptor of the program's: an execution plan at `d`
/// begins a new life.
pub fn created(ty: c_int, d: usize) {
    if ty == EXECUTION_PLAN_DESCRIPTOR
        && let Ok(mut g) = LIVES.lock()
    {
        let l = g
            .get_or_insert_with(HashMap::new)
            .entry(d)
            .or_insert((0, false));
        *l = (l.0 + 1, true);
    }
}

/// Before the program's cudnnBackendDestroyDescriptor: the life of a plan at `d` ends (the
/// address may be reused for another descriptor).
pub fn destroyed(d: usize) {
    if let Ok(mut g) = LIVES.lock()
        && let Some(l) = g.as_mut().and_then(|m| m.get_mut(&d))
    {
        l.1 = false;
    }
}

/// The `life` of the execution plan at `plan` (see `planner::trace::Replay::Backend`): None when
/// it was destroyed, or created before Marmoset was loaded.
pub fn plan_life(plan: usize) -> Option<u64> {
    let g = LIVES.lock().ok()?;
    g.as_ref()?
        .get(&plan)
        .and_then(|&(life, alive)| alive.then_some(life))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan is replayable through its address only in the life it was recorded in: destroyed,
    /// it is none; made again at the same address, it is a new life.
    #[test]
    fn an_execution_plan_address_has_lives() {
        let at = 0x7f00_dead_0000usize;
        assert_eq!(plan_life(at), None, "never made");
        created(EXECUTION_PLAN_DESCRIPTOR, at);
        assert_eq!(plan_life(at), Some(1));
        // Other descriptors at other addresses do not count.
        created(TENSOR_DESCRIPTOR, at + 8);
        destroyed(at + 8);
        assert_eq!(plan_life(at), Some(1));
        destroyed(at);
        assert_eq!(plan_life(at), None, "destroyed");
        // A tensor descriptor made at the freed address is no plan.
        created(TENSOR_DESCRIPTOR, at);
        assert_eq!(plan_life(at), None);
        destroyed(at);
        created(EXECUTION_PLAN_DESCRIPTOR, at);
        assert_eq!(plan_life(at), Some(2), "another plan at the same address");
    }
}
