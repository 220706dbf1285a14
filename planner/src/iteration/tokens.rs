//! Calls as tokens: each call of the stream hashed by what it is (kind, API, sizes, shapes,
//! kernel, roles), never by an address or an allocation id, which change between iterations.

use crate::trace::{Access, Event, Record};
use std::collections::HashMap;

/// What a call does to the allocation table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Alloc {
        id: u64,
        size: u64,
    },
    Free {
        id: u64,
    },
    /// Computes, copies, sets, synchronises or plans.
    Use,
}

/// One call of the stream, as iteration detection sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The record's sequence number.
    pub seq: u64,
    /// What the call is, without addresses or ids ([`token`]).
    pub token: u64,
    pub effect: Effect,
    /// The allocations it touches, in the record's order.
    pub touches: Vec<u64>,
    /// Whether `touches` are inferred (a kernel's parameter words that point into an
    /// allocation), not named by the API: a word may be stale, so they identify nothing.
    pub inferred: bool,
}

/// FNV-1a over 64-bit words: stable across runs and builds (a plan may outlive a process).
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn word(&mut self, w: u64) {
        for b in w.to_le_bytes() {
            self.0 ^= b as u64;
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn str(&mut self, s: &str) {
        self.word(s.len() as u64);
        for b in s.bytes() {
            self.word(b as u64);
        }
    }
}

fn access_code(a: Access) -> u64 {
    match a {
        Access::R => 1,
        Access::W => 2,
        Access::Rw => 3,
    }
}

/// Whether a record is a call of the stream an iteration repeats: an API call, but for the free
/// of a pooled allocation. Such a free orders nothing a plan does (no plan moves a pooled
/// allocation), and a framework may make it from another thread (TensorFlow frees a small
/// result read back to the host from the thread that sees its copy complete), so that its
/// place among the calls of the thread running the step changes from one step to the next.
/// Its allocation's lifetime ends at the next call.
pub fn is_call(event: &Event) -> bool {
    event.api().is_some() && !matches!(event, Event::Free { pooled: true, .. })
}

/// The token of a call record: its kind, API, result and everything that describes the work
/// (sizes, directions, kernel handle and geometry, cuDNN algorithm, workspace and tensor shapes
/// and roles; for each touch the API names, the touched allocation's size, the range and the
/// access), with no pointer and no allocation id. A kernel's touches are left out: they are
/// inferred from its parameter words, and a word may hold whatever an earlier call left there
/// (PyTorch's reduction kernels take a struct whose unused pointer fields do), so the same
/// call may seem to touch another allocation from one iteration to the next. `sizes` maps
/// allocation ids to sizes. `None` for records that are not calls ([`is_call`]: header,
/// timing, evict, restore, a pooled free).
pub fn token(event: &Event, sizes: &HashMap<u64, u64>) -> Option<u64> {
    if !is_call(event) {
        return None;
    }
    let mut h = Fnv::new();
    h.str(event.kind());
    h.str(event.api()?);
    h.word(event.result() as i64 as u64);
    match event {
        Event::Alloc { size, .. } => h.word(*size),
        Event::Free { alloc, size, .. } => h.word(
            size.or_else(|| alloc.and_then(|a| sizes.get(&a).copied()))
                .unwrap_or(0),
        ),
        Event::Copy { size, dir, .. } => {
            h.word(*size);
            h.word(*dir as u64);
        }
        Event::Memset { size, .. } => h.word(*size),
        Event::Launch {
            func, grid, block, ..
        } => {
            h.word(*func);
            for d in grid.iter().chain(block) {
                h.word(*d as u64);
            }
        }
        Event::Cudnn {
            algo,
            workspace,
            tensors,
            ..
        } => {
            h.word(algo.map_or(u64::MAX, |a| a as i64 as u64));
            h.word(workspace.unwrap_or(u64::MAX));
            for t in tensors {
                h.str(&t.role);
                h.word(access_code(t.access));
                for d in t.dims.iter().chain(&t.strides) {
                    h.word(*d as u64);
                }
            }
        }
        _ => {}
    }
    let named = !matches!(event, Event::Launch { .. });
    for t in event.touches().iter().filter(|_| named) {
        h.word(sizes.get(&t.alloc).copied().unwrap_or(u64::MAX));
        h.word(t.offset);
        h.word(t.bytes);
        h.word(access_code(t.access));
    }
    Some(h.0)
}

/// A call's token as a kind of iteration knows it, from its effect and its [`token`]: a free
/// is every free, whatever it frees. Which allocation it frees is the plan's names' to check,
/// and its size is the allocation's, possibly made by the iteration before, so that a kind
/// would carry the previous iteration's shapes (a step that frees the previous batch after
/// making its own: a kind per pair of shapes). Detection keeps the sizes: where the frees of
/// a program's first steps differ from the later ones (an optimizer's state made once), they
/// show where the steady iteration begins.
pub fn kind_token(effect: &Effect, token: u64) -> u64 {
    match effect {
        Effect::Free { .. } => {
            let mut h = Fnv::new();
            h.str("free");
            h.0
        }
        _ => token,
    }
}

/// What `event` does to the allocation table.
pub fn effect(event: &Event) -> Effect {
    match *event {
        Event::Alloc {
            alloc,
            size,
            result: 0,
            ..
        } => Effect::Alloc { id: alloc, size },
        Event::Free {
            alloc: Some(id),
            result: 0,
            ..
        } => Effect::Free { id },
        _ => Effect::Use,
    }
}

/// The calls of a trace (sorted by `seq`, as [`crate::trace::read`] returns them), tokenised.
pub fn calls(records: &[Record]) -> Vec<Call> {
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    let mut out = Vec::new();
    for r in records {
        if let Event::Alloc {
            alloc,
            size,
            result: 0,
            ..
        } = r.event
        {
            sizes.insert(alloc, size);
        }
        let Some(token) = token(&r.event, &sizes) else {
            continue;
        };
        out.push(Call {
            seq: r.seq,
            token,
            effect: effect(&r.event),
            touches: r.event.touches().iter().map(|t| t.alloc).collect(),
            inferred: matches!(r.event, Event::Launch { .. }),
        });
    }
    out
}
