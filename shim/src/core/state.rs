//! Process state: whether Marmoset is on, its start, the re-entrancy guard, and logging.

use super::config::{self, Config, Level};
use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Once, OnceLock};

const IDLE: u8 = 0;
const ACTIVE: u8 = 1;
const PASS_THROUGH: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(IDLE);
static START: Once = Once::new();
static CONFIG: OnceLock<Config> = OnceLock::new();
/// What starts the layers above at the first call (attached by the library's constructor):
/// Err is the line that says why Marmoset cannot run, and calls then pass through.
static STARTER: OnceLock<Starter> = OnceLock::new();

/// Starts the layers above the core: Err is why Marmoset cannot run.
pub type Starter = fn(&Config) -> Result<(), String>;

/// Sets what starts the layers above the core at the first call.
pub fn on_start(f: Starter) {
    let _ = STARTER.set(f);
}
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
    super::clock::start();
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
    if let Some(Err(why)) = STARTER.get().map(|f| f(c)) {
        eprintln!("marmoset: {why}; Marmoset passes every call through");
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
        super::bus::flush();
    }
}

/// After fork the child passes everything through: it has no listeners' threads.
pub fn after_fork_in_child() {
    STATE.store(PASS_THROUGH, Ordering::Release);
    super::bus::silence();
}

/// Whether a message at `level` is written: a caller on a hot path asks before it formats one.
pub fn logs(level: Level) -> bool {
    level <= config().log
}

pub fn log(level: Level, msg: &str) {
    if logs(level) {
        eprintln!("marmoset: {msg}");
    }
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
