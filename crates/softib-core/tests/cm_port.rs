//! The CM agent on QP1 of two HCAs (the UD test Ethernet): REQ, REP and RTU travel as UD SENDs
//! to QP1 with the GSI Q_Key, the sender's GID is recovered from the network header, and a
//! lost REQ frame is resent on time.

mod ud_common;

use std::time::Duration;

use softib_core::cm::{AcceptParams, CmConfig, CmEvent, CmPort, ConnectParams, State};
use softib_core::time::Instant;
use softib_wire::{Psn, Qpn};
use ud_common::{Net, BTH_AT};

fn port(net: &mut Net, node: usize, first_comm_id: u32) -> CmPort {
    let n = &mut net.nodes[node];
    let cfg = CmConfig {
        cm_response_timeout: 10,
        max_cm_retries: 3,
        packet_lifetime: Duration::from_micros(10),
        ..CmConfig::new(n.gid, 0x1000 + node as u64, first_comm_id)
    };
    CmPort::new(&mut n.hca, n.pd, 1, n.sgid_index, cfg).unwrap()
}

/// Polls both ports and moves frames until nothing moves; returns the events.
fn settle(net: &mut Net, ports: &mut [CmPort; 2]) -> [Vec<CmEvent>; 2] {
    let mut ev: [Vec<CmEvent>; 2] = [vec![], vec![]];
    for _ in 0..100 {
        for (i, p) in ports.iter_mut().enumerate() {
            p.poll(&mut net.nodes[i].hca, net.now);
        }
        let before = net.wire.len();
        net.run();
        for (i, p) in ports.iter_mut().enumerate() {
            p.poll(&mut net.nodes[i].hca, net.now);
            while let Some(e) = p.agent().poll_event() {
                ev[i].push(e);
            }
        }
        if net.wire.len() == before {
            return ev;
        }
    }
    panic!("never settled");
}

fn params(peer: softib_core::cm::Gid) -> ConnectParams {
    ConnectParams {
        private_data: b"over QP1".to_vec(),
        ..ConnectParams::rc(
            0x0000_0000_0106_1c06,
            peer,
            Qpn::new(0x1234),
            Psn::new(0x42),
        )
    }
}

#[test]
fn connect_over_qp1() {
    let mut net = Net::new(2);
    let mut ports = [port(&mut net, 0, 10), port(&mut net, 1, 20)];
    ports[1].agent().listen(0x0000_0000_0106_1c06).unwrap();
    let peer = net.nodes[1].gid;
    let ia = ports[0].agent().connect(net.now, &params(peer)).unwrap();
    let ev = settle(&mut net, &mut ports);
    let [CmEvent::ConnectRequest {
        id: ib,
        peer: from,
        req,
        ..
    }] = &ev[1][..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(*from, net.nodes[0].gid, "the REQ's sender");
    assert_eq!(
        (req.local_qpn, &req.private_data[..8]),
        (Qpn::new(0x1234), &b"over QP1"[..])
    );
    let ib = *ib;
    // Every frame so far: a UD SEND_ONLY to QP1 with the GSI Q_Key.
    for (_, f) in &net.wire {
        assert_eq!(f[BTH_AT], 0x64, "UD SEND_ONLY");
        assert_eq!(f[BTH_AT + 5..BTH_AT + 8], [0, 0, 1], "to QP1");
        assert_eq!(
            f[BTH_AT + 12..BTH_AT + 16],
            [0x80, 0x01, 0x00, 0x00],
            "GSI Q_Key"
        );
    }
    let accept = AcceptParams {
        qpn: Qpn::new(0x5678),
        starting_psn: Psn::new(0x99),
        ..AcceptParams::default()
    };
    ports[1].agent().accept(net.now, ib, &accept).unwrap();
    let ev = settle(&mut net, &mut ports);
    let [CmEvent::ConnectReply { id, rep }] = &ev[0][..] else {
        panic!("{ev:?}")
    };
    assert_eq!((*id, rep.local_qpn), (ia, Qpn::new(0x5678)));
    ports[0].agent().establish(ia, b"").unwrap();
    let ev = settle(&mut net, &mut ports);
    assert_eq!(ev[0], [CmEvent::Established { id: ia }]);
    assert_eq!(ev[1], [CmEvent::Established { id: ib }]);
    assert_eq!(net.wire.len(), 3, "REQ, REP, RTU");
}

#[test]
fn lost_req_frame_is_resent_on_time() {
    let mut net = Net::new(2);
    let mut ports = [port(&mut net, 0, 10), port(&mut net, 1, 20)];
    ports[1].agent().listen(0x0000_0000_0106_1c06).unwrap();
    let mut first = true;
    net.filter = Box::new(move |_| {
        let copies = if first { 0 } else { 1 };
        first = false;
        copies
    });
    let peer = net.nodes[1].gid;
    let ia = ports[0].agent().connect(net.now, &params(peer)).unwrap();
    let ev = settle(&mut net, &mut ports);
    assert!(ev[1].is_empty(), "the REQ was lost");
    let due = ports[0].poll_timeout().unwrap();
    assert!(due > Instant::ZERO);
    net.now = due;
    let ev = settle(&mut net, &mut ports);
    assert!(
        matches!(&ev[1][..], [CmEvent::ConnectRequest { .. }]),
        "{ev:?}"
    );
    assert_eq!(ports[0].agent().state(ia), Some(State::ReqSent));
    assert_eq!(net.wire.len(), 2);
}
