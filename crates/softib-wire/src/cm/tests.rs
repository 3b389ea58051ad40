use super::*;
use proptest::prelude::*;

/// A message's layout: its name, bit fields and byte fields.
type Layout = (
    &'static str,
    &'static [(&'static str, Loc)],
    &'static [(&'static str, usize, usize)],
);

/// Every message's layout.
fn layouts() -> Vec<Layout> {
    macro_rules! l {
        ($($t:ident),+) => {
            vec![$((stringify!($t), $t::FIELDS, $t::BYTE_FIELDS)),+]
        };
    }
    l!(Req, Mra, Rej, Rep, Rtu, Dreq, Drep, Lap, Apr, SidrReq, SidrRep)
}

/// No two fields of a message share a bit, every field lies inside the 232 bytes, and the
/// private data runs to the end of the MAD (IBA: PrivateData fills the rest).
#[test]
fn layouts_are_disjoint_and_fill_the_mad() {
    for (name, fields, bytes) in layouts() {
        let mut owner = vec![None::<&str>; LEN * 8];
        let mut claim = |what: &'static str, from: usize, width: usize| {
            assert!(from + width <= LEN * 8, "{name}.{what} runs past the MAD");
            for b in owner.iter_mut().skip(from).take(width) {
                assert!(b.is_none(), "{name}.{what} overlaps {:?}", b);
                *b = Some(what);
            }
        };
        for &(f, loc) in fields {
            assert!(
                loc.bit < 8 && loc.width >= 1 && loc.width <= 64,
                "{name}.{f}"
            );
            claim(
                f,
                loc.byte as usize * 8 + loc.bit as usize,
                loc.width as usize,
            );
        }
        for &(f, at, len) in bytes {
            claim(f, at * 8, len * 8);
        }
        let (_, pd_at, pd_len) = bytes.iter().find(|b| b.0 == "private_data").unwrap();
        assert_eq!(pd_at + pd_len, LEN, "{name}: private data ends the MAD");
    }
}

/// The private data sizes IBA gives (and librdmacm's limits: REQ 92 - 36 bytes of its own
/// header = 56 for the user, REP 196, REJ 148, DREQ 220, SIDR_REQ 216 - 36, SIDR_REP 136).
#[test]
fn private_data_sizes() {
    let sizes: Vec<(&str, usize)> = layouts()
        .into_iter()
        .map(|(n, _, b)| (n, b.iter().find(|f| f.0 == "private_data").unwrap().2))
        .collect();
    assert_eq!(
        sizes,
        [
            ("Req", 92),
            ("Mra", 222),
            ("Rej", 148),
            ("Rep", 196),
            ("Rtu", 224),
            ("Dreq", 220),
            ("Drep", 224),
            ("Lap", 168),
            ("Apr", 148),
            ("SidrReq", 216),
            ("SidrRep", 136)
        ]
    );
}

fn sample_req() -> Req {
    let mut r = Req {
        local_comm_id: 0x1122_3344,
        service_id: 0x0000_0000_0106_4e21,
        local_ca_guid: 0x5254_00ff_fe12_3456,
        local_qpn: Qpn::new(0x11),
        responder_resources: 16,
        initiator_depth: 8,
        remote_cm_response_timeout: 20,
        transport_service_type: service_type::RC,
        starting_psn: Psn::new(0xabcdef),
        local_cm_response_timeout: 20,
        retry_count: 7,
        partition_key: 0xffff,
        path_mtu: 3,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: true,
        primary_local_lid: 0xffff,
        primary_remote_lid: 0xffff,
        primary_flow_label: 0xfedcb,
        primary_packet_rate: 3,
        primary_traffic_class: 0x28,
        primary_hop_limit: 64,
        primary_sl: 5,
        primary_subnet_local: true,
        primary_local_ack_timeout: 18,
        ..Req::default()
    };
    r.primary_local_gid[10..].copy_from_slice(&[0xff, 0xff, 127, 0, 0, 2]);
    r.primary_remote_gid[10..].copy_from_slice(&[0xff, 0xff, 127, 0, 0, 1]);
    r.private_data[..4].copy_from_slice(b"priv");
    r
}

/// Bytes of a REQ where the IBA table puts them (offsets into the MAD data).
#[test]
fn req_bytes_where_the_table_puts_them() {
    let mut d = [0xAAu8; LEN];
    assert_eq!(sample_req().emit(&mut d), Ok(LEN));
    assert_eq!(d[0..4], [0x11, 0x22, 0x33, 0x44]);
    assert_eq!(d[4..8], [0; 4], "reserved");
    assert_eq!(d[8..16], [0, 0, 0, 0, 0x01, 0x06, 0x4e, 0x21]);
    assert_eq!(d[32..36], [0x00, 0x00, 0x11, 16]);
    assert_eq!(d[39], 8);
    // Remote CM Response Timeout 20 (5 bits) | service type RC (2) | E2E 0.
    assert_eq!(d[43], 20 << 3);
    assert_eq!(d[44..48], [0xab, 0xcd, 0xef, (20 << 3) | 7]);
    assert_eq!(d[48..50], [0xff, 0xff]);
    // MTU 3 | RDC 0 | RNR retry 7; max CM retries 15 | SRQ 1 | ext 0.
    assert_eq!(d[50..52], [(3 << 4) | 7, (15 << 4) | (1 << 3)]);
    assert_eq!(d[56 + 10..72], [0xff, 0xff, 127, 0, 0, 2]);
    assert_eq!(d[72 + 10..88], [0xff, 0xff, 127, 0, 0, 1]);
    // Flow label 0xfedcb (20 bits), 6 reserved bits, packet rate 3.
    assert_eq!(d[88..92], [0xfe, 0xdc, 0xb0, 0x03]);
    assert_eq!(d[92..96], [0x28, 64, (5 << 4) | (1 << 3), 18 << 3]);
    assert_eq!(&d[140..144], b"priv");
    assert_eq!(Req::parse(&d), Ok(sample_req()));
}

#[test]
fn rep_and_rej_bytes() {
    let rep = Rep {
        local_comm_id: 1,
        remote_comm_id: 2,
        local_qpn: Qpn::new(0x123456),
        starting_psn: Psn::new(0x654321),
        responder_resources: 4,
        initiator_depth: 5,
        target_ack_delay: 31,
        failover_accepted: 3,
        end_to_end_flow_control: true,
        rnr_retry_count: 7,
        srq: true,
        local_ca_guid: 0x0102_0304_0506_0708,
        ..Rep::default()
    };
    let mut d = [0u8; LEN];
    rep.emit(&mut d).unwrap();
    assert_eq!(d[12..15], [0x12, 0x34, 0x56]);
    assert_eq!(d[20..23], [0x65, 0x43, 0x21]);
    assert_eq!(d[24..28], [4, 5, 0xff, 0xf0]);
    assert_eq!(d[28..36], [1, 2, 3, 4, 5, 6, 7, 8]);
    let rej = Rej {
        local_comm_id: 7,
        remote_comm_id: 9,
        message_rejected: msg_code::REP,
        reject_info_length: 16,
        reason: rej_reason::CONSUMER_DEFINED,
        ..Rej::default()
    };
    rej.emit(&mut d).unwrap();
    assert_eq!(d[8..12], [1 << 6, 16 << 1, 0, 28]);
}

#[test]
fn cm_mad_round_trip_and_refusals() {
    let m = CmMad::new(CmMessage::Req(sample_req()), 0x0102_0304_0506_0708);
    let mut out = [0u8; mad::MAD_LEN];
    assert_eq!(m.emit(&mut out), Ok(mad::MAD_LEN));
    assert_eq!(out[..4], [1, 7, 2, 3]);
    assert_eq!(out[16..18], [0x00, 0x10]);
    assert_eq!(CmMad::parse(&out), Ok(m));
    assert!(matches!(
        CmMad::parse(&out[..255]),
        Err(Error::Truncated { .. })
    ));
    for (at, v, field) in [
        (0, 2, Field::MadBaseVersion),
        (1, 0x03, Field::MadMgmtClass),
        (2, 1, Field::MadClassVersion),
        (3, mad::method::GET, Field::MadMethod),
    ] {
        let mut bad = out;
        bad[at] = v;
        assert_eq!(
            CmMad::parse(&bad),
            Err(Error::BadField {
                field,
                value: v.into()
            })
        );
    }
    for attr in [0x0001u16, 0x0000, 0x001B, 0xffff] {
        let mut bad = out;
        bad[16..18].copy_from_slice(&attr.to_be_bytes());
        assert_eq!(
            CmMad::parse(&bad),
            Err(Error::BadField {
                field: Field::MadAttributeId,
                value: attr.into()
            })
        );
    }
}

proptest! {
    /// Any 256 bytes with a CM header either parse or are refused; what parses re-emits to
    /// the same bytes except the reserved bits, and parses again to the same message.
    #[test]
    fn any_mad_parses_or_is_refused(data in proptest::collection::vec(any::<u8>(), 256),
                                    attr in 0x10u16..=0x1a) {
        let mut mad = [0u8; mad::MAD_LEN];
        mad.copy_from_slice(&data);
        mad[..4].copy_from_slice(&[1, 7, 2, 3]);
        mad[16..18].copy_from_slice(&attr.to_be_bytes());
        let m = CmMad::parse(&mad).unwrap();
        prop_assert_eq!(m.msg.attr_id() as u16, attr);
        let mut out = [0u8; mad::MAD_LEN];
        m.emit(&mut out).unwrap();
        prop_assert_eq!(CmMad::parse(&out).unwrap(), m);
        prop_assert_eq!(&out[..mad::LEN], &mad[..mad::LEN]);
        // Every byte that differs is reserved in the layout (no field's bit changed).
        let (_, fields, bytes) = layouts()
            .into_iter()
            .find(|(n, ..)| *n == format!("{:?}", AttrId::from_u16(attr).unwrap()))
            .unwrap();
        for i in 0..LEN {
            let diff = out[mad::LEN + i] ^ mad[mad::LEN + i];
            for bit in 0..8 {
                if diff & (0x80 >> bit) != 0 {
                    let pos = i * 8 + bit;
                    let in_field = fields.iter().any(|(_, l)| {
                        let s = l.byte as usize * 8 + l.bit as usize;
                        pos >= s && pos < s + l.width as usize
                    }) || bytes.iter().any(|&(_, at, len)| pos >= at * 8 && pos < (at + len) * 8);
                    prop_assert!(!in_field, "bit {} of a field changed", pos);
                }
            }
        }
    }

    /// Any slice either parses or is an error, never a panic.
    #[test]
    fn any_slice(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = CmMad::parse(&data);
        let _ = Req::parse(&data);
        let _ = SidrRep::parse(&data);
    }
}

#[test]
fn ip_cm_header_and_service_ids() {
    let h = IpCmHdr {
        version: 0,
        ip_version: 4,
        src_port: 0xc001,
        src_ip: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 99, 0, 2],
        dst_ip: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 99, 0, 3],
    };
    let v4 = |d: u8| std::net::IpAddr::from([10, 99, 0, d]);
    assert_eq!(IpCmHdr::for_ips(v4(2), v4(3), 0xc001), Some(h));
    let v6 = std::net::IpAddr::from([0xfe80, 0, 0, 0, 0, 0, 0, 1]);
    assert_eq!(IpCmHdr::for_ips(v4(2), v6, 1), None, "mixed families");
    let h6 = IpCmHdr::for_ips(v6, v6, 1).unwrap();
    assert_eq!((h6.ip_version, h6.src_ip[0], h6.dst_ip[15]), (6, 0xfe, 1));
    let mut pd = [0u8; 92];
    assert_eq!(h.emit(&mut pd), Ok(36));
    assert_eq!(pd[..4], [0x00, 0x40, 0xc0, 0x01]);
    assert_eq!(pd[16..20], [10, 99, 0, 2]);
    assert_eq!(pd[32..36], [10, 99, 0, 3]);
    assert_eq!(IpCmHdr::parse(&pd), Ok(h));
    pd[1] = 0x50;
    assert_eq!(
        IpCmHdr::parse(&pd),
        Err(Error::BadField {
            field: Field::IpCmIpVersion,
            value: 5
        })
    );
    assert!(matches!(
        IpCmHdr::parse(&pd[..35]),
        Err(Error::Truncated { .. })
    ));
    // rping's default port 7174 in the TCP port space.
    let sid = ip_service_id(port_space::TCP, 7174);
    assert_eq!(sid, 0x0000_0000_0106_1c06);
    assert_eq!(ip_service_port(sid), Some((port_space::TCP, 7174)));
    assert_eq!(ip_service_port(0x0200_0000_0106_1c06), None);
    assert_eq!(ip_service_port(0x0000_0000_0206_1c06), None);
}

#[test]
fn addressee_names_the_listener_or_the_receivers_id() {
    let mad = |msg: CmMessage| {
        let mut out = [0u8; mad::MAD_LEN];
        CmMad::new(msg, 9).emit(&mut out).unwrap();
        out
    };
    let req = sample_req();
    assert_eq!(
        addressee(&mad(CmMessage::Req(req.clone()))),
        Some(Addressee::Service(req.service_id))
    );
    let rep = Rep {
        local_comm_id: 0x0700_0001,
        remote_comm_id: 0x2a00_0005,
        ..Default::default()
    };
    assert_eq!(
        addressee(&mad(CmMessage::Rep(rep))),
        Some(Addressee::Id(0x2a00_0005))
    );
    let dreq = Dreq {
        local_comm_id: 1,
        remote_comm_id: 0x0300_0009,
        ..Default::default()
    };
    assert_eq!(
        addressee(&mad(CmMessage::Dreq(dreq))),
        Some(Addressee::Id(0x0300_0009))
    );
    let sreq = SidrReq {
        request_id: 0x0500_0002,
        service_id: 0x0106_0011_2233_4455,
        ..Default::default()
    };
    assert_eq!(
        addressee(&mad(CmMessage::SidrReq(sreq))),
        Some(Addressee::Service(0x0106_0011_2233_4455))
    );
    let srep = SidrRep {
        request_id: 0x0500_0002,
        service_id: 7,
        ..Default::default()
    };
    assert_eq!(
        addressee(&mad(CmMessage::SidrRep(srep))),
        Some(Addressee::Id(0x0500_0002))
    );
    // Not the CM class, an old class version, ClassPortInfo, too short: nobody in particular.
    let mut other = mad(CmMessage::Req(sample_req()));
    other[1] = 0x03;
    assert_eq!(addressee(&other), None);
    let mut old = mad(CmMessage::Req(sample_req()));
    old[2] = 1;
    assert_eq!(addressee(&old), None);
    let mut cpi = mad(CmMessage::Req(sample_req()));
    cpi[16..18].copy_from_slice(&1u16.to_be_bytes());
    assert_eq!(addressee(&cpi), None);
    assert_eq!(addressee(&other[..100]), None);
}
