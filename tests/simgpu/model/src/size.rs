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
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a size: expected {ACCEPTED}"))?;
    let bytes = value * mult;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("{text:?} is out of range"));
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
}
