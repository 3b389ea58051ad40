//! XRC domains shared between HCAs (as the processes of a host share one: `hca/xrc_shared.rs`):
//! A's XRC initiator sends through B's XRC target QP into an XRC SRQ of a third HCA, C, of
//! the same shared domain. B does the transport and delegates each packet; the test carries
//! B's delegations to C in memory, as the UDP driver carries them through C's inbox. B and C
//! publish their SRQs in one [`MemoryXrcShare`].

mod common;

use common::{decode, hdr, Dir, Pair, Seen, Svc};
use softib_core::setup::ConnectOptions;
use softib_core::verbs::event::AsyncEvent;
use softib_core::verbs::mr::MrInfo;
use softib_core::verbs::srq::{SrqAttr, SrqAttrMask, SrqInitAttr};
use softib_core::verbs::types::{AccessFlags, WcOpcode, WcStatus};
use softib_core::verbs::wr::{RecvWr, RemoteAddr, SendWr, Sge, WrOpcode};
use softib_core::verbs::{CqHandle, SrqHandle};
use softib_core::{delegation_srqn, Hca, HcaConfig, MemoryXrcShare, XrcSrqShare};
use softib_wire::opcode::Opcode;
use softib_wire::xrceth::Xrceth;
use softib_wire::XrcSrqn;

/// The host-wide id both HCAs give the shared domain.
const DOMAIN: u32 = 7;

/// The SRQ owner: an HCA with an XRC SRQ in its share of the domain.
struct Owner {
    hca: Hca,
    cq: CqHandle,
    srq: SrqHandle,
    srqn: u32,
    mr: MrInfo,
}

impl Owner {
    fn new(share: &MemoryXrcShare) -> Owner {
        let mut hca = Hca::new(HcaConfig::new(3));
        hca.set_xrc_share(Box::new(share.clone()));
        let pd = hca.alloc_pd().unwrap();
        let cq = hca.create_cq(256).unwrap();
        let xrcd = hca.alloc_xrcd().unwrap();
        hca.share_xrcd(xrcd, DOMAIN).unwrap();
        let attr = SrqInitAttr {
            max_wr: 64,
            max_sge: 2,
            srq_limit: 0,
        };
        let srq = hca.create_xrc_srq(pd, xrcd, cq, &attr).unwrap();
        let srqn = hca.srq_num(srq).unwrap();
        let mr = hca
            .reg_mr(pd, vec![0u8; 1 << 16], AccessFlags::LOCAL_WRITE, None)
            .unwrap();
        Owner {
            hca,
            cq,
            srq,
            srqn,
            mr,
        }
    }

    /// Posts a receive of `len` bytes at `offset` of the owner's region.
    fn post(&mut self, wr_id: u64, offset: u64, len: u32) {
        let sge = Sge::new(self.mr.addr + offset, len, self.mr.lkey);
        self.hca
            .post_srq_recv(self.srq, &[RecvWr::new(wr_id, vec![sge])])
            .unwrap();
    }

    fn wcs(&mut self) -> Vec<softib_core::verbs::cq::WorkCompletion> {
        self.hca.poll_cq(self.cq, 64).unwrap()
    }

    fn mem(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.hca.mr_read(self.mr.handle, offset, &mut v).unwrap();
        v
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

/// An XRC pair (A initiator, B target) whose domain B shares as [`DOMAIN`], and C, the owner
/// of an XRC SRQ of the same domain.
fn setup() -> (Pair, Owner, MemoryXrcShare) {
    let share = MemoryXrcShare::new();
    let opts = ConnectOptions {
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        // The shortest RNR timer, so that a test that waits for one does not wait long.
        min_rnr_timer: 1,
        ..ConnectOptions::default()
    };
    let mut p = Pair::new_svc(Svc::Xrc, 0x100, 0x900, opts);
    p.b.hca.set_xrc_share(Box::new(share.clone()));
    let xrcd = p.b.xrcd.unwrap();
    p.b.hca.share_xrcd(xrcd, DOMAIN).unwrap();
    let c = Owner::new(&share);
    assert_ne!(
        c.srqn,
        p.b_srqn().unwrap(),
        "SRQ numbers differ between HCAs"
    );
    (p, c, share)
}

/// Carries B's delegations to C; returns how many.
fn pump(p: &mut Pair, c: &mut Owner) -> usize {
    let mut n = 0;
    let mut buf = Vec::new();
    while p.b.hca.poll_delegation(&mut buf) {
        assert_eq!(delegation_srqn(&buf), Some(c.srqn));
        c.hca.handle_delegation(&buf);
        n += 1;
    }
    n
}

/// Every packet B sent to A so far, decoded.
fn responses(p: &Pair) -> Vec<Seen> {
    p.log
        .iter()
        .filter(|(d, _)| *d == Dir::BtoA)
        .map(|(_, f)| decode(f))
        .collect()
}

/// Runs the pair (and the delegations) until idle, up to virtual time `limit_ns`.
fn run(p: &mut Pair, c: &mut Owner, limit_ns: u64) -> usize {
    p.run(limit_ns);
    pump(p, c)
}

/// A's SEND of `len` bytes of A's region, naming C's SRQ.
fn send_to_c(p: &mut Pair, c: &Owner, wr_id: u64, len: u32, op: WrOpcode) {
    let wr = SendWr::new(wr_id, op)
        .with_sge(p.sge_a(0, len))
        .signaled()
        .with_xrc_srqn(c.srqn);
    let qpn = p.a.qpn;
    p.a.hca.post_send(qpn, &[wr]).unwrap();
}

#[test]
fn a_send_through_one_hcas_target_lands_in_another_hcas_srq() {
    let (mut p, mut c, share) = setup();
    c.post(7, 0x100, 4096);
    assert_eq!(share.credits(c.srqn), Some(1));
    let data = pattern(2500, 3);
    p.a.hca.mr_write(p.a.mr.handle, 0, &data).unwrap();
    send_to_c(&mut p, &c, 1, 2500, WrOpcode::SendWithImm(0x1234_5678));
    // Three packets at path MTU 1024: three delegations, in order.
    assert_eq!(run(&mut p, &mut c, 1_000_000_000), 3);
    assert_eq!(p.a.done(), vec![(1, WcStatus::Success)]);
    assert_eq!(share.credits(c.srqn), Some(0));
    let wc = c.wcs();
    assert_eq!(wc.len(), 1, "{wc:?}");
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
        (7, WcStatus::Success, WcOpcode::Recv, 2500)
    );
    // The completion names the target QP the message came through, as a local XRC receive's.
    assert_eq!(wc[0].qp_num, p.b.qpn);
    assert_eq!(wc[0].imm_data, Some(0x1234_5678));
    assert_eq!(c.mem(0x100, 2500), data);
    // B's own SRQ saw nothing; the counters tell the path.
    assert!(p.b.wcs().is_empty());
    assert_eq!(p.b.hca.counters().xrc_delegated, 3);
    assert_eq!(c.hca.counters().xrc_delegations_in, 3);
    assert_eq!(c.hca.counters().xrc_delegations_dropped, 0);
    // B's target still delivers into B's own SRQ of the domain (a local receive reserves its
    // credit in the share as the remote one did).
    p.b.post_recv(9, 0, 64);
    p.a.hca.mr_write(p.a.mr.handle, 0, b"local").unwrap();
    p.post_a(&[SendWr::new(2, WrOpcode::Send)
        .with_sge(p.sge_a(0, 5))
        .signaled()]);
    assert_eq!(run(&mut p, &mut c, 2_000_000_000), 0);
    assert_eq!(p.a.done(), vec![(2, WcStatus::Success)]);
    let wb = p.b.wcs();
    assert_eq!((wb[0].wr_id, wb[0].byte_len), (9, 5));
    assert_eq!(share.credits(p.b_srqn().unwrap()), Some(0));
}

/// C9-113 for a shared SRQ: an SRQ whose every WQE is spoken for draws an RNR NAK carrying the
/// request's PSN; once the owner posts a receive, the retry lands.
#[test]
fn c9_113_xrc_shared_srq_without_credits_rnr_naks_with_the_request_psn() {
    let (mut p, mut c, share) = setup();
    let psn = p.sq_psn_a();
    p.a.hca.mr_write(p.a.mr.handle, 0, b"hello").unwrap();
    send_to_c(&mut p, &c, 1, 5, WrOpcode::Send);
    // A's retries are RNR-NAKed while nothing is posted.
    assert_eq!(run(&mut p, &mut c, 20_000_000), 0, "nothing delegated");
    assert!(p.a.done().is_empty());
    let naks: Vec<Seen> = responses(&p);
    assert!(!naks.is_empty());
    for n in &naks {
        assert_eq!(n.syndrome().map(|s| s & 0xe0), Some(0x20), "an RNR NAK");
        assert_eq!(n.psn(), psn);
    }
    assert_eq!(p.b.hca.counters().rnr_nak_sent, naks.len() as u64);
    c.post(3, 0, 64);
    assert_eq!(share.credits(c.srqn), Some(1));
    run(&mut p, &mut c, 2_000_000_000);
    assert_eq!(p.a.done(), vec![(1, WcStatus::Success)]);
    let wc = c.wcs();
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].byte_len),
        (3, WcStatus::Success, 5)
    );
    assert_eq!(c.mem(0, 5), b"hello");
}

/// C9-102 for a shared SRQ: a duplicate of a delegated SEND is acknowledged again and never
/// delegated (delivered) twice.
#[test]
fn c9_102_xrc_shared_duplicate_is_answered_and_not_delivered_again() {
    let (mut p, mut c, _share) = setup();
    c.post(1, 0, 4096);
    c.post(2, 0x1000, 4096);
    p.a.hca
        .mr_write(p.a.mr.handle, 0, &pattern(1500, 1))
        .unwrap();
    // B's first ACK is lost: A sends the two packets again after its timeout.
    let mut dropped = false;
    p.filter = Box::new(move |d, _| {
        if d == Dir::BtoA && !dropped {
            dropped = true;
            return false;
        }
        true
    });
    send_to_c(&mut p, &c, 1, 1500, WrOpcode::Send);
    run(&mut p, &mut c, 5_000_000_000);
    assert_eq!(p.a.done(), vec![(1, WcStatus::Success)]);
    assert!(p.b.hca.counters().duplicate_request >= 1);
    assert_eq!(p.b.hca.counters().xrc_delegated, 2, "each packet once");
    let wc = c.wcs();
    assert_eq!(wc.len(), 1, "one message delivered once: {wc:?}");
    assert_eq!((wc[0].wr_id, wc[0].byte_len), (1, 1500));
    assert_eq!(c.mem(0, 1500), pattern(1500, 1));
}

/// C9-89 for a shared SRQ: RDMA WRITE, READ and atomics through a target QP are checked in
/// the protection domain of the SRQ its XRCETH names; another HCA's PD is none of the target's,
/// so every access of one byte or more is a protection-domain violation: NAK-Remote Access
/// Error with the request's PSN.
#[test]
fn c9_89_xrc_shared_rdma_and_atomics_into_another_hcas_domain_nak_remote_access() {
    let remote = RemoteAddr::new(0x1000, 0x77);
    let ops = [
        WrOpcode::RdmaWrite { remote },
        WrOpcode::RdmaWriteWithImm { remote, imm: 5 },
        WrOpcode::RdmaRead { remote },
        WrOpcode::AtomicFetchAdd {
            remote_addr: 0x1000,
            rkey: 0x77,
            add: 1,
        },
    ];
    for op in ops {
        let (mut p, mut c, _share) = setup();
        c.post(1, 0, 64);
        let psn = p.sq_psn_a();
        let len = if matches!(op, WrOpcode::AtomicFetchAdd { .. }) {
            8
        } else {
            16
        };
        send_to_c(&mut p, &c, 1, len, op);
        run(&mut p, &mut c, 1_000_000_000);
        let r = responses(&p);
        assert_eq!(r.len(), 1, "{op:?}");
        assert_eq!(
            r[0].syndrome(),
            Some(0x62),
            "{op:?}: NAK-Remote Access Error"
        );
        assert_eq!(r[0].psn(), psn);
        assert_eq!(p.a.done(), vec![(1, WcStatus::RemAccessErr)], "{op:?}");
        assert!(c.wcs().is_empty());
        assert_eq!(c.hca.counters().xrc_delegations_in, 0);
    }
}

/// A zero-length RDMA WRITE with immediate needs no memory (C9-88): it consumes a receive WQE
/// of the owner's SRQ as a SEND does, and completes there as a WRITE with immediate.
#[test]
fn a_zero_length_write_with_immediate_completes_at_the_owner() {
    let (mut p, mut c, _share) = setup();
    c.post(4, 0, 64);
    let wr = SendWr::new(
        1,
        WrOpcode::RdmaWriteWithImm {
            remote: RemoteAddr::new(0, 0),
            imm: 0xabcd,
        },
    )
    .signaled()
    .with_xrc_srqn(c.srqn);
    let qpn = p.a.qpn;
    p.a.hca.post_send(qpn, &[wr]).unwrap();
    assert_eq!(run(&mut p, &mut c, 1_000_000_000), 1);
    assert_eq!(p.a.done(), vec![(1, WcStatus::Success)]);
    let wc = c.wcs();
    assert_eq!(
        (wc[0].wr_id, wc[0].opcode, wc[0].byte_len, wc[0].imm_data),
        (4, WcOpcode::RecvRdmaWithImm, 0, Some(0xabcd))
    );
    assert_eq!(wc[0].qp_num, p.b.qpn);
}

/// What only the owner can see: a message longer than its receive WQE completes the WQE with
/// a local length error, a scatter entry whose L_Key fails with a local protection error;
/// the initiator's request was acknowledged (the documented deviation from C9-91), and the
/// owner's next message lands as usual.
#[test]
fn the_owner_completes_wqes_that_do_not_fit_in_error() {
    let (mut p, mut c, _share) = setup();
    c.post(1, 0, 1000);
    let bad = Sge::new(c.mr.addr, 64, c.mr.lkey ^ 0x100);
    c.hca
        .post_srq_recv(c.srq, &[RecvWr::new(2, vec![bad])])
        .unwrap();
    c.post(3, 0x2000, 4096);
    p.a.hca
        .mr_write(p.a.mr.handle, 0, &pattern(3000, 5))
        .unwrap();
    send_to_c(&mut p, &c, 1, 3000, WrOpcode::Send);
    send_to_c(&mut p, &c, 2, 10, WrOpcode::Send);
    send_to_c(&mut p, &c, 3, 3000, WrOpcode::Send);
    run(&mut p, &mut c, 2_000_000_000);
    let done = p.a.done();
    assert_eq!(
        done,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    let wc: Vec<_> = c.wcs().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        wc,
        vec![
            (1, WcStatus::LocLenErr),
            (2, WcStatus::LocProtErr),
            (3, WcStatus::Success)
        ]
    );
    assert_eq!(c.mem(0x2000, 3000), pattern(3000, 5));
}

/// A message the target gives up part-way (here an XRCETH violation on its MIDDLE packet)
/// ends at the owner too: the WQE its FIRST packet took completes with flush error.
#[test]
fn a_message_the_target_abandons_is_flushed_at_the_owner() {
    let (mut p, mut c, _share) = setup();
    c.post(5, 0, 4096);
    let epsn = p.rq_psn_b();
    let mut h = hdr(Opcode::RC_SEND_FIRST, epsn);
    h.xrceth = Some(Xrceth {
        resv8: 0,
        xrcsrq: XrcSrqn::new(c.srqn),
    });
    p.inject(Dir::AtoB, h, &[1u8; 1024]);
    assert_eq!(pump(&mut p, &mut c), 1);
    // The MIDDLE names B's own SRQ (the harness's default XRCETH): NAK-Invalid RD Request.
    p.inject(
        Dir::AtoB,
        hdr(Opcode::RC_SEND_MIDDLE, epsn + 1),
        &[2u8; 1024],
    );
    let nak = p.drain(Dir::BtoA);
    assert!(
        nak.iter().any(|s| s.syndrome() == Some(0x64)),
        "{:?}",
        nak.iter().map(|s| s.syndrome()).collect::<Vec<_>>()
    );
    assert_eq!(pump(&mut p, &mut c), 1, "the abandonment");
    let wc = c.wcs();
    assert_eq!((wc[0].wr_id, wc[0].status), (5, WcStatus::WrFlushErr));
    assert_eq!(wc[0].qp_num, p.b.qpn);
}

/// A target QP reset or destroyed in the middle of a delegated message ends it at the owner:
/// the WQE completes with flush error.
#[test]
fn a_target_reset_or_destroyed_mid_message_flushes_the_owners_wqe() {
    use softib_core::verbs::qp::{QpAttr, QpAttrMask};
    use softib_core::verbs::types::QpState;
    for destroy in [false, true] {
        let (mut p, mut c, _share) = setup();
        c.post(5, 0, 4096);
        let mut h = hdr(Opcode::RC_SEND_FIRST, p.rq_psn_b());
        h.xrceth = Some(Xrceth {
            resv8: 0,
            xrcsrq: XrcSrqn::new(c.srqn),
        });
        p.inject(Dir::AtoB, h, &[1u8; 1024]);
        assert_eq!(pump(&mut p, &mut c), 1);
        let qpn = p.b.qpn;
        if destroy {
            p.b.hca.destroy_qp(qpn).unwrap();
        } else {
            p.b.hca
                .modify_qp(qpn, &QpAttr::to_state(QpState::Reset), QpAttrMask::STATE)
                .unwrap();
        }
        assert_eq!(
            pump(&mut p, &mut c),
            1,
            "the abandonment (destroy: {destroy})"
        );
        let wc = c.wcs();
        assert_eq!((wc[0].wr_id, wc[0].status), (5, WcStatus::WrFlushErr));
    }
}

/// A receive of the owner's SRQ that another HCA's message reserved is not the owner's own
/// target QP's to take: it RNR-NAKs until a receive is posted for it (a reservation always
/// finds its WQE).
#[test]
fn local_consumption_respects_reservations_of_other_hcas() {
    let (mut p, mut c, share) = setup();
    let b_srqn = p.b_srqn().unwrap();
    p.b.post_recv(1, 0, 64);
    // Another HCA's target reserves the only WQE of B's SRQ (its delegation under way).
    let mut other = share.clone();
    assert_eq!(
        other.reserve(b_srqn, DOMAIN),
        softib_core::Reservation::Reserved
    );
    p.a.hca.mr_write(p.a.mr.handle, 0, b"x").unwrap();
    p.post_a(&[SendWr::new(1, WrOpcode::Send)
        .with_sge(p.sge_a(0, 1))
        .signaled()]);
    run(&mut p, &mut c, 20_000_000);
    assert!(p.b.hca.counters().rnr_nak_sent >= 1);
    assert!(p.b.wcs().is_empty());
    p.b.post_recv(2, 64, 64);
    run(&mut p, &mut c, 2_000_000_000);
    assert_eq!(p.a.done(), vec![(1, WcStatus::Success)]);
    // The oldest WQE is taken (the reservation stands for "one of them", as an SRQ's WQEs
    // are interchangeable).
    assert_eq!(p.b.wcs().len(), 1);
}

/// The owner's SRQ limit fires when a delegated message takes the WQE that crosses it, as for
/// a local receive.
#[test]
fn the_srq_limit_fires_at_the_owner() {
    let (mut p, mut c, _share) = setup();
    for i in 0..3 {
        c.post(i, 0x100 * i, 64);
    }
    let limit = SrqAttr {
        srq_limit: 3,
        ..SrqAttr::default()
    };
    c.hca.modify_srq(c.srq, &limit, SrqAttrMask::LIMIT).unwrap();
    send_to_c(&mut p, &c, 1, 8, WrOpcode::Send);
    run(&mut p, &mut c, 1_000_000_000);
    assert_eq!(
        c.hca.poll_async_event(),
        Some(AsyncEvent::SrqLimitReached { srq: c.srq })
    );
}

/// An SRQ that is not published (destroyed), or a target whose domain is not shared, is an
/// XRCETH violation, as an unknown SRQ number is: NAK-Invalid RD Request.
#[test]
fn a_withdrawn_srq_is_an_xrceth_violation() {
    let (mut p, mut c, share) = setup();
    c.hca.destroy_srq(c.srq).unwrap();
    assert_eq!(share.credits(c.srqn), None);
    send_to_c(&mut p, &c, 1, 8, WrOpcode::Send);
    run(&mut p, &mut c, 1_000_000_000);
    assert_eq!(p.a.done(), vec![(1, WcStatus::RemInvRdReqErr)]);
    assert_eq!(p.b.hca.counters().xrc_bad_srq, 1);
}

/// Delegations the owner cannot take are dropped and counted: malformed ones, one for an SRQ
/// that went, a MIDDLE of no message under way.
#[test]
fn the_owner_drops_what_it_cannot_take() {
    let (mut p, mut c, _share) = setup();
    c.post(1, 0, 4096);
    c.hca.handle_delegation(&[0xd7, 1, 2]);
    let epsn = p.rq_psn_b();
    let mut h = hdr(Opcode::RC_SEND_FIRST, epsn);
    h.xrceth = Some(Xrceth {
        resv8: 0,
        xrcsrq: XrcSrqn::new(c.srqn),
    });
    p.inject(Dir::AtoB, h, &[1u8; 1024]);
    let mut first = Vec::new();
    assert!(p.b.hca.poll_delegation(&mut first));
    // The FIRST packet's delegation with its position changed to MIDDLE: no message is under
    // way for that target QP.
    let mut middle = first.clone();
    middle[2] = 1;
    c.hca.handle_delegation(&middle);
    assert_eq!(c.hca.counters().xrc_delegations_dropped, 2);
    c.hca.handle_delegation(&first);
    c.hca.destroy_srq(c.srq).unwrap();
    c.hca.handle_delegation(&middle);
    assert_eq!(c.hca.counters().xrc_delegations_dropped, 3);
}
