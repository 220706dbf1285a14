//! The trace writer: records go through a bounded channel to one thread that writes JSON lines,
//! flushing every 100 ms, on request, at exit and before `_exit`.

use planner::trace::{Event, Record, SCHEMA_VERSION};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

enum Msg {
    Record(Box<Record>),
    Flush(SyncSender<()>),
}

static TX: OnceLock<Mutex<Option<SyncSender<Msg>>>> = OnceLock::new();
static SEQ: AtomicU64 = AtomicU64::new(1);
static ON: AtomicBool = AtomicBool::new(false);

pub fn next_seq() -> u64 {
    SEQ.fetch_add(1, Ordering::Relaxed)
}

pub fn enabled() -> bool {
    ON.load(Ordering::Acquire)
}

pub fn start(path: &str, policy: &str) -> std::io::Result<()> {
    let file = std::fs::File::create(path)?;
    let (tx, rx) = sync_channel::<Msg>(1 << 14);
    std::thread::Builder::new()
        .name("marmoset-trace".into())
        .spawn(move || writer(file, rx))?;
    let _ = TX.set(Mutex::new(Some(tx)));
    ON.store(true, Ordering::Release);
    // SAFETY: registering a plain extern "C" function with atexit.
    unsafe { libc::atexit(flush_at_exit) };
    send(Record {
        seq: 0,
        t_ns: crate::state::now_ns(),
        tid: crate::state::tid(),
        event: Event::Header {
            schema: SCHEMA_VERSION,
            // SAFETY: getpid has no preconditions.
            pid: unsafe { libc::getpid() } as u32,
            policy: policy.into(),
            marmoset: env!("CARGO_PKG_VERSION").into(),
        },
    });
    Ok(())
}

fn writer(file: std::fs::File, rx: Receiver<Msg>) {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, file);
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Msg::Record(r)) => {
                if serde_json::to_writer(&mut out, &*r).is_ok() {
                    let _ = out.write_all(b"\n");
                }
            }
            Ok(Msg::Flush(reply)) => {
                let _ = out.flush();
                let _ = reply.send(());
            }
            Err(RecvTimeoutError::Timeout) => {
                let _ = out.flush();
            }
            Err(RecvTimeoutError::Disconnected) => {
                let _ = out.flush();
                return;
            }
        }
    }
}

fn sender() -> Option<SyncSender<Msg>> {
    TX.get()?.lock().ok()?.clone()
}

fn send(r: Record) {
    if let Some(tx) = sender() {
        // Blocks when the writer is behind: a bounded channel, nothing dropped.
        let _ = tx.send(Msg::Record(Box::new(r)));
    }
}

/// Writes an event with a new sequence number.
pub fn emit(event: Event) {
    emit_seq(next_seq(), event);
}

/// Writes an event with a sequence number taken earlier (allocations and frees).
pub fn emit_seq(seq: u64, event: Event) {
    if !enabled() {
        return;
    }
    send(Record {
        seq,
        t_ns: crate::state::now_ns(),
        tid: crate::state::tid(),
        event,
    });
}

/// Waits (up to 2 s) until everything sent so far is on disk.
pub fn flush() {
    let Some(tx) = sender() else { return };
    let (rtx, rrx) = sync_channel(1);
    if tx.send(Msg::Flush(rtx)).is_ok() {
        let _ = rrx.recv_timeout(Duration::from_secs(2));
    }
}

extern "C" fn flush_at_exit() {
    crate::timing::drain(true);
    flush();
}

/// In a forked child the writer thread does not exist; drop the sender without using it.
pub fn forget_after_fork() {
    ON.store(false, Ordering::Release);
    if let Some(m) = TX.get()
        && let Ok(mut g) = m.try_lock()
    {
        std::mem::forget(g.take());
    }
}
