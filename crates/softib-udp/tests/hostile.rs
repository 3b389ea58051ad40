//! Hostile datagrams to a running device's port 4791: random bytes, truncations and
//! mutations of real packets, and well-formed RC requests (valid ICRC, right QPN, expected
//! PSN, source address of the connected peer) that aim WRITEs and atomics at memory they have
//! no right to touch. The device keeps running, regions without remote write access and every
//! byte outside the bounds of the writable region stay as they were, and a fresh connection
//! afterwards still carries verified data.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use common::*;
use softib_core::verbs::types::{AccessFlags, WcStatus};
use softib_core::verbs::wr::{RemoteAddr, SendWr, Sge, WrOpcode};
use softib_udp::frame;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A BTH for `opcode` to `qpn` at `psn`, with `pad` pad bytes and the AckReq bit.
fn bth(opcode: u8, pad: u8, qpn: u32, psn: u32) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[0] = opcode;
    b[1] = (pad & 3) << 4;
    b[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
    b[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    b[8] = 0x80;
    b[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
    b
}

/// Appends a valid ICRC for the header the device will rebuild (source `from`, destination
/// `to`), so the packet reaches the transport.
fn seal(from: SocketAddr, to: SocketAddr, mut body: Vec<u8>) -> Vec<u8> {
    body.extend_from_slice(&[0; 4]);
    let mut f = Vec::new();
    assert!(frame::frame_of_datagram(
        from.ip(),
        from.port(),
        to.ip(),
        &body,
        &mut f
    ));
    assert!(frame::reseal_ipv4_icrc(&mut f));
    frame::datagram_of_frame(&f).unwrap().1.to_vec()
}

#[test]
fn hostile_datagrams_touch_nothing_outside_registered_rights() {
    let (d_addr, e_addr) = (addr(2, 1), addr(2, 2));
    let mut d = endpoint(d_addr, 0x100, 1 << 16, None);
    let mut e = endpoint(e_addr, 0x200, 1 << 16, None);
    connect(&mut d, &mut e);
    let dmr = d.mr;
    // Two more regions on D: remote READ only, and local only.
    let ro = d
        .dev
        .hca_mut()
        .reg_mr(dmr.pd, pattern(11, 8192), AccessFlags::REMOTE_READ, None)
        .unwrap();
    let local = d
        .dev
        .hca_mut()
        .reg_mr(dmr.pd, pattern(12, 8192), AccessFlags::LOCAL_WRITE, None)
        .unwrap();
    let rw_before = pattern(13, dmr.length as usize);
    d.dev.hca_mut().mr_write(dmr.handle, 0, &rw_before).unwrap();

    // The attacker sends from E's IP address (another port), so the connection check passes.
    let attacker = UdpSocket::bind(SocketAddr::new(e_addr.ip(), 0)).unwrap();
    let from = attacker.local_addr().unwrap();
    let (qpn, mut psn) = (d.qpn.value(), e.psn.value());
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let mut sent = 0u64;
    for round in 0..3000u64 {
        let kind = round % 6;
        let dgram: Vec<u8> = match kind {
            // Random bytes of random length.
            0 => (0..rng.below(300)).map(|_| rng.next() as u8).collect(),
            // RDMA WRITE into the read-only or local-only region (valid keys of other rights).
            1 => {
                let (target, key) = if rng.below(2) == 0 {
                    (ro.addr, ro.rkey)
                } else {
                    (local.addr, local.lkey)
                };
                let len = 4 * (1 + rng.below(64)) as u32;
                let mut b = bth(0x0A, 0, qpn, psn).to_vec();
                b.extend_from_slice(&(target + rng.below(4096)).to_be_bytes());
                b.extend_from_slice(&key.to_be_bytes());
                b.extend_from_slice(&len.to_be_bytes());
                b.extend((0..len).map(|_| 0xEE));
                psn = (psn + 1) & 0xff_ffff;
                seal(from, d_addr, b)
            }
            // RDMA WRITE with the writable region's R_Key but out of bounds / overflowing.
            2 => {
                let len = 4 * (1 + rng.below(64)) as u32;
                let va = match rng.below(3) {
                    0 => dmr.addr + dmr.length - u64::from(len) / 2,
                    1 => dmr.addr.wrapping_sub(u64::from(len)),
                    _ => u64::MAX - 2,
                };
                let mut b = bth(0x0A, 0, qpn, psn).to_vec();
                b.extend_from_slice(&va.to_be_bytes());
                b.extend_from_slice(&dmr.rkey.to_be_bytes());
                b.extend_from_slice(&len.to_be_bytes());
                b.extend((0..len).map(|_| 0xEE));
                psn = (psn + 1) & 0xff_ffff;
                seal(from, d_addr, b)
            }
            // Atomics at misaligned, out-of-bounds or read-only addresses.
            3 => {
                let (va, key) = match rng.below(3) {
                    0 => (dmr.addr + 3, dmr.rkey),
                    1 => (dmr.addr + dmr.length, dmr.rkey),
                    _ => (ro.addr, ro.rkey),
                };
                let mut b = bth(0x14 - (rng.below(2) as u8), 0, qpn, psn).to_vec();
                b.extend_from_slice(&va.to_be_bytes());
                b.extend_from_slice(&key.to_be_bytes());
                b.extend_from_slice(&0xEEEE_EEEE_EEEE_EEEEu64.to_be_bytes());
                b.extend_from_slice(&0u64.to_be_bytes());
                psn = (psn + 1) & 0xff_ffff;
                seal(from, d_addr, b)
            }
            // A valid-looking packet with random bytes flipped (ICRC now wrong, or headers
            // inconsistent), or cut short.
            4 => {
                let mut b = bth(rng.below(256) as u8, rng.below(4) as u8, qpn, psn).to_vec();
                b.extend((0..rng.below(64)).map(|_| rng.next() as u8));
                let mut s = seal(from, d_addr, b);
                let i = rng.below(s.len() as u64) as usize;
                s[i] ^= 1 << rng.below(8);
                if rng.below(2) == 0 {
                    s.truncate(rng.below(s.len() as u64) as usize);
                }
                s
            }
            // Any opcode, random extended headers, valid ICRC.
            _ => {
                let mut b = bth(rng.below(256) as u8, rng.below(4) as u8, qpn, psn).to_vec();
                b.extend((0..rng.below(96)).map(|_| rng.next() as u8));
                seal(from, d_addr, b)
            }
        };
        // Loopback does not drop unless the buffer is full: pace the barrage.
        let _ = attacker.send_to(&dgram, d_addr);
        sent += 1;
        if round % 16 == 0 {
            for _ in 0..4 {
                d.dev.poll_io().unwrap();
            }
        }
    }
    drive(&mut d, &mut e, Duration::from_secs(5), |d, _e| {
        d.dev.stats().rx_datagrams >= sent
    });
    let c = *d.dev.hca().counters();
    assert!(c.malformed + c.icrc_err > 0, "{c:?}");

    // Nothing outside the rights granted changed.
    let hca = d.dev.hca();
    assert_eq!(hca.mr_bytes(ro.handle).unwrap(), &pattern(11, 8192)[..]);
    assert_eq!(hca.mr_bytes(local.handle).unwrap(), &pattern(12, 8192)[..]);
    assert_eq!(hca.mr_bytes(dmr.handle).unwrap(), &rw_before[..]);

    // The device still works: a fresh QP pair carries a verified WRITE.
    let hca = d.dev.hca_mut();
    let cap = softib_core::verbs::qp::QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let dq = hca
        .create_qp(
            dmr.pd,
            &softib_core::verbs::qp::QpInitAttr::new(
                softib_core::verbs::types::QpType::Rc,
                d.cq,
                cap,
            ),
        )
        .unwrap();
    let emr = e.mr;
    let eq = e
        .dev
        .hca_mut()
        .create_qp(
            emr.pd,
            &softib_core::verbs::qp::QpInitAttr::new(
                softib_core::verbs::types::QpType::Rc,
                e.cq,
                cap,
            ),
        )
        .unwrap();
    let psn_d = softib_wire::Psn::new(0x500);
    let psn_e = softib_wire::Psn::new(0x600);
    let info = |qpn, psn, gid| softib_core::setup::EndpointInfo {
        qpn,
        psn,
        gid,
        lid: 0,
    };
    let (dgid, egid) = (d.dev.gid(), e.dev.gid());
    softib_core::setup::connect(
        d.dev.hca_mut(),
        dq,
        psn_d,
        &info(eq, psn_e, egid),
        &options(),
    )
    .unwrap();
    softib_core::setup::connect(
        e.dev.hca_mut(),
        eq,
        psn_e,
        &info(dq, psn_d, dgid),
        &options(),
    )
    .unwrap();
    let data = pattern(14, 3000);
    e.dev.hca_mut().mr_write(emr.handle, 0, &data).unwrap();
    let wr = SendWr::new(
        77,
        WrOpcode::RdmaWrite {
            remote: RemoteAddr::new(dmr.addr + 512, dmr.rkey),
        },
    )
    .with_sge(Sge::new(emr.addr, 3000, emr.lkey))
    .signaled();
    e.dev.hca_mut().post_send(eq, &[wr]).unwrap();
    let mut done = false;
    drive(&mut d, &mut e, Duration::from_secs(10), |_d, e| {
        for wc in completions(e) {
            if wc.wr_id == 77 {
                assert_eq!(wc.status, WcStatus::Success);
                done = true;
            }
        }
        done
    });
    assert_eq!(
        &d.dev.hca().mr_bytes(dmr.handle).unwrap()[512..3512],
        &data[..]
    );
}
