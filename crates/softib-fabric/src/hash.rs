//! The trace hash: a running 64-bit digest of every frame delivered to an endpoint.
//!
//! Two runs are the same run exactly when their trace hashes agree (up to collisions), which is
//! how the determinism self-check compares runs without storing them.
//!
//! # Value stability
//!
//! The digest is part of softib's contract (recorded hashes stay valid across versions and
//! platforms). A word `w` is absorbed into a 64-bit state `x` as
//! `x = (x ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(31)`. Starting from the digest
//! `h` ([`TraceHash::INITIAL`] for an empty trace), one delivery is folded in as:
//!
//! 1. absorb into `h` the delivery time in ns, the receiving node's index and the frame length;
//! 2. four lanes start at `l[i] = h ^ ((i + 1) * 0xC2B2_AE3D_27D4_EB4F)` (wrapping); each whole
//!    32-byte block of the frame is read as four little-endian words, word `i` absorbed into
//!    `l[i]`;
//! 3. absorb `l[0]`, `l[1]`, `l[2]`, `l[3]` into `h`, then the bytes after the last whole
//!    block as little-endian words (the last one zero-padded);
//! 4. `h = mix64(h)` (the SplitMix64 finaliser, [`crate::rng::mix64`]).
//!
//! The four lanes are independent chains, so a frame hashes at several bytes per cycle.

use crate::rng::mix64;

const MUL: u64 = 0x9E37_79B9_7F4A_7C15;
const LANE: u64 = 0xC2B2_AE3D_27D4_EB4F;

/// A running digest of delivered frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceHash(u64);

impl Default for TraceHash {
    fn default() -> Self {
        TraceHash(Self::INITIAL)
    }
}

impl TraceHash {
    /// The digest of an empty trace.
    pub const INITIAL: u64 = 0x736F_6674_6962_2E66; // "softib.f"

    #[inline]
    fn absorb(h: u64, w: u64) -> u64 {
        (h ^ w).wrapping_mul(MUL).rotate_left(31)
    }

    /// Folds in one delivery of `frame` to node `node` at `time_ns`.
    pub fn record(&mut self, time_ns: u64, node: u32, frame: &[u8]) {
        let mut h = self.0;
        h = Self::absorb(h, time_ns);
        h = Self::absorb(h, u64::from(node));
        h = Self::absorb(h, frame.len() as u64);
        let mut lanes = [0u64; 4];
        for (i, l) in lanes.iter_mut().enumerate() {
            *l = h ^ (i as u64 + 1).wrapping_mul(LANE);
        }
        let mut blocks = frame.chunks_exact(32);
        for b in &mut blocks {
            for (i, l) in lanes.iter_mut().enumerate() {
                let mut w = [0u8; 8];
                w.copy_from_slice(&b[i * 8..i * 8 + 8]);
                *l = Self::absorb(*l, u64::from_le_bytes(w));
            }
        }
        for l in lanes {
            h = Self::absorb(h, l);
        }
        let mut chunks = blocks.remainder().chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            h = Self::absorb(h, u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let w = rest
                .iter()
                .rev()
                .fold(0u64, |w, &b| (w << 8) | u64::from(b));
            h = Self::absorb(h, w);
        }
        self.0 = mix64(h);
    }

    /// The digest so far.
    pub fn value(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sensitive_to_time_node_order_and_bytes() {
        let frame = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        let mut a = TraceHash::default();
        a.record(10, 0, &frame);
        let base = a.value();
        assert_ne!(base, TraceHash::INITIAL);

        let mut b = TraceHash::default();
        b.record(11, 0, &frame);
        assert_ne!(b.value(), base);

        let mut c = TraceHash::default();
        c.record(10, 1, &frame);
        assert_ne!(c.value(), base);

        let mut d = TraceHash::default();
        let mut f2 = frame;
        f2[8] ^= 0x80;
        d.record(10, 0, &f2);
        assert_ne!(d.value(), base);

        // A trailing zero byte is not the same frame (the length is hashed).
        let mut e = TraceHash::default();
        e.record(10, 0, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 0]);
        assert_ne!(e.value(), base);

        let (mut x, mut y) = (TraceHash::default(), TraceHash::default());
        x.record(1, 0, &[1]);
        x.record(2, 0, &[2]);
        y.record(2, 0, &[2]);
        y.record(1, 0, &[1]);
        assert_ne!(x.value(), y.value());
    }

    #[test]
    fn value_follows_the_documented_recipe() {
        // A step-by-step computation of the recipe in the module docs, for a 41-byte frame:
        // one whole block, one whole word after it, one padded word.
        let frame = b"softib trace hash: 32 bytes + a tail!...#";
        assert_eq!(frame.len(), 41);
        let ab = |x: u64, w: u64| (x ^ w).wrapping_mul(MUL).rotate_left(31);
        let word = |b: &[u8]| {
            let mut w = [0u8; 8];
            w[..b.len()].copy_from_slice(b);
            u64::from_le_bytes(w)
        };
        let mut h = TraceHash::INITIAL;
        h = ab(ab(ab(h, 1_200), 3), 41);
        let lanes: Vec<u64> = (0..4u64)
            .map(|i| {
                ab(
                    h ^ (i + 1).wrapping_mul(LANE),
                    word(&frame[i as usize * 8..][..8]),
                )
            })
            .collect();
        for l in lanes {
            h = ab(h, l);
        }
        h = ab(h, word(&frame[32..40]));
        h = ab(h, word(&frame[40..]));
        let mut t = TraceHash::default();
        t.record(1_200, 3, frame);
        assert_eq!(t.value(), mix64(h));
    }

    #[test]
    fn value_is_pinned() {
        // Recorded traces depend on this exact value (see "Value stability"); it was computed
        // by a separate implementation of the documented recipe.
        let mut t = TraceHash::default();
        t.record(1_200, 3, &(0..100u8).collect::<Vec<_>>());
        assert_eq!(t.value(), PINNED);
    }

    const PINNED: u64 = 850_548_738_509_445_900;
}
