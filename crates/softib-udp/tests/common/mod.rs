//! Shared set-up of the UDP integration tests: two devices on loopback addresses, connected
//! RC QPs, and a driver loop that progresses both.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use softib_core::setup::ConnectOptions;
use softib_core::verbs::cq::WorkCompletion;
use softib_core::verbs::types::{Mtu, QpType};
use softib_udp::endpoint::{Endpoint, EndpointConfig};
use softib_udp::{ClockChoice, Device, DeviceConfig};
use softib_wire::Psn;

pub fn addr(a: u8, b: u8) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, a, b)), 4791)
}

/// An RC endpoint over the kernel's UDP stack (no shared-memory inbox).
pub fn endpoint(bind: SocketAddr, psn: u32, buf_len: usize, pcap: Option<&str>) -> Endpoint {
    endpoint_on(bind, psn, buf_len, pcap, softib_udp::Transport::Udp)
}

/// An RC endpoint whose datagrams to same-host devices take `transport`.
pub fn endpoint_on(
    bind: SocketAddr,
    psn: u32,
    buf_len: usize,
    pcap: Option<&str>,
    transport: softib_udp::Transport,
) -> Endpoint {
    endpoint_with_clock(bind, psn, buf_len, pcap, transport, ClockChoice::Auto)
}

/// [`endpoint_on`] reading the given clock.
pub fn endpoint_with_clock(
    bind: SocketAddr,
    psn: u32,
    buf_len: usize,
    pcap: Option<&str>,
    transport: softib_udp::Transport,
    clock: ClockChoice,
) -> Endpoint {
    let mut cfg = DeviceConfig::new(bind);
    cfg.active_mtu = Mtu::Mtu1024;
    cfg.pcap = pcap.map(Into::into);
    cfg.transport = transport;
    cfg.clock = clock;
    let dev = Device::open(&cfg).expect("bind the RoCEv2 socket");
    let ecfg = EndpointConfig {
        qp_type: QpType::Rc,
        buf_len,
        send_depth: 128,
        recv_depth: 128,
        max_inline: 0,
    };
    Endpoint::new(dev, &ecfg, Psn::new(psn)).unwrap()
}

/// Short retransmission timer (4.096 µs × 2^12 ≈ 17 ms), 16 outstanding READ/atomics.
pub fn options() -> ConnectOptions {
    ConnectOptions {
        timeout: 12,
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
        path_mtu: Mtu::Mtu1024,
        ..ConnectOptions::default()
    }
}

pub fn connect(a: &mut Endpoint, b: &mut Endpoint) {
    let (ia, ib) = (a.info(), b.info());
    a.connect(&ib, &options()).unwrap();
    b.connect(&ia, &options()).unwrap();
}

/// Progresses both devices until `done` says so; panics after `limit`.
pub fn drive(
    a: &mut Endpoint,
    b: &mut Endpoint,
    limit: Duration,
    mut done: impl FnMut(&mut Endpoint, &mut Endpoint) -> bool,
) {
    let start = Instant::now();
    loop {
        a.dev.poll_io().unwrap();
        b.dev.poll_io().unwrap();
        if done(a, b) {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "no progress within {limit:?}: A {:?} {:?}, B {:?} {:?}",
            a.dev.stats(),
            a.dev.hca().counters(),
            b.dev.stats(),
            b.dev.hca().counters()
        );
    }
}

/// Takes every completion of `e`'s CQ.
pub fn completions(e: &mut Endpoint) -> Vec<WorkCompletion> {
    let cq = e.cq;
    e.dev.hca_mut().poll_cq(cq, 64).unwrap()
}

/// Deterministic test bytes.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
