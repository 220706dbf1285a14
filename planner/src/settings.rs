//! What libmarmoset.so accepts in the settings `marmoset run` passes it, shared so that the
//! command refuses a bad flag (exit 2, naming the flag) with the very rules the library applies
//! to its environment variable.

/// The names MARMOSET_POLICY accepts in the library, in the order its messages list them: none,
/// the passive `lru`, then the planner's policies the library runs by measured and guided
/// execution (`crate::policy::run` names), best first.
pub const RUNTIME_POLICIES: &[&str] = &[
    "none",
    "lru",
    "auto",
    "capuchin",
    "swap",
    "recompute",
    "dtr",
    "vdnn-all",
    "vdnn-conv",
    "autoswap",
    "hybrid",
];

/// A memory budget: bytes, or a fraction of the device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    Bytes(u64),
    Fraction(f64),
}

/// What [`parse_limit`] accepts, for messages.
pub fn limit_accepted() -> String {
    format!(
        "a fraction of the device in (0, 1] or a size, {}",
        crate::SIZE_ACCEPTED
    )
}

/// A memory budget as MARMOSET_MEMORY_LIMIT and `--memory-limit` take it: `0.5` (a fraction,
/// written with a point) or a size of at least one byte.
pub fn parse_limit(v: &str) -> Option<Limit> {
    if v.contains('.') && v.chars().all(|ch| ch.is_ascii_digit() || ch == '.') {
        let f: f64 = v.parse().ok()?;
        return (f > 0.0 && f <= 1.0).then_some(Limit::Fraction(f));
    }
    crate::parse_size(v)
        .ok()
        .filter(|&b| b > 0)
        .map(Limit::Bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert_eq!(parse_limit("0.5"), Some(Limit::Fraction(0.5)));
        assert_eq!(parse_limit("1.0"), Some(Limit::Fraction(1.0)));
        assert_eq!(parse_limit("8GiB"), Some(Limit::Bytes(8 << 30)));
        assert_eq!(parse_limit("1.5GiB"), Some(Limit::Bytes(3 << 29)));
        for bad in ["0", "0.0", "1.5", "-0.5", "", "lots", "NaN", "1e400"] {
            assert_eq!(parse_limit(bad), None, "{bad:?}");
        }
    }
}
