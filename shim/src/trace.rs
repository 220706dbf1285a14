//! The trace writer: records go through a bounded channel to one thread that writes JSON lines,
//! flushing every 100 ms, on request, at exit and before `_exit`. The file only ever ends with a
//! whole record: a write that fails is said once and ends tracing there.

use planner::trace::{Event, Record, SCHEMA_VERSION};
use std::io::{Seek, Write};
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
        .spawn({
            let path = path.to_string();
            move || writer(Out::new(path, file), rx)
        })?;
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

/// The trace file: whole records only. A failed write (a full disk) is said once at warn, the
/// file is cut back to the last whole record, and tracing stops; the program goes on.
struct Out {
    path: String,
    file: std::fs::File,
    /// Whole records not yet written, each ending with its newline.
    buf: Vec<u8>,
    /// Bytes in the file, all of them whole records, and how many records.
    written: u64,
    records: u64,
    failed: bool,
}

impl Out {
    fn new(path: String, file: std::fs::File) -> Out {
        Out {
            path,
            file,
            buf: Vec::with_capacity(1 << 16),
            written: 0,
            records: 0,
            failed: false,
        }
    }

    fn push(&mut self, r: &Record) {
        if self.failed {
            return;
        }
        let at = self.buf.len();
        if serde_json::to_writer(&mut self.buf, r).is_ok() {
            self.buf.push(b'\n');
        } else {
            self.buf.truncate(at);
        }
        if self.buf.len() >= 1 << 16 {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.failed || self.buf.is_empty() {
            return;
        }
        let mut done = 0;
        while done < self.buf.len() {
            match self.file.write(&self.buf[done..]) {
                Ok(0) => return self.fail(done, std::io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return self.fail(done, e),
            }
        }
        self.written += done as u64;
        self.records += self.buf.iter().filter(|&&b| b == b'\n').count() as u64;
        self.buf.clear();
    }

    /// `done` bytes of the buffer reached the file before `e`.
    fn fail(&mut self, done: usize, e: std::io::Error) {
        let whole = self.buf[..done]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        self.records += self.buf[..whole].iter().filter(|&&b| b == b'\n').count() as u64;
        self.written += whole as u64;
        // Cut the record that was half written (not possible on every file, /dev/full), then
        // say so in the file if it still takes one short line (the end of a block often does),
        // so readers know the trace was cut (planner::trace::read_with_cut).
        if done > whole {
            let _ = self.file.set_len(self.written);
        }
        // Where a size limit leaves no room for the mark, give back the last records of this
        // buffer, one at a time (8 at most): a trace that says it was cut is worth more than its
        // last records, since readers could not tell it from a trace that simply ended.
        let base = self.written - whole as u64;
        let mut starts: Vec<u64> = std::iter::once(0)
            .chain(
                self.buf[..whole]
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| **b == b'\n')
                    .map(|(i, _)| i as u64 + 1),
            )
            .filter(|&i| i < whole as u64)
            .collect();
        for _ in 0..9 {
            let mark =
                serde_json::json!({"trace_cut": {"records": self.records, "error": e.to_string()}});
            let line = format!("{mark}\n");
            if self
                .file
                .seek(std::io::SeekFrom::Start(self.written))
                .is_ok()
                && self.file.write_all(line.as_bytes()).is_ok()
            {
                break;
            }
            let _ = self.file.set_len(self.written);
            let Some(start) = starts.pop() else { break };
            self.written = base + start;
            self.records = self.records.saturating_sub(1);
            let _ = self.file.set_len(self.written);
        }
        self.failed = true;
        self.buf = Vec::new();
        ON.store(false, Ordering::Release);
        crate::state::log(
            crate::config::Level::Warn,
            &format!(
                "writing the trace {} failed ({e}); tracing stops after {} whole records, the program goes on",
                self.path, self.records
            ),
        );
    }
}

fn writer(mut out: Out, rx: Receiver<Msg>) {
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Msg::Record(r)) => out.push(&r),
            Ok(Msg::Flush(reply)) => {
                out.flush();
                let _ = reply.send(());
            }
            Err(RecvTimeoutError::Timeout) => out.flush(),
            Err(RecvTimeoutError::Disconnected) => {
                out.flush();
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
    let tracked = crate::runtime::tracker::enabled();
    if !enabled() && !tracked {
        return;
    }
    let r = Record {
        seq,
        t_ns: crate::state::now_ns(),
        tid: crate::state::tid(),
        event,
    };
    // The tracker sees every record, written to a file or not.
    if tracked {
        crate::runtime::tracker::observe(&r);
    }
    if enabled() {
        send(r);
    }
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
    crate::memory::settle();
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
