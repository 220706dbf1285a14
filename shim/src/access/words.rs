//! Reading a kernel's parameter buffer: its words, little-endian integers in it, the element
//! size a kernel's template arguments name, and what a pointer value is found to point into.

/// (allocation, offset in it, its size) of an address.
pub type Found = (u64, u64, u64);

/// An elementwise kernel's operand count and output element size.
pub type Operands = (usize, u64);

/// Each parameter's 8-byte words as (offset in the buffer, value).
pub fn words<'a>(
    layout: &'a [(usize, usize)],
    buf: &'a [u8],
) -> impl Iterator<Item = (usize, u64)> + 'a {
    layout.iter().flat_map(move |&(off, size)| {
        (0..size.saturating_sub(7)).step_by(8).filter_map(move |k| {
            let b = buf.get(off + k..off + k + 8)?;
            Some((off + k, u64::from_le_bytes(b.try_into().ok()?)))
        })
    })
}

/// The unsigned little-endian integer of `bytes` bytes (at most 8) at `at` in a parameter
/// buffer; None past its end.
pub fn le_at(buf: &[u8], at: usize, bytes: usize) -> Option<u64> {
    let b = buf.get(at..at.checked_add(bytes)?)?;
    let mut w = [0u8; 8];
    w.get_mut(..bytes)?.copy_from_slice(b);
    Some(u64::from_le_bytes(w))
}

/// The size of the first scalar type among a kernel's template arguments.
pub fn element_size(args: &str) -> Option<u64> {
    const TYPES: [(&str, u64); 9] = [
        ("float", 4),
        ("double", 8),
        ("c10::Half", 2),
        ("c10::BFloat16", 2),
        ("long", 8),
        ("int", 4),
        ("short", 2),
        ("bool", 1),
        ("signed char", 1),
    ];
    let whole_word = |i: usize, w: &str| {
        let before = args[..i].chars().next_back();
        let after = args[i + w.len()..].chars().next();
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        !before.is_some_and(ident) && !after.is_some_and(ident)
    };
    TYPES
        .iter()
        .filter_map(|&(w, size)| {
            let i = args
                .match_indices(w)
                .map(|(i, _)| i)
                .find(|&i| whole_word(i, w))?;
            Some((i, size))
        })
        .min_by_key(|&(i, _)| i)
        .map(|(_, size)| size)
}
