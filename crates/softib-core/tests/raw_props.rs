//! Property tests: arbitrary packets into a native IB port with raw QPs (and an RC QP) never
//! panic and never write outside the posted receive buffers.

mod ib;

use ib::{raw_qp, IbPair, LID_A, LID_B};
use proptest::prelude::*;
use softib_core::verbs::types::{Mtu, QpType, WcStatus};
use softib_core::verbs::wr::{RecvWr, Sge};
use softib_wire::lrh::{Lnh, Lrh};

/// Receive buffers posted on B: (offset, length) in B's region.
const BUFS: [(u64, u32); 3] = [(4096, 100), (16384, 2000), (65536, 4300)];
const GUARD: u8 = 0xEE;

/// B with a raw IPv6 QP, a raw EtherType QP and an RC QP, each with one receive buffer, and
/// the rest of B's region filled with the guard byte.
fn setup() -> IbPair {
    let mut p = IbPair::new(Mtu::Mtu4096);
    let (_, rc_b) = p.rc(false, Mtu::Mtu1024);
    let v6 = raw_qp(&mut p.b, QpType::RawIpv6);
    let et = raw_qp(&mut p.b, QpType::RawEthertype);
    let mr = p.b.mr;
    p.b.hca
        .mr_write(mr.handle, 0, &vec![GUARD; ib::MR_LEN])
        .unwrap();
    for (i, (qpn, (off, len))) in [v6, et, rc_b].into_iter().zip(BUFS).enumerate() {
        let wr = RecvWr::new(i as u64, vec![Sge::new(mr.addr + off, len, mr.lkey)]);
        p.b.hca.post_recv(qpn, &[wr]).unwrap();
    }
    p
}

fn check_guard(p: &IbPair) -> Result<(), TestCaseError> {
    let mem = p.b.hca.mr_bytes(p.b.mr.handle).unwrap();
    let mut at = 0usize;
    for (off, len) in BUFS {
        let off = off as usize;
        prop_assert!(
            mem[at..off].iter().all(|&b| b == GUARD),
            "write before {off:#x}"
        );
        at = off + len as usize;
    }
    prop_assert!(
        mem[at..].iter().all(|&b| b == GUARD),
        "write past the buffers"
    );
    Ok(())
}

/// A well-formed native packet with LNH `lnh` and `body` after the LRH, optionally with its
/// PktLen and VCRC left as given.
fn packet(
    lnh: u8,
    body: &[u8],
    dlid: u16,
    fix_len: bool,
    fix_vcrc: bool,
    len_delta: i8,
) -> Vec<u8> {
    let covered = 8 + body.len();
    let words = (covered / 4) as i32 + i32::from(len_delta);
    let lrh = Lrh {
        lnh: Lnh::from_bits(lnh),
        dlid,
        slid: LID_A,
        pkt_len: if fix_len {
            (covered / 4) as u16
        } else {
            words.clamp(0, 0x7FF) as u16
        },
        ..Lrh::default()
    };
    let mut f = vec![0u8; covered + 2];
    lrh.emit(&mut f).unwrap();
    f[8..covered].copy_from_slice(body);
    if fix_vcrc {
        let v = softib_wire::vcrc::compute(&f[..covered]);
        softib_wire::vcrc::put(&mut f[covered..], v).unwrap();
    }
    f
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic_or_write_outside(frames in proptest::collection::vec(
        proptest::collection::vec(any::<u8>(), 0..300), 1..8)) {
        let mut p = setup();
        let now = p.now;
        for f in &frames {
            p.b.hca.handle_frame(now, f);
        }
        check_guard(&p)?;
    }

    #[test]
    fn shaped_packets_never_panic_or_write_outside(
        pkts in proptest::collection::vec((
            0u8..4,
            proptest::collection::vec(any::<u8>(), 0..5000),
            prop_oneof![6 => Just(LID_B), 1 => Just(0xFFFFu16), 1 => any::<u16>()],
            prop_oneof![4 => Just(true), 1 => Just(false)],
            prop_oneof![4 => Just(true), 1 => Just(false)],
            prop_oneof![4 => Just(0i8), 1 => -2i8..3],
            any::<u8>(),
            prop_oneof![3 => 0u16..4, 1 => any::<u16>()],
        ), 1..6)
    ) {
        let mut p = setup();
        let now = p.now;
        for (lnh, mut body, dlid, fix_len, fix_vcrc, delta, nh, pad) in pkts {
            body.truncate(body.len() / 4 * 4);
            if lnh == 1 && body.len() >= 40 {
                // Mostly a plausible IPv6 header: version 6, PayLen the bytes after the header
                // less a pad (or anything), an arbitrary Next Header.
                body[0] = 0x60 | (body[0] & 0x0F);
                let pay_len = ((body.len() - 40) as u16).wrapping_sub(pad);
                body[4..6].copy_from_slice(&pay_len.to_be_bytes());
                body[6] = nh;
            }
            let f = packet(lnh, &body, dlid, fix_len, fix_vcrc, delta);
            p.b.hca.handle_frame(now, &f);
        }
        check_guard(&p)?;
        for wc in p.b.hca.poll_cq(p.b.cq, 64).unwrap() {
            if wc.status == WcStatus::Success {
                let (_, len) = BUFS[wc.wr_id as usize];
                prop_assert!(wc.byte_len <= len);
            }
        }
    }
}
