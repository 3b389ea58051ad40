//! Two softib devices (127.0.1.1 and 127.0.1.2, port 4791) talk RC through a relay that drops
//! 1 % of the datagrams and reorders another 1 %, chosen by a seed: WRITE, READ, SEND and both
//! atomics complete successfully and every byte is checked. Once over UDP, once over shared
//! memory (devices and relay with inboxes, 127.0.8.x).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use softib_core::verbs::types::{WcOpcode, WcStatus};
use softib_core::verbs::wr::{RecvWr, RemoteAddr, SendWr, Sge, WrOpcode};
use softib_udp::relay::{Relay, RelayConfig};
use softib_udp::{ClockChoice, DeviceStats, Transport};

const SLOT: usize = 8192;
const SLOTS: usize = 64;

#[test]
fn rc_operations_complete_verified_under_one_percent_loss() {
    lossy_run(1, Transport::Udp, ClockChoice::Precise);
}

/// The same run on the coarse clock (what a device reads in a VM whose precise clock is
/// slow): every loss is recovered by timers that run a lag longer, over shared memory.
#[test]
fn rc_operations_complete_verified_under_one_percent_loss_on_the_coarse_clock() {
    let (a, b) = lossy_run(9, Transport::Shm, ClockChoice::Coarse);
    for s in [a, b] {
        assert_eq!(s.tx_shm, s.tx_datagrams, "{s:?}");
    }
}

/// The same run with the devices and the relay on shared memory: every datagram goes
/// through the inboxes (none over UDP), with the same faults.
#[test]
fn rc_operations_complete_verified_under_one_percent_loss_over_shm() {
    let (a, b) = lossy_run(8, Transport::Shm, ClockChoice::Precise);
    for s in [a, b] {
        assert!(s.tx_shm > 0 && s.rx_shm > 0, "{s:?}");
        assert_eq!(s.tx_shm, s.tx_datagrams, "{s:?}");
        assert_eq!(s.rx_shm, s.rx_datagrams - s.doorbells_received, "{s:?}");
        assert_eq!(s.tx_dropped, 0, "{s:?}");
    }
}

/// Every RC operation through a relay losing and reordering 1 % on 127.0.`net`.x; returns
/// both devices' runtime counters.
fn lossy_run(net: u8, transport: Transport, clock: ClockChoice) -> (DeviceStats, DeviceStats) {
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
            loss: 0.01,
            reorder: 0.01,
            seed: 0x5eed_0001,
        },
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let relay_thread =
        std::thread::spawn(move || relay.run(&stop2, Duration::from_secs(120)).unwrap());

    let mut a = endpoint_with_clock(a_addr, 0x00_1000, SLOT * SLOTS, None, transport, clock);
    let mut b = endpoint_with_clock(b_addr, 0xff_fff0, SLOT * SLOTS, None, transport, clock);
    a.dev.add_route(b_addr.ip(), side_a);
    b.dev.add_route(a_addr.ip(), side_b);
    connect(&mut a, &mut b);

    // Message sizes: tiny, unaligned, exactly one MTU, several MTUs.
    let sizes = [1usize, 61, 1024, 3000, 8192];
    let n_ops = 300u64;
    let size_of = |i: u64| sizes[(i % sizes.len() as u64) as usize];

    // ---- RDMA WRITE: A's slot i -> B's slot i, then B's bytes are checked.
    let (amr, bmr) = (a.mr, b.mr);
    run_requests(&mut a, &mut b, n_ops, 16, |a, _b, i| {
        let slot = (i as usize) % SLOTS;
        let len = size_of(i);
        let off = slot * SLOT;
        a.dev
            .hca_mut()
            .mr_write(amr.handle, off, &pattern(i, len))
            .unwrap();
        SendWr::new(
            i,
            WrOpcode::RdmaWrite {
                remote: RemoteAddr::new(bmr.addr + off as u64, bmr.rkey),
            },
        )
        .with_sge(Sge::new(amr.addr + off as u64, len as u32, amr.lkey))
        .signaled()
    });
    // The last SLOTS writes are the ones left in B's buffer.
    for i in n_ops - SLOTS as u64..n_ops {
        let slot = (i as usize) % SLOTS;
        let len = size_of(i);
        let got = &b.dev.hca().mr_bytes(bmr.handle).unwrap()[slot * SLOT..slot * SLOT + len];
        assert_eq!(got, &pattern(i, len)[..], "WRITE {i}");
    }

    // ---- RDMA READ: B's slots (written by B itself) -> A's slots.
    for slot in 0..SLOTS {
        let data = pattern(1_000 + slot as u64, SLOT);
        b.dev
            .hca_mut()
            .mr_write(bmr.handle, slot * SLOT, &data)
            .unwrap();
    }
    run_requests(&mut a, &mut b, SLOTS as u64, 16, |_a, _b, i| {
        let off = i as usize * SLOT;
        SendWr::new(
            i,
            WrOpcode::RdmaRead {
                remote: RemoteAddr::new(bmr.addr + off as u64, bmr.rkey),
            },
        )
        .with_sge(Sge::new(amr.addr + off as u64, SLOT as u32, amr.lkey))
        .signaled()
    });
    for slot in 0..SLOTS {
        let got = &a.dev.hca().mr_bytes(amr.handle).unwrap()[slot * SLOT..(slot + 1) * SLOT];
        assert_eq!(got, &pattern(1_000 + slot as u64, SLOT)[..], "READ {slot}");
    }

    // ---- SEND: B posts receives into its slots; message k lands in the k-th receive.
    for slot in 0..SLOTS {
        let rwr = RecvWr::new(
            slot as u64,
            vec![Sge::new(
                bmr.addr + (slot * SLOT) as u64,
                SLOT as u32,
                bmr.lkey,
            )],
        );
        b.dev.hca_mut().post_recv(b.qpn, &[rwr]).unwrap();
    }
    let mut received = 0u64;
    let mut recv_failures = Vec::new();
    run_requests_with(
        &mut a,
        &mut b,
        n_ops,
        16,
        |a, _b, i| {
            let off = ((i as usize) % SLOTS) * SLOT;
            let len = size_of(i);
            a.dev
                .hca_mut()
                .mr_write(amr.handle, off, &pattern(5_000 + i, len))
                .unwrap();
            SendWr::new(i, WrOpcode::Send)
                .with_sge(Sge::new(amr.addr + off as u64, len as u32, amr.lkey))
                .signaled()
        },
        |b| {
            for wc in completions(b) {
                assert_eq!(wc.status, WcStatus::Success, "receive {received}");
                assert_eq!(wc.opcode, WcOpcode::Recv);
                let slot = wc.wr_id as usize;
                let len = size_of(received);
                let got = &b.dev.hca().mr_bytes(bmr.handle).unwrap()
                    [slot * SLOT..slot * SLOT + wc.byte_len as usize];
                if wc.byte_len as usize != len || got != &pattern(5_000 + received, len)[..] {
                    recv_failures.push(received);
                }
                received += 1;
                let rwr = RecvWr::new(
                    slot as u64,
                    vec![Sge::new(
                        bmr.addr + (slot * SLOT) as u64,
                        SLOT as u32,
                        bmr.lkey,
                    )],
                );
                b.dev.hca_mut().post_recv(b.qpn, &[rwr]).unwrap();
            }
        },
    );
    drive(&mut a, &mut b, Duration::from_secs(30), |_a, b| {
        for wc in completions(b) {
            assert_eq!(wc.status, WcStatus::Success);
            received += 1;
        }
        received >= n_ops
    });
    assert_eq!(received, n_ops);
    assert!(recv_failures.is_empty(), "bad receives: {recv_failures:?}");

    // ---- Atomics: fetch-and-add i on B's counter, then a compare-and-swap chain.
    b.dev
        .hca_mut()
        .mr_write(bmr.handle, 0, &0u64.to_ne_bytes())
        .unwrap();
    let adds = 100u64;
    run_requests(&mut a, &mut b, adds, 1, |_a, _b, i| {
        SendWr::new(
            i,
            WrOpcode::AtomicFetchAdd {
                remote_addr: bmr.addr,
                rkey: bmr.rkey,
                add: i + 1,
            },
        )
        .with_sge(Sge::new(amr.addr + i * 8, 8, amr.lkey))
        .signaled()
    });
    // One outstanding at a time: the i-th FAA returned the sum of 1..=i.
    let amem = a.dev.hca().mr_bytes(amr.handle).unwrap().to_vec();
    for i in 0..adds {
        let got = u64::from_ne_bytes(
            amem[(i * 8) as usize..(i * 8 + 8) as usize]
                .try_into()
                .unwrap(),
        );
        assert_eq!(got, i * (i + 1) / 2, "FAA {i} original value");
    }
    let total = adds * (adds + 1) / 2;
    let bmem = b.dev.hca().mr_bytes(bmr.handle).unwrap();
    assert_eq!(u64::from_ne_bytes(bmem[..8].try_into().unwrap()), total);
    run_requests(&mut a, &mut b, 50, 1, |_a, _b, i| {
        SendWr::new(
            i,
            WrOpcode::AtomicCmpSwp {
                remote_addr: bmr.addr,
                rkey: bmr.rkey,
                compare: total + i,
                swap: total + i + 1,
            },
        )
        .with_sge(Sge::new(amr.addr + i * 8, 8, amr.lkey))
        .signaled()
    });
    let bmem = b.dev.hca().mr_bytes(bmr.handle).unwrap();
    assert_eq!(
        u64::from_ne_bytes(bmem[..8].try_into().unwrap()),
        total + 50
    );

    stop.store(true, Ordering::Relaxed);
    let rs = relay_thread.join().unwrap();
    // The relay really lost and reordered packets, and the transport recovered them.
    assert!(rs.dropped > 0 && rs.reordered > 0, "{rs:?}");
    eprintln!("relay {rs:?}");
    eprintln!(
        "A {:?}\nB {:?}",
        a.dev.hca().counters(),
        b.dev.hca().counters()
    );
    (a.dev.stats(), b.dev.stats())
}

/// Posts `n` requests built by `make` on A, at most `depth` outstanding, and waits until all
/// completed successfully (in order).
fn run_requests(
    a: &mut softib_udp::endpoint::Endpoint,
    b: &mut softib_udp::endpoint::Endpoint,
    n: u64,
    depth: u64,
    make: impl FnMut(
        &mut softib_udp::endpoint::Endpoint,
        &mut softib_udp::endpoint::Endpoint,
        u64,
    ) -> SendWr,
) {
    run_requests_with(a, b, n, depth, make, |_b| {});
}

fn run_requests_with(
    a: &mut softib_udp::endpoint::Endpoint,
    b: &mut softib_udp::endpoint::Endpoint,
    n: u64,
    depth: u64,
    mut make: impl FnMut(
        &mut softib_udp::endpoint::Endpoint,
        &mut softib_udp::endpoint::Endpoint,
        u64,
    ) -> SendWr,
    mut on_b: impl FnMut(&mut softib_udp::endpoint::Endpoint),
) {
    let (mut posted, mut done) = (0u64, 0u64);
    drive(a, b, Duration::from_secs(60), |a, b| {
        for wc in completions(a) {
            assert_eq!(wc.status, WcStatus::Success, "WR {}", wc.wr_id);
            assert_eq!(wc.wr_id, done, "completions in posting order");
            done += 1;
        }
        on_b(b);
        while posted < n && posted - done < depth {
            let wr = make(a, b, posted);
            let qpn = a.qpn;
            a.dev.hca_mut().post_send(qpn, &[wr]).unwrap();
            posted += 1;
        }
        done >= n
    });
}
