//! The simulated device: memory (plain allocations and VMM), streams, events, the virtual clock,
//! registered kernels, counters, fault injection and the exit report. Pure Rust; the C ABI is in
//! `lib.rs`.
//!
//! Memory: device addresses live in a range of the host's address space that is reserved with no
//! access, so a host dereference of a device pointer faults as it would on a real system. Bytes
//! live in per-allocation host buffers (data mode) or nowhere (shape mode). Every access by a
//! copy, memset, kernel or cuDNN call is resolved through the mapping table: a range that is
//! reserved but not mapped (or mapped without access) *traps*: the call fails with
//! CUDA_ERROR_ILLEGAL_ADDRESS, a message names the address, and the error is sticky, as a real
//! context's is after a fault.
//!
//! Time: work runs on the CPU in program order, but is placed on a virtual timeline: one compute
//! engine shared by all streams, one H2D and one D2H copy engine. An operation starts when it has
//! been issued (host time), its stream's earlier work is done, and its engine has a free slot
//! (later work may fill an earlier gap on an engine, as hardware queues allow).

use simgpu_model::{CopyDir, Profile, size::parse_size};
use std::collections::{BTreeMap, HashMap};

pub const GRANULARITY: u64 = 2 << 20;
const VA_BASE: u64 = 0x5000_0000_0000;
const VA_SPAN: u64 = 1 << 42;
const SMALL_ALIGN: u64 = 512;

// CUresult values used by the simulator (CUDA 12/13 driver API).
pub const SUCCESS: i32 = 0;
pub const INVALID_VALUE: i32 = 1;
pub const OUT_OF_MEMORY: i32 = 2;
pub const NOT_INITIALIZED: i32 = 3;
pub const NO_DEVICE: i32 = 100;
pub const INVALID_HANDLE: i32 = 400;
pub const NOT_FOUND: i32 = 500;
pub const NOT_READY: i32 = 600;
pub const ILLEGAL_ADDRESS: i32 = 700;
pub const LAUNCH_FAILED: i32 = 719;
pub const UNKNOWN: i32 = 999;

pub const ENGINE_COMPUTE: usize = 0;
pub const ENGINE_H2D: usize = 1;
pub const ENGINE_D2H: usize = 2;
/// The links between devices (NVLink or PCIe peer traffic), where collectives run: a collective's
/// kernels take few SMs, so they overlap the compute engine's work.
pub const ENGINE_LINK: usize = 3;

/// Stream handle values with a meaning of their own (cuda.h).
pub const STREAM_LEGACY: u64 = 0x1;
pub const STREAM_PER_THREAD: u64 = 0x2;

/// What device memory holds. In data mode every allocation holds its bytes. In shape mode
/// only sizes and times are simulated, except that an allocation of at most [`SMALL_BACKED`]
/// bytes holds its bytes too: what a program copies to the device and reads back, or exchanges
/// through a collective (sizes, flags, shapes a framework checks across ranks), is then exact,
/// while what a kernel computes is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Data,
    Shape,
}

/// In shape mode, allocations up to this size hold their bytes (see [`Mode`]): the segment
/// size of PyTorch's small-tensor pool, so that every small tensor is exact. Backing is zeroed
/// memory the host commits only where it is written.
pub const SMALL_BACKED: u64 = 2 << 20;

#[derive(Debug)]
struct Phys {
    size: u64,
    data: Vec<u8>,
    maps: u32,
    released: bool,
}

#[derive(Debug, Clone, Copy)]
struct Mapping {
    len: u64,
    phys: u64,
    offset: u64,
    access: bool,
}

#[derive(Debug, Clone, Copy)]
struct Reservation {
    len: u64,
    vmm: bool,
}

#[derive(Debug, Default)]
struct Engine {
    /// Busy intervals, sorted, all ending after `floor`.
    busy: Vec<(f64, f64)>,
    /// Nothing may be placed before this time (older intervals were folded into it).
    floor: f64,
    end: f64,
}

impl Engine {
    fn schedule(&mut self, ready: f64, dur: f64) -> (f64, f64) {
        let mut t = ready.max(self.floor);
        let mut idx = self.busy.len();
        for (i, &(s, e)) in self.busy.iter().enumerate() {
            if e <= t {
                continue;
            }
            if s >= t + dur {
                idx = i;
                break;
            }
            t = t.max(e);
        }
        let end = t + dur;
        self.busy.insert(idx.min(self.busy.len()), (t, end));
        self.busy.sort_by(|a, b| a.0.total_cmp(&b.0));
        if self.busy.len() > 256 {
            // Bound the search: fold the oldest half into the floor.
            let cut = self.busy.len() / 2;
            let f = self.busy[..cut]
                .iter()
                .map(|x| x.1)
                .fold(self.floor, f64::max);
            self.busy.drain(..cut);
            self.floor = f;
        }
        self.end = self.end.max(end);
        (t, end)
    }

    fn prune(&mut self, now: f64) {
        self.busy.retain(|&(_, e)| e > now);
    }
}

#[derive(Debug, Clone, Copy)]
struct Stream {
    ready: f64,
    blocking: bool,
}

#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub time: Option<f64>,
    pub timing: bool,
}

/// A kernel registered by a program through `simgpuRegisterKernel`.
#[derive(Debug)]
pub struct Kernel {
    pub name: String,
    pub func: usize,
    pub offsets: Vec<usize>,
    pub sizes: Vec<usize>,
}

/// Which allocations, copies and launches fail (their numbers, counted from 1).
#[derive(Debug, Default, Clone)]
struct FailSpec {
    alloc: Vec<u64>,
    copy: Vec<u64>,
    launch: Vec<u64>,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Counters {
    pub kernels: u64,
    /// Of `kernels`, those a math library (cuBLAS, cuBLASLt) ran inside its own calls.
    pub library_kernels: u64,
    /// Device memory of modules' variables (`__cudaRegisterVar`): counted in `peak_bytes`,
    /// never the program's allocations, so no allocator (nor Marmoset's budget) holds it.
    pub module_bytes: u64,
    pub cudnn_calls: u64,
    /// Collectives placed on the links engine (the simulated NCCL's).
    pub collectives: u64,
    pub h2d_bytes: u64,
    pub d2h_bytes: u64,
    pub d2d_bytes: u64,
    pub allocs: u64,
    pub copies: u64,
    pub launches: u64,
}

pub struct Device {
    pub profile: Profile,
    pub profile_json: std::ffi::CString,
    pub mode: Mode,
    pub capacity: u64,
    pub used: u64,
    pub peak: u64,
    next_va: u64,
    reservations: BTreeMap<u64, Reservation>,
    mappings: BTreeMap<u64, Mapping>,
    phys: HashMap<u64, Phys>,
    next_phys: u64,
    /// Plain allocations: address -> physical allocation.
    allocs: HashMap<u64, u64>,
    pinned: BTreeMap<usize, usize>,
    pinned_owned: HashMap<usize, usize>,
    streams: HashMap<u64, Stream>,
    next_handle: u64,
    pub events: HashMap<u64, Event>,
    engines: [Engine; 4],
    pub host_now: f64,
    pub counters: Counters,
    fail: FailSpec,
    pub sticky: Option<i32>,
    pub kernels: HashMap<u64, Kernel>,
    pub report: Option<String>,
    /// SIMGPU_TIMELINE: one JSON line per piece of work issued to an engine (where its stream
    /// and the host stood, when it ran), to find what a stream waited for.
    pub timeline: Option<std::io::BufWriter<std::fs::File>>,
    /// SIMGPU_TIMELINE on a machine of several devices: opened at the first work issued, named
    /// by the device the process works on, as its report is (`devices::report_path`).
    timeline_pending: Option<String>,
    pub pools: Vec<u64>,
    /// Each pool's figures, and the allocations made from a pool (address -> pool, bytes).
    pool_use: HashMap<u64, PoolUse>,
    pool_allocs: HashMap<u64, (u64, u64)>,
    /// Fatbin kernels by cost-model family: launches, simulated seconds, bytes counted.
    pub fatbin_families: BTreeMap<&'static str, (u64, f64, f64)>,
}

/// A stream-ordered memory pool's figures (`cuMemPoolGetAttribute`): the bytes of its live
/// allocations (each as the device rounds it, to 512 B) and the high marks since their last reset.
/// The simulated pool keeps nothing back: a free returns its memory at once, so the pool's
/// reserved memory is its used memory, with a high mark of its own.
#[derive(Debug, Default, Clone, Copy)]
pub struct PoolUse {
    pub used: u64,
    pub used_high: u64,
    pub reserved_high: u64,
}

/// Where a trap happened, for the message.
#[derive(Debug)]
pub struct Trap {
    pub code: i32,
    pub msg: String,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl Device {
    /// Builds the device from the environment; an error names the variable and what is accepted.
    pub fn from_env() -> Result<Device, String> {
        let prof = env("SIMGPU_PROFILE").unwrap_or_else(|| "h100".into());
        let (profile, json) = Profile::load(&prof).map_err(|e| format!("SIMGPU_PROFILE: {e}"))?;
        let capacity = match env("SIMGPU_MEMORY") {
            Some(v) => parse_size(&v).map_err(|e| format!("SIMGPU_MEMORY: {e}"))?,
            None => profile.memory_bytes,
        };
        let mode = match env("SIMGPU_MODE").as_deref() {
            None | Some("data") => Mode::Data,
            Some("shape") => Mode::Shape,
            Some(v) => return Err(format!("SIMGPU_MODE={v:?}: accepted are data, shape")),
        };
        let fail = match env("SIMGPU_FAIL") {
            Some(v) => parse_fail(&v)?,
            None => FailSpec::default(),
        };
        let mut d = Device::new(profile, json, capacity, mode, fail, env("SIMGPU_REPORT"));
        match env("SIMGPU_TIMELINE") {
            Some(path) if crate::devices::several() => d.timeline_pending = Some(path),
            Some(path) => {
                d.timeline = Some(std::io::BufWriter::new(
                    std::fs::File::create(&path)
                        .map_err(|e| format!("SIMGPU_TIMELINE={path:?}: {e}"))?,
                ))
            }
            None => {}
        }
        Ok(d)
    }

    /// Whether SIMGPU_TIMELINE is written (now, or from the first work issued).
    pub fn keeps_timeline(&self) -> bool {
        self.timeline.is_some() || self.timeline_pending.is_some()
    }

    fn new(
        profile: Profile,
        json: String,
        capacity: u64,
        mode: Mode,
        fail: FailSpec,
        report: Option<String>,
    ) -> Device {
        let mut streams = HashMap::new();
        streams.insert(
            0,
            Stream {
                ready: 0.0,
                blocking: true,
            },
        );
        streams.insert(
            STREAM_PER_THREAD,
            Stream {
                ready: 0.0,
                blocking: true,
            },
        );
        Device {
            profile,
            profile_json: std::ffi::CString::new(json).unwrap_or_default(),
            mode,
            capacity,
            used: 0,
            peak: 0,
            next_va: VA_BASE + GRANULARITY,
            reservations: BTreeMap::new(),
            mappings: BTreeMap::new(),
            phys: HashMap::new(),
            next_phys: 1,
            allocs: HashMap::new(),
            pinned: BTreeMap::new(),
            pinned_owned: HashMap::new(),
            streams,
            next_handle: 0x1000,
            events: HashMap::new(),
            engines: Default::default(),
            host_now: 0.0,
            counters: Counters::default(),
            fail,
            sticky: None,
            kernels: HashMap::new(),
            report,
            timeline: None,
            timeline_pending: None,
            pools: Vec::new(),
            pool_use: HashMap::new(),
            pool_allocs: HashMap::new(),
            fatbin_families: BTreeMap::new(),
        }
    }

    /// Reserves the device address window in the host's address space with no access, so that a
    /// host dereference of a device pointer faults.
    pub fn guard_address_space() {
        // SAFETY: an anonymous PROT_NONE, MAP_NORESERVE mapping at a hint address that must not
        // replace anything (MAP_FIXED_NOREPLACE); failure is harmless (the window stays unguarded).
        unsafe {
            libc::mmap(
                VA_BASE as *mut libc::c_void,
                VA_SPAN as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_NORESERVE
                    | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            );
        }
    }

    pub fn new_handle(&mut self) -> u64 {
        self.next_handle += 16;
        self.next_handle
    }

    // ---------------------------------------------------------------- memory

    pub fn is_device(&self, addr: u64) -> bool {
        (VA_BASE..VA_BASE + VA_SPAN).contains(&addr)
    }

    fn count_alloc(&mut self) -> Result<(), i32> {
        injected(
            &mut self.counters.allocs,
            &self.fail.alloc,
            "allocation",
            OUT_OF_MEMORY,
        )
    }

    fn new_phys(&mut self, size: u64) -> Result<u64, i32> {
        if self.used.saturating_add(size) > self.capacity {
            return Err(OUT_OF_MEMORY);
        }
        let data = match self.mode {
            // An allocation the host cannot back fails as the device's own out-of-memory does:
            // the program gets the error code, nothing else changes.
            Mode::Data => zeroed(size).ok_or(OUT_OF_MEMORY)?,
            Mode::Shape if size <= SMALL_BACKED => zeroed(size).ok_or(OUT_OF_MEMORY)?,
            Mode::Shape => Vec::new(),
        };
        self.used += size;
        self.peak = self.peak.max(self.used);
        let id = self.next_phys;
        self.next_phys += 1;
        self.phys.insert(
            id,
            Phys {
                size,
                data,
                maps: 0,
                released: false,
            },
        );
        Ok(id)
    }

    fn drop_phys_if_unused(&mut self, id: u64) {
        if let Some(p) = self.phys.get(&id)
            && p.released
            && p.maps == 0
        {
            self.used -= p.size;
            self.phys.remove(&id);
        }
    }

    fn take_va(&mut self, len: u64, align: u64) -> Result<u64, i32> {
        let align = align.max(SMALL_ALIGN);
        let start = self.next_va.div_ceil(align) * align;
        if start + len > VA_BASE + VA_SPAN {
            return Err(OUT_OF_MEMORY);
        }
        self.next_va = start + len;
        Ok(start)
    }

    /// cuMemAlloc and friends: a plain, mapped, accessible allocation.
    pub fn malloc(&mut self, size: u64) -> Result<u64, i32> {
        self.check_sticky()?;
        if size == 0 {
            return Err(INVALID_VALUE);
        }
        self.count_alloc()?;
        self.alloc_mapped(size)
    }

    /// A plain, mapped, accessible allocation that is not the program's own (a module's
    /// variables): it takes memory but is not counted as an allocation.
    pub fn alloc_mapped(&mut self, size: u64) -> Result<u64, i32> {
        self.check_sticky()?;
        if size == 0 {
            return Err(INVALID_VALUE);
        }
        let rounded = size.div_ceil(SMALL_ALIGN) * SMALL_ALIGN;
        let align = if rounded >= GRANULARITY / 2 {
            GRANULARITY
        } else {
            SMALL_ALIGN
        };
        // An allocation that fails takes nothing: the address window is checked before memory
        // is taken.
        if self.next_va.div_ceil(align) * align + rounded > VA_BASE + VA_SPAN {
            return Err(OUT_OF_MEMORY);
        }
        let phys = self.new_phys(rounded)?;
        let va = self.take_va(rounded, align)?;
        self.reservations.insert(
            va,
            Reservation {
                len: rounded,
                vmm: false,
            },
        );
        self.mappings.insert(
            va,
            Mapping {
                len: rounded,
                phys,
                offset: 0,
                access: true,
            },
        );
        if let Some(p) = self.phys.get_mut(&phys) {
            p.maps = 1;
            p.released = true;
        }
        self.allocs.insert(va, phys);
        Ok(va)
    }

    /// The device's default memory pool (made at its first use).
    pub fn default_pool(&mut self) -> u64 {
        if self.pools.is_empty() {
            let h = self.new_handle();
            self.pools.push(h);
        }
        self.pools[0]
    }

    /// cuMemAllocAsync and cuMemAllocFromPoolAsync: an allocation from `pool`, counted in the
    /// pool's figures until it is freed (by either free).
    pub fn pool_malloc(&mut self, pool: u64, size: u64) -> Result<u64, i32> {
        let a = self.malloc(size)?;
        let bytes = size.div_ceil(SMALL_ALIGN) * SMALL_ALIGN;
        self.pool_allocs.insert(a, (pool, bytes));
        let u = self.pool_use.entry(pool).or_default();
        u.used += bytes;
        u.used_high = u.used_high.max(u.used);
        u.reserved_high = u.reserved_high.max(u.used);
        Ok(a)
    }

    /// A pool's attribute (CUmemPool_attribute): RESERVED_MEM_CURRENT (5), RESERVED_MEM_HIGH (6),
    /// USED_MEM_CURRENT (7), USED_MEM_HIGH (8); None for the others.
    pub fn pool_figure(&self, pool: u64, attr: i32) -> Option<u64> {
        let u = self.pool_use.get(&pool).copied().unwrap_or_default();
        match attr {
            5 | 7 => Some(u.used),
            6 => Some(u.reserved_high),
            8 => Some(u.used_high),
            _ => None,
        }
    }

    /// Sets a pool's high mark (6 or 8) to the value's: only 0 is allowed, and it resets the mark
    /// to the current figure.
    pub fn pool_reset(&mut self, pool: u64, attr: i32, value: u64) -> Result<(), i32> {
        if value != 0 {
            return Err(INVALID_VALUE);
        }
        let u = self.pool_use.entry(pool).or_default();
        match attr {
            6 => u.reserved_high = u.used,
            8 => u.used_high = u.used,
            _ => return Err(INVALID_VALUE),
        }
        Ok(())
    }

    pub fn free(&mut self, ptr: u64) -> Result<(), i32> {
        if ptr == 0 {
            return Ok(());
        }
        let phys = self.allocs.remove(&ptr).ok_or(INVALID_VALUE)?;
        if let Some((pool, bytes)) = self.pool_allocs.remove(&ptr)
            && let Some(u) = self.pool_use.get_mut(&pool)
        {
            u.used -= bytes;
        }
        self.mappings.remove(&ptr);
        self.reservations.remove(&ptr);
        if let Some(p) = self.phys.get_mut(&phys) {
            p.maps = 0;
        }
        self.drop_phys_if_unused(phys);
        Ok(())
    }

    /// Bytes reachable from device addresses: each address up to the end of the mapped range
    /// holding it, overlaps counted once (a kernel's pointer parameters, conservatively: a view
    /// or a block inside a caching allocator's segment counts the rest of the segment).
    pub fn reach(&self, addrs: &[u64]) -> u64 {
        let mut spans: Vec<(u64, u64)> = addrs
            .iter()
            .filter_map(|&a| {
                let (&s, m) = self.mappings.range(..=a).next_back()?;
                (a < s + m.len).then_some((a, s + m.len))
            })
            .collect();
        spans.sort_unstable();
        let (mut total, mut covered) = (0, 0);
        for (a, e) in spans {
            let from = a.max(covered);
            if e > from {
                total += e - from;
                covered = e;
            }
        }
        total
    }

    pub fn mem_info(&self) -> (u64, u64) {
        (self.capacity - self.used.min(self.capacity), self.capacity)
    }

    pub fn address_reserve(&mut self, size: u64, align: u64, hint: u64) -> Result<u64, i32> {
        if size == 0
            || !size.is_multiple_of(GRANULARITY)
            || (align != 0 && !align.is_power_of_two())
        {
            return Err(INVALID_VALUE);
        }
        let align = align.max(GRANULARITY);
        let free_at_hint = hint != 0
            && hint.is_multiple_of(align)
            && self.is_device(hint)
            && hint >= self.next_va
            && hint + size <= VA_BASE + VA_SPAN;
        let va = if free_at_hint {
            self.next_va = hint + size;
            hint
        } else {
            self.take_va(size, align)?
        };
        self.reservations.insert(
            va,
            Reservation {
                len: size,
                vmm: true,
            },
        );
        Ok(va)
    }

    pub fn address_free(&mut self, ptr: u64, size: u64) -> Result<(), i32> {
        match self.reservations.get(&ptr) {
            Some(r) if r.vmm && r.len == size => {}
            _ => return Err(INVALID_VALUE),
        }
        if self.mappings.range(ptr..ptr + size).next().is_some() {
            return Err(INVALID_VALUE);
        }
        self.reservations.remove(&ptr);
        Ok(())
    }

    pub fn mem_create(&mut self, size: u64) -> Result<u64, i32> {
        self.check_sticky()?;
        if size == 0 || !size.is_multiple_of(GRANULARITY) {
            return Err(INVALID_VALUE);
        }
        self.count_alloc()?;
        self.new_phys(size)
    }

    pub fn mem_release(&mut self, handle: u64) -> Result<(), i32> {
        let p = self.phys.get_mut(&handle).ok_or(INVALID_VALUE)?;
        if p.released {
            return Err(INVALID_VALUE);
        }
        p.released = true;
        self.drop_phys_if_unused(handle);
        Ok(())
    }

    fn vmm_reservation_of(&self, ptr: u64, size: u64) -> Option<u64> {
        let (&start, r) = self.reservations.range(..=ptr).next_back()?;
        (r.vmm && ptr + size <= start + r.len).then_some(start)
    }

    pub fn mem_map(&mut self, ptr: u64, size: u64, offset: u64, handle: u64) -> Result<(), i32> {
        if size == 0
            || !ptr.is_multiple_of(GRANULARITY)
            || !size.is_multiple_of(GRANULARITY)
            || !offset.is_multiple_of(GRANULARITY)
        {
            return Err(INVALID_VALUE);
        }
        self.vmm_reservation_of(ptr, size).ok_or(INVALID_VALUE)?;
        let p = self.phys.get(&handle).ok_or(INVALID_VALUE)?;
        if p.released || offset + size > p.size {
            return Err(INVALID_VALUE);
        }
        let overlaps = self
            .mappings
            .range(..ptr + size)
            .next_back()
            .is_some_and(|(&s, m)| s + m.len > ptr);
        if overlaps {
            return Err(INVALID_VALUE);
        }
        self.mappings.insert(
            ptr,
            Mapping {
                len: size,
                phys: handle,
                offset,
                access: false,
            },
        );
        if let Some(p) = self.phys.get_mut(&handle) {
            p.maps += 1;
        }
        Ok(())
    }

    pub fn mem_unmap(&mut self, ptr: u64, size: u64) -> Result<(), i32> {
        self.vmm_reservation_of(ptr, size).ok_or(INVALID_VALUE)?;
        let inside: Vec<u64> = self
            .mappings
            .range(ptr..ptr + size)
            .map(|(&s, _)| s)
            .collect();
        let covers = inside
            .iter()
            .all(|s| s + self.mappings[s].len <= ptr + size);
        let straddles = self
            .mappings
            .range(..ptr)
            .next_back()
            .is_some_and(|(&s, m)| s + m.len > ptr);
        if inside.is_empty() || !covers || straddles {
            return Err(INVALID_VALUE);
        }
        for s in inside {
            if let Some(m) = self.mappings.remove(&s) {
                if let Some(p) = self.phys.get_mut(&m.phys) {
                    p.maps -= 1;
                }
                self.drop_phys_if_unused(m.phys);
            }
        }
        Ok(())
    }

    pub fn set_access(&mut self, ptr: u64, size: u64, rw: bool) -> Result<(), i32> {
        self.vmm_reservation_of(ptr, size).ok_or(INVALID_VALUE)?;
        let mut covered = ptr;
        let keys: Vec<u64> = self
            .mappings
            .range(ptr..ptr + size)
            .map(|(&s, _)| s)
            .collect();
        for s in keys {
            if s != covered {
                return Err(INVALID_VALUE);
            }
            let m = self.mappings.get_mut(&s).unwrap();
            m.access = rw;
            covered = s + m.len;
        }
        if covered < ptr + size {
            Err(INVALID_VALUE)
        } else {
            Ok(())
        }
    }

    /// The mapped pieces (phys, offset, len) of [addr, addr + len), or the trap it causes.
    fn pieces(&self, addr: u64, len: u64, what: &str) -> Result<Vec<(u64, u64, u64)>, Trap> {
        let mut out = Vec::new();
        let mut a = addr;
        let end = addr
            .checked_add(len)
            .ok_or_else(|| self.trap(addr, len, addr, what))?;
        while a < end {
            let Some((&s, m)) = self.mappings.range(..=a).next_back() else {
                return Err(self.trap(addr, len, a, what));
            };
            if a >= s + m.len || !m.access {
                return Err(self.trap(addr, len, a, what));
            }
            let take = (s + m.len).min(end) - a;
            out.push((m.phys, m.offset + (a - s), take));
            a += take;
        }
        Ok(out)
    }

    fn trap(&self, addr: u64, len: u64, at: u64, what: &str) -> Trap {
        let why = match self.reservations.range(..=at).next_back() {
            Some((&s, r)) if at < s + r.len && r.vmm => {
                if self
                    .mappings
                    .range(..=at)
                    .next_back()
                    .is_some_and(|(&ms, m)| at < ms + m.len)
                {
                    "mapped without access (cuMemSetAccess not called)"
                } else {
                    "reserved with cuMemAddressReserve but not mapped"
                }
            }
            _ => "not device memory (never allocated, or freed)",
        };
        Trap {
            code: ILLEGAL_ADDRESS,
            msg: format!(
                "simgpu: illegal address {at:#x}: {what} touches [{addr:#x}, {:#x}) and {at:#x} is {why}",
                addr.wrapping_add(len)
            ),
        }
    }

    fn raise(&mut self, t: Trap) -> i32 {
        eprintln!("{}", t.msg);
        self.sticky = Some(t.code);
        t.code
    }

    pub fn check_sticky(&self) -> Result<(), i32> {
        match self.sticky {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Checks that an operation may touch [addr, addr+len); a failure traps (sticky).
    pub fn check(&mut self, addr: u64, len: u64, what: &str) -> Result<(), i32> {
        self.check_sticky()?;
        if len == 0 {
            return Ok(());
        }
        match self.pieces(addr, len, what) {
            Ok(_) => Ok(()),
            Err(t) => Err(self.raise(t)),
        }
    }

    /// Reads device bytes into `dst`; memory that holds no bytes (shape mode, see [`Mode`])
    /// leaves its part of `dst` as it was.
    pub fn read(&mut self, addr: u64, dst: &mut [u8], what: &str) -> Result<(), i32> {
        self.check_sticky()?;
        let pieces = match self.pieces(addr, dst.len() as u64, what) {
            Ok(p) => p,
            Err(t) => return Err(self.raise(t)),
        };
        let mut at = 0usize;
        for (phys, off, len) in pieces {
            let p = &self.phys[&phys];
            if !p.data.is_empty() {
                dst[at..at + len as usize]
                    .copy_from_slice(&p.data[off as usize..(off + len) as usize]);
            }
            at += len as usize;
        }
        Ok(())
    }

    /// Writes `src` to device memory; memory that holds no bytes (shape mode) takes none.
    pub fn write(&mut self, addr: u64, src: &[u8], what: &str) -> Result<(), i32> {
        self.check_sticky()?;
        let pieces = match self.pieces(addr, src.len() as u64, what) {
            Ok(p) => p,
            Err(t) => return Err(self.raise(t)),
        };
        let mut at = 0usize;
        for (phys, off, len) in pieces {
            let p = self.phys.get_mut(&phys).unwrap();
            if !p.data.is_empty() {
                p.data[off as usize..(off + len) as usize]
                    .copy_from_slice(&src[at..at + len as usize]);
            }
            at += len as usize;
        }
        Ok(())
    }

    /// Whether [addr, addr + len) is device memory that holds its bytes (always in data mode;
    /// in shape mode, small allocations: see [`Mode`]). An invalid range holds none.
    pub fn holds_bytes(&self, addr: u64, len: u64) -> bool {
        self.pieces(addr, len, "").is_ok_and(|ps| {
            ps.iter()
                .all(|(phys, _, _)| !self.phys[phys].data.is_empty())
        })
    }

    // ---------------------------------------------------------------- pinned host memory

    /// Pinned host memory: anonymous pages (zeroed, committed only when touched).
    pub fn host_alloc(&mut self, size: usize) -> Result<*mut u8, i32> {
        let len = size.max(1);
        // SAFETY: a fresh private anonymous mapping; the result is checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(OUT_OF_MEMORY);
        }
        self.pinned.insert(p as usize, len);
        self.pinned_owned.insert(p as usize, len);
        Ok(p as *mut u8)
    }

    pub fn host_free(&mut self, p: *mut u8) -> Result<(), i32> {
        if p.is_null() {
            return Ok(());
        }
        let len = self
            .pinned_owned
            .remove(&(p as usize))
            .ok_or(INVALID_VALUE)?;
        self.pinned.remove(&(p as usize));
        // SAFETY: p and len are a mapping made by host_alloc, unmapped once (removed above).
        unsafe { libc::munmap(p as *mut libc::c_void, len) };
        Ok(())
    }

    pub fn host_register(&mut self, p: usize, size: usize) -> Result<(), i32> {
        if p == 0 || size == 0 || self.is_device(p as u64) {
            return Err(INVALID_VALUE);
        }
        self.pinned.insert(p, size);
        Ok(())
    }

    pub fn host_unregister(&mut self, p: usize) -> Result<(), i32> {
        if self.pinned_owned.contains_key(&p) {
            return Err(INVALID_VALUE);
        }
        self.pinned.remove(&p).map(|_| ()).ok_or(INVALID_VALUE)
    }

    pub fn is_pinned(&self, p: usize, len: usize) -> bool {
        self.pinned
            .range(..=p)
            .next_back()
            .is_some_and(|(&s, &l)| p + len <= s + l)
    }

    // ---------------------------------------------------------------- streams and time

    pub fn stream_create(&mut self, blocking: bool) -> u64 {
        let h = self.new_handle();
        self.streams.insert(
            h,
            Stream {
                ready: self.host_now,
                blocking,
            },
        );
        h
    }

    pub fn stream_destroy(&mut self, h: u64) -> Result<(), i32> {
        if h == 0 || h == STREAM_LEGACY || h == STREAM_PER_THREAD {
            return Err(INVALID_HANDLE);
        }
        self.streams.remove(&h).map(|_| ()).ok_or(INVALID_HANDLE)
    }

    fn norm(h: u64) -> u64 {
        if h == STREAM_LEGACY { 0 } else { h }
    }

    pub fn valid_stream(&self, h: u64) -> bool {
        self.streams.contains_key(&Self::norm(h))
    }

    /// When work issued now on stream `h` may start (legacy default stream semantics included).
    /// When the work issued so far on stream `h` (and what it waits for) ends.
    pub fn stream_time(&self, h: u64) -> Result<f64, i32> {
        self.stream_ready(h)
    }

    fn stream_ready(&self, h: u64) -> Result<f64, i32> {
        let h = Self::norm(h);
        let s = self.streams.get(&h).ok_or(INVALID_HANDLE)?;
        let legacy = self.streams[&0].ready;
        let r = if h == 0 {
            self.streams
                .values()
                .filter(|s| s.blocking)
                .map(|s| s.ready)
                .fold(legacy, f64::max)
        } else if s.blocking {
            s.ready.max(legacy)
        } else {
            s.ready
        };
        Ok(r)
    }

    /// Places `dur` seconds of work on `engine` for stream `h`; returns (start, end).
    pub fn issue(
        &mut self,
        h: u64,
        engine: usize,
        dur: f64,
        host_cost: f64,
    ) -> Result<(f64, f64), i32> {
        self.issue_after(h, engine, dur, host_cost, 0.0)
    }

    /// As [`Device::issue`], starting no earlier than `not_before` (a time another process's
    /// device reached: the peers of a collective).
    pub fn issue_after(
        &mut self,
        h: u64,
        engine: usize,
        dur: f64,
        host_cost: f64,
        not_before: f64,
    ) -> Result<(f64, f64), i32> {
        self.host_now += host_cost;
        let stream_ready = self.stream_ready(h)?;
        let ready = stream_ready.max(self.host_now).max(not_before);
        let (s, e) = self.engines[engine].schedule(ready, dur);
        if let Some(base) = self.timeline_pending.take() {
            let path = crate::devices::report_path(&base).unwrap_or(base);
            match std::fs::File::create(&path) {
                Ok(f) => self.timeline = Some(std::io::BufWriter::new(f)),
                Err(e) => eprintln!("simgpu: SIMGPU_TIMELINE={path:?}: {e} (no timeline written)"),
            }
        }
        if let Some(w) = self.timeline.as_mut() {
            use std::io::Write;
            let name = ["compute", "h2d", "d2h", "link"]
                .get(engine)
                .copied()
                .unwrap_or("?");
            let _ = writeln!(
                w,
                "{{\"stream\":{},\"engine\":\"{name}\",\"stream_ready\":{stream_ready:.9},\"host\":{:.9},\"start\":{s:.9},\"end\":{e:.9}}}",
                Self::norm(h),
                self.host_now
            );
        }
        if let Some(st) = self.streams.get_mut(&Self::norm(h)) {
            st.ready = e;
        }
        Ok((s, e))
    }

    pub fn host_wait_until(&mut self, t: f64) {
        if t > self.host_now {
            self.host_now = t;
            for e in &mut self.engines {
                e.prune(t);
            }
        }
    }

    pub fn stream_sync(&mut self, h: u64) -> Result<(), i32> {
        self.host_now += self.profile.api_call();
        let t = self
            .streams
            .get(&Self::norm(h))
            .ok_or(INVALID_HANDLE)?
            .ready;
        let t = if Self::norm(h) == 0 {
            self.stream_ready(0)?
        } else {
            t
        };
        self.host_wait_until(t);
        self.check_sticky()
    }

    pub fn device_sync(&mut self) -> Result<(), i32> {
        self.host_now += self.profile.api_call();
        let t = self.engines.iter().map(|e| e.end).fold(0.0, f64::max);
        self.host_wait_until(t);
        self.check_sticky()
    }

    pub fn stream_query(&mut self, h: u64) -> Result<(), i32> {
        self.host_now += self.profile.api_call();
        let t = self
            .streams
            .get(&Self::norm(h))
            .ok_or(INVALID_HANDLE)?
            .ready;
        if t > self.host_now {
            Err(NOT_READY)
        } else {
            Ok(())
        }
    }

    pub fn event_record(&mut self, ev: u64, h: u64) -> Result<(), i32> {
        self.host_now += self.profile.api_call();
        let t = self.stream_ready(h)?.max(self.host_now);
        let e = self.events.get_mut(&ev).ok_or(INVALID_HANDLE)?;
        e.time = Some(t);
        Ok(())
    }

    pub fn stream_wait_event(&mut self, h: u64, ev: u64) -> Result<(), i32> {
        self.host_now += self.profile.api_call();
        let t = self.events.get(&ev).ok_or(INVALID_HANDLE)?.time;
        let s = self.streams.get_mut(&Self::norm(h)).ok_or(INVALID_HANDLE)?;
        if let Some(t) = t {
            s.ready = s.ready.max(t);
        }
        Ok(())
    }

    pub fn event_sync(&mut self, ev: u64) -> Result<(), i32> {
        self.host_now += self.profile.api_call();
        let t = self.events.get(&ev).ok_or(INVALID_HANDLE)?.time;
        if let Some(t) = t {
            self.host_wait_until(t);
        }
        self.check_sticky()
    }

    pub fn event_query(&mut self, ev: u64) -> Result<(), i32> {
        self.host_now += self.profile.api_call();
        match self.events.get(&ev).ok_or(INVALID_HANDLE)?.time {
            Some(t) if t > self.host_now => Err(NOT_READY),
            _ => Ok(()),
        }
    }

    pub fn elapsed_ms(&mut self, a: u64, b: u64) -> Result<f32, i32> {
        let ea = *self.events.get(&a).ok_or(INVALID_HANDLE)?;
        let eb = *self.events.get(&b).ok_or(INVALID_HANDLE)?;
        if !ea.timing || !eb.timing {
            return Err(INVALID_HANDLE);
        }
        match (ea.time, eb.time) {
            (Some(x), Some(y)) => {
                if x > self.host_now || y > self.host_now {
                    return Err(NOT_READY);
                }
                Ok(((y - x) * 1e3) as f32)
            }
            _ => Err(INVALID_HANDLE),
        }
    }

    pub fn makespan(&self) -> f64 {
        self.engines
            .iter()
            .map(|e| e.end)
            .fold(self.host_now, f64::max)
    }

    // ---------------------------------------------------------------- copies and launches

    pub fn count_copy(&mut self) -> Result<(), i32> {
        self.check_sticky()?;
        injected(&mut self.counters.copies, &self.fail.copy, "copy", UNKNOWN)
    }

    pub fn count_launch(&mut self) -> Result<(), i32> {
        self.check_sticky()?;
        injected(
            &mut self.counters.launches,
            &self.fail.launch,
            "launch",
            LAUNCH_FAILED,
        )
    }

    /// Timing of a copy: engine and duration. Pageable host memory makes the host wait.
    pub fn time_copy(
        &mut self,
        dir: CopyDir,
        bytes: u64,
        stream: u64,
        host: Option<(usize, bool)>,
    ) -> Result<(), i32> {
        let pageable = host.is_some_and(|(p, _)| !self.is_pinned(p, bytes as usize));
        let sync = host.is_some_and(|(_, sync)| sync) || pageable;
        let dur = self.profile.copy_time(dir, bytes, pageable);
        let engine = match dir {
            CopyDir::H2D => ENGINE_H2D,
            CopyDir::D2H => ENGINE_D2H,
            CopyDir::D2D => ENGINE_COMPUTE,
        };
        match dir {
            CopyDir::H2D => self.counters.h2d_bytes += bytes,
            CopyDir::D2H => self.counters.d2h_bytes += bytes,
            CopyDir::D2D => self.counters.d2d_bytes += bytes,
        }
        let (_, end) = self.issue(stream, engine, dur, self.profile.api_call())?;
        if sync {
            self.host_wait_until(end);
        }
        Ok(())
    }

    pub fn report_json(&self) -> String {
        let mut s = String::new();
        self.write_report(&mut s)
            .expect("formatting into a String does not fail");
        s
    }

    /// Writes the report (SIMGPU_REPORT's JSON). It allocates nothing itself (integers, floats
    /// and strings formatted in place), so that the report of an abort can be written from a
    /// signal handler into a buffer made beforehand (`abort`).
    pub fn write_report(&self, w: &mut impl std::fmt::Write) -> std::fmt::Result {
        /// Fatbin kernels by family, as JSON members.
        struct Families<'a>(&'a BTreeMap<&'static str, (u64, f64, f64)>);
        impl std::fmt::Display for Families<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                for (i, (family, (n, t, b))) in self.0.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(
                        f,
                        "{family:?}: {{\"launches\": {n}, \"seconds\": {t:e}, \"bytes\": {b:e}}}"
                    )?;
                }
                Ok(())
            }
        }
        /// The sticky error's code, or null.
        struct Sticky(Option<i32>);
        impl std::fmt::Display for Sticky {
            fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                match self.0 {
                    Some(e) => write!(f, "{e}"),
                    None => f.write_str("null"),
                }
            }
        }
        let c = &self.counters;
        write!(
            w,
            concat!(
                "{{\n  \"simulated\": true,\n  \"profile\": {:?},\n  \"mode\": {:?},\n",
                "  \"virtual_time_s\": {:e},\n  \"peak_bytes\": {},\n  \"capacity_bytes\": {},\n",
                "  \"in_use_bytes\": {},\n  \"module_bytes\": {},\n  \"h2d_bytes\": {},\n  \"d2h_bytes\": {},\n  \"d2d_bytes\": {},\n",
                "  \"kernels\": {},\n  \"library_kernels\": {},\n  \"cudnn_calls\": {},\n  \"allocations\": {},\n  \"copies\": {},\n",
                "  \"fatbin_kernels\": {{{}}},\n",
                "  \"sticky_error\": {}\n}}\n"
            ),
            self.profile.name,
            if self.mode == Mode::Data {
                "data"
            } else {
                "shape"
            },
            self.makespan(),
            self.peak,
            self.capacity,
            self.used,
            c.module_bytes,
            c.h2d_bytes,
            c.d2h_bytes,
            c.d2d_bytes,
            c.kernels,
            c.library_kernels,
            c.cudnn_calls,
            c.allocs,
            c.copies,
            Families(&self.fatbin_families),
            Sticky(self.sticky),
        )
    }
}

/// What the driver's pointer and attribute queries need to know about addresses.
impl Device {
    /// The accessible device mapping holding `addr`: (start, length).
    pub fn device_range(&self, addr: u64) -> Option<(u64, u64)> {
        self.mappings
            .range(..=addr)
            .next_back()
            .filter(|(s, m)| m.access && addr < *s + m.len)
            .map(|(s, m)| (*s, m.len))
    }

    /// A device of a built-in profile, in shape mode, for tests of the driver's other modules.
    #[cfg(test)]
    pub fn for_test(profile: &str) -> Device {
        let (p, j) = Profile::load(profile).unwrap();
        Device::new(p, j, 1 << 30, Mode::Shape, FailSpec::default(), None)
    }

    /// The pinned (page-locked or registered) host range holding `p`: (start, length).
    pub fn pinned_range(&self, p: usize) -> Option<(usize, usize)> {
        self.pinned
            .range(..=p)
            .next_back()
            .filter(|(s, l)| p < *s + *l)
            .map(|(s, l)| (*s, *l))
    }
}

fn parse_fail(v: &str) -> Result<FailSpec, String> {
    let mut f = FailSpec::default();
    for part in v.split(',') {
        let bad = || {
            format!(
                "SIMGPU_FAIL={v:?}: accepted are comma-separated alloc:N, copy:N, launch:N (N >= 1)"
            )
        };
        let (what, n) = part.split_once(':').ok_or_else(bad)?;
        let n: u64 = n.trim().parse().map_err(|_| bad())?;
        if n == 0 {
            return Err(bad());
        }
        match what.trim() {
            "alloc" => f.alloc.push(n),
            "copy" => f.copy.push(n),
            "launch" => f.launch.push(n),
            _ => return Err(bad()),
        }
    }
    Ok(f)
}

/// `size` zeroed host bytes, the backing of device memory in data mode: pages from the allocator
/// that are committed only when written. None when the host cannot give them; never aborts.
fn zeroed(size: u64) -> Option<Vec<u8>> {
    let len = usize::try_from(size).ok()?;
    if len == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(len).ok()?;
    // SAFETY: the layout's size is non-zero (checked above).
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return None;
    }
    // SAFETY: p was allocated by the global allocator with the layout of `len` bytes (align 1),
    // all of them initialised (zeroed); the Vec owns it from here and frees it with that layout.
    Some(unsafe { Vec::from_raw_parts(p, len, len) })
}

/// Counts one more `what` and fails it with `code` when it is the one SIMGPU_FAIL names.
fn injected(count: &mut u64, fail_at: &[u64], what: &str, code: i32) -> Result<(), i32> {
    *count += 1;
    if fail_at.contains(count) {
        eprintln!("simgpu: injected failure: {what} #{count} (SIMGPU_FAIL)");
        return Err(code);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(capacity: u64, mode: Mode) -> Device {
        let (p, j) = Profile::load("h100").unwrap();
        Device::new(p, j, capacity, mode, FailSpec::default(), None)
    }

    #[test]
    fn a_pool_counts_its_own_allocations_and_resets_its_high_marks() {
        let mut d = dev(64 << 20, Mode::Shape);
        let pool = d.default_pool();
        // Neither a module's variables nor a plain allocation is the pool's.
        d.alloc_mapped(4 << 20).unwrap();
        let plain = d.malloc(1 << 20).unwrap();
        let a = d.pool_malloc(pool, 1000).unwrap();
        let b = d.pool_malloc(pool, 3 << 20).unwrap();
        assert_eq!(d.pool_figure(pool, 7), Some(1024 + (3 << 20)));
        d.free(b).unwrap();
        d.free(plain).unwrap();
        assert_eq!(d.pool_figure(pool, 7), Some(1024));
        assert_eq!(d.pool_figure(pool, 5), Some(1024));
        assert_eq!(d.pool_figure(pool, 8), Some(1024 + (3 << 20)));
        assert_eq!(d.pool_figure(pool, 6), Some(1024 + (3 << 20)));
        assert_eq!(d.pool_reset(pool, 8, 5), Err(INVALID_VALUE));
        assert_eq!(d.pool_reset(pool, 7, 0), Err(INVALID_VALUE));
        d.pool_reset(pool, 8, 0).unwrap();
        assert_eq!(d.pool_figure(pool, 8), Some(1024));
        assert_eq!(d.pool_figure(pool, 6), Some(1024 + (3 << 20)));
        d.pool_reset(pool, 6, 0).unwrap();
        assert_eq!(d.pool_figure(pool, 6), Some(1024));
        d.free(a).unwrap();
        assert_eq!(d.pool_figure(pool, 7), Some(0));
        assert_eq!(d.pool_figure(pool, 3), None);
    }

    #[test]
    fn an_allocation_the_host_cannot_back_fails_as_out_of_memory() {
        // Within the device's capacity, beyond any host's address space.
        let mut d = dev(u64::MAX, Mode::Data);
        let huge = 1 << 60;
        assert_eq!(d.malloc(huge), Err(OUT_OF_MEMORY));
        assert_eq!(d.mem_create(huge), Err(OUT_OF_MEMORY));
        assert_eq!((d.used, d.peak), (0, 0), "nothing taken");
        assert_eq!(d.sticky, None, "not sticky: the device goes on");
        let a = d.malloc(1 << 20).unwrap();
        d.write(a, &[7; 16], "a test").unwrap();
        let mut back = [0; 16];
        d.read(a, &mut back, "a test").unwrap();
        assert_eq!(back, [7; 16]);
        // Shape mode backs nothing: a terabyte is taken at once.
        let mut s = dev(u64::MAX, Mode::Shape);
        s.malloc(1 << 40).unwrap();
        assert_eq!(s.used, 1 << 40);
        // An allocation beyond the address window takes nothing either.
        assert_eq!(s.malloc(huge), Err(OUT_OF_MEMORY));
        assert_eq!((s.used, s.peak), (1 << 40, 1 << 40));
    }

    #[test]
    fn in_shape_mode_only_small_allocations_hold_their_bytes() {
        let mut s = dev(1 << 30, Mode::Shape);
        let small = s.malloc(SMALL_BACKED).unwrap();
        let large = s.malloc(SMALL_BACKED + 1).unwrap();
        assert!(s.holds_bytes(small, SMALL_BACKED));
        assert!(!s.holds_bytes(large, 16));
        assert!(
            !s.holds_bytes(small, SMALL_BACKED + 1),
            "past its end is no memory"
        );
        s.write(small + 8, &[3; 8], "a test").unwrap();
        s.write(large, &[9; 8], "a test").unwrap();
        let mut back = [1u8; 16];
        s.read(small, &mut back, "a test").unwrap();
        assert_eq!(back, [0, 0, 0, 0, 0, 0, 0, 0, 3, 3, 3, 3, 3, 3, 3, 3]);
        let mut untouched = [1u8; 8];
        s.read(large, &mut untouched, "a test").unwrap();
        assert_eq!(
            untouched, [1; 8],
            "memory without bytes leaves the host's as they were"
        );
    }

    #[test]
    fn out_of_memory_at_capacity() {
        let mut d = dev(8 << 20, Mode::Data);
        let a = d.malloc(6 << 20).unwrap();
        assert_eq!(d.malloc(4 << 20), Err(OUT_OF_MEMORY));
        d.free(a).unwrap();
        assert!(d.malloc(8 << 20).is_ok());
        assert_eq!(d.peak, 8 << 20);
    }

    #[test]
    fn vmm_unmapped_ranges_trap_and_stick() {
        let mut d = dev(64 << 20, Mode::Data);
        let va = d.address_reserve(4 * GRANULARITY, 0, 0).unwrap();
        let h = d.mem_create(2 * GRANULARITY).unwrap();
        d.mem_map(va, 2 * GRANULARITY, 0, h).unwrap();
        // Mapped but no access yet.
        assert_eq!(d.check(va, 16, "test"), Err(ILLEGAL_ADDRESS));
        d.sticky = None;
        d.set_access(va, 2 * GRANULARITY, true).unwrap();
        d.write(va + 8, &[1, 2, 3], "test").unwrap();
        let mut b = [0u8; 3];
        d.read(va + 8, &mut b, "test").unwrap();
        assert_eq!(b, [1, 2, 3]);
        // Spilling into the unmapped half traps, with the first bad address.
        let e = d.pieces(va + 2 * GRANULARITY - 4, 8, "copy").unwrap_err();
        assert!(
            e.msg.contains(&format!("{:#x}", va + 2 * GRANULARITY)),
            "{}",
            e.msg
        );
        assert!(e.msg.contains("not mapped"));
        assert_eq!(
            d.read(va + 2 * GRANULARITY - 4, &mut [0; 8], "copy"),
            Err(ILLEGAL_ADDRESS)
        );
        assert_eq!(d.malloc(1024), Err(ILLEGAL_ADDRESS), "sticky");
    }

    #[test]
    fn released_memory_is_freed_when_unmapped() {
        let mut d = dev(64 << 20, Mode::Shape);
        let va = d.address_reserve(GRANULARITY, 0, 0).unwrap();
        let h = d.mem_create(GRANULARITY).unwrap();
        d.mem_map(va, GRANULARITY, 0, h).unwrap();
        d.mem_release(h).unwrap();
        assert_eq!(d.used, GRANULARITY);
        d.mem_unmap(va, GRANULARITY).unwrap();
        assert_eq!(d.used, 0);
        d.address_free(va, GRANULARITY).unwrap();
    }

    #[test]
    fn engines_serialise_within_and_overlap_across() {
        let mut d = dev(1 << 30, Mode::Shape);
        let s1 = d.stream_create(false);
        let s2 = d.stream_create(false);
        let (a0, a1) = d.issue(s1, ENGINE_COMPUTE, 1.0, 0.0).unwrap();
        let (b0, _) = d.issue(s1, ENGINE_COMPUTE, 1.0, 0.0).unwrap();
        assert_eq!((a0, a1, b0), (0.0, 1.0, 1.0));
        let (c0, c1) = d.issue(s2, ENGINE_H2D, 0.5, 0.0).unwrap();
        assert_eq!(
            (c0, c1),
            (0.0, 0.5),
            "copy overlaps compute on another stream"
        );
        // A kernel on s2 after the copy fits no gap on the compute engine before 2.0.
        let (k0, _) = d.issue(s2, ENGINE_COMPUTE, 0.25, 0.0).unwrap();
        assert_eq!(k0, 2.0);
    }

    #[test]
    fn fail_spec() {
        let f = parse_fail("alloc:3,launch:2").unwrap();
        assert_eq!((f.alloc, f.copy, f.launch), (vec![3], vec![], vec![2]));
        // Every entry of a kind fires, not only the last one.
        let f = parse_fail("copy:45,copy:46,alloc:1").unwrap();
        assert_eq!(f.copy, [45, 46]);
        let mut d = dev(8 << 20, Mode::Data);
        d.fail = f;
        let fired: Vec<u64> = (1..=50).filter(|_| d.count_copy().is_err()).collect();
        assert_eq!(fired, [45, 46]);
        assert!(parse_fail("alloc:0").is_err());
        assert!(parse_fail("free:1").is_err());
    }
}
