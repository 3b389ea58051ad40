//! Host-wide devices: devices opened on one address by one process (as several processes
//! would) share it as one HCA: one GID, QPNs that name their member, datagrams steered to the
//! member they are for by the socket group's program, or handed on between members.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use softib_core::verbs::types::WcStatus;
use softib_core::verbs::wr::{RemoteAddr, SendWr, Sge, WrOpcode};
use softib_udp::endpoint::Endpoint;
use softib_udp::Transport;

/// Has A write `len` bytes of pattern `seed` into B's buffer; checks completion and bytes.
fn write(a: &mut Endpoint, b: &mut Endpoint, seed: u64, len: usize) {
    let (amr, bmr) = (a.mr, b.mr);
    let data = pattern(seed, len);
    a.dev.hca_mut().mr_write(amr.handle, 0, &data).unwrap();
    let wr = SendWr::new(
        seed,
        WrOpcode::RdmaWrite {
            remote: RemoteAddr::new(bmr.addr, bmr.rkey),
        },
    )
    .with_sge(Sge::new(amr.addr, len as u32, amr.lkey))
    .signaled();
    let qpn = a.qpn;
    a.dev.hca_mut().post_send(qpn, &[wr]).unwrap();
    let mut ok = false;
    drive(a, b, Duration::from_secs(10), |a, _| {
        for wc in completions(a) {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            ok = true;
        }
        ok
    });
    assert_eq!(&b.dev.hca().mr_bytes(bmr.handle).unwrap()[..len], &data[..]);
}

/// The device at `addr` as `softib status` sees it.
fn status(addr: SocketAddr) -> softib_udp::host::DeviceStatus {
    softib_udp::host::devices()
        .into_iter()
        .find(|d| d.addr == addr)
        .expect("the host table of the address")
}

/// Drives both devices until the socket group's program is in force and every member
/// answered its probe.
fn until_steered(a: &mut Endpoint, b: &mut Endpoint, addr: SocketAddr) {
    drive(a, b, Duration::from_secs(5), |_, _| {
        let st = status(addr);
        !st.probing && st.members.iter().all(|m| !m.live || m.index.is_some())
    });
}

fn member_of(e: &Endpoint) -> u8 {
    e.dev
        .member_slot()
        .expect("a member of the host-wide device")
}

#[test]
fn two_members_of_one_address_are_one_hca_over_udp() {
    let at = addr(4, 1);
    let mut a = endpoint_on(at, 7, 1 << 16, None, Transport::Udp);
    let mut b = endpoint_on(at, 9, 1 << 16, None, Transport::Udp);
    let (sa, sb) = (member_of(&a), member_of(&b));
    assert_ne!(sa, sb);
    // One GID; QPNs name their member.
    assert_eq!(a.dev.gid(), b.dev.gid());
    assert_eq!(a.qpn.value() >> 16, u32::from(sa));
    assert_eq!(b.qpn.value() >> 16, u32::from(sb));
    let st = status(at);
    assert_eq!(st.sockets, 2);
    let live: Vec<u8> = st
        .members
        .iter()
        .filter(|m| m.live)
        .map(|m| m.slot)
        .collect();
    assert!(live.contains(&sa) && live.contains(&sb), "{st:?}");
    connect(&mut a, &mut b);
    until_steered(&mut a, &mut b, at);
    let st = status(at);
    for m in st.members.iter().filter(|m| m.live) {
        assert!(m.index.is_some(), "every member answered its probe: {st:?}");
    }
    // With the program in force, every datagram reaches its member's own socket: none is
    // handed on.
    let before = (a.dev.stats().forwarded, b.dev.stats().forwarded);
    for seed in 1..=20 {
        write(&mut a, &mut b, seed, 3000);
        write(&mut b, &mut a, seed + 100, 700);
    }
    assert_eq!(
        (a.dev.stats().forwarded, b.dev.stats().forwarded),
        before,
        "A {:?} B {:?}",
        a.dev.stats(),
        b.dev.stats()
    );
    for e in [&a, &b] {
        assert_eq!(e.dev.hca().counters().icrc_err, 0);
        assert_eq!(e.dev.stats().tx_shm, 0, "UDP only");
        assert_eq!(e.dev.stats().unowned, 0);
    }
}

#[test]
fn two_members_of_one_address_talk_through_shared_memory() {
    let at = addr(4, 2);
    let mut a = endpoint_on(at, 7, 1 << 16, None, Transport::Auto);
    let mut b = endpoint_on(at, 9, 1 << 16, None, Transport::Auto);
    connect(&mut a, &mut b);
    for seed in 1..=5 {
        write(&mut a, &mut b, seed, 5000);
    }
    assert!(a.dev.stats().tx_shm > 0, "{:?}", a.dev.stats());
    assert!(b.dev.stats().rx_shm > 0, "{:?}", b.dev.stats());
    assert_eq!(b.dev.hca().counters().icrc_err, 0);
}

/// A member whose socket gets datagrams for another (here: before any program is attached,
/// the kernel's hash chooses) hands them to that member's inbox; they arrive all the same.
#[test]
fn datagrams_for_another_member_are_handed_on() {
    let at = addr(4, 3);
    let mut a = endpoint_on(at, 7, 1 << 16, None, Transport::Udp);
    let mut b = endpoint_on(at, 9, 1 << 16, None, Transport::Udp);
    connect(&mut a, &mut b);
    until_steered(&mut a, &mut b, at);
    // A third member joins and leaves: the group's indices move and the program is stale
    // until the members answer the new probes; B's datagrams may reach A's socket meanwhile.
    let c = endpoint_on(at, 11, 1 << 16, None, Transport::Udp);
    drop(c);
    for seed in 1..=30 {
        write(&mut a, &mut b, seed, 2000);
        write(&mut b, &mut a, seed, 2000);
    }
    let st = status(at);
    assert_eq!(st.members.iter().filter(|m| m.live).count(), 2, "{st:?}");
    // What was handed on was taken by its member.
    let handed = a.dev.stats().forwarded + b.dev.stats().forwarded;
    let took = a.dev.stats().forwarded_in + b.dev.stats().forwarded_in;
    assert_eq!(handed, took);
}

/// Dropping a member leaves its slot quiet; the last member to leave removes the table.
#[test]
fn the_last_member_removes_the_table() {
    let at = addr(4, 4);
    let a = endpoint_on(at, 7, 1 << 16, None, Transport::Auto);
    let b = endpoint_on(at, 9, 1 << 16, None, Transport::Auto);
    let sb = member_of(&b);
    drop(b);
    let st = status(at);
    let gone = st.members.iter().find(|m| m.slot == sb).unwrap();
    assert!(!gone.live, "{st:?}");
    assert_eq!(st.sockets, 1);
    let path = softib_udp::host::host_path(at);
    assert!(path.exists());
    drop(a);
    assert!(!path.exists(), "{}", path.display());
    assert!(
        !softib_udp::shm::member_inbox_path(at, sb).exists(),
        "inboxes go with their members"
    );
}

/// A UD endpoint on `at` whose receive queue is posted (slots of 2 KiB).
fn ud_endpoint(at: SocketAddr) -> Endpoint {
    let mut cfg = softib_udp::DeviceConfig::new(at);
    cfg.active_mtu = softib_core::verbs::types::Mtu::Mtu1024;
    let dev = softib_udp::Device::open(&cfg).unwrap();
    let ecfg = softib_udp::endpoint::EndpointConfig {
        qp_type: softib_core::verbs::types::QpType::Ud,
        buf_len: 2048 * 16,
        send_depth: 16,
        recv_depth: 16,
        max_inline: 0,
    };
    let mut e = Endpoint::new(dev, &ecfg, softib_wire::Psn::new(1)).unwrap();
    let me = e.info();
    e.connect(&me, &options()).unwrap();
    for slot in 0..16u64 {
        let wr = softib_core::verbs::wr::RecvWr::new(
            slot,
            vec![Sge::new(e.mr.addr + slot * 2048, 2048, e.mr.lkey)],
        );
        let qpn = e.qpn;
        e.dev.hca_mut().post_recv(qpn, &[wr]).unwrap();
    }
    e
}

/// UD multicast over IP multicast: two members of one address and a device on another attach
/// QPs to one group; a datagram sent to the group by a fourth reaches each of the three once
/// (the kernel hands every member's group socket a copy), and a member that detaches gets no
/// more.
#[test]
fn multicast_reaches_every_member_that_attached() {
    use softib_core::verbs::ah::AhAttr;
    use softib_core::verbs::types::Gid;
    let mgid = Gid(std::net::Ipv4Addr::new(239, 77, 4, 1)
        .to_ipv6_mapped()
        .octets());
    let (x, y) = (addr(4, 5), addr(4, 6));
    let mut members = [ud_endpoint(x), ud_endpoint(x), ud_endpoint(y)];
    let mut sender = ud_endpoint(y);
    for m in members.iter_mut() {
        let qpn = m.qpn;
        m.dev.hca_mut().attach_mcast(qpn, mgid, 0).unwrap();
        m.dev.sync_multicast().unwrap();
    }
    let pd = sender.pd;
    let ah = sender
        .dev
        .hca_mut()
        .create_ah(pd, &AhAttr::global(1, mgid, 0))
        .unwrap();
    let send = |s: &mut Endpoint, seed: u64| {
        let data = pattern(seed, 600);
        let mr = s.mr;
        s.dev.hca_mut().mr_write(mr.handle, 0, &data).unwrap();
        let wr = SendWr::new(seed, WrOpcode::Send)
            .with_sge(Sge::new(mr.addr, 600, mr.lkey))
            .with_ud(
                ah,
                softib_wire::Qpn::new(0xFF_FFFF),
                softib_udp::endpoint::UD_QKEY,
            )
            .signaled();
        let qpn = s.qpn;
        s.dev.hca_mut().post_send(qpn, &[wr]).unwrap();
    };
    send(&mut sender, 1);
    let mut got = [0usize; 3];
    let start = std::time::Instant::now();
    while got.contains(&0) {
        sender.dev.poll_io().unwrap();
        for (i, m) in members.iter_mut().enumerate() {
            m.dev.poll_io().unwrap();
            for wc in completions(m) {
                assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                assert_eq!(wc.byte_len, 600 + 40);
                let slot = wc.wr_id as usize;
                let bytes = &m.dev.hca().mr_bytes(m.mr.handle).unwrap()[slot * 2048..];
                assert_eq!(&bytes[40..640], &pattern(1, 600)[..]);
                got[i] += 1;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(5), "received {got:?}");
    }
    assert_eq!(got, [1, 1, 1]);
    // The second member of x leaves the group: the next datagram reaches the other two.
    let qpn = members[1].qpn;
    members[1].dev.hca_mut().detach_mcast(qpn, mgid, 0).unwrap();
    members[1].dev.sync_multicast().unwrap();
    send(&mut sender, 1);
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(300) {
        sender.dev.poll_io().unwrap();
        for (i, m) in members.iter_mut().enumerate() {
            m.dev.poll_io().unwrap();
            got[i] += completions(m).len();
        }
    }
    assert_eq!(got, [2, 1, 2]);
}

// ----- XRC across members ---------------------------------------------------------------------

/// The file (st_dev, st_ino) whose XRC domain the members of an XRC test share.
const XRC_FILE: (u64, u64) = (0, 0x5eed_0001);

/// An XRC initiator on a device of its own address.
struct XrcInitiator {
    dev: softib_udp::Device,
    cq: softib_core::verbs::CqHandle,
    mr: softib_core::verbs::mr::MrInfo,
    qpn: softib_wire::Qpn,
}

/// A member with an XRC target QP in its share of the domain of [`XRC_FILE`].
struct XrcTarget {
    dev: softib_udp::Device,
    qpn: softib_wire::Qpn,
}

/// A member with an XRC SRQ (its own CQ, 64 KiB registered) in its share of the domain.
struct XrcOwner {
    dev: softib_udp::Device,
    cq: softib_core::verbs::CqHandle,
    srq: softib_core::verbs::SrqHandle,
    srqn: u32,
    mr: softib_core::verbs::mr::MrInfo,
}

fn xrc_device(at: SocketAddr) -> softib_udp::Device {
    let mut cfg = softib_udp::DeviceConfig::new(at);
    cfg.active_mtu = softib_core::verbs::types::Mtu::Mtu1024;
    softib_udp::Device::open(&cfg).unwrap()
}

/// The member's share of the domain of [`XRC_FILE`], as `ibv_open_xrcd` makes it.
fn shared_xrcd(dev: &mut softib_udp::Device) -> softib_core::verbs::XrcdHandle {
    let id = dev
        .open_xrcd(XRC_FILE, true, false)
        .unwrap()
        .expect("a member of a host-wide device");
    let hca = dev.hca_mut();
    let xrcd = hca.alloc_xrcd().unwrap();
    hca.share_xrcd(xrcd, id).unwrap();
    xrcd
}

/// An initiator on `i` connected to a target on `t`, and an owner on `t` (the target's
/// address: two members of one host-wide device).
fn xrc_trio(i: SocketAddr, t: SocketAddr) -> (XrcInitiator, XrcTarget, XrcOwner) {
    use softib_core::setup::{connect as connect_qp, EndpointInfo};
    use softib_core::verbs::qp::{QpCap, QpInitAttr};
    use softib_core::verbs::srq::SrqInitAttr;
    use softib_core::verbs::types::{AccessFlags, QpType};
    let mut idev = xrc_device(i);
    let hca = idev.hca_mut();
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(64).unwrap();
    let mr = hca
        .reg_mr(pd, vec![0u8; 1 << 16], AccessFlags::LOCAL_WRITE, None)
        .unwrap();
    let cap = QpCap {
        max_send_wr: 16,
        max_send_sge: 1,
        ..QpCap::default()
    };
    let iqpn = hca
        .create_qp(pd, &QpInitAttr::new(QpType::XrcSend, cq, cap))
        .unwrap();
    let mut tdev = xrc_device(t);
    let xrcd = shared_xrcd(&mut tdev);
    let tqpn = tdev.hca_mut().create_xrc_tgt_qp(xrcd).unwrap();
    let mut odev = xrc_device(t);
    let oxrcd = shared_xrcd(&mut odev);
    let hca = odev.hca_mut();
    let opd = hca.alloc_pd().unwrap();
    let ocq = hca.create_cq(64).unwrap();
    let attr = SrqInitAttr {
        max_wr: 16,
        max_sge: 1,
        srq_limit: 0,
    };
    let srq = hca.create_xrc_srq(opd, oxrcd, ocq, &attr).unwrap();
    let srqn = hca.srq_num(srq).unwrap();
    let omr = hca
        .reg_mr(opd, vec![0u8; 1 << 16], AccessFlags::LOCAL_WRITE, None)
        .unwrap();
    let o = ConnectOptions {
        min_rnr_timer: 1,
        ..options()
    };
    let (ii, ti) = (
        EndpointInfo {
            qpn: iqpn,
            psn: softib_wire::Psn::new(10),
            gid: idev.gid(),
            lid: 0,
        },
        EndpointInfo {
            qpn: tqpn,
            psn: softib_wire::Psn::new(20),
            gid: tdev.gid(),
            lid: 0,
        },
    );
    connect_qp(idev.hca_mut(), iqpn, ii.psn, &ti, &o).unwrap();
    connect_qp(tdev.hca_mut(), tqpn, ti.psn, &ii, &o).unwrap();
    (
        XrcInitiator {
            dev: idev,
            cq,
            mr,
            qpn: iqpn,
        },
        XrcTarget {
            dev: tdev,
            qpn: tqpn,
        },
        XrcOwner {
            dev: odev,
            cq: ocq,
            srq,
            srqn,
            mr: omr,
        },
    )
}

use softib_core::setup::ConnectOptions;

impl XrcInitiator {
    /// Sends `data` (from the start of its region) as one SEND naming SRQ `srqn`.
    fn send(&mut self, wr_id: u64, data: &[u8], srqn: u32) {
        let mr = self.mr;
        self.dev.hca_mut().mr_write(mr.handle, 0, data).unwrap();
        let wr = SendWr::new(wr_id, WrOpcode::Send)
            .with_sge(Sge::new(mr.addr, data.len() as u32, mr.lkey))
            .signaled()
            .with_xrc_srqn(srqn);
        let qpn = self.qpn;
        self.dev.hca_mut().post_send(qpn, &[wr]).unwrap();
    }
}

impl XrcOwner {
    fn post(&mut self, wr_id: u64, offset: u64) {
        let mr = self.mr;
        let wr = softib_core::verbs::wr::RecvWr::new(
            wr_id,
            vec![Sge::new(mr.addr + offset, 8192, mr.lkey)],
        );
        let srq = self.srq;
        self.dev.hca_mut().post_srq_recv(srq, &[wr]).unwrap();
    }
}

/// Progresses the three devices until `done`; panics after 10 s.
fn drive_xrc(
    i: &mut XrcInitiator,
    t: &mut XrcTarget,
    o: &mut XrcOwner,
    mut done: impl FnMut(&mut XrcInitiator, &mut XrcTarget, &mut XrcOwner) -> bool,
) {
    let start = std::time::Instant::now();
    while !done(i, t, o) {
        i.dev.poll_io().unwrap();
        t.dev.poll_io().unwrap();
        o.dev.poll_io().unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no progress: initiator {:?}, target {:?} {:?}, owner {:?} {:?}",
            i.dev.stats(),
            t.dev.stats(),
            t.dev.hca().counters(),
            o.dev.stats(),
            o.dev.hca().counters()
        );
    }
}

/// A SEND through a target QP of one member lands in an XRC SRQ of another member of the same
/// host-wide device (both opened the domain of one file): the owner's CQ gets the completion,
/// naming the target QP, with the bytes in the owner's buffer; the table shows the domain held
/// by both and the SRQ's credits.
#[test]
fn a_target_qp_of_one_member_delivers_into_an_xrc_srq_of_another() {
    let (ia, ta) = (addr(4, 20), addr(4, 21));
    let (mut i, mut t, mut o) = xrc_trio(ia, ta);
    let st = status(ta);
    assert_eq!(st.xrc_domains.len(), 1, "{st:?}");
    let holders = &st.xrc_domains[0].2;
    assert!(holders.contains(&member_of_dev(&t.dev)) && holders.contains(&member_of_dev(&o.dev)));
    o.post(1, 0);
    o.post(2, 8192);
    assert_eq!(status(ta).xrc_srqs, vec![(o.srqn, st.xrc_domains[0].0, 2)]);
    let data = pattern(7, 5000);
    i.send(1, &data, o.srqn);
    i.send(2, &data[..100], o.srqn);
    let mut got = Vec::new();
    drive_xrc(&mut i, &mut t, &mut o, |_, _, o| {
        let cq = o.cq;
        got.extend(o.dev.hca_mut().poll_cq(cq, 8).unwrap());
        got.len() == 2
    });
    for (wc, (len, at)) in got.iter().zip([(5000usize, 0usize), (100, 8192)]) {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        assert_eq!(wc.byte_len as usize, len);
        assert_eq!(wc.qp_num, t.qpn, "the completion names the target QP");
        let bytes = &o.dev.hca().mr_bytes(o.mr.handle).unwrap()[at..at + len];
        assert_eq!(bytes, &data[..len]);
    }
    let mut sent = Vec::new();
    drive_xrc(&mut i, &mut t, &mut o, |i, _, _| {
        let cq = i.cq;
        sent.extend(i.dev.hca_mut().poll_cq(cq, 8).unwrap());
        sent.len() == 2
    });
    for wc in &sent {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    // Five packets of 1024 bytes and one of 100: six delegations from the target's member.
    assert_eq!(t.dev.hca().counters().xrc_delegated, 6);
    assert_eq!(t.dev.stats().xrc_delegated, 6);
    assert_eq!(o.dev.stats().xrc_delegated_in, 6);
    assert_eq!(o.dev.hca().counters().xrc_delegations_dropped, 0);
    assert_eq!(status(ta).xrc_srqs[0].2, 0, "both receives taken");
}

fn member_of_dev(d: &softib_udp::Device) -> u8 {
    d.member_slot().expect("a member")
}

/// An XRC SRQ of another member with no receive posted: the target RNR-NAKs (the initiator
/// retries) until the owner posts one; then the message lands. Once the owner's member leaves,
/// its SRQ is gone from the table: the target answers NAK-Invalid RD Request.
#[test]
fn an_xrc_srq_of_another_member_without_receives_draws_rnr_naks_and_one_that_left_a_nak() {
    let (ia, ta) = (addr(4, 22), addr(4, 23));
    let (mut i, mut t, mut o) = xrc_trio(ia, ta);
    i.send(1, b"wait for me", o.srqn);
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(100) {
        i.dev.poll_io().unwrap();
        t.dev.poll_io().unwrap();
        o.dev.poll_io().unwrap();
    }
    assert!(
        t.dev.hca().counters().rnr_nak_sent >= 1,
        "{:?}",
        t.dev.hca().counters()
    );
    assert_eq!(t.dev.hca().counters().xrc_delegated, 0);
    o.post(5, 0);
    let mut got = Vec::new();
    drive_xrc(&mut i, &mut t, &mut o, |_, _, o| {
        let cq = o.cq;
        got.extend(o.dev.hca_mut().poll_cq(cq, 8).unwrap());
        !got.is_empty()
    });
    assert_eq!(
        (got[0].wr_id, got[0].status, got[0].byte_len),
        (5, WcStatus::Success, 11)
    );
    assert_eq!(
        &o.dev.hca().mr_bytes(o.mr.handle).unwrap()[..11],
        b"wait for me"
    );
    let mut done = Vec::new();
    drive_xrc(&mut i, &mut t, &mut o, |i, _, _| {
        let cq = i.cq;
        done.extend(i.dev.hca_mut().poll_cq(cq, 8).unwrap());
        !done.is_empty()
    });
    assert_eq!(done[0].status, WcStatus::Success);
    // The owner's member leaves: its SRQ goes from the table with it.
    let srqn = o.srqn;
    let XrcOwner { dev, .. } = o;
    drop(dev);
    assert!(status(ta).xrc_srqs.is_empty());
    i.send(2, b"too late", srqn);
    let mut done = Vec::new();
    let start = std::time::Instant::now();
    while done.is_empty() {
        i.dev.poll_io().unwrap();
        t.dev.poll_io().unwrap();
        let cq = i.cq;
        done.extend(i.dev.hca_mut().poll_cq(cq, 8).unwrap());
        assert!(start.elapsed() < Duration::from_secs(10));
    }
    assert_eq!(done[0].status, WcStatus::RemInvRdReqErr);
    assert_eq!(t.dev.hca().counters().xrc_bad_srq, 1);
}
