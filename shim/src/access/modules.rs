//! The modules a program loads with the driver as PTX text, and what the PTX says of each
//! kernel it takes from them ([`super::ptx`]), for the launches of those kernels.

use super::ptx::{Roles, roles};
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};
use std::sync::{Arc, Mutex};

/// The PTX text of each module loaded as PTX, by module handle; and the roles of each kernel
/// taken from one (None: the PTX does not settle them), by function handle, with its module.
struct Modules {
    text: HashMap<usize, Arc<str>>,
    kernels: HashMap<usize, (usize, Option<Arc<Roles>>)>,
}

static MODULES: Mutex<Option<Modules>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Modules) -> T) -> Option<T> {
    let mut g = MODULES.lock().ok()?;
    Some(f(g.get_or_insert_with(|| Modules {
        text: HashMap::new(),
        kernels: HashMap::new(),
    })))
}

/// Magic numbers of the binary images `cuModuleLoadData` takes: a fatbin, a fatbin wrapper,
/// an ELF cubin (little-endian first words).
const BINARY: [u32; 3] = [0xBA55_ED50, 0x4662_43B1, 0x464C_457F];

/// The PTX text of a module image, if it is PTX: NUL-terminated text that declares
/// `.version` before anything but comments.
///
/// # Safety
/// `image` is NULL or a module image as `cuModuleLoadData` takes it: a binary image starting
/// with its magic number, or NUL-terminated text.
unsafe fn ptx_text(image: *const c_void) -> Option<String> {
    if image.is_null() {
        return None;
    }
    // SAFETY: every image starts with at least four bytes (a magic number, or text).
    let magic = u32::from_le_bytes(unsafe { *(image as *const [u8; 4]) });
    if BINARY.contains(&magic) {
        return None;
    }
    // SAFETY: an image that is no binary is NUL-terminated text (the API's contract).
    let text = unsafe { CStr::from_ptr(image as *const c_char) }
        .to_str()
        .ok()?;
    let first = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or("").trim())
        .find(|l| !l.is_empty())?;
    first.starts_with(".version").then(|| text.to_string())
}

/// After a successful `cuModuleLoadData(Ex)` of `image` into `module`.
///
/// # Safety
/// As [`ptx_text`].
pub unsafe fn loaded(module: usize, image: *const c_void) {
    // SAFETY: the caller's contract.
    if let Some(text) = unsafe { ptx_text(image) } {
        with(|m| m.text.insert(module, Arc::from(text)));
    }
}

/// After a successful `cuModuleGetFunction` of `name` from `module` into `func`.
///
/// # Safety
/// `name` is a NUL-terminated string.
pub unsafe fn function(func: usize, module: usize, name: *const c_char) {
    let Some(text) = with(|m| m.text.get(&module).cloned()).flatten() else {
        return;
    };
    if name.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else {
        return;
    };
    let r = roles(&text, name).map(Arc::new);
    with(|m| m.kernels.insert(func, (module, r)));
}

/// After a successful `cuModuleUnload`: its text and kernels are gone.
pub fn unloaded(module: usize) {
    with(|m| {
        m.text.remove(&module);
        m.kernels.retain(|_, k| k.0 != module);
    });
}

/// What the PTX says of a driver kernel (a `CUfunction`), where it came from a PTX module and
/// the PTX settles it.
pub fn roles_of(func: usize) -> Option<Arc<Roles>> {
    with(|m| m.kernels.get(&func).and_then(|k| k.1.clone())).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = "// a comment\n.version 8.5\n.target sm_90\n.address_size 64\n.visible .entry k(\n\t.param .u64 k_param_0\n)\n{\n\t.reg .b64 %rd<3>;\n\tld.param.u64 %rd1, [k_param_0];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tst.global.u32 [%rd2], 0;\n\tret;\n}\n\0";

    #[test]
    fn kernels_of_ptx_modules_have_roles_until_their_module_is_unloaded() {
        // Handles no other test uses.
        let (module, func) = (0x7a11_0001usize, 0x7a11_0002usize);
        // SAFETY: a NUL-terminated image and name.
        unsafe {
            loaded(module, PTX.as_ptr() as *const c_void);
            function(func, module, c"k".as_ptr());
        }
        let r = roles_of(func).expect("the kernel's roles");
        assert_eq!(r.pointer_words(&[(0, 8)]), Some(vec![0]));
        unloaded(module);
        assert!(roles_of(func).is_none());
        // A fatbin is no PTX; nor is text that does not declare its version first.
        let fatbin = [0x50u8, 0xED, 0x55, 0xBA, 1, 0, 0, 0];
        let prose = "hello\n.version 8.5\0";
        // SAFETY: an image with its magic number; a NUL-terminated text.
        unsafe {
            assert!(ptx_text(fatbin.as_ptr() as *const c_void).is_none());
            assert!(ptx_text(prose.as_ptr() as *const c_void).is_none());
            assert!(ptx_text(PTX.as_ptr() as *const c_void).is_some());
        }
    }
}
