//! The InfiniBand fabric: forwarding by LRH:DLID, LID ranges, multicast and permissive LIDs,
//! the IB MTU rule, corruption and DLT_USER0 captures.

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use softib_fabric::{Capture, Endpoint, Fabric, Faults, LinkConfig, LinkLayer};
use softib_wire::lrh::{Lnh, Lrh};
use softib_wire::native::NativePacket;
use softib_wire::pcap::{PcapReader, LINKTYPE_USER0};

/// Sends its scripted packets at time 0 and records what it receives.
#[derive(Default)]
struct Host {
    out: Vec<Vec<u8>>,
    got: Vec<Vec<u8>>,
}

impl Endpoint for Host {
    fn handle_frame(&mut self, _now: u64, frame: &[u8]) {
        self.got.push(frame.to_vec());
    }
    fn poll_transmit(&mut self, _now: u64, out: &mut Vec<u8>) -> bool {
        if self.out.is_empty() {
            return false;
        }
        *out = self.out.remove(0);
        true
    }
    fn poll_timeout(&self) -> Option<u64> {
        None
    }
    fn handle_timeout(&mut self, _now: u64) {}
}

/// A raw EtherType packet from `slid` to `dlid` with `len` payload bytes (tag in byte 0).
fn packet(slid: u16, dlid: u16, len: usize, tag: u8) -> Vec<u8> {
    let covered = 8 + 4 + len;
    let lrh = Lrh {
        lnh: Lnh::Raw,
        slid,
        dlid,
        pkt_len: (covered / 4) as u16,
        ..Lrh::default()
    };
    let mut f = vec![0u8; covered + 2];
    lrh.emit(&mut f).unwrap();
    f[10..12].copy_from_slice(&0x88B5u16.to_be_bytes());
    for (i, b) in f[12..covered].iter_mut().enumerate() {
        *b = tag.wrapping_add(i as u8);
    }
    let v = softib_wire::vcrc::compute(&f[..covered]);
    softib_wire::vcrc::put(&mut f[covered..], v).unwrap();
    f
}

fn host(out: Vec<Vec<u8>>) -> Host {
    Host {
        out,
        got: Vec::new(),
    }
}

fn link() -> LinkConfig {
    LinkConfig {
        mtu: 256,
        ..LinkConfig::default()
    }
}

#[test]
fn switch_forwards_by_dlid_over_lid_ranges() {
    let mut f: Fabric<Host> = Fabric::with_link_layer(1, LinkLayer::InfiniBand);
    assert_eq!(f.link_layer(), LinkLayer::InfiniBand);
    let a = f.add_ib_node(
        host(vec![
            packet(1, 4, 16, 1),      // B's base LID
            packet(1, 7, 16, 2),      // B's last LID (LMC 2: 4..=7)
            packet(1, 8, 16, 3),      // C
            packet(1, 9, 16, 4),      // nobody
            packet(1, 0, 16, 5),      // reserved LID 0
            packet(1, 0xC010, 16, 6), // multicast: B and C
            packet(1, 0xFFFF, 16, 7), // permissive: the switch consumes it
        ]),
        1,
        0,
        link(),
    );
    let b = f.add_ib_node(host(vec![]), 4, 2, link());
    let c = f.add_ib_node(host(vec![]), 8, 0, link());
    f.kick(a);
    f.run_until_idle(u64::MAX);
    let tags = |n| {
        f.node(n)
            .got
            .iter()
            .map(|p: &Vec<u8>| p[12])
            .collect::<Vec<_>>()
    };
    assert_eq!(tags(b), [1, 2, 6]);
    assert_eq!(tags(c), [3, 6]);
    assert!(tags(a).is_empty());
    let s = f.totals().switch;
    assert_eq!(
        (s.forwarded, s.unknown_dst, s.flooded, s.permissive),
        (3, 2, 1, 1)
    );
    for p in &f.node(b).got {
        NativePacket::parse_verified(p).unwrap();
    }
}

#[test]
fn ib_mtu_counts_the_payload_not_the_headers() {
    let mut f: Fabric<Host> = Fabric::with_link_layer(1, LinkLayer::InfiniBand);
    // MTU 256: a packet of up to 256 + 126 bytes passes.
    let fits = packet(1, 2, 256 + 126 - 14, 1);
    let too_long = packet(1, 2, 256 + 126 - 14 + 4, 2);
    assert_eq!(fits.len(), 256 + 126);
    let a = f.add_ib_node(host(vec![fits, too_long]), 1, 0, link());
    let b = f.add_ib_node(host(vec![]), 2, 0, link());
    f.kick(a);
    f.run_until_idle(u64::MAX);
    assert_eq!(f.node(b).got.len(), 1);
    assert_eq!(f.totals().links.dropped_mtu, 1);
}

#[test]
fn corrupted_native_packets_fail_their_vcrc() {
    let mut f: Fabric<Host> = Fabric::with_link_layer(7, LinkLayer::InfiniBand);
    let faulty = LinkConfig {
        faults: Faults {
            corrupt: 1.0,
            ..Faults::default()
        },
        ..link()
    };
    let out = (0..20).map(|i| packet(1, 2, 64, i)).collect();
    let a = f.add_ib_node(host(out), 1, 0, faulty);
    let b = f.add_ib_node(host(vec![]), 2, 0, link());
    f.kick(a);
    f.run_until_idle(u64::MAX);
    // Corrupted on the way up; a flip in the DLID can send one astray, so count what arrived.
    let got = &f.node(b).got;
    assert!(!got.is_empty());
    for p in got {
        assert!(NativePacket::parse_verified(p).is_err());
    }
}

#[test]
fn native_capture_is_dlt_user0() {
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
    let mut f: Fabric<Host> = Fabric::with_link_layer(1, LinkLayer::InfiniBand);
    let sink = Shared::default();
    f.capture_pcap(Box::new(sink.clone()), Capture::Delivered)
        .unwrap();
    let sent = packet(1, 2, 40, 9);
    let a = f.add_ib_node(host(vec![sent.clone()]), 1, 0, link());
    f.add_ib_node(host(vec![]), 2, 0, link());
    f.kick(a);
    f.run_until_idle(u64::MAX);
    f.finish_pcap().unwrap();
    let bytes = sink.0.borrow().clone();
    let r = PcapReader::new(&bytes).unwrap();
    assert_eq!(r.link_type(), LINKTYPE_USER0);
    let recs: Vec<_> = r.records().collect::<Result<_, _>>().unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].data, &sent[..]);
}

#[test]
#[should_panic(expected = "overlaps")]
fn overlapping_lid_ranges_are_refused() {
    let mut f: Fabric<Host> = Fabric::with_link_layer(1, LinkLayer::InfiniBand);
    f.add_ib_node(host(vec![]), 4, 2, link());
    f.add_ib_node(host(vec![]), 6, 0, link());
}
