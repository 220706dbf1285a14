//! Sizes as users write them: `512MiB`, `8GiB`, `64MB`, `4096`, `1.5GiB`.

/// What [`parse_size`] accepts, for error messages.
pub const ACCEPTED: &str = "a byte count or a number with a unit: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB (e.g. 512MiB, 8GiB)";

/// Parses a size in bytes. Binary units (KiB) are powers of 1024, decimal ones (KB) of 1000.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    let mult: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => return Err(format!("{text:?} is not a size: expected {ACCEPTED}")),
    };
    let out_of_range = || format!("{text:?} is out of range: at most {} B (16 EiB)", u64::MAX);
    // Whole numbers exactly (an f64 rounds above 2^53), others through f64.
    if !num.contains('.') && !num.is_empty() {
        let n: u64 = num.parse().map_err(|_| out_of_range())?;
        return n.checked_mul(mult as u64).ok_or_else(out_of_range);
    }
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a size: expected {ACCEPTED}"))?;
    let bytes = value * mult;
    // u64::MAX as f64 is 2^64, itself out of range.
    if !bytes.is_finite() || bytes < 0.0 || bytes >= u64::MAX as f64 {
        return Err(out_of_range());
    }
    if unit.is_empty() && num.contains('.') {
        return Err(format!("{text:?}: a byte count must be a whole number"));
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn units() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("8GiB").unwrap(), 8 << 30);
        assert_eq!(parse_size("64MB").unwrap(), 64_000_000);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size(" 2 gib ").unwrap(), 2 << 30);
    }

    #[test]
    fn rejects() {
        for bad in ["", "abc", "12XB", "-5", "1.5", "MiB", "1e400GiB"] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_range_ends_at_u64_max_exactly_instead_of_clamping() {
        assert_eq!(parse_size("18446744073709551615").unwrap(), u64::MAX);
        assert_eq!(parse_size("18446744073709551614").unwrap(), u64::MAX - 1);
        for bad in [
            "18446744073709551616",
            "99999999999999999999999",
            "16777216TiB",
            "16777216.0TiB",
            "18446744073709551616.0",
        ] {
            let e = parse_size(bad).unwrap_err();
            assert!(
                e.contains("out of range") && e.contains("at most"),
                "{bad}: {e}"
            );
        }
        assert_eq!(parse_size("16777215TiB").unwrap(), 16777215u64 << 40);
    }
}
