//! The devices a process sees: `SIMGPU_DEVICES` simulated GPUs of one profile (1 unless set),
//! filtered and renumbered by `CUDA_VISIBLE_DEVICES` as the driver does, and which of them the
//! process works on.
//!
//! Each process models the memory, engines and clock of one device: the first device it
//! allocates memory on (its *working device*). That is how data-parallel programs use a machine
//! (torchrun starts one process per GPU); a process that allocates on a second device gets
//! CUDA_ERROR_NOT_SUPPORTED with a message, never memory the model does not count. Every visible
//! device answers the queries (name, attributes, UUID, PCI location, contexts).

use crate::CUresult;
use crate::context::{INVALID_DEVICE, NOT_SUPPORTED};
use std::cell::Cell;
use std::ffi::c_int;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicI32, Ordering};

/// At most this many simulated devices in a machine.
pub const MAX_DEVICES: u32 = 16;

/// The machine's device count, and the visible devices' physical indices in ordinal order.
static MACHINE: LazyLock<(u32, Vec<u32>)> = LazyLock::new(|| {
    let env = |n: &str| std::env::var(n).ok();
    let devices = env("SIMGPU_DEVICES");
    match visible(devices.as_deref(), env("CUDA_VISIBLE_DEVICES").as_deref()) {
        Ok(v) => (devices.and_then(|n| n.trim().parse().ok()).unwrap_or(1), v),
        Err(e) => {
            eprintln!("simgpu: {e}; the machine has one simulated device");
            (1, vec![0])
        }
    }
});
static VISIBLE: LazyLock<&'static [u32]> = LazyLock::new(|| &MACHINE.1);

/// The visible devices from `SIMGPU_DEVICES` (the machine's count) and `CUDA_VISIBLE_DEVICES`.
/// As the driver does, the visible list is cut at its first entry that is not a device of the
/// machine (out of range, repeated, or not an index), and an empty list hides every device.
pub fn visible(devices: Option<&str>, filter: Option<&str>) -> Result<Vec<u32>, String> {
    let n = match devices.map(str::trim).filter(|s| !s.is_empty()) {
        None => 1,
        Some(s) => match s.parse::<u32>() {
            Ok(n) if (1..=MAX_DEVICES).contains(&n) => n,
            _ => {
                return Err(format!(
                    "SIMGPU_DEVICES={s:?}: accepted is a device count from 1 to {MAX_DEVICES}"
                ));
            }
        },
    };
    let Some(filter) = filter else {
        return Ok((0..n).collect());
    };
    let mut out = Vec::new();
    for entry in filter.split(',') {
        match entry.trim().parse::<u32>() {
            Ok(p) if p < n && !out.contains(&p) => out.push(p),
            _ => break,
        }
    }
    Ok(out)
}

/// How many devices the process sees.
pub fn count() -> c_int {
    VISIBLE.len() as c_int
}

/// The physical index of ordinal `dev`, or CUDA_ERROR_INVALID_DEVICE.
pub fn physical(dev: c_int) -> Result<u32, CUresult> {
    usize::try_from(dev)
        .ok()
        .and_then(|i| VISIBLE.get(i).copied())
        .ok_or(INVALID_DEVICE)
}

/// The device the process works on (-1 before its first allocation).
static WORKING: AtomicI32 = AtomicI32::new(-1);

thread_local! {
    /// The ordinal of the context current on this thread (None: never set).
    static CURRENT: Cell<Option<c_int>> = const { Cell::new(None) };
}

/// Whether the machine has several devices (its files are then named per device).
pub fn several() -> bool {
    MACHINE.0 > 1
}

/// Where the process's report (SIMGPU_REPORT) goes: the path as given on a machine of one
/// device; on a machine of several, one report per device, named by the working device's index
/// in the machine (`report.json` -> `report.dev1.json`), and none before the process works on a
/// device.
pub fn report_path(base: &str) -> Option<String> {
    if MACHINE.0 <= 1 {
        return Some(base.to_string());
    }
    let w = WORKING.load(Ordering::Relaxed);
    let physical = physical(w).ok()?;
    Some(simgpu_model::per_device_report(base, physical))
}

/// The device the process works on, or 0 before its first allocation.
pub fn working() -> c_int {
    WORKING.load(Ordering::Relaxed).max(0)
}

/// The ordinal of the thread's current context: the one it set, else the working device, else 0.
pub fn current() -> c_int {
    CURRENT
        .with(Cell::get)
        .unwrap_or_else(|| WORKING.load(Ordering::Relaxed).max(0))
}

/// Whether a context is current on this thread.
pub fn bound() -> bool {
    CURRENT.with(Cell::get).is_some()
}

/// What a library's own runtime does at its first call on a thread with no context current:
/// binds the primary context of the runtime's default device (ordinal 0).
pub fn bind_as_runtime() {
    CURRENT.with(|c| {
        if c.get().is_none() {
            c.set(Some(0));
        }
    });
}

/// Leaves this thread with no context current.
pub fn unbind() {
    CURRENT.with(|c| c.set(None));
}

/// Makes ordinal `dev`'s context current on this thread.
pub fn set_current(dev: c_int) -> Result<(), CUresult> {
    physical(dev)?;
    CURRENT.with(|c| c.set(Some(dev)));
    Ok(())
}

/// The handle of ordinal `dev`'s primary context (the simulator's only contexts).
pub fn context_handle(dev: c_int) -> usize {
    CONTEXT_BASE + dev as usize
}

/// The ordinal of a context handle, or None for a handle that is not one.
pub fn context_ordinal(handle: usize) -> Option<c_int> {
    let dev = c_int::try_from(handle.checked_sub(CONTEXT_BASE)?).ok()?;
    (dev < count()).then_some(dev)
}

const CONTEXT_BASE: usize = 0xc0de;

/// Claims the current context's device for an allocation: the first claim makes it the working
/// device; a later one on another device is refused (see the module documentation).
pub fn claim() -> Result<(), CUresult> {
    claim_device(current())
}

/// As [`claim`], for an allocation on ordinal `dev` named by the call (a VMM location).
pub fn claim_device(dev: c_int) -> Result<(), CUresult> {
    physical(dev)?;
    match WORKING.compare_exchange(-1, dev, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => Ok(()),
        Err(w) if w == dev => Ok(()),
        Err(w) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                eprintln!(
                    "simgpu: this process works on device {w} and now allocates on device {dev}: \
                     the simulated GPU models one device per process (run one process per \
                     device, as torchrun does); the allocation fails with CUDA_ERROR_NOT_SUPPORTED"
                )
            });
            Err(NOT_SUPPORTED)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_has_one_device_unless_told() {
        assert_eq!(visible(None, None), Ok(vec![0]));
        assert_eq!(visible(Some("4"), None), Ok(vec![0, 1, 2, 3]));
        assert!(visible(Some("0"), None).is_err());
        assert!(visible(Some("17"), None).is_err());
        assert!(visible(Some("two"), None).is_err());
    }

    #[test]
    fn visible_devices_are_renumbered_and_cut_at_the_first_bad_entry() {
        assert_eq!(visible(Some("4"), Some("2,0")), Ok(vec![2, 0]));
        assert_eq!(visible(Some("4"), Some("1,7,2")), Ok(vec![1]));
        assert_eq!(visible(Some("4"), Some("1,1,2")), Ok(vec![1]));
        assert_eq!(visible(Some("4"), Some("GPU-x")), Ok(vec![]));
        assert_eq!(visible(Some("2"), Some("")), Ok(vec![]));
    }

    #[test]
    fn each_device_has_its_own_report() {
        use simgpu_model::per_device_report as name;
        assert_eq!(name("/t/report.json", 1), "/t/report.dev1.json");
        assert_eq!(name("/t/report", 0), "/t/report.dev0");
        assert_eq!(name("r.json", 3), "r.dev3.json");
    }
}
