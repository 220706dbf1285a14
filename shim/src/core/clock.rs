//! The clock records are stamped with: nanoseconds since Marmoset started, and the thread.

use std::sync::OnceLock;
use std::time::Instant;

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Starts the clock (the first call does; later ones change nothing).
pub fn start() {
    EPOCH.get_or_init(Instant::now);
}

pub fn now_ns() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

pub fn tid() -> u64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u64 }
}
