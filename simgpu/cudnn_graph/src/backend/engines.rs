//! Engines, their knobs and notes, heuristics, engine configurations and execution plans.
//!
//! Engine `i` of a convolution graph is the legacy algorithm `i` of its direction: it supports
//! what that algorithm supports and needs its workspace, so both APIs share one model. Each
//! engine reports honest numerical notes (FFT, WINOGRAD, NONDETERMINISTIC where the algorithm
//! accumulates in a nondeterministic order; never TENSOR_CORE or DOWN_CONVERT_INPUTS: the
//! simulator computes in float32) and no behaviour notes (nothing is compiled at run time). Each
//! has one knob, TILE_SIZE, with a single choice: the model has one configuration per algorithm.

use super::ops::*;
use super::*;

/// (knob type, minimum, maximum, stride) of an engine's knobs.
const KNOBS: &[(i64, i64, i64, i64)] = &[(KNOB_TILE_SIZE, 0, 0, 1)];

fn numerical_notes(dir: Dir, algo: usize) -> Vec<i64> {
    use conv::Method::*;
    let mut v = Vec::new();
    match conv::method(dir, algo) {
        Some(Fft | FftTiling) => v.push(NOTE_FFT),
        Some(Winograd | WinogradNonfused) => v.push(NOTE_WINOGRAD),
        _ => {}
    }
    if !conv::deterministic(dir, algo) {
        v.push(NOTE_NONDETERMINISTIC);
    }
    v
}

/// The convolution an engine runs, with its algorithm and workspace.
pub fn engine_op(e: &Desc) -> Result<ConvOp, Status> {
    let (_, g) = child(e, ATTR_ENGINE_OPERATION_GRAPH, OPERATIONGRAPH_DESCRIPTOR)?;
    let mut op = graph_op(&g)?;
    let algo = one(e, ATTR_ENGINE_GLOBAL_INDEX)?;
    if algo < 0 || algo as usize >= op.dir.algo_count() {
        return Err(BAD_PARAM);
    }
    conv::support(op.dir, algo as usize, &op.call.geom).map_err(|_| NOT_SUPPORTED)?;
    op.algo = algo as c_int;
    op.workspace = conv::workspace(op.dir, algo as usize, &op.call.geom) as usize;
    Ok(op)
}

fn finalized(ty: c_int, attrs: Vec<(c_int, Attr)>) -> usize {
    internal(Desc {
        ty,
        attrs: attrs.into_iter().collect(),
        finalized: true,
    })
}

pub fn finalize_engine(e: &Desc) -> Result<Vec<(c_int, Attr)>, Status> {
    let op = engine_op(e)?;
    let knobs: Vec<i64> = KNOBS
        .iter()
        .map(|&(ty, min, max, stride)| {
            finalized(
                KNOB_INFO_DESCRIPTOR,
                vec![
                    (ATTR_KNOB_INFO_TYPE, Attr::of_i64(TYPE_KNOB_TYPE, &[ty])),
                    (
                        ATTR_KNOB_INFO_MINIMUM_VALUE,
                        Attr::of_i64(TYPE_INT64, &[min]),
                    ),
                    (
                        ATTR_KNOB_INFO_MAXIMUM_VALUE,
                        Attr::of_i64(TYPE_INT64, &[max]),
                    ),
                    (ATTR_KNOB_INFO_STRIDE, Attr::of_i64(TYPE_INT64, &[stride])),
                ],
            ) as i64
        })
        .collect();
    Ok(vec![
        (
            ATTR_ENGINE_KNOB_INFO,
            Attr::of_i64(TYPE_BACKEND_DESCRIPTOR, &knobs),
        ),
        (
            ATTR_ENGINE_NUMERICAL_NOTE,
            Attr::of_i64(
                TYPE_NUMERICAL_NOTE,
                &numerical_notes(op.dir, op.algo as usize),
            ),
        ),
        (
            ATTR_ENGINE_BEHAVIOR_NOTE,
            Attr::of_i64(TYPE_BEHAVIOR_NOTE, &[]),
        ),
        (
            ATTR_ENGINE_LAYOUT_INFO,
            Attr::of_i64(TYPE_BACKEND_DESCRIPTOR, &[]),
        ),
    ])
}

/// An engine of graph `graph` made and finalized by cuDNN itself (a heuristic result).
fn make_engine(graph: usize, algo: usize) -> Result<usize, Status> {
    let mut e = Desc {
        ty: ENGINE_DESCRIPTOR,
        attrs: HashMap::new(),
        finalized: false,
    };
    e.attrs.insert(
        ATTR_ENGINE_OPERATION_GRAPH,
        Attr::of_i64(TYPE_BACKEND_DESCRIPTOR, &[graph as i64]),
    );
    e.attrs.insert(
        ATTR_ENGINE_GLOBAL_INDEX,
        Attr::of_i64(TYPE_INT64, &[algo as i64]),
    );
    let computed = finalize_engine(&e)?;
    e.attrs.extend(computed);
    e.finalized = true;
    Ok(internal(e))
}

/// Heuristics: the engines that support the graph, best first. INSTANT, A and B rank them by
/// the modelled time (the simulator's "measurement" is its model, so the modes agree);
/// FALLBACK lists them by index, the order of a fixed fallback list. A graph no engine runs
/// (several operations, an unsupported data type) gets no results, not an error.
pub fn finalize_heuristics(h: &Desc) -> Result<Vec<(c_int, Attr)>, Status> {
    let (graph, g) = child(
        h,
        ATTR_ENGINEHEUR_OPERATION_GRAPH,
        OPERATIONGRAPH_DESCRIPTOR,
    )?;
    let mode = one(h, ATTR_ENGINEHEUR_MODE)?;
    if !(0..HEUR_MODES).contains(&mode) {
        return Err(BAD_PARAM);
    }
    let s = sim().ok_or(NOT_INITIALIZED)?;
    let algos: Vec<usize> = match graph_op(&g) {
        Ok(op) if mode == HEUR_MODE_FALLBACK => (0..op.dir.algo_count())
            .filter(|&a| conv::support(op.dir, a, &op.call.geom).is_ok())
            .collect(),
        Ok(op) => rank(s, op.dir, &op.call, None)
            .into_iter()
            .filter(|p| p.status == SUCCESS)
            .map(|p| p.algo as usize)
            .collect(),
        Err(e) => {
            if debug() {
                eprintln!(
                    "simgpu cudnn: heuristics: no engine runs this graph ({})",
                    status_name(e).to_string_lossy()
                );
            }
            Vec::new()
        }
    };
    let mut cfgs = Vec::new();
    for algo in algos {
        let engine = make_engine(graph, algo)?;
        let choices: Vec<i64> = KNOBS
            .iter()
            .map(|&(ty, min, _, _)| {
                finalized(
                    KNOB_CHOICE_DESCRIPTOR,
                    vec![
                        (
                            ATTR_KNOB_CHOICE_KNOB_TYPE,
                            Attr::of_i64(TYPE_KNOB_TYPE, &[ty]),
                        ),
                        (
                            ATTR_KNOB_CHOICE_KNOB_VALUE,
                            Attr::of_i64(TYPE_INT64, &[min]),
                        ),
                    ],
                ) as i64
            })
            .collect();
        let mut cfg = Desc {
            ty: ENGINECFG_DESCRIPTOR,
            attrs: HashMap::new(),
            finalized: false,
        };
        cfg.attrs.insert(
            ATTR_ENGINECFG_ENGINE,
            Attr::of_i64(TYPE_BACKEND_DESCRIPTOR, &[engine as i64]),
        );
        cfg.attrs.insert(
            ATTR_ENGINECFG_KNOB_CHOICES,
            Attr::of_i64(TYPE_BACKEND_DESCRIPTOR, &choices),
        );
        let computed = finalize_config(&cfg)?;
        cfg.attrs.extend(computed);
        cfg.finalized = true;
        cfgs.push(internal(cfg) as i64);
    }
    Ok(vec![(
        ATTR_ENGINEHEUR_RESULTS,
        Attr::of_i64(TYPE_BACKEND_DESCRIPTOR, &cfgs),
    )])
}

/// The convolution a configuration runs; its knob choices must be the engine's knobs, in range.
pub fn config_op(c: &Desc) -> Result<ConvOp, Status> {
    let (_, e) = child(c, ATTR_ENGINECFG_ENGINE, ENGINE_DESCRIPTOR)?;
    let op = engine_op(&e)?;
    if let Some(choices) = c.attrs.get(&ATTR_ENGINECFG_KNOB_CHOICES) {
        for h in choices.i64s() {
            let k = desc(h as usize)?;
            if k.ty != KNOB_CHOICE_DESCRIPTOR {
                return Err(BAD_PARAM);
            }
            if !k.finalized {
                return Err(BAD_PARAM_NOT_FINALIZED);
            }
            let (ty, v) = (
                one(&k, ATTR_KNOB_CHOICE_KNOB_TYPE)?,
                one(&k, ATTR_KNOB_CHOICE_KNOB_VALUE)?,
            );
            let ok = KNOBS.iter().any(|&(kt, min, max, stride)| {
                kt == ty && (min..=max).contains(&v) && (v - min) % stride == 0
            });
            if !ok {
                return Err(NOT_SUPPORTED);
            }
        }
    }
    Ok(op)
}

pub fn finalize_config(c: &Desc) -> Result<Vec<(c_int, Attr)>, Status> {
    let op = config_op(c)?;
    let mut v = vec![(
        ATTR_ENGINECFG_WORKSPACE_SIZE,
        Attr::of_i64(TYPE_INT64, &[op.workspace as i64]),
    )];
    if !c.attrs.contains_key(&ATTR_ENGINECFG_KNOB_CHOICES) {
        v.push((
            ATTR_ENGINECFG_KNOB_CHOICES,
            Attr::of_i64(TYPE_BACKEND_DESCRIPTOR, &[]),
        ));
    }
    Ok(v)
}

/// A plan captures its convolution when it is finalized (a plan outlives the graph it came
/// from: PyTorch caches plans and drops the rest).
pub fn finalize_plan(p: &Desc) -> Result<(Vec<(c_int, Attr)>, ConvOp), Status> {
    if p.attrs
        .contains_key(&ATTR_EXECUTION_PLAN_JSON_REPRESENTATION)
    {
        // Plans cannot be loaded from a serialization in the simulator.
        return Err(NOT_SUPPORTED);
    }
    if let Some(h) = p.attrs.get(&ATTR_EXECUTION_PLAN_HANDLE) {
        handle_stream(h.i64s().first().copied().unwrap_or(0) as Handle)?;
    }
    let (_, cfg) = child(p, ATTR_EXECUTION_PLAN_ENGINE_CONFIG, ENGINECFG_DESCRIPTOR)?;
    let op = config_op(&cfg)?;
    let name = match op.dir {
        Dir::Fwd => "ConvFwd",
        Dir::BwdData => "ConvBwdData",
        Dir::BwdFilter => "ConvBwdFilter",
    };
    let json = format!(
        "{{\"simgpu\":1,\"operation\":\"{name}\",\"engineId\":{},\"knobs\":{{\"{KNOB_TILE_SIZE}\":0}},\"workspace\":{}}}\0",
        op.algo, op.workspace
    );
    let attrs = vec![
        (
            ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
            Attr::of_i64(TYPE_INT64, &[op.workspace as i64]),
        ),
        (
            ATTR_EXECUTION_PLAN_COMPUTED_INTERMEDIATE_UIDS,
            Attr::of_i64(TYPE_INT64, &[]),
        ),
        (
            ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
            Attr {
                ty: TYPE_CHAR,
                count: json.len(),
                bytes: json.into_bytes(),
            },
        ),
    ];
    Ok((attrs, op))
}
