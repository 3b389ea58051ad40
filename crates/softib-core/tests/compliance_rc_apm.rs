//! Automatic path migration of RC QPs (IBA 9.7.6.1.3 o9-82, 9.7.6.1.4 o9-86, and 17.2.8's
//! migration states). Each side has a primary path (10.0.0.n, GID 1) and an alternate one
//! (10.0.1.n, GID 2); a filter breaks the primary path. The o9-82 and o9-86 scenarios also run
//! between an XRC initiator and an XRC target (`o9_82_xrc_...`, `o9_86_xrc_...`) and between
//! two RD QPs whose EE contexts hold the paths and migrate (`o9_82_rd_...`, `o9_86_rd_...`).

mod common;

use common::{alt_gid, Dir, Pair, Svc};
use softib_core::error::ModifyQpError;
use softib_core::setup::ConnectOptions;
use softib_core::verbs::ah::AhAttr;
use softib_core::verbs::event::AsyncEvent;
use softib_core::verbs::qp::{QpAttr, QpAttrMask};
use softib_core::verbs::types::{PathMigState, WcStatus};
use softib_core::verbs::wr::{RemoteAddr, SendWr, WrOpcode};
use softib_wire::roce::{IpHeader, RocePacket};

const A_IP: [u8; 4] = [10, 0, 0, 1];
const B_IP: [u8; 4] = [10, 0, 0, 2];

fn pair(svc: Svc, timeout: u8, retry_cnt: u8) -> Pair {
    Pair::new_svc(
        svc,
        100,
        200,
        ConnectOptions {
            timeout,
            retry_cnt,
            ..ConnectOptions::default()
        },
    )
}

/// Loads the alternate path (towards the peer's alternate GID) and asks for re-arming.
fn arm(p: &mut Pair) {
    for (side, peer_ip) in [(&mut p.a, B_IP), (&mut p.b, A_IP)] {
        let attr = QpAttr {
            alt_ah_attr: AhAttr::global(1, alt_gid(peer_ip), 2),
            alt_port_num: 1,
            alt_pkey_index: 0,
            alt_timeout: 12,
            path_mig_state: PathMigState::Rearm,
            ..QpAttr::default()
        };
        side.modify_conn(&attr, QpAttrMask::ALT_PATH | QpAttrMask::PATH_MIG_STATE)
            .unwrap();
    }
}

fn mig_state(p: &Pair, dir: Dir) -> PathMigState {
    let s = if dir == Dir::AtoB { &p.a } else { &p.b };
    s.conn_attr().path_mig_state
}

/// Third octet of the source address of a frame: 0 on the primary path, 1 on the alternate.
fn path_of(frame: &[u8]) -> u8 {
    match RocePacket::parse(frame).unwrap().ip {
        IpHeader::V4(v4) => v4.src[2],
        IpHeader::V6(_) => panic!("IPv4 expected"),
    }
}

fn mig_req(frame: &[u8]) -> bool {
    RocePacket::parse(frame)
        .unwrap()
        .transport
        .headers
        .bth
        .mig_req
}

/// Drops every frame on the primary path (10.0.0.x).
fn break_primary(p: &mut Pair) {
    p.filter = Box::new(|_, f| path_of(f) != 0);
}

/// The path-migrated event of the side sending `dir`: its QP's, or on RD its EE context's.
fn migrated(p: &Pair, dir: Dir) -> AsyncEvent {
    let s = if dir == Dir::AtoB { &p.a } else { &p.b };
    match s.eecn {
        Some(eecn) => AsyncEvent::EecPathMigrated { eecn },
        None => AsyncEvent::PathMigrated { qpn: s.qpn },
    }
}

fn events(p: &mut Pair, dir: Dir) -> Vec<AsyncEvent> {
    let s = if dir == Dir::AtoB { &mut p.a } else { &mut p.b };
    std::iter::from_fn(|| s.hca.poll_async_event()).collect()
}

fn send(p: &mut Pair, len: u32) {
    p.recv_b(1, 0, 8192);
    let sge = p.sge_a(0, len);
    p.post_a(&[SendWr::new(7, WrOpcode::Send)
        .with_sg_list(vec![sge])
        .signaled()]);
}

#[test]
fn o9_86_timeouts_exhausting_the_retry_count_migrate_to_the_armed_path() {
    o9_86_timeouts_case(Svc::Rc);
}

#[test]
fn o9_86_xrc_timeouts_exhausting_the_retry_count_migrate_to_the_armed_path() {
    o9_86_timeouts_case(Svc::Xrc);
}

#[test]
fn o9_86_rd_timeouts_exhausting_the_retry_count_migrate_to_the_armed_path() {
    o9_86_timeouts_case(Svc::Rd);
}

fn o9_86_timeouts_case(svc: Svc) {
    let mut p = pair(svc, 10, 2);
    arm(&mut p);
    assert_eq!(mig_state(&p, Dir::AtoB), PathMigState::Armed);
    assert_eq!(mig_state(&p, Dir::BtoA), PathMigState::Armed);
    break_primary(&mut p);
    let mut sent_primary = 0;
    let mut tap = Vec::new();
    send(&mut p, 100);
    // Count what A tries on the primary path before migrating: 1 + retry_cnt transmissions.
    let mut buf = Vec::new();
    loop {
        while p.a.hca.poll_transmit(p.now, &mut buf) {
            if path_of(&buf) == 0 {
                sent_primary += 1;
                assert!(!mig_req(&buf), "an armed QP sends MigReq = 0");
            } else {
                tap.push(buf.clone());
                p.b.hca.handle_frame(p.now, &buf);
            }
        }
        if !tap.is_empty() {
            break;
        }
        let t = p.a.hca.poll_timeout().expect("the transport timer runs");
        p.now = t;
        p.a.hca.handle_timeout(t);
    }
    assert_eq!(
        sent_primary, 3,
        "first try and retry_cnt = 2 retries on the primary path"
    );
    assert!(
        mig_req(&tap[0]),
        "the first packet on the new path asks for migration"
    );
    assert_eq!(events(&mut p, Dir::AtoB), vec![migrated(&p, Dir::AtoB)]);
    p.run(10_000_000_000);
    assert_eq!(p.a.done(), vec![(7, WcStatus::Success)]);
    assert_eq!(p.b.done(), vec![(1, WcStatus::Success)]);
    // The responder followed the migration request and answers on its new path.
    assert_eq!(events(&mut p, Dir::BtoA), vec![migrated(&p, Dir::BtoA)]);
    for d in [Dir::AtoB, Dir::BtoA] {
        assert_eq!(mig_state(&p, d), PathMigState::Migrated);
    }
    let qa = p.a.conn_attr();
    assert_eq!(qa.ah_attr.grh.unwrap().dgid, alt_gid(B_IP));
    assert_eq!(qa.timeout, 12, "the alternate path's timeout came along");
    assert!(p.log.iter().all(|(_, f)| path_of(f) == 1 && mig_req(f)));
    assert_eq!(p.a.hca.counters().path_migrations, 1);
}

#[test]
fn o9_82_sequence_naks_exhausting_the_retry_count_migrate_to_the_armed_path() {
    o9_82_case(Svc::Rc);
}

#[test]
fn o9_82_xrc_sequence_naks_exhausting_the_retry_count_migrate_to_the_armed_path() {
    o9_82_case(Svc::Xrc);
}

#[test]
fn o9_82_rd_sequence_naks_exhausting_the_retry_count_migrate_to_the_armed_path() {
    o9_82_case(Svc::Rd);
}

fn o9_82_case(svc: Svc) {
    // Transport timer off: only NAKs drive the retries. The primary path loses every first
    // packet of the message, so B answers the second one with a sequence NAK; with a retry
    // count of 0 that NAK exhausts the counter at once (a repeated NAK for the PSN being
    // resent is not counted again, see c9_137 in compliance_rc_requester.rs).
    let mut p = pair(svc, 0, 0);
    arm(&mut p);
    p.filter = Box::new(move |d, f| {
        let first = RocePacket::parse(f)
            .unwrap()
            .transport
            .headers
            .bth
            .psn
            .value()
            == 100;
        !(d == Dir::AtoB && path_of(f) == 0 && first)
    });
    // An RDMA WRITE of two packets (a SEND would wait for credits after its first packet).
    let wr = SendWr::new(
        7,
        WrOpcode::RdmaWrite {
            remote: RemoteAddr {
                addr: p.b.mr.addr,
                rkey: p.b.mr.rkey,
            },
        },
    )
    .with_sg_list(vec![p.sge_a(0, 2000)])
    .signaled();
    p.post_a(&[wr]);
    p.run(10_000_000_000);
    assert_eq!(p.a.done(), vec![(7, WcStatus::Success)]);
    assert_eq!(events(&mut p, Dir::AtoB), vec![migrated(&p, Dir::AtoB)]);
    assert_eq!(
        p.a.hca.counters().retry_timeouts,
        0,
        "no timer was involved"
    );
    assert_eq!(
        p.a.hca.counters().retry_naks,
        1,
        "the retry after the migration"
    );
    assert_eq!(p.a.hca.counters().path_migrations, 1);
    assert_eq!(mig_state(&p, Dir::AtoB), PathMigState::Migrated);
}

#[test]
fn o9_86_still_failing_after_migration_is_a_locally_detected_error() {
    o9_86_failing_case(Svc::Rc);
}

#[test]
fn o9_86_xrc_still_failing_after_migration_is_a_locally_detected_error() {
    o9_86_failing_case(Svc::Xrc);
}

#[test]
fn o9_86_rd_still_failing_after_migration_is_a_locally_detected_error() {
    o9_86_failing_case(Svc::Rd);
}

fn o9_86_failing_case(svc: Svc) {
    let mut p = pair(svc, 10, 1);
    arm(&mut p);
    p.filter = Box::new(|_, _| false);
    send(&mut p, 100);
    p.run(10_000_000_000);
    assert_eq!(p.a.done(), vec![(7, WcStatus::RetryExcErr)]);
    assert_eq!(p.a.hca.counters().path_migrations, 1);
    assert_eq!(p.a.hca.counters().retry_exceeded, 1);
}

#[test]
fn without_an_armed_path_exhaustion_is_an_error_and_nothing_migrates() {
    let mut p = pair(Svc::Rc, 10, 1);
    break_primary(&mut p);
    send(&mut p, 100);
    p.run(10_000_000_000);
    assert_eq!(p.a.done(), vec![(7, WcStatus::RetryExcErr)]);
    assert_eq!(p.a.hca.counters().path_migrations, 0);
}

#[test]
fn migrated_qps_send_mig_req_one_and_armed_ones_zero() {
    let mut p = pair(Svc::Rc, 14, 7);
    send(&mut p, 10);
    p.run(1_000_000_000);
    assert!(
        p.log.iter().all(|(_, f)| mig_req(f)),
        "Migrated is the start state"
    );
    arm(&mut p);
    p.log.clear();
    send(&mut p, 10);
    p.run(1_000_000_000);
    assert!(!p.log.is_empty());
    assert!(p.log.iter().all(|(_, f)| !mig_req(f) && path_of(f) == 0));
}

#[test]
fn an_armed_responder_ignores_alternate_path_packets_without_mig_req() {
    // A packet on B's alternate path while B is armed but A has not migrated (MigReq = 0) is
    // not from B's connection: dropped.
    let mut p = pair(Svc::Rc, 14, 7);
    arm(&mut p);
    // Software migrates A without telling B; A's packets then carry MigReq = 1, so to test
    // the MigReq = 0 case, clear it by re-arming A on the swapped paths after migrating.
    let to_migrated = QpAttr {
        path_mig_state: PathMigState::Migrated,
        ..QpAttr::default()
    };
    p.a.hca
        .modify_qp(p.a.qpn, &to_migrated, QpAttrMask::PATH_MIG_STATE)
        .unwrap();
    let rearm = QpAttr {
        path_mig_state: PathMigState::Rearm,
        ..QpAttr::default()
    };
    p.a.hca
        .modify_qp(p.a.qpn, &rearm, QpAttrMask::PATH_MIG_STATE)
        .unwrap();
    send(&mut p, 10);
    let mut buf = Vec::new();
    assert!(p.a.hca.poll_transmit(p.now, &mut buf));
    assert_eq!((path_of(&buf), mig_req(&buf)), (1, false));
    let before = p.b.hca.counters().bad_address;
    p.b.hca.handle_frame(p.now, &buf);
    assert_eq!(p.b.hca.counters().bad_address, before + 1);
    assert_eq!(mig_state(&p, Dir::BtoA), PathMigState::Armed);
}

#[test]
fn software_migration_swaps_the_paths_at_once() {
    let mut p = pair(Svc::Rc, 14, 7);
    arm(&mut p);
    let attr = QpAttr {
        path_mig_state: PathMigState::Migrated,
        ..QpAttr::default()
    };
    p.a.hca
        .modify_qp(p.a.qpn, &attr, QpAttrMask::PATH_MIG_STATE)
        .unwrap();
    let qa = p.a.hca.query_qp(p.a.qpn).unwrap();
    assert_eq!(qa.path_mig_state, PathMigState::Migrated);
    assert_eq!(qa.ah_attr.grh.unwrap().dgid, alt_gid(B_IP));
    assert_eq!(
        qa.alt_ah_attr.grh.unwrap().dgid,
        softib_core::gid_of_ipv4(B_IP),
        "the old primary is the alternate now"
    );
    // The first packet on the new path carries MigReq = 1 and B follows.
    send(&mut p, 10);
    p.run(1_000_000_000);
    assert_eq!(p.a.done(), vec![(7, WcStatus::Success)]);
    assert_eq!(mig_state(&p, Dir::BtoA), PathMigState::Migrated);
    assert!(
        events(&mut p, Dir::AtoB).is_empty(),
        "no event for a requested migration"
    );
    assert_eq!(events(&mut p, Dir::BtoA), vec![migrated(&p, Dir::BtoA)]);
}

#[test]
fn rearming_needs_an_alternate_path() {
    let mut p = pair(Svc::Rc, 14, 7);
    let attr = QpAttr {
        path_mig_state: PathMigState::Rearm,
        ..QpAttr::default()
    };
    let e =
        p.a.hca
            .modify_qp(p.a.qpn, &attr, QpAttrMask::PATH_MIG_STATE)
            .unwrap_err();
    assert_eq!(
        e,
        ModifyQpError::NoAlternatePath {
            requested: PathMigState::Rearm
        }
    );
    assert_eq!(mig_state(&p, Dir::AtoB), PathMigState::Migrated);
}

#[test]
fn a_migrated_responder_checks_the_old_path_again_on_the_express_path() {
    // B's express path remembers the connection of the last packet it took; B's paths then
    // swap (a migration B's software asks for): a packet from A's old primary path, once
    // taken there, is no longer from B's connection.
    let mut p = pair(Svc::Rc, 14, 7);
    arm(&mut p);
    let express = p.b.hca.counters().express_requests;
    send(&mut p, 10);
    p.run(1_000_000_000);
    assert_eq!(p.a.done(), vec![(7, WcStatus::Success)]);
    assert_eq!(
        p.b.hca.counters().express_requests,
        express + 1,
        "taken on the express path"
    );
    let to_migrated = QpAttr {
        path_mig_state: PathMigState::Migrated,
        ..QpAttr::default()
    };
    p.b.hca
        .modify_qp(p.b.qpn, &to_migrated, QpAttrMask::PATH_MIG_STATE)
        .unwrap();
    send(&mut p, 10);
    let mut buf = Vec::new();
    assert!(p.a.hca.poll_transmit(p.now, &mut buf));
    assert_eq!(path_of(&buf), 0, "A still sends on its primary path");
    let counts = |p: &Pair| {
        let c = p.b.hca.counters();
        (c.bad_address, c.express_requests)
    };
    let (bad, express) = counts(&p);
    p.b.hca.handle_frame(p.now, &buf);
    assert_eq!(counts(&p), (bad + 1, express));
}
