//! `softib pcap synth`: a capture holding one packet of every opcode in softib's opcode table,
//! built by softib's own encoder (ICRC, and VCRC for native IB, computed). Useful to check a
//! dissector or a NIC model against softib, and used by softib's tests to check that tshark
//! decodes what softib writes.

use std::io;
use std::path::Path;

use softib_wire::aeth::Aeth;
use softib_wire::atomic_ack_eth::AtomicAckEth;
use softib_wire::atomic_eth::AtomicEth;
use softib_wire::bth::Bth;
use softib_wire::deth::Deth;
use softib_wire::ethernet::Ethernet;
use softib_wire::feth::Feth;
use softib_wire::grh::Grh;
use softib_wire::ieth::Ieth;
use softib_wire::immdt::ImmDt;
use softib_wire::ipv4::Ipv4;
use softib_wire::lrh::{Lnh, Lrh};
use softib_wire::native::{self, NativeBody};
use softib_wire::opcode::{ExtHeaders, OpcodeInfo, ROWS};
use softib_wire::pcap::{PcapWriter, LINKTYPE_ETHERNET, LINKTYPE_USER0};
use softib_wire::rdeth::Rdeth;
use softib_wire::reth::Reth;
use softib_wire::roce::{self, IpHeader};
use softib_wire::rwh::Rwh;
use softib_wire::transport::{TransportHeaders, TransportPacket};
use softib_wire::xrceth::Xrceth;
use softib_wire::{Eecn, Msn, Psn, Qpn, XrcSrqn};

/// Framing of the synthesised capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Framing {
    /// RoCEv2 over IPv4 (Ethernet link type).
    Ipv4,
    /// RoCEv2 over IPv6 (Ethernet link type).
    Ipv6,
    /// Native IB, LRH first (DLT_USER0), alternating local and global (GRH) packets, plus one
    /// raw IPv6 and one raw EtherType datagram.
    Native,
}

/// Deterministic headers for the `i`-th row of the opcode table.
fn headers_for(i: usize, info: &OpcodeInfo) -> TransportHeaders {
    let n = i as u32;
    let mut h = TransportHeaders::new(Bth {
        opcode: info.opcode,
        solicited: info.ends_message() && i % 3 == 0,
        pkey: 0xffff,
        dest_qp: Qpn::new(0x11 + n % 4),
        ack_req: info.ends_message(),
        psn: Psn::new(0x10_0000 + n),
        ..Bth::default()
    });
    let f = info.headers;
    if f.contains(ExtHeaders::RDETH) {
        h.rdeth = Some(Rdeth {
            eecn: Eecn::new(0x42),
            ..Rdeth::default()
        });
    }
    if f.contains(ExtHeaders::DETH) {
        h.deth = Some(Deth {
            qkey: 0x1111_1111,
            src_qp: Qpn::new(0x22),
            ..Deth::default()
        });
    }
    if f.contains(ExtHeaders::XRCETH) {
        h.xrceth = Some(Xrceth {
            xrcsrq: XrcSrqn::new(0x33),
            ..Xrceth::default()
        });
    }
    if f.contains(ExtHeaders::FETH) {
        h.feth = Some(Feth {
            sel: 1,
            plt: 1,
            ..Feth::default()
        });
    }
    if f.contains(ExtHeaders::RETH) {
        h.reth = Some(Reth {
            va: 0x5555_0000_0000 + 0x1000 * u64::from(n),
            rkey: 0x0bfd + n,
            dma_len: 4096,
        });
    }
    if f.contains(ExtHeaders::AETH) {
        h.aeth = Some(Aeth {
            syndrome: 0x1f,
            msn: Msn::new(n),
        });
    }
    if f.contains(ExtHeaders::ATOMIC_ETH) {
        h.atomic_eth = Some(AtomicEth {
            va: 0x5555_0000_0000,
            rkey: 0x1239,
            swap_add: 1,
            compare: u64::from(n),
        });
    }
    if f.contains(ExtHeaders::ATOMIC_ACK_ETH) {
        h.atomic_ack_eth = Some(AtomicAckEth {
            orig_remote_data: u64::from(n) << 8,
        });
    }
    if f.contains(ExtHeaders::IMMDT) {
        h.immdt = Some(ImmDt {
            imm: 0xdead_0000 | n,
        });
    }
    if f.contains(ExtHeaders::IETH) {
        h.ieth = Some(Ieth { rkey: 0x0bfd });
    }
    if f.contains(ExtHeaders::CNP_RESERVED) {
        h.cnp_reserved = Some([0; softib_wire::transport::CNP_RESERVED_LEN]);
    }
    h
}

/// Payload for the `i`-th packet: lengths vary so that every PadCnt value occurs.
fn payload_for(i: usize, info: &OpcodeInfo) -> Vec<u8> {
    if !info.payload {
        return Vec::new();
    }
    let len = match info.position {
        softib_wire::Position::First | softib_wire::Position::Middle => 256,
        _ => 1 + (i * 37) % 255,
    };
    (0..len)
        .map(|k| (k as u8).wrapping_mul(7).wrapping_add(i as u8))
        .collect()
}

fn gid(last: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..2].copy_from_slice(&[0xfe, 0x80]);
    g[15] = last;
    g
}

/// Writes the capture; returns the number of packets written.
pub fn write(path: &Path, framing: Framing) -> io::Result<usize> {
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let link = if framing == Framing::Native {
        LINKTYPE_USER0
    } else {
        LINKTYPE_ETHERNET
    };
    let mut w = PcapWriter::new(file, link)?;
    let mut buf = vec![0u8; 8192];
    let mut count = 0;
    let err = |e: softib_wire::Error| io::Error::new(io::ErrorKind::InvalidData, e);
    for (i, info) in ROWS.iter().enumerate() {
        let payload = payload_for(i, info);
        let t = TransportPacket::new(headers_for(i, info), &payload);
        let n = match framing {
            Framing::Ipv4 | Framing::Ipv6 => {
                let eth = Ethernet {
                    dst: [0x52, 0x54, 0x00, 0x62, 0x00, 0x11],
                    src: [0x52, 0x54, 0x00, 0x61, 0x00, 0x11],
                    ..Ethernet::default()
                };
                let ip = if framing == Framing::Ipv4 {
                    IpHeader::V4(Ipv4 {
                        ttl: 64,
                        flags: 0b010,
                        ident: i as u16,
                        src: [10, 99, 0, 2],
                        dst: [10, 99, 0, 3],
                        ..Ipv4::default()
                    })
                } else {
                    IpHeader::V6(Grh {
                        hop_lmt: 64,
                        sgid: gid(2),
                        dgid: gid(3),
                        ..Grh::default()
                    })
                };
                roce::build(&eth, &ip, 0xc000 | (i as u16 & 0x3fff), &t, &mut buf).map_err(err)?
            }
            Framing::Native => {
                let lrh = Lrh {
                    sl: 0,
                    dlid: 0x0003,
                    slid: 0x0002,
                    ..Lrh::default()
                };
                let grh = Grh {
                    hop_lmt: 64,
                    sgid: gid(2),
                    dgid: gid(3),
                    ..Grh::default()
                };
                let g = (i % 2 == 1).then_some(&grh);
                native::build(&lrh, g, &t, &mut buf).map_err(err)?
            }
        };
        w.write_record(count as u64 * 1_000, &buf[..n])?;
        count += 1;
    }
    if framing == Framing::Native {
        // One raw datagram of each kind (seed 002): an IPv6/UDP packet and an IPv4 packet
        // carried by EtherType 0x0800. Payloads are whole words (o9-145).
        let lrh = Lrh {
            dlid: 0x0003,
            slid: 0x0002,
            lnh: Lnh::Raw,
            ..Lrh::default()
        };
        let udp: Vec<u8> = [0x30, 0x39, 0x30, 0x39, 0x00, 0x10, 0x00, 0x00]
            .into_iter()
            .chain(*b"softib raw\0\0\0\0\0\0")
            .take(16)
            .collect();
        let ipv6 = Grh {
            nxt_hdr: 17,
            hop_lmt: 64,
            sgid: gid(2),
            dgid: gid(3),
            ..Grh::default()
        };
        let bodies = [
            NativeBody::RawIpv6 {
                ipv6,
                payload: &udp,
            },
            NativeBody::RawEthertype {
                rwh: Rwh {
                    ether_type: 0x88b5,
                    ..Rwh::default()
                },
                payload: b"softib raw EtherType datagram\0\0\0",
            },
        ];
        for body in &bodies {
            let n = native::build_raw(&lrh, body, &mut buf).map_err(err)?;
            w.write_record(count as u64 * 1_000, &buf[..n])?;
            count += 1;
        }
    }
    std::io::Write::flush(&mut w.into_inner())?;
    Ok(count)
}
