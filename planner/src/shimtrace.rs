//! A Marmoset trace as planner input: one steady iteration of the shim's call stream in the
//! planner's [`Trace`] model, as faithful as DTR's operator-level logs.
//!
//! - **The iteration** is found by [`crate::iteration`]: the repetition of the call stream, cut
//!   where the fewest bytes of live contents cross the cut (between an optimizer step and the
//!   next forward pass, wherever the program's calls happen to start), verified against the
//!   iteration before, and not the first; or, where the shim's tracker follows a repetition of
//!   one full iteration and the next's first calls, that one, verified against them.
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
//! - **Unseen writes.** Memory allocated during the iteration and read before any call wrote it
//!   was written where the trace does not show (a kernel handed its pointers in device memory):
//!   an operation of no duration makes those contents right before the read ([`UNSEEN_WRITE`]);
//!   they are no constants, live to their last read, and cannot be recomputed.
//! - **Lineage.** A storage's producer is the call that wrote it; host-to-device copies read
//!   host memory the program may have changed since, so their contents have no producer (they
//!   can be swapped, never recomputed).
//! - **Durations** are the `timing` records' device times (`MARMOSET_TRACE_TIMING=1`), measured
//!   from after Marmoset's own work for the call (a restore the call's stream waits for, the
//!   host waiting for room), so a trace recorded under a budget gives the program's times.
//!
//! The in-shim executor maps the plan back with [`Converted::ops`] (each operation's call within
//! the iteration) and [`Converted::storages`] (each storage's tensor and version).

mod held;
mod replay;
mod stream;

/// The name of the operation of no duration that makes contents the iteration reads before any
/// of its calls wrote them, in memory it allocated: a write the trace does not show.
pub const UNSEEN_WRITE: &str = "(contents written where the trace does not show)";

use crate::iteration::{self, Effect, Region, Steady, TensorId};
use crate::model::{Direction, Op, Step, Storage, Trace};
use crate::trace::{CopyDir, Event, Record, Replay};
use std::collections::HashMap;
use stream::Stream;

pub use held::{as_held, convert_as_planned, held_and_links, last_guiding_plan, lent_workspaces};
pub use replay::{
    GEMMS_REPLAYED, REPLAYED, first_writes, in_place_update, lineage, replay_scope,
    replays_in_shim, whole_copy, why_not_replayed,
};
pub use stream::{Role, roles};

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
    /// carried in from the iteration before (the model's constants), or written where the
    /// trace does not show (made by an operation named [`UNSEEN_WRITE`]).
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
    /// For each operation fused from a chain (a call whose replay rebuilds an allocation whole,
    /// then in-place updates of that allocation right after it, such as a batch norm's
    /// `y += identity` and ReLU; or a replayed call that reads the whole output of the one
    /// before it, which dies with it, such as an out-of-place `y + identity` after a batch
    /// norm; or a whole device-to-device copy of an output the chain rebuilds, one more output
    /// of it: see [`whole_copy`]): the calls after the first, in order; empty for every other
    /// operation. The operation is all of them: it ends with its last member's call, and a
    /// recomputation replays the first call and then each member.
    pub chains: Vec<Vec<Member>>,
    /// For each chain: the storages internal to it (the output of a call that only the next
    /// member, an elementwise kernel, reads, freed by the program right after it), each with
    /// the storage a recomputation rebuilds it in: that kernel's output, of the same size, the
    /// kernel then running in place. Never recomputed on their own (no producer).
    pub internal: Vec<Vec<(usize, usize)>>,
    /// For each launch replayed through first writes (see [`first_writes`]), by its call's
    /// `seq`: the allocations its `rw` touches wrote first. A recipe of the launch must see them
    /// as the planner did.
    pub first_written: HashMap<u64, Vec<u64>>,
    /// Why each call the shim cannot replay cannot be, by its `seq` (see
    /// [`why_not_replayed`]); [`Converted::replay_gaps`] sums them up.
    pub not_replayed: HashMap<u64, &'static str>,
    /// Operations with no `timing` record (their time is 0).
    pub untimed: usize,
}

/// A call that joined the operation before it (see [`Converted::chains`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// Its offset within the iteration, and its `seq`.
    pub call: usize,
    pub seq: u64,
    /// Its lineage (a kernel's parameter buffer; [`Replay::Copy`] for a copy).
    pub replay: Option<Replay>,
}

/// Calls whose outputs no recomputation can rebuild, grouped by operation name and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayGap {
    pub name: String,
    pub why: &'static str,
    pub calls: usize,
    /// Bytes of the contents they write that a later operation reads: what can only be kept
    /// or swapped.
    pub bytes: u64,
}

impl Converted {
    /// What cannot be replayed, the most bytes first: every operation that is not replayable
    /// and writes contents a later operation of the iteration reads (what a plan could drop
    /// but must keep or swap instead), grouped by its name and the reason.
    pub fn replay_gaps(&self) -> Vec<ReplayGap> {
        let mut read = vec![false; self.trace.storages.len()];
        for op in &self.trace.ops {
            for &s in &op.inputs {
                read[s] = true;
            }
        }
        let mut out: Vec<ReplayGap> = Vec::new();
        for (i, op) in self.trace.ops.iter().enumerate() {
            let Some(&why) = self.ops.get(i).and_then(|o| self.not_replayed.get(&o.1)) else {
                continue;
            };
            let bytes: u64 = op
                .outputs
                .iter()
                .chain(op.inplace.iter().map(|p| &p.1))
                .filter(|&&s| read[s] && self.trace.storages[s].producer.is_none())
                .map(|&s| self.trace.storages[s].size)
                .sum();
            if bytes == 0 {
                continue;
            }
            match out.iter_mut().find(|g| g.name == op.name && g.why == why) {
                Some(g) => {
                    g.calls += 1;
                    g.bytes += bytes;
                }
                None => out.push(ReplayGap {
                    name: op.name.clone(),
                    why,
                    calls: 1,
                    bytes,
                }),
            }
        }
        out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.name.cmp(&b.name)));
        out
    }

    /// The offset within the iteration of operation `op`'s last call (its first call, unless
    /// it is a chain): what happens after the operation happens after this call.
    pub fn last_call(&self, op: usize) -> Option<usize> {
        let first = self.ops.get(op)?.0;
        Some(
            self.chains
                .get(op)
                .and_then(|c| c.last())
                .map_or(first, |m| m.call),
        )
    }
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
/// `MARMOSET_TRACE_TIMING=1`), chains folded (see [`convert_with`]).
pub fn convert(records: &[Record]) -> Result<Converted, String> {
    convert_with(records, true, None)
}

/// [`convert`], with `fold` saying whether an elementwise kernel that reads a replayed call's
/// whole output, which dies with it, joins that call's chain (see [`Converted::internal`]).
/// Folded, the model is what the shim can carry out; unfolded, the kernel's output is rebuilt
/// from the dead output, which the planner may keep past its free (`Extend`, which the shim
/// does not do: such a recomputation stays resident). The shim plans the folded model; the
/// unfolded one's plans were predicted faster than they ran (MARMOSET_TEST_FOLD=0 plans it).
/// `period`: the repetition of that period which ends the records (the one the shim's tracker
/// found and follows), rather than the longest.
pub fn convert_with(
    records: &[Record],
    fold: bool,
    period: Option<usize>,
) -> Result<Converted, String> {
    convert_iteration(records, fold, Which::Repeated(period))
}

/// [`convert_with`] for one iteration seen once (`planner::iteration::once`): the calls from
/// the one whose record is `start_seq` up to the one whose record is `end_seq`, not included.
pub fn convert_once(
    records: &[Record],
    fold: bool,
    start_seq: u64,
    end_seq: u64,
) -> Result<Converted, String> {
    convert_iteration(records, fold, Which::Once { start_seq, end_seq })
}

/// Which iteration of the records a model is made of.
enum Which {
    /// The steady iteration of a repetition: the longest, or the one of this period that ends
    /// the records.
    Repeated(Option<usize>),
    /// Calls `start_seq ..end_seq`, seen once.
    Once { start_seq: u64, end_seq: u64 },
}

fn convert_iteration(records: &[Record], fold: bool, which: Which) -> Result<Converted, String> {
    let mut times: HashMap<u64, f64> = HashMap::new();
    for r in records {
        if let Event::Timing { of, device_ms } = r.event {
            times.insert(of, device_ms * 1e-3);
        }
    }
    let replays = lineage(records);
    // Each execution plan's configurations (μ-cuDNN's): (seconds, workspace), fastest first.
    let configs: HashMap<(u64, u64), Vec<(f64, u64)>> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::Configs {
                plan,
                life,
                configs,
            } if !configs.is_empty() => {
                let mut front: Vec<(f64, u64)> = configs
                    .iter()
                    .map(|c| (c.time_ms * 1e-3, c.workspace))
                    .collect();
                front.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                Some(((*plan, *life), front))
            }
            _ => None,
        })
        .collect();
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
    let work = iteration::Work::of(&s.calls);
    let (live, allocated) = (s.live_bytes(), s.allocated_bytes());
    let iteration = match which {
        Which::Repeated(period) => match period {
            Some(p) => iteration::detect_period(&tokens, &work, p),
            None => iteration::detect(&tokens, &work),
        }
        .ok_or_else(|| {
            format!(
                "no repeating iteration in {} calls (two iterations or more are needed)",
                s.calls.len()
            )
        })
        .and_then(|region| {
            iteration::steady_from(&s.calls, region, |r| choose_cut(&live, &allocated, r))
                .map_err(|d| d.to_string())
        }),
        Which::Once { start_seq, end_seq } => {
            let start = s.calls.iter().position(|c| c.seq >= start_seq);
            let end = s.calls.iter().position(|c| c.seq >= end_seq);
            match (start, end) {
                (Some(a), Some(b)) if a < b => {
                    iteration::once(&s.calls, a, b - a).map_err(|d| d.to_string())
                }
                _ => Err(format!(
                    "no calls from record {start_seq} to record {end_seq} in the records"
                )),
            }
        }
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
            // The only full iteration (the one before it differs): what the next one's calls
            // seen so far do with it, live where they have not reached it.
            (Ok(st), TensorId::Rel { .. }) if st.iterations == 1 => s.live_at(a, we),
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

    // The shim replays a recomputation into the tensor's own memory, from sources in place.
    let mut t = Trace {
        replay_in_place: true,
        ..Trace::default()
    };
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
    let mut first_written: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut not_replayed: HashMap<u64, &'static str> = HashMap::new();
    let mut op_replays = Vec::new();
    let mut chains: Vec<Vec<Member>> = Vec::new();
    let mut internal: Vec<Vec<(usize, usize)>> = Vec::new();
    let mut untimed = 0;
    // Storages to free right after each operation.
    let mut scratch_of: Vec<Vec<usize>> = Vec::new();
    let base = |a: u64| s.allocs.get(&a).map(|x| x.0);
    let size_of = |a: u64| s.allocs.get(&a).map(|x| x.1);
    // The last operation, when a replay rebuilds allocations of it whole (their contents its
    // outputs): an in-place update of one of them right after it joins it (a chain).
    let mut open: Option<(usize, Vec<u64>)> = None;
    for i in ws..we {
        if s.roles[i].is_empty() {
            continue;
        }
        let r = s.records[i];
        let secs = times.get(&r.seq).copied();
        let lineage_of = replays.get(&r.seq).copied();
        if let Some((opi, rebuilt)) = &open
            && let Some(a) = in_place_update(&r.event, lineage_of, size_of)
            && rebuilt.contains(&a)
        {
            // W, U1..Uk as one operation: the intermediate versions of `a` never exist in the
            // model; its content (W's output, produced by the chain) is the final one.
            let opi = *opi;
            t.ops[opi].time_s += secs.unwrap_or(0.0);
            for &(b, role) in &s.roles[i] {
                if b == a {
                    if let Some(&c) = current.get(&a) {
                        last_op[c] = Some(opi);
                    }
                    continue;
                }
                debug_assert_eq!(role, Role::Read);
                let c = match current.get(&b) {
                    Some(&c) => c,
                    None => {
                        let c =
                            new_storage(&mut t, &mut origins, &mut last_op, b, true, None, None);
                        current.insert(b, c);
                        c
                    }
                };
                if !t.ops[opi].inputs.contains(&c) && !t.ops[opi].outputs.contains(&c) {
                    t.ops[opi].inputs.push(c);
                }
                last_op[c] = Some(opi);
            }
            chains[opi].push(Member {
                call: i - ws,
                seq: r.seq,
                replay: lineage_of.cloned(),
            });
            continue;
        }
        // A device-to-device copy of a whole allocation the open chain rebuilds into another
        // whole allocation of its size joins the chain as one more output: a replay copies
        // again once the call before it has rebuilt the source. Autograd copies a batch
        // norm's output aside so before an in-place activation whose backward reads its input
        // (SiLU, hardswish), and the activation, an in-place update of the source, joins next.
        if let Some((opi, rebuilt)) = &mut open
            && let Some((src, dst)) = whole_copy(&r.event, size_of)
            && rebuilt.contains(&src)
            && !rebuilt.contains(&dst)
        {
            let opi = *opi;
            t.ops[opi].time_s += secs.unwrap_or(0.0);
            if let Some(&c) = current.get(&src) {
                last_op[c] = Some(opi);
            }
            let c = new_storage(
                &mut t,
                &mut origins,
                &mut last_op,
                dst,
                false,
                Some(opi),
                Some(i - ws),
            );
            t.ops[opi].outputs.push(c);
            current.insert(dst, c);
            rebuilt.push(dst);
            chains[opi].push(Member {
                call: i - ws,
                seq: r.seq,
                replay: Some(Replay::Copy),
            });
            continue;
        }
        // Read before any call of the iteration wrote it, in an allocation made during the
        // iteration: something wrote it where the trace does not show (a kernel writing through
        // pointers it was handed in device memory: FSDP's copy of an all-gather out into the
        // parameters). Its contents exist from before this call, made by nothing that can be
        // replayed: an operation of no duration just before this one makes them (kept or
        // swapped, never recomputed), so that they live from here to their last use as the
        // allocator holds them, not from the iteration's start to its end as a constant would.
        let unseen: Vec<u64> = s.roles[i]
            .iter()
            .filter(|&&(a, role)| {
                role == Role::Read
                    && !current.contains_key(&a)
                    && s.life.get(&a).is_some_and(|l| l.0 >= ws)
            })
            .map(|x| x.0)
            .collect();
        if !unseen.is_empty() {
            let w = t.ops.len();
            let mut op = Op::new(UNSEEN_WRITE, 0.0, vec![], vec![]);
            op.separate_outputs = true;
            for &a in &unseen {
                let c = new_storage(&mut t, &mut origins, &mut last_op, a, false, None, None);
                last_op[c] = Some(w);
                op.outputs.push(c);
                current.insert(a, c);
            }
            t.ops.push(op);
            op_calls.push((i - ws, r.seq));
            op_replays.push(None);
            chains.push(Vec::new());
            internal.push(Vec::new());
            scratch_of.push(Vec::new());
        }
        let opi = t.ops.len();
        let secs_missing = secs.is_none();
        let secs = secs.unwrap_or_else(|| {
            untimed += 1;
            0.0
        });
        let name_of_op = match &r.event {
            Event::Launch { func, .. } => match kernel_names.get(func) {
                Some(n) => format!("kernel {}", short_kernel_name(n)),
                None => format!("kernel {func:#x}"),
            },
            e => e.api().unwrap_or("?").to_string(),
        };
        // `rw` touches on allocations nothing wrote yet in the iteration: first writes.
        let fresh: Vec<u64> = s.roles[i]
            .iter()
            .filter(|&&(a, role)| role == Role::Update && !current.contains_key(&a))
            .map(|x| x.0)
            .collect();
        let seen = first_writes(&r.event, |a| fresh.contains(&a), size_of);
        let replayable = replays_in_shim(&seen, lineage_of);
        if replayable && !fresh.is_empty() {
            first_written.insert(r.seq, fresh);
        }
        // An update in place of an allocation whose contents a recomputation can rebuild: the
        // new version is rebuilt by rebuilding the old one, then this call again (see
        // `memory::carried_out::slice`).
        let updates = if replayable {
            None
        } else {
            in_place_update(&seen, lineage_of, size_of).filter(|a| {
                current
                    .get(a)
                    .is_some_and(|&c| t.storages[c].producer.is_some())
            })
        };
        if updates.is_none()
            && let Some(why) = why_not_replayed(&seen, lineage_of)
        {
            not_replayed.insert(r.seq, why);
        }
        // What the replay rebuilds and reads (None: all the call writes and reads).
        let scope = if replayable {
            replay_scope(&r.event, base)
        } else {
            None
        };
        let rebuilds = |a: u64| replayable && scope.as_ref().is_none_or(|sc| sc.0.contains(&a));
        let source = |a: u64| scope.as_ref().is_none_or(|sc| sc.1.contains(&a));
        let mut op = Op::new(&name_of_op, secs, vec![], vec![]);
        // The shim's replay writes the outputs it does not rebuild aside.
        op.separate_outputs = true;
        // A collective runs on the device's links, beside the compute.
        op.concurrent = matches!(r.event, Event::Collective { .. });
        // A copy of the program's between host and device takes its direction's copy engine.
        op.copy = match &r.event {
            Event::Copy {
                dir: CopyDir::H2d, ..
            } => Some(Direction::H2d),
            Event::Copy {
                dir: CopyDir::D2h, ..
            } => Some(Direction::D2h),
            _ => None,
        };
        let mut scratch = Vec::new();
        let mut whole = Vec::new();
        for &(a, role) in &s.roles[i] {
            let cur = current.get(&a).copied();
            match (role, cur) {
                (Role::Read, Some(c)) => op.inputs.push(c),
                (Role::Update, Some(c)) => {
                    // What the replay does not read (batch normalisation's running
                    // statistics) is no source of a recomputation; the operation still needs
                    // it resident, as the timeline reads `mutates` too.
                    if source(a) {
                        op.inputs.push(c);
                    }
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
                    let producer = (rebuilds(a) && role != Role::Scratch).then_some(opi);
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
                    if role == Role::Overwrite && producer.is_some() {
                        whole.push(a);
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
        if let Some(Replay::Backend { plan, life }) = lineage_of
            && let Some(front) = configs.get(&(*plan, *life))
        {
            op.configs = Some(crate::model::Configs {
                fastest_s: front[0].0,
                least_workspace: front.iter().map(|c| c.1).min().unwrap_or(0),
                workspace: scratch.clone(),
                front: front.clone(),
            });
        }
        t.ops.push(op);
        op_calls.push((i - ws, r.seq));
        op_replays.push(lineage_of.cloned());
        chains.push(Vec::new());
        internal.push(Vec::new());
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
                (rebuilds(a) || updates == Some(a)).then_some(opi),
                Some(i - ws),
            );
            last_op[new] = Some(opi);
            t.ops[opi].inplace.push((old, new));
            current.insert(a, new);
        }
        scratch_of.push(scratch);
        // An exact elementwise kernel right after a replayed call, reading the call's whole
        // output, which dies with it, and writing an allocation of the same size whole (a batch
        // norm's `y` into an out-of-place `y + identity`; GELU's output into dropout's, whose
        // mask is a second whole output): both are one operation, and the dead output is
        // internal to it. The program frees it, so a recomputation rebuilds it in the kernel's
        // output of its size instead, and the kernel runs in place there (elementwise: each
        // output element from the inputs' elements at its index, as ATen's in-place kernels
        // run).
        if fold
            && replayable
            && matches!(r.event, Event::Launch { .. })
            && scope.is_none()
            && !whole.is_empty()
            && t.ops[opi].mutates.is_empty()
            && let Some((p, pwhole)) = &open
            && *p + 1 == opi
            && chains[*p].is_empty()
            && let Some(&(dead, sc)) = s.roles[i]
                .iter()
                .filter(|&&(a, role)| role == Role::Read && pwhole.contains(&a))
                .filter_map(|&(a, _)| Some((a, *current.get(&a)?)))
                .collect::<Vec<_>>()
                .first()
            && t.storages[sc].producer == Some(*p)
            && s.uses.get(&dead).and_then(|u| u.last()).map(|u| u.0) == Some(i)
            && s.life.get(&dead).is_some_and(|l| l.1 > i && l.1 < we)
            && let Some(&out) = whole.iter().find(|&&w| size_of(w) == size_of(dead))
            && let Some(&alias) = current.get(&out)
        {
            let p = *p;
            let w = t.ops.pop().expect("the operation just made");
            op_calls.pop();
            op_replays.pop();
            chains.pop();
            internal.pop();
            let w_scratch = scratch_of.pop().unwrap_or_default();
            if secs_missing {
                untimed -= 1;
            }
            for &o in &w.outputs {
                if t.storages[o].producer == Some(opi) {
                    t.storages[o].producer = Some(p);
                }
            }
            for lo in last_op.iter_mut() {
                if *lo == Some(opi) {
                    *lo = Some(p);
                }
            }
            t.storages[sc].producer = None;
            let op = &mut t.ops[p];
            op.time_s += w.time_s;
            for x in w.inputs {
                if x != sc && !op.inputs.contains(&x) && !op.outputs.contains(&x) {
                    op.inputs.push(x);
                }
            }
            op.outputs.extend(w.outputs);
            op.scratch += w.scratch;
            scratch_of[p].extend(w_scratch);
            chains[p].push(Member {
                call: i - ws,
                seq: r.seq,
                replay: lineage_of.cloned(),
            });
            internal[p].push((sc, alias));
            open = Some((p, whole));
            continue;
        }
        open = (!whole.is_empty()).then_some((opi, whole));
    }
    if t.ops.is_empty() {
        return Err("the iteration has no operations".into());
    }
    // A chain says so in its name (`marmoset plan --explain`).
    for (op, chain) in t.ops.iter_mut().zip(&chains) {
        if !chain.is_empty() {
            op.name = format!("{} + {} chained", op.name, chain.len());
        }
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
        chains,
        internal,
        first_written,
        not_replayed,
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
mod tests;
