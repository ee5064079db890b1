//! Whether the simulator catches a deliberately broken engine: the first seed whose run with
//! it breaks a checker, where the real engine passes that seed.

use std::ops::Range;

/// The first seed of `seeds` whose run `broken` fails, and why; none if none does. `real` runs
/// that seed with the real engine: if it fails too, the seed says nothing of the broken one,
/// and that is the error.
pub fn first_caught(
    seeds: Range<u64>,
    broken: impl Fn(u64) -> Option<String>,
    real: impl Fn(u64) -> Option<String>,
) -> Result<Option<(u64, String)>, String> {
    for seed in seeds {
        if let Some(why) = broken(seed) {
            if let Some(real_why) = real(seed) {
                return Err(format!("seed {seed} fails with the real engine too: {real_why}"));
            }
            return Ok(Some((seed, why)));
        }
    }
    Ok(None)
}
