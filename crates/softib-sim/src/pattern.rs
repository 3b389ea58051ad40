//! Data patterns that make every 8-byte word of every operation unique, so that a message
//! placed twice, in the wrong slot, at the wrong offset or not at all is detected.

/// Stream id of operation `op` on QP `qp` (SEND / WRITE payloads).
pub(crate) fn op_data(seed: u64, qp: usize, op: u64) -> u64 {
    mix(seed ^ ((qp as u64) << 48) ^ op)
}

/// Stream id of the READ source of `slot` on QP `qp` (static for the run).
pub(crate) fn read_source(seed: u64, qp: usize, slot: usize) -> u64 {
    mix(!seed ^ ((qp as u64) << 48) ^ slot as u64 ^ 0x5eed_0000_0000)
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Word `i` of stream `id`.
#[inline]
fn word(id: u64, i: u64) -> u64 {
    id ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Fills `buf` with stream `id`.
pub(crate) fn fill(buf: &mut [u8], id: u64) {
    let mut chunks = buf.chunks_exact_mut(8);
    let mut i = 0;
    for c in &mut chunks {
        c.copy_from_slice(&word(id, i).to_le_bytes());
        i += 1;
    }
    let rest = chunks.into_remainder();
    let w = word(id, i).to_le_bytes();
    rest.copy_from_slice(&w[..rest.len()]);
}

/// True when `buf` holds stream `id`.
pub(crate) fn check(buf: &[u8], id: u64) -> bool {
    let mut chunks = buf.chunks_exact(8);
    let mut i = 0;
    // Whole words are compared as integers (no byte-slice comparison per word).
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        if u64::from_le_bytes(w) != word(id, i) {
            return false;
        }
        i += 1;
    }
    let rest = chunks.remainder();
    rest.is_empty() || rest == &word(id, i).to_le_bytes()[..rest.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_check() {
        for len in [0usize, 1, 7, 8, 9, 4096, 4099] {
            let mut b = vec![0u8; len];
            fill(&mut b, 42);
            assert!(check(&b, 42));
            if len > 0 {
                assert!(!check(&b, 43) || len < 1);
                b[len / 2] ^= 1;
                assert!(!check(&b, 42));
            }
        }
        assert_ne!(op_data(1, 0, 5), op_data(1, 0, 6));
        assert_ne!(op_data(1, 0, 5), op_data(1, 1, 5));
    }
}
