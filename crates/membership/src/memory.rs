//! A registered region as the engines' memory (`mu_velos::Memory`): local reads, writes and
//! compare-and-swaps, atomic with the peers' remote ones.

use mu_fabric::LocalRegion;

/// See the module docs.
pub struct RegionMemory<'a, R: LocalRegion>(pub &'a R);

impl<R: LocalRegion> mu_velos::Memory for RegionMemory<'_, R> {
    fn load_word(&self, offset: u64) -> u64 {
        self.0.load_u64(offset as usize).expect("the engine's offsets lie inside its region")
    }

    fn cas_word(&mut self, offset: u64, expected: u64, desired: u64) -> Option<u64> {
        self.0.compare_swap_u64(offset as usize, expected, desired).ok()
    }

    fn read(&self, offset: u64, out: &mut [u8]) {
        self.0.read(offset as usize, out).expect("the engine's offsets lie inside its region")
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        self.0.write(offset as usize, data).expect("the engine's offsets lie inside its region")
    }
}
