//! The fabric's pseudo-random numbers: SplitMix64 seeding xoshiro256**.
//!
//! # Value stability
//!
//! The output of every function here is part of softib's contract: a seed given to
//! [`crate::Fabric::new`] reproduces the same run on any platform, any build profile and any
//! later softib version. Changing an algorithm, a constant, or the number of values a function
//! draws is a breaking change (the `known_values` tests pin them).
//!
//! * [`SplitMix64`] — Steele, Lea and Flood's generator (constants as in Vigna's reference
//!   `splitmix64.c`): used only to expand a 64-bit seed into xoshiro state.
//! * [`Rng`] — Blackman and Vigna's xoshiro256** 1.0 (`xoshiro256starstar.c`), its four state
//!   words filled by four consecutive SplitMix64 outputs.
//! * [`Rng::stream`] derives independent generators from one seed: the stream number is mixed
//!   by the SplitMix64 finaliser and xored into the seed, so stream `k` of seed `s` is
//!   `Rng::new(s ^ mix64(k + 1))`.
//! * [`Rng::below`] maps a draw onto `0..n` by multiply-shift (`(x * n) >> 64`, one draw, bias
//!   below n / 2^64); [`Rng::chance`] draws once only when `0 < p < 1` and compares the top 53
//!   bits, as a float in `[0, 1)`, with `p`.

/// Golden-ratio increment of SplitMix64.
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The SplitMix64 output function (the finaliser of MurmurHash3's 64-bit variant, with
/// Stafford's "Mix13" constants).
#[inline]
pub const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// SplitMix64: a 64-bit state advanced by the golden gamma and finalised by [`mix64`].
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub const fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix64(self.state)
    }
}

/// xoshiro256**: the fabric's generator.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator whose state is four SplitMix64 outputs of `seed`.
    pub fn new(seed: u64) -> Self {
        let mut sm = SplitMix64::new(seed);
        let s = [sm.next_u64(), sm.next_u64(), sm.next_u64(), sm.next_u64()];
        // SplitMix64 never yields four zero words in a row, but keep the invariant explicit.
        debug_assert!(s.iter().any(|&w| w != 0));
        Rng { s }
    }

    /// Stream `stream` of `seed`: `Rng::new(seed ^ mix64(stream + 1))`.
    pub fn stream(seed: u64, stream: u64) -> Self {
        Rng::new(seed ^ mix64(stream.wrapping_add(1)))
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// A float in `[0, 1)` from the top 53 bits of one draw.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A value in `0..n` (one draw); 0 without drawing when `n` is 0 or 1.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        if n <= 1 {
            return 0;
        }
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A value in `0..=max` (one draw); 0 without drawing when `max` is 0.
    #[inline]
    pub fn up_to(&mut self, max: u64) -> u64 {
        match max.checked_add(1) {
            Some(n) => self.below(n),
            None => self.next_u64(),
        }
    }

    /// True with probability `p`. Draws only when `0 < p < 1`: `p <= 0` (or NaN) is always false,
    /// `p >= 1` always true.
    #[inline]
    pub fn chance(&mut self, p: f64) -> bool {
        if p.is_nan() || p <= 0.0 {
            false
        } else if p >= 1.0 {
            true
        } else {
            self.next_f64() < p
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_known_values() {
        // Reference outputs of Vigna's splitmix64.c seeded with 1234567.
        let mut sm = SplitMix64::new(1_234_567);
        let want = [
            6_457_827_717_110_365_317u64,
            3_203_168_211_198_807_973,
            9_817_491_932_198_370_423,
            4_593_380_528_125_082_431,
            16_408_922_859_458_223_821,
        ];
        for w in want {
            assert_eq!(sm.next_u64(), w);
        }
    }

    #[test]
    fn xoshiro256starstar_known_values() {
        // xoshiro256** from state {1, 2, 3, 4}: reference outputs of xoshiro256starstar.c.
        let mut r = Rng { s: [1, 2, 3, 4] };
        let want = [
            11_520u64,
            0,
            1_509_978_240,
            1_215_971_899_390_074_240,
            1_216_172_134_540_287_360,
            607_988_272_756_665_600,
        ];
        for w in want {
            assert_eq!(r.next_u64(), w);
        }
    }

    #[test]
    fn seeded_values_are_pinned() {
        // Pins the seeding path (SplitMix64 -> xoshiro state) and the stream derivation; these
        // numbers are what every simulation built on seed 42 depends on.
        let mut r = Rng::new(42);
        let first: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        let mut again = Rng::new(42);
        assert_eq!(first, (0..3).map(|_| again.next_u64()).collect::<Vec<_>>());
        let mut s = Rng::stream(42, 0);
        let mut direct = Rng::new(42 ^ mix64(1));
        assert_eq!(s.next_u64(), direct.next_u64());
        assert_ne!(Rng::stream(42, 0).next_u64(), Rng::stream(42, 1).next_u64());
        assert_eq!(first, PINNED_SEED_42);
    }

    /// Seed 42's first outputs, computed by an independent implementation of the two reference
    /// algorithms; any change here changes every recorded simulation.
    const PINNED_SEED_42: [u64; 3] = [
        1_546_998_764_402_558_742,
        6_990_951_692_964_543_102,
        12_544_586_762_248_559_009,
    ];

    #[test]
    fn below_and_chance_ranges() {
        let mut r = Rng::new(7);
        for n in [2u64, 3, 10, 1 << 40, u64::MAX] {
            for _ in 0..1000 {
                assert!(r.below(n) < n);
            }
        }
        assert_eq!(r.below(0), 0);
        assert_eq!(r.below(1), 0);
        assert!(!r.chance(0.0));
        assert!(!r.chance(f64::NAN));
        assert!(r.chance(1.0));
        let hits = (0..100_000).filter(|_| r.chance(0.25)).count();
        assert!((24_000..26_000).contains(&hits), "{hits}");
        let mut sum = 0u64;
        for _ in 0..100_000 {
            let v = r.up_to(4);
            assert!(v <= 4);
            sum += v;
        }
        // Mean of uniform 0..=4 is 2.
        assert!((195_000..205_000).contains(&sum), "{sum}");
    }
}
