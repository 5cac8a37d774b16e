//! Units of the command line and of mount options: byte counts such as
//! `64K` or `8G`, parsed in one place for `hipfs` flags and `mount -o`.

/// Parses a byte count like `4096`, `64K`, `16M`, `8G`, `1TiB` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let unit = t[split..].to_ascii_uppercase();
    let mult: u64 = match unit.trim_end_matches("IB").trim_end_matches('B') {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(format!("unknown size unit in {s:?} (use K, M, G, T)")),
    };
    let n: u64 = t[..split]
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a size like 4096, 64K, 16M, 8G"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_parse_with_binary_units_and_bad_ones_say_why() {
        assert_eq!(super::parse_size("4096"), Ok(4096));
        assert_eq!(super::parse_size("64K"), Ok(64 << 10));
        assert_eq!(super::parse_size("2g"), Ok(2 << 30));
        assert_eq!(super::parse_size("1GiB"), Ok(1 << 30));
        assert!(super::parse_size("3X").unwrap_err().contains("unit"));
        assert!(super::parse_size("").is_err());
        assert!(super::parse_size("99999999999T")
            .unwrap_err()
            .contains("too large"));
    }
}
