//! Lent memory: device memory that Marmoset's own layers borrow while the budget has it spare
//! (a convolution's workspace under the joint plan, `microbatch::joint`).
//!
//! The rules: a loan is made only from memory free within the budget now, or, where the
//! borrower must have it, by making room like any allocation. It counts in the budget while it
//! is out. The allocator takes every loan back, before it evicts or drops any tensor, whenever
//! it needs room; a loan is taken back only while no call pins it, and its memory is released
//! once the work issued on the streams that used it is done (stream-ordered, as a free). The
//! borrower pins the loan for each use (naming the stream the use is issued on) and unpins it
//! once the use is issued; a pin that fails says the loan was taken back.

use super::{Manager, Place, active, with, with_room};

impl Manager {
    /// Gives back every loan no call pins (their release queued behind their streams' work).
    pub(super) fn take_back_lent(&mut self) {
        let back: Vec<u64> = self
            .tensors
            .iter()
            .filter(|(_, t)| t.lent && t.pins == 0)
            .map(|(va, _)| *va)
            .collect();
        for va in back {
            let _ = self.free(va, None);
        }
    }
}

/// The bytes free within the budget now, after the releases already done (None: memory is
/// not managed).
pub fn spare() -> Option<u64> {
    if !active() {
        return None;
    }
    with(|m| {
        m.reclaim(false);
        m.budget.saturating_sub(m.used)
    })
}

/// Lends `bytes` of device memory: only from spare memory unless `make_room`, when room is made
/// as for any allocation. None: not managed, or not to be had.
pub fn lend(bytes: usize, make_room: bool) -> Option<u64> {
    if !active() || bytes == 0 {
        return None;
    }
    let lent = |m: &mut Manager| {
        let va = m.alloc(bytes as u64, true)?;
        if let Some(t) = m.tensors.get_mut(&va) {
            t.lent = true;
        }
        Ok(va)
    };
    if make_room {
        return with_room(lent).and_then(Result::ok);
    }
    with(|m| {
        m.reclaim(false);
        let mapped = (bytes as u64).div_ceil(m.gran) * m.gran;
        if m.used + mapped > m.budget {
            return None;
        }
        lent(m).ok()
    })
    .flatten()
}

/// Pins a loan of at least `bytes` for a use about to be issued on `stream`: false when it was
/// taken back (or is not a loan, or a smaller one now has its address). Its release waits for
/// the work issued on `stream` from now on.
pub fn pin_lent(va: u64, bytes: u64, stream: u64) -> bool {
    with(|m| match m.tensors.get_mut(&va) {
        Some(t) if t.lent && t.size >= bytes && matches!(t.place, Place::Resident(_)) => {
            t.pins += 1;
            t.streams.insert(stream);
            true
        }
        _ => false,
    })
    .unwrap_or(false)
}

/// Ends a pin of [`pin_lent`], once the use is issued on its stream.
pub fn unpin_lent(va: u64) {
    with(|m| {
        if let Some(t) = m.tensors.get_mut(&va)
            && t.lent
        {
            t.pins = t.pins.saturating_sub(1);
        }
    });
}
