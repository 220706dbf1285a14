//! The driver's C structures that Marmoset's own calls pass (the VMM calls of the allocator).

use std::ffi::c_void;

/// CUmemAllocationProp.
#[repr(C)]
pub struct AllocProp {
    pub type_: u32,
    pub handle_types: u32,
    pub location_type: u32,
    pub location_id: i32,
    pub win32: *mut c_void,
    pub flags: [u8; 8],
}

/// CUmemAccessDesc.
#[repr(C)]
pub struct AccessDesc {
    pub location_type: u32,
    pub location_id: i32,
    pub flags: u32,
}
