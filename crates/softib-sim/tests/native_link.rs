//! Simulations on a native InfiniBand fabric: RC over LRH/VCRC packets, and the raw IPv6 /
//! raw EtherType services, with verified data and DLT_USER0 captures.

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use softib_core::verbs::types::Mtu;
use softib_sim::{run, LinkLayer, OpKind, Service, SimConfig};
use softib_wire::native::{NativeBody, NativePacket};
use softib_wire::pcap::{PcapReader, LINKTYPE_USER0};

#[derive(Clone, Default)]
struct Shared(Rc<RefCell<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn ib(service: Service, op: OpKind, size: u32, ops: u64) -> SimConfig {
    SimConfig {
        service,
        link: LinkLayer::InfiniBand,
        op,
        size,
        ops,
        mtu: Mtu::Mtu1024,
        depth: 8,
        ..SimConfig::default()
    }
}

/// Every captured packet is native IB with good CRCs.
fn check_capture(bytes: &[u8]) -> usize {
    let r = PcapReader::new(bytes).unwrap();
    assert_eq!(r.link_type(), LINKTYPE_USER0);
    let mut n = 0;
    for rec in r.records() {
        let rec = rec.unwrap();
        NativePacket::parse_verified(rec.data).unwrap();
        n += 1;
    }
    n
}

#[test]
fn rc_over_native_ib_is_verified_and_captured_as_dlt_user0() {
    for op in [OpKind::Send, OpKind::Write, OpKind::Read, OpKind::Faa] {
        let c = ib(Service::Rc, op, 3000, 40);
        let sink = Shared::default();
        let r = run(&c, Some(Box::new(sink.clone())), &mut |_, _| {}).unwrap();
        assert!(r.verified, "{op:?}\n{}", r.to_text());
        let n = check_capture(&sink.0.borrow());
        assert_eq!(n as u64, r.fabric.delivered_frames);
    }
}

/// XRC (XRCETH) and RD (RDETH, DETH; several QPs over two EE contexts) frame natively too:
/// every operation verified, every packet of the capture a native IB packet with good CRCs
/// whose opcode is of the service.
#[test]
fn xrc_and_rd_over_native_ib_are_verified_and_captured() {
    for (service, class) in [(Service::Xrc, 0xa0), (Service::Rd, 0x40)] {
        for op in [OpKind::Send, OpKind::Write, OpKind::Read, OpKind::Cas] {
            let c = SimConfig {
                qps: 3,
                eecs: 2,
                srqs: 2,
                loss: 0.01,
                ..ib(service, op, 3000, 30)
            };
            let sink = Shared::default();
            let r = run(&c, Some(Box::new(sink.clone())), &mut |_, _| {}).unwrap();
            assert!(r.verified, "{service:?} {op:?}\n{}", r.to_text());
            let bytes = sink.0.borrow();
            assert_eq!(check_capture(&bytes) as u64, r.fabric.delivered_frames);
            for rec in PcapReader::new(&bytes[..]).unwrap().records() {
                let p = NativePacket::parse_verified(rec.unwrap().data).unwrap();
                let NativeBody::Iba { transport, .. } = p.body else {
                    panic!("{service:?}: not a transport packet");
                };
                let op = transport.headers.bth.opcode.0;
                assert_eq!(op & 0xe0, class, "{service:?}: opcode {op:#x}");
            }
        }
    }
}

#[test]
fn rc_over_native_ib_recovers_from_loss_and_corruption() {
    let c = SimConfig {
        loss: 0.02,
        corrupt: 0.01,
        ..ib(Service::Rc, OpKind::Write, 8192, 100)
    };
    let r = run(&c, None, &mut |_, _| {}).unwrap();
    assert!(r.verified, "{}", r.to_text());
    assert!(r.retransmissions > 0);
    assert!(
        r.requester.vcrc_err + r.responder.vcrc_err > 0,
        "{}",
        r.to_text()
    );
}

#[test]
fn raw_services_deliver_every_datagram_without_faults() {
    for service in [Service::RawIpv6, Service::RawEthertype] {
        let c = ib(service, OpKind::Send, 1037, 500);
        let sink = Shared::default();
        let r = run(&c, Some(Box::new(sink.clone())), &mut |_, _| {}).unwrap();
        assert!(r.verified, "{service:?}\n{}", r.to_text());
        assert_eq!((r.lost, r.duplicates), (0, 0));
        assert_eq!(r.responder.raw_delivered, 500);
        assert_eq!(check_capture(&sink.0.borrow()), 500);
        // Larger than the MTU (o9-148): 1037 bytes of payload at MTU 1024.
        assert_eq!(r.bytes, 500 * 1037);
    }
}

#[test]
fn raw_services_under_faults_count_losses_and_never_deliver_garbage() {
    for service in [Service::RawIpv6, Service::RawEthertype] {
        let c = SimConfig {
            loss: 0.05,
            dup: 0.02,
            reorder: 0.02,
            corrupt: 0.02,
            seed: 7,
            ..ib(service, OpKind::Send, 200, 2000)
        };
        let r = run(&c, None, &mut |_, _| {}).unwrap();
        assert!(r.verified, "{service:?}\n{}", r.to_text());
        assert_eq!(r.verify_failures, 0);
        assert!(r.lost > 0 && r.lost < 400, "{}", r.to_text());
        assert!(r.duplicates > 0);
        assert_eq!(r.bytes, (2000 - r.lost) * 200);
        assert!(r.responder.vcrc_err > 0);
        // Same seed, same run.
        let again = run(&c, None, &mut |_, _| {}).unwrap();
        assert_eq!(
            (again.lost, again.duplicates, again.events),
            (r.lost, r.duplicates, r.events)
        );
    }
}

#[test]
fn raw_services_need_an_ib_link_and_one_qp() {
    let mut c = ib(Service::RawIpv6, OpKind::Send, 100, 10);
    c.link = LinkLayer::Ethernet;
    assert!(c.validate().is_err());
    let mut c = ib(Service::RawEthertype, OpKind::Send, 100, 10);
    c.qps = 2;
    assert!(c.validate().is_err());
    let c = ib(Service::RawEthertype, OpKind::Write, 100, 10);
    assert!(c.validate().is_err());
    let c = ib(Service::RawEthertype, OpKind::Send, 1024 + 113, 10);
    assert!(c.validate().is_err());
}

#[test]
fn ud_over_native_ib_is_lid_routed_and_delivers_every_datagram() {
    let c = SimConfig {
        qps: 2,
        ..ib(Service::Ud, OpKind::Send, 1024, 600)
    };
    c.validate().unwrap();
    let sink = Shared::default();
    let r = run(&c, Some(Box::new(sink.clone())), &mut |_, _| {}).unwrap();
    assert!(r.verified, "{}", r.to_text());
    assert_eq!((r.delivered, r.duplicates, r.lost), (600, 0, 0));
    assert_eq!(r.bytes, 600 * 1024);
    assert_eq!(check_capture(&sink.0.borrow()), 600);
    let bytes = sink.0.borrow();
    for rec in PcapReader::new(&bytes[..]).unwrap().records() {
        let rec = rec.unwrap();
        let p = NativePacket::parse_verified(rec.data).unwrap();
        assert_eq!(
            (p.lrh.lnh, p.lrh.slid, p.lrh.dlid),
            (softib_wire::lrh::Lnh::IbaLocal, 1, 2),
            "LID-routed: no GRH"
        );
    }
}

#[test]
fn ud_over_native_ib_under_faults_every_arrival_intact() {
    let c = SimConfig {
        qps: 2,
        loss: 0.03,
        dup: 0.05,
        reorder: 0.05,
        corrupt: 0.02,
        seed: 11,
        ..ib(Service::Ud, OpKind::Send, 64, 2000)
    };
    let r = run(&c, None, &mut |_, _| {}).unwrap();
    assert!(r.verified, "{}", r.to_text());
    assert_eq!(r.verify_failures, 0);
    assert_eq!(r.completed, 2000, "every send completes, lost or not");
    assert_eq!(r.delivered + r.lost, 2000, "{}", r.to_text());
    assert!(r.lost > 0 && r.duplicates > 0, "{}", r.to_text());
    assert!(
        r.responder.vcrc_err > 0,
        "corrupted packets are dropped on the VCRC"
    );
    assert_eq!(r.responder.wrong_service, 0, "{}", r.to_text());
}
