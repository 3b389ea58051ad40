//! The express paths for common packets (`Hca::set_express_path`) are an optimisation only: a
//! workload run with them and without them, on the same seeded lossy fabric, puts the same
//! frames on the wire in the same order, completes the same work requests with the same
//! results on both sides and leaves the same bytes in both memories.
//!
//! The workloads mix what the paths take (one-packet SENDs and RDMA WRITEs, with and without
//! immediate data, inline or from one SGE, zero-length ones, solicited ones; READs of one
//! response packet, COMPARE_SWAPs and FETCH_ADDs, their responses) with everything they
//! leave to the general path (several SGEs, messages and READs longer than the MTU, fences
//! behind READs, SENDs waiting for credit, receive WQEs with two scatter entries, duplicates
//! and retried READs, and in the last round bad L_Keys and R_Keys and too short receive
//! buffers), under loss, so that each kind of request meets retransmission and credit waits
//! beside the others.

mod common;
mod lossy;

use common::{socket_port, with_udp_socket_ports, Dir, Pair, Svc, IP_A, IP_B, MR_LEN};
use lossy::Rng;
use softib_core::setup::ConnectOptions;
use softib_core::verbs::types::{Mtu, SendFlags};
use softib_core::verbs::wr::{RecvWr, RemoteAddr, SendWr, Sge, WrOpcode};
use softib_core::{gid_of_ipv4, mac_for_gid, Transmitted};
use softib_wire::roce::RocePacket;

/// A number below `n` from the shared generator.
fn below(rng: &mut Rng, n: u64) -> u64 {
    rng.next() % n
}

/// What a run leaves behind: every frame delivered (with its direction), both sides'
/// completions (as their debug text) and both memories.
struct Outcome {
    frames: Vec<(Dir, Vec<u8>)>,
    a_wcs: Vec<String>,
    b_wcs: Vec<String>,
    a_mem: Vec<u8>,
    b_mem: Vec<u8>,
    /// Requests A's requester built on the express path, and requests B's responder took on
    /// it.
    express: (u64, u64),
}

/// How a run moves packets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Express paths off: every packet the general way.
    General,
    /// Express paths on, frames one at a time (`poll_transmit`).
    Express,
    /// Express paths on, both HCAs configured as over a UDP socket, the senders polled with
    /// `poll_transmit_batched`: datagrams (several at a time) or frames, the datagrams turned
    /// into the frames a UDP driver's receiver rebuilds, and received as it hands them over
    /// (the datagram where it lies first).
    Batched,
}

/// Runs workload `seed` with the express path on or off on both sides, dropping frames at
/// `loss_per_mille`; the workload and the losses depend only on the seed.
fn run(seed: u64, express: bool, loss_per_mille: u64) -> Outcome {
    run_mode(
        seed,
        if express {
            Mode::Express
        } else {
            Mode::General
        },
        loss_per_mille,
    )
}

/// [`run`] in `mode`.
fn run_mode(seed: u64, mode: Mode, loss_per_mille: u64) -> Outcome {
    let express = mode != Mode::General;
    let opts = ConnectOptions {
        path_mtu: Mtu::Mtu256,
        max_rd_atomic: 2,
        max_dest_rd_atomic: 2,
        timeout: 10,
        ..ConnectOptions::default()
    };
    let psn_a = 0xff_fff0 ^ (seed as u32 & 0xf);
    let mut p = match mode {
        Mode::Batched => with_udp_socket_ports(|| Pair::new_svc(Svc::Rc, psn_a, 0x10, opts)),
        _ => Pair::new_svc(Svc::Rc, psn_a, 0x10, opts),
    };
    let mut bursts = Bursts::default();
    p.a.hca.set_express_path(express);
    p.b.hca.set_express_path(express);
    let mut loss = Rng(seed ^ 0x5555);
    p.filter = Box::new(move |_, _| below(&mut loss, 1000) >= loss_per_mille);
    let pattern: Vec<u8> = (0..MR_LEN)
        .map(|i| (i * 31 + seed as usize) as u8)
        .collect();
    p.a.hca.mr_write(p.a.mr.handle, 0, &pattern).unwrap();
    let (amr, bmr) = (p.a.mr, p.b.mr);
    let mut rng = Rng(seed);
    let mut id = 0u64;
    let mut src = 0u64;
    let mut dst = 0u64;
    for round in 0..12 {
        let mut batch = Vec::new();
        for _ in 0..(1 + below(&mut rng, 10)) {
            id += 1;
            let short = below(&mut rng, 4) != 0;
            let len = if short {
                below(&mut rng, 257) as u32
            } else {
                below(&mut rng, 1200) as u32
            };
            let remote = RemoteAddr {
                addr: bmr.addr + (dst % (256 * 1024)),
                // In the last round, now and then a bad R_Key: NAK-Remote Access Error.
                rkey: if round == 11 && below(&mut rng, 6) == 0 {
                    bmr.rkey ^ 0x100
                } else {
                    bmr.rkey
                },
            };
            dst += u64::from(len) + 8;
            let opcode = match below(&mut rng, 10) {
                0..=2 => WrOpcode::Send,
                3 => WrOpcode::SendWithImm(id as u32),
                4..=6 => WrOpcode::RdmaWrite { remote },
                7 => WrOpcode::RdmaWriteWithImm {
                    remote,
                    imm: id as u32,
                },
                8 => WrOpcode::RdmaRead { remote },
                _ if id % 2 == 0 => WrOpcode::AtomicFetchAdd {
                    remote_addr: bmr.addr + 8 * below(&mut rng, 16),
                    rkey: bmr.rkey,
                    add: id,
                },
                // Compared with 0 (a slot nothing has written yet holds it) or the WR's id.
                _ => WrOpcode::AtomicCmpSwp {
                    remote_addr: bmr.addr + 8 * below(&mut rng, 16),
                    rkey: bmr.rkey,
                    compare: below(&mut rng, 2) * id,
                    swap: id << 8,
                },
            };
            let atomic = matches!(
                opcode,
                WrOpcode::AtomicFetchAdd { .. } | WrOpcode::AtomicCmpSwp { .. }
            );
            let len = if atomic { 8 } else { len };
            let at = amr.addr + (src % (256 * 1024));
            src += u64::from(len) + 8;
            let local = if matches!(opcode, WrOpcode::RdmaRead { .. }) || atomic {
                amr.addr + 768 * 1024 + (id * 2048) % (128 * 1024)
            } else {
                at
            };
            let mut wr = SendWr::new(id, opcode);
            let writes_local = matches!(opcode, WrOpcode::RdmaRead { .. }) || atomic;
            wr = match below(&mut rng, 8) {
                // Inline data (up to the QP's 64 bytes).
                0 if !writes_local && len <= 64 => {
                    let off = (at - amr.addr) as usize;
                    wr.with_inline(pattern[off..off + len as usize].to_vec())
                        .with_flags(SendFlags::INLINE)
                }
                // Two SGEs.
                1 if len >= 2 => wr.with_sg_list(vec![
                    Sge {
                        addr: local,
                        length: len / 2,
                        lkey: amr.lkey,
                    },
                    Sge {
                        addr: local + u64::from(len / 2),
                        length: len - len / 2,
                        lkey: amr.lkey,
                    },
                ]),
                // A bad L_Key in the last round: a local protection error (the QP then
                // enters ERR and flushes the rest).
                2 if round == 11 && below(&mut rng, 4) == 0 => wr.with_sge(Sge {
                    addr: local,
                    length: len,
                    lkey: amr.lkey ^ 0x100,
                }),
                _ => wr.with_sge(Sge {
                    addr: local,
                    length: len,
                    lkey: amr.lkey,
                }),
            };
            let mut flags = wr.flags;
            if below(&mut rng, 4) == 0 {
                flags |= SendFlags::SIGNALED;
            }
            if below(&mut rng, 6) == 0 {
                flags |= SendFlags::SOLICITED;
            }
            if below(&mut rng, 8) == 0 {
                flags |= SendFlags::FENCE;
            }
            batch.push(wr.with_flags(flags));
        }
        // B's receive WQEs: one per message that consumes one, and a few spare.
        let consumers = batch
            .iter()
            .filter(|w| {
                matches!(
                    w.opcode,
                    WrOpcode::Send | WrOpcode::SendWithImm(_) | WrOpcode::RdmaWriteWithImm { .. }
                )
            })
            .count() as u64;
        let wrs: Vec<RecvWr> = (0..consumers + below(&mut rng, 3))
            .map(|i| {
                let addr = bmr.addr + 512 * 1024 + (((id + i) * 2048) % (256 * 1024));
                let sge = |at: u64, length: u32| Sge {
                    addr: addr + at,
                    length,
                    lkey: bmr.lkey,
                };
                let sges = match below(&mut rng, 6) {
                    // Two scatter entries.
                    0 => vec![sge(0, 700), sge(1024, 1024)],
                    // In the last round, a buffer too short for most messages: a local
                    // length error (the QP then enters ERR).
                    1 if round == 11 => vec![sge(0, 16)],
                    _ => vec![sge(0, 2048)],
                };
                RecvWr::new(1000 + id + i, sges)
            })
            .collect();
        p.b.hca.post_recv(p.b.qpn, &wrs).unwrap();
        p.a.hca.post_send(p.a.qpn, &batch).unwrap();
        drive(&mut p, mode, &mut bursts);
    }
    drive(&mut p, mode, &mut bursts);
    if mode == Mode::Batched {
        // The comparison means something only if datagrams went, several at a time.
        assert!(
            bursts.datagrams > bursts.calls && bursts.frames > 0,
            "seed {seed}: {bursts:?}"
        );
    }
    let a_wcs = p.a.hca.poll_cq(p.a.cq, 4096).unwrap_or_default();
    let b_wcs = p.b.hca.poll_cq(p.b.cq, 4096).unwrap_or_default();
    let mut a_mem = vec![0u8; MR_LEN];
    let mut b_mem = vec![0u8; MR_LEN];
    let _ = p.a.hca.mr_read(p.a.mr.handle, 0, &mut a_mem);
    let _ = p.b.hca.mr_read(p.b.mr.handle, 0, &mut b_mem);
    Outcome {
        frames: std::mem::take(&mut p.log),
        a_wcs: a_wcs.iter().map(|w| format!("{w:?}")).collect(),
        b_wcs: b_wcs.iter().map(|w| format!("{w:?}")).collect(),
        a_mem,
        b_mem,
        express: (
            p.a.hca.counters().express_requests,
            p.b.hca.counters().express_requests,
        ),
    }
}

/// Hands `frame` to `hca` as a UDP driver's receiver does: a frame whose ICRC it verified
/// (all of them here) as its datagram first (`Hca::handle_v4_datagram_verified`), then, if
/// the express path declines that, as the frame (`Hca::handle_frame_declined`).
fn receive_as_udp(hca: &mut softib_core::Hca, now: softib_core::time::Instant, frame: &[u8]) {
    let verified = RocePacket::parse(frame).is_ok_and(|p| p.icrc_ok());
    // Untagged IPv4 without options: the UDP datagram at byte 42, its length at byte 38.
    let datagram = frame
        .get(38..40)
        .map(|l| usize::from(u16::from_be_bytes([l[0], l[1]])))
        .and_then(|udp_len| frame.get(42..34 + udp_len));
    match datagram {
        Some(d) if verified => {
            let src = frame[26..30].try_into().unwrap();
            let dst = frame[30..34].try_into().unwrap();
            if !hca.handle_v4_datagram_verified(now, src, dst, d) {
                hca.handle_frame_declined(now, frame);
            }
        }
        _ => hca.handle_frame(now, frame),
    }
}

/// What the batched runs sent: calls that gave datagrams, the datagrams, the frames.
#[derive(Debug, Default)]
struct Bursts {
    calls: u64,
    datagrams: u64,
    frames: u64,
}

/// Moves packets until both sides are idle (`Pair::run`, or its batched form).
fn drive(p: &mut Pair, mode: Mode, bursts: &mut Bursts) {
    if mode == Mode::Batched {
        run_batched(p, u64::MAX / 4, bursts);
    } else {
        p.run(u64::MAX / 4);
    }
}

/// `Pair::run` with the senders polled as a UDP driver polls them
/// (`Hca::poll_transmit_batched`, up to 16 datagrams a call).
fn run_batched(p: &mut Pair, limit_ns: u64, bursts: &mut Bursts) {
    let (mut frame, mut bytes, mut starts) = (Vec::new(), Vec::new(), Vec::new());
    loop {
        let mut moved = false;
        for dir in [Dir::AtoB, Dir::BtoA] {
            loop {
                let (from, to, src, dst, node) = match dir {
                    Dir::AtoB => (&mut p.a, &mut p.b, IP_A, IP_B, 1),
                    Dir::BtoA => (&mut p.b, &mut p.a, IP_B, IP_A, 2),
                };
                // What the batch held before stays as it was.
                bytes.clear();
                bytes.extend_from_slice(&[0xa5; 7]);
                let frames: Vec<Vec<u8>> = match from.hca.poll_transmit_batched(
                    p.now,
                    &mut frame,
                    &mut bytes,
                    &mut starts,
                    16,
                ) {
                    Transmitted::Nothing => break,
                    Transmitted::Frame => {
                        bursts.frames += 1;
                        vec![frame.clone()]
                    }
                    Transmitted::Datagrams { dst: to_ip } => {
                        assert_eq!(to_ip, dst);
                        assert_eq!(&bytes[..7], &[0xa5; 7]);
                        assert!(!starts.is_empty() && starts.len() <= 16);
                        assert_eq!(starts[0], 7);
                        bursts.calls += 1;
                        bursts.datagrams += starts.len() as u64;
                        (0..starts.len())
                            .map(|k| {
                                let end = starts.get(k + 1).copied().unwrap_or(bytes.len());
                                frame_of_datagram(
                                    src,
                                    socket_port(node),
                                    dst,
                                    &bytes[starts[k]..end],
                                )
                            })
                            .collect()
                    }
                };
                moved = true;
                for f in frames {
                    if (p.filter)(dir, &f) {
                        p.log.push((dir, f.clone()));
                        receive_as_udp(&mut to.hca, p.now, &f);
                    }
                }
            }
        }
        if moved {
            continue;
        }
        let next = [p.a.hca.poll_timeout(), p.b.hca.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        match next {
            Some(t) if t.as_nanos() <= limit_ns => {
                p.now = p.now.max(t);
                p.a.hca.handle_timeout(p.now);
                p.b.hca.handle_timeout(p.now);
            }
            _ => return,
        }
    }
}

/// The frame a UDP driver rebuilds around a datagram from `src`:`sport` to `dst`:4791: MAC
/// addresses from the GIDs, IPv4 without options, Identification 0, DF, TTL 64, UDP checksum
/// 0.
fn frame_of_datagram(src: [u8; 4], sport: u16, dst: [u8; 4], datagram: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&mac_for_gid(&gid_of_ipv4(dst)));
    f.extend_from_slice(&mac_for_gid(&gid_of_ipv4(src)));
    f.extend_from_slice(&[0x08, 0x00]);
    let udp_len = (8 + datagram.len()) as u16;
    let total = 20 + udp_len;
    let mut ip = [0u8; 20];
    ip[..4].copy_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8]);
    ip[6..10].copy_from_slice(&[0x40, 0, 64, 17]);
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let sum = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&4791u16.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(datagram);
    f.resize(f.len().max(60), 0);
    f
}

/// Requires runs `a` and `b` (named `names`) of `seed` to have put the same frames on the
/// wire in the same order, completed the same work and left the same memories, pointing at
/// the first difference.
fn same(seed: u64, (a, b): (&Outcome, &Outcome), names: (&str, &str)) {
    if let Some(i) =
        (0..a.frames.len().max(b.frames.len())).find(|&i| a.frames.get(i) != b.frames.get(i))
    {
        panic!(
            "seed {seed}: frame {i} differs\n{}: {:02x?}\n{}: {:02x?}",
            names.0,
            a.frames.get(i),
            names.1,
            b.frames.get(i)
        );
    }
    assert_eq!(a.a_wcs, b.a_wcs, "seed {seed}: A's completions");
    assert_eq!(a.b_wcs, b.b_wcs, "seed {seed}: B's completions");
    assert!(a.a_mem == b.a_mem, "seed {seed}: A's memory");
    assert!(a.b_mem == b.b_mem, "seed {seed}: B's memory");
}

/// Compares the two runs of `seed`, pointing at the first difference.
fn check(seed: u64, loss_per_mille: u64) {
    let on = run(seed, true, loss_per_mille);
    let off = run(seed, false, loss_per_mille);
    same(seed, (&on, &off), ("express", "general"));
    // The comparison means something only if both paths were taken.
    assert_eq!(off.express, (0, 0));
    let (sent, taken) = on.express;
    assert!(
        sent > 0 && taken > 0,
        "seed {seed}: {sent} / {taken} express requests"
    );
    let requests = on
        .frames
        .iter()
        .filter(|(d, f)| *d == Dir::AtoB && f.len() > 42 && f[42] < 0x0d)
        .count() as u64;
    assert!(
        requests > sent && requests > taken,
        "seed {seed}: no request took the general path"
    );
}

#[test]
fn express_path_changes_nothing_on_a_lossless_fabric() {
    for seed in 0..200 {
        check(seed, 0);
    }
}

#[test]
fn express_path_changes_nothing_under_loss() {
    for seed in 1000..1200 {
        check(seed, 30);
    }
}

/// The same workloads over UDP-socket HCAs, their senders polled as a UDP driver polls them
/// (`poll_transmit_batched`) and one frame at a time: the same packets in the same order (a
/// datagram is its frame's UDP payload), completions and memories.
fn check_batched(seed: u64, loss_per_mille: u64) {
    let batched = run_mode(seed, Mode::Batched, loss_per_mille);
    let frames = with_udp_socket_ports(|| run_mode(seed, Mode::Express, loss_per_mille));
    same(seed, (&batched, &frames), ("batched", "frames"));
    assert_eq!(
        batched.express, frames.express,
        "seed {seed}: express counts"
    );
}

#[test]
fn batched_datagrams_change_nothing_on_a_lossless_fabric() {
    for seed in 0..200 {
        check_batched(seed, 0);
    }
}

#[test]
fn batched_datagrams_change_nothing_under_loss() {
    for seed in 1000..1200 {
        check_batched(seed, 30);
    }
}
