//! Modules a program loads itself, as TensorFlow loads its MLIR-generated kernels:
//! `cuModuleLoadData(Ex)` / `cuModuleLoadFatBinary` take a fatbin (zstd- or LZ4-compressed
//! cubins), a wrapper around one, a bare cubin or PTX text; `cuModuleGetFunction` finds a kernel
//! by name (then launched with `cuLaunchKernel`, timed as any fatbin kernel), `cuModuleGetGlobal`
//! a module variable (device memory allocated on first request, freed at `cuModuleUnload`).
//!
//! The image is read when it is loaded, as the real driver does: the caller may free it after.
//! Bad input is a message and a CUDA error (CUDA_ERROR_INVALID_IMAGE, CUDA_ERROR_INVALID_PTX,
//! CUDA_ERROR_NO_BINARY_FOR_GPU), never a crash; with `cuModuleLoadDataEx` the message goes to
//! the caller's error log buffer too.

use crate::fatbin::{self, FatbinError, KIND_PTX, Parsed, WRAPPER_MAGIC};
use crate::modules::{self, INVALID_IMAGE, NO_BINARY_FOR_GPU, NOT_FOUND};
use crate::{CUdeviceptr, CUresult, Handle, INVALID_HANDLE, INVALID_VALUE, SUCCESS, UNKNOWN};
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_uint, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{LazyLock, Mutex};

/// CUDA_ERROR_INVALID_PTX (cuda.h).
pub const INVALID_PTX: CUresult = 218;

/// `CUjit_option`s whose values this driver writes (cuda.h): the error log buffer and its size.
const JIT_ERROR_LOG_BUFFER: c_uint = 5;
const JIT_ERROR_LOG_BUFFER_SIZE_BYTES: c_uint = 6;
/// The info log buffer's size: written back as 0 (the simulator logs nothing there).
const JIT_INFO_LOG_BUFFER_SIZE_BYTES: c_uint = 4;

/// Each loaded module's variables: name -> size, and the device memory given out for them.
#[derive(Default)]
struct Globals {
    sizes: HashMap<String, usize>,
    memory: HashMap<String, CUdeviceptr>,
}

static GLOBALS: LazyLock<Mutex<HashMap<usize, Globals>>> = LazyLock::new(Default::default);

fn globals() -> std::sync::MutexGuard<'static, HashMap<usize, Globals>> {
    GLOBALS.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a module image is.
#[derive(Debug, PartialEq, Eq)]
pub enum Image<'a> {
    Fatbin(&'a [u8]),
    Cubin(&'a [u8]),
    Ptx(&'a str),
}

/// Reads the image at `p`: its kind from its first bytes, its length from its own header (a
/// fatbin's, an ELF's section table) or its NUL (PTX), as the real driver does.
///
/// # Safety
/// `p` must point to a module image as `cuModuleLoadData` takes it.
unsafe fn image<'a>(p: *const u8) -> Result<Image<'a>, (CUresult, String)> {
    let invalid = |s: String| (INVALID_IMAGE, s);
    // SAFETY: every image starts with at least 4 readable bytes (a magic or PTX text).
    let magic = unsafe { std::ptr::read_unaligned(p as *const u32) };
    if magic == WRAPPER_MAGIC {
        // SAFETY: a wrapper is {u32 magic, u32 version, data*, ...}.
        let data = unsafe { std::ptr::read_unaligned(p.add(8) as *const *const u8) };
        if data.is_null() {
            return Err(invalid("fatbin wrapper with a NULL fatbin".into()));
        }
        // SAFETY: the wrapper's data is a fatbin container.
        return unsafe { image(data) };
    }
    if magic == fatbin::FATBIN_MAGIC {
        // SAFETY: a container starts with its 16-byte header, which states its length.
        let head = unsafe { std::slice::from_raw_parts(p, 16) };
        let len = fatbin::container_len(head).map_err(|e| invalid(e.to_string()))?;
        // SAFETY: as above: the container is `len` bytes long.
        return Ok(Image::Fatbin(unsafe { std::slice::from_raw_parts(p, len) }));
    }
    if magic == u32::from_le_bytes(*b"\x7fELF") {
        // SAFETY: an ELF64 header is 64 bytes; e_shoff (u64 at 40), e_shentsize (u16 at 58) and
        // e_shnum (u16 at 60) give the end of the section table, the end of a cubin.
        let h = unsafe { std::slice::from_raw_parts(p, 64) };
        let shoff = u64::from_le_bytes(h[40..48].try_into().unwrap_or_default()) as usize;
        let shentsize = u16::from_le_bytes([h[58], h[59]]) as usize;
        let shnum = u16::from_le_bytes([h[60], h[61]]) as usize;
        if h[4] != 2 || shoff == 0 || shoff > 1 << 32 {
            return Err(invalid(
                "cubin: not a 64-bit ELF with a section table".into(),
            ));
        }
        let len = shoff + shentsize * shnum;
        // SAFETY: as above: the ELF runs to the end of its section table.
        return Ok(Image::Cubin(unsafe { std::slice::from_raw_parts(p, len) }));
    }
    // SAFETY: anything else must be NUL-terminated PTX text.
    let text = unsafe { CStr::from_ptr(p as *const c_char) };
    let ok = crate::ptx::is_ptx(text.to_bytes());
    match text.to_str() {
        Ok(t) if ok => Ok(Image::Ptx(t)),
        _ => Err(invalid(format!(
            "module image starts with {magic:#010x}: neither a fatbin ({:#x}), a fatbin \
             wrapper ({WRAPPER_MAGIC:#x}), an ELF cubin nor PTX text",
            fatbin::FATBIN_MAGIC
        ))),
    }
}

/// Globals of a cubin: its object symbols with their sizes.
fn cubin_globals(elf: &[u8]) -> HashMap<String, usize> {
    use object::{Object, ObjectSymbol, SymbolKind};
    let Ok(file) = object::File::parse(elf) else {
        return HashMap::new();
    };
    file.symbols()
        .filter(|s| s.kind() == SymbolKind::Data && s.size() > 0)
        .filter_map(|s| Some((s.name().ok()?.to_string(), s.size() as usize)))
        .collect()
}

/// The module's kernels and variables, for a device of compute capability `cc`.
pub fn load(img: &Image, cc: u32) -> Result<(Parsed, HashMap<String, usize>), (CUresult, String)> {
    let code = |e: FatbinError| match e {
        FatbinError::Invalid(s) => (INVALID_IMAGE, s),
        FatbinError::NoBinary(s) => (NO_BINARY_FOR_GPU, s),
    };
    match img {
        Image::Fatbin(data) => {
            let ents = fatbin::entries(data).map_err(code)?;
            let arch = match fatbin::choose_arch(&ents, cc) {
                Ok((a, _)) => a,
                // PTX only: the real driver compiles it; its kernels are the PTX's.
                Err(FatbinError::NoBinary(s)) => {
                    let Some(e) = ents.iter().find(|e| e.kind == KIND_PTX) else {
                        return Err((NO_BINARY_FOR_GPU, s));
                    };
                    let text = fatbin::payload(data, e).map_err(code)?;
                    let text = text.split(|&b| b == 0).next().unwrap_or(&[]);
                    let text = std::str::from_utf8(text)
                        .map_err(|_| (INVALID_PTX, "fatbin PTX is not text".to_string()))?;
                    return crate::ptx::parse(text).map_err(|e| (INVALID_PTX, e.to_string()));
                }
                Err(e) => return Err(code(e)),
            };
            let mut globals = HashMap::new();
            for e in ents
                .iter()
                .filter(|e| e.kind == fatbin::KIND_CUBIN && e.arch == arch)
            {
                let elf = fatbin::payload(data, e).map_err(code)?;
                globals.extend(cubin_globals(&elf));
            }
            Ok((fatbin::parse(data, cc).map_err(code)?, globals))
        }
        Image::Cubin(elf) => {
            let kernels = fatbin::cubin_kernels(elf).map_err(code)?;
            Ok((
                Parsed {
                    arch: cc,
                    fallback: false,
                    kernels,
                    ptx: HashMap::new(),
                },
                cubin_globals(elf),
            ))
        }
        Image::Ptx(text) => crate::ptx::parse(text).map_err(|e| (INVALID_PTX, e.to_string())),
    }
}

/// Writes `msg` into a `cuModuleLoadDataEx` error log buffer, if the caller gave one.
///
/// # Safety
/// `options` / `values` hold `n` entries each, as cuModuleLoadDataEx takes them.
unsafe fn log_error(n: c_uint, options: *const c_uint, values: *mut *mut c_void, msg: &str) {
    if n == 0 || options.is_null() || values.is_null() {
        return;
    }
    // SAFETY: per the function's contract.
    let (opts, vals) = unsafe {
        (
            std::slice::from_raw_parts(options, n as usize),
            std::slice::from_raw_parts_mut(values, n as usize),
        )
    };
    let (mut buf, mut size) = (None, None);
    for (i, &o) in opts.iter().enumerate() {
        match o {
            JIT_ERROR_LOG_BUFFER => buf = Some(vals[i] as *mut u8),
            // The size is passed by value in the pointer-sized slot (cuda.h).
            JIT_ERROR_LOG_BUFFER_SIZE_BYTES => size = Some((i, vals[i] as usize)),
            _ => {}
        }
    }
    if let (Some(buf), Some((i, size))) = (buf, size)
        && !buf.is_null()
        && size > 0
    {
        let n = msg.len().min(size - 1);
        // SAFETY: the caller's buffer holds `size` bytes; we write n + 1 <= size.
        unsafe {
            std::ptr::copy_nonoverlapping(msg.as_ptr(), buf, n);
            *buf.add(n) = 0;
        }
        // The driver writes back how much it used.
        vals[i] = (n + 1) as *mut c_void;
    }
    for (i, &o) in opts.iter().enumerate() {
        if o == JIT_INFO_LOG_BUFFER_SIZE_BYTES {
            vals[i] = std::ptr::null_mut();
        }
    }
}

fn guarded(f: impl FnOnce() -> CUresult) -> CUresult {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        eprintln!("simgpu: internal error (panic) in the simulated driver's module loader");
        UNKNOWN
    })
}

fn load_into(
    module: *mut Handle,
    img: *const c_void,
    n: c_uint,
    options: *const c_uint,
    values: *mut *mut c_void,
    call: &str,
) -> CUresult {
    guarded(|| {
        if module.is_null() || img.is_null() {
            return INVALID_VALUE;
        }
        let cc = match crate::lock() {
            Ok(d) => {
                let [ma, mi] = d.profile.compute_capability;
                (ma * 10 + mi).max(0) as u32
            }
            Err(e) => return e,
        };
        // SAFETY: img is the caller's module image (the API's contract).
        let res = unsafe { image(img as *const u8) }.and_then(|i| load(&i, cc));
        match res {
            Ok((parsed, sizes)) => {
                let id = modules::add_loaded(parsed);
                globals().insert(
                    id,
                    Globals {
                        sizes,
                        memory: HashMap::new(),
                    },
                );
                // SAFETY: non-null output pointer for a CUmodule.
                unsafe { module.write(id as Handle) };
                SUCCESS
            }
            Err((code, msg)) => {
                eprintln!("simgpu: {call}: {msg}");
                // SAFETY: the options arrays as the caller passed them.
                unsafe { log_error(n, options, values, &msg) };
                code
            }
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuModuleLoadData(module: *mut Handle, image: *const c_void) -> CUresult {
    load_into(
        module,
        image,
        0,
        std::ptr::null(),
        std::ptr::null_mut(),
        "cuModuleLoadData",
    )
}

/// JIT options are accepted and, but for the error log, have no effect (nothing is compiled).
#[unsafe(no_mangle)]
pub extern "C" fn cuModuleLoadDataEx(
    module: *mut Handle,
    image: *const c_void,
    n: c_uint,
    options: *const c_uint,
    values: *mut *mut c_void,
) -> CUresult {
    load_into(module, image, n, options, values, "cuModuleLoadDataEx")
}

#[unsafe(no_mangle)]
pub extern "C" fn cuModuleLoadFatBinary(module: *mut Handle, fatbin: *const c_void) -> CUresult {
    load_into(
        module,
        fatbin,
        0,
        std::ptr::null(),
        std::ptr::null_mut(),
        "cuModuleLoadFatBinary",
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleGetFunction(
    f: *mut Handle,
    module: Handle,
    name: *const c_char,
) -> CUresult {
    guarded(|| {
        if f.is_null() || name.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: a NUL-terminated kernel name (the API's contract).
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        match modules::loaded_function(module as usize, &name) {
            Ok(h) => {
                // SAFETY: non-null output pointer for a CUfunction.
                unsafe { f.write(h as Handle) };
                SUCCESS
            }
            Err(NOT_FOUND) => {
                let have = modules::loaded_names(module as usize).unwrap_or_default();
                eprintln!(
                    "simgpu: cuModuleGetFunction: no kernel {name} in module {module:p} (it has: \
                     {})",
                    have.join(", ")
                );
                NOT_FOUND
            }
            Err(e) => e,
        }
    })
}

/// Device memory for a module variable (allocated on its first request), and its size; either
/// output may be NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleGetGlobal_v2(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    module: Handle,
    name: *const c_char,
) -> CUresult {
    guarded(|| {
        if name.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: a NUL-terminated variable name (the API's contract).
        let name = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        let mut g = globals();
        let Some(m) = g.get_mut(&(module as usize)) else {
            return INVALID_HANDLE;
        };
        let Some(&size) = m.sizes.get(&name) else {
            return NOT_FOUND;
        };
        let ptr = match m.memory.get(&name) {
            Some(&p) => p,
            None => {
                let mut p = 0;
                let r = crate::cuMemAlloc_v2(&mut p, size.max(1));
                if r != SUCCESS {
                    return r;
                }
                m.memory.insert(name, p);
                p
            }
        };
        if !dptr.is_null() {
            // SAFETY: non-null output pointer.
            unsafe { dptr.write(ptr) };
        }
        if !bytes.is_null() {
            // SAFETY: non-null output pointer.
            unsafe { bytes.write(size) };
        }
        SUCCESS
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuModuleUnload(module: Handle) -> CUresult {
    guarded(|| {
        if let Err(e) = modules::unload(module as usize) {
            return e;
        }
        let memory = globals()
            .remove(&(module as usize))
            .map(|g| g.memory)
            .unwrap_or_default();
        for (_, p) in memory {
            crate::cuMemFree_v2(p);
        }
        SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fatbin::fixture;

    /// An LZ4-compressed fatbin (flags 0x2011, as TensorFlow's are) with one sm_90 cubin.
    fn lz4_fatbin(elf: &[u8]) -> Vec<u8> {
        let mut fb = fixture::fatbin(&[(90, elf.to_vec())], false);
        // The one entry starts at 16; its payload at 16 + 64.
        let comp = lz4_flex::block::compress(elf);
        let mut padded = comp.clone();
        while !padded.len().is_multiple_of(8) {
            padded.push(0);
        }
        fb.truncate(16 + 64);
        fb[16 + 8..16 + 16].copy_from_slice(&(padded.len() as u64).to_le_bytes());
        fb[16 + 16..16 + 20].copy_from_slice(&(comp.len() as u32).to_le_bytes());
        fb[16 + 40..16 + 48].copy_from_slice(&0x2011u64.to_le_bytes());
        fb.extend_from_slice(&padded);
        let size = (fb.len() - 16) as u64;
        fb[8..16].copy_from_slice(&size.to_le_bytes());
        fb
    }

    #[test]
    fn an_lz4_fatbin_loads_and_its_kernel_launches() {
        // Launches on the one simulated device take turns with the other tests' (modules.rs).
        let _turn = crate::modules::tests::launching();
        let elf = fixture::elf(&[(
            ".nv.info.Cast_GPU_DT_INT64_DT_INT32_kernel",
            fixture::nv_info(&[(0, 8), (8, 8), (16, 8)], 24),
        )]);
        let fb = lz4_fatbin(&elf);
        let mut m = std::ptr::null_mut();
        assert_eq!(cuModuleLoadData(&mut m, fb.as_ptr() as *const c_void), 0);
        let mut f = std::ptr::null_mut();
        // SAFETY: NUL-terminated names and live output pointers.
        unsafe {
            assert_eq!(
                cuModuleGetFunction(&mut f, m, c"Cast_GPU_DT_INT64_DT_INT32_kernel".as_ptr()),
                0
            );
            let mut again = std::ptr::null_mut();
            cuModuleGetFunction(&mut again, m, c"Cast_GPU_DT_INT64_DT_INT32_kernel".as_ptr());
            assert_eq!(f, again, "the same kernel is the same CUfunction");
            assert_eq!(
                cuModuleGetFunction(&mut again, m, c"missing".as_ptr()),
                NOT_FOUND
            );
        }
        let (mut off, mut size) = (0, 0);
        assert_eq!(crate::cuFuncGetParamInfo(f, 2, &mut off, &mut size), 0);
        assert_eq!((off, size), (16, 8));
        let mut p = 0u64;
        assert_eq!(crate::cuMemAlloc_v2(&mut p, 1 << 20), 0);
        let (mut a, mut b, mut n) = (p, p, 1024i64);
        let mut args = [
            &mut a as *mut u64 as *mut c_void,
            &mut b as *mut u64 as *mut c_void,
            &mut n as *mut i64 as *mut c_void,
        ];
        let before = crate::lock().unwrap().counters.kernels;
        let s = crate::device::STREAM_PER_THREAD as Handle;
        let null = std::ptr::null_mut();
        assert_eq!(
            crate::cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, args.as_mut_ptr(), null),
            0
        );
        assert!(crate::lock().unwrap().counters.kernels > before);
        // Leaves the shared compute engine idle for the next test that times a launch.
        assert_eq!(crate::cuStreamSynchronize(s), 0);
        assert_eq!(cuModuleUnload(m), 0);
        assert_eq!(cuModuleUnload(m), INVALID_HANDLE);
        assert_ne!(
            crate::cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, args.as_mut_ptr(), null),
            0,
            "an unloaded module's kernel does not launch"
        );
        assert_eq!(crate::cuMemFree_v2(p), 0);
    }

    #[test]
    fn ptx_loads_by_entry_name_with_its_globals() {
        let _turn = crate::modules::tests::launching();
        let ptx = c".version 8.0
.target sm_90a
.address_size 64
.global .align 8 .b8 counters[64];
.visible .entry Cast_kernel(.param .u64 p0, .param .u32 p1, .param .u64 p2)
{ ret; }
";
        let mut m = std::ptr::null_mut();
        assert_eq!(cuModuleLoadData(&mut m, ptx.as_ptr() as *const c_void), 0);
        let mut f = std::ptr::null_mut();
        let (mut dptr, mut bytes) = (0u64, 0usize);
        // SAFETY: NUL-terminated names and live output pointers.
        unsafe {
            assert_eq!(cuModuleGetFunction(&mut f, m, c"Cast_kernel".as_ptr()), 0);
            assert_eq!(
                cuModuleGetGlobal_v2(&mut dptr, &mut bytes, m, c"counters".as_ptr()),
                0
            );
            assert_eq!(bytes, 64);
            assert_ne!(dptr, 0);
            let mut again = 0u64;
            cuModuleGetGlobal_v2(&mut again, std::ptr::null_mut(), m, c"counters".as_ptr());
            assert_eq!(again, dptr);
            assert_eq!(
                cuModuleGetGlobal_v2(&mut dptr, &mut bytes, m, c"nothing".as_ptr()),
                NOT_FOUND
            );
        }
        let (mut off, mut size) = (0, 0);
        assert_eq!(crate::cuFuncGetParamInfo(f, 2, &mut off, &mut size), 0);
        assert_eq!((off, size), (16, 8));
        assert_eq!(cuModuleUnload(m), 0);
    }

    #[test]
    fn bad_images_are_errors_with_the_message_in_the_log() {
        let mut m = std::ptr::null_mut();
        assert_eq!(
            cuModuleLoadData(&mut m, c"not a module at all".as_ptr() as *const c_void),
            INVALID_IMAGE
        );
        assert_eq!(cuModuleLoadData(&mut m, std::ptr::null()), INVALID_VALUE);
        let ptx = c".version 8.0\n.target sm_90\n.entry k(.param .u64 a[x]) { ret; }";
        let mut log = [0u8; 256];
        let mut opts = [JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
        let mut vals = [log.as_mut_ptr() as *mut c_void, 256usize as *mut c_void];
        assert_eq!(
            cuModuleLoadDataEx(
                &mut m,
                ptx.as_ptr() as *const c_void,
                2,
                opts.as_mut_ptr(),
                vals.as_mut_ptr()
            ),
            INVALID_PTX
        );
        let msg = CStr::from_bytes_until_nul(&log).unwrap().to_str().unwrap();
        assert!(msg.contains("array size"), "{msg}");
        assert_eq!(vals[1] as usize, msg.len() + 1);
        // A fatbin with no entry at all: no binary for this GPU.
        let fb = fixture::fatbin(&[], false);
        assert_eq!(
            cuModuleLoadData(&mut m, fb.as_ptr() as *const c_void),
            NO_BINARY_FOR_GPU
        );
        // A fatbin of PTX only loads from its PTX (the real driver compiles it); bad PTX in one
        // is CUDA_ERROR_INVALID_PTX.
        for (text, want) in [
            (
                &b".version 8.0\n.target sm_90\n.entry k(.param .u64 a) { ret; }\0"[..],
                0,
            ),
            (&b".version 8.0\n.entry k( { ret; }\0"[..], INVALID_PTX),
        ] {
            let mut fb = fixture::fatbin(&[(90, text.to_vec())], false);
            fb[16..18].copy_from_slice(&KIND_PTX.to_le_bytes());
            assert_eq!(cuModuleLoadData(&mut m, fb.as_ptr() as *const c_void), want);
        }
        // SAFETY: a NUL-terminated name and a live output pointer.
        unsafe {
            let mut f = std::ptr::null_mut();
            assert_eq!(cuModuleGetFunction(&mut f, m, c"k".as_ptr()), 0);
        }
        // A corrupt LZ4 payload.
        let elf = fixture::elf(&[(".nv.info.k", fixture::nv_info(&[(0, 8)], 8))]);
        let mut fb = lz4_fatbin(&elf);
        let end = fb.len();
        fb[16 + 64..end].fill(0xff);
        assert_eq!(
            cuModuleLoadData(&mut m, fb.as_ptr() as *const c_void),
            INVALID_IMAGE
        );
        assert_eq!(cuModuleUnload(0x1234 as Handle), INVALID_HANDLE);
        // SAFETY: a NUL-terminated name; the module handle is bogus.
        unsafe {
            let mut f = std::ptr::null_mut();
            assert_eq!(
                cuModuleGetFunction(&mut f, 0x1234 as Handle, c"k".as_ptr()),
                INVALID_HANDLE
            );
        }
    }
}
