//! Engine tests of the replayer, with no fabric. Each names the part of the Mu paper it checks.

mod common;

use common::{layout, Cluster};
use mu_log::{EntryKind, FUO_OFFSET, HEAD_OFFSET};
use mu_replication::{Area, Memory, Replayer, VecMemory};

fn applied(r: &mut Replayer, mem: &mut VecMemory) -> Vec<(u64, Vec<u8>)> {
    let mut got = Vec::new();
    r.poll(mem, |i, kind, v| {
        assert_eq!(kind, EntryKind::Request);
        got.push((i, v.to_vec()));
    });
    got
}

/// §4.2 "Followers commit in background": entry i is applied only once entry i + 1 is there
/// (commit piggybacking), and then in order.
#[test]
fn t10_commit_piggybacking() {
    let mut c = Cluster::new(3, 0);
    let mut r = Replayer::new(layout(), 0);
    c.plant(1, 0, 1 << 16 | 1, b"a");
    assert!(applied(&mut r, &mut c.mems[1]).is_empty(), "the last entry is not known decided");
    c.plant(1, 1, 1 << 16 | 1, b"b");
    assert_eq!(applied(&mut r, &mut c.mems[1]), [(0, b"a".to_vec())]);
    c.plant(1, 2, 1 << 16 | 1, b"c");
    c.plant(1, 3, 1 << 16 | 1, b"d");
    assert_eq!(applied(&mut r, &mut c.mems[1]), [(1, b"b".to_vec()), (2, b"c".to_vec())]);
    assert_eq!(r.head(), 3);
    assert_eq!(
        c.mems[1].load_u64(Area::Log, HEAD_OFFSET),
        3,
        "the head is published for recycling (§5.3)"
    );
}

/// Listing 4 writes the follower's FUO after its slots: an FUO past i also decides i.
#[test]
fn t20_fuo_decides_too() {
    let mut c = Cluster::new(3, 0);
    let mut r = Replayer::new(layout(), 0);
    c.plant(1, 0, 1 << 16 | 1, b"a");
    c.plant(1, 1, 1 << 16 | 1, b"b");
    c.mems[1].store_u64(Area::Log, FUO_OFFSET, 2);
    assert_eq!(applied(&mut r, &mut c.mems[1]).len(), 2);
}

/// §4.2 "Replayer": a follower never applies a half-written entry; the entry after it does not
/// make it decided until it is whole.
#[test]
fn t30_torn_entries_are_not_applied() {
    let l = layout();
    let mut mem = VecMemory::new(l.region_bytes(), 0);
    let mut r = Replayer::new(l, 0);
    let mut entry = vec![0u8; l.slot_bytes() as usize];
    let n = l.encode(0, 7, EntryKind::Request, b"half", &mut entry).unwrap();
    mem.write(Area::Log, l.slot_offset(0), &entry[..n]);
    let n1 = l.encode(1, 7, EntryKind::Request, b"next, torn", &mut entry).unwrap();
    mem.write(Area::Log, l.slot_offset(1), &entry[..n1 - 8]); // trailer missing
    assert!(applied(&mut r, &mut mem).is_empty());
    mem.write(Area::Log, l.slot_offset(1), &entry[..n1]);
    assert_eq!(applied(&mut r, &mut mem), [(0, b"half".to_vec())]);
}

/// The leader's engine and the followers' replayers agree: whatever the leader commits, every
/// replica applies, in the same order (here with a slow follower that catches up).
#[test]
fn t40_replicas_apply_what_the_leader_commits() {
    let mut c = Cluster::ready(3, 0);
    c.faults[2] = common::Fault::Held;
    let values: Vec<Vec<u8>> = (0..10).map(|i| format!("value {i}").into_bytes()).collect();
    for v in &values {
        c.propose(v).unwrap();
        c.run();
    }
    c.release(2);
    c.run();
    let committed: Vec<u64> = c.committed().iter().map(|&(i, _)| i).collect();
    assert_eq!(committed, (0..10).collect::<Vec<_>>());
    // Idle for FUO_PUBLISH_AFTER_NS, the leader writes its FUO.
    for _ in 0..3 {
        c.tick();
    }
    c.run();
    for pos in 0..3 {
        let mut r = Replayer::new(layout(), 0);
        let got = applied(&mut r, &mut c.mems[pos]);
        // The last entry too: the idle leader wrote its FUO to the followers.
        assert_eq!(got.len(), 10, "replica {pos}");
        for (i, v) in got {
            assert_eq!(v, values[i as usize], "replica {pos}, index {i}");
        }
    }
}

/// A replicating leader's replayer takes only its FUO word as news (`Replayer::scan_entries`):
/// the entries after the head do not decide it, and once the scan is back on (a follower again)
/// they do, as §4.2's commit piggybacking says.
#[test]
fn t50_without_the_scan_only_the_fuo_decides() {
    let mut c = Cluster::new(3, 0);
    let mut r = Replayer::new(layout(), 0);
    r.scan_entries(false);
    c.plant(1, 0, 1 << 16 | 1, b"a");
    c.plant(1, 1, 1 << 16 | 1, b"b");
    c.plant(1, 2, 1 << 16 | 1, b"c");
    assert!(applied(&mut r, &mut c.mems[1]).is_empty(), "later entries decide nothing here");
    c.mems[1].store_u64(Area::Log, FUO_OFFSET, 1);
    assert_eq!(applied(&mut r, &mut c.mems[1]), [(0, b"a".to_vec())]);
    r.scan_entries(true);
    assert_eq!(applied(&mut r, &mut c.mems[1]), [(1, b"b".to_vec())]);
    assert_eq!(r.head(), 2);
}

/// A memory that notes every store of the log head, with how many entries were applied then.
struct HeadStores<'a> {
    mem: VecMemory,
    applied: &'a std::cell::Cell<u64>,
    stores: Vec<(u64, u64)>,
}

impl Memory for HeadStores<'_> {
    fn read(&self, area: Area, offset: u64, out: &mut [u8]) {
        self.mem.read(area, offset, out);
    }

    fn write(&mut self, area: Area, offset: u64, data: &[u8]) {
        if area == Area::Log && offset == HEAD_OFFSET {
            let head = u64::from_le_bytes(data.try_into().expect("the head is a word"));
            self.stores.push((head, self.applied.get()));
        }
        self.mem.write(area, offset, data);
    }

    fn write_guarded(&mut self, offset: u64, data: &[u8]) -> Result<(), mu_replication::Revoked> {
        self.mem.write_guarded(offset, data)
    }
}

/// §5.3 log recycling: the leader makes room only from the heads it reads. A follower far
/// behind applies up to a whole log in one poll, and publishes its head entry by entry, not
/// only at the end: published once at the end, the leader saw no progress for as long as the
/// whole log took to apply, and its proposals failed with "log full" while the followers were
/// applying.
#[test]
fn t60_a_long_poll_publishes_its_head_as_it_goes() {
    let l = mu_log::LogLayout::new(1024, 128, mu_log::Integrity::Checksum).unwrap();
    let decided = 1000u64;
    let applied = std::cell::Cell::new(0);
    let mut mem =
        HeadStores { mem: VecMemory::new(l.region_bytes(), 0), applied: &applied, stores: vec![] };
    let mut entry = vec![0u8; l.slot_bytes() as usize];
    for i in 0..decided {
        let n = l.encode(i, 7, EntryKind::Request, format!("v{i}").as_bytes(), &mut entry).unwrap();
        mem.mem.write(Area::Log, l.slot_offset(i), &entry[..n]);
    }
    mem.mem.store_u64(Area::Log, FUO_OFFSET, decided);
    let mut r = Replayer::new(l, 0);
    let count = r.poll(&mut mem, |i, _, _| {
        assert_eq!(i, applied.get(), "in order");
        applied.set(i + 1);
    });
    assert_eq!(count as u64, decided, "one poll applies every decided entry");
    assert_eq!(mem.stores.len() as u64, decided, "one store per entry");
    let mut last = 0;
    for &(head, applied_then) in &mem.stores {
        assert_eq!(head, applied_then, "the head published is what was applied by then");
        assert_eq!(head, last + 1, "no entry applied without a word to the leader");
        last = head;
    }
    assert_eq!(last, decided);
}
