//! Recomputation (Capuchin §4.2): a tensor the plan drops after its evicted-access is rebuilt
//! before its back-access by replaying the call that produced it, from that call's record and
//! lineage: the descriptors rebuilt from the recorded shapes, the scalars by value, the pointers
//! those of the current iteration's allocations (a plan names tensors by their place in the
//! iteration, not by address). Only the calls `planner::shimtrace::REPLAYED` lists are replayed,
//! and the planner plans recomputation of nothing else. A batch norm is replayed without its
//! statistics (NULL running and saved statistics: it rebuilds `y` and changes nothing else),
//! and a chain (a replayed call, then the in-place kernels that followed it, such as
//! `+= identity` and ReLU after a batch norm, and whole device-to-device copies of its output)
//! is one recipe: the call, then each member in order, on the same stream. The replay goes on the back-access's
//! stream, right before it, through Marmoset's own handles (cuDNN: `cudnn.rs`; cuBLAS: `blas.rs`;
//! kernels by the driver: `kernel.rs`); it is not one of the program's calls (the tracker never
//! sees it).

mod blas;
mod cudnn;
mod kernel;

pub use cudnn::attach_micro_execute;
use kernel::{Kernel, launch};
pub use kernel::{note_params, take_params};

use crate::virt::sequence;
use planner::iteration::TensorId;
use planner::trace::{Access, Event, Replay, TensorArg, Touch};
use std::sync::atomic::{AtomicU64, Ordering};

/// One tensor argument of the producing call, named as the plan names tensors.
#[derive(Debug, Clone)]
struct Arg {
    role: String,
    tensor: TensorId,
    offset: u64,
    bytes: u64,
    dims: Vec<i64>,
    strides: Vec<i64>,
    access: Access,
    /// A backend execution's unique id for it.
    uid: Option<i64>,
    /// Written into scratch of its own, not into its allocation (see [`Recipe::for_target`]).
    scratch: bool,
}

/// The producing call of a recomputed tensor, ready to replay in any later iteration.
#[derive(Debug, Clone)]
pub struct Recipe {
    api: String,
    args: Vec<Arg>,
    replay: Replay,
    kernel: Option<Kernel>,
    /// A convolution's recorded algorithm, and the workspace bytes a replay brings (the call's
    /// own workspace is scratch the program may have reused since).
    algo: Option<i32>,
    workspace: u64,
    /// Batch normalisation's reserve space, bytes: a replay brings its own, after its
    /// workspace (the program's holds what its backward pass reads).
    reserve: u64,
    /// A chain's members (in-place kernels on the output, `relu_` after a batch norm;
    /// copies of it aside), replayed in order after this call, on the same stream.
    then: Vec<Recipe>,
    /// A cuBLAS call's m, n, k and batch count.
    gemm: Option<[u64; 4]>,
    /// A device-to-device copy's bytes (see [`Recipe::copy`]).
    copy: Option<u64>,
    /// The producing call's offset within the iteration (see [`Recipe::at`]).
    call: Option<usize>,
}

/// Where a reserve space starts in a replay's scratch (after the workspace, aligned).
fn reserve_at(workspace: u64) -> u64 {
    workspace.div_ceil(256) * 256
}

/// The touch of a call's tensor argument: the allocation it points into (`base`: each
/// allocation's address when recorded).
fn touch_of<'a>(
    t: &TensorArg,
    touches: &'a [Touch],
    base: &impl Fn(u64) -> Option<u64>,
) -> Option<&'a Touch> {
    touches
        .iter()
        .find(|u| base(u.alloc).is_some_and(|b| b + u.offset == t.ptr))
}

/// The bytes a call's arguments of `role` cover (scratch: a workspace, a reserve space).
fn bytes_of(
    tensors: &[TensorArg],
    touches: &[Touch],
    base: &impl Fn(u64) -> Option<u64>,
    role: &str,
) -> u64 {
    tensors
        .iter()
        .filter(|t| t.role == role)
        .filter_map(|t| touch_of(t, touches, base))
        .map(|u| u.bytes)
        .sum()
}

impl Recipe {
    /// From the producing call's record and lineage; `name`: an allocation's tensor name in the
    /// plan, `base`: an allocation's address when it was recorded. None when the shim cannot
    /// replay the call.
    pub fn of(
        event: &Event,
        replay: &Replay,
        name: impl Fn(u64) -> Option<TensorId>,
        base: impl Fn(u64) -> Option<u64>,
    ) -> Option<Recipe> {
        if !planner::shimtrace::replays_in_shim(event, Some(replay)) {
            return None;
        }
        Recipe::call(event, replay, name, base)
    }

    /// A call's recipe, replayable or not by itself (see [`Recipe::of`], [`Recipe::member`]).
    fn call(
        event: &Event,
        replay: &Replay,
        name: impl Fn(u64) -> Option<TensorId>,
        base: impl Fn(u64) -> Option<u64>,
    ) -> Option<Recipe> {
        if let Replay::Kernel { .. } = replay {
            return Recipe::launch(event, replay, &name, &base);
        }
        let (api, tensors, touches, algo, workspace, gemm) = match event {
            Event::Cudnn {
                api,
                tensors,
                touches,
                algo,
                workspace,
                ..
            } => (api, tensors, touches, *algo, *workspace, None),
            // cuBLASLt's workspace is scratch, as cuDNN's: a replay brings its own, as large.
            Event::Cublas {
                api,
                tensors,
                touches,
                m,
                n,
                k,
                batch,
                ..
            } => {
                let ws = bytes_of(tensors, touches, &base, "workspace");
                (
                    api,
                    tensors,
                    touches,
                    None,
                    Some(ws),
                    Some([*m, *n, *k, *batch]),
                )
            }
            _ => return None,
        };
        // Batch normalisation is replayed without its statistics (see
        // `planner::shimtrace::replay_scope`): only x, y, scale and bias are its tensors.
        let bn = matches!(
            replay,
            Replay::Cudnn {
                batchnorm: Some(_),
                ..
            }
        );
        let used = |role: &str| {
            role != "workspace"
                && role != "reserve"
                && (!bn || ["x", "y", "scale", "bias"].contains(&role))
        };
        let reserve = bytes_of(tensors, touches, &base, "reserve");
        let mut args = Vec::new();
        for t in tensors.iter().filter(|t| used(&t.role)) {
            let touch = touch_of(t, touches, &base)?;
            args.push(Arg {
                role: t.role.clone(),
                tensor: name(touch.alloc)?,
                offset: touch.offset,
                bytes: touch.bytes,
                dims: t.dims.clone(),
                strides: t.strides.clone(),
                access: t.access,
                uid: t.uid,
                scratch: false,
            });
        }
        Some(Recipe {
            api: api.clone(),
            args,
            replay: replay.clone(),
            kernel: None,
            algo,
            workspace: workspace.unwrap_or(0),
            reserve,
            then: Vec::new(),
            gemm,
            copy: None,
            call: None,
        })
    }

    /// A chain member: an update of one allocation in place (see
    /// `planner::shimtrace::in_place_update`; `size`: an allocation's size when recorded), replayed
    /// after the chain's first call. None when it is not one, or cannot be rebuilt.
    pub fn member(
        event: &Event,
        replay: &Replay,
        name: impl Fn(u64) -> Option<TensorId>,
        base: impl Fn(u64) -> Option<u64>,
        size: impl Fn(u64) -> Option<u64>,
    ) -> Option<Recipe> {
        planner::shimtrace::in_place_update(event, Some(replay), size)?;
        Recipe::call(event, replay, name, base)
    }

    /// A kernel launch's recipe: its recorded parameters relaunched with each operand's
    /// current address, named by the kernel so that a log line says which one.
    fn launch(
        event: &Event,
        replay: &Replay,
        name: &impl Fn(u64) -> Option<TensorId>,
        base: &impl Fn(u64) -> Option<u64>,
    ) -> Option<Recipe> {
        let (Event::Launch { api, touches, .. }, Replay::Kernel { params, shared }) =
            (event, replay)
        else {
            return None;
        };
        let kernel = Kernel::of(event, params, *shared, base)?;
        let args = touches
            .iter()
            .enumerate()
            .map(|(i, t)| {
                Some(Arg {
                    role: format!("operand {i}"),
                    tensor: name(t.alloc)?,
                    offset: t.offset,
                    bytes: t.bytes,
                    dims: Vec::new(),
                    strides: Vec::new(),
                    access: t.access,
                    uid: None,
                    scratch: false,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let kernel_name = crate::access::launch::name(kernel.func as usize, kernel.runtime)
            .map(|n| planner::shimtrace::short_kernel_name(&n))
            .unwrap_or_else(|| format!("kernel {:#x}", kernel.func));
        Some(Recipe {
            api: format!("{api} ({kernel_name})"),
            args,
            replay: replay.clone(),
            kernel: Some(kernel),
            algo: None,
            workspace: 0,
            reserve: 0,
            then: Vec::new(),
            gemm: None,
            copy: None,
            call: None,
        })
    }

    /// A chain member that copies a whole allocation the chain rebuilds into another whole
    /// allocation (see `planner::shimtrace::whole_copy`), copied again on the replay's stream
    /// after the calls before it; `size`: an allocation's size when recorded.
    pub fn copy(
        event: &Event,
        name: impl Fn(u64) -> Option<TensorId>,
        size: impl Fn(u64) -> Option<u64>,
    ) -> Option<Recipe> {
        let (src, dst) = planner::shimtrace::whole_copy(event, &size)?;
        let Event::Copy { api, size: n, .. } = event else {
            return None;
        };
        let arg = |role: &str, alloc: u64, access: Access| {
            Some(Arg {
                role: role.into(),
                tensor: name(alloc)?,
                offset: 0,
                bytes: *n,
                dims: Vec::new(),
                strides: Vec::new(),
                access,
                uid: None,
                scratch: false,
            })
        };
        Some(Recipe {
            api: api.clone(),
            args: vec![arg("src", src, Access::R)?, arg("dst", dst, Access::W)?],
            replay: Replay::Copy,
            kernel: None,
            algo: None,
            workspace: 0,
            reserve: 0,
            then: Vec::new(),
            gemm: None,
            copy: Some(*n),
            call: None,
        })
    }

    /// The recipe of the call at `call` within the iteration: each iteration's own parameters
    /// are taken there ([`Recipe::refresh`]).
    pub fn at(mut self, call: usize) -> Recipe {
        self.call = Some(call);
        self
    }

    /// The offsets of the calls whose parameters this recipe replays (the call's, then its
    /// chain members'): the kernel launches among them.
    pub fn launches(&self) -> Vec<(usize, Option<usize>)> {
        let mut out = Vec::new();
        if let (Some(c), Some(_)) = (self.call, &self.kernel) {
            out.push((c, None));
        }
        for (i, m) in self.then.iter().enumerate() {
            if let (Some(c), Some(_)) = (m.call, &m.kernel) {
                out.push((c, Some(i)));
            }
        }
        out
    }

    /// Takes the parameter buffer the producing launch (or chain member `member`) had in the
    /// iteration under way, where it is laid out as recorded: a kernel that draws from a random
    /// generator's state by value (dropout) must draw the same numbers again, and the generator
    /// advances its offset at every launch. Its pointer words are brought up to date at replay.
    pub fn refresh(&mut self, member: Option<usize>, params: &[u8]) {
        let r = match member {
            None => self,
            Some(i) => match self.then.get_mut(i) {
                Some(m) => m,
                None => return,
            },
        };
        if let Some(k) = &mut r.kernel
            && k.params.len() == params.len()
        {
            k.params = params.to_vec();
        }
    }

    /// This call followed by the members of its chain, in order; `aliases`: tensors internal
    /// to the chain (the program freed them) with the tensor each is rebuilt in instead (the
    /// output of the elementwise kernel that reads it, which then runs in place).
    pub fn chain(mut self, members: Vec<Recipe>, aliases: &[(TensorId, TensorId)]) -> Recipe {
        self.then = members;
        let rename = |r: &mut Recipe| {
            for a in &mut r.args {
                if let Some(&(_, to)) = aliases.iter().find(|x| x.0 == a.tensor) {
                    a.tensor = to;
                }
            }
        };
        rename(&mut self);
        self.then.iter_mut().for_each(rename);
        self
    }

    /// This recipe, then `next` and its chain: a recomputation that replays several calls in
    /// program order (`planner::memory::carried_out::slice`).
    pub fn followed_by(mut self, mut next: Recipe) -> Recipe {
        let members = std::mem::take(&mut next.then);
        self.then.push(next);
        self.then.extend(members);
        self
    }

    /// The recipe that rebuilds `target`: every other tensor the replay writes before it reads
    /// it (a second output: dropout's mask, or its output when the mask is the one rebuilt)
    /// goes to scratch of its own for the replay, never to its allocation, which the program
    /// may have freed since or may hold newer contents. The planner counts that scratch
    /// (`Op::separate_outputs`).
    pub fn for_target(mut self, target: TensorId) -> Recipe {
        let mut first: Vec<(TensorId, Access)> = Vec::new();
        for a in self
            .args
            .iter()
            .chain(self.then.iter().flat_map(|m| &m.args))
        {
            if !first.iter().any(|f| f.0 == a.tensor) {
                first.push((a.tensor, a.access));
            }
        }
        let aside = |t: TensorId| t != target && first.iter().any(|f| f.0 == t && f.1 == Access::W);
        for a in self
            .args
            .iter_mut()
            .chain(self.then.iter_mut().flat_map(|m| m.args.iter_mut()))
        {
            a.scratch = aside(a.tensor);
        }
        self
    }

    /// The tensors a replay writes into scratch, with the bytes each needs (its furthest
    /// recorded end; the allocation's size for a touch of unknown extent).
    fn aside(&self) -> Vec<(TensorId, u64)> {
        let mut out: Vec<(TensorId, u64)> = Vec::new();
        for a in self
            .args
            .iter()
            .chain(self.then.iter().flat_map(|m| &m.args))
            .filter(|a| a.scratch)
        {
            // A touch of unknown extent (a kernel whose reader knows its roles, not its
            // bytes) may reach the allocation's end.
            let end = match a.bytes {
                0 => a.tensor.size().max(a.offset + 1),
                n => a.offset + n,
            };
            match out.iter_mut().find(|x| x.0 == a.tensor) {
                Some(x) => x.1 = x.1.max(end),
                None => out.push((a.tensor, end)),
            }
        }
        out
    }

    /// Scratch bytes a replay brings: the workspace, then the reserve space.
    fn scratch(&self) -> u64 {
        match self.reserve {
            0 => self.workspace,
            r => reserve_at(self.workspace) + r,
        }
    }

    /// Whether a replay can be carried out now, asked before the tensor is dropped (a replay
    /// that fails after the drop would lose its bytes): a backend execution's plan still the
    /// one that ran (not destroyed, no other made at its address since), and the budget able
    /// to hold the replay's operands and its workspace at once (everything else can be evicted
    /// to make room). Err says why not: the tensor is then kept, or swapped, never dropped.
    pub fn ready(&self) -> Result<(), String> {
        // A chain is dropped only when every member can be replayed too (they run one after
        // another: the largest needs the room).
        for m in &self.then {
            m.ready()
                .map_err(|why| format!("its chain's {}: {why}", m.api))?;
        }
        self.alive()?;
        // (allocation, size) of each operand, once.
        let mut held: Vec<(u64, u64)> = Vec::new();
        for a in self.args.iter().filter(|a| !a.scratch) {
            let id = sequence::resolve(a.tensor)
                .ok_or_else(|| format!("{} ({:?}) has no allocation now", a.role, a.tensor))?;
            let (_, size) = crate::core::registry::allocation(id)
                .ok_or_else(|| format!("{} (allocation {id}) is not live", a.role))?;
            if !held.iter().any(|h| h.0 == id) {
                held.push((id, size));
            }
        }
        let mut bytes: Vec<u64> = held.iter().map(|h| h.1).collect();
        bytes.extend(self.aside().iter().map(|x| x.1));
        if self.scratch() > 0 {
            bytes.push(self.scratch());
        }
        if !crate::virt::memory::room_for(&bytes) {
            return Err(format!(
                "its operands and a {} B workspace would not fit in the budget at once",
                self.scratch()
            ));
        }
        Ok(())
    }

    /// The cuDNN execution plans the replay runs through (its call's and its chain's).
    pub fn plans(&self) -> Vec<u64> {
        std::iter::once(self)
            .chain(&self.then)
            .filter_map(|r| match r.replay {
                Replay::Backend { plan, .. } => Some(plan),
                _ => None,
            })
            .collect()
    }

    /// Whether what the replay runs through still exists: a backend execution's plan still
    /// the one that ran (not destroyed, no other made at its address since).
    pub fn alive(&self) -> Result<(), String> {
        if let Replay::Backend { plan, life } = self.replay
            && crate::ffi::cudnn_backend::plan_life(plan as usize) != Some(life)
        {
            return Err(format!(
                "the execution plan {plan:#x} that ran it was destroyed since"
            ));
        }
        Ok(())
    }

    /// The recipe with its tensors named by their allocations now (None: one has none), for a
    /// replay after the program left the plan, when names by place in the iteration no longer
    /// hold.
    pub fn pinned(&self) -> Option<Recipe> {
        let mut r = self.clone();
        for a in r.args.iter_mut().filter(|a| !a.scratch) {
            let alloc = sequence::resolve(a.tensor)?;
            let (_, size) = crate::core::registry::allocation(alloc)?;
            a.tensor = TensorId::Persistent { alloc, size };
        }
        r.then = self
            .then
            .iter()
            .map(Recipe::pinned)
            .collect::<Option<Vec<_>>>()?;
        Some(r)
    }

    /// The call it replays (a chain: each call, joined by " then ").
    pub fn api(&self) -> String {
        std::iter::once(self.api.as_str())
            .chain(self.then.iter().map(|m| m.api.as_str()))
            .collect::<Vec<_>>()
            .join(" then ")
    }

    /// The tensors the replay reads where they are, by name: each whose first access in the
    /// replay, in order, reads it (a chain's members read what the calls before them wrote:
    /// not a source; nor is what goes to scratch).
    pub fn sources(&self) -> Vec<TensorId> {
        let mut seen: Vec<TensorId> = Vec::new();
        let mut out: Vec<TensorId> = Vec::new();
        for a in self
            .args
            .iter()
            .chain(self.then.iter().flat_map(|m| &m.args))
        {
            if seen.contains(&a.tensor) {
                continue;
            }
            seen.push(a.tensor);
            if a.access != Access::W && !a.scratch {
                out.push(a.tensor);
            }
        }
        out
    }

    /// The call as it would be recorded now, on `stream`: current allocations and addresses
    /// (`aside`: the scratch of each tensor written aside), and each argument's address. A
    /// tensor written aside is no touch of the call: the memory manager has nothing to bring
    /// back for it.
    fn now(&self, stream: u64, aside: &[(TensorId, u64)]) -> Result<(Event, Vec<u64>), String> {
        let (mut tensors, mut touches, mut addrs) = (Vec::new(), Vec::new(), Vec::new());
        for a in &self.args {
            // Its base address: the scratch, or the allocation now (then also a touch).
            let base = if a.scratch {
                aside
                    .iter()
                    .find(|x| x.0 == a.tensor)
                    .ok_or_else(|| format!("{} has no scratch", a.role))?
                    .1
            } else {
                let id = sequence::resolve(a.tensor)
                    .ok_or_else(|| format!("{} ({:?}) has no allocation now", a.role, a.tensor))?;
                let (va, size) = crate::core::registry::allocation(id)
                    .ok_or_else(|| format!("{} (allocation {id}) is not live", a.role))?;
                if a.offset + a.bytes > size {
                    return Err(format!(
                        "{} (allocation {id}) is smaller than when recorded",
                        a.role
                    ));
                }
                touches.push(Touch {
                    alloc: id,
                    offset: a.offset,
                    bytes: a.bytes,
                    access: a.access,
                });
                va
            };
            addrs.push(base + a.offset);
            tensors.push(TensorArg {
                role: a.role.clone(),
                ptr: base + a.offset,
                dims: a.dims.clone(),
                strides: a.strides.clone(),
                access: a.access,
                uid: a.uid,
            });
        }
        if let Some(k) = &self.kernel {
            let event = Event::Launch {
                api: self.api.clone(),
                func: k.func,
                grid: k.grid,
                block: k.block,
                stream: Some(stream),
                touches,
                result: 0,
            };
            return Ok((event, addrs));
        }
        if let Some(size) = self.copy {
            let (src, dst) = (addrs.first().copied(), addrs.get(1).copied());
            let (Some(src), Some(dst)) = (src, dst) else {
                return Err("a copy without its source and destination".into());
            };
            let event = Event::Copy {
                api: self.api.clone(),
                dst,
                src,
                size,
                dir: planner::trace::CopyDir::D2d,
                stream: Some(stream),
                touches,
                result: 0,
            };
            return Ok((event, addrs));
        }
        if let Some([m, n, k, batch]) = self.gemm {
            let event = Event::Cublas {
                api: self.api.clone(),
                stream: Some(stream),
                m,
                n,
                k,
                batch,
                kernels: 1,
                tensors,
                touches,
                result: 0,
            };
            return Ok((event, addrs));
        }
        let event = Event::Cudnn {
            api: self.api.clone(),
            stream: Some(stream),
            algo: self.algo,
            workspace: Some(self.workspace),
            tensors,
            touches,
            result: 0,
        };
        Ok((event, addrs))
    }
}

/// Replays begun so far (MARMOSET_TEST_REFUSE_REPLAY counts them).
static REPLAYS: AtomicU64 = AtomicU64::new(0);
/// Replays issued so far, in the order their first calls go to the device, which is the order
/// of their `recompute` records (a replay that rebuilds a dropped source first issues after it):
/// MARMOSET_TEST_CORRUPT_REPLAY counts them.
static ISSUED: AtomicU64 = AtomicU64::new(0);

/// Replays the recipe on `stream` (its workspace obtained, then its sources made resident and
/// its output mapped).
pub fn replay(r: &Recipe, stream: u64) -> Result<(), String> {
    let n = REPLAYS.fetch_add(1, Ordering::Relaxed) + 1;
    if crate::core::state::config().test_refuse_replay == Some(n)
        && !crate::virt::memory::is_beyond_budget()
    {
        return Err("no room within the budget (MARMOSET_TEST_REFUSE_REPLAY)".into());
    }
    // The scratch of the tensors written aside first, held over the whole chain (a member
    // may read what an earlier one wrote there).
    let mut aside: Vec<(TensorId, u64)> = Vec::new();
    let mut got = Ok(());
    for (t, bytes) in r.aside() {
        match crate::virt::memory::alloc_internal(bytes as usize) {
            Some(va) => aside.push((t, va)),
            None => {
                got = Err(format!(
                    "no room for {bytes} B of scratch for a second output"
                ));
                break;
            }
        }
    }
    let done = got.and_then(|()| {
        replay_one(r, stream, true, &aside)?;
        for m in &r.then {
            replay_one(m, stream, false, &aside)
                .map_err(|why| format!("its chain's {}: {why}", m.api))?;
        }
        Ok(())
    });
    for (_, va) in aside {
        // Released once the replay, queued on `stream`, is done with it.
        crate::virt::memory::free(va, Some(stream));
    }
    done
}

fn replay_one(
    r: &Recipe,
    stream: u64,
    first: bool,
    aside: &[(TensorId, u64)],
) -> Result<(), String> {
    let (event, addrs) = r.now(stream, aside)?;
    // Dropped sources rebuilt first, then the workspace: obtaining it may evict, and what the
    // replay touches must stay.
    crate::virt::memory::before_scratch(&event, Some(stream));
    let ws = match r.scratch() {
        0 => 0,
        n => crate::virt::memory::alloc_internal(n as usize)
            .ok_or_else(|| format!("no room for a {n} B workspace"))?,
    };
    let done = replay_with(r, &event, &addrs, stream, ws, first);
    if ws != 0 {
        // Released once the replay, queued on `stream`, is done with it.
        crate::virt::memory::free(ws, Some(stream));
    }
    done
}

fn replay_with(
    r: &Recipe,
    event: &Event,
    addrs: &[u64],
    stream: u64,
    ws: u64,
    first: bool,
) -> Result<(), String> {
    // Held until the replay below is issued.
    let _hold = crate::virt::memory::before_replay(event, Some(stream))
        .map_err(|code| format!("making its tensors resident failed ({code})"))?;
    // MARMOSET_TEST_CORRUPT_REPLAY counts recomputations (a chain is one) as they issue: its
    // first call replays wrongly.
    let corrupt = first && {
        let n = ISSUED.fetch_add(1, Ordering::Relaxed) + 1;
        crate::core::state::config().test_corrupt_replay == Some(n)
    };
    if let (Some(k), Event::Launch { .. }) = (&r.kernel, event) {
        return launch(k, addrs, stream, corrupt);
    }
    if let Event::Copy { dst, src, size, .. } = *event {
        // The two addresses are live allocations' (or scratch held for the replay) of at least
        // `size` bytes, `stream` the back-access's.
        return crate::ffi::call_why!(cuMemcpyDtoDAsync_v2(
            dst,
            src,
            size as usize,
            stream as *mut std::ffi::c_void
        ));
    }
    if let Event::Cublas {
        api,
        m,
        n,
        k,
        batch,
        tensors,
        ..
    } = event
    {
        let shape = blas::Shape {
            m: *m,
            n: *n,
            k: *k,
            batch: *batch,
        };
        return blas::replay(
            api,
            &r.replay,
            shape,
            tensors,
            (ws, r.workspace),
            stream,
            corrupt,
        );
    }
    let Event::Cudnn { tensors, .. } = event else {
        return Err("not a cuDNN call".into());
    };
    cudnn::replay(r, tensors, stream, ws, corrupt)
}
