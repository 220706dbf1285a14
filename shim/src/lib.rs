//! `libmarmoset.so`: loaded with LD_PRELOAD, it sees every CUDA runtime, driver and cuDNN call a
//! program makes, whichever way the program resolves it (linked, `dlsym` on a private handle,
//! `cuGetProcAddress`, `cudaGetDriverEntryPoint`), forwards it, and traces it.
//!
//! Safety rules: a panic never crosses the C boundary (it turns Marmoset off and the call is
//! forwarded); no lock is held across a forwarded call; calls the real libraries make back into
//! hooked functions pass straight through; a forked child passes everything through; nothing
//! happens until the first CUDA call. `unsafe` is confined to the FFI edge.
#![allow(clippy::missing_safety_doc)]

mod access;
mod core;
mod ffi;
mod hooks;
mod microbatch;
mod sinks;
mod virt;

use crate::core::config::{self, Config};
use crate::core::{bus, framework, own_memory, state};
use sinks::{timing, trace};
use std::ffi::{CStr, c_char, c_void};

#[ctor::ctor(unsafe)]
fn init() {
    // SAFETY: registering a plain extern "C" child handler; no other thread runs yet.
    unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    state::on_start(start);
    // Marmoset's own buffers (μ-cuDNN's) come from memory virtualisation's allocator while it
    // manages memory, so that they count in the budget.
    own_memory::attach(own_memory::Allocator {
        serves: virt::memory::active,
        alloc: virt::memory::alloc_internal,
        free: |p| virt::memory::free(p, None),
        spare: virt::memory::spare,
        budget: virt::memory::budget,
        lend: virt::memory::lend,
        pin: virt::memory::pin_lent,
        unpin: virt::memory::unpin_lent,
    });
    // Framework settings must be in the environment before the framework reads them, which can
    // be before the first CUDA call. Nothing else happens here.
    let Ok(cfg) = config::parse(|k| std::env::var(k).ok()) else {
        return;
    };
    if cfg.disable {
        return;
    }
    if cfg.trace.is_some() {
        trace::name_the_run();
    }
    let (set, log, memory_ok) =
        framework::framework_settings(cfg.policy, cfg.trace.is_some(), |k| std::env::var(k).ok());
    if !memory_ok {
        state::refuse_memory_policy();
    }
    for (k, v) in set {
        // SAFETY: library constructors run before main, on the only thread.
        unsafe { std::env::set_var(k, v) };
    }
    let mut for_pytorch = Vec::new();
    for said in log.into_iter().filter(|s| cfg.log >= s.level) {
        if said.pytorch {
            for_pytorch.push(said.line);
        } else {
            eprintln!("{}", said.line);
        }
    }
    let _ = FOR_PYTORCH.set(for_pytorch);
}

/// Lines of the framework settings said at the first CUDA call, and only where PyTorch's CUDA
/// library is loaded by then (`framework::Said::pytorch`).
static FOR_PYTORCH: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Whether PyTorch's CUDA library (libc10_cuda.so, which holds its allocator) is mapped in this
/// process. At the first CUDA call of a PyTorch program it is: `import torch` loads it.
fn pytorch_loaded() -> bool {
    std::fs::read_to_string("/proc/self/maps").is_ok_and(|m| m.contains("/libc10_cuda.so"))
}

/// Starts the listeners at the first CUDA call: the trace writer when a trace is asked for,
/// the tracker under a planner policy, attached to the bus in that order of sight (the tracker
/// observes each record, the writer keeps it).
fn start(c: &Config) -> Result<(), String> {
    if let Some(lines) = FOR_PYTORCH.get().filter(|l| !l.is_empty())
        && pytorch_loaded()
    {
        for l in lines {
            eprintln!("{l}");
        }
    }
    let mut sink: Option<bus::Sink> = None;
    let mut flushers: Vec<fn()> = Vec::new();
    if let Some(path) = &c.trace {
        trace::start(path, c.policy.name())
            .map_err(|e| format!("cannot write the trace MARMOSET_TRACE={path:?}: {e}"))?;
        sink = Some(trace::record);
        flushers.push(trace::flush);
        // SAFETY: registering a plain extern "C" function with atexit.
        unsafe { libc::atexit(flush_at_exit) };
    }
    // A convolution μ-cuDNN ran as micro-batches is replayed the same way.
    virt::recompute::attach_micro_execute(microbatch::backend::execute_replay);
    let mut observers: Vec<bus::Observer> = Vec::new();
    if c.policy.guided().is_some() {
        observers.push(virt::tracker::observe);
        virt::memory::attach_ahead(virt::executor::ahead);
        if c.online {
            // The online policy sees each record after the tracker, and answers the allocator.
            observers.push(virt::online::observe);
            virt::memory::attach_online(virt::memory::Online {
                choosing: virt::online::choosing,
                droppable: virt::online::droppable,
                drop: virt::online::drop,
                link_bps: virt::online::link_bps,
                before_use: virt::online::before_use,
                after_use: virt::online::after_use,
                before_free: virt::online::before_free,
                before_loss: virt::online::before_loss,
                saved: virt::online::saved,
                is_dropped: virt::online::is_dropped,
                guard: virt::online::guard,
                kept: virt::online::kept,
                lost: virt::online::lost,
            });
        }
    }
    bus::attach(observers, sink, flushers);
    Ok(())
}

/// At exit: the copies out still under way finish (their `evict` records are written), the
/// device timings are read, and the trace is flushed.
extern "C" fn flush_at_exit() {
    virt::memory::settle();
    timing::drain(true);
    trace::flush();
}

/// After fork the child has no listener threads: it passes everything through, and its copy
/// of the trace file is closed.
extern "C" fn after_fork_in_child() {
    state::after_fork_in_child();
    trace::forget_after_fork();
}

/// The real function behind a hooked name (NULL when not hooked or not found). For benchmarks
/// and tests that compare a direct call with a hooked one in the same process.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn marmoset_real_function(name: *const c_char) -> *mut c_void {
    if name.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: name is a NUL-terminated string (the caller's contract).
    let name = unsafe { CStr::from_ptr(name) };
    hooks::find(name)
        .map(|e| e.real() as *mut c_void)
        .unwrap_or(std::ptr::null_mut())
}

/// Writes everything traced so far to disk (for tests; exit and `_exit` do it too).
#[unsafe(no_mangle)]
pub extern "C" fn marmoset_flush() {
    timing::drain(true);
    trace::flush();
}
