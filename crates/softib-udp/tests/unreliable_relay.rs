//! UC and UD between two softib devices over real UDP sockets, through a relay that drops 3 %
//! of the datagrams and reorders another 2 %: nothing is retried, so some messages are lost,
//! but every message that is delivered is intact and delivered once (UC drops a whole message
//! when one of its packets is missing or late; UD messages are single packets).

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use softib_core::setup::EndpointInfo;
use softib_core::verbs::ah::AhAttr;
use softib_core::verbs::types::{Mtu, QpType, WcFlags, WcOpcode, WcStatus};
use softib_core::verbs::wr::{RecvWr, SendWr, Sge, WrOpcode};
use softib_udp::endpoint::{Endpoint, EndpointConfig, UD_QKEY};
use softib_udp::relay::{Relay, RelayConfig, RelayStats};
use softib_udp::{Device, DeviceConfig, Transport};
use softib_wire::Psn;

/// Bytes of one receive slot (room for the 40-byte GRH area and the largest UC message).
const SLOT: usize = 4096;
/// Receive slots of B (and receives kept posted).
const SLOTS: usize = 128;
/// Messages A sends.
const MESSAGES: u64 = 1500;
/// Bytes ahead of a UD payload in the receive buffer.
const GRH: usize = 40;
/// Messages A may send beyond the last one B received.
const WINDOW: u64 = 8;
/// Quiet time after which A sends on regardless.
const GIVE_UP: Duration = Duration::from_millis(20);

fn unreliable_endpoint(
    bind: SocketAddr,
    qp_type: QpType,
    psn: u32,
    transport: Transport,
) -> Endpoint {
    let mut cfg = DeviceConfig::new(bind);
    cfg.active_mtu = Mtu::Mtu1024;
    cfg.transport = transport;
    let dev = Device::open(&cfg).expect("bind the RoCEv2 socket");
    let ecfg = EndpointConfig {
        qp_type,
        buf_len: SLOT * SLOTS,
        send_depth: 64,
        recv_depth: SLOTS as u32,
        max_inline: 0,
    };
    Endpoint::new(dev, &ecfg, Psn::new(psn)).unwrap()
}

/// Message `i`: its index in the first 8 bytes, then a pattern of the index.
fn message(i: u64, len: usize) -> Vec<u8> {
    let mut m = pattern(i, len.max(8));
    m[..8].copy_from_slice(&i.to_le_bytes());
    m
}

fn post_slot(b: &mut Endpoint, slot: usize) {
    let mr = b.mr;
    let wr = RecvWr::new(
        slot as u64,
        vec![Sge::new(
            mr.addr + (slot * SLOT) as u64,
            SLOT as u32,
            mr.lkey,
        )],
    );
    let qpn = b.qpn;
    b.dev.hca_mut().post_recv(qpn, &[wr]).unwrap();
}

/// Runs `MESSAGES` SENDs of `size_of(i)` bytes from A to B through a lossy relay and returns
/// the indices B received (each checked byte for byte) and the relay's statistics.
fn run(
    qp_type: QpType,
    net: u8,
    transport: Transport,
    size_of: impl Fn(u64) -> usize,
) -> (Vec<u64>, RelayStats) {
    let (a_addr, b_addr) = (addr(net, 1), addr(net, 2));
    let (side_a, side_b) = (addr(net, 3), addr(net, 4));
    let bind = match transport {
        Transport::Udp => Relay::bind,
        _ => Relay::bind_shm,
    };
    let mut relay = bind(
        side_a,
        a_addr,
        side_b,
        b_addr,
        RelayConfig {
            loss: 0.03,
            reorder: 0.02,
            seed: 0x5eed_00c0 + u64::from(net),
        },
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let relay_thread =
        std::thread::spawn(move || relay.run(&stop2, Duration::from_secs(120)).unwrap());

    let mut a = unreliable_endpoint(a_addr, qp_type, 0x00_0100, transport);
    let mut b = unreliable_endpoint(b_addr, qp_type, 0xff_fffa, transport);
    a.dev.add_route(b_addr.ip(), side_a);
    b.dev.add_route(a_addr.ip(), side_b);
    let (ia, ib): (EndpointInfo, EndpointInfo) = (a.info(), b.info());
    let o = options();
    a.connect(&ib, &o).unwrap();
    b.connect(&ia, &o).unwrap();
    let ah = (qp_type == QpType::Ud).then(|| {
        let pd = a.pd;
        a.dev
            .hca_mut()
            .create_ah(pd, &AhAttr::global(1, ib.gid, 0))
            .unwrap()
    });
    for slot in 0..SLOTS {
        post_slot(&mut b, slot);
    }
    let ud = qp_type == QpType::Ud;
    let (amr, bmr) = (a.mr, b.mr);
    let (mut posted, mut sent) = (0u64, 0u64);
    let mut got = Vec::new();
    // The next index past every message B received: A stays at most WINDOW messages ahead
    // of it (or moves on after a quiet GIVE_UP, the rest being lost), so no socket buffer on
    // the way overflows and every loss is the relay's or the protocol's.
    let mut next_expected = 0u64;
    let mut last_arrival = Instant::now();
    let start = Instant::now();
    loop {
        a.dev.poll_io().unwrap();
        b.dev.poll_io().unwrap();
        for wc in completions(&mut a) {
            assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Send));
            sent += 1;
        }
        for wc in completions(&mut b) {
            assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Recv));
            let slot = wc.wr_id as usize;
            let at = slot * SLOT + if ud { GRH } else { 0 };
            let len = wc.byte_len as usize - if ud { GRH } else { 0 };
            assert_eq!(wc.wc_flags.contains(WcFlags::GRH), ud);
            let bytes = b.dev.hca().mr_bytes(bmr.handle).unwrap()[at..at + len].to_vec();
            let i = u64::from_le_bytes(bytes[..8].try_into().unwrap());
            assert!(i < MESSAGES, "message index {i}");
            assert_eq!(bytes, message(i, size_of(i)), "message {i} intact");
            got.push(i);
            next_expected = next_expected.max(i + 1);
            post_slot(&mut b, slot);
            last_arrival = Instant::now();
        }
        // One new message per round.
        let room = posted < next_expected + WINDOW || last_arrival.elapsed() > GIVE_UP;
        if posted < MESSAGES && posted - sent < 32 && room {
            let len = size_of(posted);
            let off = (posted as usize % 64) * SLOT;
            a.dev
                .hca_mut()
                .mr_write(amr.handle, off, &message(posted, len))
                .unwrap();
            let mut wr = SendWr::new(posted, WrOpcode::Send)
                .with_sge(Sge::new(amr.addr + off as u64, len as u32, amr.lkey))
                .signaled();
            if let Some(ah) = ah {
                wr = wr.with_ud(ah, ib.qpn, UD_QKEY);
            }
            let qpn = a.qpn;
            a.dev.hca_mut().post_send(qpn, &[wr]).unwrap();
            posted += 1;
            if posted >= next_expected + WINDOW {
                // Moving on after a quiet spell: restart the clock.
                last_arrival = Instant::now();
            }
        }
        // Done when everything went out and nothing arrived for a while.
        if sent == MESSAGES && last_arrival.elapsed() > Duration::from_millis(300) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no progress: sent {sent}, received {}",
            got.len()
        );
    }
    stop.store(true, Ordering::Relaxed);
    let rs = relay_thread.join().unwrap();
    let cb = *b.dev.hca().counters();
    assert_eq!(
        (
            cb.icrc_err,
            cb.malformed,
            cb.ud_no_recv_wqe,
            cb.uc_no_recv_wqe
        ),
        (0, 0, 0, 0),
        "B's receive queue never ran dry and nothing arrived damaged"
    );
    (got, rs)
}

fn check(got: &[u64], rs: &RelayStats, what: &str) {
    let mut sorted = got.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), got.len(), "{what}: a message delivered twice");
    assert!(rs.dropped > 0 && rs.reordered > 0, "{what}: {rs:?}");
    let lost = MESSAGES - got.len() as u64;
    eprintln!("{what}: {} delivered, {lost} lost; relay {rs:?}", got.len());
    assert!(
        lost > 0,
        "{what}: the relay dropped {} datagrams",
        rs.dropped
    );
    assert!(
        lost < MESSAGES / 4,
        "{what}: {lost} of {MESSAGES} lost with 3 % loss ({rs:?})"
    );
}

/// UD and UC, each over UDP and over shared memory (devices and relay with inboxes).
#[test]
fn ud_through_a_lossy_relay_delivers_intact_datagrams() {
    for (net, transport) in [(21, Transport::Udp), (23, Transport::Shm)] {
        // 8 .. 1024 bytes: every size up to the MTU, one packet each (C9-200).
        let (got, rs) = run(QpType::Ud, net, transport, |i| 8 + (i as usize * 37) % 1017);
        check(&got, &rs, &format!("UD over {transport}"));
        // One datagram per message: every datagram the relay forwarded was delivered.
        assert_eq!(got.len() as u64, rs.forwarded, "{rs:?}");
    }
}

#[test]
fn uc_through_a_lossy_relay_delivers_intact_messages() {
    for (net, transport) in [(22, Transport::Udp), (24, Transport::Shm)] {
        // 8 .. 3000 bytes: up to three packets per message at MTU 1024.
        let (got, rs) = run(QpType::Uc, net, transport, |i| {
            8 + (i as usize * 211) % 2993
        });
        check(&got, &rs, &format!("UC over {transport}"));
        // A multi-packet message survives only if all its packets arrive: some do.
        assert!(got.iter().any(|&i| 8 + (i as usize * 211) % 2993 > 2048));
    }
}
