//! The bus: every record a hook, or Marmoset's own work, publishes goes to the listeners
//! attached at start-up, on the publishing thread: the observers in the order attached (the
//! tracker), then the sink, which keeps the record (the trace writer). A listener takes the
//! record and returns; it never calls back into the hook path. Sequence numbers order the records of all threads: an allocation and a free take
//! theirs under the registry's lock, so a free always precedes the next allocation at its
//! address.

use planner::trace::{Event, Record};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// An observer: sees each record once.
pub type Observer = fn(&Record);
/// The sink: keeps each record.
pub type Sink = fn(Record);

struct Listeners {
    observers: Box<[Observer]>,
    sink: Option<Sink>,
    flushers: Box<[fn()]>,
}

static SEQ: AtomicU64 = AtomicU64::new(1);
static LISTENERS: OnceLock<Listeners> = OnceLock::new();
/// Set in a forked child: nothing is published there.
static SILENT: AtomicBool = AtomicBool::new(false);

/// Attaches the listeners, and what `flush` runs, once at start-up.
pub fn attach(observers: Vec<Observer>, sink: Option<Sink>, flushers: Vec<fn()>) {
    let _ = LISTENERS.set(Listeners {
        observers: observers.into_boxed_slice(),
        sink,
        flushers: flushers.into_boxed_slice(),
    });
}

fn listeners() -> Option<&'static Listeners> {
    if SILENT.load(Ordering::Acquire) {
        return None;
    }
    LISTENERS
        .get()
        .filter(|l| !l.observers.is_empty() || l.sink.is_some())
}

/// Whether anything listens: a record is worth describing.
pub fn listening() -> bool {
    listeners().is_some()
}

pub fn next_seq() -> u64 {
    SEQ.fetch_add(1, Ordering::Relaxed)
}

/// Publishes an event with a new sequence number.
pub fn emit(event: Event) {
    publish(next_seq(), event);
}

/// Publishes an event with a sequence number taken earlier (allocations and frees).
pub fn publish(seq: u64, event: Event) {
    let Some(ls) = listeners() else { return };
    let r = Record {
        seq,
        t_ns: super::clock::now_ns(),
        tid: super::clock::tid(),
        event,
    };
    for o in &ls.observers {
        o(&r);
    }
    if let Some(sink) = ls.sink {
        sink(r);
    }
}

/// Runs the flushers attached at start-up (the trace writer's: everything published so far on
/// disk).
pub fn flush() {
    if let Some(ls) = listeners() {
        for f in &ls.flushers {
            f();
        }
    }
}

/// In a forked child: nothing more is published or flushed.
pub fn silence() {
    SILENT.store(true, Ordering::Release);
}
