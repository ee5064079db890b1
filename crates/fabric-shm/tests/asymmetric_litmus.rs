//! The asymmetric guard's handshake on this machine's hardware: a store-buffering litmus test
//! run with the real `Slot` code.
//!
//! The shuttle model (`guard_model.rs`) runs everything sequentially consistent, so it cannot
//! tell a light entry (plain store, compiler fence, plain load) from a locked one, nor a
//! revocation with `membarrier(2)` from one without. Here two threads, pinned to two CPUs, meet
//! at a barrier once per round, and then at once the writer enters a fresh slot with
//! `Slot::enter_light` while the revoker takes its access away. The outcome the guard forbids:
//! the writer admitted (it read the old `acl`) and the revoker seeing nobody in flight (it read
//! the old `inflight`) — then the revocation would return while the writer copies.
//!
//! * With the heavy fence (`GuardBarrier::Membarrier`, as the fabric revokes), no round may end
//!   that way; nor with the locked entry and the locked revocation (the default guard).
//! * Without it (the revoker fences only its own CPU, `GuardBarrier::Locked`, while the writer
//!   enters the light way: a misuse the fabric never makes), the writer's store can sit in its
//!   store buffer past its load, and the test requires that this is seen at least once, so that
//!   the first check is known to have the power to fail. It needs two CPUs; with one, it says so
//!   and checks only the first.

use mu_fabric::{Access, QpState};
use mu_fabric_shm::guard::{Acl, GuardBarrier, Slot};
use mu_fabric_shm::membarrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const WRITER: u32 = 7;
/// Rounds of the check that must never fail (each issues one `membarrier(2)`).
const GUARDED_ROUNDS: usize = 100_000;
/// Rounds allowed for the misuse to show the forbidden outcome at least once (it stops at the
/// first few).
const MISUSE_ROUNDS_MAX: usize = 4_000_000;
/// Forbidden outcomes of the misuse after which the search stops (checked after each chunk of
/// rounds).
const MISUSE_ENOUGH: usize = 5;

fn granted() -> Acl {
    Acl { peer_incarnation: WRITER, state: QpState::ReadyToSend, access: Access::WRITE }
}

fn revoked() -> Acl {
    Acl { access: Access::NONE, ..granted() }
}

fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `set` is a plain bit set the call fills in; its size is passed.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

fn pin(cpu: usize) {
    // SAFETY: as above; pins the calling thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
    }
}

/// A slot bound to the writer with write access, as a fresh connection side is.
fn fresh_slot() -> Slot {
    let slot = Slot::new(AtomicU64::new(0), AtomicU64::new(0));
    assert_eq!(slot.replace(Acl::RESET, granted()), Ok(None));
    slot
}

/// Both threads arrive, then both leave (within about one cache-line transfer of each other).
fn meet(mine: &AtomicU64, theirs: &AtomicU64, round: u64) {
    mine.store(round, Ordering::SeqCst);
    while theirs.load(Ordering::SeqCst) < round {
        std::hint::spin_loop();
    }
}

/// Runs up to `rounds` rounds with the writer entering the light way (`light`) or the locked
/// way and the revoker using `barrier`; returns the rounds run and how many ended with the
/// writer admitted and the revoker seeing nobody in flight. Stops early once `enough` such
/// rounds were seen.
fn rounds(
    (light, barrier): (bool, GuardBarrier),
    rounds: usize,
    enough: usize,
    cpus: &[usize],
) -> (usize, usize) {
    // Slots are used once each, in chunks, so that no round has to reset one.
    const CHUNK: usize = 50_000;
    let mut run = 0;
    let mut forbidden = 0;
    while run < rounds && forbidden < enough {
        let n = CHUNK.min(rounds - run);
        let slots: Arc<Vec<Slot>> = Arc::new((0..n).map(|_| fresh_slot()).collect());
        let (w_at, r_at) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let writer = std::thread::spawn({
            let (slots, w_at, r_at) = (slots.clone(), w_at.clone(), r_at.clone());
            let cpu = cpus.get(1).copied();
            move || {
                if let Some(cpu) = cpu {
                    pin(cpu);
                }
                let mut admitted = vec![false; slots.len()];
                for (i, slot) in slots.iter().enumerate() {
                    meet(&w_at, &r_at, i as u64 + 1);
                    let mut seq = 0;
                    // Never exits: the slot is left in flight, as a writer mid-copy would be.
                    let entered = if light {
                        slot.enter_light(&mut seq, WRITER, Access::WRITE)
                    } else {
                        slot.enter(&mut seq, WRITER, Access::WRITE)
                    };
                    admitted[i] = entered.is_ok();
                }
                admitted
            }
        });
        if let Some(&cpu) = cpus.first() {
            pin(cpu);
        }
        let mut seen = vec![false; n];
        for (i, slot) in slots.iter().enumerate() {
            meet(&r_at, &w_at, i as u64 + 1);
            let word = slot.replace_with(granted(), revoked(), barrier).expect("only we change it");
            seen[i] = word.is_some();
        }
        let admitted = writer.join().expect("writer thread");
        forbidden += admitted.iter().zip(&seen).filter(|(&a, &s)| a && !s).count();
        run += n;
    }
    (run, forbidden)
}

#[test]
fn the_heavy_fence_makes_the_light_entry_a_barrier() {
    membarrier::register().expect("membarrier(2) global expedited, needed by this test");
    let cpus = allowed_cpus();
    let (run, forbidden) = rounds((true, GuardBarrier::Membarrier), GUARDED_ROUNDS, 1, &cpus);
    println!("light entry, membarrier: {forbidden} forbidden outcomes in {run} rounds");
    assert_eq!(forbidden, 0, "a revocation missed a writer that had read the old acl");
    let (run, forbidden) = rounds((false, GuardBarrier::Locked), GUARDED_ROUNDS, 1, &cpus);
    println!("locked entry, locked revocation: {forbidden} forbidden outcomes in {run} rounds");
    assert_eq!(forbidden, 0, "the default guard missed a writer that had read the old acl");

    if cpus.len() < 2 {
        println!("one CPU allowed: the misuse cannot reorder here, not checked");
        return;
    }
    let misuse = (true, GuardBarrier::Locked);
    let (run, forbidden) = rounds(misuse, MISUSE_ROUNDS_MAX, MISUSE_ENOUGH, &cpus);
    println!("light entry without membarrier: {forbidden} forbidden outcomes in {run} rounds");
    assert!(
        forbidden > 0,
        "in {run} rounds the misuse never showed the reordering: this test could not fail"
    );
}
