//! Native InfiniBand framing (LRH [+ GRH] … ICRC, VCRC; raw IPv6 and raw EtherType datagrams):
//! building, parsing, PktLen / PayLen accounting, the typed errors for bad link and global
//! headers, and what each CRC does and does not cover.

use softib_wire::aeth::Aeth;
use softib_wire::atomic_ack_eth::AtomicAckEth;
use softib_wire::atomic_eth::AtomicEth;
use softib_wire::bth::{self, Bth};
use softib_wire::deth::Deth;
use softib_wire::grh::{self, Grh};
use softib_wire::ieth::Ieth;
use softib_wire::immdt::ImmDt;
use softib_wire::lrh::{self, Lnh, Lrh};
use softib_wire::native::{self, NativeBody, NativePacket, ICRC_LEN, MAX_PKT_WORDS, VCRC_LEN};
use softib_wire::opcode::{ExtHeaders, Opcode};
use softib_wire::rdeth::Rdeth;
use softib_wire::reth::Reth;
use softib_wire::rwh::{self, Rwh};
use softib_wire::transport::{TransportHeaders, TransportPacket, CNP_RESERVED_LEN};
use softib_wire::vcrc;
use softib_wire::xrceth::Xrceth;
use softib_wire::{Eecn, Error, Field, Header, Msn, Psn, Qpn, XrcSrqn};

/// Byte offset of LRH:PktLen (bits 2:0 of byte 4, byte 5).
const PKT_LEN_AT: usize = 4;
/// Byte offset of GRH:PayLen inside the GRH.
const PAY_LEN_AT: usize = 4;
/// Byte offset of GRH:NxtHdr inside the GRH.
const NXT_HDR_AT: usize = 6;

fn lrh() -> Lrh {
    Lrh {
        vl: 2,
        sl: 5,
        dlid: 0x0004,
        slid: 0x0001,
        ..Lrh::default()
    }
}

fn grh() -> Grh {
    Grh {
        tclass: 0x28,
        flow_label: 0x4_5678,
        hop_lmt: 64,
        sgid: [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xc9, 0x03, 0x00, 0x0a, 0xbc, 0x01,
        ],
        dgid: [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xc9, 0x03, 0x00, 0x0a, 0xbc, 0x02,
        ],
        ..Grh::default()
    }
}

/// Headers for `op`, every extension header it needs filled with recognisable values.
fn headers(op: Opcode) -> TransportHeaders {
    let info = op.info().expect("defined opcode");
    let mut h = TransportHeaders::new(Bth {
        opcode: op,
        pkey: 0xffff,
        dest_qp: Qpn::new(0x12_3456),
        ack_req: true,
        psn: Psn::new(0xab_cdef),
        ..Bth::default()
    });
    let has = |x| info.headers.contains(x);
    if has(ExtHeaders::RDETH) {
        h.rdeth = Some(Rdeth {
            resv8: 0,
            eecn: Eecn::new(0x77),
        });
    }
    if has(ExtHeaders::DETH) {
        h.deth = Some(Deth {
            qkey: 0x1111_2222,
            resv8: 0,
            src_qp: Qpn::new(0x99),
        });
    }
    if has(ExtHeaders::XRCETH) {
        h.xrceth = Some(Xrceth {
            resv8: 0,
            xrcsrq: XrcSrqn::new(0x42),
        });
    }
    if has(ExtHeaders::RETH) {
        h.reth = Some(Reth {
            va: 0x7f00_1234_5678_9000,
            rkey: 0xdead_beef,
            dma_len: 4096,
        });
    }
    if has(ExtHeaders::AETH) {
        h.aeth = Some(Aeth {
            syndrome: 0x1f,
            msn: Msn::new(9),
        });
    }
    if has(ExtHeaders::ATOMIC_ETH) {
        h.atomic_eth = Some(AtomicEth {
            va: 0x1000,
            rkey: 0x55,
            swap_add: 1,
            compare: 2,
        });
    }
    if has(ExtHeaders::ATOMIC_ACK_ETH) {
        h.atomic_ack_eth = Some(AtomicAckEth {
            orig_remote_data: 0x0123_4567_89ab_cdef,
        });
    }
    if has(ExtHeaders::IMMDT) {
        h.immdt = Some(ImmDt { imm: 0xcafe_f00d });
    }
    if has(ExtHeaders::IETH) {
        h.ieth = Some(Ieth { rkey: 0x0bad_cafe });
    }
    if has(ExtHeaders::CNP_RESERVED) {
        h.cnp_reserved = Some([0; CNP_RESERVED_LEN]);
    }
    assert_eq!(h.check_header_set(), Ok(info));
    h
}

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

/// Builds an IBA packet (LNH 2 without `grh`, LNH 3 with it).
fn build(l: &Lrh, g: Option<&Grh>, t: &TransportPacket<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; 8192];
    let n = native::build(l, g, t, &mut buf).expect("native::build");
    buf.truncate(n);
    buf
}

fn build_raw(l: &Lrh, body: &NativeBody<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; 8192];
    let n = native::build_raw(l, body, &mut buf).expect("native::build_raw");
    buf.truncate(n);
    buf
}

/// Rewrites the VCRC of `pkt` so that a deliberate edit is judged by everything but the VCRC.
fn fix_vcrc(pkt: &mut [u8]) {
    let covered = pkt.len() - VCRC_LEN;
    let v = vcrc::compute(&pkt[..covered]);
    vcrc::put(&mut pkt[covered..], v).unwrap();
}

fn set_pkt_len(pkt: &mut [u8], words: u16) {
    pkt[PKT_LEN_AT] = (pkt[PKT_LEN_AT] & 0xF8) | ((words >> 8) as u8 & 0x07);
    pkt[PKT_LEN_AT + 1] = words as u8;
}

fn pkt_len_of(pkt: &[u8]) -> u16 {
    u16::from_be_bytes([pkt[PKT_LEN_AT], pkt[PKT_LEN_AT + 1]]) & 0x07FF
}

/// The ICRC bytes of an IBA packet (the 4 bytes before the VCRC).
fn icrc_bytes(pkt: &[u8]) -> [u8; 4] {
    let at = pkt.len() - VCRC_LEN - ICRC_LEN;
    pkt[at..at + ICRC_LEN].try_into().unwrap()
}

fn assert_reemits(p: &NativePacket<'_>, pkt: &[u8]) {
    let mut out = vec![0u8; pkt.len()];
    assert_eq!(p.emit(&mut out), Ok(pkt.len()));
    assert_eq!(out, pkt);
}

const OPCODES: &[(Opcode, usize)] = &[
    (Opcode::RC_SEND_ONLY, 13),
    (Opcode::RC_SEND_FIRST, 256),
    (Opcode::RC_RDMA_WRITE_FIRST, 256),
    (Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 1),
    (Opcode::RC_RDMA_READ_REQUEST, 0),
    (Opcode::RC_RDMA_READ_RESPONSE_LAST, 30),
    (Opcode::RC_ACKNOWLEDGE, 0),
    (Opcode::RC_ATOMIC_ACKNOWLEDGE, 0),
    (Opcode::RC_COMPARE_SWAP, 0),
    (Opcode::RC_SEND_ONLY_WITH_INVALIDATE, 6),
    (Opcode::UC_SEND_ONLY_WITH_IMMEDIATE, 0),
    (Opcode::RD_SEND_ONLY, 64),
    (Opcode::UD_SEND_ONLY, 4096),
    (Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, 17),
    (Opcode::XRC_SEND_ONLY_WITH_INVALIDATE, 2),
    (Opcode::CNP, 0),
];

#[test]
fn local_and_global_packets_build_and_parse() {
    for &(op, len) in OPCODES {
        let payload = data(len);
        let t = TransportPacket::new(headers(op), &payload);
        for g in [None, Some(grh())] {
            let pkt = build(&lrh(), g.as_ref(), &t);
            let p = NativePacket::parse_verified(&pkt).unwrap_or_else(|e| panic!("{op:?}: {e}"));
            let (lnh, bits) = match g {
                None => (Lnh::IbaLocal, 0b10),
                Some(_) => (Lnh::IbaGlobal, 0b11),
            };
            assert_eq!(p.lrh.lnh, lnh, "{op:?}");
            assert_eq!(pkt[1] & 0x03, bits, "{op:?}: LNH bits on the wire");
            assert_eq!(
                (p.lrh.vl, p.lrh.sl, p.lrh.dlid, p.lrh.slid, p.lrh.lver),
                (2, 5, 0x0004, 0x0001, 0)
            );
            let NativeBody::Iba {
                grh: got_grh,
                transport,
                icrc,
            } = p.body
            else {
                panic!("{op:?}: not an IBA body: {:?}", p.body);
            };
            assert_eq!(transport, t, "{op:?}");
            assert_eq!(transport.payload, &payload[..]);
            assert_eq!(icrc.to_le_bytes(), icrc_bytes(&pkt));
            match (got_grh, g) {
                (None, None) => assert_eq!(&pkt[lrh::LEN..lrh::LEN + 1], &[op.0]),
                (Some(got), Some(given)) => {
                    let at = lrh::LEN;
                    assert_eq!(pkt[at] >> 4, 6, "GRH IPVer on the wire");
                    assert_eq!(pkt[at + NXT_HDR_AT], 0x1B, "GRH NxtHdr on the wire");
                    assert_eq!(pkt[at + grh::LEN], op.0, "BTH follows the GRH");
                    assert_eq!(
                        got,
                        Grh {
                            ip_ver: 6,
                            nxt_hdr: grh::NXT_HDR_IBA,
                            pay_len: got.pay_len,
                            ..given
                        }
                    );
                }
                other => panic!("{op:?}: GRH mismatch {other:?}"),
            }
            assert!(p.icrc_ok() && p.vcrc_ok());
            assert_reemits(&p, &pkt);
        }
    }
}

#[test]
fn pkt_len_counts_lrh_through_icrc_in_words() {
    for len in 0..=9usize {
        let payload = data(len);
        let t = TransportPacket::new(headers(Opcode::RC_SEND_ONLY), &payload);
        let pad = (4 - len % 4) % 4;
        assert_eq!(usize::from(t.headers.bth.pad_cnt), pad);
        // LRH 8, BTH 12, payload, pad, ICRC 4; the GRH adds 40; the VCRC is not counted.
        let local = (8 + 12 + len + pad + 4) / 4;
        let global = (8 + 40 + 12 + len + pad + 4) / 4;
        for (g, words) in [(None, local), (Some(grh()), global)] {
            let pkt = build(&lrh(), g.as_ref(), &t);
            assert_eq!(pkt.len(), words * 4 + 2, "len {len}");
            assert_eq!(usize::from(pkt_len_of(&pkt)), words, "len {len}");
            let p = NativePacket::parse_verified(&pkt).unwrap();
            assert_eq!(usize::from(p.lrh.pkt_len), words);
            if let NativeBody::Iba { grh: Some(g), .. } = p.body {
                // PayLen: BTH through ICRC, pad included.
                assert_eq!(usize::from(g.pay_len), 12 + len + pad + 4);
                assert_eq!(
                    u16::from_be_bytes([pkt[8 + PAY_LEN_AT], pkt[8 + PAY_LEN_AT + 1]]),
                    g.pay_len
                );
            }
        }
    }
}

#[test]
fn largest_packet_fits_and_longer_is_refused() {
    // Largest header set with a payload (RD RDMA WRITE ONLY WITH IMMEDIATE: 44 bytes) and the
    // 4096-byte MTU, with a GRH: 8 + 40 + 44 + 4096 + 4 = 4192 bytes, well inside 11 bits.
    let payload = data(4096);
    let t = TransportPacket::new(headers(Opcode::RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE), &payload);
    let pkt = build(&lrh(), Some(&grh()), &t);
    assert_eq!(usize::from(pkt_len_of(&pkt)), (8 + 40 + 44 + 4096 + 4) / 4);
    assert!(NativePacket::parse_verified(&pkt).is_ok());

    // PktLen cannot count past 0x7FF words (8188 bytes).
    let big = data(8192);
    let t = TransportPacket::new(headers(Opcode::UD_SEND_ONLY), &big);
    let mut buf = vec![0u8; 9000];
    assert_eq!(
        native::build(&lrh(), None, &t, &mut buf),
        Err(Error::PayloadTooLong {
            len: 8 + 20 + 8192 + 4,
            max: MAX_PKT_WORDS * 4
        })
    );
    let body = NativeBody::RawEthertype {
        rwh: Rwh::default(),
        payload: &big,
    };
    assert_eq!(
        native::build_raw(&lrh(), &body, &mut buf),
        Err(Error::PayloadTooLong {
            len: 8 + 4 + 8192,
            max: MAX_PKT_WORDS * 4
        })
    );
    // A buffer one byte short of the packet is refused, not overrun.
    let payload = data(64);
    let t = TransportPacket::new(headers(Opcode::RC_SEND_ONLY), &payload);
    let need = 8 + 12 + 64 + 4 + 2;
    assert!(matches!(
        native::build(&lrh(), None, &t, &mut buf[..need - 1]),
        Err(Error::Truncated { .. })
    ));
    assert_eq!(native::build(&lrh(), None, &t, &mut buf[..need]), Ok(need));
}

#[test]
fn wrong_pkt_len_is_a_length_error() {
    let payload = data(20);
    let t = TransportPacket::new(headers(Opcode::RC_SEND_ONLY), &payload);
    for g in [None, Some(grh())] {
        let pkt = build(&lrh(), g.as_ref(), &t);
        let words = pkt_len_of(&pkt);
        for bad in [words - 1, words + 1, 0, 2, 0x7FF] {
            let mut b = pkt.clone();
            set_pkt_len(&mut b, bad);
            fix_vcrc(&mut b);
            assert_eq!(
                NativePacket::parse(&b),
                Err(Error::Length {
                    field: Field::LrhPktLen,
                    claimed: usize::from(bad) * 4,
                    actual: pkt.len() - 2,
                }),
                "PktLen {bad}"
            );
        }
        // A byte more or less than PktLen says.
        let mut longer = pkt.clone();
        longer.push(0);
        assert_eq!(
            NativePacket::parse(&longer),
            Err(Error::Length {
                field: Field::LrhPktLen,
                claimed: usize::from(words) * 4,
                actual: pkt.len() - 1,
            })
        );
        assert_eq!(
            NativePacket::parse(&pkt[..pkt.len() - 1]),
            Err(Error::Length {
                field: Field::LrhPktLen,
                claimed: usize::from(words) * 4,
                actual: pkt.len() - 3,
            })
        );
    }
    // PktLen that agrees with the buffer but covers the LRH alone: no room for BTH and ICRC.
    let mut lrh_only = [0u8; 8 + 2];
    Lrh {
        lnh: Lnh::IbaLocal,
        pkt_len: 2,
        ..Lrh::default()
    }
    .emit(&mut lrh_only)
    .unwrap();
    assert_eq!(
        NativePacket::parse(&lrh_only),
        Err(Error::Truncated {
            header: Header::Icrc,
            need: bth::LEN + ICRC_LEN,
            have: 0,
        })
    );
    // Fewer bytes than an LRH.
    assert_eq!(
        NativePacket::parse(&[0u8; 6]),
        Err(Error::Truncated {
            header: Header::Lrh,
            need: lrh::LEN,
            have: 6,
        })
    );
}

#[test]
fn wrong_grh_pay_len_is_a_length_error() {
    let payload = data(40);
    let t = TransportPacket::new(headers(Opcode::UD_SEND_ONLY), &payload);
    let pkt = build(&lrh(), Some(&grh()), &t);
    let at = lrh::LEN + PAY_LEN_AT;
    let good = u16::from_be_bytes([pkt[at], pkt[at + 1]]);
    let rest = pkt.len() - VCRC_LEN - lrh::LEN - grh::LEN;
    assert_eq!(usize::from(good), rest);
    for bad in [good - 4, good - 1, good + 1, good + 4, 0, u16::MAX] {
        let mut b = pkt.clone();
        b[at..at + 2].copy_from_slice(&bad.to_be_bytes());
        fix_vcrc(&mut b);
        let want = Err(Error::Length {
            field: Field::GrhPayLen,
            claimed: usize::from(bad),
            actual: rest,
        });
        assert_eq!(NativePacket::parse(&b), want, "PayLen {bad}");
        assert_eq!(NativePacket::parse_verified(&b), want, "PayLen {bad}");
    }
}

#[test]
fn nonzero_lver_is_rejected() {
    let payload = data(8);
    let t = TransportPacket::new(headers(Opcode::RC_SEND_ONLY), &payload);
    for lver in 1..16u8 {
        for g in [None, Some(grh())] {
            let pkt = build(&Lrh { lver, ..lrh() }, g.as_ref(), &t);
            assert_eq!(pkt[0] & 0x0F, lver);
            assert_eq!(
                NativePacket::parse(&pkt),
                Err(Error::BadField {
                    field: Field::LrhLVer,
                    value: lver.into()
                })
            );
        }
    }
}

#[test]
fn grh_ip_ver_other_than_6_is_rejected() {
    let payload = data(8);
    let t = TransportPacket::new(headers(Opcode::RC_SEND_ONLY), &payload);
    let pkt = build(&lrh(), Some(&grh()), &t);
    for v in (0..16u8).filter(|&v| v != 6) {
        let mut b = pkt.clone();
        b[lrh::LEN] = (b[lrh::LEN] & 0x0F) | (v << 4);
        fix_vcrc(&mut b);
        assert_eq!(
            NativePacket::parse(&b),
            Err(Error::BadField {
                field: Field::GrhIpVer,
                value: v.into()
            })
        );
    }
}

#[test]
fn grh_nxt_hdr_other_than_iba_is_rejected() {
    let payload = data(8);
    let t = TransportPacket::new(headers(Opcode::RC_SEND_ONLY), &payload);
    let pkt = build(&lrh(), Some(&grh()), &t);
    for nh in [0u8, 6, 17, 0x1A, 0x1C, 0x3B, 0xFF] {
        let mut b = pkt.clone();
        b[lrh::LEN + NXT_HDR_AT] = nh;
        fix_vcrc(&mut b);
        assert_eq!(
            NativePacket::parse(&b),
            Err(Error::BadField {
                field: Field::GrhNxtHdr,
                value: nh.into()
            })
        );
    }
    // The builder sets NxtHdr (and IPVer) whatever it is given.
    let pkt2 = build(
        &lrh(),
        Some(&Grh {
            nxt_hdr: 17,
            ip_ver: 4,
            ..grh()
        }),
        &t,
    );
    assert_eq!(pkt2, pkt);
}

#[test]
fn short_global_and_local_bodies_are_truncation_errors() {
    // LNH 3 with fewer than 40 bytes after the LRH.
    let mut b = vec![0u8; 8 + 20 + 2];
    Lrh {
        lnh: Lnh::IbaGlobal,
        pkt_len: 7,
        ..Lrh::default()
    }
    .emit(&mut b)
    .unwrap();
    assert_eq!(
        NativePacket::parse(&b),
        Err(Error::Truncated {
            header: Header::Grh,
            need: grh::LEN,
            have: 20
        })
    );
    // LNH 2 with a BTH but no room for the ICRC.
    let mut b = vec![0u8; 8 + 12 + 2];
    Lrh {
        lnh: Lnh::IbaLocal,
        pkt_len: 5,
        ..Lrh::default()
    }
    .emit(&mut b)
    .unwrap();
    assert_eq!(
        NativePacket::parse(&b),
        Err(Error::Truncated {
            header: Header::Icrc,
            need: bth::LEN + ICRC_LEN,
            have: 12
        })
    );
}

/// (byte, bit mask) of the LRH fields a packet's structure does not depend on: VL, SL, Resv2,
/// DLID, Resv5, SLID (LVer, LNH and PktLen are judged by the parser).
const LRH_FREE_BITS: &[(usize, u8)] = &[
    (0, 0xF0),
    (1, 0xFC),
    (2, 0xFF),
    (3, 0xFF),
    (4, 0xF8),
    (6, 0xFF),
    (7, 0xFF),
];

#[test]
fn icrc_ignores_the_lrh_but_the_vcrc_catches_it() {
    for &(op, len) in OPCODES {
        let payload = data(len);
        let t = TransportPacket::new(headers(op), &payload);
        for g in [None, Some(grh())] {
            let a = build(&lrh(), g.as_ref(), &t);
            let other = Lrh {
                vl: 15,
                sl: 0,
                resv2: 3,
                dlid: 0xBEEF,
                resv5: 0x1F,
                slid: 0xC001,
                ..lrh()
            };
            let b = build(&other, g.as_ref(), &t);
            assert_ne!(a[..lrh::LEN], b[..lrh::LEN]);
            assert_eq!(a[lrh::LEN..a.len() - 2], b[lrh::LEN..b.len() - 2]);
            assert_eq!(
                icrc_bytes(&a),
                icrc_bytes(&b),
                "{op:?}: ICRC depends on the LRH"
            );
            assert_ne!(a[a.len() - 2..], b[b.len() - 2..], "{op:?}: same VCRC");

            // Every free LRH bit flipped in flight: the ICRC still holds, the VCRC does not.
            for &(at, mask) in LRH_FREE_BITS {
                for bit in (0..8).filter(|b| mask & (1 << b) != 0) {
                    let mut x = a.clone();
                    x[at] ^= 1 << bit;
                    let p = NativePacket::parse(&x).unwrap();
                    assert!(p.icrc_ok(), "{op:?}: LRH byte {at} bit {bit}");
                    assert!(!p.vcrc_ok(), "{op:?}: LRH byte {at} bit {bit}");
                    assert_eq!(
                        NativePacket::parse_verified(&x),
                        Err(Error::Vcrc {
                            computed: vcrc::compute(&x[..x.len() - 2]),
                            found: p.vcrc,
                        })
                    );
                }
            }
        }
    }
}

/// (byte inside the GRH, bit mask) of TClass, FlowLabel and HopLmt.
const GRH_VARIANT_BITS: &[(usize, u8)] = &[(0, 0x0F), (1, 0xFF), (2, 0xFF), (3, 0xFF), (7, 0xFF)];

#[test]
fn icrc_ignores_grh_tclass_flow_label_hop_limit_only() {
    let payload = data(33);
    let t = TransportPacket::new(headers(Opcode::RC_RDMA_WRITE_FIRST), &payload);
    let a = build(&lrh(), Some(&grh()), &t);
    let routed = Grh {
        tclass: 0xFF - grh().tclass,
        flow_label: 0xF_FFFF - grh().flow_label,
        hop_lmt: 1,
        ..grh()
    };
    let b = build(&lrh(), Some(&routed), &t);
    assert_ne!(a, b);
    assert_eq!(icrc_bytes(&a), icrc_bytes(&b));
    assert_ne!(a[a.len() - 2..], b[b.len() - 2..]);

    // Bit by bit, over the whole GRH, with the VCRC rewritten so only the ICRC judges.
    for at in 0..grh::LEN {
        let variant = GRH_VARIANT_BITS
            .iter()
            .find(|&&(o, _)| o == at)
            .map_or(0, |&(_, m)| m);
        for bit in 0..8 {
            let mut x = a.clone();
            x[lrh::LEN + at] ^= 1 << bit;
            fix_vcrc(&mut x);
            let r = NativePacket::parse_verified(&x);
            if variant & (1 << bit) != 0 {
                assert!(r.is_ok(), "GRH byte {at} bit {bit}: {r:?}");
            } else {
                // IPVer, PayLen and NxtHdr are judged by the parser; SGID and DGID by the ICRC.
                assert!(r.is_err(), "GRH byte {at} bit {bit} went unnoticed");
                if (8..40).contains(&at) {
                    assert!(matches!(r, Err(Error::Icrc { .. })), "GRH byte {at}: {r:?}");
                }
            }
        }
    }
}

#[test]
fn icrc_ignores_bth_fecn_becn_resv6a_only() {
    let payload = data(12);
    let t = TransportPacket::new(headers(Opcode::RC_SEND_ONLY), &payload);
    for g in [None, Some(grh())] {
        let a = build(&lrh(), g.as_ref(), &t);
        let bth_at = lrh::LEN + if g.is_some() { grh::LEN } else { 0 };
        for at in 0..bth::LEN {
            for bit in 0..8 {
                let mut x = a.clone();
                x[bth_at + at] ^= 1 << bit;
                fix_vcrc(&mut x);
                let r = NativePacket::parse_verified(&x);
                if at == bth::ICRC_MASKED_BYTE {
                    // A switch marking FECN/BECN recomputes only the VCRC.
                    let p = r.unwrap();
                    assert!(p.icrc_ok());
                } else {
                    assert!(r.is_err(), "BTH byte {at} bit {bit}");
                }
            }
        }
    }
}

fn raw_ipv6_header() -> Grh {
    Grh {
        tclass: 0x10,
        flow_label: 0x1_2345,
        nxt_hdr: 17, // UDP
        hop_lmt: 32,
        ..grh()
    }
}

#[test]
fn raw_ipv6_packet_builds_and_parses() {
    for len in [0usize, 4, 24, 1000] {
        let payload = data(len);
        let body = NativeBody::RawIpv6 {
            ipv6: raw_ipv6_header(),
            payload: &payload,
        };
        let pkt = build_raw(&lrh(), &body);
        // LRH, IPv6 header, payload; no ICRC; then the VCRC.
        assert_eq!(pkt.len(), 8 + 40 + len + 2);
        assert_eq!(pkt[1] & 0x03, 0b01, "LNH raw IPv6");
        assert_eq!(usize::from(pkt_len_of(&pkt)), (8 + 40 + len) / 4);
        assert_eq!(&pkt[8 + 40..8 + 40 + len], &payload[..]);
        let p = NativePacket::parse_verified(&pkt).unwrap();
        assert_eq!(p.lrh.lnh, Lnh::Ipv6);
        assert_eq!(
            p.body,
            NativeBody::RawIpv6 {
                ipv6: Grh {
                    ip_ver: 6,
                    pay_len: len as u16,
                    ..raw_ipv6_header()
                },
                payload: &payload,
            }
        );
        assert_reemits(&p, &pkt);
    }
}

#[test]
fn raw_ethertype_packet_builds_and_parses() {
    for len in [0usize, 4, 20, 1500] {
        let payload = data(len);
        let rwh = Rwh {
            resv16: 0,
            ether_type: 0x0800,
        };
        let body = NativeBody::RawEthertype {
            rwh,
            payload: &payload,
        };
        let pkt = build_raw(&lrh(), &body);
        assert_eq!(pkt.len(), 8 + rwh::LEN + len + 2);
        assert_eq!(pkt[1] & 0x03, 0b00, "LNH raw");
        assert_eq!(&pkt[8..12], &[0, 0, 0x08, 0x00]);
        assert_eq!(usize::from(pkt_len_of(&pkt)), (8 + 4 + len) / 4);
        let p = NativePacket::parse_verified(&pkt).unwrap();
        assert_eq!(p.lrh.lnh, Lnh::Raw);
        assert_eq!(p.body, body);
        assert_reemits(&p, &pkt);
    }
}

#[test]
fn raw_packets_report_no_icrc() {
    let payload = data(16);
    let bodies = [
        NativeBody::RawIpv6 {
            ipv6: raw_ipv6_header(),
            payload: &payload,
        },
        NativeBody::RawEthertype {
            rwh: Rwh {
                resv16: 0,
                ether_type: 0x88B5,
            },
            payload: &payload,
        },
    ];
    for body in &bodies {
        let pkt = build_raw(&lrh(), body);
        let p = NativePacket::parse(&pkt).unwrap();
        assert_eq!(p.icrc(), None);
        assert_eq!(p.computed_icrc(), None);
        assert!(p.icrc_ok(), "no ICRC to get wrong");
        assert!(p.vcrc_ok());
        // The last payload word sits right before the VCRC: nothing was appended for an ICRC.
        assert_eq!(&pkt[pkt.len() - 2 - 4..pkt.len() - 2], &payload[12..]);
        // Only the VCRC guards a raw packet: a payload flip is caught by it.
        let mut x = pkt.clone();
        x[pkt.len() - 3] ^= 0x01;
        assert!(matches!(
            NativePacket::parse_verified(&x),
            Err(Error::Vcrc { .. })
        ));
    }
}

#[test]
fn raw_payload_must_be_whole_words() {
    let mut buf = vec![0u8; 256];
    for len in (1..=15usize).filter(|l| l % 4 != 0) {
        let payload = data(len);
        let bodies = [
            NativeBody::RawIpv6 {
                ipv6: raw_ipv6_header(),
                payload: &payload,
            },
            NativeBody::RawEthertype {
                rwh: Rwh::default(),
                payload: &payload,
            },
        ];
        for body in &bodies {
            assert_eq!(
                native::build_raw(&lrh(), body, &mut buf),
                Err(Error::Length {
                    field: Field::PayloadLength,
                    claimed: len.next_multiple_of(4),
                    actual: len,
                }),
                "{body:?}"
            );
        }
    }
}

#[test]
fn build_raw_refuses_an_iba_body() {
    let payload = data(4);
    let t = TransportPacket::new(headers(Opcode::RC_SEND_ONLY), &payload);
    let body = NativeBody::Iba {
        grh: None,
        transport: t,
        icrc: 0,
    };
    assert_eq!(
        native::build_raw(&lrh(), &body, &mut [0u8; 128]),
        Err(Error::BadField {
            field: Field::LrhLnh,
            value: 2
        })
    );
}

#[test]
fn c9_208_raw_ipv6_never_carries_iba_transport() {
    // Building: refused.
    let payload = data(16);
    let body = NativeBody::RawIpv6 {
        ipv6: Grh {
            nxt_hdr: grh::NXT_HDR_IBA,
            ..raw_ipv6_header()
        },
        payload: &payload,
    };
    let want = Error::BadField {
        field: Field::Ipv6NextHeader,
        value: 0x1B,
    };
    assert_eq!(native::build_raw(&lrh(), &body, &mut [0u8; 256]), Err(want));

    // Receiving: a raw IPv6 packet whose next header says BTH is refused, even with a
    // correct VCRC.
    let ok_body = NativeBody::RawIpv6 {
        ipv6: raw_ipv6_header(),
        payload: &payload,
    };
    let mut pkt = build_raw(&lrh(), &ok_body);
    assert!(NativePacket::parse_verified(&pkt).is_ok());
    pkt[lrh::LEN + NXT_HDR_AT] = grh::NXT_HDR_IBA;
    fix_vcrc(&mut pkt);
    assert_eq!(NativePacket::parse(&pkt).err(), Some(want));
    assert_eq!(NativePacket::parse_verified(&pkt).err(), Some(want));
}

#[test]
fn raw_ipv6_header_is_checked() {
    let payload = data(16);
    let body = NativeBody::RawIpv6 {
        ipv6: raw_ipv6_header(),
        payload: &payload,
    };
    let pkt = build_raw(&lrh(), &body);

    let mut v4 = pkt.clone();
    v4[lrh::LEN] = (v4[lrh::LEN] & 0x0F) | 0x40;
    fix_vcrc(&mut v4);
    assert_eq!(
        NativePacket::parse(&v4),
        Err(Error::BadField {
            field: Field::Ipv6Version,
            value: 4
        })
    );

    // Payload length beyond the bytes PktLen covers.
    let mut long = pkt.clone();
    let at = lrh::LEN + PAY_LEN_AT;
    long[at..at + 2].copy_from_slice(&17u16.to_be_bytes());
    fix_vcrc(&mut long);
    assert_eq!(
        NativePacket::parse(&long),
        Err(Error::Length {
            field: Field::Ipv6PayloadLength,
            claimed: 17,
            actual: 16
        })
    );
}
