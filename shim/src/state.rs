//! Process state: whether Marmoset is on, the re-entrancy guard, logging, and the table of
//! device allocations that turns raw pointers into allocation ids.

use crate::config::{self, Config, Level};
use planner::trace::{Access, Touch};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Once, OnceLock, RwLock};
use std::time::Instant;

const IDLE: u8 = 0;
const ACTIVE: u8 = 1;
const PASS_THROUGH: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(IDLE);
static START: Once = Once::new();
static CONFIG: OnceLock<Config> = OnceLock::new();
static EPOCH: OnceLock<Instant> = OnceLock::new();
static MEMORY_REFUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The framework settings refused the memory policy (expandable segments): calls pass through.
pub fn refuse_memory_policy() {
    MEMORY_REFUSED.store(true, Ordering::Release);
}

pub fn memory_policy_allowed() -> bool {
    !MEMORY_REFUSED.load(Ordering::Acquire)
}

/// The settings in force (defaults until the first CUDA call has read them).
pub fn config() -> &'static Config {
    static DEFAULT: std::sync::LazyLock<Config> = std::sync::LazyLock::new(Config::default);
    CONFIG.get().unwrap_or(&DEFAULT)
}

/// Whether hooks do Marmoset's work. The first call starts Marmoset: until a program calls
/// CUDA, the library stays idle (child processes inherit LD_PRELOAD).
pub fn active() -> bool {
    match STATE.load(Ordering::Acquire) {
        ACTIVE => true,
        PASS_THROUGH => false,
        _ => {
            START.call_once(start);
            STATE.load(Ordering::Acquire) == ACTIVE
        }
    }
}

fn start() {
    EPOCH.get_or_init(Instant::now);
    let parsed = config::parse(|k| std::env::var(k).ok());
    let cfg = match parsed {
        Ok(c) => c,
        Err(lines) => {
            for l in lines {
                eprintln!("{l}");
            }
            STATE.store(PASS_THROUGH, Ordering::Release);
            return;
        }
    };
    let disabled = cfg.disable;
    if cfg.log >= Level::Warn {
        for l in cfg.without_effect() {
            eprintln!("{l}");
        }
    }
    let _ = CONFIG.set(cfg);
    if disabled {
        STATE.store(PASS_THROUGH, Ordering::Release);
        return;
    }
    let c = config();
    if let Some(path) = &c.trace
        && let Err(e) = crate::trace::start(path, c.policy.name())
    {
        eprintln!(
            "marmoset: cannot write the trace MARMOSET_TRACE={path:?}: {e}; Marmoset passes every call through"
        );
        STATE.store(PASS_THROUGH, Ordering::Release);
        return;
    }
    log(
        Level::Info,
        &format!(
            "policy {}, tracing {}{}",
            c.policy.name(),
            c.trace.as_deref().unwrap_or("off"),
            if c.trace_timing {
                " with device timings"
            } else {
                ""
            }
        ),
    );
    STATE.store(ACTIVE, Ordering::Release);
}

/// Turns Marmoset off for the rest of the process: every call passes through.
pub fn disable(why: &str) {
    if STATE.swap(PASS_THROUGH, Ordering::AcqRel) != PASS_THROUGH {
        eprintln!(
            "marmoset: {why}; Marmoset is off for this process, calls pass through unchanged"
        );
        crate::trace::flush();
    }
}

/// After fork the child has no writer thread: it passes everything through.
pub extern "C" fn after_fork_in_child() {
    STATE.store(PASS_THROUGH, Ordering::Release);
    crate::trace::forget_after_fork();
}

pub fn log(level: Level, msg: &str) {
    if level <= config().log {
        eprintln!("marmoset: {msg}");
    }
}

pub fn now_ns() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

pub fn tid() -> u64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u64 }
}

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Marks a thread as inside a hook, so calls that the real library makes back into hooked
/// functions (cuDNN into cudart, cudart into the driver) are forwarded untouched.
pub struct Guard(());

impl Guard {
    pub fn enter() -> Option<Guard> {
        DEPTH
            .try_with(|d| {
                if d.get() > 0 {
                    None
                } else {
                    d.set(1);
                    Some(Guard(()))
                }
            })
            .ok()
            .flatten()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(0));
    }
}

// ==================================================================== allocations

#[derive(Debug, Clone, Copy)]
struct Allocation {
    len: u64,
    id: u64,
}

static ALLOCS: RwLock<BTreeMap<u64, Allocation>> = RwLock::new(BTreeMap::new());
/// Allocation id -> (pointer, size), for the memory manager.
static BY_ID: RwLock<BTreeMap<u64, (u64, u64)>> = RwLock::new(BTreeMap::new());
static NEXT_ALLOC: AtomicU64 = AtomicU64::new(1);

/// Registers an allocation and gives its record a sequence number under the same lock, so the
/// trace orders it after the free of any earlier allocation at that address.
pub fn register_alloc(ptr: u64, len: u64) -> (u64, u64) {
    let mut t = ALLOCS.write().unwrap_or_else(|p| p.into_inner());
    let id = NEXT_ALLOC.fetch_add(1, Ordering::Relaxed);
    t.insert(ptr, Allocation { len, id });
    BY_ID
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id, (ptr, len));
    (id, crate::trace::next_seq())
}

/// Forgets an allocation before it is freed; returns (id, size) and the record's sequence number.
pub fn unregister_alloc(ptr: u64) -> (Option<(u64, u64)>, u64) {
    let mut t = ALLOCS.write().unwrap_or_else(|p| p.into_inner());
    let a = t.remove(&ptr).map(|a| (a.id, a.len));
    if let Some((id, _)) = a {
        BY_ID.write().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }
    (a, crate::trace::next_seq())
}

/// The allocations [ptr, ptr + bytes) falls in, as touches.
pub fn touches(ptr: u64, bytes: u64, access: Access) -> Vec<Touch> {
    let t = ALLOCS.read().unwrap_or_else(|p| p.into_inner());
    let mut out = Vec::new();
    let end = ptr.saturating_add(bytes.max(1));
    // The allocation containing ptr, then any that start inside the range.
    if let Some((&s, a)) = t.range(..=ptr).next_back()
        && ptr < s + a.len
    {
        out.push(Touch {
            alloc: a.id,
            offset: ptr - s,
            bytes: (s + a.len).min(end) - ptr,
            access,
        });
    }
    for (&s, a) in t.range(ptr.saturating_add(1)..end) {
        out.push(Touch {
            alloc: a.id,
            offset: 0,
            bytes: (s + a.len).min(end) - s,
            access,
        });
    }
    out
}

/// The allocation a single pointer value points into, if any.
pub fn points_into(v: u64) -> Option<(u64, u64)> {
    let t = ALLOCS.read().unwrap_or_else(|p| p.into_inner());
    t.range(..=v)
        .next_back()
        .filter(|(s, a)| v < **s + a.len)
        .map(|(s, a)| (a.id, v - s))
}

/// (pointer, size) of a live allocation by id.
pub fn allocation(id: u64) -> Option<(u64, u64)> {
    BY_ID
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&id)
        .copied()
}
