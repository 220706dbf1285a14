//! The registry of fatbin kernels: what the runtime's `__cudaRegisterFatBinary` /
//! `__cudaRegisterFunction` hand the driver (through `simgpuRegisterFatbinary` /
//! `simgpuRegisterFunction`), their parameter layouts read lazily from the fatbins, and their
//! launches, timed by the cost model. Their results are computed only for the kernels
//! [`crate::host_kernels`] knows (by name, or by their PTX), where their buffers hold bytes.
//!
//! Registration stays cheap (torch registers 477 fatbins and 24k kernels at import): a fatbin is
//! read and decompressed only when one of its kernels is first launched or asked about.

use crate::fatbin::{self, FatbinError, KernelParams, Parsed, PtxEntry, WRAPPER_MAGIC};
use crate::host_kernels::{self, Skip};
use crate::{CUresult, Handle, lock};
use simgpu_model::kernels::{self, KernelCost, KernelLaunch};
use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

pub const INVALID_IMAGE: CUresult = 200;
pub const NO_BINARY_FOR_GPU: CUresult = 209;
pub const NOT_FOUND: CUresult = 500;

struct Module {
    /// Address of the fatbin container in the program (it outlives the registration); 0 for a
    /// module the program loaded itself (`cuModuleLoadData`: parsed at load, nothing kept).
    data: usize,
    /// Loaded with `cuModuleLoadData(Ex)` (a `CUmodule`), not registered by the runtime.
    loaded: bool,
    parsed: Option<Result<Arc<Parsed>, CUresult>>,
    funcs: Vec<usize>,
}

pub struct Func {
    module: usize,
    pub name: String,
    params: Option<Result<Arc<KernelParams>, CUresult>>,
    demangled: Option<Arc<str>>,
    /// The kernel's PTX, when its module was PTX text (interpreted on the host).
    ptx: Option<Arc<PtxEntry>>,
}

#[derive(Default)]
struct Registry {
    modules: HashMap<usize, Module>,
    /// Host stub address -> kernel.
    funcs: HashMap<usize, Func>,
    next: usize,
    /// Fatbin-level problems already reported (one line each).
    said: HashSet<String>,
}

/// SIMGPU_LOG=debug: one line per fatbin launch with its cost.
static DEBUG: LazyLock<bool> =
    LazyLock::new(|| std::env::var("SIMGPU_LOG").is_ok_and(|v| v == "debug"));

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

fn say_once(r: &mut Registry, msg: String) {
    if r.said.insert(msg.clone()) {
        eprintln!("simgpu: {msg}");
    }
}

/// Reads a u32 from the program's memory.
///
/// # Safety
/// `p` must point to 4 readable bytes.
unsafe fn read_u32(p: *const u8) -> u32 {
    // SAFETY: per the function's contract.
    unsafe { std::ptr::read_unaligned(p as *const u32) }
}

/// Registers a fatbin: `wrapper` is what the program passes to `__cudaRegisterFatBinary`.
/// Returns an opaque module handle (NULL, with a message, when `wrapper` is not a fatbin wrapper).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn simgpuRegisterFatbinary(wrapper: *const c_void) -> *mut c_void {
    if wrapper.is_null() {
        eprintln!("simgpu: simgpuRegisterFatbinary: NULL fatbin wrapper");
        return std::ptr::null_mut();
    }
    let w = wrapper as *const u8;
    // SAFETY: the runtime passes the program's fatbin wrapper: {u32 magic, u32 version, data*,
    // ...}; its first word is readable. A bare container (its own magic) is accepted too.
    let magic = unsafe { read_u32(w) };
    let data = if magic == WRAPPER_MAGIC {
        // SAFETY: a wrapper holds the data pointer at offset 8 (after magic and version).
        unsafe { std::ptr::read_unaligned(w.add(8) as *const usize) }
    } else if magic == fatbin::FATBIN_MAGIC {
        w as usize
    } else {
        eprintln!(
            "simgpu: simgpuRegisterFatbinary: magic {magic:#x} is neither a fatbin wrapper \
             ({WRAPPER_MAGIC:#x}) nor a fatbin ({:#x})",
            fatbin::FATBIN_MAGIC
        );
        return std::ptr::null_mut();
    };
    let mut r = registry();
    r.next += 1;
    // Handles are small odd-looking numbers, never dereferenced.
    let id = 0x5f00_0000 + r.next * 16;
    r.modules.insert(
        id,
        Module {
            data,
            loaded: false,
            parsed: None,
            funcs: Vec::new(),
        },
    );
    id as *mut c_void
}

/// Records that the host stub `host_fun` is kernel `device_name` (mangled) of `module`.
/// 0 on success; CUDA_ERROR_INVALID_VALUE / INVALID_HANDLE otherwise.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn simgpuRegisterFunction(
    module: *mut c_void,
    host_fun: *const c_void,
    device_name: *const c_char,
) -> c_int {
    if host_fun.is_null() || device_name.is_null() {
        return crate::INVALID_VALUE;
    }
    // SAFETY: device_name is the NUL-terminated mangled name the program registers.
    let name = unsafe { CStr::from_ptr(device_name) }
        .to_string_lossy()
        .into_owned();
    let mut r = registry();
    let Some(m) = r.modules.get_mut(&(module as usize)) else {
        return crate::INVALID_HANDLE;
    };
    m.funcs.push(host_fun as usize);
    r.funcs.insert(
        host_fun as usize,
        Func {
            module: module as usize,
            name,
            params: None,
            demangled: None,
            ptx: None,
        },
    );
    crate::SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn simgpuUnregisterFatbinary(module: *mut c_void) {
    let mut r = registry();
    if let Some(m) = r.modules.remove(&(module as usize)) {
        for f in m.funcs {
            if r.funcs.get(&f).is_some_and(|k| k.module == module as usize) {
                r.funcs.remove(&f);
            }
        }
    }
}

/// The first handle of a function of a loaded module (`cuModuleGetFunction`): a range no host
/// stub of the program can sit at (not a canonical user-space address), 16 bytes apart.
const LOADED_FUNC_BASE: usize = 0x5f5f_0000_0000_0000;

/// Adds a module the program loaded (`cuModuleLoadData(Ex)`), already parsed; its `CUmodule`.
pub fn add_loaded(parsed: Parsed) -> usize {
    let mut r = registry();
    r.next += 1;
    let id = 0x5f00_0000 + r.next * 16;
    r.modules.insert(
        id,
        Module {
            data: 0,
            loaded: true,
            parsed: Some(Ok(Arc::new(parsed))),
            funcs: Vec::new(),
        },
    );
    id
}

/// The loaded module `module`'s kernels, to look one up by name.
fn loaded_module(r: &Registry, module: usize) -> Result<Arc<Parsed>, CUresult> {
    match r.modules.get(&module) {
        Some(Module {
            loaded: true,
            parsed: Some(Ok(p)),
            ..
        }) => Ok(p.clone()),
        _ => Err(crate::INVALID_HANDLE),
    }
}

/// `cuModuleGetFunction`: the handle of kernel `name` of a loaded module (the same handle each
/// time it is asked), or CUDA_ERROR_NOT_FOUND.
pub fn loaded_function(module: usize, name: &str) -> Result<usize, CUresult> {
    let mut r = registry();
    let parsed = loaded_module(&r, module)?;
    let Some(k) = parsed.kernels.get(name) else {
        return Err(NOT_FOUND);
    };
    let known = r.modules[&module]
        .funcs
        .iter()
        .copied()
        .find(|f| r.funcs.get(f).is_some_and(|k| k.name == name));
    if let Some(f) = known {
        return Ok(f);
    }
    r.next += 1;
    let f = LOADED_FUNC_BASE + r.next * 16;
    r.funcs.insert(
        f,
        Func {
            module,
            name: name.to_string(),
            params: Some(Ok(Arc::new(k.clone()))),
            demangled: None,
            ptx: parsed.ptx.get(name).cloned(),
        },
    );
    if let Some(m) = r.modules.get_mut(&module) {
        m.funcs.push(f);
    }
    Ok(f)
}

/// Whether a loaded module has a kernel or a global named `name` (for messages).
pub fn loaded_names(module: usize) -> Result<Vec<String>, CUresult> {
    let r = registry();
    let p = loaded_module(&r, module)?;
    let mut v: Vec<String> = p.kernels.keys().cloned().collect();
    v.sort();
    Ok(v)
}

/// `cuModuleUnload`: forgets a loaded module and its functions.
pub fn unload(module: usize) -> Result<(), CUresult> {
    let mut r = registry();
    loaded_module(&r, module)?;
    if let Some(m) = r.modules.remove(&module) {
        for f in m.funcs {
            r.funcs.remove(&f);
        }
    }
    Ok(())
}

/// Whether `f` is a registered fatbin kernel's host stub.
pub fn is_registered(f: usize) -> bool {
    registry().funcs.contains_key(&f)
}

/// The device's compute capability as one number (sm_90 -> 90).
fn device_cc() -> Result<u32, CUresult> {
    let d = lock()?;
    let [ma, mi] = d.profile.compute_capability;
    Ok((ma * 10 + mi).max(0) as u32)
}

fn parse_module(r: &mut Registry, id: usize, cc: u32) -> Result<Arc<Parsed>, CUresult> {
    let m = r.modules.get(&id).ok_or(crate::INVALID_HANDLE)?;
    if let Some(p) = &m.parsed {
        return p.clone();
    }
    let data = m.data as *const u8;
    let res = (|| -> Result<Parsed, FatbinError> {
        if data.is_null() {
            return Err(FatbinError::Invalid("NULL fatbin data".into()));
        }
        // SAFETY: a registered fatbin stays mapped in the program until it is unregistered; its
        // 16-byte header states the container's length.
        let head = unsafe { std::slice::from_raw_parts(data, 16) };
        let len = fatbin::container_len(head)?;
        // SAFETY: as above, the container is `len` bytes long.
        let all = unsafe { std::slice::from_raw_parts(data, len) };
        fatbin::parse(all, cc)
    })();
    let res = match res {
        Ok(p) => {
            if p.fallback {
                say_once(
                    r,
                    format!(
                        "the fatbins hold no cubin for this device (sm_{cc}); kernel parameters \
                         come from the lowest one, sm_{} (a real driver would refuse to run them)",
                        p.arch
                    ),
                );
            }
            Ok(Arc::new(p))
        }
        Err(e) => {
            let code = match e {
                FatbinError::Invalid(_) => INVALID_IMAGE,
                FatbinError::NoBinary(_) => NO_BINARY_FOR_GPU,
            };
            say_once(r, format!("fatbin at {:#x}: {e}", data as usize));
            Err(code)
        }
    };
    if let Some(m) = r.modules.get_mut(&id) {
        m.parsed = Some(res.clone());
    }
    res
}

/// The parameter layout of a registered kernel (parsing its fatbin on first use).
pub fn params(f: usize) -> Result<Arc<KernelParams>, CUresult> {
    let cc = device_cc()?;
    let mut r = registry();
    let (module, name) = match r.funcs.get(&f) {
        Some(k) => {
            if let Some(p) = &k.params {
                return p.clone();
            }
            (k.module, k.name.clone())
        }
        None => return Err(crate::INVALID_HANDLE),
    };
    let res = parse_module(&mut r, module, cc).and_then(|p| match p.kernels.get(&name) {
        Some(k) => Ok(Arc::new(k.clone())),
        None => {
            say_once(
                &mut r,
                format!("kernel {name} is not in its fatbin's sm_{} cubin", p.arch),
            );
            Err(NOT_FOUND)
        }
    });
    if let Some(k) = r.funcs.get_mut(&f) {
        k.params = Some(res.clone());
    }
    res
}

/// The architecture of the cubin a registered kernel runs from on this device (sm_75 -> 75): what
/// the driver reports as the function's PTX and binary version. On a device older than every
/// cubin (p100 under an sm_75+ build) that is the fallback cubin's, not the device's: programs
/// that pick code paths from it (CUB's policy selection) then see the code they would run.
pub fn cubin_arch(f: usize) -> Option<u32> {
    let cc = device_cc().ok()?;
    let mut r = registry();
    let module = r.funcs.get(&f)?.module;
    parse_module(&mut r, module, cc).ok().map(|p| p.arch)
}

/// The PTX of a kernel loaded from PTX text.
pub fn ptx(f: usize) -> Option<Arc<PtxEntry>> {
    registry().funcs.get(&f).and_then(|k| k.ptx.clone())
}

/// The mangled name of a registered kernel.
pub fn name(f: usize) -> Option<String> {
    registry().funcs.get(&f).map(|k| k.name.clone())
}

/// The demangled name (the mangled one when it does not demangle), cached.
pub fn demangled(f: usize) -> Option<Arc<str>> {
    let mut r = registry();
    let k = r.funcs.get_mut(&f)?;
    if k.demangled.is_none() {
        let d = cpp_demangle::Symbol::new(k.name.as_bytes())
            .ok()
            .and_then(|s| s.demangle().ok())
            .unwrap_or_else(|| k.name.clone());
        k.demangled = Some(d.into());
    }
    k.demangled.clone()
}

/// The parameter block of one launch, packed at the cubin's offsets, from either `kernelParams`
/// (one pointer per parameter) or the `extra` buffer.
fn gather(
    k: &KernelParams,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Result<Vec<u8>, CUresult> {
    let mut block = vec![0u8; k.block_len()];
    if !params.is_null() {
        for (i, &(off, size)) in k.params.iter().enumerate() {
            // SAFETY: kernelParams holds one pointer per parameter, each to `size` bytes (the
            // API's contract, with the sizes the kernel's cubin states).
            let src = unsafe { *params.add(i) } as *const u8;
            if src.is_null() {
                return Err(crate::INVALID_VALUE);
            }
            // SAFETY: as above.
            let v = unsafe { std::slice::from_raw_parts(src, size) };
            block[off..off + size].copy_from_slice(v);
        }
    } else if !extra.is_null() {
        let (buf, size) = crate::extra_buffer(extra)?;
        if buf.is_null() || size < block.len() {
            return Err(crate::INVALID_VALUE);
        }
        // SAFETY: the extra buffer holds `size` >= block.len() bytes (checked).
        let n = block.len();
        block.copy_from_slice(unsafe { std::slice::from_raw_parts(buf, n) });
    } else if !k.params.is_empty() {
        return Err(crate::INVALID_VALUE);
    }
    Ok(block)
}

/// The cost model's time for one launch: the pointer-sized words of the parameter block that
/// are device addresses give the bytes the kernel may touch; the first parameter, when an
/// integer, its element count (torch's element-wise kernels take `int N` first).
fn estimate(
    d: &crate::Device,
    k: &KernelParams,
    pblock: &[u8],
    name: &str,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
) -> KernelCost {
    let mut addrs = Vec::new();
    for &(off, size) in &k.params {
        let mut at = off.div_ceil(8) * 8;
        while at + 8 <= off + size {
            let v = u64::from_le_bytes(pblock[at..at + 8].try_into().unwrap_or_default());
            if d.is_device(v) {
                addrs.push(v);
            }
            at += 8;
        }
    }
    let first_int = k.params.first().and_then(|&(off, size)| match size {
        4 => Some(i32::from_le_bytes(pblock[off..off + 4].try_into().ok()?) as i64),
        8 => {
            let v = i64::from_le_bytes(pblock[off..off + 8].try_into().ok()?);
            (!d.is_device(v as u64)).then_some(v)
        }
        _ => None,
    });
    let launch = KernelLaunch {
        name,
        grid,
        block,
        shared,
        first_int,
        pointed_bytes: d.reach(&addrs) as f64,
        params: pblock,
    };
    kernels::cost(&d.profile, &d.profile.torch_kernels, &launch)
}

/// Launches a registered fatbin kernel: computed on the host when [`crate::host_kernels`] knows
/// it, else only timed; the stream's clock advances by the cost model. `None` when `f` is not a fatbin kernel.
pub fn launch(
    f: usize,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    stream: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Option<CUresult> {
    if !is_registered(f) {
        return None;
    }
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        launch_inner(f, grid, block, shared, stream, params, extra)
    }));
    Some(run.unwrap_or_else(|_| {
        eprintln!("simgpu: internal error (panic) launching a fatbin kernel");
        crate::UNKNOWN
    }))
}

fn launch_inner(
    f: usize,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    stream: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    let k = match self::params(f) {
        Ok(k) => k,
        Err(e) => return e,
    };
    if grid.contains(&0) || block.contains(&0) || block.iter().product::<u32>() > 1024 {
        return crate::INVALID_VALUE;
    }
    let pblock = match gather(&k, params, extra) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let name = demangled(f).unwrap_or_else(|| "?".into());
    let ptx = ptx(f);
    crate::with(|d| {
        if !d.valid_stream(stream as u64) {
            return Err(crate::INVALID_HANDLE);
        }
        d.count_launch()?;
        d.counters.kernels += 1;
        // Kernels are computed at launch: execution is eager (see docs/simgpu.md).
        let computed = host_kernels::run(&name, &k, &pblock, grid, d).or_else(|| {
            let e = ptx.as_ref()?;
            Some(host_kernels::ptx_exec::run(e, &k, &pblock, grid, block, d))
        });
        let not_computed = match computed {
            Some(Ok(())) | Some(Err(Skip::NoBytes)) => None,
            Some(Err(Skip::Layout(why))) => Some(why),
            None => Some("no host implementation".to_string()),
        };
        // At debug, the launch's parameter layout and block: what a host kernel is written from.
        let not_computed = not_computed.map(|why| {
            if *DEBUG {
                let hex: String = pblock.iter().map(|b| format!("{b:02x}")).collect();
                format!("{why}; parameters {:?}, block {hex}", k.params)
            } else {
                why
            }
        });
        if let Some(why) = not_computed
            && host_kernels::first_skip(&name)
        {
            if d.mode == crate::Mode::Data {
                eprintln!(
                    "simgpu: kernel {name} is not computed ({why}): launched for its time only \
                     (run such programs with SIMGPU_MODE=shape)"
                );
            } else if *DEBUG {
                eprintln!("simgpu: kernel {name} is not computed ({why}): its time only");
            }
        }
        let c = estimate(d, &k, &pblock, &name, grid, block, shared);
        if *DEBUG {
            eprintln!(
                "simgpu: kernel {name} grid {grid:?} block {block:?}: {} family, {:.0} bytes, \
                 {:.0} flops, {:.2} us (simulated)",
                c.family.name(),
                c.bytes,
                c.flops,
                c.seconds * 1e6
            );
        }
        let fam = d.fatbin_families.entry(c.family.name()).or_default();
        fam.0 += 1;
        fam.1 += c.seconds;
        fam.2 += c.bytes;
        let host = d.profile.launch();
        d.issue(stream as u64, crate::ENGINE_COMPUTE, c.seconds, host)?;
        Ok(())
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fatbin::fixture;

    /// A test's turn at the one simulated device, with device 0's context bound to its thread
    /// (the driver's calls need one there, as a real driver program binds one first). The tests
    /// that launch kernels take turns: the compute engine is shared, so a kernel of one test
    /// queues behind another's, and a launch timed while another test launches takes longer on
    /// the virtual clock.
    pub(crate) fn launching() -> MutexGuard<'static, ()> {
        static LAUNCHING: Mutex<()> = Mutex::new(());
        let turn = LAUNCHING.lock().unwrap_or_else(|e| e.into_inner());
        crate::devices::set_current(0).expect("device 0");
        turn
    }

    #[test]
    fn register_then_ask_lazily() {
        let _turn = launching();
        let elf = fixture::elf(&[(".nv.info._Z1kiPf", fixture::nv_info(&[(0, 4), (8, 8)], 16))]);
        let fb = fixture::fatbin(&[(90, elf)], true);
        #[repr(C)]
        struct Wrapper {
            magic: u32,
            version: u32,
            data: *const u8,
            rest: *const u8,
        }
        let w = Wrapper {
            magic: WRAPPER_MAGIC,
            version: 1,
            data: fb.as_ptr(),
            rest: std::ptr::null(),
        };
        static STUB_A: u8 = 0;
        static STUB_B: u8 = 0;
        let (a, b) = (&STUB_A as *const u8 as usize, &STUB_B as *const u8 as usize);
        // SAFETY: a live wrapper and NUL-terminated names.
        let m = unsafe { simgpuRegisterFatbinary(&w as *const Wrapper as *const c_void) };
        assert!(!m.is_null());
        // SAFETY: as above.
        unsafe {
            assert_eq!(
                simgpuRegisterFunction(m, a as *const c_void, c"_Z1kiPf".as_ptr()),
                0
            );
            assert_eq!(
                simgpuRegisterFunction(m, b as *const c_void, c"_Z7missingv".as_ptr()),
                0
            );
            assert_eq!(
                simgpuRegisterFunction(0x77 as *mut c_void, b as *const c_void, c"x".as_ptr()),
                crate::INVALID_HANDLE
            );
        }
        assert!(registry().modules[&(m as usize)].parsed.is_none());
        assert_eq!(params(a).unwrap().params, vec![(0, 4), (8, 8)]);
        assert!(registry().modules[&(m as usize)].parsed.is_some());
        assert_eq!(params(b).unwrap_err(), NOT_FOUND);
        assert_eq!(demangled(a).unwrap().as_ref(), "k(int, float*)");

        // Through the driver's entry points, as the runtime calls them.
        let (mut off, mut size) = (0usize, 0usize);
        assert_eq!(
            crate::cuFuncGetParamInfo(a as Handle, 1, &mut off, &mut size),
            0
        );
        assert_eq!((off, size), (8, 8));
        assert_eq!(
            crate::cuFuncGetParamInfo(a as Handle, 2, &mut off, &mut size),
            1
        );
        assert_eq!(
            crate::cuFuncGetParamInfo(b as Handle, 0, &mut off, &mut size),
            NOT_FOUND
        );
        let (mut e0, mut e1) = (std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!(crate::cuEventCreate(&mut e0, 0), 0);
        assert_eq!(crate::cuEventCreate(&mut e1, 0), 0);
        let s = crate::device::STREAM_PER_THREAD as Handle;
        assert_eq!(crate::cuEventRecord(e0, s), 0);
        let (mut n, mut p): (i32, u64) = (1000, 0);
        let mut args = [
            &mut n as *mut i32 as *mut c_void,
            &mut p as *mut u64 as *mut c_void,
        ];
        let null = std::ptr::null_mut();
        let launch = |f: usize, args: *mut *mut c_void| {
            crate::cuLaunchKernel(f as Handle, 2, 1, 1, 128, 1, 1, 0, s, args, null)
        };
        assert_eq!(launch(a, args.as_mut_ptr()), 0);
        assert_eq!(crate::cuEventRecord(e1, s), 0);
        assert_eq!(crate::cuEventSynchronize(e1), 0);
        let mut ms = 0f32;
        assert_eq!(crate::cuEventElapsedTime(&mut ms, e0, e1), 0);
        assert!(ms > 0.0, "the stream's clock advanced: {ms} ms");
        assert_eq!(launch(b, args.as_mut_ptr()), NOT_FOUND);
        assert_eq!(launch(a, null), crate::INVALID_VALUE);
        // SAFETY: a handle from simgpuRegisterFatbinary.
        unsafe { simgpuUnregisterFatbinary(m) };
        assert!(!is_registered(a));
        assert_eq!(params(a).unwrap_err(), crate::INVALID_HANDLE);
    }

    #[test]
    fn a_kernel_reports_the_version_of_the_cubin_it_runs_from() {
        // The tests' device is an h100 (sm_90). One fatbin has an sm_90 cubin; the other only
        // sm_75 and sm_80, which a real driver would refuse on sm_90 and the simulator runs from
        // the lowest: its functions must say 75, not the device's 90 (CUB picks its code from it).
        let nv = || fixture::elf(&[(".nv.info._Z1vv", fixture::nv_info(&[(0, 4)], 4))]);
        let native = fixture::fatbin(&[(90, nv())], true);
        let older = fixture::fatbin(&[(80, nv()), (75, nv())], true);
        static STUB_N: u8 = 0;
        static STUB_O: u8 = 0;
        let n = &STUB_N as *const u8 as usize;
        let o = &STUB_O as *const u8 as usize;
        // SAFETY: bare fatbin containers (accepted like wrappers) and NUL-terminated names.
        unsafe {
            for (fb, f) in [(&native, n), (&older, o)] {
                let m = simgpuRegisterFatbinary(fb.as_ptr() as *const c_void);
                assert!(!m.is_null());
                assert_eq!(
                    simgpuRegisterFunction(m, f as *const c_void, c"_Z1vv".as_ptr()),
                    0
                );
            }
        }
        let attr = |f: usize, a: i32| {
            let mut v = -1;
            assert_eq!(
                crate::context::cuFuncGetAttribute(&mut v, a, f as Handle),
                0
            );
            v
        };
        // CU_FUNC_ATTRIBUTE_PTX_VERSION (5) and BINARY_VERSION (6).
        assert_eq!((attr(n, 5), attr(n, 6)), (90, 90));
        assert_eq!((attr(o, 5), attr(o, 6)), (75, 75));
    }

    /// Seconds one launch of `f` with these arguments adds to a fresh stream's clock.
    fn timed(f: usize, grid: u32, args: &mut [*mut c_void]) -> f64 {
        let mut s = std::ptr::null_mut();
        assert_eq!(crate::cuStreamCreate(&mut s, 1), 0);
        let (mut e0, mut e1) = (std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!(crate::cuEventCreate(&mut e0, 0), 0);
        assert_eq!(crate::cuEventCreate(&mut e1, 0), 0);
        assert_eq!(crate::cuEventRecord(e0, s), 0);
        let null = std::ptr::null_mut();
        let r = crate::cuLaunchKernel(
            f as Handle,
            grid,
            1,
            1,
            256,
            1,
            1,
            0,
            s,
            args.as_mut_ptr(),
            null,
        );
        assert_eq!(r, 0);
        assert_eq!(crate::cuEventRecord(e1, s), 0);
        assert_eq!(crate::cuEventSynchronize(e1), 0);
        let mut ms = 0f32;
        assert_eq!(crate::cuEventElapsedTime(&mut ms, e0, e1), 0);
        ms as f64 * 1e-3
    }

    #[test]
    fn launch_time_follows_the_bytes_its_pointers_reach() {
        let _turn = launching();
        // copy(float* dst, float const* src, long n): a plain memory-bound kernel.
        let elf = fixture::elf(&[(
            ".nv.info._Z4copyPfPKfl",
            fixture::nv_info(&[(0, 8), (8, 8), (16, 8)], 24),
        )]);
        let fb = fixture::fatbin(&[(90, elf)], true);
        static STUB: u8 = 0;
        let f = &STUB as *const u8 as usize;
        // SAFETY: a bare fatbin container (accepted like a wrapper) and a NUL-terminated name.
        unsafe {
            let m = simgpuRegisterFatbinary(fb.as_ptr() as *const c_void);
            assert_eq!(
                simgpuRegisterFunction(m, f as *const c_void, c"_Z4copyPfPKfl".as_ptr()),
                0
            );
        }
        let mib = 1u64 << 20;
        let (mut a, mut b) = (0u64, 0u64);
        assert_eq!(crate::cuMemAlloc_v2(&mut a, (256 * mib) as usize), 0);
        assert_eq!(crate::cuMemAlloc_v2(&mut b, (256 * mib) as usize), 0);
        let mut n = 1i64;
        let mut run = |dst: u64, src: u64, grid: u32| {
            let (mut dst, mut src) = (dst, src);
            let mut args = [
                &mut dst as *mut u64 as *mut c_void,
                &mut src as *mut u64 as *mut c_void,
                &mut n as *mut i64 as *mut c_void,
            ];
            timed(f, grid, &mut args)
        };
        let full = run(a, b, 4096);
        // 512 MiB moved at the profile's streaming rate (h100: 0.9 of 3.35 TB/s), give or take
        // the launch latency: an independent figure, not the model's formula.
        let (p, _) = simgpu_model::Profile::load("h100").unwrap();
        let rate = (512 * mib) as f64 / full;
        let want = p.mem_bw_gbs * 1e9 * p.torch_kernels.stream_efficiency;
        assert!((rate / want - 1.0).abs() < 0.05, "{rate:e} B/s vs {want:e}");
        // A pointer into the middle of an allocation counts from there to its end (a view).
        let half = run(a + 128 * mib, b + 128 * mib, 4096);
        assert!((full / half - 2.0).abs() < 0.1, "{full} vs {half}");
        // The same allocation twice is counted once.
        let same = run(a, a, 4096);
        assert!((full / same - 2.0).abs() < 0.1, "{full} vs {same}");
        // A handful of blocks of a kernel that does not stride over its grid cannot touch 512 MiB.
        assert!(run(a, b, 4) < full / 10.0);
        assert_eq!(crate::cuMemFree_v2(a), 0);
        assert_eq!(crate::cuMemFree_v2(b), 0);
    }
}
