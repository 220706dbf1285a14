//! The hook tables. Each API family is one declarative table (`hooks!` below) that generates the
//! exported symbols and their entries; the same entries answer `dlsym` (exact names),
//! `cuGetProcAddress(_v2)` and `cudaGetDriverEntryPoint(ByVersion)`.
//!
//! Every hook: if Marmoset is off, or the thread is already inside a hook, it forwards at once.
//! Otherwise it runs its `pre` step (which describes the call for the trace; no lock is held
//! after it), forwards to the real function, and finishes the record with the result. A panic
//! in either step turns Marmoset off and never reaches the caller; the call is forwarded once.

pub mod cublas;
pub mod cudnn;
pub mod dl;
pub mod driver;
pub mod nccl;
pub mod register;
pub mod runtime;

use crate::core::config::Level;
use crate::core::registry;
use crate::core::state::{self, Guard, log};
use planner::trace::{Access, Event, Touch};
use std::ffi::CStr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};

/// One hooked function.
pub struct Entry {
    /// The exported name, exactly.
    pub name: &'static CStr,
    /// For driver functions: the base name `cuGetProcAddress` is asked for (e.g. `cuMemAlloc`
    /// for `cuMemAlloc_v2`); empty otherwise.
    pub base: &'static str,
    /// Where the real function lives (sonames, first loaded wins).
    pub libs: &'static [&'static CStr],
    /// The address of our hook.
    pub hook: fn() -> usize,
    real: AtomicUsize,
}

impl Entry {
    pub const fn new(
        name: &'static CStr,
        base: &'static str,
        libs: &'static [&'static CStr],
        hook: fn() -> usize,
    ) -> Entry {
        Entry {
            name,
            base,
            libs,
            hook,
            real: AtomicUsize::new(0),
        }
    }

    /// The real function's address (resolved on first use; 0 when it cannot be found).
    pub fn real(&self) -> usize {
        let p = self.real.load(Ordering::Acquire);
        if p != 0 {
            return p;
        }
        let p = crate::ffi::real::resolve(self.libs, self.name);
        if p != 0 && p != (self.hook)() {
            self.real.store(p, Ordering::Release);
            return p;
        }
        0
    }

    /// Remembers where the real function is when a look-up (dlsym on a private handle,
    /// cuGetProcAddress) found it before we did.
    pub fn learn(&self, p: usize) {
        if p != 0 && p != (self.hook)() {
            let _ = self
                .real
                .compare_exchange(0, p, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

/// All tables.
pub fn tables() -> [&'static [Entry]; 8] {
    [
        &runtime::TABLE,
        &driver::TABLE,
        &cudnn::TABLE,
        &cublas::TABLE,
        &cublas::LT_TABLE,
        &nccl::TABLE,
        &dl::TABLE,
        &register::TABLE,
    ]
}

/// The hooked function named exactly `name`.
pub fn find(name: &CStr) -> Option<&'static Entry> {
    let n = name.to_bytes();
    tables()
        .into_iter()
        .flatten()
        .find(|e| e.name.to_bytes() == n)
}

/// The driver hook whose real variant is `real`, among those with base name `base`.
pub fn driver_variant(base: &[u8], real: usize) -> Option<&'static Entry> {
    let dlsym = crate::ffi::real::dlsym_fn()?;
    for e in driver::TABLE.iter().filter(|e| e.base.as_bytes() == base) {
        if real == (e.hook)() {
            return Some(e);
        }
        // SAFETY: RTLD_NOLOAD look-up of the driver and the real dlsym of an exact name.
        let candidate = unsafe {
            let h = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_NOW);
            if h.is_null() {
                0
            } else {
                let p = dlsym(h, e.name.as_ptr()) as usize;
                libc::dlclose(h);
                p
            }
        };
        if candidate == real {
            return Some(e);
        }
    }
    None
}

/// A record in the making: described before the forwarded call, finished with its result.
pub struct Pending {
    pub event: Event,
    /// Sequence number taken before the call (frees), else taken when finished.
    pub seq: Option<u64>,
    /// Allocation calls: where the new pointer is written, and the size.
    pub alloc_out: Option<(*mut u64, u64)>,
    /// Device timing: the stream and the start event.
    pub timing: Option<(u64, usize)>,
    /// The stream to time the call on, once Marmoset's own work for it is done.
    time_on: Option<u64>,
}

impl Pending {
    pub fn new(event: Event) -> Pending {
        Pending {
            event,
            seq: None,
            alloc_out: None,
            timing: None,
            time_on: None,
        }
    }

    /// Measures the call's device time on `stream` (when MARMOSET_TRACE_TIMING=1), from after
    /// Marmoset's own work for it (restores, room), so that the time is the program's.
    pub fn timed(mut self, stream: u64) -> Pending {
        self.time_on = Some(stream);
        self
    }

    fn start_timing(&mut self) {
        if let Some(stream) = self.time_on.take() {
            self.timing = crate::sinks::timing::begin(stream).map(|e| (stream, e));
        }
    }

    fn finish(mut self, result: i32) {
        if let Some(r) = self.event.result_mut() {
            *r = result;
        }
        let mut seq = self.seq;
        if let (Some((out, size)), Event::Alloc { ptr, alloc, .. }) =
            (self.alloc_out, &mut self.event)
            && result == 0
            && !out.is_null()
        {
            // SAFETY: the allocation call succeeded, so it wrote the new pointer through `out`.
            *ptr = unsafe { *out };
            let (id, s) = registry::register_alloc(*ptr, size);
            *alloc = id;
            seq = Some(s);
        }
        let seq = seq.unwrap_or_else(crate::core::bus::next_seq);
        if let Some((stream, start)) = self.timing {
            let compute = matches!(
                self.event,
                Event::Launch { .. }
                    | Event::Cudnn { .. }
                    | Event::Cublas { .. }
                    | Event::Memset { .. }
            );
            crate::sinks::timing::end(seq, stream, start, compute);
        }
        crate::core::bus::publish(seq, self.event);
    }
}

fn stream_of(e: &Event) -> Option<u64> {
    match e {
        Event::Copy { stream, .. }
        | Event::Memset { stream, .. }
        | Event::Launch { stream, .. }
        | Event::Cudnn { stream, .. }
        | Event::Cublas { stream, .. }
        | Event::Collective { stream, .. } => *stream,
        _ => None,
    }
}

/// Runs one hooked call (see the module documentation).
pub fn run(
    entry: &'static Entry,
    pre: impl FnOnce() -> Option<Pending>,
    real: impl FnOnce() -> i32,
) -> i32 {
    if !state::active() {
        return real();
    }
    let Some(_guard) = Guard::enter() else {
        return real();
    };
    let mut pending = match catch_unwind(AssertUnwindSafe(|| {
        if state::config()
            .test_panic
            .as_deref()
            .is_some_and(|n| n.as_bytes() == entry.name.to_bytes())
        {
            panic!("MARMOSET_TEST_PANIC");
        }
        if crate::core::bus::listening() || crate::virt::memory::active() {
            pre()
        } else {
            None
        }
    })) {
        Ok(p) => p,
        Err(_) => {
            state::disable(&format!(
                "internal error (panic) in the {} hook",
                entry.name.to_string_lossy()
            ));
            None
        }
    };
    // Guided execution: the prefetches whose in-trigger this call is; then every tensor the
    // call touches must be resident before it runs, and stay so until it is issued.
    let mut hold = crate::virt::memory::Hold::none();
    if let Some(p) = &pending {
        let (touches, stream) = (p.event.touches(), stream_of(&p.event));
        if crate::virt::tracker::enabled() {
            let ids: Vec<u64> = touches.iter().map(|t| t.alloc).collect();
            if catch_unwind(AssertUnwindSafe(|| {
                crate::virt::executor::before_call(&ids, stream.unwrap_or(0))
            }))
            .is_err()
            {
                state::disable(&format!(
                    "internal error (panic) before {}",
                    entry.name.to_string_lossy()
                ));
            }
        }
        // A call whose tensors cannot be resident within the budget together (the budget is
        // smaller than what it needs at once, or nothing else can go) runs beyond it, with a
        // warning: refused, it would be skipped, and a kernel launch's error reaches the
        // program only through cudaGetLastError, which the runtime was never told of.
        let resident = match crate::virt::memory::before(&p.event, stream) {
            Err(code) if code == crate::virt::memory::NO_ROOM => {
                static SAID: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                let first = !SAID.swap(true, Ordering::Relaxed);
                log(
                    if first { Level::Warn } else { Level::Debug },
                    &format!(
                        "memory: {} needs more at once than the budget can give; it runs beyond the budget (raise --memory-limit){}",
                        p.event.api().unwrap_or("a call"),
                        if first {
                            "; said once, every time at MARMOSET_LOG=debug"
                        } else {
                            ""
                        }
                    ),
                );
                crate::virt::memory::beyond_budget(|| crate::virt::memory::before(&p.event, stream))
            }
            r => r,
        };
        match resident {
            // Its operands stay held until the call below is issued.
            Ok(h) => hold = h,
            Err(code) => {
                // cuDNN speaks its own codes: a device allocation failure, or a driver failure.
                let code = match (&p.event, code) {
                    (Event::Cudnn { .. }, 2) => 4004,
                    (Event::Cudnn { .. }, _) => 5001,
                    // cuBLAS: CUBLAS_STATUS_ALLOC_FAILED, or EXECUTION_FAILED.
                    (Event::Cublas { .. }, 2) => 3,
                    (Event::Cublas { .. }, _) => 13,
                    // NCCL: ncclUnhandledCudaError, what it returns when CUDA fails it.
                    (Event::Collective { .. }, _) => 1,
                    _ => code,
                };
                if let Some(p) = pending {
                    let _ = catch_unwind(AssertUnwindSafe(|| p.finish(code)));
                }
                return code;
            }
        }
    }
    if let Some(p) = &mut pending {
        p.start_timing();
    }
    let r = real();
    // Inside an NCCL group the call only queues its work: its operands stay held until the
    // group's end issues it.
    nccl::release(hold);
    if let Some(p) = pending
        && catch_unwind(AssertUnwindSafe(|| {
            p.finish(r);
            // Guided execution: the evictions whose evicted-access this call was.
            if crate::virt::tracker::enabled() {
                crate::virt::executor::after_call();
            }
        }))
        .is_err()
    {
        state::disable(&format!(
            "internal error (panic) after {}",
            entry.name.to_string_lossy()
        ));
    }
    r
}

/// Runs Marmoset's own replacement of a call; a panic turns Marmoset off and gives None, so the
/// caller's call is then forwarded as it was.
pub fn attempt<R>(entry: &'static Entry, f: impl FnOnce() -> Option<R>) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            state::disable(&format!(
                "internal error (panic) in the {} hook",
                entry.name.to_string_lossy()
            ));
            None
        }
    }
}

/// The default forwarded call, or a hook's own call expression.
macro_rules! call_or {
    (; $default:expr) => {
        $default
    };
    ($call:expr; $default:expr) => {
        $call
    };
}
pub(crate) use call_or;

/// Touches of a pointer range, or none for a null pointer.
pub fn range(ptr: u64, bytes: u64, access: Access) -> Vec<Touch> {
    if ptr == 0 {
        Vec::new()
    } else {
        registry::touches(ptr, bytes, access)
    }
}

/// Generates a family's hooks and its table. Each line:
/// `[base] fn name(args) => pre [, call = expr];` where `pre` describes the call for the trace
/// (`Option<Pending>`) and `call`, when given, replaces the forwarded call (it may use `real`,
/// `entry` and the arguments).
macro_rules! hooks {
    (libs = $libs:expr, unavailable = $fail:expr, names = ($entry:ident, $real:ident); $( [$base:literal] fn $name:ident ( $($a:ident : $t:ty),* $(,)? ) => $pre:expr $(, call = $call:expr)? ; )* ) => {
        #[allow(non_camel_case_types, clippy::upper_case_acronyms, clippy::enum_variant_names, dead_code)]
        #[repr(usize)]
        enum Id { $($name),* }

        pub static TABLE: [crate::hooks::Entry; [$(stringify!($name)),*].len()] = [
            $( crate::hooks::Entry::new(
                // SAFETY: concat! appends the NUL the C string needs; names contain no NUL.
                unsafe { std::ffi::CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes()) },
                $base,
                $libs,
                { fn addr() -> usize { $name as *const () as usize } addr },
            ) ),*
        ];

        $(
            #[unsafe(no_mangle)]
            #[allow(clippy::too_many_arguments)]
            pub unsafe extern "C" fn $name($($a: $t),*) -> std::ffi::c_int {
                type F = unsafe extern "C" fn($($t),*) -> std::ffi::c_int;
                let entry = &TABLE[Id::$name as usize];
                #[allow(unused_variables)]
                let $entry = entry;
                let p = entry.real();
                if p == 0 {
                    crate::core::state::log(crate::core::config::Level::Error, concat!("cannot find the real ", stringify!($name)));
                    return $fail;
                }
                // SAFETY: p is the real function of this exact name, with this signature.
                let real: F = unsafe { std::mem::transmute::<usize, F>(p) };
                #[allow(unused_variables)]
                let $real = real;
                #[allow(unused_unsafe)]
                crate::hooks::run(entry, || $pre, || crate::hooks::call_or!($($call)?; unsafe { real($($a),*) }))
            }
        )*
    };
}
pub(crate) use hooks;
