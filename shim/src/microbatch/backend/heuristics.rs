//! The framework's heuristics, answered so that its choice is Marmoset's plan: cuDNN's own engine
//! configurations for a graph Marmoset plans, the one whose engine Marmoset's configuration runs
//! first moved to the front.

use super::{C, P, from_graph, plan_graph};
use crate::core::config::Level;
use crate::core::state::{config, log};
use crate::ffi::cudnn_backend::{
    ENGINE_DESCRIPTOR, ENGINE_GLOBAL_INDEX, ENGINECFG_DESCRIPTOR, ENGINECFG_ENGINE,
    ENGINEHEUR_OPERATION_GRAPH, ENGINEHEUR_RESULTS, OPERATIONGRAPH_DESCRIPTOR,
    TYPE_BACKEND_DESCRIPTOR, child, children, count, create, destroy, i64_of,
};
use crate::ffi::table;
use std::ffi::c_int;

/// `cudnnBackendGetAttribute(heuristics, ENGINEHEUR_RESULTS, ...)` of a graph Marmoset plans: the
/// engine configurations in cuDNN's order, except that the one whose engine Marmoset's
/// configuration runs first comes first, so that the framework's choice (the first that works)
/// is Marmoset's plan. The results are cuDNN's own, permuted by handing the real call the
/// caller's descriptors in another order. None: pass through unchanged.
pub fn heuristic_results(
    heur: usize,
    name: c_int,
    ty: c_int,
    req: i64,
    n: *mut i64,
    v: P,
) -> Option<c_int> {
    if name != ENGINEHEUR_RESULTS
        || ty != TYPE_BACKEND_DESCRIPTOR
        || req < 1
        || v.is_null()
        || !crate::core::state::active()
        || !config().microbatching()
        || (config().test_microbatch.is_some() && !super::super::wd_mode())
    {
        return None;
    }
    let total = count(heur, ENGINEHEUR_RESULTS, TYPE_BACKEND_DESCRIPTOR)?;
    if total < 2 {
        return None;
    }
    // cuDNN's order: each result's engine.
    let cfgs = children(heur, ENGINEHEUR_RESULTS, &vec![ENGINECFG_DESCRIPTOR; total])?;
    let engines: Vec<Option<i64>> = cfgs
        .iter()
        .map(|&c| {
            let e = child(c, ENGINECFG_ENGINE, ENGINE_DESCRIPTOR)?;
            let i = i64_of(e, ENGINE_GLOBAL_INDEX);
            destroy(e);
            i
        })
        .collect();
    cfgs.into_iter().for_each(destroy);
    let first = (*engines.first()?)?;
    let graph = child(heur, ENGINEHEUR_OPERATION_GRAPH, OPERATIONGRAPH_DESCRIPTOR)?;
    let g = from_graph(graph, first, Vec::new(), None, 0);
    destroy(graph);
    let g = g?;
    let planned = plan_graph(&g, "heuristics planned");
    g.release();
    let want = planned?.wr?.parts.first()?.1 as i64;
    let at = engines.iter().position(|&e| e == Some(want))?;
    if at == 0 {
        return None;
    }
    // Result j goes to slot[j]: the caller's descriptor i receives result order[i].
    let mut order: Vec<usize> = vec![at];
    order.extend((0..total).filter(|&j| j != at));
    let req = req as usize;
    // SAFETY: v holds `req` descriptors (the API's contract).
    let caller: &[usize] = unsafe { std::slice::from_raw_parts(v as *const usize, req) };
    let mut extra = Vec::new();
    let mut slots = vec![0usize; total];
    for (i, &j) in order.iter().enumerate() {
        slots[j] = if i < req {
            caller[i]
        } else {
            let d = create(ENGINECFG_DESCRIPTOR)?;
            extra.push(d);
            d
        };
    }
    let get = table::cudnnBackendGetAttribute()?;
    let mut got = 0i64;
    // SAFETY: `slots` holds `total` engine-configuration descriptors, the caller's and Marmoset's.
    let r = unsafe {
        get(
            heur as C,
            ENGINEHEUR_RESULTS,
            TYPE_BACKEND_DESCRIPTOR,
            total as i64,
            &mut got,
            slots.as_mut_ptr() as P,
        )
    };
    extra.into_iter().for_each(destroy);
    if r == 0 && !n.is_null() {
        // SAFETY: n, when given, points to one INT64 (the API's contract).
        unsafe { *n = got.min(req as i64) };
    }
    log(
        Level::Debug,
        &format!(
            "backend: heuristics: engine {want} (cuDNN's result {at}) answered first for a {:?} graph of {} images",
            g.dir, g.n
        ),
    );
    Some(r)
}
