//! Recomputation (Capuchin §4.2): a tensor the plan drops after its evicted-access is rebuilt
//! before its back-access by replaying the call that produced it, from that call's record and
//! lineage: the descriptors rebuilt from the recorded shapes, the scalars by value, the pointers
//! those of the current iteration's allocations (a plan names tensors by their place in the
//! iteration, not by address). Only the calls `planner::shimtrace::REPLAYED` lists are replayed,
//! and the planner plans recomputation of nothing else. A batch norm is replayed without its
//! statistics (NULL running and saved statistics: it rebuilds `y` and changes nothing else),
//! and a chain (a replayed call, then the exact in-place kernels that followed it, such as
//! `+= identity` and ReLU after a batch norm) is one recipe: the call, then each member in
//! order, on the same stream. The replay goes on the back-access's
//! stream, right before it, through Marmoset's own cuDNN handle; it is not one of the program's
//! calls (the tracker never sees it).

mod blas;
mod kernel;

use kernel::{Kernel, launch};
pub use kernel::{decode_params, note_params, take_params};

use crate::real::{CUDNN, resolve};
use crate::runtime::tracker;
use planner::iteration::TensorId;
use planner::trace::{Access, Event, Replay, TensorArg, Touch};
use std::ffi::{CStr, c_int, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

type P = *mut c_void;

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
    /// A chain's members (exact in-place kernels on the output, `relu_` after a batch norm),
    /// replayed in order after this call, on the same stream.
    then: Vec<Recipe>,
    /// A cuBLAS call's m, n, k and batch count.
    gemm: Option<[u64; 4]>,
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
            call: None,
        })
    }

    /// A chain member: an exact in-place update of one whole allocation (see
    /// `planner::shimtrace::exact_update`; `size`: an allocation's size when recorded), replayed
    /// after the chain's first call. None when it is not one, or cannot be rebuilt.
    pub fn member(
        event: &Event,
        replay: &Replay,
        name: impl Fn(u64) -> Option<TensorId>,
        base: impl Fn(u64) -> Option<u64>,
        size: impl Fn(u64) -> Option<u64>,
    ) -> Option<Recipe> {
        planner::shimtrace::exact_update(event, Some(replay), size)?;
        Recipe::launch(event, replay, &name, &base)
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
        let kernel_name = crate::hooks::launch::name(kernel.func as usize, kernel.runtime)
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
    /// recorded end).
    fn aside(&self) -> Vec<(TensorId, u64)> {
        let mut out: Vec<(TensorId, u64)> = Vec::new();
        for a in self
            .args
            .iter()
            .chain(self.then.iter().flat_map(|m| &m.args))
            .filter(|a| a.scratch)
        {
            let end = a.offset + a.bytes.max(1);
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
        if let Replay::Backend { plan, life } = self.replay
            && crate::microbatch::backend::plan_life(plan as usize) != Some(life)
        {
            return Err(format!(
                "the execution plan {plan:#x} that ran it was destroyed since"
            ));
        }
        // (allocation, size) of each operand, once.
        let mut held: Vec<(u64, u64)> = Vec::new();
        for a in self.args.iter().filter(|a| !a.scratch) {
            let id = tracker::resolve(a.tensor)
                .ok_or_else(|| format!("{} ({:?}) has no allocation now", a.role, a.tensor))?;
            let (_, size) = crate::state::allocation(id)
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
        if !crate::memory::room_for(&bytes) {
            return Err(format!(
                "its operands and a {} B workspace would not fit in the budget at once",
                self.scratch()
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
            let alloc = tracker::resolve(a.tensor)?;
            let (_, size) = crate::state::allocation(alloc)?;
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

    /// The tensors the replay reads, by name (a chain's members read the output the first call
    /// rebuilds: not a source).
    pub fn sources(&self) -> Vec<TensorId> {
        let written: Vec<TensorId> = self
            .args
            .iter()
            .filter(|a| a.access == Access::W)
            .map(|a| a.tensor)
            .collect();
        let mut out: Vec<TensorId> = Vec::new();
        for a in self
            .args
            .iter()
            .chain(self.then.iter().flat_map(|m| &m.args))
        {
            if a.access != Access::W
                && !a.scratch
                && !written.contains(&a.tensor)
                && !out.contains(&a.tensor)
            {
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
                let id = tracker::resolve(a.tensor)
                    .ok_or_else(|| format!("{} ({:?}) has no allocation now", a.role, a.tensor))?;
                let (va, size) = crate::state::allocation(id)
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

/// Replays so far (MARMOSET_TEST_CORRUPT_REPLAY counts them).
static REPLAYS: AtomicU64 = AtomicU64::new(0);

/// Marmoset's own cuDNN handle for replays (created once).
static HANDLE: Mutex<usize> = Mutex::new(0);

fn real(name: &CStr) -> Result<usize, String> {
    match resolve(CUDNN, name) {
        0 => Err(format!("cuDNN has no {}", name.to_string_lossy())),
        p => Ok(p),
    }
}

/// Calls the real cuDNN function `name` with these argument types; Err names it and its status.
macro_rules! dnn {
    ($name:literal ($($t:ty),*) ($($a:expr),*)) => {{
        let p = real($name)?;
        // SAFETY: the real cuDNN function named $name has this signature; the arguments are
        // Marmoset's own descriptors and handle, live allocations' addresses, and scalars on
        // this stack frame.
        let r = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> c_int>(p)($($a),*) };
        if r == 0 { Ok(()) } else { Err(format!("{} returned {r}", $name.to_string_lossy())) }
    }};
}

/// A tensor descriptor built from recorded dims and strides, destroyed when dropped.
struct Desc(usize);

impl Desc {
    fn tensor(dtype: c_int, dims: &[i64], strides: &[i64]) -> Result<Desc, String> {
        let mut d: P = std::ptr::null_mut();
        dnn!(c"cudnnCreateTensorDescriptor" (*mut P) (&mut d))?;
        let d = Desc(d as usize);
        let to32 = |v: &[i64]| -> Result<Vec<c_int>, String> {
            v.iter()
                .map(|&x| c_int::try_from(x).map_err(|_| format!("dimension {x} out of range")))
                .collect()
        };
        let (dims, strides) = (to32(dims)?, to32(strides)?);
        dnn!(c"cudnnSetTensorNdDescriptor" (P, c_int, c_int, *const c_int, *const c_int)
            (d.0 as P, dtype, dims.len() as c_int, dims.as_ptr(), strides.as_ptr()))?;
        Ok(d)
    }
}

/// A filter descriptor from recorded dims and strides (NCHW or NHWC packed), destroyed when
/// dropped.
struct Filter(usize);

impl Filter {
    fn of(dtype: c_int, dims: &[i64], strides: &[i64]) -> Result<Filter, String> {
        let packed = |order: &[usize]| {
            let mut s = vec![0; dims.len()];
            let mut acc = 1;
            for &i in order.iter().rev() {
                s[i] = acc;
                acc *= dims[i];
            }
            s
        };
        let n = dims.len();
        let nchw: Vec<usize> = (0..n).collect();
        let nhwc: Vec<usize> = std::iter::once(0)
            .chain(2..n)
            .chain(std::iter::once(1))
            .collect();
        let format = if strides == packed(&nchw).as_slice() {
            0
        } else if n > 2 && strides == packed(&nhwc).as_slice() {
            1
        } else {
            return Err("the filter's strides are neither NCHW nor NHWC".into());
        };
        let dims: Vec<c_int> = dims
            .iter()
            .map(|&x| c_int::try_from(x).map_err(|_| format!("dimension {x} out of range")))
            .collect::<Result<_, _>>()?;
        let mut d: P = std::ptr::null_mut();
        dnn!(c"cudnnCreateFilterDescriptor" (*mut P) (&mut d))?;
        let f = Filter(d as usize);
        dnn!(c"cudnnSetFilterNdDescriptor" (P, c_int, c_int, c_int, *const c_int)
            (f.0 as P, dtype, format, dims.len() as c_int, dims.as_ptr()))?;
        Ok(f)
    }
}

impl Drop for Filter {
    fn drop(&mut self) {
        let destroy = || dnn!(c"cudnnDestroyFilterDescriptor"(P)(self.0 as P));
        let _ = destroy();
    }
}

/// A convolution descriptor from recorded parameters, destroyed when dropped.
struct Conv(usize);

impl Conv {
    fn of(p: &planner::trace::ConvParams) -> Result<Conv, String> {
        let n = p.pads.len();
        if p.strides.len() != n || p.dilations.len() != n {
            return Err("the convolution's parameters disagree in length".into());
        }
        let mut d: P = std::ptr::null_mut();
        dnn!(c"cudnnCreateConvolutionDescriptor" (*mut P) (&mut d))?;
        let c = Conv(d as usize);
        dnn!(c"cudnnSetConvolutionNdDescriptor" (P, c_int, *const c_int, *const c_int, *const c_int, c_int, c_int)
            (c.0 as P, n as c_int, p.pads.as_ptr(), p.strides.as_ptr(), p.dilations.as_ptr(), p.mode, p.compute))?;
        dnn!(c"cudnnSetConvolutionGroupCount"(P, c_int)(
            c.0 as P, p.groups
        ))?;
        dnn!(c"cudnnSetConvolutionMathType"(P, c_int)(c.0 as P, p.math))?;
        Ok(c)
    }
}

impl Drop for Conv {
    fn drop(&mut self) {
        let destroy = || dnn!(c"cudnnDestroyConvolutionDescriptor"(P)(self.0 as P));
        let _ = destroy();
    }
}

impl Drop for Desc {
    fn drop(&mut self) {
        let destroy = || dnn!(c"cudnnDestroyTensorDescriptor"(P)(self.0 as P));
        let _ = destroy();
    }
}

/// Scaling parameters as cuDNN reads them: double for double tensors, float otherwise.
enum Scalar {
    F32(f32),
    F64(f64),
}

impl Scalar {
    fn of(v: f64, dtype: c_int) -> Scalar {
        if dtype == 1 {
            Scalar::F64(v)
        } else {
            Scalar::F32(v as f32)
        }
    }
    fn ptr(&self) -> P {
        match self {
            Scalar::F32(x) => x as *const f32 as P,
            Scalar::F64(x) => x as *const f64 as P,
        }
    }
}

/// Replays the recipe on `stream` (its workspace obtained, then its sources made resident and
/// its output mapped).
pub fn replay(r: &Recipe, stream: u64) -> Result<(), String> {
    // MARMOSET_TEST_CORRUPT_REPLAY counts recomputations (a chain is one): its first call
    // replays wrongly.
    let n = REPLAYS.fetch_add(1, Ordering::Relaxed) + 1;
    let corrupt = crate::state::config().test_corrupt_replay == Some(n);
    if crate::state::config().test_refuse_replay == Some(n) && !crate::memory::is_beyond_budget() {
        return Err("no room within the budget (MARMOSET_TEST_REFUSE_REPLAY)".into());
    }
    // The scratch of the tensors written aside first, held over the whole chain (a member
    // may read what an earlier one wrote there).
    let mut aside: Vec<(TensorId, u64)> = Vec::new();
    let mut got = Ok(());
    for (t, bytes) in r.aside() {
        match crate::memory::alloc_internal(bytes as usize) {
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
        replay_one(r, stream, corrupt, &aside)?;
        for m in &r.then {
            replay_one(m, stream, false, &aside)
                .map_err(|why| format!("its chain's {}: {why}", m.api))?;
        }
        Ok(())
    });
    for (_, va) in aside {
        // Released once the replay, queued on `stream`, is done with it.
        crate::memory::free(va, Some(stream));
    }
    done
}

fn replay_one(
    r: &Recipe,
    stream: u64,
    corrupt: bool,
    aside: &[(TensorId, u64)],
) -> Result<(), String> {
    let (event, addrs) = r.now(stream, aside)?;
    // The workspace first: obtaining it may evict, and what the replay touches must stay.
    let ws = match r.scratch() {
        0 => 0,
        n => crate::memory::alloc_internal(n as usize)
            .ok_or_else(|| format!("no room for a {n} B workspace"))?,
    };
    let done = replay_with(r, &event, &addrs, stream, ws, corrupt);
    if ws != 0 {
        // Released once the replay, queued on `stream`, is done with it.
        crate::memory::free(ws, Some(stream));
    }
    done
}

fn replay_with(
    r: &Recipe,
    event: &Event,
    addrs: &[u64],
    stream: u64,
    ws: u64,
    corrupt: bool,
) -> Result<(), String> {
    crate::memory::before(event, Some(stream))
        .map_err(|code| format!("making its tensors resident failed ({code})"))?;
    if let (Some(k), Event::Launch { .. }) = (&r.kernel, event) {
        return launch(k, addrs, stream, corrupt);
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
    if let Replay::Backend { plan, life } = r.replay {
        return backend(r, tensors, plan, life, stream, ws, corrupt);
    }
    let Replay::Cudnn {
        alpha: Some(alpha),
        beta: Some(beta),
        dtype: Some(dtype),
        activation,
        softmax,
        conv,
        batchnorm,
    } = &r.replay
    else {
        return Err("no lineage".into());
    };
    let h = handle()?;
    dnn!(c"cudnnSetStream"(P, P)(h as P, stream as P))?;
    // MARMOSET_TEST_CORRUPT_REPLAY: a deliberately wrong replay, for MARMOSET_VERIFY's test;
    // negated, so that even a reader that needs only the signs (ReLU's backward) sees it.
    let alpha = if corrupt { -alpha } else { *alpha };
    let (a, b) = (Scalar::of(alpha, *dtype), Scalar::of(*beta, *dtype));
    let arg = |role: &str| -> Result<(Desc, P), String> {
        let t = tensors
            .iter()
            .find(|t| t.role == role)
            .ok_or_else(|| format!("no {role} argument"))?;
        Ok((Desc::tensor(*dtype, &t.dims, &t.strides)?, t.ptr as P))
    };
    match r.api.as_str() {
        "cudnnActivationForward" => {
            let p = activation.as_ref().ok_or("no activation parameters")?;
            let ((xd, x), (yd, y)) = (arg("x")?, arg("y")?);
            let mut ad: P = std::ptr::null_mut();
            dnn!(c"cudnnCreateActivationDescriptor" (*mut P) (&mut ad))?;
            let run = || -> Result<(), String> {
                dnn!(c"cudnnSetActivationDescriptor"(P, c_int, c_int, f64)(
                    ad, p.mode, p.nan, p.coef
                ))?;
                dnn!(c"cudnnActivationForward"(P, P, P, P, P, P, P, P)(
                    h as P,
                    ad,
                    a.ptr(),
                    xd.0 as P,
                    x,
                    b.ptr(),
                    yd.0 as P,
                    y
                ))
            };
            let done = run();
            let _ = dnn!(c"cudnnDestroyActivationDescriptor"(P)(ad));
            done
        }
        "cudnnAddTensor" => {
            let ((ad, x), (cd, c)) = (arg("a")?, arg("c")?);
            dnn!(c"cudnnAddTensor"(P, P, P, P, P, P, P)(
                h as P,
                a.ptr(),
                ad.0 as P,
                x,
                b.ptr(),
                cd.0 as P,
                c
            ))
        }
        "cudnnSoftmaxForward" => {
            let (algo, mode) = softmax.ok_or("no softmax settings")?;
            let ((xd, x), (yd, y)) = (arg("x")?, arg("y")?);
            dnn!(c"cudnnSoftmaxForward"(P, c_int, c_int, P, P, P, P, P, P)(
                h as P,
                algo,
                mode,
                a.ptr(),
                xd.0 as P,
                x,
                b.ptr(),
                yd.0 as P,
                y
            ))
        }
        "cudnnConvolutionForward" => {
            let p = conv.as_ref().ok_or("no convolution parameters")?;
            let algo = r.algo.ok_or("no algorithm")?;
            let ((xd, x), (yd, y)) = (arg("x")?, arg("y")?);
            let w = tensors
                .iter()
                .find(|t| t.role == "w")
                .ok_or("no w argument")?;
            let wd = Filter::of(*dtype, &w.dims, &w.strides)?;
            let cd = Conv::of(p)?;
            dnn!(c"cudnnConvolutionForward"(
                P, P, P, P, P, P, P, c_int, P, usize, P, P, P
            )(
                h as P,
                a.ptr(),
                xd.0 as P,
                x,
                wd.0 as P,
                w.ptr as P,
                cd.0 as P,
                algo,
                ws as P,
                r.workspace as usize,
                b.ptr(),
                yd.0 as P,
                y
            ))
        }
        "cudnnBatchNormalizationForwardTraining" | "cudnnBatchNormalizationForwardTrainingEx" => {
            let p = batchnorm.as_ref().ok_or("no batch-norm parameters")?;
            let ((xd, x), (yd, y)) = (arg("x")?, arg("y")?);
            let scale = tensors
                .iter()
                .find(|t| t.role == "scale")
                .ok_or("no scale argument")?;
            let bias = tensors
                .iter()
                .find(|t| t.role == "bias")
                .ok_or("no bias argument")?;
            // The parameters are float for half and bfloat16 tensors (cuDNN's rule for the
            // derived descriptor), else the tensors' type.
            let ptype = if matches!(*dtype, 2 | 9) { 0 } else { *dtype };
            let pd = Desc::tensor(ptype, &scale.dims, &scale.strides)?;
            let null: P = std::ptr::null_mut();
            // No running statistics (both NULL: not updated) and no saved statistics (both
            // NULL: not saved): the replay rebuilds y and has no other effect. The
            // exponential-average factor is then unused.
            if r.api == "cudnnBatchNormalizationForwardTraining" {
                dnn!(c"cudnnBatchNormalizationForwardTraining"(
                    P, c_int, P, P, P, P, P, P, P, P, P, f64, P, P, f64, P, P
                )(
                    h as P,
                    p.mode,
                    a.ptr(),
                    b.ptr(),
                    xd.0 as P,
                    x,
                    yd.0 as P,
                    y,
                    pd.0 as P,
                    scale.ptr as P,
                    bias.ptr as P,
                    0.0,
                    null,
                    null,
                    p.epsilon,
                    null,
                    null
                ))
            } else {
                let (res, res_size) = match r.reserve {
                    0 => (null, 0usize),
                    n => ((ws + reserve_at(r.workspace)) as P, n as usize),
                };
                let (wsp, wss) = match r.workspace {
                    0 => (null, 0usize),
                    n => (ws as P, n as usize),
                };
                dnn!(c"cudnnBatchNormalizationForwardTrainingEx"(
                    P, c_int, c_int, P, P, P, P, P, P, P, P, P, P, P, f64, P, P, f64, P, P, P, P,
                    usize, P, usize
                )(
                    h as P,
                    p.mode,
                    p.ops,
                    a.ptr(),
                    b.ptr(),
                    xd.0 as P,
                    x,
                    null,
                    null,
                    yd.0 as P,
                    y,
                    pd.0 as P,
                    scale.ptr as P,
                    bias.ptr as P,
                    0.0,
                    null,
                    null,
                    p.epsilon,
                    null,
                    null,
                    null,
                    wsp,
                    wss,
                    res,
                    res_size
                ))
            }
        }
        other => Err(format!("{other} is not replayed")),
    }
}

/// A backend execution again: the program's execution plan (alive, the life recorded), a
/// variant pack of the recorded unique ids and the current addresses, Marmoset's workspace.
/// `corrupt`: the first four bytes of each output set to 0xff afterwards, for MARMOSET_VERIFY's
/// test (a plan has no scaling parameter Marmoset may change, and a moved pointer breaks the
/// alignment the plan was made for).
fn backend(
    r: &Recipe,
    tensors: &[TensorArg],
    plan: u64,
    life: u64,
    stream: u64,
    ws: u64,
    corrupt: bool,
) -> Result<(), String> {
    if crate::microbatch::backend::plan_life(plan as usize) != Some(life) {
        return Err(format!("the execution plan {plan:#x} was destroyed"));
    }
    let mut ids = Vec::new();
    let mut ptrs = Vec::new();
    for t in tensors {
        ids.push(
            t.uid
                .ok_or_else(|| format!("{} has no unique id", t.role))?,
        );
        ptrs.push(t.ptr as i64);
    }
    let h = handle()?;
    dnn!(c"cudnnSetStream"(P, P)(h as P, stream as P))?;
    crate::microbatch::backend::replay_execute(h, plan as usize, &ids, &ptrs, ws as i64)
        .map_err(|why| format!("{} through plan {plan:#x}: {why}", r.api))?;
    if corrupt {
        let set = match resolve(crate::real::CUDA, c"cuMemsetD8Async") {
            0 => return Err("the driver has no cuMemsetD8Async".into()),
            p => p,
        };
        type Set = unsafe extern "C" fn(u64, u8, usize, P) -> c_int;
        // SAFETY: the real cuMemsetD8Async has this signature.
        let set: Set = unsafe { std::mem::transmute(set) };
        for t in tensors.iter().filter(|t| t.access == Access::W) {
            // SAFETY: four bytes at the start of a live, mapped output.
            unsafe { set(t.ptr, 0xff, 4, stream as P) };
        }
    }
    Ok(())
}

fn handle() -> Result<usize, String> {
    let mut g = HANDLE
        .lock()
        .map_err(|_| "the replay handle's lock is poisoned")?;
    if *g == 0 {
        let mut h: P = std::ptr::null_mut();
        dnn!(c"cudnnCreate" (*mut P) (&mut h))?;
        *g = h as usize;
    }
    Ok(*g)
}
