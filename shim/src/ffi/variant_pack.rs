//! cuDNN variant packs as they were filled: each pack's unique ids, data pointers and workspace
//! pointer, taken as the program sets them (`cudnnBackendSetAttribute`) or as Marmoset made its
//! own, so that an execution's tensors are known without reading the pack back: the real cuDNN
//! gives a variant pack's workspace pointer back, but not its ids and data pointers
//! (docs/real-gpu/2026-12-01-h200.md).

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

const VARIANT_PACK_DESCRIPTOR: c_int = 16;
const UNIQUE_IDS: c_int = 1000;
const DATA_POINTERS: c_int = 1001;
const WORKSPACE: c_int = 1003;
const TYPE_INT64: c_int = 3;
const TYPE_VOID_PTR: c_int = 6;
/// No pack holds more pointers than this (a fused graph's tensors); a longer list is not taken.
const MOST: i64 = 256;

/// What the program set on one variant pack.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pack {
    pub uids: Vec<i64>,
    pub ptrs: Vec<u64>,
    pub workspace: Option<u64>,
}

static PACKS: Mutex<Option<HashMap<usize, Pack>>> = Mutex::new(None);

fn packs<R>(f: impl FnOnce(&mut HashMap<usize, Pack>) -> R) -> Option<R> {
    let mut g = PACKS.lock().ok()?;
    Some(f(g.get_or_insert_with(HashMap::new)))
}

/// After a successful cudnnBackendCreateDescriptor.
pub fn created(ty: c_int, d: usize) {
    if ty == VARIANT_PACK_DESCRIPTOR {
        packs(|p| p.insert(d, Pack::default()));
    }
}

/// Before cudnnBackendDestroyDescriptor.
pub fn destroyed(d: usize) {
    packs(|p| p.remove(&d));
}

/// After a successful cudnnBackendSetAttribute(`d`, `name`, `ty`, `n`, `v`): a variant pack's
/// ids and pointers are kept. `v` holds `n` elements of type `ty` (the API's contract).
pub fn set(d: usize, name: c_int, ty: c_int, n: i64, v: *const c_void) {
    if v.is_null() || !(0..=MOST).contains(&n) {
        return;
    }
    let n = n as usize;
    packs(|p| {
        let Some(pack) = p.get_mut(&d) else { return };
        match (name, ty) {
            (UNIQUE_IDS, TYPE_INT64) => {
                // SAFETY: v holds n int64 values (the API's contract for this type).
                pack.uids = unsafe { std::slice::from_raw_parts(v as *const i64, n) }.to_vec();
            }
            (DATA_POINTERS, TYPE_VOID_PTR) => {
                // SAFETY: v holds n pointers (the API's contract for this type).
                let ptrs = unsafe { std::slice::from_raw_parts(v as *const usize, n) };
                pack.ptrs = ptrs.iter().map(|&x| x as u64).collect();
            }
            (WORKSPACE, TYPE_VOID_PTR) if n == 1 => {
                // SAFETY: v holds one pointer.
                pack.workspace = Some(unsafe { *(v as *const usize) } as u64);
            }
            _ => {}
        }
    });
}

/// A pack Marmoset made itself, with what it set on it.
pub fn made(d: usize, pack: Pack) {
    packs(|p| p.insert(d, pack));
}

/// What was set on the pack at `d`, if Marmoset saw it made.
pub fn contents(d: usize) -> Option<Pack> {
    packs(|p| p.get(&d).cloned()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pack_is_what_was_set_on_it_until_destroyed() {
        let d = 0x5eed_0001;
        assert_eq!(contents(d), None, "never made");
        created(VARIANT_PACK_DESCRIPTOR, d);
        let ids = [120i64, 121, 119];
        let ptrs = [0x1000usize, 0x2000, 0x3000];
        let ws: usize = 0;
        set(d, UNIQUE_IDS, TYPE_INT64, 3, ids.as_ptr() as *const c_void);
        set(
            d,
            DATA_POINTERS,
            TYPE_VOID_PTR,
            3,
            ptrs.as_ptr() as *const c_void,
        );
        set(
            d,
            WORKSPACE,
            TYPE_VOID_PTR,
            1,
            &ws as *const usize as *const c_void,
        );
        // Another descriptor kind's attribute of the same number is not a pack's.
        created(17, d + 1);
        set(
            d + 1,
            UNIQUE_IDS,
            TYPE_INT64,
            3,
            ids.as_ptr() as *const c_void,
        );
        assert_eq!(contents(d + 1), None);
        assert_eq!(
            contents(d),
            Some(Pack {
                uids: ids.to_vec(),
                ptrs: vec![0x1000, 0x2000, 0x3000],
                workspace: Some(0),
            })
        );
        destroyed(d);
        assert_eq!(contents(d), None);
    }
}
