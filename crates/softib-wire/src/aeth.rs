//! AETH — ACK Extended Transport Header (IBA 9.3), 4 bytes, carried by ACKNOWLEDGE, ATOMIC
//! ACKNOWLEDGE and the first and last (or only) RDMA READ response packets.
//!
//! ```text
//!  byte 0   Syndrome
//!  byte 1-3 MSN (message sequence number)
//! ```
//!
//! The syndrome byte (`spec/tables.md` §3):
//!
//! ```text
//!  bit 7    bits 6-5  bits 4-0
//!  0        00        credit count code          ACK
//!  0        01        RNR NAK timer code         RNR NAK
//!  0        10        -                          reserved
//!  0        11        NAK code (0-4 defined)     NAK
//!  1        --        -                          reserved
//! ```
//!
//! [`Aeth`] keeps the raw syndrome byte so that re-emitting is byte-identical;
//! [`AethSyndrome`] is its decoded form, with the RNR timer ([`RnrTimer`], §4) and end-to-end
//! credit ([`CreditCode`], §5) encodings.

use crate::error::Header;
use crate::field_macros::be_fields_header;
use crate::psn::Msn;

/// Length of the AETH in bytes.
pub const LEN: usize = 4;

mod field {
    pub const SYNDROME: usize = 0;
    pub const MSN: usize = 1;

    /// Bit 7 of the syndrome: reserved, must be 0.
    pub const RESV_BIT: u8 = 0x80;
    pub const CLASS_SHIFT: u8 = 5;
    pub const CLASS_MASK: u8 = 0x60;
    /// Bits 4:0 of the syndrome: credit code, RNR timer code or NAK code.
    pub const VALUE_MASK: u8 = 0x1F;

    pub const CLASS_ACK: u8 = 0b00;
    pub const CLASS_RNR_NAK: u8 = 0b01;
    pub const CLASS_NAK: u8 = 0b11;
}

/// End-to-end credit count code (5 bits) carried in the syndrome of an ACK
/// (`spec/tables.md` §5, rdmavt's `credit_table`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct CreditCode(u8);

/// Credits for codes 0x00..=0x1E; 0x1F is [`CreditCode::INVALID`].
const CREDITS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

impl CreditCode {
    /// Code 0x1F: no flow-control information; the requester treats credits as unlimited.
    /// Linux rxe sends this in every ACK.
    pub const INVALID: CreditCode = CreditCode(0x1F);

    /// Builds a code from the low 5 bits of `code`.
    pub const fn new(code: u8) -> Self {
        CreditCode(code & field::VALUE_MASK)
    }

    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        self.0
    }

    /// The number of receive WQEs the code stands for; `None` for [`CreditCode::INVALID`].
    pub const fn credits(self) -> Option<u32> {
        if self.0 == Self::INVALID.0 {
            None
        } else {
            Some(CREDITS[self.0 as usize])
        }
    }

    /// The code for the largest table value not above `available` (as rdmavt encodes its free
    /// receive WQEs): 5 encodes as 4, anything from 32768 up as 32768.
    pub fn encode_floor(available: u32) -> CreditCode {
        // CREDITS[0] == 0 <= available, so the partition point is at least 1.
        let above = CREDITS.partition_point(|&c| c <= available);
        CreditCode(above.saturating_sub(1) as u8)
    }
}

/// RNR NAK timer code (5 bits): how long the requester waits before retrying after an RNR NAK
/// (`spec/tables.md` §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct RnrTimer(u8);

/// Delay of each RNR timer code in nanoseconds, indexed by code.
const RNR_NANOS: [u64; 32] = [
    655_360_000, // 0: the longest delay
    10_000,
    20_000,
    30_000,
    40_000,
    60_000,
    80_000,
    120_000,
    160_000,
    240_000,
    320_000,
    480_000,
    640_000,
    960_000,
    1_280_000,
    1_920_000,
    2_560_000,
    3_840_000,
    5_120_000,
    7_680_000,
    10_240_000,
    15_360_000,
    20_480_000,
    30_720_000,
    40_960_000,
    // 25: 61.44 ms per the IBA table. Linux rxe's rnrnak_usec table has 61410 us here, a typo.
    61_440_000,
    81_920_000,
    122_880_000,
    163_840_000,
    245_760_000,
    327_680_000,
    491_520_000,
];

impl RnrTimer {
    /// Builds a timer code from the low 5 bits of `code`.
    pub const fn new(code: u8) -> Self {
        RnrTimer(code & field::VALUE_MASK)
    }

    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        self.0
    }

    /// The delay the code stands for, in nanoseconds (code 1 = 0.01 ms ... code 31 =
    /// 491.52 ms, code 0 = 655.36 ms).
    pub const fn as_nanos(self) -> u64 {
        RNR_NANOS[self.0 as usize]
    }

    /// The code with the shortest delay that is at least `ns`; code 0 (655.36 ms, the longest)
    /// for anything longer.
    pub fn from_nanos_ceil(ns: u64) -> RnrTimer {
        // Codes 1..=31 have increasing delays; code 0 is the longest of all.
        (1u8..=31)
            .map(RnrTimer)
            .find(|t| t.as_nanos() >= ns)
            .unwrap_or(RnrTimer(0))
    }
}

/// NAK code (syndrome bits 4:0 when bits 6:5 are 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: PSN sequence error.
    PsnSequenceError,
    /// 1: invalid request.
    InvalidRequest,
    /// 2: remote access error.
    RemoteAccessError,
    /// 3: remote operational error.
    RemoteOperationalError,
    /// 4: invalid RD request.
    InvalidRdRequest,
    /// 5..=31: reserved; holds the 5-bit code.
    Reserved(u8),
}

impl NakCode {
    /// Decodes the low 5 bits of `code`.
    pub const fn from_code(code: u8) -> NakCode {
        match code & field::VALUE_MASK {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }

    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & field::VALUE_MASK,
        }
    }
}

/// A decoded AETH syndrome byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AethSyndrome {
    /// 0b000_ccccc: positive acknowledgement with an end-to-end credit code.
    Ack { credits: CreditCode },
    /// 0b001_ttttt: receiver not ready; retry after the timer.
    RnrNak { timer: RnrTimer },
    /// 0b011_nnnnn: negative acknowledgement.
    Nak(NakCode),
    /// Bit 7 set, or class 0b10: reserved; holds the whole byte.
    Reserved(u8),
}

impl AethSyndrome {
    /// Decodes a syndrome byte. Total: every byte decodes, and [`AethSyndrome::to_byte`] gives
    /// it back.
    pub const fn from_byte(b: u8) -> AethSyndrome {
        if b & field::RESV_BIT != 0 {
            return AethSyndrome::Reserved(b);
        }
        let value = b & field::VALUE_MASK;
        match (b & field::CLASS_MASK) >> field::CLASS_SHIFT {
            field::CLASS_ACK => AethSyndrome::Ack {
                credits: CreditCode(value),
            },
            field::CLASS_RNR_NAK => AethSyndrome::RnrNak {
                timer: RnrTimer(value),
            },
            field::CLASS_NAK => AethSyndrome::Nak(NakCode::from_code(value)),
            _ => AethSyndrome::Reserved(b),
        }
    }

    /// Encodes the syndrome byte. `Reserved(b)` gives `b` unchanged.
    pub const fn to_byte(self) -> u8 {
        match self {
            AethSyndrome::Ack { credits } => {
                (field::CLASS_ACK << field::CLASS_SHIFT) | (credits.0 & field::VALUE_MASK)
            }
            AethSyndrome::RnrNak { timer } => {
                (field::CLASS_RNR_NAK << field::CLASS_SHIFT) | (timer.0 & field::VALUE_MASK)
            }
            AethSyndrome::Nak(code) => (field::CLASS_NAK << field::CLASS_SHIFT) | code.code(),
            AethSyndrome::Reserved(b) => b,
        }
    }
}

impl core::fmt::Display for AethSyndrome {
    /// `ACK credits=N` / `ACK credits=invalid`, `RNR-NAK 0.64 ms`, `NAK PSN-sequence-error`, ...
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            AethSyndrome::Ack { credits } => match credits.credits() {
                Some(n) => write!(f, "ACK credits={n}"),
                None => f.write_str("ACK credits=invalid"),
            },
            AethSyndrome::RnrNak { timer } => {
                let ns = timer.as_nanos();
                write!(
                    f,
                    "RNR-NAK {}.{:02} ms",
                    ns / 1_000_000,
                    (ns % 1_000_000) / 10_000
                )
            }
            AethSyndrome::Nak(code) => f.write_str(match code {
                NakCode::PsnSequenceError => "NAK PSN-sequence-error",
                NakCode::InvalidRequest => "NAK invalid-request",
                NakCode::RemoteAccessError => "NAK remote-access-error",
                NakCode::RemoteOperationalError => "NAK remote-operational-error",
                NakCode::InvalidRdRequest => "NAK invalid-RD-request",
                NakCode::Reserved(_) => "NAK reserved-code",
            }),
            AethSyndrome::Reserved(b) => write!(f, "reserved syndrome {b:#04x}"),
        }
    }
}

be_fields_header! {
    /// Zero-copy view of an AETH at the start of `buffer`.
    pub struct AethView;

    /// A parsed AETH.
    pub struct Aeth(Header::Aeth, "AETH", LEN) {
        /// The raw syndrome byte; see [`Aeth::decoded`].
        pub syndrome: u8 = field::SYNDROME, set_syndrome;
        /// MSN: the responder's message sequence number.
        pub msn: Msn = field::MSN, set_msn;
    }

    /// The syndrome is kept raw; reserved syndromes are judged by the requester, not here.
    fn parse;
}

impl Aeth {
    /// An AETH carrying `syndrome` and `msn`.
    pub const fn new(syndrome: AethSyndrome, msn: Msn) -> Aeth {
        Aeth {
            syndrome: syndrome.to_byte(),
            msn,
        }
    }

    /// The decoded syndrome.
    pub const fn decoded(&self) -> AethSyndrome {
        AethSyndrome::from_byte(self.syndrome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bth::Bth;
    use crate::field_macros::header_tests;
    use crate::opcode::Opcode;
    use crate::psn::{Psn, Qpn};
    use proptest::prelude::*;

    header_tests!(Aeth, Header::Aeth);

    // BTH + AETH of RC ACKNOWLEDGE packets from the test vectors:
    // send_bw_rx1_s64_n20.pcap frame 46: RNR NAK 0x2c (timer 12 = 0.64 ms per the README),
    // MSN 5, for the client's 6th SEND (client PSN starts at 0x6176d9), QPN 0x2d.
    const RNR_NAK: [u8; 16] = [
        0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x2d, 0x00, 0x61, 0x76, 0xde, 0x2c, 0x00, 0x00,
        0x05,
    ];
    // send_bw_rx1_s64_n20.pcap frame 47: NAK PSN sequence error 0x60, MSN 5, same PSN.
    const NAK_SEQ: [u8; 16] = [
        0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x2d, 0x00, 0x61, 0x76, 0xde, 0x60, 0x00, 0x00,
        0x05,
    ];
    // loss_write_bw_s4096_n10.pcap frame 45: ACK 0x1f (credits invalid) MSN 1 for the last
    // packet (PSN 0xc304fc + 3) of the first 4096-byte write, QPN 0x2f.
    const ACK: [u8; 16] = [
        0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x2f, 0x00, 0xc3, 0x04, 0xff, 0x1f, 0x00, 0x00,
        0x01,
    ];

    fn check_real(pkt: &[u8; 16], qpn: u32, psn: u32, msn: u32, syn: AethSyndrome) {
        let bth = Bth::parse(pkt).unwrap();
        assert_eq!(bth.opcode, Opcode::RC_ACKNOWLEDGE);
        assert_eq!(bth.dest_qp, Qpn::new(qpn));
        assert_eq!(bth.psn, Psn::new(psn));
        let aeth = Aeth::parse(&pkt[Bth::LEN..]).unwrap();
        assert_eq!(aeth.msn, Msn::new(msn));
        assert_eq!(aeth.decoded(), syn);
        assert_eq!(Aeth::new(syn, Msn::new(msn)), aeth);
        let mut out = [0u8; 4];
        assert_eq!(aeth.emit(&mut out), Ok(4));
        assert_eq!(&out[..], &pkt[Bth::LEN..]);
    }

    #[test]
    fn syndrome_display() {
        assert_eq!(
            AethSyndrome::from_byte(0x1f).to_string(),
            "ACK credits=invalid"
        );
        assert_eq!(AethSyndrome::from_byte(0x05).to_string(), "ACK credits=6");
        assert_eq!(AethSyndrome::from_byte(0x2c).to_string(), "RNR-NAK 0.64 ms");
        assert_eq!(
            AethSyndrome::from_byte(0x20).to_string(),
            "RNR-NAK 655.36 ms"
        );
        assert_eq!(
            AethSyndrome::from_byte(0x60).to_string(),
            "NAK PSN-sequence-error"
        );
        assert_eq!(
            AethSyndrome::from_byte(0x80).to_string(),
            "reserved syndrome 0x80"
        );
    }

    #[test]
    fn parse_real_headers() {
        let rnr = AethSyndrome::RnrNak {
            timer: RnrTimer::new(12),
        };
        check_real(&RNR_NAK, 0x2d, 0x6176d9 + 5, 5, rnr);
        assert_eq!(RnrTimer::new(12).as_nanos(), 640_000);
        check_real(
            &NAK_SEQ,
            0x2d,
            0x6176de,
            5,
            AethSyndrome::Nak(NakCode::PsnSequenceError),
        );
        check_real(
            &ACK,
            0x2f,
            0xc304fc + 3,
            1,
            AethSyndrome::Ack {
                credits: CreditCode::INVALID,
            },
        );
        assert_eq!(CreditCode::INVALID.credits(), None);
    }

    #[test]
    fn syndrome_classes() {
        assert_eq!(
            AethSyndrome::from_byte(0x00),
            AethSyndrome::Ack {
                credits: CreditCode::new(0)
            }
        );
        assert_eq!(
            AethSyndrome::from_byte(0x3F),
            AethSyndrome::RnrNak {
                timer: RnrTimer::new(31)
            }
        );
        for (b, code) in [
            (0x60, NakCode::PsnSequenceError),
            (0x61, NakCode::InvalidRequest),
            (0x62, NakCode::RemoteAccessError),
            (0x63, NakCode::RemoteOperationalError),
            (0x64, NakCode::InvalidRdRequest),
            (0x65, NakCode::Reserved(5)),
            (0x7F, NakCode::Reserved(31)),
        ] {
            assert_eq!(AethSyndrome::from_byte(b), AethSyndrome::Nak(code));
            assert_eq!(code.code(), b & 0x1F);
            assert_eq!(NakCode::from_code(b), code);
        }
        for b in [0x40u8, 0x5F, 0x80, 0x9F, 0xE0, 0xFF] {
            assert_eq!(AethSyndrome::from_byte(b), AethSyndrome::Reserved(b));
        }
    }

    #[test]
    fn syndrome_round_trips_every_byte() {
        for b in 0..=u8::MAX {
            assert_eq!(AethSyndrome::from_byte(b).to_byte(), b, "syndrome {b:#04x}");
        }
    }

    /// Parses a decimal millisecond string such as "61.44" into nanoseconds.
    fn ms_to_ns(ms: &str) -> u64 {
        let (int, frac) = ms.split_once('.').unwrap_or((ms, ""));
        let mut frac = frac.to_string();
        assert!(frac.len() <= 6);
        while frac.len() < 6 {
            frac.push('0');
        }
        int.parse::<u64>().unwrap() * 1_000_000 + frac.parse::<u64>().unwrap()
    }

    #[test]
    fn rnr_timer_table_matches_spec() {
        // spec/tables.md §4, code -> ms, copied as text.
        const SPEC_MS: [&str; 32] = [
            "655.36", "0.01", "0.02", "0.03", "0.04", "0.06", "0.08", "0.12", "0.16", "0.24",
            "0.32", "0.48", "0.64", "0.96", "1.28", "1.92", "2.56", "3.84", "5.12", "7.68",
            "10.24", "15.36", "20.48", "30.72", "40.96", "61.44", "81.92", "122.88", "163.84",
            "245.76", "327.68", "491.52",
        ];
        for (code, ms) in SPEC_MS.iter().enumerate() {
            let t = RnrTimer::new(code as u8);
            assert_eq!(t.code() as usize, code);
            assert_eq!(t.as_nanos(), ms_to_ns(ms), "RNR code {code}");
        }
        // The pattern of the table: 0.04 ms * 2^j for even codes from 4, 0.06 ms * 2^j for odd
        // codes from 5; code 0 continues it as "code 32".
        for code in 4u32..=32 {
            let j = (code - 4) / 2;
            let base = if code % 2 == 0 { 40_000 } else { 60_000 };
            let t = RnrTimer::new((code % 32) as u8);
            assert_eq!(t.as_nanos(), base << j, "RNR code {code}");
        }
        assert_eq!(RnrTimer::new(25).as_nanos(), 61_440_000);
        assert_eq!(RnrTimer::new(32 + 12), RnrTimer::new(12));
    }

    #[test]
    fn rnr_timer_from_nanos_ceil() {
        let r = RnrTimer::from_nanos_ceil;
        assert_eq!(r(0), RnrTimer::new(1));
        assert_eq!(r(10_000), RnrTimer::new(1));
        assert_eq!(r(10_001), RnrTimer::new(2));
        assert_eq!(r(640_000), RnrTimer::new(12));
        assert_eq!(r(640_001), RnrTimer::new(13));
        assert_eq!(r(61_410_000), RnrTimer::new(25));
        assert_eq!(r(491_520_000), RnrTimer::new(31));
        assert_eq!(r(491_520_001), RnrTimer::new(0));
        assert_eq!(r(655_360_000), RnrTimer::new(0));
        assert_eq!(r(u64::MAX), RnrTimer::new(0));
        for code in 0..32 {
            let t = RnrTimer::new(code);
            assert_eq!(r(t.as_nanos()), t, "RNR code {code}");
        }
    }

    #[test]
    fn credit_table_matches_spec() {
        // spec/tables.md §5, code -> credits.
        const SPEC: [u32; 31] = [
            0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
            1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
        ];
        for (code, credits) in SPEC.iter().enumerate() {
            let c = CreditCode::new(code as u8);
            assert_eq!(c.code() as usize, code);
            assert_eq!(c.credits(), Some(*credits), "credit code {code:#04x}");
        }
        assert_eq!(CreditCode::new(0x1F), CreditCode::INVALID);
        assert_eq!(CreditCode::new(0x1F).credits(), None);
        // Pattern: codes 0-4 are themselves; then 4 * 2^j (even) and 6 * 2^j (odd).
        for code in 4u32..=0x1E {
            let j = (code - 4) / 2;
            let base = if code % 2 == 0 { 4 } else { 6 };
            assert_eq!(CreditCode::new(code as u8).credits(), Some(base << j));
        }
    }

    #[test]
    fn credit_encode_floor_edges() {
        let e = |n| CreditCode::encode_floor(n).code();
        assert_eq!(e(0), 0);
        assert_eq!(e(1), 1);
        assert_eq!(e(4), 4);
        assert_eq!(e(5), 4);
        assert_eq!(e(6), 5);
        assert_eq!(e(7), 5);
        assert_eq!(e(8), 6);
        assert_eq!(e(191), 0x0E);
        assert_eq!(e(192), 0x0F);
        assert_eq!(e(32767), 0x1D);
        assert_eq!(e(32768), 0x1E);
        assert_eq!(e(32769), 0x1E);
        assert_eq!(e(u32::MAX), 0x1E);
    }

    fn arb_syndrome() -> impl Strategy<Value = AethSyndrome> {
        prop_oneof![
            (0u8..32).prop_map(|c| AethSyndrome::Ack {
                credits: CreditCode::new(c)
            }),
            (0u8..32).prop_map(|c| AethSyndrome::RnrNak {
                timer: RnrTimer::new(c)
            }),
            (0u8..32).prop_map(|c| AethSyndrome::Nak(NakCode::from_code(c))),
            prop_oneof![0x40u8..0x60, 0x80u8..=0xFF].prop_map(AethSyndrome::Reserved),
        ]
    }

    proptest! {
        #[test]
        fn fields_round_trip(syn in arb_syndrome(), msn in 0u32..1 << 24) {
            let h = Aeth::new(syn, Msn::new(msn));
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            let back = Aeth::parse(&out).unwrap();
            prop_assert_eq!(back, h);
            prop_assert_eq!(back.decoded(), syn);
            prop_assert_eq!(back.msn.value(), msn);
        }

        #[test]
        fn encode_floor_is_largest_not_above(available in prop_oneof![0u32..40_000, any::<u32>()]) {
            let c = CreditCode::encode_floor(available);
            let credits = c.credits().unwrap();
            prop_assert!(credits <= available);
            if c.code() < 0x1E {
                let next = CreditCode::new(c.code() + 1).credits().unwrap();
                prop_assert!(next > available);
            }
        }

        #[test]
        fn from_nanos_ceil_is_smallest_not_below(ns in prop_oneof![0u64..700_000_000, any::<u64>()]) {
            let t = RnrTimer::from_nanos_ceil(ns);
            if ns <= RnrTimer::new(0).as_nanos() {
                prop_assert!(t.as_nanos() >= ns);
                for code in 0..32 {
                    let other = RnrTimer::new(code);
                    if other.as_nanos() >= ns {
                        prop_assert!(other.as_nanos() >= t.as_nanos());
                    }
                }
            } else {
                prop_assert_eq!(t, RnrTimer::new(0));
            }
        }
    }
}
