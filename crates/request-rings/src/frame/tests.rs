use super::*;

/// splitmix64: a seeded generator for the tests, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

const SLOT_BYTES: usize = 256;
const MAX: usize = SLOT_BYTES - HEADER_BYTES;

fn expect(generation: u64, seq: u64) -> Expect {
    Expect { kinds: &[Kind::Request], generation, seq, payload_bytes_max: MAX }
}

fn frame(generation: u64, seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut slot = vec![0u8; SLOT_BYTES];
    encode(&mut slot, Kind::Request, generation, seq, payload).expect("fits");
    slot
}

#[test]
fn frames_round_trip_at_every_length() {
    let mut rng = Rng(1);
    for len in 0..=MAX {
        let payload = rng.bytes(len);
        let slot = frame(7, 3, &payload);
        let (header, got) = validate(&slot, &expect(7, 3), Checks::Full).expect("valid");
        assert_eq!(got, &payload[..]);
        assert_eq!(
            (header.kind, header.len, header.generation, header.seq),
            (Kind::Request, len as u32, 7, 3)
        );
    }
}

#[test]
fn zeroed_memory_is_no_frame() {
    let slot = vec![0u8; SLOT_BYTES];
    assert_eq!(validate(&slot, &expect(0, 0), Checks::Full), Err(Invalid::NoMagic { found: 0 }));
    assert_eq!(validate(&slot[..10], &expect(0, 0), Checks::Full), Err(Invalid::Short { len: 10 }));
}

#[test]
fn encode_refuses_what_does_not_fit() {
    let mut small = [0u8; HEADER_BYTES + 3];
    assert_eq!(
        encode(&mut small, Kind::Request, 1, 0, &[0; 4]),
        Err(EncodeError::NoRoom { needed: HEADER_BYTES + 4, room: HEADER_BYTES + 3 })
    );
    assert_eq!(encode(&mut small, Kind::Request, 1, 0, &[9; 3]), Ok(HEADER_BYTES + 3));
}

#[test]
fn random_garbage_is_never_accepted_and_never_panics() {
    let mut rng = Rng(2);
    for round in 0..200_000u64 {
        let len = rng.below(SLOT_BYTES as u64 + 1) as usize;
        let mut slot = rng.bytes(len);
        // Half the rounds get a valid magic and version, so the header check is what refuses.
        if round % 2 == 0 && len >= 3 {
            slot[0..2].copy_from_slice(&MAGIC.to_le_bytes());
            slot[2] = VERSION;
        }
        let e = Expect { generation: rng.next(), seq: rng.below(4), ..expect(0, 0) };
        assert!(validate(&slot, &e, Checks::Full).is_err(), "round {round} accepted garbage");
        // Nor with the header's own fields copied into the expectation: only the checks stop it.
        if len >= HEADER_BYTES {
            let e = Expect { generation: u64_at(&slot, 8), seq: u64_at(&slot, 16), ..e };
            assert!(validate(&slot, &e, Checks::Full).is_err(), "round {round} accepted garbage");
        }
    }
}

#[test]
fn any_changed_byte_of_a_frame_is_refused_and_bytes_past_it_do_not_matter() {
    let mut rng = Rng(3);
    let payload = rng.bytes(100);
    let good = frame(11, 5, &payload);
    let end = frame_bytes(payload.len());
    for at in 0..SLOT_BYTES {
        for _ in 0..4 {
            let mut slot = good.clone();
            slot[at] ^= 1 + rng.below(255) as u8;
            let verdict = validate(&slot, &expect(11, 5), Checks::Full);
            if at < end {
                assert!(verdict.is_err(), "a change at byte {at} was accepted");
            } else {
                assert!(verdict.is_ok(), "a change past the frame at byte {at} was refused");
            }
        }
    }
}

#[test]
fn torn_mixes_of_two_frames_pass_only_as_the_new_frame() {
    let mut rng = Rng(4);
    let mut accepted = 0;
    for round in 0..50_000u64 {
        let (old_len, new_len) = (rng.below(MAX as u64) as usize, rng.below(MAX as u64) as usize);
        let old = frame(21, round, &rng.bytes(old_len));
        let new = frame(21, round + 8, &rng.bytes(new_len));
        // Each 8-byte word from one or the other, as writes landing out of order leave them.
        let mut mix = old.clone();
        for word in 0..SLOT_BYTES / 8 {
            if rng.below(2) == 0 {
                mix[word * 8..word * 8 + 8].copy_from_slice(&new[word * 8..word * 8 + 8]);
            }
        }
        let end = frame_bytes(u32::from_le_bytes(new[4..8].try_into().unwrap()) as usize);
        match validate(&mix, &expect(21, round + 8), Checks::Full) {
            Ok(_) => {
                assert_eq!(mix[..end], new[..end], "round {round}: a torn frame was accepted");
                accepted += 1;
            }
            Err(_) => assert_ne!(mix[..end], new[..end], "round {round}: the new frame refused"),
        }
    }
    assert!(accepted > 0, "no mix ever equalled the new frame: the test shows nothing");
}

#[test]
fn rules_each_refuse_with_their_reason() {
    let slot = frame(5, 9, b"hello");
    assert_eq!(
        validate(&slot, &expect(6, 9), Checks::Full),
        Err(Invalid::WrongGeneration { found: 5, expected: 6 })
    );
    assert_eq!(
        validate(&slot, &expect(5, 1), Checks::Full),
        Err(Invalid::WrongSeq { found: 9, expected: 1 })
    );
    let reply = Expect { kinds: &[Kind::Response, Kind::Rejected], ..expect(5, 9) };
    assert_eq!(
        validate(&slot, &reply, Checks::Full),
        Err(Invalid::WrongKind { found: Kind::Request })
    );
    let tight = Expect { payload_bytes_max: 4, ..expect(5, 9) };
    assert_eq!(validate(&slot, &tight, Checks::Full), Err(Invalid::Oversized { len: 5, max: 4 }));
    let mut old_version = slot.clone();
    old_version[2] = VERSION + 1;
    assert_eq!(
        validate(&old_version, &expect(5, 9), Checks::Full),
        Err(Invalid::Version { found: VERSION + 1 })
    );
}

#[test]
fn a_length_past_a_short_slot_is_refused_not_a_panic() {
    // A header announcing the full payload room, in a slot cut shorter than that.
    let slot = frame(1, 0, &[7u8; MAX]);
    assert!(matches!(
        validate(&slot[..HEADER_BYTES + 10], &expect(1, 0), Checks::Full),
        Err(Invalid::Oversized { .. })
    ));
}

#[test]
fn header_only_checks_take_a_torn_payload() {
    // The checker can fail: without the payload check, an intact header over a payload that
    // has not fully landed is taken. This is what `Checks::Full` exists to stop.
    let mut rng = Rng(5);
    let payload = rng.bytes(150);
    let mut torn = frame(3, 0, &payload);
    torn[HEADER_BYTES + 64..].fill(0);
    assert_eq!(validate(&torn, &expect(3, 0), Checks::Full), Err(Invalid::PayloadCheck));
    let (_, got) = validate(&torn, &expect(3, 0), Checks::HeaderOnlyForTests).expect("taken");
    assert_ne!(got, &payload[..]);
}

#[test]
fn rejections_round_trip() {
    let r = Rejection::Oversized { len: 5000, max: 216 };
    assert_eq!(Rejection::from_bytes(&r.to_bytes()), r);
    assert_eq!(Rejection::from_bytes(&[9, 0, 0, 0]), Rejection::Unknown(9));
    assert_eq!(Rejection::from_bytes(&[]), Rejection::Unknown(0));
}
