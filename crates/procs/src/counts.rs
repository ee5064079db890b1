//! Parsers for the counts the commands take (samples, seeds, failovers), so that each says its
//! own bounds in words and none reaches a figure that would overflow the arithmetic after it.

/// The most samples (or seeds) one measurement takes: far above any useful run (a billion
/// proposals is about an hour at a microsecond each), far below where `samples` plus a warm-up,
/// or a first seed plus a count, could overflow.
pub const COUNT_MAX: u64 = 1_000_000_000;

/// A count from 1 to [`COUNT_MAX`].
pub fn count(text: &str) -> Result<u64, String> {
    let n: u64 = text.trim().parse().map_err(|_| format!("{text:?} is not a whole number"))?;
    if !(1..=COUNT_MAX).contains(&n) {
        return Err(format!("{n} is out of range: give 1 to {COUNT_MAX}"));
    }
    Ok(n)
}

/// [`count`], for counts held in 32 bits.
pub fn count_u32(text: &str) -> Result<u32, String> {
    let n = count(text)?;
    u32::try_from(n).map_err(|_| format!("{n} is out of range: give 1 to {}", u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_bounded_on_both_sides() {
        assert_eq!(count("1"), Ok(1));
        assert_eq!(count("1000000000"), Ok(COUNT_MAX));
        assert!(count("0").unwrap_err().contains("give 1 to 1000000000"));
        assert!(count("1000000001").is_err());
        assert!(count("18446744073709551615").is_err());
        assert!(count("-3").unwrap_err().contains("not a whole number"));
        assert!(count("lots").is_err());
        assert_eq!(count_u32("4000000"), Ok(4_000_000));
    }
}
