//! Object lifecycles: PDs, MRs, CQs (overrun, notification), SRQs, AHs, QP creation and
//! destruction, busy destroys, limits.

use super::*;
use crate::error::*;
use crate::verbs::ah::AhAttrError;
use crate::verbs::cq::CqNotify;
use crate::verbs::device::NumberRange;
use crate::verbs::event::AsyncEvent;
use crate::verbs::mr::{MrAccessError, MrCheckError};
use crate::verbs::srq::{SrqAttr, SrqAttrMask, SrqInitAttr};
use crate::verbs::types::{LinkLayer, PortState, WcStatus};
use crate::verbs::wr::{RecvWr, SendWr, Sge, WrOpcode};

const SRQ: SrqInitAttr = SrqInitAttr {
    max_wr: 4,
    max_sge: 2,
    srq_limit: 0,
};

#[test]
fn query_device_and_port() {
    let hca = Hca::new(HcaConfig::new(3));
    let d = hca.query_device();
    assert_eq!(d.phys_port_cnt, 1);
    assert_eq!(d.node_guid, HcaConfig::node_guid_for(3));
    let p = hca.query_port(1).unwrap();
    assert_eq!(p.state, PortState::Active);
    assert_eq!(p.link_layer, LinkLayer::Ethernet);
    assert_eq!(p.active_mtu, Mtu::Mtu1024);
    assert_eq!(p.pkeys, vec![0xFFFF]);
    assert_eq!(p.gids[0].gid.interface_id(), d.node_guid);
    for bad in [0, 2] {
        assert_eq!(
            hca.query_port(bad),
            Err(QueryPortError::InvalidPort {
                port: bad,
                num_ports: 1
            })
        );
    }
}

#[test]
fn qpns_start_at_0x11_and_wrap_below_2_pow_24() {
    let mut f = Fixture::new();
    let a = f.qp(QpType::Rc);
    let b = f.qp(QpType::Ud);
    assert_eq!(a, Qpn::new(0x11));
    assert_eq!(b, Qpn::new(0x12));
    f.hca.destroy_qp(a).unwrap();
    // Numbers are not reused right away.
    assert_eq!(f.qp(QpType::Rc), Qpn::new(0x13));
    f.hca.next_qpn = 0xFF_FFFE;
    assert_eq!(f.qp(QpType::Rc), Qpn::new(0xFF_FFFE));
    // 0xFFFFFF is the multicast QPN, never allocated: wraps to 0x11 (free again), then skips
    // 0x12 and 0x13 (in use).
    assert_eq!(f.qp(QpType::Rc), Qpn::new(0x11));
    assert_eq!(f.qp(QpType::Rc), Qpn::new(0x14));
}

/// An HCA given a range of numbers (one process's share of a host-wide device) numbers its
/// QPs and SRQs only inside it, from its start, wrapping at its end, and its limits fit it.
#[test]
fn numbers_stay_inside_a_configured_range() {
    let mut config = HcaConfig::new(1);
    config.numbers = Some(NumberRange {
        first: 0x3_0000,
        last: 0x3_FFFF,
        start: 0x3_FFFE,
    });
    let mut f = Fixture::with_config(config);
    assert_eq!(f.hca.query_device().max_qp, 0x1_0000);
    assert_eq!(f.hca.query_device().max_srq, 0x1_0000);
    let qpns: Vec<u32> = (0..3).map(|_| f.qp(QpType::Rc).value()).collect();
    assert_eq!(qpns, [0x3_FFFE, 0x3_FFFF, 0x3_0000]);
    let srq = f.hca.create_srq(f.pd, &SRQ).unwrap();
    assert_eq!(f.hca.srq_num(srq), Ok(0x3_FFFE));
    let srq = f.hca.create_srq(f.pd, &SRQ).unwrap();
    assert_eq!(f.hca.srq_num(srq), Ok(0x3_FFFF));
    let range = NumberRange {
        first: 5,
        last: 7,
        start: 6,
    };
    let mut cursor = range.start;
    assert_eq!(range.next_free(&mut cursor, |n| n == 7), Some(6));
    assert_eq!(range.next_free(&mut cursor, |n| n == 7), Some(5));
    assert_eq!(range.next_free(&mut cursor, |_| true), None);
    // A cursor outside the range starts at its first number.
    let mut outside = 100;
    assert_eq!(range.next_free(&mut outside, |_| false), Some(5));
}

/// The QP map remembers its latest hit by QPN and position: an insertion or a removal that
/// moves the positions of the QPs behind it must never make a look-up return another QP.
#[test]
fn qp_lookups_stay_right_when_positions_move() {
    let mut f = Fixture::new();
    let a = f.qp(QpType::Rc);
    let b = f.qp(QpType::Ud);
    let c = f.qp(QpType::Uc);
    let kind = |f: &Fixture, q: Qpn| f.hca.qp(q).map(|qp| (qp.qpn(), qp.qp_type()));
    // The latest hit is c, at the last position.
    assert_eq!(kind(&f, c), Some((c, QpType::Uc)));
    // A removal in front of it moves it down by one; the removed QP (the latest hit of the
    // removal's own look-up) is gone.
    f.hca.destroy_qp(a).unwrap();
    assert_eq!(kind(&f, a), None);
    assert_eq!(kind(&f, c), Some((c, QpType::Uc)));
    assert_eq!(kind(&f, b), Some((b, QpType::Ud)));
    // An insertion in front of b (a QPN below it, as after the numbers wrap) moves b up.
    f.hca.next_qpn = a.value();
    assert_eq!(kind(&f, b), Some((b, QpType::Ud)));
    let d = f.qp(QpType::Rc);
    assert_eq!(d, a);
    assert_eq!(kind(&f, b), Some((b, QpType::Ud)));
    assert_eq!(kind(&f, d), Some((d, QpType::Rc)));
    assert_eq!(kind(&f, c), Some((c, QpType::Uc)));
}

#[test]
fn pd_limit_and_busy_dealloc() {
    let mut config = HcaConfig::new(1);
    config.device.max_pd = 2;
    let mut f = Fixture::with_config(config);
    let pd2 = f.hca.alloc_pd().unwrap();
    assert_eq!(f.hca.alloc_pd(), Err(AllocPdError::TooManyPds { max: 2 }));
    let mr = f
        .hca
        .reg_mr(pd2, vec![0; 8], AccessFlags::empty(), None)
        .unwrap();
    let ah = f
        .hca
        .create_ah(pd2, &crate::verbs::ah::AhAttr::global(1, Gid::default(), 0))
        .unwrap();
    let srq = f.hca.create_srq(pd2, &SRQ).unwrap();
    let qpn = f
        .hca
        .create_qp(pd2, &QpInitAttr::new(QpType::Rc, f.cq, CAP))
        .unwrap();
    assert_eq!(
        f.hca.dealloc_pd(pd2),
        Err(DeallocPdError::Busy { pd: pd2, users: 4 })
    );
    f.hca.dereg_mr(mr.handle).unwrap();
    f.hca.destroy_ah(ah).unwrap();
    f.hca.destroy_srq(srq).unwrap();
    assert_eq!(
        f.hca.dealloc_pd(pd2),
        Err(DeallocPdError::Busy { pd: pd2, users: 1 })
    );
    f.hca.destroy_qp(qpn).unwrap();
    f.hca.dealloc_pd(pd2).unwrap();
    assert_eq!(f.hca.dealloc_pd(pd2), Err(DeallocPdError::NoSuchPd(pd2)));
    // The slot is free again; the stale handle does not reach the new PD.
    let pd3 = f.hca.alloc_pd().unwrap();
    assert_ne!(pd3, pd2);
    assert!(matches!(
        f.hca.reg_mr(pd2, vec![], AccessFlags::empty(), None),
        Err(RegMrError::NoSuchPd(_))
    ));
}

#[test]
fn cq_busy_while_qps_use_it() {
    let mut f = Fixture::new();
    let cq2 = f.hca.create_cq(1).unwrap();
    let init = QpInitAttr {
        recv_cq: cq2,
        ..QpInitAttr::new(QpType::Ud, f.cq, CAP)
    };
    let a = f.hca.create_qp(f.pd, &init).unwrap();
    let b = f.hca.create_qp(f.pd, &init).unwrap();
    assert_eq!(
        f.hca.destroy_cq(cq2),
        Err(DestroyCqError::Busy { cq: cq2, users: 2 })
    );
    assert_eq!(
        f.hca.destroy_cq(f.cq),
        Err(DestroyCqError::Busy { cq: f.cq, users: 2 })
    );
    f.hca.destroy_qp(a).unwrap();
    f.hca.destroy_qp(b).unwrap();
    f.hca.destroy_cq(cq2).unwrap();
    f.hca.destroy_cq(f.cq).unwrap();
    assert_eq!(f.hca.destroy_cq(cq2), Err(DestroyCqError::NoSuchCq(cq2)));
    assert_eq!(f.hca.poll_cq(cq2, 1), Err(CqError::NoSuchCq(cq2)));
}

#[test]
fn srq_busy_while_qps_use_it() {
    let mut f = Fixture::new();
    let srq = f.hca.create_srq(f.pd, &SRQ).unwrap();
    let init = QpInitAttr {
        srq: Some(srq),
        ..QpInitAttr::new(QpType::Rc, f.cq, CAP)
    };
    let qpn = f.hca.create_qp(f.pd, &init).unwrap();
    assert_eq!(
        f.hca.destroy_srq(srq),
        Err(DestroySrqError::Busy { srq, users: 1 })
    );
    f.hca.destroy_qp(qpn).unwrap();
    f.hca.destroy_srq(srq).unwrap();
    assert_eq!(f.hca.query_srq(srq), Err(SrqError::NoSuchSrq(srq)));
}

#[test]
fn create_qp_checks() {
    let mut config = HcaConfig::new(1);
    config.device.max_qp = 1;
    let mut f = Fixture::with_config(config);
    let big = |field: &str| {
        let mut cap = CAP;
        match field {
            "max_send_wr" => cap.max_send_wr = (1 << 20) + 1,
            "max_recv_wr" => cap.max_recv_wr = (1 << 20) + 1,
            "max_send_sge" => cap.max_send_sge = 33,
            "max_recv_sge" => cap.max_recv_sge = 33,
            _ => cap.max_inline_data = 513,
        }
        cap
    };
    for field in [
        "max_send_wr",
        "max_recv_wr",
        "max_send_sge",
        "max_recv_sge",
        "max_inline_data",
    ] {
        let err = f
            .hca
            .create_qp(f.pd, &QpInitAttr::new(QpType::Rc, f.cq, big(field)))
            .unwrap_err();
        assert!(
            matches!(err, CreateQpError::CapTooLarge { field: f2, .. } if f2 == field),
            "{err}"
        );
    }
    let pd2 = f.hca.alloc_pd().unwrap();
    f.hca.dealloc_pd(pd2).unwrap();
    assert_eq!(
        f.hca
            .create_qp(pd2, &QpInitAttr::new(QpType::Rc, f.cq, CAP)),
        Err(CreateQpError::NoSuchPd(pd2))
    );
    let cq2 = f.hca.create_cq(1).unwrap();
    f.hca.destroy_cq(cq2).unwrap();
    assert_eq!(
        f.hca
            .create_qp(f.pd, &QpInitAttr::new(QpType::Rc, cq2, CAP)),
        Err(CreateQpError::NoSuchCq(cq2))
    );
    let srq = f.hca.create_srq(f.pd, &SRQ).unwrap();
    let raw = QpInitAttr {
        srq: Some(srq),
        ..QpInitAttr::new(QpType::RawEthertype, f.cq, CAP)
    };
    assert_eq!(
        f.hca.create_qp(f.pd, &raw),
        Err(CreateQpError::SrqNotSupported {
            qp_type: QpType::RawEthertype
        })
    );
    // With an SRQ the receive caps are ignored, so an oversized one passes.
    let with_srq = QpInitAttr {
        srq: Some(srq),
        ..QpInitAttr::new(QpType::Rc, f.cq, big("max_recv_wr"))
    };
    let qpn = f.hca.create_qp(f.pd, &with_srq).unwrap();
    assert_eq!(f.hca.query_qp_init_attr(qpn).unwrap().cap.max_recv_wr, 0);
    assert_eq!(
        f.hca
            .create_qp(f.pd, &QpInitAttr::new(QpType::Rc, f.cq, CAP)),
        Err(CreateQpError::TooManyQps { max: 1 })
    );
}

#[test]
fn destroy_qp_flushes_outstanding_wrs() {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Rc);
    f.bring_to(qpn, QpState::Rts);
    f.hca
        .post_send(qpn, &[SendWr::new(1, WrOpcode::Send)])
        .unwrap();
    f.hca.post_recv(qpn, &[RecvWr::new(2, vec![])]).unwrap();
    f.hca.destroy_qp(qpn).unwrap();
    let ids: Vec<_> = f.drain().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        vec![(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(f.hca.destroy_qp(qpn), Err(QpError::NoSuchQp(qpn)));
    assert!(f.hca.qp(qpn).is_none());
}

#[test]
fn cq_overrun_is_an_error() {
    let mut f = Fixture::new();
    let small = f.hca.create_cq(1).unwrap();
    assert_eq!(f.hca.query_cq(small).unwrap().cqe, 1);
    let qpn = f
        .hca
        .create_qp(f.pd, &QpInitAttr::new(QpType::Rc, small, CAP))
        .unwrap();
    f.bring_to(qpn, QpState::Rts);
    let wrs: Vec<_> = (0..3).map(|i| SendWr::new(i, WrOpcode::Send)).collect();
    f.hca.post_send(qpn, &wrs).unwrap();
    f.hca
        .modify_qp(qpn, &QpAttr::to_state(QpState::Err), QpAttrMask::STATE)
        .unwrap();
    // One CqError event, however many completions were lost.
    assert_eq!(
        f.hca.poll_async_event(),
        Some(AsyncEvent::CqError { cq: small })
    );
    assert_eq!(f.hca.poll_async_event(), None);
    let attr = f.hca.query_cq(small).unwrap();
    assert!(attr.overrun);
    assert_eq!(attr.len, 1);
    // The completion queued before the overrun is still delivered, then the error shows.
    let wcs = f.hca.poll_cq(small, 10).unwrap();
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].wr_id, 0);
    assert_eq!(f.hca.poll_cq(small, 10), Err(CqError::Overrun(small)));
    // Later completions are refused too.
    let qp2 = f
        .hca
        .create_qp(f.pd, &QpInitAttr::new(QpType::Rc, small, CAP))
        .unwrap();
    f.bring_to(qp2, QpState::Err);
    f.hca.post_recv(qp2, &[RecvWr::new(9, vec![])]).unwrap();
    assert_eq!(f.hca.poll_cq(small, 10), Err(CqError::Overrun(small)));
    assert_eq!(f.hca.poll_async_event(), None);
}

#[test]
fn resize_cq_keeps_completions_and_refuses_too_small() {
    let mut f = Fixture::new();
    let cq = f.hca.create_cq(3).unwrap();
    let qpn = f
        .hca
        .create_qp(f.pd, &QpInitAttr::new(QpType::Rc, cq, CAP))
        .unwrap();
    f.bring_to(qpn, QpState::Err);
    let wrs: Vec<_> = (0..3).map(|i| RecvWr::new(i, vec![])).collect();
    f.hca.post_recv(qpn, &wrs).unwrap();
    assert_eq!(f.hca.query_cq(cq).unwrap().len, 3);
    // Capacity 1 cannot hold the 3 queued completions.
    assert_eq!(
        f.hca.resize_cq(cq, 1),
        Err(ResizeCqError::TooSmall { cqe: 1, queued: 3 })
    );
    assert_eq!(
        f.hca.resize_cq(cq, 0),
        Err(ResizeCqError::InvalidCqe {
            cqe: 0,
            max: 4_194_303
        })
    );
    assert_eq!(f.hca.resize_cq(cq, 100), Ok(127));
    assert_eq!(f.hca.query_cq(cq).unwrap().cqe, 127);
    let ids: Vec<_> = f
        .hca
        .poll_cq(cq, 10)
        .unwrap()
        .iter()
        .map(|w| w.wr_id)
        .collect();
    assert_eq!(ids, vec![0, 1, 2]);
    assert_eq!(f.hca.resize_cq(cq, 1), Ok(1));
}

#[test]
fn cq_rounding_and_limits() {
    let mut config = HcaConfig::new(1);
    config.device.max_cq = 2;
    let mut hca = Hca::new(config);
    assert_eq!(
        hca.create_cq(0),
        Err(CreateCqError::InvalidCqe {
            cqe: 0,
            max: 4_194_303
        })
    );
    assert_eq!(
        hca.create_cq(4_194_304),
        Err(CreateCqError::InvalidCqe {
            cqe: 4_194_304,
            max: 4_194_303
        })
    );
    let a = hca.create_cq(10).unwrap();
    assert_eq!(hca.query_cq(a).unwrap().cqe, 15);
    // What libfabric's ofi_rxm asks for, and the largest.
    let b = hca.create_cq(262_144).unwrap();
    assert_eq!(hca.query_cq(b).unwrap().cqe, 524_287);
    assert_eq!(hca.resize_cq(b, 4_194_303), Ok(4_194_303));
    assert_eq!(hca.create_cq(1), Err(CreateCqError::TooManyCqs { max: 2 }));
}

#[test]
fn poll_variants() {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Rc);
    f.bring_to(qpn, QpState::Err);
    let wrs: Vec<_> = (0..5).map(|i| RecvWr::new(i, vec![])).collect();
    f.hca.post_recv(qpn, &wrs).unwrap();
    assert_eq!(f.hca.poll_cq(f.cq, 0).unwrap().len(), 0);
    let two = f.hca.poll_cq(f.cq, 2).unwrap();
    assert_eq!(two.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![0, 1]);
    let mut buf = [crate::verbs::cq::WorkCompletion::default(); 2];
    assert_eq!(f.hca.poll_cq_into(f.cq, &mut buf), Ok(2));
    assert_eq!((buf[0].wr_id, buf[1].wr_id), (2, 3));
    assert_eq!(f.hca.poll_cq_into(f.cq, &mut buf), Ok(1));
    assert_eq!(buf[0].wr_id, 4);
    assert_eq!(f.hca.poll_cq_into(f.cq, &mut buf), Ok(0));
}

#[test]
fn completion_events_follow_req_notify() {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Rc);
    f.bring_to(qpn, QpState::Err);
    // Not armed: no event.
    f.hca.post_recv(qpn, &[RecvWr::new(1, vec![])]).unwrap();
    assert_eq!(f.hca.poll_completion_event(), None);
    f.hca.req_notify_cq(f.cq, false).unwrap();
    assert_eq!(
        f.hca.query_cq(f.cq).unwrap().notify,
        Some(CqNotify::NextCompletion)
    );
    f.hca
        .post_recv(qpn, &[RecvWr::new(2, vec![]), RecvWr::new(3, vec![])])
        .unwrap();
    // One event for the arming, not one per completion.
    assert_eq!(f.hca.poll_completion_event(), Some(f.cq));
    assert_eq!(f.hca.poll_completion_event(), None);
    // Solicited-only requests fire on completions in error.
    f.hca.req_notify_cq(f.cq, true).unwrap();
    f.hca.post_recv(qpn, &[RecvWr::new(4, vec![])]).unwrap();
    assert_eq!(f.hca.poll_completion_event(), Some(f.cq));
    assert_eq!(f.drain().len(), 4);
}

#[test]
fn mr_lifecycle_and_application_access() {
    let mut f = Fixture::new();
    let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mr = f.hca.reg_mr(f.pd, vec![0; 32], rw, None).unwrap();
    assert_eq!(f.hca.query_mr(mr.handle), Ok(mr));
    f.hca.mr_write(mr.handle, 4, b"abcd").unwrap();
    let mut buf = [0u8; 6];
    f.hca.mr_read(mr.handle, 3, &mut buf).unwrap();
    assert_eq!(&buf, b"\0abcd\0");
    assert_eq!(
        f.hca.mr_write(mr.handle, 30, b"abc"),
        Err(MrAccessError::OutOfBounds {
            offset: 30,
            len: 3,
            mr_len: 32
        })
    );
    assert!(f.hca.mr_read(mr.handle, usize::MAX, &mut buf).is_err());
    f.hca.mr_bytes_mut(mr.handle).unwrap()[0] = 9;
    assert_eq!(f.hca.mr_bytes(mr.handle).unwrap()[0], 9);

    // The data path's checks, through the HCA, and the bytes they grant.
    let s = f
        .hca
        .check_remote(f.pd, mr.rkey, mr.addr + 4, 4, AccessFlags::REMOTE_WRITE)
        .unwrap();
    assert_eq!(f.hca.mr_slice(&s).unwrap(), b"abcd");
    f.hca.mr_slice_mut(&s).unwrap().copy_from_slice(b"wxyz");
    f.hca.mr_read(mr.handle, 4, &mut buf[..4]).unwrap();
    assert_eq!(&buf[..4], b"wxyz");
    assert!(matches!(
        f.hca
            .check_remote(f.pd, mr.rkey, mr.addr, 4, AccessFlags::REMOTE_READ),
        Err(MrCheckError::AccessDenied { .. })
    ));
    let pd2 = f.hca.alloc_pd().unwrap();
    assert_eq!(
        f.hca
            .check_local(pd2, mr.lkey, mr.addr, 4, AccessFlags::LOCAL_WRITE),
        Err(MrCheckError::PdMismatch { key: mr.lkey })
    );

    f.hca.dereg_mr(mr.handle).unwrap();
    assert_eq!(
        f.hca.dereg_mr(mr.handle),
        Err(DeregMrError::NoSuchMr(mr.handle))
    );
    assert_eq!(
        f.hca.mr_bytes(mr.handle),
        Err(MrAccessError::NoSuchMr(mr.handle))
    );
    assert_eq!(f.hca.mr_slice(&s), None);
    assert_eq!(
        f.hca
            .check_local(f.pd, mr.lkey, mr.addr, 4, AccessFlags::empty()),
        Err(MrCheckError::InvalidKey { key: mr.lkey })
    );
}

#[test]
fn reg_mr_errors() {
    let mut config = HcaConfig::new(1);
    config.device.max_mr = 1;
    config.device.max_mr_size = 16;
    let mut f = Fixture::with_config(config);
    assert_eq!(
        f.hca
            .reg_mr(f.pd, vec![0; 4], AccessFlags::REMOTE_ATOMIC, None),
        Err(RegMrError::InvalidAccess(AccessFlags::REMOTE_ATOMIC))
    );
    assert_eq!(
        f.hca.reg_mr(f.pd, vec![0; 17], AccessFlags::empty(), None),
        Err(RegMrError::TooLarge { len: 17, max: 16 })
    );
    assert_eq!(
        f.hca
            .reg_mr(f.pd, vec![0; 4], AccessFlags::empty(), Some(u64::MAX - 1)),
        Err(RegMrError::AddressOverflow {
            addr: u64::MAX - 1,
            len: 4
        })
    );
    f.hca
        .reg_mr(f.pd, vec![0; 4], AccessFlags::empty(), None)
        .unwrap();
    assert_eq!(
        f.hca.reg_mr(f.pd, vec![0; 4], AccessFlags::empty(), None),
        Err(RegMrError::TooManyMrs { max: 1 })
    );
}

#[test]
fn srq_attributes_and_limit_event() {
    let mut f = Fixture::new();
    assert_eq!(
        f.hca.create_srq(f.pd, &SrqInitAttr { max_wr: 0, ..SRQ }),
        Err(CreateSrqError::InvalidMaxWr {
            max_wr: 0,
            max: 1 << 20
        })
    );
    assert_eq!(
        f.hca.create_srq(f.pd, &SrqInitAttr { max_sge: 28, ..SRQ }),
        Err(CreateSrqError::InvalidMaxSge {
            max_sge: 28,
            max: 27
        })
    );
    // The initial limit is ignored.
    let srq = f
        .hca
        .create_srq(
            f.pd,
            &SrqInitAttr {
                srq_limit: 3,
                ..SRQ
            },
        )
        .unwrap();
    assert_eq!(
        f.hca.query_srq(srq),
        Ok(SrqAttr {
            max_wr: 4,
            max_sge: 2,
            srq_limit: 0
        })
    );
    let wrs: Vec<_> = (0..4).map(|i| RecvWr::new(i, vec![])).collect();
    f.hca.post_srq_recv(srq, &wrs[..3]).unwrap();
    assert_eq!(
        f.hca.post_srq_recv(srq, &wrs[..2]),
        Err(PostSrqRecvError::QueueFull {
            index: 1,
            max_wr: 4
        })
    );
    assert_eq!(
        f.hca
            .post_srq_recv(srq, &[RecvWr::new(9, vec![Sge::default(); 3])]),
        Err(PostSrqRecvError::TooManySge {
            index: 0,
            num_sge: 3,
            max: 2
        })
    );
    // Modify: limit above max_wr, shrink below the posted count, invalid size.
    let set = |limit, max_wr| SrqAttr {
        max_wr,
        max_sge: 0,
        srq_limit: limit,
    };
    assert_eq!(
        f.hca.modify_srq(srq, &set(5, 0), SrqAttrMask::LIMIT),
        Err(ModifySrqError::LimitTooLarge {
            limit: 5,
            max_wr: 4
        })
    );
    assert_eq!(
        f.hca.modify_srq(srq, &set(0, 2), SrqAttrMask::MAX_WR),
        Err(ModifySrqError::MaxWrBelowOutstanding {
            max_wr: 2,
            outstanding: 3
        })
    );
    assert_eq!(
        f.hca.modify_srq(srq, &set(0, 0), SrqAttrMask::MAX_WR),
        Err(ModifySrqError::InvalidMaxWr {
            max_wr: 0,
            max: 1 << 20
        })
    );
    f.hca
        .modify_srq(srq, &set(2, 8), SrqAttrMask::MAX_WR | SrqAttrMask::LIMIT)
        .unwrap();
    assert_eq!(f.hca.query_srq(srq).unwrap().srq_limit, 2);
    assert_eq!(f.hca.query_srq(srq).unwrap().max_wr, 8);
    // A QP on the SRQ consumes WQEs: 3 -> 2 (not below 2), 2 -> 1 (fires).
    let init = QpInitAttr {
        srq: Some(srq),
        ..QpInitAttr::new(QpType::Rc, f.cq, CAP)
    };
    let qpn = f.hca.create_qp(f.pd, &init).unwrap();
    assert_eq!(f.hca.take_recv_wqe(qpn).unwrap().wr_id, 0);
    assert_eq!(f.hca.poll_async_event(), None);
    assert_eq!(f.hca.take_recv_wqe(qpn).unwrap().wr_id, 1);
    assert_eq!(
        f.hca.poll_async_event(),
        Some(AsyncEvent::SrqLimitReached { srq })
    );
    assert_eq!(f.hca.query_srq(srq).unwrap().srq_limit, 0);
    assert_eq!(f.hca.take_recv_wqe(qpn).unwrap().wr_id, 2);
    assert_eq!(f.hca.poll_async_event(), None);
}

#[test]
fn address_handles() {
    let mut f = Fixture::new();
    let gid = Gid::from_ipv4([10, 0, 0, 3]);
    let av = crate::verbs::ah::AhAttr::global(1, gid, 0);
    let ah = f.hca.create_ah(f.pd, &av).unwrap();
    assert_eq!(f.hca.query_ah(ah), Ok(av));
    assert_eq!(
        f.hca
            .create_ah(f.pd, &crate::verbs::ah::AhAttr::local(1, 7)),
        Err(CreateAhError::InvalidAttr(AhAttrError::GrhRequired {
            port: 1
        }))
    );
    f.hca.destroy_ah(ah).unwrap();
    assert_eq!(f.hca.destroy_ah(ah), Err(AhError::NoSuchAh(ah)));
    assert_eq!(f.hca.query_ah(ah), Err(AhError::NoSuchAh(ah)));
    // LID-routed AHs are fine on a native IB port.
    let mut f = Fixture::with_config(HcaConfig::infiniband(5));
    f.hca
        .create_ah(f.pd, &crate::verbs::ah::AhAttr::local(1, 7))
        .unwrap();
    let mut config = HcaConfig::new(1);
    config.device.max_ah = 0;
    let mut f = Fixture::with_config(config);
    assert_eq!(
        f.hca.create_ah(f.pd, &av),
        Err(CreateAhError::TooManyAhs { max: 0 })
    );
}
