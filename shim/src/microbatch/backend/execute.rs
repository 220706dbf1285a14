//! Execution of a planned graph: its micro-batches through plans Marmoset builds, the variant
//! pack's pointers offset by whole images, on the caller's handle; in the caller's workspace (WR),
//! in the graph's segment of WD's shared one, or in the joint plan's lent buffer.

use super::super::joint::Chosen;
use super::{Graph, P, plans};
use crate::core::config::Level;
use crate::core::state::{config, log};
use crate::ffi::cudnn_backend::{
    PACK_DATA_POINTERS, PACK_UNIQUE_IDS, PACK_WORKSPACE, TYPE_INT64, TYPE_VOID_PTR, count, destroy,
    pack, raw,
};
use crate::ffi::table;
use std::cell::Cell;
use std::ffi::c_int;

thread_local! {
    /// Set while a replay (recomputation) of an execution runs through [`execute_replay`].
    static REPLAYING: Cell<bool> = const { Cell::new(false) };
}

use super::super::elem_bytes;

/// The micro-batches of the configuration in force: (images, engine). The test facility's
/// size with the caller's engine, else WR's configuration. None: the caller's plan as it is.
fn parts(g: &Graph) -> Option<Vec<(i64, i64)>> {
    let out: Vec<(i64, i64)> = match config().test_microbatch {
        Some(b) => {
            let b = b as i64;
            let mut out = Vec::new();
            let mut left = g.n;
            while left > 0 {
                out.push((b.min(left), g.engine));
                left -= b.min(left);
            }
            out
        }
        None => g
            .config
            .as_ref()?
            .parts
            .iter()
            .map(|&(b, e)| (b as i64, e as i64))
            .collect(),
    };
    (out.len() > 1 || out.first().is_some_and(|p| p.1 != g.engine)).then_some(out)
}

/// A variant pack with the caller's pointers, those of per-image tensors offset by `start` images.
pub(super) fn pack_at(g: &Graph, ids: &[i64], ptrs: &[i64], ws: i64, start: i64) -> Option<usize> {
    let moved: Vec<i64> = ids
        .iter()
        .zip(ptrs)
        .map(|(uid, &p)| match g.tensors.iter().find(|t| t.uid == *uid) {
            Some(t) if t.batched && p != 0 => p + start * t.strides[0] * elem_bytes(t.dtype) as i64,
            _ => p,
        })
        .collect();
    pack(ids, &moved, ws)
}

/// The caller's variant pack: (unique ids, data pointers, workspace).
fn read_pack(pack: usize) -> Option<(Vec<i64>, Vec<i64>, i64)> {
    // As it was filled; read back from cuDNN only where Marmoset did not see it made.
    if let Some(p) = crate::ffi::variant_pack::contents(pack).filter(|p| !p.uids.is_empty()) {
        let ptrs = p.ptrs.iter().map(|&x| x as i64).collect::<Vec<_>>();
        return (ptrs.len() == p.uids.len())
            .then(|| (p.uids, ptrs, p.workspace.unwrap_or(0) as i64));
    }
    let ids = i64s_n(pack, PACK_UNIQUE_IDS)?;
    let (_, pb) = raw(pack, PACK_DATA_POINTERS, TYPE_VOID_PTR, ids.len(), 8)?;
    let ptrs: Vec<i64> = pb
        .chunks_exact(8)
        .map(|c| i64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    if ptrs.len() != ids.len() {
        return None;
    }
    let ws = raw(pack, PACK_WORKSPACE, TYPE_VOID_PTR, 1, 8)
        .and_then(|(n, b)| (n == 1).then(|| i64::from_ne_bytes(b.try_into().unwrap_or([0; 8]))))
        .unwrap_or(0);
    Some((ids, ptrs, ws))
}

/// The micro-batches to run and the workspace they run in: (parts, workspace address, bytes,
/// the joint plan's buffer pinned while they are issued).
type Schedule = (Vec<(i64, i64)>, Option<i64>, i64, Option<Chosen>);

/// WD: the graph's share of the knapsack (its segment of the shared workspace), or, without a
/// share, its configuration that needs no workspace.
fn wd_schedule(g: &Graph) -> Option<Schedule> {
    let (c, at) = match super::super::wd_assignment(&super::super::Kernel::Graph(g.key.clone())) {
        Some((c, segment)) => (c, segment as i64),
        None => (super::super::without_workspace(&g.front)?, 0),
    };
    let parts = c.parts.iter().map(|&(b, e)| (b as i64, e as i64)).collect();
    Some((parts, Some(at), c.workspace as i64, None))
}

/// The joint plan: the fastest configuration whose workspace is spare now (a replay: the one
/// its execution ran), in the lent buffer.
fn joint_schedule(g: &Graph, h: P, plan: usize, ptrs: &[i64]) -> Option<Schedule> {
    // The execution's pointers in any order (a replay's pack lists them as recorded).
    let mut ptrs = ptrs.to_vec();
    ptrs.sort_unstable();
    let ptrs = &ptrs[..];
    let again = if REPLAYING.with(Cell::get) {
        super::super::joint::ran_before(plan, ptrs)
    } else {
        None
    };
    let stream = super::super::joint::stream_of(h);
    let own = g.config.as_ref().map_or(0, |c| c.workspace);
    let chosen = super::super::joint::choose(&g.front, stream, again.as_deref(), own)?;
    super::super::joint::ran(plan, ptrs, &chosen.config.parts);
    let parts = chosen
        .config
        .parts
        .iter()
        .map(|&(b, e)| (b as i64, e as i64))
        .collect();
    if chosen.in_caller {
        return Some((parts, None, own as i64, None));
    }
    let at = chosen.workspace.as_ref().map_or(0, |p| p.ptr() as i64);
    let bytes = chosen.config.workspace as i64;
    Some((parts, Some(at), bytes, Some(chosen)))
}

/// The caller's plan undivided when micro-batching cannot run. Under WD the caller was told its
/// plan needs no workspace: it runs in the shared one when its own need fits there. None: run
/// the caller's call exactly as asked.
fn undivided(g: &Graph, h: P, plan: usize, pack: usize) -> Option<c_int> {
    if !g.own_workspace() || g.workspace <= 0 {
        return None;
    }
    let (ids, ptrs, _) = read_pack(pack)?;
    if g.joint() {
        // The caller's plan alone, in the lent buffer.
        let own = planner::microbatch::Configuration {
            parts: vec![(g.n as u64, g.engine as i32)],
            time_ms: 0.0,
            workspace: g.workspace as u64,
        };
        let stream = super::super::joint::stream_of(h);
        let chosen = super::super::joint::choose(&[own], stream, None, 0)?;
        let at = chosen.workspace.as_ref().map_or(0, |p| p.ptr() as i64);
        let vp = pack_at(g, &ids, &ptrs, at, 0)?;
        let exec = table::cudnnBackendExecute()?;
        // SAFETY: the caller's handle, plan and pointers; the workspace is the joint plan's
        // buffer, pinned, at least as large as the plan's.
        let r = unsafe { exec(h, plan as P, vp as P) };
        destroy(vp);
        drop(chosen);
        return Some(r);
    }
    let (pool, size) = super::super::wd_pool();
    if pool == 0 || (size as i64) < g.workspace {
        log(
            Level::Error,
            "backend: WD's shared workspace cannot hold the caller's plan; it runs as asked",
        );
        return None;
    }
    let vp = pack_at(g, &ids, &ptrs, pool as i64, 0)?;
    let exec = table::cudnnBackendExecute()?;
    // SAFETY: the caller's handle, plan and pointers; the workspace is Marmoset's shared one,
    // at least as large as the plan's.
    let r = unsafe { exec(h, plan as P, vp as P) };
    destroy(vp);
    Some(r)
}

/// cudnnBackendExecute of a recognised plan as micro-batches. None: run the caller's plan
/// undivided, as asked (nothing was written).
pub fn execute(h: P, plan: usize, pack: usize) -> Option<c_int> {
    if !crate::core::state::active() || !config().microbatching() {
        return None;
    }
    let g = plans(|p| p.get(&plan).cloned())??;
    // The variant pack, read once: the joint plan's choice needs its pointers first.
    let mut packed = None;
    let schedule = if g.wd() {
        wd_schedule(&g)
    } else if g.joint() {
        let read = packed.insert(read_pack(pack)?);
        match joint_schedule(&g, h, plan, &read.1) {
            // The caller's own plan in the caller's workspace: its call, as asked.
            Some((p, None, own, _)) if p == [(g.n, g.engine)] => {
                if crate::core::state::logs(Level::Info) {
                    log(
                        Level::Info,
                        &format!(
                            "backend: a {:?} graph ({} images) runs as asked; joint: {own} B of the caller's",
                            g.dir, g.n
                        ),
                    );
                }
                return None;
            }
            s => s,
        }
    } else {
        // The workspace the caller was told to provide.
        parts(&g).map(|p| {
            let provided = g
                .config
                .as_ref()
                .map_or(g.workspace, |c| c.workspace as i64);
            (p, None, provided, None)
        })
    };
    let Some((sizes, ws_at, provided, _pinned)) = schedule else {
        return undivided(&g, h, plan, pack);
    };
    let exec = table::cudnnBackendExecute()?;
    // Every plan first: a failure here leaves the caller's plan to run undivided.
    let mut steps = Vec::new();
    for (i, &(b, engine)) in sizes.iter().enumerate() {
        let accumulate = g.dir == super::super::Dir::BwdFilter && i > 0;
        // The whole batch on the caller's engine (WD's choice can be that): the caller's plan.
        let built = if b == g.n && engine == g.engine && !accumulate {
            Some((plan, g.workspace))
        } else {
            g.micro_plan(b, engine, accumulate)
        };
        let Some((p, ws)) = built else {
            return undivided(&g, h, plan, pack);
        };
        if ws > provided {
            log(
                Level::Debug,
                "backend: a micro-batch plan needs more workspace than it was given; undivided",
            );
            return undivided(&g, h, plan, pack);
        }
        steps.push((b, p));
    }
    let Some((ids, ptrs, caller_ws)) = packed.or_else(|| read_pack(pack)) else {
        return undivided(&g, h, plan, pack);
    };
    let ws = ws_at.unwrap_or(caller_ws);
    let mut start = 0;
    for (i, &(b, p)) in steps.iter().enumerate() {
        let Some(vp) = pack_at(&g, &ids, &ptrs, ws, start) else {
            if i == 0 {
                return undivided(&g, h, plan, pack);
            }
            return Some(4000); // CUDNN_STATUS_INTERNAL_ERROR: part of the output is written.
        };
        // SAFETY: the caller's handle; a plan and a variant pack Marmoset built, whose pointers
        // lie within the caller's tensors (offset by whole images of the mini-batch) and whose
        // workspace is the caller's or WD's segment, as large as the plan needs.
        let r = unsafe { exec(h, p as P, vp as P) };
        destroy(vp);
        if r != 0 {
            if i == 0 {
                log(
                    Level::Warn,
                    &format!("backend: a micro-batch failed ({r}); running the plan undivided"),
                );
                return undivided(&g, h, plan, pack);
            }
            log(
                Level::Error,
                &format!("backend: micro-batch {i} failed ({r}) after earlier ones wrote"),
            );
            return Some(r);
        }
        start += b;
    }
    log(
        Level::Info,
        &format!(
            "backend: ran a {:?} graph ({} operations, {} images) as {} micro-batches ((images, engine): {:?}; the caller's engine {}{})",
            g.dir,
            g.ops.len(),
            g.n,
            sizes.len(),
            sizes,
            g.engine,
            match ws_at {
                Some(at) if g.wd() => format!("; WD: {provided} B at {at:#x}"),
                Some(at) if g.joint() => format!("; joint: {provided} B lent at {at:#x}"),
                None if g.joint() => format!("; joint: {provided} B of the caller's"),
                _ => String::new(),
            }
        ),
    );
    Some(0)
}

/// [`execute`] for a replay of an execution (recomputation): the joint plan runs the
/// configuration that execution ran, so that the replay rebuilds the same bits.
pub fn execute_replay(h: P, plan: usize, pack: usize) -> Option<c_int> {
    REPLAYING.with(|r| r.set(true));
    let out = execute(h, plan, pack);
    REPLAYING.with(|r| r.set(false));
    out
}

/// An INT64 attribute of any length.
fn i64s_n(d: usize, name: c_int) -> Option<Vec<i64>> {
    let n = count(d, name, TYPE_INT64)?;
    let (_, b) = raw(d, name, TYPE_INT64, n, 8)?;
    Some(
        b.chunks_exact(8)
            .map(|c| i64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
    )
}
