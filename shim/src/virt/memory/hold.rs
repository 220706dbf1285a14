//! Holds: how host threads and streams order evictions.
//!
//! A call's operands are made resident under the manager's lock, but the call itself is issued
//! after the lock is released (no lock is held across a forwarded call). Until the call is on
//! its stream, no event recorded on that stream follows it, so an eviction ordered "after the
//! tensor's work" by events would not wait for it. The rule: the tensors a call touches are
//! *held* from the moment they are all resident until the call has been issued on its stream;
//! a held tensor is never a victim, of any thread. Once the call is issued, later evictions
//! wait for it by event on its stream, as for any work.
//!
//! A thread that cannot make room because other threads hold what it would evict waits for
//! those holds to end (they last only while a call is being issued) and tries again, holding
//! nothing itself while it waits, so two threads never wait on each other. Operands made
//! resident before the wait may be evicted by others meanwhile; the next try brings them back.

use super::{Manager, OUT_OF_MEMORY, manager};
use crate::core::config::Level;
use crate::core::state::log;
use std::cell::Cell;
use std::ffi::c_int;
use std::sync::Condvar;
use std::time::{Duration, Instant};

/// Signalled whenever a hold ends.
static RELEASED: Condvar = Condvar::new();

/// How long a thread waits, in all, for other threads' holds before its allocation or call
/// fails with out-of-memory: holds last while a call is issued, so a wait this long means a
/// hold was never released.
const PATIENCE: Duration = Duration::from_secs(10);

thread_local! {
    /// Tensors this thread holds now.
    static HELD: Cell<usize> = const { Cell::new(0) };
}

/// The tensors of one call, held resident until the call has been issued (dropped then).
#[must_use = "the operands stay held only while the Hold lives"]
pub struct Hold {
    vas: Vec<u64>,
}

impl Hold {
    /// Holds nothing (a call with no managed operands).
    pub fn none() -> Hold {
        Hold { vas: Vec::new() }
    }

    /// Holds `vas` (all resident now, under the lock `m` came from).
    pub(super) fn take(m: &mut Manager, vas: Vec<u64>) -> Hold {
        for va in &vas {
            if let Some(t) = m.tensors.get_mut(va) {
                t.pins += 1;
            }
        }
        HELD.with(|h| h.set(h.get() + vas.len()));
        Hold { vas }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.vas.is_empty() {
            return;
        }
        if let Some(mut g) = manager()
            && let Some(m) = g.as_mut()
        {
            for va in &self.vas {
                // Gone if the program freed it meanwhile (or its address went to another tensor,
                // which then holds nothing: saturating).
                if let Some(t) = m.tensors.get_mut(va) {
                    t.pins = t.pins.saturating_sub(1);
                }
            }
        }
        HELD.with(|h| h.set(h.get().saturating_sub(self.vas.len())));
        RELEASED.notify_all();
    }
}

impl Manager {
    /// Whether any tensor is held (by a call of another thread, when this thread holds none).
    fn held_elsewhere(&self) -> bool {
        HELD.with(|h| h.get()) == 0 && self.tensors.values().any(|t| t.pins > 0)
    }
}

/// Runs `f` on the manager; where it fails for room that other threads' holds keep, waits for
/// a hold to end and runs it again. The message of a final out-of-memory is logged once.
pub(super) fn with_room<R>(
    mut f: impl FnMut(&mut Manager) -> Result<R, c_int>,
) -> Option<Result<R, c_int>> {
    let start = Instant::now();
    let mut g = manager()?;
    if g.is_none() {
        *g = Some(Manager::new()?);
    }
    loop {
        let m = g.as_mut()?;
        m.oom = None;
        let r = f(m);
        let waited = start.elapsed();
        match r {
            Err(OUT_OF_MEMORY) if m.held_elsewhere() && waited < PATIENCE => {
                g = RELEASED.wait_timeout(g, Duration::from_millis(20)).ok()?.0;
            }
            r => {
                if r.is_err()
                    && let Some((level, why)) = m.oom.take()
                {
                    let why = if m.held_elsewhere() {
                        format!(
                            "{why}; other threads' calls held the rest for {:.1} s",
                            waited.as_secs_f64()
                        )
                    } else {
                        why
                    };
                    log(level, &why);
                }
                return Some(r);
            }
        }
    }
}

/// The level and message of an out-of-memory, said by [`with_room`] once it is final.
pub(super) fn oom(m: &mut Manager, level: Level, why: String) {
    m.oom = Some((level, why));
}
