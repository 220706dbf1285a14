//! Communicators: unique ids, initialisation (all ranks meet in the communicator's directory),
//! the queries, split, destroy and abort, and the clean-up of the directory.

use crate::driver::sim;
use crate::reduce::DataType;
use crate::transport::{self, Waiting};
use crate::{Fail, INVALID_USAGE, NcclResult, SUCCESS, SYSTEM_ERROR, UNHANDLED_CUDA_ERROR};
use crate::{guard, out};
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::Duration;

/// `ncclComm_t`: an opaque pointer. Ours is a key into [`COMMS`], never dereferenced.
pub type CommHandle = *mut c_void;

/// `NCCL_UNIQUE_ID_BYTES` (nccl.h): ncclUniqueId is `struct { char internal[128]; }`.
pub const UNIQUE_ID_BYTES: usize = 128;
pub type UniqueId = [u8; UNIQUE_ID_BYTES];

/// `ncclUniqueId` as C passes it by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueIdC {
    pub internal: UniqueId,
}
/// The first bytes of every unique id this library makes; 16 random bytes follow.
const ID_MAGIC: &[u8; 8] = b"SIMGNCCL";

/// `NCCL_API_MAGIC` (nccl.h): ncclConfig_t's `magic` when NCCL_CONFIG_INITIALIZER set it.
const CONFIG_MAGIC: u32 = 0xcafe_beef;
/// `NCCL_SPLIT_NOCOLOR` (nccl.h).
const SPLIT_NOCOLOR: c_int = -1;

/// A reduction operator made by ncclRedOpCreatePreMulSum.
#[derive(Debug, Clone)]
pub enum PreMul {
    /// ncclScalarHostImmediate: the scalar's bytes, read at creation.
    Host(Vec<u8>, DataType),
    /// ncclScalarDevice: the scalar's device address, read when a collective runs.
    Device(u64, DataType),
}

/// What changes as a communicator works (behind its lock).
pub struct State {
    /// The last collective sequence number handed out.
    pub coll_seq: u64,
    /// The last collective whose contributions this rank has read.
    pub done_through: u64,
    /// Per peer: the last send to it and the last receive from it, numbered as NCCL matches
    /// them (the k-th send from a to b meets the k-th receive on b from a).
    pub send_seq: Vec<u64>,
    pub recv_seq: Vec<u64>,
    /// This rank's collective messages still in the directory, oldest first.
    pub posted: VecDeque<(u64, PathBuf)>,
    pub premul: HashMap<c_int, PreMul>,
    pub next_op: c_int,
    pub splits: u64,
}

/// A communicator of this process.
pub struct Comm {
    pub dir: PathBuf,
    pub rank: usize,
    pub nranks: usize,
    pub device: c_int,
    /// Each rank's process id.
    pub pids: Vec<i32>,
    pub timeout: Duration,
    pub state: Mutex<State>,
    /// The first asynchronous error (a peer that died, a timeout), for ncclCommGetAsyncError.
    pub error: Mutex<Option<(NcclResult, String)>>,
    /// The physical memory of its connections' buffers (cuMemCreate's handle), released with it.
    pub buffers: Option<u64>,
}

impl Comm {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn waiting<'a>(&self, what: &'a str) -> Waiting<'a> {
        Waiting {
            rank: self.rank,
            what,
            timeout: self.timeout,
        }
    }

    /// Fails with the communicator's error once it has one.
    pub fn check_error(&self) -> Result<(), Fail> {
        match &*self.error.lock().unwrap_or_else(|p| p.into_inner()) {
            Some((code, msg)) => Err(Fail::new(
                *code,
                "communicator error",
                format!("the communicator failed earlier: {msg}"),
            )),
            None => Ok(()),
        }
    }

    /// Keeps `f` as the communicator's error when it is a remote error or a timeout.
    pub fn note_error(&self, f: &Fail) {
        if f.code == crate::REMOTE_ERROR || f.code == crate::TIMEOUT {
            let mut e = self.error.lock().unwrap_or_else(|p| p.into_inner());
            e.get_or_insert_with(|| (f.code, f.msg.clone()));
        }
    }
}

static COMMS: Mutex<Option<HashMap<usize, Arc<Comm>>>> = Mutex::new(None);
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(1);

fn comms() -> MutexGuard<'static, Option<HashMap<usize, Arc<Comm>>>> {
    COMMS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The communicator of a handle, or ncclInvalidArgument.
pub fn get(h: CommHandle) -> Result<Arc<Comm>, Fail> {
    if h.is_null() {
        return Err(Fail::arg("null comm", "comm is NULL"));
    }
    comms()
        .as_ref()
        .and_then(|m| m.get(&(h as usize)).cloned())
        .ok_or_else(|| {
            Fail::arg(
                "bad comm",
                format!("{h:?} is not a live communicator of this library"),
            )
        })
}

fn register(c: Comm) -> CommHandle {
    static AT_EXIT: Once = Once::new();
    AT_EXIT.call_once(|| {
        // SAFETY: registers a plain extern "C" function with no arguments.
        unsafe { libc::atexit(at_exit) };
    });
    // Handles are distinct, aligned, non-null values that no allocation hands out.
    let h = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed) << 4;
    comms()
        .get_or_insert_with(HashMap::new)
        .insert(h, Arc::new(c));
    h as CommHandle
}

extern "C" fn at_exit() {
    // A communicator the program did not destroy still leaves the directory to the last rank.
    let Ok(mut m) = COMMS.try_lock() else { return };
    if let Some(m) = m.as_mut() {
        for (_, c) in m.drain() {
            finish(&c.dir, c.rank, &c.pids);
        }
    }
}

/// This rank is done with the directory: it says so (`fin.<rank>`), and the last rank to be
/// done (every other rank said so or has ended) removes the directory. Each rank says so before
/// it looks, so at least one rank sees every other one done.
fn finish(dir: &std::path::Path, rank: usize, pids: &[i32]) {
    let _ = transport::publish(dir, &format!("fin.{rank}"), b"");
    let all_done = pids.iter().enumerate().all(|(r, &pid)| {
        r == rank || dir.join(format!("fin.{r}")).exists() || pid <= 0 || !transport::alive(pid)
    });
    if all_done {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn random_bytes(buf: &mut [u8]) -> Result<(), Fail> {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the pointer and length name the unfilled tail of buf.
        let r =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if r <= 0 {
            return Err(Fail::new(
                SYSTEM_ERROR,
                "random",
                format!("getrandom failed: {}", std::io::Error::last_os_error()),
            ));
        }
        filled += r as usize;
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGetUniqueId(id: *mut UniqueId) -> NcclResult {
    guard("ncclGetUniqueId", || {
        let mut v = [0u8; UNIQUE_ID_BYTES];
        v[..8].copy_from_slice(ID_MAGIC);
        random_bytes(&mut v[8..24])?;
        out(id, v, "uniqueId")
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The fields of ncclConfig_t this library reads (nccl.h's ncclConfig_v23100 on LP64: `size_t
/// size` at 0, `unsigned magic` at 8, `unsigned version` at 12, `int blocking` at 16).
fn check_config(config: *const u8) -> Result<(), Fail> {
    if config.is_null() {
        return Ok(());
    }
    // SAFETY: a non-null ncclConfig_t* points to at least its first 20 bytes (every version has
    // size, magic, version and blocking first); unaligned reads of plain integers.
    let magic = unsafe { config.add(8).cast::<u32>().read_unaligned() };
    if magic != CONFIG_MAGIC {
        return Err(Fail::arg(
            "config",
            "config was not initialised with NCCL_CONFIG_INITIALIZER (bad magic)",
        ));
    }
    Ok(())
}

fn init(
    newcomm: *mut CommHandle,
    nranks: c_int,
    id: &UniqueId,
    rank: c_int,
    config: *const u8,
) -> Result<(), Fail> {
    if newcomm.is_null() {
        return Err(Fail::arg("null", "newcomm is NULL"));
    }
    // SAFETY: non-null, and by contract a writable ncclComm_t*; NULL until init succeeds.
    unsafe { newcomm.write(std::ptr::null_mut()) };
    if nranks < 1 {
        return Err(Fail::arg("nranks", format!("nranks {nranks} is below 1")));
    }
    if rank < 0 || rank >= nranks {
        return Err(Fail::arg(
            "rank",
            format!("rank {rank} is not in 0..{nranks}"),
        ));
    }
    if &id[..8] != ID_MAGIC {
        return Err(Fail::arg(
            "unique id",
            "the unique id was not made by ncclGetUniqueId of this library",
        ));
    }
    check_config(config)?;
    let dir = transport::base_dir().join(format!("simgpu-nccl-{}", hex(&id[8..24])));
    let c = rendezvous(dir, rank as usize, nranks as usize)?;
    out(newcomm, register(c), "newcomm")
}

/// All ranks meet: each posts its process id, the rank count it was given and its device's PCI
/// bus id, and waits for everyone's.
fn rendezvous(dir: PathBuf, rank: usize, nranks: usize) -> Result<Comm, Fail> {
    let s = sim().map_err(|e| Fail::new(SYSTEM_ERROR, "driver", e))?;
    let timeout = transport::timeout_from_env().map_err(|e| Fail::usage("timeout", e))?;
    let cu = |what: &str, r: c_int| {
        Fail::new(
            UNHANDLED_CUDA_ERROR,
            "cuda",
            format!("{what} failed with CUresult {r}"),
        )
    };
    let device = s.device().map_err(|r| cu("cuCtxGetDevice", r))?;
    let pci = s
        .pci_bus_id(device)
        .map_err(|r| cu("cuDeviceGetPCIBusId", r))?;
    std::fs::create_dir_all(&dir).map_err(|e| {
        Fail::new(
            SYSTEM_ERROR,
            "directory",
            format!("cannot create {}: {e}", dir.display()),
        )
    })?;
    let me = std::process::id() as i32;
    let text = format!("{me} {nranks} {device} {pci}\n");
    transport::publish(&dir, &format!("init.{rank}"), text.as_bytes())?;
    let want: Vec<_> = (0..nranks)
        .filter(|&r| r != rank)
        .map(|r| (dir.join(format!("init.{r}")), r, None))
        .collect();
    let w = Waiting {
        rank,
        what: "ncclCommInitRank",
        timeout,
    };
    let got = transport::wait_all(&want, &w)?;
    let mut pids = vec![0; nranks];
    let mut pcis = vec![String::new(); nranks];
    pids[rank] = me;
    pcis[rank] = pci;
    for ((_, r, _), b) in want.iter().zip(&got) {
        let t = String::from_utf8_lossy(b);
        let f: Vec<&str> = t.split_whitespace().collect();
        let (Some(pid), Some(n), Some(bus)) = (
            f.first().and_then(|x| x.parse().ok()),
            f.get(1).and_then(|x| x.parse::<usize>().ok()),
            f.get(3),
        ) else {
            return Err(Fail::new(
                SYSTEM_ERROR,
                "rendezvous",
                format!("rank {r}'s init message is not readable"),
            ));
        };
        pids[*r] = pid;
        pcis[*r] = bus.to_string();
        if n != nranks {
            finish(&dir, rank, &pids);
            return Err(Fail::usage(
                "nranks",
                format!("rank {r} was given nranks {n}, rank {rank} nranks {nranks}"),
            ));
        }
    }
    for i in 0..nranks {
        for j in i + 1..nranks {
            if pcis[i] == pcis[j] {
                finish(&dir, rank, &pids);
                return Err(Fail::usage(
                    "duplicate gpu",
                    format!(
                        "Duplicate GPU detected : rank {i} and rank {j} both on CUDA device {} \
                         (each rank needs its own device: torch.cuda.set_device(local_rank))",
                        pcis[i]
                    ),
                ));
            }
        }
    }
    // The connections' buffers, mapped as NCCL maps them (cuMemCreate), on this rank's device.
    let buffsize = buffsize_from_env().map_err(|e| Fail::usage("NCCL_BUFFSIZE", e))?;
    let bytes = s.model.buffer_bytes(nranks as u32, buffsize);
    let buffers = if bytes > 0 {
        Some(s.mem_create(bytes as usize, device).map_err(|r| {
            finish(&dir, rank, &pids);
            cu(
                &format!("cuMemCreate of the {bytes} B of the connections' buffers"),
                r,
            )
        })?)
    } else {
        None
    };
    Ok(Comm {
        dir,
        rank,
        nranks,
        device,
        pids,
        timeout,
        buffers,
        state: Mutex::new(State {
            coll_seq: 0,
            done_through: 0,
            send_seq: vec![0; nranks],
            recv_seq: vec![0; nranks],
            posted: VecDeque::new(),
            premul: HashMap::new(),
            next_op: 5, // ncclNumOps (nccl.h): the first value of a dynamic operator.
            splits: 0,
        }),
        error: Mutex::new(None),
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommInitRank(
    newcomm: *mut CommHandle,
    nranks: c_int,
    id: UniqueIdC,
    rank: c_int,
) -> NcclResult {
    guard("ncclCommInitRank", || {
        init(newcomm, nranks, &id.internal, rank, std::ptr::null())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommInitRankConfig(
    newcomm: *mut CommHandle,
    nranks: c_int,
    id: UniqueIdC,
    rank: c_int,
    config: *const c_void,
) -> NcclResult {
    guard("ncclCommInitRankConfig", || {
        init(newcomm, nranks, &id.internal, rank, config.cast())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommInitAll(
    _comms: *mut CommHandle,
    ndev: c_int,
    _devlist: *const c_int,
) -> NcclResult {
    guard("ncclCommInitAll", || {
        Err(Fail::usage(
            "one device per process",
            format!(
                "a single process driving {ndev} devices is not simulated: each process works \
                 on one simulated device (start one process per GPU, as torchrun does, and use \
                 ncclCommInitRank)"
            ),
        ))
    })
}

fn release(h: CommHandle) -> Result<(), Fail> {
    let c = get(h)?;
    if let Some(m) = comms().as_mut() {
        m.remove(&(h as usize));
    }
    finish(&c.dir, c.rank, &c.pids);
    if let (Some(b), Ok(s)) = (c.buffers, sim()) {
        let _ = s.mem_release(b);
    }
    Ok(())
}

/// NCCL_BUFFSIZE: the bytes of one connection's buffer (its documented default 4 MiB).
fn buffsize_from_env() -> Result<u64, String> {
    match std::env::var("NCCL_BUFFSIZE")
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        None => Ok(simgpu_model::nccl::DEFAULT_BUFFSIZE),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(b) if b > 0 => Ok(b),
            _ => Err(format!("NCCL_BUFFSIZE={v:?}: a size in bytes above 0")),
        },
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommDestroy(comm: CommHandle) -> NcclResult {
    if comm.is_null() {
        // NCCL accepts destroying the NULL communicator.
        return SUCCESS;
    }
    guard("ncclCommDestroy", || release(comm))
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommAbort(comm: CommHandle) -> NcclResult {
    if comm.is_null() {
        return SUCCESS;
    }
    guard("ncclCommAbort", || release(comm))
}

/// Every operation has completed when its call returned (the host waits for its peers), so
/// there is nothing left to flush.
#[unsafe(no_mangle)]
pub extern "C" fn ncclCommFinalize(comm: CommHandle) -> NcclResult {
    guard("ncclCommFinalize", || get(comm).map(|_| ()))
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommCount(comm: CommHandle, count: *mut c_int) -> NcclResult {
    guard("ncclCommCount", || {
        out(count, get(comm)?.nranks as c_int, "count")
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommCuDevice(comm: CommHandle, device: *mut c_int) -> NcclResult {
    guard("ncclCommCuDevice", || {
        out(device, get(comm)?.device, "device")
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommUserRank(comm: CommHandle, rank: *mut c_int) -> NcclResult {
    guard("ncclCommUserRank", || {
        out(rank, get(comm)?.rank as c_int, "rank")
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommGetAsyncError(comm: CommHandle, err: *mut NcclResult) -> NcclResult {
    guard("ncclCommGetAsyncError", || {
        let c = get(comm)?;
        let e = c
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map_or(SUCCESS, |(code, _)| *code);
        out(err, e, "asyncError")
    })
}

/// Buffers need no registration here: the handle is the buffer's address.
#[unsafe(no_mangle)]
pub extern "C" fn ncclCommRegister(
    comm: CommHandle,
    buff: *mut c_void,
    _size: usize,
    handle: *mut *mut c_void,
) -> NcclResult {
    guard("ncclCommRegister", || {
        get(comm)?;
        out(handle, buff, "handle")
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommDeregister(comm: CommHandle, _handle: *mut c_void) -> NcclResult {
    guard("ncclCommDeregister", || get(comm).map(|_| ()))
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> NcclResult {
    guard("ncclMemAlloc", || {
        if ptr.is_null() {
            return Err(Fail::arg("null", "ptr is NULL"));
        }
        let s = sim().map_err(|e| Fail::new(SYSTEM_ERROR, "driver", e))?;
        let p = s.mem_alloc(size.max(1)).map_err(|r| {
            Fail::new(
                UNHANDLED_CUDA_ERROR,
                "alloc",
                format!("cuMemAlloc of {size} bytes failed with CUresult {r}"),
            )
        })?;
        out(ptr, p as *mut c_void, "ptr")
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclMemFree(ptr: *mut c_void) -> NcclResult {
    guard("ncclMemFree", || {
        if ptr.is_null() {
            return Ok(());
        }
        let s = sim().map_err(|e| Fail::new(SYSTEM_ERROR, "driver", e))?;
        match s.mem_free(ptr as u64) {
            0 => Ok(()),
            r => Err(Fail::new(
                UNHANDLED_CUDA_ERROR,
                "free",
                format!("cuMemFree of {ptr:?} failed with CUresult {r}"),
            )),
        }
    })
}

/// Splits `comm`: every rank of it calls this; ranks of one color form a communicator, ordered
/// by key, then by their rank in `comm`. NCCL_SPLIT_NOCOLOR gives NULL.
#[unsafe(no_mangle)]
pub extern "C" fn ncclCommSplit(
    comm: CommHandle,
    color: c_int,
    key: c_int,
    newcomm: *mut CommHandle,
    config: *const c_void,
) -> NcclResult {
    guard("ncclCommSplit", || {
        let c = get(comm)?;
        if newcomm.is_null() {
            return Err(Fail::arg("null", "newcomm is NULL"));
        }
        if color < SPLIT_NOCOLOR {
            return Err(Fail::arg(
                "color",
                format!("color {color} is negative (only NCCL_SPLIT_NOCOLOR = -1 is)"),
            ));
        }
        check_config(config.cast())?;
        let mut mine = color.to_le_bytes().to_vec();
        mine.extend_from_slice(&key.to_le_bytes());
        let (all, index) = crate::ops::exchange(&c, &mine)?;
        let parse = |b: &[u8]| -> Option<(c_int, c_int)> {
            Some((
                c_int::from_le_bytes(b.get(0..4)?.try_into().ok()?),
                c_int::from_le_bytes(b.get(4..8)?.try_into().ok()?),
            ))
        };
        let mut members = Vec::new();
        for (r, b) in all.iter().enumerate() {
            let (col, k) = parse(b).ok_or_else(|| {
                Fail::new(
                    INVALID_USAGE,
                    "split",
                    format!("rank {r} did not call ncclCommSplit"),
                )
            })?;
            if col == color {
                members.push((k, r));
            }
        }
        if color == SPLIT_NOCOLOR {
            return out(newcomm, std::ptr::null_mut(), "newcomm");
        }
        members.sort();
        let new_rank = members.iter().position(|&(_, r)| r == c.rank).unwrap_or(0);
        let name = format!(
            "{}-s{index}c{color}",
            c.dir.file_name().unwrap_or_default().to_string_lossy()
        );
        let dir = c.dir.with_file_name(name);
        let n = rendezvous(dir, new_rank, members.len())?;
        out(newcomm, register(n), "newcomm")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_magic_is_checked() {
        let mut cfg = [0u8; 160];
        cfg[0..8].copy_from_slice(&160usize.to_le_bytes());
        assert!(check_config(cfg.as_ptr()).is_err());
        cfg[8..12].copy_from_slice(&CONFIG_MAGIC.to_le_bytes());
        assert!(check_config(cfg.as_ptr()).is_ok());
        assert!(check_config(std::ptr::null()).is_ok());
    }

    #[test]
    fn the_last_rank_done_removes_the_directory() {
        let dir = std::env::temp_dir().join(format!("simgpu-nccl-fin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let me = std::process::id() as i32;
        finish(&dir, 0, &[me, me]);
        assert!(dir.join("fin.0").exists(), "rank 1 is not done yet");
        finish(&dir, 1, &[me, me]);
        assert!(!dir.exists());
    }
}
