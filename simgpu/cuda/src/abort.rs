//! The report (SIMGPU_REPORT) of a process that aborts: written from a SIGABRT handler.
//!
//! A program that ends by `abort()` runs no `atexit` handler, so the report written at exit is
//! never written; PyTorch aborts so now and then after a complete run ("terminate called
//! without an active exception", docs/pytorch.md). The choice here is a handler that renders
//! the report at the moment of the abort, writes it once, and re-raises, rather than a
//! pre-rendered report refreshed at synchronisation points: the report stays exact (the work
//! issued after the last synchronisation counts) and the simulator pays nothing per call.
//!
//! What the handler does is async-signal-safe, because the abort can come from anywhere, malloc
//! included (glibc aborts on a corrupt heap with its arena locked), and from a thread that
//! holds the device's lock:
//! - no allocation: the path is a C string and the buffer 64 KiB, both made when the handler is
//!   installed; the report is formatted into the buffer with `core::fmt` (integers, floats and
//!   strings format in place: `Device::write_report`);
//! - the device's lock is only tried, never waited on, and for at most 200 ms (`nanosleep`
//!   between tries): the thread that aborted may hold it, and then there is no report; a
//!   state another thread is changing is never read;
//! - the file is written with `open`, `write` and `close`, and `SIMGPU_TIMELINE`'s buffered
//!   lines are flushed the same way (`write`);
//! - the handler runs once per process (a flag), in the process that installed it (a child
//!   forked without exec has a copy of the device, not the device), and then puts the previous
//!   disposition back and raises SIGABRT again, which is delivered when the handler returns: the
//!   process ends as it would have (killed by SIGABRT, or through the program's own handler).
//!
//! Where no handler can run (SIGKILL), `marmoset run --sim` says after the program that the
//! report was not written.

use crate::device::Device;
use std::ffi::CString;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, TryLockError};

/// What the handler needs, made when it is installed.
struct Armed {
    device: &'static Mutex<Device>,
    path: CString,
    /// The buffer the report is formatted into (only the handler takes it, once).
    buf: Mutex<Box<[u8]>>,
    /// The process that installed the handler.
    pid: libc::pid_t,
    /// SIGABRT's disposition before this handler.
    previous: libc::sigaction,
}

static ARMED: OnceLock<Armed> = OnceLock::new();
static FIRED: AtomicBool = AtomicBool::new(false);

/// The most the report may take; the report of a torch run is about 2 KB.
const BUFFER: usize = 64 << 10;

/// Installs the handler for the device's report at `path` (once; later calls do nothing).
pub fn install(device: &'static Mutex<Device>, path: &str) {
    let Ok(path) = CString::new(path) else {
        return;
    };
    ARMED.get_or_init(|| {
        // SAFETY: a zeroed sigaction is a valid value to fill; the handler is a plain extern
        // "C" function; `previous` receives the disposition in force.
        let previous = unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_abort as *const () as usize;
            libc::sigemptyset(&mut act.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGABRT, &act, &mut previous);
            previous
        };
        Armed {
            device,
            path,
            buf: Mutex::new(vec![0u8; BUFFER].into_boxed_slice()),
            // SAFETY: getpid has no preconditions.
            pid: unsafe { libc::getpid() },
            previous,
        }
    });
}

extern "C" fn on_abort(_sig: libc::c_int) {
    if !FIRED.swap(true, Ordering::AcqRel)
        && let Some(armed) = ARMED.get()
    {
        // SAFETY: getpid is async-signal-safe.
        if unsafe { libc::getpid() } == armed.pid {
            write_report(armed);
        }
        // SAFETY: sigaction and raise are async-signal-safe; `previous` is the disposition
        // this handler replaced. SIGABRT is blocked while the handler runs, so the raised
        // signal is delivered to that disposition as the handler returns.
        unsafe {
            libc::sigaction(libc::SIGABRT, &armed.previous, std::ptr::null_mut());
            libc::raise(libc::SIGABRT);
        }
    }
}

/// Writes the report (and flushes the timeline) if the device's lock can be had within 200 ms.
fn write_report(armed: &Armed) {
    let Ok(mut buf) = armed.buf.try_lock() else {
        return;
    };
    let mut device = None;
    for _ in 0..200 {
        match armed.device.try_lock() {
            Ok(d) => device = Some(d),
            Err(TryLockError::Poisoned(p)) => device = Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => {
                let ms = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 1_000_000,
                };
                // SAFETY: nanosleep is async-signal-safe; `ms` outlives the call.
                unsafe { libc::nanosleep(&ms, std::ptr::null_mut()) };
                continue;
            }
        }
        break;
    }
    let Some(mut d) = device else {
        say(b"simgpu: aborted while the simulated device was busy: SIMGPU_REPORT is not written\n");
        return;
    };
    if let Some(w) = d.timeline.as_mut() {
        use std::io::Write;
        let _ = w.flush();
    }
    let mut out = Cursor {
        buf: &mut buf[..],
        len: 0,
    };
    if d.write_report(&mut out).is_err() {
        say(b"simgpu: the report is larger than its buffer: SIMGPU_REPORT is not written\n");
        return;
    }
    let len = out.len;
    // SAFETY: open, write and close are async-signal-safe; the path is a C string and the
    // bytes written lie within the buffer.
    unsafe {
        let fd = libc::open(
            armed.path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o644,
        );
        if fd < 0 {
            say(b"simgpu: cannot write SIMGPU_REPORT at the abort\n");
            return;
        }
        let mut done = 0;
        while done < len {
            let n = libc::write(fd, buf[done..].as_ptr().cast(), len - done);
            if n <= 0 {
                break;
            }
            done += n as usize;
        }
        libc::close(fd);
    }
}

/// One line on stderr, with `write` alone.
fn say(line: &[u8]) {
    // SAFETY: write is async-signal-safe; the bytes are a static string's.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

/// A `fmt::Write` into a fixed buffer: formatting past its end fails, nothing is allocated.
struct Cursor<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl fmt::Write for Cursor<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len.checked_add(s.len()).ok_or(fmt::Error)?;
        self.buf
            .get_mut(self.len..end)
            .ok_or(fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_formats_into_a_fixed_buffer_as_it_does_into_a_string() {
        let d = Device::for_test("h100");
        let mut buf = vec![0u8; BUFFER];
        let mut out = Cursor {
            buf: &mut buf,
            len: 0,
        };
        d.write_report(&mut out).unwrap();
        let len = out.len;
        assert_eq!(std::str::from_utf8(&buf[..len]).unwrap(), d.report_json());
        assert!(d.report_json().contains("\"virtual_time_s\""));
        // Past its end the buffer refuses, never grows.
        let mut small = [0u8; 16];
        let mut out = Cursor {
            buf: &mut small,
            len: 0,
        };
        assert!(d.write_report(&mut out).is_err());
    }
}
