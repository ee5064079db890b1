//! Standard base64 with padding (RFC 4648 section 4), which etcd's JSON gateway uses for keys
//! and values.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Appends the base64 encoding of `bytes` to `out`.
pub(crate) fn encode_into(out: &mut String, bytes: &[u8]) {
    for chunk in bytes.chunks(3) {
        let b0 = chunk[0];
        let b1 = chunk.get(1).copied().unwrap_or(0);
        let b2 = chunk.get(2).copied().unwrap_or(0);
        let triple = u32::from(b0) << 16 | u32::from(b1) << 8 | u32::from(b2);
        let sextet = |shift: u32| char::from(ALPHABET[((triple >> shift) & 0x3f) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
}

pub(crate) fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    encode_into(&mut out, bytes);
    out
}

/// Decodes padded base64; `None` if `text` is not valid padded base64.
pub(crate) fn decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if bytes.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let quads_count = bytes.len() / 4;
    for (quad_index, quad) in bytes.chunks(4).enumerate() {
        let is_last = quad_index + 1 == quads_count;
        let padding_count = quad.iter().rev().take_while(|&&byte| byte == b'=').count();
        if padding_count > 2 || (padding_count > 0 && !is_last) {
            return None;
        }
        let mut triple = 0u32;
        for &byte in &quad[..4 - padding_count] {
            let sextet = ALPHABET.iter().position(|&symbol| symbol == byte)?;
            triple = triple << 6 | sextet as u32;
        }
        triple <<= 6 * padding_count as u32;
        let decoded = [(triple >> 16) as u8, (triple >> 8) as u8, triple as u8];
        out.extend_from_slice(&decoded[..3 - padding_count]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test vectors of RFC 4648 section 10.
    #[test]
    fn rfc_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(encode(plain.as_bytes()), encoded);
            assert_eq!(decode(encoded).as_deref(), Some(plain.as_bytes()));
        }
    }

    #[test]
    fn every_byte_round_trips_and_garbage_is_rejected() {
        let all: Vec<u8> = (0..=255).collect();
        for length in 0..all.len() {
            assert_eq!(decode(&encode(&all[..length])).as_deref(), Some(&all[..length]));
        }
        for bad in ["Zm9", "Zm9v!A==", "Z===", "Zg==Zm9v", "===="] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }
}
