//! Planning of recognised backend graphs, at finalisation (and for heuristic queries): every
//! engine measured at each micro-batch size of the policy on plans Marmoset builds (scratch
//! buffers, a scratch workspace of what those plans need within the limit, events on the
//! handle's stream), kept in the
//! benchmark database; then WR's dynamic program picks the configuration and the plan's
//! workspace-size query answers its workspace, or, under WD, the desirable set goes to the
//! knapsack and the query answers 0.

use super::super::{cached, dev_alloc, dev_free, elem_bytes, remember, scratch_workspace};
use super::{Graph, P, Value, pack_at, plans};
use crate::core::config::Level;
use crate::core::state::{config, log};
use crate::ffi::cudnn_backend::{
    ENGINE_DESCRIPTOR, ENGINE_OPERATION_GRAPH, ENGINECFG_DESCRIPTOR, ENGINECFG_ENGINE,
    OPERATIONGRAPH_DESCRIPTOR, PLAN_ENGINE_CONFIG, child, destroy, i64_of, raw,
};
use crate::ffi::{last_error, table};
use planner::microbatch::{Configuration, Micro, Sizes, desirable, fastest};
use std::ffi::c_int;

/// The workspace-size query of a planned plan: its configuration's workspace (WR), or 0 (WD:
/// the graph runs in Marmoset's shared workspace).
pub fn workspace_answer(plan: usize) -> Option<i64> {
    let g = plans(|p| p.get(&plan).cloned())??;
    if g.wd() {
        return Some(0);
    }
    Some(g.config.as_ref()?.workspace as i64)
}

/// What planning at finalisation found: WR's configuration (under WD: the fastest within the
/// total), WD's desirable set (empty under WR) and the graph's database key.
pub(super) struct Planned {
    pub wr: Option<Configuration>,
    pub front: Vec<Configuration>,
    pub key: String,
}

/// The database key of a graph: its operations, tensors, the caller's engine and knob choices,
/// where it runs and what the benchmark was allowed.
fn key(g: &Graph, limit: u64, sizes: &str) -> String {
    let ops: Vec<String> = g
        .ops
        .iter()
        .map(|o| {
            let attrs: Vec<String> = o
                .attrs
                .iter()
                .map(|(n, v)| match v {
                    Value::Scalar(t, b) => format!("{n}:{t}:{b:?}"),
                    // Descriptors Marmoset holds copies of: their settings are in the tensors'
                    // shapes (convolution geometry shows in x, w and y) and the mode lists.
                    Value::Desc(_) => format!("{n}:desc"),
                    Value::Tensor(i) => format!("{n}:t{i}"),
                })
                .collect();
            format!("{}[{}]", o.ty, attrs.join(","))
        })
        .collect();
    // The caller's knob choices as (type, value): they shape its engine's measurements.
    let knobs: Vec<(i64, i64)> = g
        .knobs
        .iter()
        .map(|&k| {
            let ty = raw(k, 600, 9, 1, 4)
                .map(|(_, b)| c_int::from_ne_bytes(b.try_into().unwrap_or([0; 4])) as i64)
                .unwrap_or(-1);
            (ty, i64_of(k, 601).unwrap_or(-1))
        })
        .collect();
    format!(
        "backend|{:?}|ops={}|tensors={:?}|engine={}|knobs={:?}|{}|cudnn={}|limit={limit}|sizes={sizes}",
        g.dir,
        ops.join(";"),
        g.tensors
            .iter()
            .map(|t| (t.uid, t.dtype, &t.dims, &t.strides, t.batched))
            .collect::<Vec<_>>(),
        // The caller's engine shapes the measurements only through its knob choices.
        if knobs.is_empty() { -1 } else { g.engine },
        knobs,
        super::super::device_name(),
        super::super::cudnn_version(),
    )
}

/// Planning at finalisation: every engine measured at each micro-batch size of the policy (plans
/// Marmoset builds, scratch buffers, a scratch workspace within the limit), then the dynamic
/// program picks the fastest configuration (WR), or the desirable set joins WD's knapsack.
pub(super) fn plan_graph(g: &Graph, what: &str) -> Option<Planned> {
    let cfg = config();
    let limit = cfg
        .workspace_limit
        .or(cfg.workspace_total)
        .or_else(super::super::joint_limit)?;
    let n = g.n as u64;
    if n > planner::microbatch::MAX_BATCH {
        return None;
    }
    // WD and the joint plan choose among the desirable set; WR needs only the fastest.
    let keeps_front = cfg.workspace_limit.is_none();
    // The test facility (WD only: under WR it runs the caller's engine unmeasured) measures
    // micro-batches of its size alone, so that every configuration WD can choose divides.
    let (sizes, policy, sizes_policy) = match cfg.test_microbatch {
        Some(b) => {
            let mut v = vec![b.min(n), n % b.min(n)];
            v.retain(|&x| x > 0);
            v.dedup();
            (v, format!("test{b}"), Sizes::All)
        }
        None => (
            cfg.batch_sizes.sizes(n),
            cfg.batch_sizes.name().to_string(),
            cfg.batch_sizes,
        ),
    };
    let key = key(g, limit, &policy);
    // The library's answer for an engine at a micro-batch size: the workspace of the plan it
    // builds (None: it builds none).
    let library = |b: u64, e: c_int| {
        g.micro_plan(i64::try_from(b).ok()?, e as i64, false)
            .map(|(_, ws)| ws.max(0) as u64)
    };
    let micro = match cached(&key, n, "engine", library) {
        Some(m) => m,
        None => {
            let (m, complete) = measure(g, &sizes, limit);
            remember(&key, &m, complete);
            m
        }
    };
    let c = match cfg.test_microbatch {
        Some(b) => super::super::forced(n, b, &micro)?,
        None if super::super::joint_mode() && cfg.workspace_total.is_none() => {
            let cap = super::super::joint::joint_cap().unwrap_or(0);
            fastest(n, &micro, cap, sizes_policy)?
        }
        None => fastest(n, &micro, limit, sizes_policy)?,
    };
    let front = if keeps_front {
        desirable(n, &micro, limit, sizes_policy)
    } else {
        Vec::new()
    };
    log(
        Level::Info,
        &format!(
            "backend: {what} a {:?} graph ({} operations, {} images): {:?} ({:.4} ms, {} B of workspace; {} micro-configurations{})",
            g.dir,
            g.ops.len(),
            n,
            c.parts,
            c.time_ms,
            c.workspace,
            micro.len(),
            if keeps_front {
                format!("; {} desirable", front.len())
            } else {
                String::new()
            }
        ),
    );
    Some(Planned {
        wr: Some(c),
        front,
        key,
    })
}

/// Each engine's time and workspace on micro-batch plans of each size, and whether every plan
/// within the limit was measured (false when the device could not give the scratch workspace
/// the largest needs).
fn measure(g: &Graph, sizes: &[u64], limit: u64) -> (Vec<Micro>, bool) {
    let mut out = Vec::new();
    let Some(h) = g.plan_handle.or(g.graph_handle) else {
        return (out, false);
    };
    let engines = engine_count(g).unwrap_or(8).min(64);
    // The candidates: the plans the library builds, with the workspace each asks for.
    let candidates: Vec<(u64, i64, i64)> = sizes
        .iter()
        .flat_map(|&b| (0..engines).map(move |e| (b, e)))
        .filter_map(|(b, e)| {
            let (_, ws) = g.micro_plan(b as i64, e, false)?;
            (ws.max(0) as u64 <= limit).then_some((b, e, ws.max(0)))
        })
        .collect();
    let needs: Vec<u64> = candidates.iter().map(|c| c.2 as u64).collect();
    let what = format!("a {:?} graph of {} images", g.dir, g.n);
    let Some(bufs) = Scratch::new(g, &needs, &what) else {
        return (out, false);
    };
    for &(b, e, _) in &candidates {
        if let Some((ms, ws)) = time_one(g, h, &bufs, b as i64, e) {
            out.push(Micro {
                batch: b,
                algo: e as i32,
                time_ms: ms,
                workspace: ws as u64,
            });
        }
    }
    (out, bufs.complete)
}

/// The graph's engine count, from a micro-batch graph Marmoset builds.
fn engine_count(g: &Graph) -> Option<i64> {
    let (plan, _) = g.micro_plan(g.n, g.engine, false)?;
    let cfg = child(plan, PLAN_ENGINE_CONFIG, ENGINECFG_DESCRIPTOR)?;
    let engine = child(cfg, ENGINECFG_ENGINE, ENGINE_DESCRIPTOR);
    destroy(cfg);
    let engine = engine?;
    let graph = child(engine, ENGINE_OPERATION_GRAPH, OPERATIONGRAPH_DESCRIPTOR);
    destroy(engine);
    let graph = graph?;
    let n = i64_of(graph, 802);
    destroy(graph);
    n
}

/// Scratch device buffers: one per tensor with a pointer (whole mini-batch), and a workspace of
/// the most a candidate needs (or less, when the device refuses that: `complete` is then false).
struct Scratch {
    ptrs: Vec<(i64, i64)>,
    ws: (i64, u64),
    complete: bool,
}

impl Scratch {
    fn new(g: &Graph, needs: &[u64], what: &str) -> Option<Scratch> {
        let mut s = Scratch {
            ptrs: Vec::new(),
            ws: (0, 0),
            complete: true,
        };
        let sizes: Vec<(i64, usize)> = g
            .tensors
            .iter()
            .filter(|t| !t.is_virtual)
            .map(|t| {
                let span = 1 + t
                    .dims
                    .iter()
                    .zip(&t.strides)
                    .map(|(&d, &st)| (d - 1).max(0) * st)
                    .sum::<i64>();
                (t.uid, span.max(0) as usize * elem_bytes(t.dtype))
            })
            .collect();
        for &(uid, size) in &sizes {
            let Some(p) = dev_alloc(size) else {
                let bytes: usize = sizes.iter().map(|s| s.1).sum();
                log(
                    Level::Warn,
                    &format!(
                        "μ-cuDNN: the device cannot give the {bytes} B of scratch buffers to benchmark {what}; it runs as the caller asks"
                    ),
                );
                return None;
            };
            s.ptrs.push((uid, p as i64));
        }
        if !needs.is_empty() {
            let (p, size, complete) = scratch_workspace(needs, what);
            s.ws = (p as i64, size as u64);
            s.complete = complete;
        }
        Some(s)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for &(_, p) in &self.ptrs {
            dev_free(p as usize);
        }
        if self.ws.0 != 0 {
            dev_free(self.ws.0 as usize);
        }
    }
}

/// One engine at `b` images: (milliseconds by the caller's stream's events, workspace). None:
/// the engine does not take the graph, or needs more workspace than the limit.
fn time_one(g: &Graph, h: usize, s: &Scratch, b: i64, engine: i64) -> Option<(f64, i64)> {
    let (plan, ws) = g.micro_plan(b, engine, false)?;
    if ws as u64 > s.ws.1 {
        return None;
    }
    let ids: Vec<i64> = s.ptrs.iter().map(|p| p.0).collect();
    let ptrs: Vec<i64> = s.ptrs.iter().map(|p| p.1).collect();
    let pack = pack_at(g, &ids, &ptrs, s.ws.0, 0)?;
    let r = timed(h, || {
        let exec = table::cudnnBackendExecute()?;
        // SAFETY: a plan and a variant pack Marmoset built over its own scratch buffers.
        (unsafe { exec(h as P, plan as P, pack as P) } == 0).then_some(())
    });
    destroy(pack);
    Some((r?, ws))
}

/// Runs `f` between two events on the handle's stream; the elapsed milliseconds.
fn timed(h: usize, f: impl FnOnce() -> Option<()>) -> Option<f64> {
    let get_stream = table::cudnnGetStream()?;
    let mut stream: P = std::ptr::null_mut();
    // SAFETY: a valid output pointer; h is the graph's handle.
    if unsafe { get_stream(h as P, &mut stream) } != 0 {
        return None;
    }
    let create = table::cudaEventCreate()?;
    let record = table::cudaEventRecord()?;
    let sync = table::cudaEventSynchronize()?;
    let elapsed = table::cudaEventElapsedTime()?;
    let destroy_ev = table::cudaEventDestroy()?;
    let (mut a, mut b): (P, P) = (std::ptr::null_mut(), std::ptr::null_mut());
    let mut ms = 0f32;
    // SAFETY (each call below): real CUDA runtime calls on events Marmoset creates and destroys
    // here, with valid output pointers and the handle's stream.
    let ok = last_error::quietly(|| unsafe { create(&mut a) }) == 0
        && last_error::quietly(|| unsafe { create(&mut b) }) == 0
        && last_error::quietly(|| unsafe { record(a, stream) }) == 0
        && f().is_some()
        && last_error::quietly(|| unsafe { record(b, stream) }) == 0
        && last_error::quietly(|| unsafe { sync(b) }) == 0
        && last_error::quietly(|| unsafe { elapsed(&mut ms, a, b) }) == 0;
    for e in [a, b] {
        if !e.is_null() {
            // SAFETY: an event created above.
            last_error::quietly(|| unsafe { destroy_ev(e) });
        }
    }
    ok.then_some(ms as f64)
}
