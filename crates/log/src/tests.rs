//! Tests of the log's bytes. Each names the part of the Mu paper it checks.

use super::*;

fn layout(integrity: Integrity) -> LogLayout {
    LogLayout::new(8, 256, integrity).unwrap()
}

fn encoded(l: &LogLayout, index: u64, proposal: u64, value: &[u8]) -> Vec<u8> {
    let mut slot = vec![0u8; l.slot_bytes() as usize];
    l.encode(index, proposal, EntryKind::Request, value, &mut slot).unwrap();
    slot
}

/// A deterministic generator for the tests (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Listing 1: "slots [] = (0, ⊥) for all slots": a zeroed slot is empty, in both modes.
#[test]
fn zeroed_slot_is_empty() {
    for integrity in [Integrity::Canary, Integrity::Checksum] {
        let l = layout(integrity);
        assert_eq!(l.decode(3, &vec![0; 256]), Slot::Empty);
    }
}

#[test]
fn layout_is_checked() {
    assert_eq!(LogLayout::new(1, 256, Integrity::Canary), Err(LogError::TooFewSlots(1)));
    assert_eq!(LogLayout::new(8, 20, Integrity::Canary), Err(LogError::BadSlotSize(20)));
    assert_eq!(LogLayout::new(8, 100, Integrity::Canary), Err(LogError::BadSlotSize(100)));
    assert!(matches!(
        LogLayout::new(u64::MAX, 4096, Integrity::Canary),
        Err(LogError::TooLarge { .. })
    ));
    let l = layout(Integrity::Canary);
    assert_eq!(l.region_bytes(), 256 + 8 * 256);
    assert_eq!(l.max_value_bytes(), 256 - 24);
    assert_eq!(l.slot_offset(0), HEADER_BYTES);
    assert_eq!(l.slot_offset(9), HEADER_BYTES + 256, "index 9 reuses slot 1 of 8");
}

#[test]
fn entries_round_trip_at_every_length() {
    for integrity in [Integrity::Canary, Integrity::Checksum] {
        let l = layout(integrity);
        for len in [0, 1, 7, 8, 9, 100, l.max_value_bytes()] {
            let value: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let slot = encoded(&l, 5, 42, &value);
            assert_eq!(
                l.decode(5, &slot),
                Slot::Entry(Entry {
                    proposal: 42,
                    kind: EntryKind::Request,
                    value: &value,
                    in_flight_before: 0
                }),
                "{integrity:?}, {len} bytes"
            );
        }
    }
}

#[test]
fn bad_entries_are_refused() {
    let l = layout(Integrity::Canary);
    let mut out = vec![0u8; 512];
    let too_big = vec![0u8; l.max_value_bytes() + 1];
    assert_eq!(
        l.encode(0, 1, EntryKind::Request, &too_big, &mut out),
        Err(LogError::ValueTooLarge { len: too_big.len(), max: l.max_value_bytes() })
    );
    assert_eq!(l.encode(0, 0, EntryKind::Request, b"x", &mut out), Err(LogError::ZeroProposal));
}

/// §5.3: slots are reused every `slots_count` indexes. An entry of an earlier lap that was not
/// zeroed must not read as an entry of the new index: one lap back it reads as stale (as good as
/// empty for prepare), further back as incomplete.
#[test]
fn an_earlier_lap_never_reads_as_this_one() {
    for integrity in [Integrity::Canary, Integrity::Checksum] {
        let l = layout(integrity);
        let n = l.slots_count();
        let slot = encoded(&l, 2, 7, b"old lap");
        assert_eq!(l.decode(2 + n, &slot), Slot::Stale, "{integrity:?}");
        assert_eq!(l.decode(2 + 2 * n, &slot), Slot::Incomplete, "{integrity:?}");
        if integrity == Integrity::Checksum {
            let mut torn = slot.clone();
            torn[16] ^= 1;
            assert_eq!(l.decode(2 + n, &torn), Slot::Incomplete, "checksum covers the value");
        }
    }
}

/// §4.2 "Replayer": the reader that wants only this index's entry (the replayer) gets the
/// entry, and nothing for a slot of the lap before, which a full decoding calls stale.
#[test]
fn read_entry_takes_only_this_index() {
    for integrity in [Integrity::Canary, Integrity::Checksum] {
        let l = layout(integrity);
        let n = l.slots_count();
        let mut buf = vec![0u8; l.slot_bytes() as usize];
        let slot = encoded(&l, 3, 7, b"first lap");
        let mut read = |index| {
            let e = l.read_entry(index, &mut buf, |out| out.copy_from_slice(&slot[..out.len()]));
            e.map(|e| e.value.to_vec())
        };
        assert_eq!(read(3), Some(b"first lap".to_vec()), "{integrity:?}");
        assert_eq!(read(3 + n), None, "{integrity:?}");
        assert_eq!(read(4), None, "{integrity:?}");
        assert_eq!(l.decode(3 + n, &slot), Slot::Stale, "{integrity:?}");
    }
}

/// §4.2 "Replayer": with writes visible left to right, every prefix of an entry — over an empty
/// slot, or over an older entry at the same index (a new leader re-proposing with a higher
/// proposal number) — reads as empty, incomplete, or the old entry whole; never as something else.
#[test]
fn every_left_to_right_prefix_is_safe() {
    for integrity in [Integrity::Canary, Integrity::Checksum] {
        let l = layout(integrity);
        let old = encoded(&l, 4, 3, b"the old value, accepted under proposal 3");
        for new_value in
            [&b"new"[..], b"a longer new value that runs past where the old trailer was"]
        {
            let new = encoded(&l, 4, 9, new_value);
            let new_len = LogLayout::entry_bytes(new_value.len());
            for base in [vec![0u8; 256], old.clone()] {
                for prefix in 0..new_len {
                    let mut slot = base.clone();
                    slot[..prefix].copy_from_slice(&new[..prefix]);
                    match l.decode(4, &slot) {
                        Slot::Empty | Slot::Incomplete | Slot::Stale => {}
                        Slot::Entry(e) => assert!(
                            slot == base && e.proposal == 3,
                            "{integrity:?}: prefix {prefix} read as {e:?}"
                        ),
                    }
                }
                let mut slot = base.clone();
                slot[..new_len].copy_from_slice(&new[..new_len]);
                assert!(
                    matches!(l.decode(4, &slot), Slot::Entry(e) if e.proposal == 9 && e.value == new_value)
                );
            }
        }
    }
}

/// §4.2 "Replayer": "Alternatively, we could store a checksum of the data in the canary". When
/// the bytes of a write land in any order, checksum mode never accepts a partial entry, while
/// canary mode does: the canary may land before the value.
#[test]
fn out_of_order_landing_breaks_canary_but_not_checksum() {
    let mut rng = Rng(0x5eed);
    let mut canary_fooled = 0;
    for integrity in [Integrity::Canary, Integrity::Checksum] {
        let l = layout(integrity);
        for round in 0..2000u64 {
            let value: Vec<u8> = (0..40 + round as usize % 100).map(|_| rng.next() as u8).collect();
            let entry = encoded(&l, round, 1 + round, &value);
            let len = LogLayout::entry_bytes(value.len());
            // Land the entry 8 bytes at a time, in a shuffled order.
            let mut words: Vec<usize> = (0..len / 8).collect();
            for i in (1..words.len()).rev() {
                words.swap(i, rng.below(i + 1));
            }
            let mut slot = vec![0u8; 256];
            for (landed, &w) in words.iter().enumerate() {
                slot[w * 8..w * 8 + 8].copy_from_slice(&entry[w * 8..w * 8 + 8]);
                let complete = landed + 1 == words.len();
                if let Slot::Entry(e) = l.decode(round, &slot) {
                    if !complete {
                        assert_eq!(
                            integrity,
                            Integrity::Canary,
                            "checksum accepted a partial entry"
                        );
                        assert_ne!(
                            e.value,
                            &value[..],
                            "a partial entry cannot hold the whole value"
                        );
                        canary_fooled += 1;
                    }
                }
            }
            assert!(matches!(l.decode(round, &slot), Slot::Entry(e) if e.value == value));
        }
    }
    assert!(
        canary_fooled > 0,
        "reordered landing never fooled the canary: the test proves nothing"
    );
}

/// Trailers differ between indexes and proposals, so a slot's bytes name the entry they are.
#[test]
fn trailers_depend_on_index_and_proposal() {
    for integrity in [Integrity::Canary, Integrity::Checksum] {
        let l = layout(integrity);
        let slot = encoded(&l, 6, 11, b"v");
        assert!(matches!(l.decode(6, &slot), Slot::Entry(_)));
        assert_eq!(l.decode(7, &slot), Slot::Incomplete, "{integrity:?}");
        let mut other = slot.clone();
        other[0..8].copy_from_slice(&12u64.to_le_bytes());
        assert_eq!(l.decode(6, &other), Slot::Incomplete, "{integrity:?}: proposal changed");
    }
}

/// §4.2 commit piggybacking with several accepts outstanding (§7.4): an entry says how many
/// entries below it were still in flight, so a follower learns which indexes are decided; in
/// checksum mode a torn count never reads as complete.
#[test]
fn entries_carry_what_their_writer_knew_decided() {
    for integrity in [Integrity::Canary, Integrity::Checksum] {
        let l = layout(integrity);
        let mut slot = vec![0u8; 256];
        l.encode_pipelined(20, 9, EntryKind::Batch, b"four", 3, &mut slot).unwrap();
        let Slot::Entry(e) = l.decode(20, &slot) else { panic!("{integrity:?}: not an entry") };
        assert_eq!((e.in_flight_before, e.kind, e.value), (3, EntryKind::Batch, &b"four"[..]));
        assert_eq!(e.decided_below(20), 17, "indexes 17, 18, 19 were in flight");
        let plain = encoded(&l, 20, 9, b"four");
        let Slot::Entry(p) = l.decode(20, &plain) else { panic!("not an entry") };
        assert_eq!(p.decided_below(20), 20, "one at a time: everything below is decided");
    }
    let l = layout(Integrity::Checksum);
    let mut slot = vec![0u8; 256];
    l.encode_pipelined(20, 9, EntryKind::Request, b"four", 3, &mut slot).unwrap();
    slot[14] = 0; // the count torn: claims more than its writer knew
    assert_eq!(l.decode(20, &slot), Slot::Incomplete);
}

/// What a decoded slot says, owned, to compare outcomes of different copies.
fn outcome(slot: Slot<'_>) -> String {
    match slot {
        Slot::Entry(e) => format!("entry {} {:?}", e.proposal, e.value),
        other => format!("{other:?}"),
    }
}

/// §4.2 "Replayer" polls the slot at its head: `read_slot` copies a prefix, and the rest of the
/// entry only when it is longer, and reads exactly what copying the whole slot reads.
#[test]
fn bounded_reads_decode_as_whole_slots() {
    for integrity in [Integrity::Canary, Integrity::Checksum] {
        let l = LogLayout::new(8, 1024, integrity).unwrap();
        for len in [0, 1, 64, 200, 232, 233, 500, l.max_value_bytes()] {
            let value: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            let slot = encoded(&l, 5, 2, &value);
            let mut copied = Vec::new();
            let mut buf = vec![0xee; 1024];
            let read = l.read_slot(5, &mut buf, |out| {
                copied.push(out.len());
                out.copy_from_slice(&slot[..out.len()]);
            });
            assert_eq!(outcome(read), outcome(l.decode(5, &slot)), "{integrity:?} {len}");
            let extent = LogLayout::entry_bytes(len);
            if extent <= READ_PREFIX_BYTES {
                assert_eq!(copied, [READ_PREFIX_BYTES]);
            } else {
                assert_eq!(copied, [READ_PREFIX_BYTES, extent]);
            }
        }
        let zeroed = vec![0u8; 1024];
        let mut buf = vec![0xee; 1024];
        let read = l.read_slot(5, &mut buf, |out| out.copy_from_slice(&zeroed[..out.len()]));
        assert!(matches!(read, Slot::Empty));
    }
}

/// §4.2 and §5.3: a leader overwrites a slot (a higher proposal, or the next lap) while a
/// follower reads it in two copies. Whatever point the write has reached at each copy, the
/// outcome is what one whole-slot copy at the time of the first or of the second gives: a torn
/// mix of the two copies never reads as an entry.
#[test]
fn bounded_reads_of_a_slot_being_overwritten_are_whole() {
    for integrity in [Integrity::Canary, Integrity::Checksum] {
        let l = LogLayout::new(8, 1024, integrity).unwrap();
        let old = encoded(&l, 4, 3, &[0x11; 400]);
        for new_len in [10, 300, 700] {
            let new = encoded(&l, 4, 9, &vec![0x22; new_len]);
            let extent = LogLayout::entry_bytes(new_len);
            let at = |p: usize| {
                let mut s = old.clone();
                s[..p].copy_from_slice(&new[..p]);
                s
            };
            for p1 in (0..=extent).step_by(7).chain([extent]) {
                for p2 in (p1..=extent).step_by(13).chain([extent]) {
                    let (s1, s2) = (at(p1), at(p2));
                    let mut calls = 0;
                    let mut buf = vec![0u8; 1024];
                    let read = l.read_slot(4, &mut buf, |out| {
                        let from = if calls == 0 { &s1 } else { &s2 };
                        calls += 1;
                        out.copy_from_slice(&from[..out.len()]);
                    });
                    let got = outcome(read);
                    let whole = [outcome(l.decode(4, &s1)), outcome(l.decode(4, &s2))];
                    // Incomplete: the entry grew between the copies; the reader tries again.
                    assert!(
                        whole.contains(&got) || got == "Incomplete",
                        "{integrity:?} new {new_len} B, copies at {p1} and {p2}: {got}"
                    );
                }
            }
        }
    }
}

/// Checksum mode (§4.2, hardware without left-to-right visibility): any one byte of an entry's
/// header, value or trailer changed, at any value length (every lane of the checksum and every length of its tail), reads
/// as incomplete.
#[test]
fn the_checksum_covers_every_byte_at_every_length() {
    let l = LogLayout::new(4, 256, Integrity::Checksum).unwrap();
    for len in 0..=l.max_value_bytes().min(100) {
        let value: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        let slot = encoded(&l, 9, 3, &value);
        let entry_bytes = LogLayout::entry_bytes(len);
        assert!(matches!(l.decode(9, &slot), Slot::Entry(e) if e.value == &value[..]), "{len}");
        for at in 0..entry_bytes {
            let padding = ENTRY_HEADER_BYTES + len..entry_bytes - TRAILER_BYTES;
            if padding.contains(&at) {
                continue; // the zeros that round the value up to the trailer: no reader looks
            }
            let mut torn = slot.clone();
            torn[at] ^= 0x10;
            let outcome = l.decode(9, &torn);
            assert!(!matches!(outcome, Slot::Entry(_)), "len {len}, byte {at}: {outcome:?}");
        }
    }
}
