//! μ-cuDNN on the cuDNN backend (graph) API, where PyTorch (by default) and TensorFlow convolve.
//!
//! Recognition: when an execution plan is finalized, its engine configuration, engine and
//! operation graph are read back with the real `cudnnBackendGetAttribute` (into descriptors
//! Marmoset creates, as the real library requires). A plan is a candidate only when micro-batching
//! keeps it exact: one convolution of any direction, or a forward convolution followed by
//! pointwise operations whose operands are per image or broadcast over the batch. Everything else
//! passes through untouched.
//!
//! Planning (plan.rs): at finalisation, every engine measured on micro-batch graphs Marmoset
//! builds; WR's dynamic program picks the configuration and the plan's workspace-size query
//! answers its workspace; under WD the graph's desirable set joins the knapsack of the legacy
//! convolutions (wd.rs) and the query answers 0; under the joint plan (joint.rs) the query
//! answers the workspace of the fastest configuration within a share of the memory budget, and
//! the desirable set is kept for each execution's choice. Heuristic queries (heuristics.rs) put the engine
//! Marmoset's configuration runs first at the front, so that the framework's choice is its plan.
//!
//! Execution (execute.rs): a candidate's `cudnnBackendExecute` runs as micro-batches, each
//! through a plan Marmoset builds (the caller's graph with the batch dimension of its per-image
//! tensors changed, the same engine and knob choices), with the variant pack's pointers offset by
//! whole images, on the caller's handle (its stream), without synchronisation, in the caller's
//! workspace (WR), the graph's segment of the shared one (WD), or, under the joint plan, the
//! caller's workspace or a buffer lent from spare memory. Backward-filter accumulates: the
//! caller's beta on the first micro-batch, 1 after. Any failure before the first write runs the
//! caller's plan undivided (under WD in the shared workspace, since the caller was told 0 bytes).

use crate::core::config::Level;
use crate::core::state::{config, log};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

use super::elem_bytes;
use crate::ffi::cudnn_backend::{
    self as api, CONVOLUTION_DESCRIPTOR, ENGINE_DESCRIPTOR, ENGINE_GLOBAL_INDEX,
    ENGINE_OPERATION_GRAPH, ENGINECFG_DESCRIPTOR, ENGINECFG_ENGINE, ENGINECFG_KNOB_CHOICES,
    EXECUTION_PLAN_DESCRIPTOR, GRAPH_HANDLE, GRAPH_OPS, KNOB_CHOICE_DESCRIPTOR, OP_CONV_BWD_DATA,
    OP_CONV_BWD_FILTER, OP_CONV_FWD, OP_POINTWISE, OP_PW_ALPHA1, OP_PW_ALPHA2, OP_PW_B,
    OP_PW_DESCRIPTOR, OP_PW_X, OP_PW_Y, OPERATIONGRAPH_DESCRIPTOR, PLAN_ENGINE_CONFIG, PLAN_HANDLE,
    PLAN_WORKSPACE_SIZE, POINTWISE_DESCRIPTOR, TENSOR_BYTE_ALIGNMENT, TENSOR_DATA_TYPE,
    TENSOR_DESCRIPTOR, TENSOR_DIMENSIONS, TENSOR_IS_VIRTUAL, TENSOR_STRIDES, TENSOR_UNIQUE_ID,
    TYPE_BACKEND_DESCRIPTOR, TYPE_BOOLEAN, TYPE_DATA_TYPE, TYPE_DOUBLE, TYPE_FLOAT, TYPE_HANDLE,
    TYPE_INT64, child, children, count, create, destroy, finalize, i64_of, i64s, raw, set,
    set_desc,
};
use plan::plan_graph;
pub use plan::workspace_answer;
use planner::microbatch::Configuration;
use planner::trace::Access;

type P = *mut c_void;
type C = *const c_void;

/// The convolution operations: (descriptor type, first attribute (ALPHA), the direction).
/// ALPHA, BETA, CONV_DESC, then the w-role tensor, the x-role tensor and the y-role tensor.
const CONV_OPS: [(c_int, c_int, super::Dir); 3] = [
    (OP_CONV_FWD, 700, super::Dir::Fwd),
    (OP_CONV_BWD_DATA, 706, super::Dir::BwdData),
    (OP_CONV_BWD_FILTER, 712, super::Dir::BwdFilter),
];

mod execute;
mod heuristics;
mod plan;

use execute::pack_at;
pub use execute::{execute, execute_replay};
pub use heuristics::heuristic_results;

// ==================================================================== recognition

/// A tensor of the graph, as read back.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Tensor {
    uid: i64,
    dtype: c_int,
    dims: Vec<i64>,
    strides: Vec<i64>,
    align: i64,
    is_virtual: bool,
    /// Per image (its first dimension is the batch) rather than a filter or a broadcast operand.
    batched: bool,
}

/// An attribute of an operation, to set again on a micro-batch operation.
#[derive(Debug, Clone)]
enum Value {
    /// A scaling factor (FLOAT or DOUBLE) as read.
    Scalar(c_int, Vec<u8>),
    /// A descriptor used as is (the convolution or pointwise descriptor, a filter, a bias).
    Desc(usize),
    /// A tensor: index into `Graph::tensors`.
    Tensor(usize),
}

#[derive(Debug, Clone)]
struct Op {
    ty: c_int,
    attrs: Vec<(c_int, Value)>,
}

/// A micro-batch plan's key: (images, engine, beta forced to 1).
type MicroKey = (i64, i64, bool);

/// A plan's tensor for the trace: (unique id, role, access, dims, strides).
pub type TracedTensor = (i64, &'static str, Access, Vec<i64>, Vec<i64>);

/// A recognised plan: its graph, engine and knob choices.
#[derive(Debug)]
pub struct Graph {
    dir: super::Dir,
    n: i64,
    ops: Vec<Op>,
    tensors: Vec<Tensor>,
    /// The convolution's index among the operations and its BETA attribute.
    beta_attr: (usize, c_int),
    graph_handle: Option<usize>,
    plan_handle: Option<usize>,
    engine: i64,
    knobs: Vec<usize>,
    workspace: i64,
    /// Micro-batch plans built so far: (images, engine, beta forced to 1) -> (plan, workspace).
    micro: Mutex<HashMap<MicroKey, (usize, i64)>>,
    /// WR's configuration, planned at finalisation (None: the test facility's, or undivided).
    config: Option<Configuration>,
    /// WD: the desirable set this graph brought to the knapsack (empty under WR), and its key
    /// there (the benchmark database's).
    front: Vec<Configuration>,
    key: String,
}

impl Graph {
    /// Runs in WD's shared workspace (the framework was told 0 bytes).
    fn wd(&self) -> bool {
        !self.front.is_empty() && super::wd_mode()
    }

    /// Runs in the joint plan's workspace, lent from spare memory (the framework was told 0
    /// bytes).
    fn joint(&self) -> bool {
        !self.front.is_empty() && !super::wd_mode() && super::joint_mode()
    }

    /// Runs in a workspace of Marmoset's (WD's or the joint plan's): the framework was told
    /// its plan needs none.
    fn own_workspace(&self) -> bool {
        self.wd() || self.joint()
    }
}

fn scalar(d: usize, name: c_int) -> Option<Value> {
    [(TYPE_FLOAT, 4), (TYPE_DOUBLE, 8)]
        .into_iter()
        .find_map(|(ty, size)| raw(d, name, ty, 1, size).map(|(_, b)| Value::Scalar(ty, b)))
}

fn handle(d: usize, name: c_int) -> Option<usize> {
    let (n, b) = raw(d, name, TYPE_HANDLE, 1, 8)?;
    (n == 1).then(|| usize::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
}

fn read_tensor(t: usize) -> Option<Tensor> {
    let (_, dt) = raw(t, TENSOR_DATA_TYPE, TYPE_DATA_TYPE, 1, 4)?;
    let is_virtual = raw(t, TENSOR_IS_VIRTUAL, TYPE_BOOLEAN, 1, 1)
        .map(|(n, b)| n == 1 && b[0] != 0)
        .unwrap_or(false);
    Some(Tensor {
        uid: i64_of(t, TENSOR_UNIQUE_ID)?,
        dtype: c_int::from_ne_bytes(dt.try_into().ok()?),
        dims: i64s(t, TENSOR_DIMENSIONS)?,
        strides: i64s(t, TENSOR_STRIDES)?,
        align: i64_of(t, TENSOR_BYTE_ALIGNMENT).unwrap_or(16),
        is_virtual,
        batched: false,
    })
}

/// The layouts of graph that micro-batching keeps exact, as lists of operation types.
fn layouts(ops: usize) -> Vec<Vec<c_int>> {
    if ops == 1 {
        CONV_OPS.iter().map(|c| vec![c.0]).collect()
    } else {
        // Graphs list their operations in any order (TensorFlow's and the frontend's differ).
        (0..ops)
            .map(|at| {
                (0..ops)
                    .map(|i| if i == at { OP_CONV_FWD } else { OP_POINTWISE })
                    .collect()
            })
            .collect()
    }
}

struct Reader {
    tensors: Vec<Tensor>,
    n: i64,
}

impl Reader {
    /// Reads tensor attribute `name` of `op`; `role`: Some(true) per image, Some(false) never
    /// (a filter), None: per image when its first dimension is the batch, else broadcast (1).
    fn tensor(&mut self, op: usize, name: c_int, role: Option<bool>) -> Option<Value> {
        let t = child(op, name, TENSOR_DESCRIPTOR)?;
        let mut rt = read_tensor(t);
        destroy(t);
        let mut t = rt.take()?;
        t.batched = match role {
            Some(b) => b,
            None => match t.dims.first() {
                Some(&d) if d == self.n => true,
                Some(1) => false,
                _ => return None,
            },
        };
        if t.batched {
            if !splittable(&t, self.n) {
                return None;
            }
            // Micro-batches start whole images in: their pointers keep only the alignment that
            // an image's size allows, and their tensors say so (engines refuse a broken promise).
            let image = t.strides[0] * elem_bytes(t.dtype) as i64;
            t.align = t.align.min(1 << image.trailing_zeros().min(8)).max(1);
        }
        if let Some(i) = self.tensors.iter().position(|o| o.uid == t.uid) {
            (self.tensors[i] == t).then_some(Value::Tensor(i))
        } else {
            self.tensors.push(t);
            Some(Value::Tensor(self.tensors.len() - 1))
        }
    }
}

/// A per-image tensor splits when it has the batch and each image is a block of its own.
fn splittable(t: &Tensor, n: i64) -> bool {
    let span = 1 + t
        .dims
        .iter()
        .zip(&t.strides)
        .skip(1)
        .map(|(&d, &s)| (d - 1).max(0) * s)
        .sum::<i64>();
    t.dims.len() >= 3
        && t.dims.len() == t.strides.len()
        && t.dims[0] == n
        && t.strides[0] >= span
        && t.strides.iter().all(|&s| s > 0)
}

/// (direction, tensors, operations, (index of the convolution, its BETA attribute)).
type Read = (super::Dir, Reader, Vec<Op>, (usize, c_int));

fn read_ops(graph: usize, types: &[c_int]) -> Option<Read> {
    let ops = children(graph, GRAPH_OPS, types)?;
    let result = (|| {
        let at = types.iter().position(|&t| t != OP_POINTWISE)?;
        let (_, base, dir) = *CONV_OPS.iter().find(|c| c.0 == types[at])?;
        let conv = ops[at];
        // The batch: the x-role tensor's first dimension.
        let x = child(conv, base + 4, TENSOR_DESCRIPTOR)?;
        let xt = read_tensor(x);
        destroy(x);
        let n = *xt?.dims.first()?;
        if n < 2 {
            return None;
        }
        let mut r = Reader {
            tensors: Vec::new(),
            n,
        };
        let mut out = Vec::new();
        for (i, &op) in ops.iter().enumerate() {
            if i == at {
                out.push(Op {
                    ty: types[at],
                    attrs: vec![
                        (base, scalar(conv, base)?),
                        (base + 1, scalar(conv, base + 1)?),
                        (
                            base + 2,
                            Value::Desc(child(conv, base + 2, CONVOLUTION_DESCRIPTOR)?),
                        ),
                        (base + 3, r.tensor(conv, base + 3, Some(false))?),
                        (base + 4, r.tensor(conv, base + 4, Some(true))?),
                        (base + 5, r.tensor(conv, base + 5, Some(true))?),
                    ],
                });
                continue;
            }
            let mut attrs = vec![
                (
                    OP_PW_DESCRIPTOR,
                    Value::Desc(child(op, OP_PW_DESCRIPTOR, POINTWISE_DESCRIPTOR)?),
                ),
                (OP_PW_X, r.tensor(op, OP_PW_X, None)?),
                (OP_PW_Y, r.tensor(op, OP_PW_Y, None)?),
            ];
            if count(op, OP_PW_B, TYPE_BACKEND_DESCRIPTOR).is_some_and(|c| c > 0) {
                attrs.push((OP_PW_B, r.tensor(op, OP_PW_B, None)?));
            }
            for a in [OP_PW_ALPHA1, OP_PW_ALPHA2] {
                if let Some(v) = scalar(op, a) {
                    attrs.push((a, v));
                }
            }
            out.push(Op {
                ty: OP_POINTWISE,
                attrs,
            });
        }
        Some((dir, r, out, (at, base + 1)))
    })();
    ops.into_iter().for_each(destroy);
    result
}

/// Plans recognised at finalization, by the caller's plan descriptor.
static PLANS: Mutex<Option<HashMap<usize, Arc<Graph>>>> = Mutex::new(None);

fn plans<R>(f: impl FnOnce(&mut HashMap<usize, Arc<Graph>>) -> R) -> Option<R> {
    let mut g = PLANS.lock().ok()?;
    Some(f(g.get_or_insert_with(HashMap::new)))
}

/// Execution-plan descriptors the caller created (only their finalization is examined).
static CREATED: Mutex<Option<std::collections::HashSet<usize>>> = Mutex::new(None);

/// After a successful cudnnBackendCreateDescriptor: the plan's life begins (for
/// recomputation), and a plan created while micro-batching is on is examined at finalization.
pub fn created(ty: c_int, d: usize) {
    api::created(ty, d);
    if ty == EXECUTION_PLAN_DESCRIPTOR
        && crate::core::state::active()
        && config().microbatching()
        && let Ok(mut g) = CREATED.lock()
    {
        g.get_or_insert_with(Default::default).insert(d);
    }
}

/// Before cudnnBackendDestroyDescriptor: the address may be reused for another descriptor.
pub fn destroyed(d: usize) {
    api::destroyed(d);
    if let Ok(mut g) = CREATED.lock()
        && let Some(s) = g.as_mut()
    {
        s.remove(&d);
    }
    if let Some(Some(g)) = plans(|p| p.remove(&d)) {
        g.release();
    }
}

/// After a successful cudnnBackendFinalize: records the plan if micro-batching keeps it exact.
pub fn finalized(d: usize) {
    let is_plan = CREATED
        .lock()
        .ok()
        .and_then(|g| g.as_ref().map(|s| s.contains(&d)))
        .unwrap_or(false);
    if !is_plan {
        return;
    }
    match recognise(d) {
        Some(mut g) => {
            if (config().test_microbatch.is_none() || super::wd_mode())
                && let Some(p) = plan_graph(&g, "planned")
            {
                g.config = p.wr;
                g.key = p.key;
                if !p.front.is_empty() {
                    if super::wd_mode() {
                        super::register_graph(&g.key, p.front.clone());
                    }
                    // The trace says what each execution of the plan could have run (the
                    // planner's bound takes the fastest and the least workspace).
                    if let Some(life) = api::plan_life(d) {
                        crate::core::bus::emit(planner::trace::Event::Configs {
                            plan: d as u64,
                            life,
                            configs: p
                                .front
                                .iter()
                                .map(|c| planner::trace::Alternative {
                                    time_ms: c.time_ms,
                                    workspace: c.workspace,
                                })
                                .collect(),
                        });
                    }
                    g.front = p.front;
                }
            }
            log(
                Level::Debug,
                &format!(
                    "backend: a {:?} graph of {} operations and {} images (engine {}) can be micro-batched",
                    g.dir,
                    g.ops.len(),
                    g.n,
                    g.engine
                ),
            );
            plans(|p| p.insert(d, Arc::new(g)));
        }
        None => log(
            Level::Debug,
            "backend: a plan that micro-batching does not handle passes through",
        ),
    }
}

fn recognise(plan: usize) -> Option<Graph> {
    let cfg = child(plan, PLAN_ENGINE_CONFIG, ENGINECFG_DESCRIPTOR)?;
    let result = (|| {
        let engine = child(cfg, ENGINECFG_ENGINE, ENGINE_DESCRIPTOR)?;
        let inner = (|| {
            let index = i64_of(engine, ENGINE_GLOBAL_INDEX)?;
            let knobs = match count(cfg, ENGINECFG_KNOB_CHOICES, TYPE_BACKEND_DESCRIPTOR)? {
                0 => Vec::new(),
                k => children(
                    cfg,
                    ENGINECFG_KNOB_CHOICES,
                    &vec![KNOB_CHOICE_DESCRIPTOR; k],
                )?,
            };
            let graph = child(engine, ENGINE_OPERATION_GRAPH, OPERATIONGRAPH_DESCRIPTOR)?;
            let g = from_graph(
                graph,
                index,
                knobs,
                handle(plan, PLAN_HANDLE),
                i64_of(plan, PLAN_WORKSPACE_SIZE).unwrap_or(0),
            );
            destroy(graph);
            g
        })();
        destroy(engine);
        inner
    })();
    destroy(cfg);
    result
}

/// A graph of a layout micro-batching keeps exact, with the engine and knob choices it is to run
/// (the knobs are the graph's from here on, destroyed with it or here when it is not one).
fn from_graph(
    graph: usize,
    engine: i64,
    knobs: Vec<usize>,
    plan_handle: Option<usize>,
    workspace: i64,
) -> Option<Graph> {
    let g = (|| {
        let nops = count(graph, GRAPH_OPS, TYPE_BACKEND_DESCRIPTOR)?;
        if nops == 0 || nops > 8 {
            return None;
        }
        let (dir, r, ops, beta_attr) = layouts(nops)
            .iter()
            .find_map(|types| read_ops(graph, types))?;
        let graph_handle = handle(graph, GRAPH_HANDLE);
        Some(Graph {
            dir,
            n: r.n,
            ops,
            tensors: r.tensors,
            beta_attr,
            graph_handle,
            plan_handle: plan_handle.or(graph_handle),
            engine,
            knobs: knobs.clone(),
            workspace,
            micro: Mutex::new(HashMap::new()),
            config: None,
            front: Vec::new(),
            key: String::new(),
        })
    })();
    if g.is_none() {
        knobs.into_iter().for_each(destroy);
    }
    g
}

impl Graph {
    /// Destroys what Marmoset holds for the graph: its micro-batch plans, the descriptors read
    /// back (convolution, pointwise) and the knob choices.
    fn release(&self) {
        let built: Vec<usize> = self
            .micro
            .lock()
            .map(|mut m| m.drain().map(|(_, v)| v.0).collect())
            .unwrap_or_default();
        built.into_iter().for_each(destroy);
        for op in &self.ops {
            for (_, v) in &op.attrs {
                if let Value::Desc(d) = v {
                    destroy(*d);
                }
            }
        }
        self.knobs.iter().copied().for_each(destroy);
    }
}

// ==================================================================== micro-batch plans

impl Graph {
    /// A plan for `b` images (beta 1 on the convolution when `accumulate`), built once.
    fn micro_plan(&self, b: i64, engine: i64, accumulate: bool) -> Option<(usize, i64)> {
        if let Some(&p) = self.micro.lock().ok()?.get(&(b, engine, accumulate)) {
            return Some(p);
        }
        let mut made = Vec::new();
        let plan = self.build(b, engine, accumulate, &mut made);
        // Built parts that the plan no longer needs (cuDNN keeps copies), or a failed attempt.
        made.into_iter().for_each(destroy);
        let plan = plan?;
        let ws = i64_of(plan, PLAN_WORKSPACE_SIZE).unwrap_or(0);
        self.micro
            .lock()
            .ok()?
            .insert((b, engine, accumulate), (plan, ws));
        Some((plan, ws))
    }

    fn build(&self, b: i64, engine: i64, accumulate: bool, made: &mut Vec<usize>) -> Option<usize> {
        let mut tensors = Vec::new();
        for t in &self.tensors {
            let d = create(TENSOR_DESCRIPTOR)?;
            made.push(d);
            let mut dims = t.dims.clone();
            if t.batched {
                dims[0] = b;
            }
            let virt = t.is_virtual as u8;
            set(
                d,
                TENSOR_DATA_TYPE,
                TYPE_DATA_TYPE,
                1,
                &t.dtype as *const c_int as C,
            )?;
            set(
                d,
                TENSOR_DIMENSIONS,
                TYPE_INT64,
                dims.len(),
                dims.as_ptr() as C,
            )?;
            set(
                d,
                TENSOR_STRIDES,
                TYPE_INT64,
                t.strides.len(),
                t.strides.as_ptr() as C,
            )?;
            set(
                d,
                TENSOR_UNIQUE_ID,
                TYPE_INT64,
                1,
                &t.uid as *const i64 as C,
            )?;
            set(
                d,
                TENSOR_BYTE_ALIGNMENT,
                TYPE_INT64,
                1,
                &t.align as *const i64 as C,
            )?;
            if t.is_virtual {
                set(
                    d,
                    TENSOR_IS_VIRTUAL,
                    TYPE_BOOLEAN,
                    1,
                    &virt as *const u8 as C,
                )?;
            }
            finalize(d)?;
            tensors.push(d);
        }
        let mut ops = Vec::new();
        for (i, op) in self.ops.iter().enumerate() {
            let d = create(op.ty)?;
            made.push(d);
            for (name, v) in &op.attrs {
                match v {
                    Value::Scalar(ty, bytes) => {
                        let (one_f, one_d) = (1.0f32, 1.0f64);
                        let p = if (i, *name) == self.beta_attr && accumulate {
                            if *ty == TYPE_DOUBLE {
                                &one_d as *const f64 as C
                            } else {
                                &one_f as *const f32 as C
                            }
                        } else {
                            bytes.as_ptr() as C
                        };
                        set(d, *name, *ty, 1, p)?;
                    }
                    Value::Desc(c) => set_desc(d, *name, &[*c])?,
                    Value::Tensor(t) => set_desc(d, *name, &[tensors[*t]])?,
                }
            }
            finalize(d)?;
            ops.push(d);
        }
        let graph = create(OPERATIONGRAPH_DESCRIPTOR)?;
        made.push(graph);
        if let Some(h) = self.graph_handle {
            set(graph, GRAPH_HANDLE, TYPE_HANDLE, 1, &h as *const usize as C)?;
        }
        set_desc(graph, GRAPH_OPS, &ops)?;
        finalize(graph)?;
        let index = engine;
        let engine = create(ENGINE_DESCRIPTOR)?;
        made.push(engine);
        set_desc(engine, ENGINE_OPERATION_GRAPH, &[graph])?;
        set(
            engine,
            ENGINE_GLOBAL_INDEX,
            TYPE_INT64,
            1,
            &index as *const i64 as C,
        )?;
        finalize(engine)?;
        let cfg = create(ENGINECFG_DESCRIPTOR)?;
        made.push(cfg);
        set_desc(cfg, ENGINECFG_ENGINE, &[engine])?;
        // The caller's knob choices belong to its engine; other engines run their defaults.
        if index == self.engine && !self.knobs.is_empty() {
            set_desc(cfg, ENGINECFG_KNOB_CHOICES, &self.knobs)?;
        }
        finalize(cfg)?;
        let plan = create(EXECUTION_PLAN_DESCRIPTOR)?;
        if let Some(h) = self.plan_handle {
            set(plan, PLAN_HANDLE, TYPE_HANDLE, 1, &h as *const usize as C)?;
        }
        if set_desc(plan, PLAN_ENGINE_CONFIG, &[cfg]).is_none() || finalize(plan).is_none() {
            destroy(plan);
            return None;
        }
        Some(plan)
    }
}

// ==================================================================== the trace's view

/// The tensors of a plan of a recognisable layout, for the trace: (unique id, role, written,
/// dims, strides). Empty for other graphs.
pub fn traced_tensors(plan: usize) -> Vec<TracedTensor> {
    let mut out = Vec::new();
    let Some(cfg) = child(plan, PLAN_ENGINE_CONFIG, ENGINECFG_DESCRIPTOR) else {
        return out;
    };
    let engine = child(cfg, ENGINECFG_ENGINE, ENGINE_DESCRIPTOR);
    destroy(cfg);
    let Some(engine) = engine else { return out };
    let graph = child(engine, ENGINE_OPERATION_GRAPH, OPERATIONGRAPH_DESCRIPTOR);
    destroy(engine);
    let Some(graph) = graph else { return out };
    let nops = count(graph, GRAPH_OPS, TYPE_BACKEND_DESCRIPTOR).unwrap_or(0);
    if (1..=8).contains(&nops)
        && let Some((types, ops)) = layouts(nops)
            .into_iter()
            .find_map(|t| children(graph, GRAPH_OPS, &t).map(|o| (t, o)))
    {
        for (&ty, &op) in types.iter().zip(&ops) {
            // A convolution forward with a BETA other than 0 reads its output too.
            let accumulates = ty == OP_CONV_FWD
                && !matches!(scalar(op, 701), Some(Value::Scalar(_, b)) if b.iter().all(|&x| x == 0));
            let roles: Vec<(c_int, &'static str, bool)> = match ty {
                OP_CONV_FWD => vec![(703, "w", false), (704, "x", false), (705, "y", true)],
                OP_CONV_BWD_DATA => vec![(709, "w", false), (710, "dx", true), (711, "dy", false)],
                OP_CONV_BWD_FILTER => {
                    vec![(715, "dw", true), (716, "x", false), (717, "dy", false)]
                }
                _ => vec![
                    (OP_PW_X, "pw_x", false),
                    (OP_PW_B, "pw_b", false),
                    (OP_PW_Y, "pw_y", true),
                ],
            };
            for (name, role, written) in roles {
                let Some(t) = child(op, name, TENSOR_DESCRIPTOR) else {
                    continue;
                };
                if let Some(r) = read_tensor(t).filter(|r| !r.is_virtual)
                    && !out.iter().any(|o: &TracedTensor| o.0 == r.uid)
                {
                    let access = match (written, accumulates) {
                        (false, _) => Access::R,
                        (true, false) => Access::W,
                        (true, true) => Access::Rw,
                    };
                    out.push((r.uid, role, access, r.dims, r.strides));
                }
                destroy(t);
            }
        }
        ops.into_iter().for_each(destroy);
    }
    destroy(graph);
    out
}
