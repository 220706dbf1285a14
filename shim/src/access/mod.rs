//! What a kernel launch touches: from the launch's parameter buffer (its layout from the
//! fatbin's parameter info or the driver, the kernel's name demangled), the tensors it reads and
//! writes. Pure reading, one reader per kind of kernel; [`launch`] picks the reader.

pub mod attention;
pub mod elementwise;
pub mod fatbins;
pub mod launch;
pub mod memref;
pub mod modules;
pub mod multi_tensor;
pub mod ptx;
pub mod reduce;
pub mod signature;
pub mod strided;
pub mod words;
