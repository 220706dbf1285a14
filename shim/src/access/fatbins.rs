//! The fatbins a program registers with the runtime and the kernels it registers from them
//! ([`crate::hooks::register`]): a launched kernel's PTX, for its roles ([`super::ptx`]) where
//! its signature does not settle them (TensorFlow's Eigen kernels take an evaluator struct by
//! value, which holds the pointers). TensorFlow's fatbins carry PTX for compute_90 (no sm_90
//! cubin), compressed; a fatbin's PTX is decompressed when one of its kernels is first read,
//! not kept, and each kernel's roles are read once.

use super::ptx::{Roles, roles};
use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Registered {
    /// Each fatbin handle's wrapper (the program's static data, alive while registered), and
    /// the host stubs registered from it.
    wrappers: HashMap<usize, (usize, Vec<usize>)>,
    /// Each host stub's fatbin handle and mangled name.
    stubs: HashMap<usize, (usize, Arc<str>)>,
    /// Each host stub's roles, once read (None: the PTX does not settle them).
    roles: HashMap<usize, Option<Arc<Roles>>>,
    /// Each `cudaKernel_t` that `__cudaGetKernel` made, and the host stub it was made for.
    kernels: HashMap<usize, usize>,
}

static REGISTERED: Mutex<Option<Registered>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Registered) -> T) -> Option<T> {
    let mut g = REGISTERED.lock().ok()?;
    Some(f(g.get_or_insert_with(Registered::default)))
}

/// After `__cudaRegisterFatBinary(wrapper)` gave `handle`.
pub fn registered(handle: usize, wrapper: usize) {
    with(|r| r.wrappers.insert(handle, (wrapper, Vec::new())));
}

/// After `__cudaRegisterFunction` registered `host_fun` as `name` from fatbin `handle`.
pub fn function(handle: usize, host_fun: usize, name: &CStr) {
    let Ok(name) = name.to_str() else { return };
    with(|r| {
        if let Some(w) = r.wrappers.get_mut(&handle) {
            w.1.push(host_fun);
        }
        r.stubs.insert(host_fun, (handle, Arc::from(name)));
    });
}

/// Before `__cudaUnregisterFatBinary(handle)`: its data goes with its library (a program
/// unregisters every fatbin at exit: each goes with its own kernels only); the host stubs that
/// went with it.
pub fn unregistered(handle: usize) -> Vec<usize> {
    with(|r| {
        let stubs = r.wrappers.remove(&handle).map(|w| w.1).unwrap_or_default();
        for s in &stubs {
            r.stubs.remove(s);
            r.roles.remove(s);
            r.kernels.retain(|_, stub| stub != s);
        }
        stubs
    })
    .unwrap_or_default()
}

/// After `__cudaGetKernel` gave `kernel` for the host stub `host_fun`: CUDA 13's `<<<>>>`
/// launches that handle (`__cudaLaunchKernel`), which the runtime does not take where it takes a
/// host stub (`cudaGetFuncBySymbol` refuses it).
pub fn kernel(kernel: usize, host_fun: usize) {
    with(|r| r.kernels.insert(kernel, host_fun));
}

/// The host stub a `cudaKernel_t` was made for, where `__cudaGetKernel` made it.
pub fn stub_of(kernel: usize) -> Option<usize> {
    with(|r| r.kernels.get(&kernel).copied()).flatten()
}

/// What the PTX says of a kernel launched by its host stub, where the program registered it
/// from a fatbin with PTX and the PTX settles it.
pub fn roles_of(host_fun: usize) -> Option<Arc<Roles>> {
    let mut g = REGISTERED.lock().ok()?;
    let r = g.get_or_insert_with(Registered::default);
    if let Some(known) = r.roles.get(&host_fun) {
        return known.clone();
    }
    let (handle, name) = r.stubs.get(&host_fun).cloned()?;
    let wrapper = r.wrappers.get(&handle)?.0;
    // Read for each kernel first launched, not kept: a library's PTX may run to megabytes.
    // SAFETY: a wrapper the runtime accepted, still registered (its library loaded).
    let text = unsafe { wrapper_ptx(wrapper as *const u8) };
    let found = text.and_then(|t| roles(&t, &name)).map(Arc::new);
    r.roles.insert(host_fun, found.clone());
    found
}

/// The PTX of a fatbin wrapper's container: its PTX entry of the highest architecture.
///
/// # Safety
/// `w` is a fatbin wrapper as `__cudaRegisterFatBinary` takes it: {u32 magic, u32 version,
/// the container's address, ...}, the container whole behind that address.
unsafe fn wrapper_ptx(w: *const u8) -> Option<String> {
    if w.is_null() {
        return None;
    }
    // SAFETY: a wrapper's first 16 bytes are its magic, version and data pointer.
    let magic = unsafe { std::ptr::read_unaligned(w as *const u32) };
    if magic != fatbin::WRAPPER_MAGIC {
        return None;
    }
    // SAFETY: as above.
    let data = unsafe { std::ptr::read_unaligned(w.add(8) as *const *const u8) };
    if data.is_null() {
        return None;
    }
    // SAFETY: a container starts with its 16-byte header, which states its length.
    let head = unsafe { std::slice::from_raw_parts(data, 16) };
    let len = fatbin::container_len(head).ok()?;
    // SAFETY: the container is `len` bytes long (its header says so).
    container_ptx(unsafe { std::slice::from_raw_parts(data, len) })
}

/// The PTX text of a container's PTX entry of the highest architecture (None: it has none).
fn container_ptx(data: &[u8]) -> Option<String> {
    let entries = fatbin::entries(data).ok()?;
    let e = entries
        .iter()
        .filter(|e| e.kind == fatbin::KIND_PTX)
        .max_by_key(|e| e.arch)?;
    let bytes = fatbin::payload(data, e).ok()?;
    let text = bytes.split(|&b| b == 0).next()?;
    std::str::from_utf8(text).ok().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A container of one entry: (kind, arch, payload, LZ4-compressed).
    fn container(entries: &[(u16, u32, &[u8], bool)]) -> Vec<u8> {
        let mut body = Vec::new();
        for &(kind, arch, payload, lz4) in entries {
            let stored = if lz4 {
                lz4_flex::block::compress(payload)
            } else {
                payload.to_vec()
            };
            let mut h = vec![0u8; 64];
            h[0..2].copy_from_slice(&kind.to_le_bytes());
            h[4..8].copy_from_slice(&64u32.to_le_bytes());
            h[8..16].copy_from_slice(&(stored.len() as u64).to_le_bytes());
            h[16..20].copy_from_slice(&(stored.len() as u32).to_le_bytes());
            h[28..32].copy_from_slice(&arch.to_le_bytes());
            let flags: u64 = if lz4 { fatbin::FLAG_LZ4 } else { 0 };
            h[40..48].copy_from_slice(&flags.to_le_bytes());
            h[56..64].copy_from_slice(&(payload.len() as u64).to_le_bytes());
            body.extend(h);
            body.extend(stored);
        }
        let mut c = Vec::new();
        c.extend(fatbin::FATBIN_MAGIC.to_le_bytes());
        c.extend(1u16.to_le_bytes());
        c.extend(16u16.to_le_bytes());
        c.extend((body.len() as u64).to_le_bytes());
        c.extend(body);
        c
    }

    /// A kernel whose first pointer is read and second written, both loaded from a struct
    /// parameter (as Eigen's evaluators hold them).
    const PTX: &str = ".version 8.5\n.target sm_90\n.address_size 64\n.visible .entry _Z1kv(\n\t.param .align 8 .b8 _Z1kv_param_0[16]\n)\n{\n\t.reg .f32 %f<2>;\n\t.reg .b64 %rd<5>;\n\tld.param.u64 %rd1, [_Z1kv_param_0];\n\tld.param.u64 %rd2, [_Z1kv_param_0+8];\n\tcvta.to.global.u64 %rd3, %rd1;\n\tcvta.to.global.u64 %rd4, %rd2;\n\tld.global.f32 %f1, [%rd4];\n\tst.global.f32 [%rd3], %f1;\n\tret;\n}\n";

    #[test]
    fn a_registered_kernels_roles_come_from_its_fatbins_ptx() {
        let mut ptx = PTX.as_bytes().to_vec();
        ptx.push(0);
        // An sm_80 cubin (not PTX), then the compute_90 PTX, compressed as TensorFlow's are.
        let data = container(&[
            (fatbin::KIND_CUBIN, 80, b"\x7fELF", false),
            (fatbin::KIND_PTX, 90, &ptx, true),
        ]);
        assert_eq!(container_ptx(&data).as_deref(), Some(PTX));
        let mut wrapper = Vec::new();
        wrapper.extend(fatbin::WRAPPER_MAGIC.to_le_bytes());
        wrapper.extend(1u32.to_le_bytes());
        wrapper.extend((data.as_ptr() as usize as u64).to_le_bytes());
        wrapper.extend(0u64.to_le_bytes());
        // Handles and stubs no other test uses.
        let (handle, stub) = (0x7a12_0001usize, 0x7a12_0002usize);
        registered(handle, wrapper.as_ptr() as usize);
        function(handle, stub, c"_Z1kv");
        let r = roles_of(stub).expect("the kernel's roles");
        // The struct's two words (bytes 0 and 8 of the buffer): both pointers.
        let mut words = r.pointer_words(&[(0, 16)]).expect("its pointer words");
        words.sort_unstable();
        assert_eq!(words, vec![0, 8]);
        // A stub never registered has none; nor does a fatbin without PTX.
        assert!(roles_of(0x7a12_0003).is_none());
        let cubin_only = container(&[(fatbin::KIND_CUBIN, 80, b"\x7fELF", false)]);
        assert!(container_ptx(&cubin_only).is_none());
        unregistered(handle);
        assert!(roles_of(stub).is_none());
    }
}
