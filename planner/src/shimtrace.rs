//! A Marmoset trace as planner input: one steady iteration of the shim's call stream in the
//! planner's [`Trace`] model, as faithful as DTR's operator-level logs.
//!
//! - **The iteration** is found by [`crate::iteration`]: the repetition of the call stream, cut
//!   where the fewest bytes of live contents cross the cut (between an optimizer step and the
//!   next forward pass, wherever the program's calls happen to start), verified against the
//!   iteration before, and not the first.
//! - **Contents, not allocations.** A storage of the model is one content of one allocation:
//!   it needs memory from the call that writes it (Marmoset maps physical memory at the first
//!   touch) to its last read. Between a last read and the next full overwrite the allocation's
//!   bytes are dead and need no memory (a cuDNN output with beta 0, a memset or a copy covering
//!   the whole allocation overwrite it fully). Caffe's blobs, allocated once up front, thus live
//!   only while their contents do.
//! - **Roles** come from the trace: cuDNN tensors' `access` (beta 0: `w`, else `rw`), copies
//!   (source read, destination written), memsets (written). A cuDNN or cuBLASLt workspace is
//!   scratch: the library writes it before reading it within the call and nothing reads it
//!   after (the simulated GPU scribbles over cuDNN's), so it lives for its call only. Kernels do not say what they do with a
//!   pointer: every allocation a kernel's parameters point into is read *and may be written*
//!   (a new version, the old one gone), so a recomputation is only ever planned from sources
//!   that provably hold the bytes they held (the planner's version rule). A write that covers
//!   part of an allocation keeps the rest: it is a new version too.
//! - **Across iterations.** Contents live when the iteration starts (weights, optimizer state,
//!   inputs read before they are written) are constants, as in DTR's logs; what is live when it
//!   ends is what the next iteration will read (the same rule, one period on), kept resident.
//! - **Lineage.** A storage's producer is the call that wrote it; host-to-device copies read
//!   host memory the program may have changed since, so their contents have no producer (they
//!   can be swapped, never recomputed).
//! - **Durations** are the `timing` records' device times (`MARMOSET_TRACE_TIMING=1`), measured
//!   from after Marmoset's own work for the call (a restore the call's stream waits for, the
//!   host waiting for room), so a trace recorded under a budget gives the program's times.
//!
//! The in-shim executor maps the plan back with [`Converted::ops`] (each operation's call within
//! the iteration) and [`Converted::storages`] (each storage's tensor and version).

use crate::iteration::{self, Call, Effect, Region, Steady, TensorId};
use crate::model::{Op, Step, Storage, Trace};
use crate::trace::{Access, Event, Record, Replay};
use std::collections::HashMap;

/// What one call does to one allocation, its touches merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Read only.
    Read,
    /// Written whole without being read: the old contents are dead before the call.
    Overwrite,
    /// Read and (or) partly written: a new version that depends on the old one.
    Update,
    /// A cuDNN workspace: written and read within the call only.
    Scratch,
}

impl Role {
    /// Whether the call needs the contents the allocation held before it.
    pub fn reads(self) -> bool {
        matches!(self, Role::Read | Role::Update)
    }
}

/// The roles of a call's touches, one per allocation, in the order first touched. `allocs`
/// gives each allocation's address and size.
pub fn roles(event: &Event, allocs: &HashMap<u64, (u64, u64)>) -> Vec<(u64, Role)> {
    let scratch: Vec<u64> = match event {
        Event::Cudnn { tensors, .. } | Event::Cublas { tensors, .. } => tensors
            .iter()
            .filter(|t| t.role == "workspace")
            .map(|t| t.ptr)
            .collect(),
        _ => Vec::new(),
    };
    // Per allocation: (reads, writes, a write covering it all, all touches are the workspace).
    let mut acc: Vec<(u64, bool, bool, bool, bool)> = Vec::new();
    for t in event.touches() {
        let Some(&(ptr, size)) = allocs.get(&t.alloc) else {
            continue;
        };
        let is_ws = scratch.contains(&(ptr + t.offset));
        let (r, w) = match t.access {
            Access::R => (true, false),
            Access::W => (false, true),
            Access::Rw => (true, true),
        };
        let full = w && t.access == Access::W && t.offset == 0 && t.bytes >= size;
        match acc.iter_mut().find(|a| a.0 == t.alloc) {
            Some(a) => {
                a.1 |= r;
                a.2 |= w;
                a.3 |= full;
                a.4 &= is_ws;
            }
            None => acc.push((t.alloc, r, w, full, is_ws)),
        }
    }
    acc.into_iter()
        .map(|(a, r, w, full, ws)| {
            let role = if ws {
                Role::Scratch
            } else if r && w {
                Role::Update
            } else if r {
                Role::Read
            } else if full {
                Role::Overwrite
            } else {
                Role::Update
            };
            (a, role)
        })
        .collect()
}

/// The calls of a trace with each call's record and the roles of its touches.
struct Stream<'a> {
    calls: Vec<Call>,
    records: Vec<&'a Record>,
    roles: Vec<Vec<(u64, Role)>>,
    /// Allocation id -> (call index of the allocation, call index of its free, size).
    life: HashMap<u64, (usize, usize, u64)>,
    /// Allocation id -> the calls that touch it, with their roles, in order.
    uses: HashMap<u64, Vec<(usize, Role)>>,
}

impl<'a> Stream<'a> {
    fn new(records: &'a [Record]) -> Stream<'a> {
        let calls = iteration::calls(records);
        let records: Vec<&Record> = records.iter().filter(|r| r.event.api().is_some()).collect();
        debug_assert_eq!(calls.len(), records.len());
        let mut allocs: HashMap<u64, (u64, u64)> = HashMap::new();
        let mut life = HashMap::new();
        let mut uses: HashMap<u64, Vec<(usize, Role)>> = HashMap::new();
        let mut all = Vec::with_capacity(calls.len());
        for (i, r) in records.iter().enumerate() {
            match r.event {
                Event::Alloc {
                    alloc,
                    ptr,
                    size,
                    result: 0,
                    ..
                } => {
                    allocs.insert(alloc, (ptr, size));
                    life.insert(alloc, (i, usize::MAX, size));
                }
                Event::Free {
                    alloc: Some(a),
                    result: 0,
                    ..
                } => {
                    if let Some(l) = life.get_mut(&a) {
                        l.1 = i;
                    }
                }
                _ => {}
            }
            let ro = if r.event.result() == 0 {
                roles(&r.event, &allocs)
            } else {
                Vec::new()
            };
            for &(a, role) in &ro {
                uses.entry(a).or_default().push((i, role));
            }
            all.push(ro);
        }
        Stream {
            calls,
            records,
            roles: all,
            life,
            uses,
        }
    }

    /// Whether allocation `a` holds contents someone will read, just before call `pos`: it
    /// exists, was touched before, and its next touch reads (or there is none and it is never
    /// freed: kept, to be safe).
    fn live_at(&self, a: u64, pos: usize) -> bool {
        let Some(&(made, freed, _)) = self.life.get(&a) else {
            return false;
        };
        if made >= pos || freed < pos {
            return false;
        }
        let u = self.uses.get(&a).map_or(&[][..], |v| &v[..]);
        let k = u.partition_point(|&(i, _)| i < pos);
        if k == 0 {
            return false;
        }
        match u.get(k) {
            Some(&(_, role)) => role.reads(),
            None => freed == usize::MAX,
        }
    }

    /// Bytes allocated just before each call (index n: after the last).
    fn allocated_bytes(&self) -> Vec<u64> {
        let n = self.calls.len();
        let mut diff = vec![0i128; n + 2];
        for &(made, freed, size) in self.life.values() {
            diff[made + 1] += size as i128;
            diff[freed.min(n) + 1] -= size as i128;
        }
        prefix(&diff[..=n])
    }

    /// Bytes of live contents just before each call (index n: after the last).
    fn live_bytes(&self) -> Vec<u64> {
        let n = self.calls.len();
        let mut diff = vec![0i128; n + 2];
        for (a, u) in &self.uses {
            let (_, freed, size) = self.life[a];
            for w in u.windows(2) {
                if w[1].1.reads() {
                    // Live just before calls w[0].0 + 1 ..= w[1].0.
                    diff[w[0].0 + 1] += size as i128;
                    diff[w[1].0 + 1] -= size as i128;
                }
            }
            if freed == usize::MAX
                && let Some(&(last, _)) = u.last()
            {
                diff[last + 1] += size as i128;
            }
        }
        prefix(&diff[..=n])
    }
}

/// Running sums of a difference array.
fn prefix(diff: &[i128]) -> Vec<u64> {
    let mut cur = 0i128;
    diff.iter()
        .map(|d| {
            cur += d;
            cur.max(0) as u64
        })
        .collect()
}

/// Each call's lineage, by the call's `seq`: a `lineage` record describes the next call record of
/// its thread.
pub fn lineage(records: &[Record]) -> HashMap<u64, &Replay> {
    let mut waiting: HashMap<u64, &Replay> = HashMap::new();
    let mut out = HashMap::new();
    for r in records {
        match &r.event {
            Event::Lineage { replay } => {
                waiting.insert(r.tid, replay);
            }
            e if e.api().is_some() => {
                if let Some(l) = waiting.remove(&r.tid) {
                    out.insert(r.seq, l);
                }
            }
            _ => {}
        }
    }
    out
}

/// The cuDNN computations the shim's executor can replay to recompute their output (Capuchin's
/// recomputation, by the call's record and lineage: descriptors rebuilt from the recorded shapes,
/// scalars by value). Convolutions are replayed (Chen et al.'s and Capuchin's classic choice: a
/// convolution's output is rebuilt from its input and weight, which its own backward keeps
/// anyway): the legacy `cudnnConvolutionForward` with its recorded algorithm and a workspace of
/// the recorded size, and a backend execution through the program's own execution plan (alive,
/// see [`Replay::Backend`]) with a variant pack of the recorded unique ids and the current
/// addresses, when every tensor of it is read or written whole (the workspace aside). Kernels
/// are replayed too where the shim knew their roles exactly (every touch `r` or `w`, see the
/// shim's `hooks::launch`): the recorded parameter buffer with each operand's pointer replaced
/// by the current one. The rest (kernels whose roles are inferred, library calls whose
/// descriptors the lineage does not carry, batch normalisation, which updates running
/// statistics too; host-to-device copies, whose source the program may have changed) are never
/// recomputed: their outputs are kept or swapped.
pub const REPLAYED: &[&str] = &[
    "cudnnActivationForward",
    "cudnnAddTensor",
    "cudnnSoftmaxForward",
    "cudnnConvolutionForward",
    "cudnnBackendExecute",
];

/// Whether the shim can replay this call (see [`REPLAYED`]).
pub fn replays_in_shim(event: &Event, replay: Option<&Replay>) -> bool {
    if let (
        Event::Launch {
            touches, result: 0, ..
        },
        Some(Replay::Kernel { .. }),
    ) = (event, replay)
    {
        // Exact roles only: an `rw` touch may be a write the kernel does not declare, and a
        // replay would then repeat it on the current contents.
        return touches.iter().any(|t| t.access == Access::W)
            && touches.iter().all(|t| t.access != Access::Rw);
    }
    let Event::Cudnn {
        api,
        tensors,
        algo,
        workspace,
        result: 0,
        ..
    } = event
    else {
        return false;
    };
    // The workspace is scratch: a replay brings its own.
    let operands = || tensors.iter().filter(|t| t.role != "workspace");
    let shaped = operands().all(|t| !t.dims.is_empty() && t.dims.len() == t.strides.len());
    if let Some(Replay::Backend { .. }) = replay {
        // Every operand read or written whole, by unique id (the beta of a convolution that
        // accumulates makes its output `rw`); something written.
        return api == "cudnnBackendExecute"
            && shaped
            && operands().all(|t| t.uid.is_some() && t.access != Access::Rw)
            && operands().any(|t| t.access == Access::W);
    }
    let Some(Replay::Cudnn {
        alpha: Some(_),
        beta: Some(beta),
        dtype: Some(_),
        conv,
        activation,
        softmax,
    }) = replay
    else {
        return false;
    };
    // With beta 0 the output is written whole from the inputs alone; otherwise the call reads
    // the output's old contents, which the recomputed version replaced.
    if *beta != 0.0 {
        return false;
    }
    shaped
        && match api.as_str() {
            "cudnnActivationForward" => activation.is_some(),
            "cudnnSoftmaxForward" => softmax.is_some(),
            "cudnnAddTensor" => true,
            // The recorded algorithm and workspace size, and x, w and y.
            "cudnnConvolutionForward" => {
                conv.is_some()
                    && algo.is_some()
                    && workspace.is_some()
                    && ["x", "w", "y"]
                        .iter()
                        .all(|r| operands().filter(|t| t.role == *r).count() == 1)
            }
            _ => false,
        }
}

/// A demangled kernel name without `void `, its parameter list and past 100 characters.
pub fn short_kernel_name(name: &str) -> String {
    let name = name.strip_prefix("void ").unwrap_or(name);
    let head = name.rfind(">(").map_or(name, |i| &name[..=i]);
    let mut out: String = head.chars().take(100).collect();
    if out.len() < head.len() {
        out.push_str("...");
    }
    out
}

/// Where a storage of the model comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    pub tensor: TensorId,
    /// The call (offset within the iteration) that wrote this content; `None` for contents
    /// carried in from the iteration before (the model's constants).
    pub written_by: Option<usize>,
}

/// The model of one iteration and how it maps back to the calls.
#[derive(Debug, Clone)]
pub struct Converted {
    pub trace: Trace,
    /// The steady iteration, or why none was found (the whole trace is modelled then).
    pub iteration: Result<Steady, String>,
    /// For each operation: its call's offset within the iteration, and that call's `seq`.
    pub ops: Vec<(usize, u64)>,
    pub storages: Vec<Origin>,
    /// Each operation's lineage (what replaying its call needs), where the trace has it.
    pub replays: Vec<Option<Replay>>,
    /// Operations with no `timing` record (their time is 0).
    pub untimed: usize,
}

/// The cut with the fewest live bytes crossing it; on a tie, the fewest allocated bytes (after
/// the program's frees, not between a last read and a free), then the earliest.
fn choose_cut(live: &[u64], allocated: &[u64], region: Region) -> usize {
    region
        .cuts()
        .min_by_key(|&c| (live[c], allocated[c], c))
        .unwrap_or(region.start)
}

/// Builds the model of one steady iteration of a Marmoset trace (recorded with
/// `MARMOSET_TRACE_TIMING=1`).
pub fn convert(records: &[Record]) -> Result<Converted, String> {
    let mut times: HashMap<u64, f64> = HashMap::new();
    for r in records {
        if let Event::Timing { of, device_ms } = r.event {
            times.insert(of, device_ms * 1e-3);
        }
    }
    let replays = lineage(records);
    let kernel_names: HashMap<u64, &str> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::Kernel { func, name } => Some((*func, name.as_str())),
            _ => None,
        })
        .collect();
    let s = Stream::new(records);
    if times.is_empty() {
        let used = s.roles.iter().any(|r| !r.is_empty());
        return Err(if used {
            "the trace has no device timings: record it with MARMOSET_TRACE_TIMING=1".into()
        } else {
            "the trace has no operations".into()
        });
    }
    let tokens: Vec<u64> = s.calls.iter().map(|c| c.token).collect();
    let (live, allocated) = (s.live_bytes(), s.allocated_bytes());
    let iteration = match iteration::detect(&tokens) {
        Some(region) => {
            iteration::steady_from(&s.calls, region, |r| choose_cut(&live, &allocated, r))
                .map_err(|d| d.to_string())
        }
        None => Err(format!(
            "no repeating iteration in {} calls (two iterations or more are needed)",
            s.calls.len()
        )),
    };
    let (ws, we) = match &iteration {
        Ok(st) => (st.start, st.start + st.period),
        Err(_) => (0, s.calls.len()),
    };
    let name = |a: u64| -> TensorId {
        match &iteration {
            Ok(st) => st.names.get(&a).copied(),
            Err(_) => None,
        }
        .unwrap_or(TensorId::Persistent {
            alloc: a,
            size: s.life.get(&a).map_or(0, |l| l.2),
        })
    };
    // Whether allocation `a`'s last contents in the iteration are read by the next one: what
    // held for its counterpart one period earlier, at this iteration's start.
    let live_after = |a: u64| -> bool {
        let Some(&(made, freed, _)) = s.life.get(&a) else {
            return false;
        };
        if freed < we {
            return false;
        }
        match (&iteration, name(a)) {
            // Made inside the repetition: its counterpart was made one period earlier.
            (Ok(st), TensorId::Rel { .. }) if made >= st.period => {
                match s.calls[made - st.period].effect {
                    Effect::Alloc { id, .. } => s.live_at(id, ws),
                    Effect::Free { .. } | Effect::Use => true,
                }
            }
            (Ok(_), _) => s.live_at(a, ws),
            (Err(_), _) => freed == usize::MAX,
        }
    };

    let mut t = Trace::default();
    let mut origins: Vec<Origin> = Vec::new();
    let mut current: HashMap<u64, usize> = HashMap::new();
    // Storages never freed (live at the end), and each storage's last operation.
    let mut last_op: Vec<Option<usize>> = Vec::new();
    let new_storage = |t: &mut Trace,
                       origins: &mut Vec<Origin>,
                       last_op: &mut Vec<Option<usize>>,
                       a: u64,
                       constant: bool,
                       producer: Option<usize>,
                       written_by: Option<usize>| {
        t.storages.push(Storage {
            size: s.life.get(&a).map_or(0, |l| l.2),
            constant,
            producer,
        });
        origins.push(Origin {
            tensor: name(a),
            written_by,
        });
        last_op.push(producer);
        t.storages.len() - 1
    };
    // Contents carried in: the constants, in allocation order.
    let mut carried: Vec<u64> = s
        .life
        .keys()
        .copied()
        .filter(|&a| s.live_at(a, ws))
        .collect();
    carried.sort_by_key(|a| s.life[a].0);
    for a in carried {
        let st = new_storage(&mut t, &mut origins, &mut last_op, a, true, None, None);
        current.insert(a, st);
    }
    let mut op_calls = Vec::new();
    let mut op_replays = Vec::new();
    let mut untimed = 0;
    // Storages to free right after each operation.
    let mut scratch_of: Vec<Vec<usize>> = Vec::new();
    for i in ws..we {
        if s.roles[i].is_empty() {
            continue;
        }
        let r = s.records[i];
        let opi = t.ops.len();
        let secs = match times.get(&r.seq) {
            Some(&t) => t,
            None => {
                untimed += 1;
                0.0
            }
        };
        let name_of_op = match &r.event {
            Event::Launch { func, .. } => match kernel_names.get(func) {
                Some(n) => format!("kernel {}", short_kernel_name(n)),
                None => format!("kernel {func:#x}"),
            },
            e => e.api().unwrap_or("?").to_string(),
        };
        let replayable = replays_in_shim(&r.event, replays.get(&r.seq).copied());
        let mut op = Op::new(&name_of_op, secs, vec![], vec![]);
        let mut scratch = Vec::new();
        for &(a, role) in &s.roles[i] {
            let cur = current.get(&a).copied();
            match (role, cur) {
                (Role::Read, Some(c)) => op.inputs.push(c),
                (Role::Update, Some(c)) => {
                    op.inputs.push(c);
                    op.mutates.push(c);
                }
                (Role::Read, None) => {
                    // Read before anything wrote it: what it held before (garbage or data the
                    // program put there some other way) is needed from the start.
                    let c = new_storage(&mut t, &mut origins, &mut last_op, a, true, None, None);
                    current.insert(a, c);
                    op.inputs.push(c);
                }
                (Role::Overwrite | Role::Update | Role::Scratch, _) => {
                    let producer = (replayable && role != Role::Scratch).then_some(opi);
                    let c = new_storage(
                        &mut t,
                        &mut origins,
                        &mut last_op,
                        a,
                        false,
                        producer,
                        Some(i - ws),
                    );
                    last_op[c] = Some(opi);
                    op.outputs.push(c);
                    if role == Role::Scratch {
                        // cuDNN scribbles over whatever the workspace held.
                        scratch.push(c);
                        current.remove(&a);
                    } else {
                        current.insert(a, c);
                    }
                }
            }
            if let Some(c) = cur
                && role.reads()
            {
                last_op[c] = Some(opi);
            }
        }
        if replayable {
            // A replay brings a workspace of its own, as large as the call's.
            op.scratch = scratch.iter().map(|&c| t.storages[c].size).sum();
        }
        t.ops.push(op);
        op_calls.push((i - ws, r.seq));
        op_replays.push(replays.get(&r.seq).map(|&x| x.clone()));
        let muts = t.ops[opi].mutates.clone();
        for old in muts {
            let Some(a) = s.roles[i]
                .iter()
                .map(|x| x.0)
                .find(|a| current.get(a) == Some(&old))
            else {
                continue;
            };
            let new = new_storage(
                &mut t,
                &mut origins,
                &mut last_op,
                a,
                false,
                replayable.then_some(opi),
                Some(i - ws),
            );
            last_op[new] = Some(opi);
            t.ops[opi].inplace.push((old, new));
            current.insert(a, new);
        }
        scratch_of.push(scratch);
    }
    if t.ops.is_empty() {
        return Err("the iteration has no operations".into());
    }
    if untimed == t.ops.len() {
        return Err(
            "the iteration's calls have no device timings: record it with MARMOSET_TRACE_TIMING=1"
                .into(),
        );
    }
    // Frees: every content that is not the live last content of its allocation goes after its
    // last operation (dead contents cost nothing); in-place versions hand their memory on.
    let replaced: Vec<bool> = {
        let mut v = vec![false; t.storages.len()];
        for op in &t.ops {
            for &(old, _) in &op.inplace {
                v[old] = true;
            }
        }
        v
    };
    let keep: Vec<bool> = {
        let mut v = vec![false; t.storages.len()];
        for (&a, &c) in &current {
            v[c] = live_after(a);
        }
        v
    };
    let mut free_after: Vec<Vec<usize>> = vec![Vec::new(); t.ops.len()];
    for (c, lo) in last_op.iter().enumerate() {
        if replaced[c] || keep[c] {
            continue;
        }
        if let Some(o) = lo {
            free_after[*o].push(c);
        }
    }
    for (o, frees) in free_after.iter_mut().enumerate() {
        frees.extend(scratch_of[o].iter().copied());
        frees.sort_unstable();
        frees.dedup();
    }
    for (o, frees) in free_after.into_iter().enumerate() {
        t.steps.push(Step::Op(o));
        t.steps.extend(frees.into_iter().map(Step::Free));
    }
    mark_backward(&mut t);
    t.validate()
        .map_err(|e| format!("the iteration does not form a consistent model: {e}"))?;
    Ok(Converted {
        trace: t,
        iteration,
        ops: op_calls,
        storages: origins,
        replays: op_replays,
        untimed,
    })
}

/// No call says where the backward pass begins (DTR's logs annotate it). Inferred: after the
/// operation at which the memory load peaks, the end of the forward pass in training.
fn mark_backward(t: &mut Trace) {
    let mut used = t.constant_bytes();
    let (mut peak, mut at) = (used, 0);
    for step in &t.steps {
        match *step {
            Step::Op(i) => {
                used += t.ops[i]
                    .outputs
                    .iter()
                    .map(|&s| t.storages[s].size)
                    .sum::<u64>();
                if used > peak {
                    (peak, at) = (used, i);
                }
            }
            Step::Free(s) => used -= t.storages[s].size,
        }
    }
    for (i, op) in t.ops.iter_mut().enumerate() {
        op.backward = i > at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{CopyDir, TensorArg, Touch};

    fn touch(alloc: u64, bytes: u64, access: Access) -> Touch {
        Touch {
            alloc,
            offset: 0,
            bytes,
            access,
        }
    }
    fn tensor(role: &str, ptr: u64, access: Access) -> TensorArg {
        TensorArg {
            role: role.into(),
            ptr,
            dims: vec![1, 1, 1, 1],
            strides: vec![1, 1, 1, 1],
            access,
            uid: None,
        }
    }
    fn cudnn(api: &str, tensors: Vec<TensorArg>, touches: Vec<Touch>) -> Event {
        Event::Cudnn {
            api: api.into(),
            stream: Some(0),
            algo: Some(1),
            workspace: Some(0),
            tensors,
            touches,
            result: 0,
        }
    }
    fn alloc(id: u64, size: u64) -> Event {
        Event::Alloc {
            api: "cudaMallocAsync".into(),
            alloc: id,
            ptr: ptr(id),
            size,
            stream: Some(0),
            result: 0,
        }
    }
    fn free(id: u64) -> Event {
        Event::Free {
            api: "cudaFreeAsync".into(),
            ptr: ptr(id),
            alloc: Some(id),
            size: None,
            stream: Some(0),
            result: 0,
        }
    }
    fn ptr(id: u64) -> u64 {
        0x1000_0000 * id
    }
    fn copy(dir: CopyDir, size: u64, touches: Vec<Touch>) -> Event {
        Event::Copy {
            api: "cudaMemcpyAsync".into(),
            dst: 0,
            src: 0,
            size,
            dir,
            stream: Some(0),
            touches,
            result: 0,
        }
    }
    fn kernel(touches: Vec<Touch>) -> Event {
        Event::Launch {
            api: "cudaLaunchKernel".into(),
            func: 0x40,
            grid: [1, 1, 1],
            block: [1, 1, 1],
            stream: Some(0),
            touches,
            result: 0,
        }
    }
    /// Records with sequence numbers, each call that touches memory followed by its timing.
    fn records(events: Vec<Event>, timed: bool) -> Vec<Record> {
        let mut out = Vec::new();
        let mut seq = 0;
        for e in events {
            let has_touches = !e.touches().is_empty();
            out.push(Record {
                seq,
                t_ns: 0,
                tid: 1,
                event: e,
            });
            if has_touches && timed {
                out.push(Record {
                    seq: seq + 1,
                    t_ns: 0,
                    tid: 1,
                    event: Event::Timing {
                        of: seq,
                        device_ms: 1.0,
                    },
                });
            }
            seq += 2;
        }
        out
    }

    #[test]
    fn kernels_replay_only_with_exact_roles() {
        let lineage = Replay::Kernel {
            params: "00".into(),
            shared: 0,
        };
        // The shim knew the roles (an elementwise kernel: output written whole, input read).
        let exact = kernel(vec![touch(2, 64, Access::W), touch(1, 0, Access::R)]);
        assert!(replays_in_shim(&exact, Some(&lineage)));
        // Without the parameter buffer there is nothing to replay.
        assert!(!replays_in_shim(&exact, None));
        // An inferred touch may be an undeclared write: never replayed.
        let inferred = kernel(vec![touch(2, 64, Access::W), touch(1, 0, Access::Rw)]);
        assert!(!replays_in_shim(&inferred, Some(&lineage)));
        // Nothing written: nothing to recompute.
        let reads = kernel(vec![touch(1, 0, Access::R)]);
        assert!(!replays_in_shim(&reads, Some(&lineage)));
    }

    fn conv_lineage(beta: f64, conv: bool) -> Replay {
        Replay::Cudnn {
            alpha: Some(1.0),
            beta: Some(beta),
            dtype: Some(0),
            conv: conv.then(|| crate::trace::ConvParams {
                pads: vec![0, 0],
                strides: vec![1, 1],
                dilations: vec![1, 1],
                mode: 1,
                compute: 0,
                groups: 1,
                math: 0,
            }),
            activation: None,
            softmax: None,
        }
    }
    fn workspace(ptr: u64) -> TensorArg {
        TensorArg {
            dims: vec![],
            strides: vec![],
            ..tensor("workspace", ptr, Access::Rw)
        }
    }

    #[test]
    fn convolutions_replay_with_their_algorithm_and_parameters() {
        let conv = |y: Access| {
            cudnn(
                "cudnnConvolutionForward",
                vec![
                    tensor("x", ptr(1), Access::R),
                    tensor("w", ptr(2), Access::R),
                    tensor("y", ptr(3), y),
                    workspace(ptr(4)),
                ],
                vec![],
            )
        };
        // Beta 0: y written whole from x and w; the workspace is the replay's own.
        assert!(replays_in_shim(
            &conv(Access::W),
            Some(&conv_lineage(0.0, true))
        ));
        // Beta 1 reads y's old contents; without the convolution's parameters, or without the
        // call's algorithm, there is nothing to rebuild it from.
        assert!(!replays_in_shim(
            &conv(Access::Rw),
            Some(&conv_lineage(1.0, true))
        ));
        assert!(!replays_in_shim(
            &conv(Access::W),
            Some(&conv_lineage(0.0, false))
        ));
        assert!(!replays_in_shim(&conv(Access::W), None));
        let mut no_algo = conv(Access::W);
        if let Event::Cudnn { algo, .. } = &mut no_algo {
            *algo = None;
        }
        assert!(!replays_in_shim(&no_algo, Some(&conv_lineage(0.0, true))));
        // The backward convolutions are not replayed.
        let bwd = cudnn(
            "cudnnConvolutionBackwardData",
            vec![
                tensor("w", ptr(2), Access::R),
                tensor("dy", ptr(1), Access::R),
                tensor("dx", ptr(3), Access::W),
            ],
            vec![],
        );
        assert!(!replays_in_shim(&bwd, Some(&conv_lineage(0.0, true))));
    }

    #[test]
    fn backend_executions_replay_through_their_plan_only_with_exact_roles() {
        let plan = Replay::Backend {
            plan: 0x5000,
            life: 1,
        };
        let with = |y: Access, y_uid: Option<i64>| {
            cudnn(
                "cudnnBackendExecute",
                vec![
                    TensorArg {
                        uid: Some(1),
                        ..tensor("x", ptr(1), Access::R)
                    },
                    TensorArg {
                        uid: Some(2),
                        ..tensor("w", ptr(2), Access::R)
                    },
                    TensorArg {
                        uid: y_uid,
                        ..tensor("y", ptr(3), y)
                    },
                    workspace(ptr(4)),
                ],
                vec![],
            )
        };
        assert!(replays_in_shim(&with(Access::W, Some(3)), Some(&plan)));
        // An output the plan accumulates into (beta not 0) or a tensor outside the
        // convolution (`uidN`, rw): never replayed.
        assert!(!replays_in_shim(&with(Access::Rw, Some(3)), Some(&plan)));
        // Without each tensor's unique id a variant pack cannot be built; without the plan
        // (no lineage: it was made before Marmoset was loaded) there is nothing to execute.
        assert!(!replays_in_shim(&with(Access::W, None), Some(&plan)));
        assert!(!replays_in_shim(&with(Access::W, Some(3)), None));
        assert!(!replays_in_shim(
            &with(Access::W, Some(3)),
            Some(&conv_lineage(0.0, true))
        ));
        // Nothing written: nothing to recompute.
        assert!(!replays_in_shim(&with(Access::R, Some(3)), Some(&plan)));
    }

    /// Each iteration: X (new id) copied in, Y = conv(X, W) with a workspace allocation WS of
    /// 64 B (allocated and freed around it), then a kernel reads Y and updates W.
    #[test]
    fn a_replayed_convolution_needs_its_workspace() {
        let run = |lineage: bool| {
            let mut v = vec![
                alloc(1, 100),
                copy(CopyDir::H2d, 100, vec![touch(1, 100, Access::W)]),
            ];
            for i in 0..3 {
                let (x, y, ws) = (10 + 3 * i, 11 + 3 * i, 12 + 3 * i);
                v.push(alloc(x, 10));
                v.push(copy(CopyDir::H2d, 10, vec![touch(x, 10, Access::W)]));
                v.push(alloc(y, 40));
                v.push(alloc(ws, 64));
                if lineage {
                    v.push(Event::Lineage {
                        replay: conv_lineage(0.0, true),
                    });
                }
                v.push(cudnn(
                    "cudnnConvolutionForward",
                    vec![
                        tensor("x", ptr(x), Access::R),
                        tensor("w", ptr(1), Access::R),
                        tensor("y", ptr(y), Access::W),
                        workspace(ptr(ws)),
                    ],
                    vec![
                        touch(x, 10, Access::R),
                        touch(1, 100, Access::R),
                        touch(y, 40, Access::W),
                        touch(ws, 64, Access::Rw),
                    ],
                ));
                v.push(free(ws));
                v.push(kernel(vec![
                    touch(y, 0, Access::R),
                    touch(1, 0, Access::Rw),
                ]));
                v.push(free(x));
                v.push(free(y));
            }
            v.push(free(1));
            convert(&records(v, true)).unwrap()
        };
        let c = run(true);
        let conv = c
            .trace
            .ops
            .iter()
            .position(|o| o.name == "cudnnConvolutionForward")
            .unwrap();
        let t = &c.trace;
        // Y has the convolution as its producer; the workspace is scratch, and a replay needs
        // one as large.
        let y = t.ops[conv]
            .outputs
            .iter()
            .copied()
            .find(|&s| t.storages[s].size == 40)
            .unwrap();
        assert_eq!(t.storages[y].producer, Some(conv));
        assert_eq!(t.ops[conv].scratch, 64);
        // Without lineage: no producer, and no replay to need a workspace.
        let c = run(false);
        let t = &c.trace;
        let conv = t
            .ops
            .iter()
            .position(|o| o.name == "cudnnConvolutionForward")
            .unwrap();
        assert!(
            t.ops[conv]
                .outputs
                .iter()
                .all(|&s| t.storages[s].producer.is_none())
        );
        assert_eq!(t.ops[conv].scratch, 0);
    }

    #[test]
    fn roles_from_the_trace() {
        let allocs: HashMap<u64, (u64, u64)> =
            [(1, (ptr(1), 64)), (2, (ptr(2), 64)), (3, (ptr(3), 32))].into();
        let conv = cudnn(
            "cudnnConvolutionForward",
            vec![
                tensor("x", ptr(1), Access::R),
                tensor("y", ptr(2), Access::W),
                tensor("workspace", ptr(3), Access::Rw),
            ],
            vec![
                touch(1, 64, Access::R),
                touch(2, 64, Access::W),
                touch(3, 32, Access::Rw),
            ],
        );
        assert_eq!(
            roles(&conv, &allocs),
            [(1, Role::Read), (2, Role::Overwrite), (3, Role::Scratch)]
        );
        // beta != 0: the output is read too.
        let acc = cudnn("cudnnAddTensor", vec![], vec![touch(2, 64, Access::Rw)]);
        assert_eq!(roles(&acc, &allocs), [(2, Role::Update)]);
        // In place (x and y the same allocation): the old contents are read.
        let inplace = cudnn(
            "cudnnActivationForward",
            vec![],
            vec![touch(2, 64, Access::R), touch(2, 64, Access::W)],
        );
        assert_eq!(roles(&inplace, &allocs), [(2, Role::Update)]);
        // A cuBLASLt workspace is scratch too (written before it is read, within the call).
        let gemm = Event::Cublas {
            api: "cublasLtMatmul".into(),
            stream: Some(0),
            m: 4,
            n: 4,
            k: 4,
            batch: 1,
            kernels: 1,
            tensors: vec![
                tensor("A", ptr(1), Access::R),
                tensor("D", ptr(2), Access::W),
                tensor("workspace", ptr(3), Access::Rw),
            ],
            touches: vec![
                touch(1, 64, Access::R),
                touch(2, 64, Access::W),
                touch(3, 32, Access::Rw),
            ],
            result: 0,
        };
        assert_eq!(
            roles(&gemm, &allocs),
            [(1, Role::Read), (2, Role::Overwrite), (3, Role::Scratch)]
        );
        // A write of part of an allocation keeps the rest: a new version of the old contents.
        let part = Event::Memset {
            api: "cudaMemsetAsync".into(),
            ptr: ptr(1),
            size: 32,
            stream: None,
            touches: vec![touch(1, 32, Access::W)],
            result: 0,
        };
        assert_eq!(roles(&part, &allocs), [(1, Role::Update)]);
        let d2d = copy(
            CopyDir::D2d,
            64,
            vec![touch(1, 64, Access::R), touch(2, 64, Access::W)],
        );
        assert_eq!(
            roles(&d2d, &allocs),
            [(1, Role::Read), (2, Role::Overwrite)]
        );
        // A kernel's pointer: read, and maybe written.
        let k = kernel(vec![touch(1, 0, Access::Rw)]);
        assert_eq!(roles(&k, &allocs), [(1, Role::Update)]);
        // Allocations the trace does not know are no touch at all.
        let unknown = kernel(vec![touch(9, 0, Access::Rw)]);
        assert!(roles(&unknown, &allocs).is_empty());
    }

    /// Setup: weights W (1, 100 B) from the host, a Caffe-style blob B (2, 40 B) allocated
    /// once. Each iteration: the input X is allocated (a new id) and copied in, A = conv(X, W)
    /// is allocated (a new id), B = act(A) overwrites B whole, a kernel updates W from B, then
    /// X and A are freed.
    fn program(iters: u64) -> Vec<Event> {
        let mut v = vec![
            alloc(1, 100),
            copy(CopyDir::H2d, 100, vec![touch(1, 100, Access::W)]),
            alloc(2, 40),
        ];
        for i in 0..iters {
            let (x, a) = (10 + 2 * i, 11 + 2 * i);
            v.push(alloc(x, 10));
            v.push(copy(CopyDir::H2d, 10, vec![touch(x, 10, Access::W)]));
            v.push(alloc(a, 40));
            v.push(cudnn(
                "cudnnConvolutionForward",
                vec![],
                vec![
                    touch(x, 10, Access::R),
                    touch(1, 100, Access::R),
                    touch(a, 40, Access::W),
                ],
            ));
            v.push(cudnn(
                "cudnnActivationForward",
                vec![],
                vec![touch(a, 40, Access::R), touch(2, 40, Access::W)],
            ));
            v.push(kernel(vec![
                touch(1, 0, Access::Rw),
                touch(2, 0, Access::Rw),
            ]));
            v.push(free(x));
            v.push(free(a));
        }
        v.push(free(1));
        v.push(free(2));
        v
    }

    #[test]
    fn kernels_are_named_by_their_kernel_record() {
        let mut v = program(3);
        v.insert(
            0,
            Event::Kernel {
                func: 0x40,
                name: "void at::native::scale_kernel<float>(int, float*)".into(),
            },
        );
        let c = convert(&records(v, true)).unwrap();
        assert_eq!(
            c.trace.ops.last().unwrap().name,
            "kernel at::native::scale_kernel<float>"
        );
        assert_eq!(
            short_kernel_name(&format!("void {}(int)", "k".repeat(150))),
            format!("{}...", "k".repeat(100))
        );
    }

    #[test]
    fn one_steady_iteration_of_contents() {
        let c = convert(&records(program(3), true)).unwrap();
        let s = c.iteration.as_ref().unwrap();
        assert_eq!((s.period, s.iterations, s.index), (8, 3, 2), "{s:?}");
        assert_eq!(c.untimed, 0);
        let t = &c.trace;
        let names: Vec<&str> = t.ops.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "cudaMemcpyAsync",
                "cudnnConvolutionForward",
                "cudnnActivationForward",
                "kernel 0x40"
            ]
        );
        assert_eq!(
            c.ops.iter().map(|o| o.0).collect::<Vec<_>>(),
            [1, 3, 4, 5],
            "each operation's call within the iteration"
        );
        assert!(t.ops.iter().all(|o| o.time_s == 1e-3));
        // Only the weights are carried in: B's contents are dead between iterations (the
        // kernel read them last; act overwrites them whole), X and A are new every time.
        let constants: Vec<TensorId> = (0..t.storages.len())
            .filter(|&s| t.storages[s].constant)
            .map(|s| c.storages[s].tensor)
            .collect();
        assert_eq!(
            constants,
            [TensorId::Persistent {
                alloc: 1,
                size: 100
            }]
        );
        // The input from the host can be swapped, never recomputed; so can A (the shim does
        // not replay convolutions) and B (its record has no lineage to replay it from).
        let x = t.ops[0].outputs[0];
        assert_eq!(t.storages[x].producer, None);
        assert_eq!(
            c.storages[x].tensor,
            TensorId::Rel {
                back: 0,
                k: 0,
                size: 10
            }
        );
        let a = t.ops[1].outputs[0];
        assert_eq!((t.storages[a].producer, t.storages[a].size), (None, 40));
        assert_eq!(t.ops[1].inputs, [x, 0]);
        let b = t.ops[2].outputs[0];
        assert_eq!(t.storages[b].producer, None);
        // The kernel: new versions of both (it may have written either).
        assert_eq!(t.ops[3].inputs, [0, b]);
        assert_eq!(t.ops[3].inplace.len(), 2);
        let (w2, b2) = (t.ops[3].inplace[0].1, t.ops[3].inplace[1].1);
        // Frees at the last read: X and A after act... X after conv, A after act, B's new
        // version right after the kernel; the new weights stay (the next iteration reads them).
        let frees: Vec<usize> = t
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Free(x) => Some(*x),
                _ => None,
            })
            .collect();
        assert_eq!(frees, [x, a, b2]);
        assert!(!frees.contains(&w2));
        // Peak: W + X + A at the convolution... W + A + B at act.
        assert_eq!(t.peak(), 100 + 40 + 40);
        assert!(t.ops[3].backward && !t.ops[1].backward);
    }

    #[test]
    fn what_the_next_iteration_reads_stays() {
        // A batch prefetched before the current one is consumed: one is live at every point, so
        // whatever the cut, a batch made in one iteration is read (then freed) by the next.
        let mut v = vec![alloc(1, 100)];
        let mut prev = None;
        for i in 0..4 {
            let n = 10 + i;
            v.push(alloc(n, 8));
            v.push(copy(CopyDir::H2d, 8, vec![touch(n, 8, Access::W)]));
            let p = prev.unwrap_or(n);
            v.push(cudnn(
                "cudnnActivationForward",
                vec![],
                vec![touch(p, 8, Access::R), touch(1, 100, Access::W)],
            ));
            v.push(free(if prev.is_some() { p } else { 99 }));
            prev = Some(n);
        }
        let c = convert(&records(v, true)).unwrap();
        let s = c.iteration.as_ref().unwrap();
        assert_eq!(
            (s.period, s.start % 4),
            (4, 1),
            "cut before the prefetch: {s:?}"
        );
        let t = &c.trace;
        let carried: Vec<TensorId> = (0..t.storages.len())
            .filter(|&x| t.storages[x].constant)
            .map(|x| c.storages[x].tensor)
            .collect();
        assert_eq!(
            carried,
            [TensorId::Rel {
                back: 1,
                k: 0,
                size: 8
            }],
            "the weights are dead (overwritten whole before any read); the last batch is carried"
        );
        let made = t.ops[0].outputs[0];
        assert_eq!(
            c.storages[made].tensor,
            TensorId::Rel {
                back: 0,
                k: 0,
                size: 8
            }
        );
        assert!(
            !t.steps.contains(&Step::Free(made)),
            "the next batch is kept for the next iteration"
        );
        assert!(t.steps.contains(&Step::Free(0)), "the carried batch goes");
    }

    /// Random streams of calls over a few allocations (unknown ids, double frees, reads of
    /// nothing, failed calls): an error or a valid model, never a panic.
    #[test]
    fn any_stream_converts_or_says_why() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let access = [Access::R, Access::W, Access::Rw];
        for _ in 0..300 {
            let block: Vec<Event> = (0..1 + next(12))
                .map(|_| {
                    let a = 1 + next(6);
                    let t = |next: &mut dyn FnMut(u64) -> u64| {
                        touch(1 + next(6), next(3) * 32, access[next(3) as usize])
                    };
                    match next(6) {
                        0 => alloc(a, 32 * (1 + next(3))),
                        1 => free(a),
                        2 => kernel(vec![t(&mut next), t(&mut next)]),
                        3 => copy(CopyDir::D2d, 64, vec![t(&mut next)]),
                        4 => cudnn("cudnnAddTensor", vec![], vec![t(&mut next), t(&mut next)]),
                        _ => Event::Sync {
                            api: "cudaDeviceSynchronize".into(),
                            stream: None,
                            result: next(2) as i32,
                        },
                    }
                })
                .collect();
            let reps = 1 + next(4);
            let events: Vec<Event> = (0..reps).flat_map(|_| block.clone()).collect();
            if let Ok(c) = convert(&records(events, next(5) != 0)) {
                c.trace.validate().unwrap();
                assert_eq!(c.ops.len(), c.trace.ops.len());
                assert_eq!(c.storages.len(), c.trace.storages.len());
            }
        }
    }

    #[test]
    fn untimed_unrepeated_and_empty_traces() {
        let e = convert(&records(program(3), false)).unwrap_err();
        assert!(e.contains("MARMOSET_TRACE_TIMING=1"), "{e}");
        // One iteration: no repetition; the whole trace is modelled, and says why.
        let c = convert(&records(program(1), true)).unwrap();
        assert!(c.iteration.as_ref().unwrap_err().contains("no repeating"));
        assert_eq!(c.trace.ops.len(), 5, "the weights' copy too");
        assert!(convert(&[]).is_err());
    }
}
