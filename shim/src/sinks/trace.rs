//! The trace writer: records go through a bounded channel to one thread that writes JSON lines,
//! flushing every 100 ms, on request, at exit and before `_exit`. The file only ever ends with a
//! whole record: a write that fails is said once and ends tracing there. Each process of a run
//! writes a file of its own ([`open_own`]), and only the process that opened it.

use planner::trace::{Event, Record, SCHEMA_VERSION};
use std::io::{Seek, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

enum Msg {
    Record(Box<Record>),
    Flush(SyncSender<()>),
}

static TX: OnceLock<Mutex<Option<SyncSender<Msg>>>> = OnceLock::new();
static ON: AtomicBool = AtomicBool::new(false);

pub fn enabled() -> bool {
    ON.load(Ordering::Acquire)
}

/// The variable that names the run a process belongs to: `marmoset run` sets it, or the first
/// process loaded with the shim does ([`name_the_run`]); children inherit it.
const RUN_VAR: &str = "MARMOSET_RUN_ID";

/// Names the run in the environment unless a parent already did, so that every process this
/// one starts traces as another process of the same run. For the library's constructor: it
/// runs before main, on the only thread, and before a shell or interpreter copies its
/// environment.
pub fn name_the_run() {
    if std::env::var(RUN_VAR).is_ok_and(|v| !v.is_empty()) {
        return;
    }
    // SAFETY: called from the library constructor, before main, while no other thread runs.
    unsafe { std::env::set_var(RUN_VAR, planner::trace::new_run_id()) };
}

/// The descriptor of this process's trace file (-1: none), closed in a forked child.
static FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

pub fn start(path: &str, policy: &str) -> std::io::Result<()> {
    let run = std::env::var(RUN_VAR)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(planner::trace::new_run_id);
    let header = Record {
        seq: 0,
        t_ns: crate::core::clock::now_ns(),
        tid: crate::core::clock::tid(),
        event: Event::Header {
            schema: SCHEMA_VERSION,
            pid: std::process::id(),
            policy: policy.into(),
            marmoset: env!("CARGO_PKG_VERSION").into(),
            run: Some(run.clone()),
            rank: std::env::var("RANK").ok().and_then(|r| r.parse().ok()),
        },
    };
    let mut line = serde_json::to_vec(&header).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let base = std::path::Path::new(path);
    let (file, at, header_written) = open_own(base, &run, &line)?;
    if at != base {
        crate::core::state::log(
            crate::core::config::Level::Info,
            &format!(
                "this process traces to {} ({path} is another process's trace)",
                at.display()
            ),
        );
    }
    {
        use std::os::fd::AsRawFd;
        FD.store(file.as_raw_fd(), Ordering::Release);
    }
    let mut out = Out::new(at.display().to_string(), file);
    if header_written {
        out.written = line.len() as u64;
        out.records = 1;
    }
    let (tx, rx) = sync_channel::<Msg>(1 << 14);
    std::thread::Builder::new()
        .name("marmoset-trace".into())
        .spawn(move || writer(out, rx))?;
    let _ = TX.set(Mutex::new(Some(tx)));
    ON.store(true, Ordering::Release);
    if !header_written {
        send(header);
    }
    Ok(())
}

/// What opening one name for this process's trace found.
enum Claim {
    /// A regular file now this process's, its header written, locked while the process lives.
    Ours(std::fs::File),
    /// A character device (`/dev/null`, `/dev/full`): every process of the run writes to it.
    Device(std::fs::File),
    /// Held by a live process, or already a trace of this run.
    Taken,
}

/// Opens this process's trace and says whether its header (`header`, one line) is written:
/// `base` when no live process holds it and it is not already a trace of this run (a trace of
/// an earlier run is replaced), else the first free name beside it (`t.rank<R>.jsonl` when RANK
/// is set, then `t.<pid>.jsonl`; planner::trace::sibling_path). Never blocks: a FIFO or any
/// other special file but a character device is refused (opening a FIFO without a reader
/// would wait for one), and locks are only tried.
fn open_own(
    base: &std::path::Path,
    run: &str,
    header: &[u8],
) -> std::io::Result<(std::fs::File, std::path::PathBuf, bool)> {
    match claim(base, run, header)? {
        Claim::Ours(f) => return Ok((f, base.to_path_buf(), true)),
        Claim::Device(f) => return Ok((f, base.to_path_buf(), false)),
        Claim::Taken => {}
    }
    let pid = std::process::id();
    let rank = std::env::var("RANK")
        .ok()
        .filter(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()));
    let tags = rank
        .map(|r| format!("rank{r}"))
        .into_iter()
        .chain(std::iter::once(pid.to_string()))
        // A pid used again within one run (a long run of short processes).
        .chain((2..=9).map(|n| format!("{pid}-{n}")));
    for tag in tags {
        let p = planner::trace::sibling_path(base, &tag);
        if let Claim::Ours(f) = claim(&p, run, header)? {
            return Ok((f, p, true));
        }
    }
    Err(std::io::Error::other(
        "every name beside it for this process's trace is taken",
    ))
}

fn claim(path: &std::path::Path, run: &str, header: &[u8]) -> std::io::Result<Claim> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
    // O_NONBLOCK: the open never waits (a FIFO without a reader would); it changes nothing for
    // a regular file.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o666)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if kind.is_char_device() {
        // Writes to a terminal wait as they would for the program's own output.
        // SAFETY: fcntl on a descriptor this function owns.
        unsafe {
            let fd = file.as_raw_fd();
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
            }
        }
        return Ok(Claim::Device(file));
    }
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_block_device() {
            "a block device"
        } else {
            "not a file"
        };
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{what}, not a regular file"),
        ));
    }
    // The lock is this process's for as long as it lives (the file is not closed), so a
    // process of another run never takes a file that is being written. A file system without
    // flock goes on unlocked.
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::WouldBlock {
            return Ok(Claim::Taken);
        }
    }
    let mut first = [0u8; 4096];
    let n = file.read_at(&mut first, 0)?;
    if planner::trace::run_in_header(&first[..n]).as_deref() == Some(run) {
        return Ok(Claim::Taken);
    }
    file.set_len(0)?;
    (&file).write_all(header)?;
    Ok(Claim::Ours(file))
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
        crate::core::state::log(
            crate::core::config::Level::Warn,
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

/// The bus's sink: the record goes to the writer thread while tracing is on.
pub fn record(r: Record) {
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

/// In a forked child the writer thread does not exist; drop the sender without using it, and
/// close the child's copy of the trace file, so that nothing the child does reaches the parent's
/// trace and the parent's lock ends with the parent.
pub fn forget_after_fork() {
    ON.store(false, Ordering::Release);
    let fd = FD.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: close is async-signal-safe; the descriptor is the child's copy of the trace's,
        // which nothing in the child uses (the writer thread that owns it exists only in the
        // parent).
        unsafe { libc::close(fd) };
    }
    if let Some(m) = TX.get()
        && let Ok(mut g) = m.try_lock()
    {
        std::mem::forget(g.take());
    }
}
