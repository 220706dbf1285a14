//! Kernel launches replayed: the recorded parameter buffer with each operand's current address
//! written where the recorded one was, launched again through the driver; and the parameter
//! buffer of each iteration's launch, kept for the recipes that take it
//! ([`super::Recipe::refresh`]).

use crate::ffi::call_why;
use planner::trace::Event;
use std::ffi::c_void;

type P = *mut c_void;

/// A kernel launch to replay: the recorded parameter buffer, and where in it each argument's
/// address goes (byte offset, index into the recipe's arguments).
#[derive(Debug, Clone)]
pub(super) struct Kernel {
    pub(super) func: u64,
    pub(super) runtime: bool,
    pub(super) grid: [u32; 3],
    pub(super) block: [u32; 3],
    pub(super) shared: u64,
    pub(super) params: Vec<u8>,
    pub(super) pointers: Vec<(usize, usize)>,
}

impl Kernel {
    /// From a launch's record and parameter buffer: each touch's recorded address must occur
    /// in the buffer (at a 4-byte boundary, as parameters are aligned; only in the pointer
    /// words where the kernel's name gives them: `access::launch::pointer_words`), or the launch
    /// cannot be rebuilt.
    pub(super) fn of(
        event: &Event,
        params: &[u8],
        shared: u64,
        base: &impl Fn(u64) -> Option<u64>,
    ) -> Option<Kernel> {
        let Event::Launch {
            api,
            func,
            grid,
            block,
            touches,
            ..
        } = event
        else {
            return None;
        };
        let params = params.to_vec();
        let runtime = api.starts_with("cuda") || api.starts_with("__cuda");
        // Only the words the kernel's name says are pointers, where it says: a stale integer
        // (an unused TensorInfo slot) may equal an operand's address.
        let words = crate::access::launch::pointer_words(*func as usize, runtime);
        let mut pointers = Vec::new();
        for (i, t) in touches.iter().enumerate() {
            let addr = (base(t.alloc)? + t.offset).to_le_bytes();
            let before = pointers.len();
            for at in (0..params.len().saturating_sub(7)).step_by(4) {
                if params[at..at + 8] == addr && words.as_ref().is_none_or(|w| w.contains(&at)) {
                    pointers.push((at, i));
                }
            }
            if pointers.len() == before {
                return None;
            }
        }
        Some(Kernel {
            func: *func,
            runtime,
            grid: *grid,
            block: *block,
            shared,
            params,
            pointers,
        })
    }
}

thread_local! {
    /// The parameter buffer of this thread's last kernel launch (its lineage), for
    /// [`Recipe::refresh`].
    static LAST_PARAMS: std::cell::RefCell<Option<Vec<u8>>> = const { std::cell::RefCell::new(None) };
}

/// Notes a launch's parameter buffer (a `kernel` lineage), before its record.
pub fn note_params(params: &[u8]) {
    // A launch from a thread's TLS destructors keeps nothing: the thread is ending.
    let _ = LAST_PARAMS.try_with(|p| *p.borrow_mut() = Some(params.to_vec()));
}

/// The parameter buffer of this thread's last launch, taken.
pub fn take_params() -> Option<Vec<u8>> {
    LAST_PARAMS
        .try_with(|p| p.borrow_mut().take())
        .ok()
        .flatten()
}

/// Launches the recorded kernel again with the current addresses (`addrs`: each operand's,
/// in the order of its touches when recorded), through the driver (the parameters as one
/// buffer: `CU_LAUNCH_PARAM_BUFFER_POINTER`). `corrupt`: the first parameter (the element count
/// of the kernels replayed) halved, for MARMOSET_VERIFY's test.
pub(super) fn launch(k: &Kernel, addrs: &[u64], stream: u64, corrupt: bool) -> Result<(), String> {
    let mut params = k.params.clone();
    for &(at, i) in &k.pointers {
        let va = addrs.get(i).ok_or("an operand is missing")?;
        params[at..at + 8].copy_from_slice(&va.to_le_bytes());
    }
    // MARMOSET_TEST_CORRUPT_REPLAY: the first 4-byte word that is no operand's pointer halved
    // (an element count, where there is one: half the output left unwritten).
    let scalar = (0..params.len().saturating_sub(3))
        .step_by(4)
        .find(|&at| !k.pointers.iter().any(|&(p, _)| at + 4 > p && at < p + 8));
    if let (true, Some(at)) = (corrupt, scalar) {
        let n = i32::from_le_bytes([params[at], params[at + 1], params[at + 2], params[at + 3]]);
        params[at..at + 4].copy_from_slice(&(n / 2).to_le_bytes());
    }
    let f =
        crate::access::launch::driver_function(k.func as usize, k.runtime).ok_or_else(|| {
            format!(
                "the driver has no handle for the kernel {:#x} ({}{})",
                k.func,
                if k.runtime {
                    "a runtime kernel, which cudaGetFuncBySymbol refused"
                } else {
                    "a driver kernel"
                },
                crate::access::launch::name(k.func as usize, k.runtime)
                    .map(|n| format!(": {n}"))
                    .unwrap_or_default()
            )
        })?;
    let mut size = params.len();
    // CU_LAUNCH_PARAM_BUFFER_POINTER, its buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, its size, END.
    let mut extra: [P; 5] = [
        1 as P,
        params.as_mut_ptr() as P,
        2 as P,
        &mut size as *mut usize as P,
        std::ptr::null_mut(),
    ];
    let [gx, gy, gz] = k.grid;
    let [bx, by, bz] = k.block;
    // f is the kernel's driver handle; the buffer holds its parameters at the offsets the driver
    // gave, with live allocations' addresses; both outlive the call (the driver copies
    // parameters at launch).
    call_why!(cuLaunchKernel(
        f,
        gx,
        gy,
        gz,
        bx,
        by,
        bz,
        k.shared as u32,
        stream as P,
        std::ptr::null_mut(),
        extra.as_mut_ptr()
    ))
}
