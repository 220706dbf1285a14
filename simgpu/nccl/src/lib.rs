//! `libnccl.so.2` of the simulated GPU: NCCL's collectives between the processes of one machine
//! (one simulated device per process, as torchrun starts them), exact in data mode and timed on
//! the virtual clock (`simgpu_model::nccl`). Messages travel as files in a directory per
//! communicator ([`transport`]); the host blocks in a collective until its peers have posted
//! their parts, which NCCL's rule that every rank issues the same collectives in the same order
//! makes safe. What is not implemented here answers ncclInvalidUsage (simgpu-stubgen).
//!
//! Types, values and prototypes are hand-written from NCCL 2.32.3's `nccl.h` (the
//! nvidia-nccl-cu12 2.32.3 wheel); each constant names where it comes from.

mod api;
mod comm;
mod driver;
mod ops;
mod reduce;
mod transport;

use std::collections::HashSet;
use std::ffi::{CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

/// `ncclResult_t` (nccl.h).
pub type NcclResult = c_int;
pub const SUCCESS: NcclResult = 0;
pub const UNHANDLED_CUDA_ERROR: NcclResult = 1;
pub const SYSTEM_ERROR: NcclResult = 2;
pub const INTERNAL_ERROR: NcclResult = 3;
pub const INVALID_ARGUMENT: NcclResult = 4;
pub const INVALID_USAGE: NcclResult = 5;
pub const REMOTE_ERROR: NcclResult = 6;
pub const IN_PROGRESS: NcclResult = 7;
pub const TIMEOUT: NcclResult = 8;

/// NCCL_VERSION_CODE of the header the types come from: NCCL_VERSION(2, 32, 3) = 2*10000 +
/// 32*100 + 3 (nccl.h 2.32.3).
pub const VERSION_CODE: c_int = 23203;

/// A failed call: its status, a short kind (a message is printed once per function and kind)
/// and the message.
#[derive(Debug)]
pub struct Fail {
    pub code: NcclResult,
    pub kind: &'static str,
    pub msg: String,
}

impl Fail {
    pub fn new(code: NcclResult, kind: &'static str, msg: impl Into<String>) -> Fail {
        Fail {
            code,
            kind,
            msg: msg.into(),
        }
    }
    pub fn arg(kind: &'static str, msg: impl Into<String>) -> Fail {
        Fail::new(INVALID_ARGUMENT, kind, msg)
    }
    pub fn usage(kind: &'static str, msg: impl Into<String>) -> Fail {
        Fail::new(INVALID_USAGE, kind, msg)
    }
}

/// The messages of failed calls, kept for the life of the process so that the pointers
/// ncclGetLastError hands out stay valid; one copy of each text.
static MESSAGES: Mutex<Vec<CString>> = Mutex::new(Vec::new());
static LAST: Mutex<usize> = Mutex::new(usize::MAX);
static SAID: Mutex<Option<HashSet<(String, &'static str)>>> = Mutex::new(None);

fn remember(msg: &str) {
    let Ok(c) = CString::new(msg.replace('\0', " ")) else {
        return;
    };
    let mut m = MESSAGES.lock().unwrap_or_else(|p| p.into_inner());
    let i = match m.iter().position(|x| *x == c) {
        Some(i) => i,
        None => {
            m.push(c);
            m.len() - 1
        }
    };
    *LAST.lock().unwrap_or_else(|p| p.into_inner()) = i;
}

/// Records a failure of `func` and names it on stderr (once per function and kind).
pub fn report(func: &str, f: &Fail) -> NcclResult {
    let text = format!("simgpu nccl: {func}: {}", f.msg);
    remember(&text);
    let mut said = SAID.lock().unwrap_or_else(|p| p.into_inner());
    if said
        .get_or_insert_with(HashSet::new)
        .insert((func.to_string(), f.kind))
    {
        eprintln!("{text}");
    }
    f.code
}

/// Runs an entry point: its result, or its failure recorded; a panic becomes
/// ncclInternalError, never an unwind across the C ABI.
pub fn guard(func: &str, f: impl FnOnce() -> Result<(), Fail>) -> NcclResult {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(e)) => report(func, &e),
        Err(_) => report(
            func,
            &Fail::new(
                INTERNAL_ERROR,
                "panic",
                "internal error (a bug of the simulator)",
            ),
        ),
    }
}

/// Writes `v` through the out-pointer `p`, or fails with ncclInvalidArgument when it is NULL.
pub(crate) fn out<T>(p: *mut T, v: T, name: &str) -> Result<(), Fail> {
    if p.is_null() {
        return Err(Fail::arg("null", format!("{name} is NULL")));
    }
    // SAFETY: p is non-null and, by the API's contract, points to a writable T.
    unsafe { p.write(v) };
    Ok(())
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGetVersion(version: *mut c_int) -> NcclResult {
    guard("ncclGetVersion", || out(version, VERSION_CODE, "version"))
}

/// The text of each `ncclResult_t`, in the words NCCL uses.
#[unsafe(no_mangle)]
pub extern "C" fn ncclGetErrorString(result: NcclResult) -> *const c_char {
    match result {
        SUCCESS => c"no error",
        UNHANDLED_CUDA_ERROR => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        SYSTEM_ERROR => c"unhandled system error (run with NCCL_DEBUG=INFO for details)",
        INTERNAL_ERROR => c"internal error - please report this issue to the NCCL developers",
        INVALID_ARGUMENT => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        INVALID_USAGE => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
        REMOTE_ERROR => c"remote process exited or there was a network error",
        IN_PROGRESS => c"NCCL operation in progress",
        TIMEOUT => c"NCCL operation timed out",
        _ => c"unknown result code",
    }
    .as_ptr()
}

/// The message of the last failed call of this process ("" when none); the communicator
/// argument is not needed to find it.
#[unsafe(no_mangle)]
pub extern "C" fn ncclGetLastError(_comm: comm::CommHandle) -> *const c_char {
    let m = MESSAGES.lock().unwrap_or_else(|p| p.into_inner());
    let i = *LAST.lock().unwrap_or_else(|p| p.into_inner());
    m.get(i).map_or(c"".as_ptr(), |c| c.as_ptr())
}

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
