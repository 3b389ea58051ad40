//! Property tests of the whole-packet layers: the transport packet (BTH … pad), RoCEv2 frames
//! and native IB packets.
//!
//! 1. Emit → parse round trips for every opcode of the table with arbitrary field values
//!    (reserved bits included), arbitrary payloads and arbitrary framing fields; the ICRC and
//!    VCRC values match bitwise reference implementations of the recipe in `spec/tables.md` §6b.
//! 2. The parsers never panic, on random bytes and on mutated valid packets; whatever they
//!    accept re-emits to the very bytes it came from.
//! 3. Every single-bit error in the bytes the ICRC covers is caught in a RoCEv2 frame, every
//!    single-bit error anywhere in a native packet is caught by the VCRC or the ICRC, and the
//!    bits the ICRC leaves out (the variant fields) really are left out.
//! 4. The builders refuse what the parsers would refuse (a pad that leaves the payload short of
//!    whole words), and IPv4 options survive parse → emit.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use softib_wire::aeth::Aeth;
use softib_wire::atomic_ack_eth::AtomicAckEth;
use softib_wire::atomic_eth::AtomicEth;
use softib_wire::bth::{self, Bth};
use softib_wire::deth::Deth;
use softib_wire::ethernet::{self, Ethernet, VlanTag};
use softib_wire::feth::Feth;
use softib_wire::grh::{self, Grh};
use softib_wire::ieth::Ieth;
use softib_wire::immdt::ImmDt;
use softib_wire::ipv4::{self, Ipv4};
use softib_wire::lrh::{self, Lnh, Lrh};
use softib_wire::native::{self, NativeBody, NativePacket};
use softib_wire::opcode::{ExtHeaders, OpcodeInfo, ROWS};
use softib_wire::pcap::{
    PcapReader, PcapWriter, LINKTYPE_ETHERNET, LINKTYPE_INFINIBAND, MAGIC_MICROS, MAGIC_NANOS,
};
use softib_wire::rdeth::Rdeth;
use softib_wire::reth::Reth;
use softib_wire::roce::{self, FrameClass, IpHeader, RocePacket};
use softib_wire::transport::{self, TransportHeaders, TransportPacket, CNP_RESERVED_LEN};
use softib_wire::udp::{self, Udp};
use softib_wire::vcrc;
use softib_wire::xrceth::Xrceth;
use softib_wire::{Eecn, Error, Field, Msn, Psn, Qpn, XrcSrqn};

/// Room for the largest packet any test builds.
const BUF_LEN: usize = 8192;

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

/// A BTH with every field arbitrary except the opcode (set per row), PadCnt (set by
/// `TransportPacket::new`) and TVer (0, the only version a receiver accepts).
fn arb_bth() -> impl Strategy<Value = Bth> {
    (
        any::<bool>(),
        any::<bool>(),
        any::<u16>(),
        any::<bool>(),
        any::<bool>(),
        0u8..=0x3F,
        any::<u32>(),
        any::<bool>(),
        0u8..=0x7F,
        any::<u32>(),
    )
        .prop_map(
            |(solicited, mig_req, pkey, fecn, becn, resv6a, qp, ack_req, resv7, psn)| Bth {
                solicited,
                mig_req,
                pkey,
                fecn,
                becn,
                resv6a,
                dest_qp: Qpn::new(qp),
                ack_req,
                resv7,
                psn: Psn::new(psn),
                ..Bth::default()
            },
        )
}

/// One arbitrary value of every extension header, each field over its full wire width.
#[derive(Debug, Clone)]
struct AllExt {
    rdeth: Rdeth,
    deth: Deth,
    xrceth: Xrceth,
    feth: Feth,
    reth: Reth,
    aeth: Aeth,
    atomic_eth: AtomicEth,
    atomic_ack_eth: AtomicAckEth,
    immdt: ImmDt,
    ieth: Ieth,
    cnp_reserved: [u8; CNP_RESERVED_LEN],
}

fn arb_ext() -> impl Strategy<Value = AllExt> {
    let rdeth = (any::<u8>(), any::<u32>()).prop_map(|(resv8, e)| Rdeth {
        resv8,
        eecn: Eecn::new(e),
    });
    let deth = (any::<u32>(), any::<u8>(), any::<u32>()).prop_map(|(qkey, resv8, qp)| Deth {
        qkey,
        resv8,
        src_qp: Qpn::new(qp),
    });
    let xrceth = (any::<u8>(), any::<u32>()).prop_map(|(resv8, s)| Xrceth {
        resv8,
        xrcsrq: XrcSrqn::new(s),
    });
    let feth =
        (0u32..(1 << 26), 0u8..4, 0u8..16).prop_map(|(resv26, sel, plt)| Feth { resv26, sel, plt });
    let reth = (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(va, rkey, dma_len)| Reth {
        va,
        rkey,
        dma_len,
    });
    let aeth = (any::<u8>(), any::<u32>()).prop_map(|(syndrome, msn)| Aeth {
        syndrome,
        msn: Msn::new(msn),
    });
    let atomic_eth = (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
        |(va, rkey, swap_add, compare)| AtomicEth {
            va,
            rkey,
            swap_add,
            compare,
        },
    );
    let atomic_ack_eth =
        any::<u64>().prop_map(|orig_remote_data| AtomicAckEth { orig_remote_data });
    let immdt = any::<u32>().prop_map(|imm| ImmDt { imm });
    let ieth = any::<u32>().prop_map(|rkey| Ieth { rkey });
    (
        rdeth,
        deth,
        xrceth,
        feth,
        reth,
        aeth,
        atomic_eth,
        atomic_ack_eth,
        immdt,
        ieth,
        any::<[u8; CNP_RESERVED_LEN]>(),
    )
        .prop_map(
            |(
                rdeth,
                deth,
                xrceth,
                feth,
                reth,
                aeth,
                atomic_eth,
                atomic_ack_eth,
                immdt,
                ieth,
                cnp_reserved,
            )| AllExt {
                rdeth,
                deth,
                xrceth,
                feth,
                reth,
                aeth,
                atomic_eth,
                atomic_ack_eth,
                immdt,
                ieth,
                cnp_reserved,
            },
        )
}

/// The transport headers of `info`: `bth` with the row's opcode, and exactly the extension
/// headers the row lists, taken from `ext`.
fn headers_for(info: &OpcodeInfo, mut bth: Bth, ext: &AllExt) -> TransportHeaders {
    bth.opcode = info.opcode;
    let has = |h| info.headers.contains(h);
    TransportHeaders {
        bth,
        rdeth: has(ExtHeaders::RDETH).then_some(ext.rdeth),
        deth: has(ExtHeaders::DETH).then_some(ext.deth),
        xrceth: has(ExtHeaders::XRCETH).then_some(ext.xrceth),
        feth: has(ExtHeaders::FETH).then_some(ext.feth),
        reth: has(ExtHeaders::RETH).then_some(ext.reth),
        aeth: has(ExtHeaders::AETH).then_some(ext.aeth),
        atomic_eth: has(ExtHeaders::ATOMIC_ETH).then_some(ext.atomic_eth),
        atomic_ack_eth: has(ExtHeaders::ATOMIC_ACK_ETH).then_some(ext.atomic_ack_eth),
        immdt: has(ExtHeaders::IMMDT).then_some(ext.immdt),
        ieth: has(ExtHeaders::IETH).then_some(ext.ieth),
        cnp_reserved: has(ExtHeaders::CNP_RESERVED).then_some(ext.cnp_reserved),
    }
}

/// Payloads up to `max` bytes, with short ones (where the pad varies most) drawn often.
fn arb_payload(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![vec(any::<u8>(), 0..=16.min(max)), vec(any::<u8>(), 0..=max)]
}

fn arb_ethernet() -> impl Strategy<Value = Ethernet> {
    let vlan = prop::option::of(
        (0u8..8, any::<bool>(), 0u16..0x1000).prop_map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid }),
    );
    (any::<[u8; 6]>(), any::<[u8; 6]>(), any::<u16>(), vlan).prop_map(
        |(dst, src, ether_type, vlan)| Ethernet {
            dst,
            src,
            // Overwritten by roce::build.
            ether_type,
            vlan,
        },
    )
}

/// An IPv4 or IPv6 header for `roce::build`. The fields build fills in (version, IHL, lengths,
/// protocol / next header, checksum) are arbitrary here, to show they are overwritten. IPv4
/// flags are any combination but MF, and the fragment offset is 0: a RoCEv2 packet is never
/// a fragment.
fn arb_ip() -> impl Strategy<Value = IpHeader> {
    let v4 = (
        any::<u8>(),
        any::<u16>(),
        0u8..4,
        any::<u8>(),
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        any::<(u8, u8, u16, u8, u16)>(),
    )
        .prop_map(
            |(dscp_ecn, ident, f, ttl, src, dst, (version, ihl, total_len, protocol, checksum))| {
                IpHeader::V4(Ipv4 {
                    version,
                    ihl,
                    dscp_ecn,
                    total_len,
                    ident,
                    flags: f << 1,
                    frag_offset: 0,
                    ttl,
                    protocol,
                    checksum,
                    src,
                    dst,
                })
            },
        );
    let v6 = arb_grh().prop_map(IpHeader::V6);
    prop_oneof![v4, v6]
}

/// A GRH / IPv6 header with every field arbitrary (IPVer, PayLen and NxtHdr are set by the
/// builders).
fn arb_grh() -> impl Strategy<Value = Grh> {
    (
        0u8..16,
        any::<u8>(),
        0u32..=grh::FLOW_LABEL_MAX,
        any::<u16>(),
        any::<u8>(),
        any::<u8>(),
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
    )
        .prop_map(
            |(ip_ver, tclass, flow_label, pay_len, nxt_hdr, hop_lmt, sgid, dgid)| Grh {
                ip_ver,
                tclass,
                flow_label,
                pay_len,
                nxt_hdr,
                hop_lmt,
                sgid,
                dgid,
            },
        )
}

/// An LRH with LVer 0 and every other field arbitrary (LNH and PktLen are set by the builders).
fn arb_lrh() -> impl Strategy<Value = Lrh> {
    (
        0u8..16,
        0u8..16,
        0u8..4,
        0u8..4,
        any::<u16>(),
        0u8..32,
        any::<u16>(),
        any::<u16>(),
    )
        .prop_map(|(vl, sl, resv2, lnh, dlid, resv5, pkt_len, slid)| Lrh {
            vl,
            lver: 0,
            sl,
            resv2,
            lnh: Lnh::from_bits(lnh),
            dlid,
            resv5,
            pkt_len,
            slid,
        })
}

/// One packet to build three ways: bare transport, RoCEv2 and native IB.
#[derive(Debug, Clone)]
struct Case {
    info: &'static OpcodeInfo,
    headers: TransportHeaders,
    payload: Vec<u8>,
    eth: Ethernet,
    ip: IpHeader,
    udp_src_port: u16,
    lrh: Lrh,
    grh: Option<Grh>,
}

impl Case {
    fn transport(&self) -> TransportPacket<'_> {
        TransportPacket::new(self.headers, &self.payload)
    }

    fn roce(&self) -> Vec<u8> {
        let mut buf = vec![0u8; BUF_LEN];
        let n = roce::build(
            &self.eth,
            &self.ip,
            self.udp_src_port,
            &self.transport(),
            &mut buf,
        )
        .expect("roce::build");
        buf.truncate(n);
        buf
    }

    fn native(&self) -> Vec<u8> {
        let mut buf = vec![0u8; BUF_LEN];
        let n = native::build(&self.lrh, self.grh.as_ref(), &self.transport(), &mut buf)
            .expect("native::build");
        buf.truncate(n);
        buf
    }
}

// ---------------------------------------------------------------------------------------------
// Reference CRCs, one bit at a time, from the recipe in spec/tables.md §6b and the VCRC
// parameters (CRC-16, polynomial 0x100B, reflected, init and final XOR 0xFFFF)
// ---------------------------------------------------------------------------------------------

/// Standard reflected CRC-32 (zlib), bitwise.
fn crc32_bitwise(data: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// CRC-16/0x100B reflected (0xD008), init and final XOR 0xFFFF, bitwise.
fn vcrc_bitwise(data: &[u8]) -> u16 {
    let mut c = 0xFFFFu16;
    for &b in data {
        c ^= u16::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xD008
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// `hdr` with the bytes/bits listed set to ones.
fn masked(hdr: &[u8], ones: &[(usize, u8)]) -> Vec<u8> {
    let mut v = hdr.to_vec();
    for &(at, bits) in ones {
        v[at] |= bits;
    }
    v
}

const IPV4_ICRC_ONES: &[(usize, u8)] = &[(1, 0xFF), (8, 0xFF), (10, 0xFF), (11, 0xFF)];
const IPV6_ICRC_ONES: &[(usize, u8)] = &[(0, 0x0F), (1, 0xFF), (2, 0xFF), (3, 0xFF), (7, 0xFF)];
const UDP_ICRC_ONES: &[(usize, u8)] = &[(6, 0xFF), (7, 0xFF)];
const BTH_ICRC_ONES: &[(usize, u8)] = &[(4, 0xFF)];

/// A header and the (byte, bits) of it the ICRC replaces with ones.
type MaskedHeader<'a> = (&'a [u8], &'a [(usize, u8)]);

/// ICRC over FF×8 ‖ masked IP/GRH ‖ masked UDP ‖ masked BTH ‖ the rest of `transport`.
fn icrc_reference(ip: Option<MaskedHeader<'_>>, udp: Option<&[u8]>, transport: &[u8]) -> u32 {
    let mut v = vec![0xFFu8; 8];
    if let Some((hdr, ones)) = ip {
        v.extend(masked(hdr, ones));
    }
    if let Some(u) = udp {
        v.extend(masked(u, UDP_ICRC_ONES));
    }
    v.extend(masked(&transport[..bth::LEN], BTH_ICRC_ONES));
    v.extend_from_slice(&transport[bth::LEN..]);
    crc32_bitwise(&v)
}

/// Cases for one opcode row.
fn arb_case_for(info: &'static OpcodeInfo, max_payload: usize) -> impl Strategy<Value = Case> {
    (
        arb_bth(),
        arb_ext(),
        arb_payload(max_payload),
        arb_ethernet(),
        arb_ip(),
        any::<u16>(),
        arb_lrh(),
        prop::option::of(arb_grh()),
    )
        .prop_map(
            move |(bth, ext, mut payload, eth, ip, udp_src_port, lrh, grh)| {
                if !info.payload {
                    payload.clear();
                }
                Case {
                    info,
                    headers: headers_for(info, bth, &ext),
                    payload,
                    eth,
                    ip,
                    udp_src_port,
                    lrh,
                    grh,
                }
            },
        )
}

/// Cases for an opcode row picked by the strategy.
fn arb_case(max_payload: usize) -> impl Strategy<Value = Case> {
    select(ROWS).prop_flat_map(move |row| {
        let info = row.opcode.info().expect("row of the table");
        arb_case_for(info, max_payload)
    })
}

/// Runs `check` on `cases` arbitrary cases of every row of the opcode table, so that each
/// opcode is exercised whatever the random draw.
fn for_every_opcode(
    cases: u32,
    max_payload: usize,
    check: impl Fn(&Case) -> Result<(), TestCaseError>,
) {
    for row in ROWS {
        let info = row.opcode.info().expect("row of the table");
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        if let Err(e) = runner.run(&arb_case_for(info, max_payload), |c| check(&c)) {
            panic!("{}: {e}", info.name);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Round trips
// ---------------------------------------------------------------------------------------------

/// (a) the transport packet alone.
fn check_transport(c: &Case) -> Result<(), TestCaseError> {
    let t = c.transport();
    let pad = transport::pad_for(c.payload.len());
    prop_assert_eq!(usize::from(t.headers.bth.pad_cnt), pad);
    let mut buf = vec![0u8; BUF_LEN];
    let n = t.emit(&mut buf).expect("emit");
    prop_assert_eq!(
        n,
        c.info.transport_header_len() + c.payload.len() + pad,
        "{}",
        c.info.name
    );
    prop_assert_eq!(n % 4, 0);
    prop_assert_eq!(t.wire_len(), Ok(n));
    let back = TransportPacket::parse(&buf[..n]).expect("parse");
    prop_assert_eq!(back, t);
    prop_assert_eq!(back.payload, &c.payload[..]);
    prop_assert!(back.pad.iter().all(|&b| b == 0));
    Ok(())
}

/// (b) through RoCEv2.
fn check_roce(c: &Case) -> Result<(), TestCaseError> {
    let t = c.transport();
    let frame = c.roce();
    let tlen = t.wire_len().expect("wire_len");
    let ip_len = match c.ip {
        IpHeader::V4(_) => ipv4::LEN,
        IpHeader::V6(_) => grh::LEN,
    };
    let end = c.eth.header_len() + ip_len + udp::LEN + tlen + roce::ICRC_LEN;
    prop_assert_eq!(frame.len(), end.max(ethernet::MIN_FRAME_LEN));
    prop_assert_eq!(roce::classify(&frame), FrameClass::RoceV2);

    let p = RocePacket::parse(&frame).expect("parse");
    prop_assert_eq!(p.transport, t);
    prop_assert!(p.icrc_ok(), "{:#x} != {:#x}", p.computed_icrc(), p.icrc);
    prop_assert!(RocePacket::parse_verified(&frame).is_ok());
    prop_assert_eq!(p.trailer.len(), frame.len() - end);
    prop_assert!(p.trailer.iter().all(|&b| b == 0));

    prop_assert_eq!(p.eth.dst, c.eth.dst);
    prop_assert_eq!(p.eth.src, c.eth.src);
    prop_assert_eq!(p.eth.vlan, c.eth.vlan);
    let udp_len = udp::LEN + tlen + roce::ICRC_LEN;
    prop_assert_eq!(
        p.udp,
        Udp {
            src_port: c.udp_src_port,
            dst_port: udp::ROCEV2_PORT,
            length: udp_len as u16,
            checksum: 0,
        }
    );
    match (p.ip, c.ip) {
        (IpHeader::V4(got), IpHeader::V4(given)) => {
            prop_assert_eq!(p.eth.ether_type, ethernet::ETHERTYPE_IPV4);
            let l3 = &frame[c.eth.header_len()..][..ipv4::LEN];
            prop_assert_eq!(got.checksum, ipv4::compute_checksum(l3));
            prop_assert_eq!(
                got,
                Ipv4 {
                    version: 4,
                    ihl: 5,
                    total_len: (ipv4::LEN + udp_len) as u16,
                    protocol: roce::IP_PROTO_UDP,
                    checksum: got.checksum,
                    ..given
                }
            );
            prop_assert!(p.ip_options.is_empty());
        }
        (IpHeader::V6(got), IpHeader::V6(given)) => {
            prop_assert_eq!(p.eth.ether_type, ethernet::ETHERTYPE_IPV6);
            prop_assert_eq!(
                got,
                Grh {
                    ip_ver: 6,
                    pay_len: udp_len as u16,
                    nxt_hdr: roce::IP_PROTO_UDP,
                    ..given
                }
            );
        }
        (got, given) => prop_assert!(false, "IP version changed: {got:?} from {given:?}"),
    }

    let ip_at = c.eth.header_len();
    let udp_at = ip_at + ip_len;
    let t_at = udp_at + udp::LEN;
    let ones = match c.ip {
        IpHeader::V4(_) => IPV4_ICRC_ONES,
        IpHeader::V6(_) => IPV6_ICRC_ONES,
    };
    let want = icrc_reference(
        Some((&frame[ip_at..udp_at], ones)),
        Some(&frame[udp_at..t_at]),
        &frame[t_at..t_at + tlen],
    );
    prop_assert_eq!(p.icrc, want);
    prop_assert_eq!(&frame[t_at + tlen..end], &want.to_le_bytes()[..]);

    let mut out = vec![0u8; frame.len()];
    prop_assert_eq!(p.wire_len(), Ok(frame.len()));
    prop_assert_eq!(p.emit(&mut out), Ok(frame.len()));
    prop_assert_eq!(out, frame);
    Ok(())
}

/// (c) through native IB.
fn check_native(c: &Case) -> Result<(), TestCaseError> {
    let t = c.transport();
    let pkt = c.native();
    let tlen = t.wire_len().expect("wire_len");
    let grh_len = if c.grh.is_some() { grh::LEN } else { 0 };
    let covered = lrh::LEN + grh_len + tlen + native::ICRC_LEN;
    prop_assert_eq!(pkt.len(), covered + native::VCRC_LEN);

    let p = NativePacket::parse_verified(&pkt).expect("parse_verified");
    prop_assert_eq!(usize::from(p.lrh.pkt_len) * 4, covered);
    let lnh = if c.grh.is_some() {
        Lnh::IbaGlobal
    } else {
        Lnh::IbaLocal
    };
    prop_assert_eq!(
        p.lrh,
        Lrh {
            lnh,
            pkt_len: (covered / 4) as u16,
            ..c.lrh
        }
    );
    match p.body {
        NativeBody::Iba {
            grh,
            transport,
            icrc,
        } => {
            prop_assert_eq!(transport, t);
            prop_assert_eq!(Some(icrc), p.computed_icrc());
            match (grh, c.grh) {
                (Some(got), Some(given)) => {
                    prop_assert_eq!(usize::from(got.pay_len), tlen + native::ICRC_LEN);
                    prop_assert_eq!(
                        usize::from(got.pay_len),
                        pkt.len() - native::VCRC_LEN - lrh::LEN - grh::LEN
                    );
                    prop_assert_eq!(
                        got,
                        Grh {
                            ip_ver: 6,
                            nxt_hdr: grh::NXT_HDR_IBA,
                            pay_len: got.pay_len,
                            ..given
                        }
                    );
                }
                (None, None) => {}
                (got, given) => prop_assert!(false, "GRH {got:?}, given {given:?}"),
            }
        }
        other => prop_assert!(false, "not an IBA body: {other:?}"),
    }
    prop_assert!(p.icrc_ok() && p.vcrc_ok());
    prop_assert_eq!(vcrc::verify(&pkt), Ok(()));
    let t_at = lrh::LEN + grh_len;
    let want_icrc = icrc_reference(
        c.grh.map(|_| (&pkt[lrh::LEN..t_at], IPV6_ICRC_ONES)),
        None,
        &pkt[t_at..t_at + tlen],
    );
    prop_assert_eq!(p.icrc(), Some(want_icrc));
    prop_assert_eq!(&pkt[covered - 4..covered], &want_icrc.to_le_bytes()[..]);
    let want_vcrc = vcrc_bitwise(&pkt[..covered]);
    prop_assert_eq!(p.vcrc, want_vcrc);
    prop_assert_eq!(&pkt[covered..], &want_vcrc.to_le_bytes()[..]);

    let mut out = vec![0u8; pkt.len()];
    prop_assert_eq!(p.emit(&mut out), Ok(pkt.len()));
    prop_assert_eq!(out, pkt);
    Ok(())
}

#[test]
fn every_opcode_round_trips_through_all_framings() {
    for_every_opcode(16, transport::MAX_PAYLOAD, |c| {
        check_transport(c)?;
        check_roce(c)?;
        check_native(c)
    });
}

proptest! {
    #![proptest_config(Config { cases: 256, ..Config::default() })]

    /// The same round trips with the opcode drawn by the strategy (so failures shrink across
    /// opcodes too).
    #[test]
    fn round_trip_random_opcode(c in arb_case(transport::MAX_PAYLOAD)) {
        check_transport(&c)?;
        check_roce(&c)?;
        check_native(&c)?;
    }

    /// TVer other than 0 is rejected, with the value, by every framing.
    #[test]
    fn nonzero_tver_is_rejected(c in arb_case(64), tver in 1u8..16) {
        let want = Some(Error::BadField { field: Field::BthTVer, value: tver.into() });
        let mut c = c;
        c.headers.bth.tver = tver;
        let t = c.transport();
        let mut buf = vec![0u8; BUF_LEN];
        let n = t.emit(&mut buf).expect("emit does not judge TVer");
        prop_assert_eq!(buf[1] & 0x0F, tver);
        prop_assert_eq!(TransportPacket::parse(&buf[..n]).err(), want);

        let frame = c.roce();
        prop_assert_eq!(RocePacket::parse(&frame).err(), want);
        let pkt = c.native();
        prop_assert_eq!(NativePacket::parse(&pkt).err(), want);
    }

    /// LVer other than 0 is rejected, with the value.
    #[test]
    fn nonzero_lver_is_rejected(c in arb_case(64), lver in 1u8..16) {
        let mut c = c;
        c.lrh.lver = lver;
        let pkt = c.native();
        prop_assert_eq!(
            NativePacket::parse(&pkt).err(),
            Some(Error::BadField { field: Field::LrhLVer, value: lver.into() })
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 2. No panics; whatever parses re-emits byte for byte
// ---------------------------------------------------------------------------------------------

/// Every parser over `bytes`. None may panic; every packet one of them accepts must re-emit to
/// exactly `bytes`.
fn exercise(bytes: &[u8]) -> Result<(), TestCaseError> {
    let class = roce::classify(bytes);
    if let Ok(p) = RocePacket::parse(bytes) {
        prop_assert_eq!(class, FrameClass::RoceV2);
        let ok = p.icrc_ok();
        prop_assert_eq!(RocePacket::parse_verified(bytes).is_ok(), ok);
        prop_assert_eq!(p.wire_len(), Ok(bytes.len()));
        let mut out = vec![0u8; bytes.len()];
        prop_assert_eq!(p.emit(&mut out), Ok(bytes.len()));
        prop_assert_eq!(&out[..], bytes);
    } else {
        prop_assert!(RocePacket::parse_verified(bytes).is_err());
    }
    if let Ok(p) = NativePacket::parse(bytes) {
        let ok = p.icrc_ok() && p.vcrc_ok();
        prop_assert_eq!(NativePacket::parse_verified(bytes).is_ok(), ok);
        let mut out = vec![0u8; bytes.len()];
        prop_assert_eq!(p.emit(&mut out), Ok(bytes.len()));
        prop_assert_eq!(&out[..], bytes);
    } else {
        prop_assert!(NativePacket::parse_verified(bytes).is_err());
    }
    if let Ok(t) = TransportPacket::parse(bytes) {
        prop_assert!(t.payload.len() <= transport::MAX_PAYLOAD);
        prop_assert_eq!(t.wire_len(), Ok(bytes.len()));
        let mut out = vec![0u8; bytes.len()];
        prop_assert_eq!(t.emit(&mut out), Ok(bytes.len()));
        prop_assert_eq!(&out[..], bytes);
    }
    if let Ok(r) = PcapReader::new(bytes) {
        let _ = (r.link_type(), r.snaplen(), r.version(), r.resolution());
        let mut seen = 0usize;
        for rec in r {
            seen += 1;
            // Each record takes at least its 16-byte header, so iteration is bounded.
            prop_assert!(seen <= bytes.len() / 16 + 1);
            if let Ok(rec) = rec {
                let _ = (rec.timestamp_ns(), rec.is_truncated());
                exercise_frame(rec.data)?;
            }
        }
    }
    Ok(())
}

/// The packet parsers (not pcap) over one record.
fn exercise_frame(bytes: &[u8]) -> Result<(), TestCaseError> {
    let _ = roce::classify(bytes);
    if let Ok(p) = RocePacket::parse(bytes) {
        let _ = p.icrc_ok();
    }
    if let Ok(p) = NativePacket::parse(bytes) {
        let _ = (p.icrc_ok(), p.vcrc_ok());
    }
    let _ = TransportPacket::parse(bytes);
    Ok(())
}

/// One edit of a byte buffer.
#[derive(Debug, Clone)]
enum Mutation {
    FlipBit(Index, u8),
    SetByte(Index, u8),
    Insert(Index, u8),
    Delete(Index),
    Truncate(Index),
    /// Overwrite a 16-bit big-endian value (lengths, ports, EtherTypes) with a nearby one.
    Nudge16(Index, i8),
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, v)| Mutation::SetByte(i, v)),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, v)| Mutation::Insert(i, v)),
        1 => any::<Index>().prop_map(Mutation::Delete),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        2 => (any::<Index>(), any::<i8>()).prop_map(|(i, d)| Mutation::Nudge16(i, d)),
    ]
}

fn mutate(buf: &mut Vec<u8>, m: &Mutation) {
    let len = buf.len();
    match *m {
        Mutation::Insert(ref i, v) => {
            let at = i.index(len + 1);
            buf.insert(at, v);
        }
        _ if len == 0 => {}
        Mutation::FlipBit(ref i, b) => buf[i.index(len)] ^= 1 << b,
        Mutation::SetByte(ref i, v) => buf[i.index(len)] = v,
        Mutation::Delete(ref i) => {
            buf.remove(i.index(len));
        }
        Mutation::Truncate(ref i) => buf.truncate(i.index(len)),
        Mutation::Nudge16(ref i, d) => {
            if len >= 2 {
                let at = i.index(len - 1);
                let v = u16::from_be_bytes([buf[at], buf[at + 1]]).wrapping_add_signed(d.into());
                buf[at..at + 2].copy_from_slice(&v.to_be_bytes());
            }
        }
    }
}

/// Hand-made Ethernet + IP + UDP framing around arbitrary bytes (lengths right, ICRC not), so
/// that random transport bytes reach the transport parser through `RocePacket::parse`.
fn wrap_roce(body: &[u8], v6: bool) -> Vec<u8> {
    let udp_len = udp::LEN + body.len();
    let ip_len = if v6 { grh::LEN } else { ipv4::LEN };
    let mut f = vec![0u8; ethernet::LEN + ip_len + udp_len];
    let eth = Ethernet {
        ether_type: if v6 {
            ethernet::ETHERTYPE_IPV6
        } else {
            ethernet::ETHERTYPE_IPV4
        },
        ..Ethernet::default()
    };
    let mut at = eth.emit(&mut f).unwrap();
    if v6 {
        let g = Grh {
            ip_ver: 6,
            pay_len: udp_len as u16,
            nxt_hdr: roce::IP_PROTO_UDP,
            ..Grh::default()
        };
        at += g.emit(&mut f[at..]).unwrap();
    } else {
        let ip = Ipv4 {
            version: 4,
            ihl: 5,
            total_len: (ipv4::LEN + udp_len) as u16,
            ttl: 64,
            protocol: roce::IP_PROTO_UDP,
            ..Ipv4::default()
        };
        at += ip.emit(&mut f[at..]).unwrap();
    }
    let u = Udp {
        src_port: 0xC000,
        dst_port: udp::ROCEV2_PORT,
        length: udp_len as u16,
        checksum: 0,
    };
    at += u.emit(&mut f[at..]).unwrap();
    f[at..].copy_from_slice(body);
    f
}

/// An LRH with LVer 0 and a PktLen that fits, in front of arbitrary bytes (cut to whole words),
/// with a correct VCRC, so that random bytes reach the GRH / transport / raw parsers.
fn wrap_native(lnh: Lnh, body: &[u8]) -> Vec<u8> {
    let body = &body[..body.len() / 4 * 4];
    let covered = lrh::LEN + body.len();
    let l = Lrh {
        lnh,
        pkt_len: (covered / 4) as u16,
        ..Lrh::default()
    };
    let mut p = vec![0u8; covered + native::VCRC_LEN];
    l.emit(&mut p).unwrap();
    p[lrh::LEN..covered].copy_from_slice(body);
    let v = vcrc::compute(&p[..covered]);
    vcrc::put(&mut p[covered..], v).unwrap();
    p
}

/// A pcap file of `frames`.
fn pcap_of(link_type: u32, frames: &[&[u8]]) -> Vec<u8> {
    let mut w = PcapWriter::new(Vec::new(), link_type).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_record(1_700_000_000_000_000_000 + i as u64 * 1000, f)
            .unwrap();
    }
    w.into_inner()
}

/// A pcap global header (version 2.4, link type Ethernet) in either byte order.
fn pcap_global_header(big_endian: bool, nanos: bool, snaplen: u32) -> Vec<u8> {
    let magic = if nanos { MAGIC_NANOS } else { MAGIC_MICROS };
    let w32 = |v: u32| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let w16 = |v: u16| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let mut b = Vec::with_capacity(24);
    b.extend_from_slice(&w32(magic));
    b.extend_from_slice(&w16(2));
    b.extend_from_slice(&w16(4));
    b.extend_from_slice(&w32(0)); // thiszone
    b.extend_from_slice(&w32(0)); // sigfigs
    b.extend_from_slice(&w32(snaplen));
    b.extend_from_slice(&w32(LINKTYPE_ETHERNET));
    b
}

/// Random bytes whose first byte is a defined opcode and TVer is 0.
fn arb_transport_like() -> impl Strategy<Value = Vec<u8>> {
    (select(ROWS), vec(any::<u8>(), 12..160)).prop_map(|(row, mut b)| {
        b[0] = row.opcode.0;
        b[1] &= 0xF0;
        b
    })
}

proptest! {
    #![proptest_config(Config { cases: 1024, ..Config::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in vec(any::<u8>(), 0..600)) {
        exercise(&bytes)?;
    }

    /// Random bytes behind a valid pcap global header, so the record reader gets past it.
    #[test]
    fn random_pcap_records_never_panic(
        big_endian in any::<bool>(),
        nanos in any::<bool>(),
        snaplen in prop_oneof![Just(0u32), any::<u32>(), 0u32..2000],
        rest in vec(any::<u8>(), 0..600),
    ) {
        let mut b = pcap_global_header(big_endian, nanos, snaplen);
        b.extend_from_slice(&rest);
        exercise(&b)?;
    }

    /// Random transport bytes: directly, inside RoCEv2 framing, inside native framing.
    #[test]
    fn random_transport_bytes_never_panic(t in arb_transport_like(), v6 in any::<bool>()) {
        exercise(&t)?;
        exercise(&wrap_roce(&t, v6))?;
        exercise(&wrap_native(Lnh::IbaLocal, &t))?;
    }

    /// Random bytes after a consistent LRH, for each LNH.
    #[test]
    fn random_native_bodies_never_panic(lnh in 0u8..4, body in vec(any::<u8>(), 0..200)) {
        exercise(&wrap_native(Lnh::from_bits(lnh), &body))?;
    }

    /// Valid packets of every kind, edited a few times.
    #[test]
    fn mutated_packets_never_panic(
        c in arb_case(256),
        muts in vec(arb_mutation(), 1..6),
    ) {
        let t = c.transport();
        let mut tb = vec![0u8; BUF_LEN];
        let n = t.emit(&mut tb).unwrap();
        tb.truncate(n);
        let roce_frame = c.roce();
        let native_pkt = c.native();
        let pcap = pcap_of(LINKTYPE_ETHERNET, &[&roce_frame, &roce_frame[..roce_frame.len() / 2]]);
        let ib_pcap = pcap_of(LINKTYPE_INFINIBAND, &[&native_pkt]);
        for mut b in [tb, roce_frame, native_pkt, pcap, ib_pcap] {
            exercise(&b)?;
            for m in &muts {
                mutate(&mut b, m);
                exercise(&b)?;
            }
        }
    }

    /// Raw native packets, edited.
    #[test]
    fn mutated_raw_packets_never_panic(
        ipv6 in any::<bool>(),
        lrh in arb_lrh(),
        g in arb_grh(),
        ether_type in any::<u16>(),
        words in vec(any::<[u8; 4]>(), 0..40),
        muts in vec(arb_mutation(), 1..6),
    ) {
        let payload: Vec<u8> = words.concat();
        let mut g = g;
        if g.nxt_hdr == grh::NXT_HDR_IBA {
            g.nxt_hdr = 0;
        }
        let body = if ipv6 {
            NativeBody::RawIpv6 { ipv6: g, payload: &payload }
        } else {
            NativeBody::RawEthertype {
                rwh: softib_wire::rwh::Rwh { resv16: 0, ether_type },
                payload: &payload,
            }
        };
        let mut buf = vec![0u8; BUF_LEN];
        let n = native::build_raw(&lrh, &body, &mut buf).unwrap();
        buf.truncate(n);
        let p = NativePacket::parse_verified(&buf).unwrap();
        prop_assert_eq!(p.icrc(), None);
        exercise(&buf)?;
        for m in &muts {
            mutate(&mut buf, m);
            exercise(&buf)?;
        }
    }
}

#[test]
fn valid_pcap_yields_its_frames() {
    let frames: Vec<Vec<u8>> = ROWS
        .iter()
        .take(8)
        .map(|r| {
            let info = r.opcode.info().unwrap();
            let ext = AllExt {
                rdeth: Rdeth::default(),
                deth: Deth::default(),
                xrceth: Xrceth::default(),
                feth: Feth::default(),
                reth: Reth::default(),
                aeth: Aeth::default(),
                atomic_eth: AtomicEth::default(),
                atomic_ack_eth: AtomicAckEth::default(),
                immdt: ImmDt::default(),
                ieth: Ieth::default(),
                cnp_reserved: [0; CNP_RESERVED_LEN],
            };
            let payload = vec![0x5Au8; usize::from(r.opcode.0) * 3];
            let c = Case {
                info,
                headers: headers_for(info, Bth::default(), &ext),
                payload: if info.payload { payload } else { Vec::new() },
                eth: Ethernet::default(),
                ip: IpHeader::V4(Ipv4::default()),
                udp_src_port: 0xC000,
                lrh: Lrh::default(),
                grh: None,
            };
            c.roce()
        })
        .collect();
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let file = pcap_of(LINKTYPE_ETHERNET, &refs);
    let got: Vec<&[u8]> = PcapReader::new(&file)
        .unwrap()
        .map(|r| r.unwrap().data)
        .collect();
    assert_eq!(got, refs);
    for f in got {
        assert!(RocePacket::parse_verified(f).is_ok());
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Single-bit errors
// ---------------------------------------------------------------------------------------------

/// Bits of a RoCEv2 frame's byte `at` that the ICRC covers (`0` = none, `0xFF` = all).
fn roce_icrc_mask(c: &Case, frame_len: usize, at: usize) -> u8 {
    let eth_len = c.eth.header_len();
    let (ip_len, ip_variant): (usize, &[(usize, u8)]) = match c.ip {
        // TOS, TTL, header checksum.
        IpHeader::V4(_) => (ipv4::LEN, &[(1, 0xFF), (8, 0xFF), (10, 0xFF), (11, 0xFF)]),
        // Traffic class, flow label, hop limit.
        IpHeader::V6(_) => (
            grh::LEN,
            &[(0, 0x0F), (1, 0xFF), (2, 0xFF), (3, 0xFF), (7, 0xFF)],
        ),
    };
    let tlen = c.transport().wire_len().unwrap();
    let udp_at = eth_len + ip_len;
    let bth_at = udp_at + udp::LEN;
    let end = bth_at + tlen + roce::ICRC_LEN;
    assert!(end <= frame_len);
    let variant = |list: &[(usize, u8)], off: usize| {
        list.iter()
            .filter(|&&(o, _)| o == off)
            .fold(0xFFu8, |m, &(_, bits)| m & !bits)
    };
    if at < eth_len || at >= end {
        0
    } else if at < udp_at {
        variant(ip_variant, at - eth_len)
    } else if at < bth_at {
        // UDP checksum.
        variant(&[(6, 0xFF), (7, 0xFF)], at - udp_at)
    } else if at == bth_at + bth::ICRC_MASKED_BYTE {
        0
    } else {
        0xFF
    }
}

/// Flips every bit of the frame: ICRC-covered bits must be caught; the others must leave the
/// ICRC valid whenever the frame still parses (and for the IP/UDP/BTH variant fields and the
/// MAC addresses, it must still parse: softib does not judge them).
fn check_roce_bit_flips(c: &Case) -> Result<(), TestCaseError> {
    let mut frame = c.roce();
    let eth_len = c.eth.header_len();
    for at in 0..frame.len() {
        let mask = roce_icrc_mask(c, frame.len(), at);
        for bit in 0..8 {
            let b = 1u8 << bit;
            frame[at] ^= b;
            let r = RocePacket::parse(&frame);
            if mask & b != 0 {
                prop_assert!(
                    r.map_or(true, |p| !p.icrc_ok()),
                    "{}: flip of byte {at} bit {bit} not detected",
                    c.info.name
                );
                prop_assert!(RocePacket::parse_verified(&frame).is_err());
            } else {
                let must_parse = (at < 12) || at >= eth_len;
                match r {
                    Ok(p) => prop_assert!(
                        p.icrc_ok(),
                        "{}: variant byte {at} bit {bit} changed the ICRC",
                        c.info.name
                    ),
                    Err(e) => prop_assert!(
                        !must_parse,
                        "{}: flip of variant byte {at} bit {bit}: {e}",
                        c.info.name
                    ),
                }
            }
            frame[at] ^= b;
        }
    }
    Ok(())
}

/// Every single-bit flip anywhere in a native packet fails `parse_verified`.
fn check_native_bit_flips(c: &Case) -> Result<(), TestCaseError> {
    let mut pkt = c.native();
    prop_assert!(NativePacket::parse_verified(&pkt).is_ok());
    for at in 0..pkt.len() {
        for bit in 0..8 {
            pkt[at] ^= 1 << bit;
            prop_assert!(
                NativePacket::parse_verified(&pkt).is_err(),
                "{}: flip of byte {at} bit {bit} not detected",
                c.info.name
            );
            pkt[at] ^= 1 << bit;
        }
    }
    Ok(())
}

#[test]
fn every_single_bit_error_is_caught_for_every_opcode() {
    for_every_opcode(4, 48, |c| {
        check_roce_bit_flips(c)?;
        check_native_bit_flips(c)
    });
}

proptest! {
    #![proptest_config(Config { cases: 256, ..Config::default() })]

    /// Large packets: random bit positions.
    #[test]
    fn single_bit_errors_in_large_packets_are_caught(
        c in arb_case(transport::MAX_PAYLOAD),
        flips in vec((any::<Index>(), 0u8..8), 16),
    ) {
        let mut frame = c.roce();
        let mut pkt = c.native();
        for (i, bit) in flips {
            let b = 1u8 << bit;
            let at = i.index(frame.len());
            if roce_icrc_mask(&c, frame.len(), at) & b != 0 {
                frame[at] ^= b;
                prop_assert!(RocePacket::parse(&frame).map_or(true, |p| !p.icrc_ok()));
                frame[at] ^= b;
            }
            let at = i.index(pkt.len());
            pkt[at] ^= b;
            prop_assert!(NativePacket::parse_verified(&pkt).is_err());
            pkt[at] ^= b;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Builders refuse what the parsers refuse
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(Config { cases: 128, ..Config::default() })]

    /// A hand-assembled transport packet whose pad does not bring the payload to whole words
    /// is refused by `emit` and by both builders, with BTH:PadCnt named, rather than built into
    /// a frame the parsers reject (or, natively, a PktLen that cannot count it).
    #[test]
    fn misaligned_pad_is_refused_by_every_builder(
        c in arb_case(64).prop_filter("payload opcode", |c| c.info.payload),
        pad_cnt in 0u8..4,
    ) {
        prop_assume!((c.payload.len() + usize::from(pad_cnt)) % 4 != 0);
        let mut headers = c.headers;
        headers.bth.pad_cnt = pad_cnt;
        let t = TransportPacket {
            headers,
            payload: &c.payload,
            pad: &[0u8; 3][..usize::from(pad_cnt)],
        };
        let want = Err(Error::BadField { field: Field::BthPadCnt, value: pad_cnt.into() });
        let mut buf = vec![0u8; BUF_LEN];
        prop_assert_eq!(t.emit(&mut buf), want);
        prop_assert_eq!(roce::build(&c.eth, &c.ip, c.udp_src_port, &t, &mut buf), want);
        prop_assert_eq!(native::build(&c.lrh, c.grh.as_ref(), &t, &mut buf), want);
    }

    /// IPv4 options (IHL > 5) are kept verbatim, covered by the ICRC unmasked, and re-emitted.
    #[test]
    fn ipv4_options_round_trip(
        c in arb_case(256),
        words in vec(any::<[u8; 4]>(), 1..=10),
        (ident, ttl) in any::<(u16, u8)>(),
    ) {
        let mut c = c;
        c.ip = IpHeader::V4(Ipv4 {
            ident,
            ttl,
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
            ..Ipv4::default()
        });
        let frame = c.roce();
        let options: Vec<u8> = words.concat();
        let ip_at = c.eth.header_len();
        let opt_at = ip_at + ipv4::LEN;
        let tlen = c.transport().wire_len().unwrap();
        let end = opt_at + udp::LEN + tlen + roce::ICRC_LEN;
        // Re-frame: fixed header, options, the rest of the datagram; no Ethernet padding.
        let mut f = frame[..opt_at].to_vec();
        f.extend_from_slice(&options);
        f.extend_from_slice(&frame[opt_at..end]);
        let ihl = 5 + options.len() / 4;
        f[ip_at] = 0x40 | ihl as u8;
        let total = (ipv4::LEN + options.len() + udp::LEN + tlen + roce::ICRC_LEN) as u16;
        f[ip_at + 2..ip_at + 4].copy_from_slice(&total.to_be_bytes());
        let udp_at = opt_at + options.len();
        ipv4::fill_checksum(&mut f[ip_at..udp_at]);
        let t_at = udp_at + udp::LEN;
        let icrc_at = t_at + tlen;
        let want = icrc_reference(
            Some((&f[ip_at..udp_at], IPV4_ICRC_ONES)),
            Some(&f[udp_at..t_at]),
            &f[t_at..icrc_at],
        );
        f[icrc_at..].copy_from_slice(&want.to_le_bytes());

        let p = RocePacket::parse_verified(&f).expect("parse_verified");
        prop_assert_eq!(p.ip_options, &options[..]);
        prop_assert_eq!(p.transport, c.transport());
        prop_assert_eq!(p.computed_icrc(), want);
        let mut out = vec![0u8; f.len()];
        prop_assert_eq!(p.emit(&mut out), Ok(f.len()));
        prop_assert_eq!(out, f);
    }
}
