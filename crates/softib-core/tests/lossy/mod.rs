//! Operation mixes from A to B under seeded loss on both directions, for the reliable services
//! (`rc_lossy.rs`, `xrc_lossy.rs`, `rd_lossy.rs`): every operation completes exactly once, in
//! order, with intact data, or the QP reports an error completion — never a silent loss or a
//! duplicate delivery.
//!
//! Each operation goes to one of B's receive queues ("destinations"): on RC there is one, B's
//! QP; on XRC there are two XRC SRQs of B's domain, each in its own protection domain with its
//! own CQ and its own memory region, and each operation names one of them in its XRCETH (its
//! RDMA and atomic targets are in that SRQ's region). Receives are checked per destination:
//! every message that consumes a receive WQE completes in its destination's CQ exactly once,
//! in posting order, with its length and immediate data.
//!
//! RD has a runner of its own, [`run_rd`]: several RD QPs on each side, all sharing one pair of
//! EE contexts, where order holds per (sending QP, EE context) and one QP's failure must not
//! touch the others.

// Each test crate that includes this module uses part of it.
#![allow(dead_code)]

use crate::common::{Pair, Svc, MR_LEN};
use softib_core::setup::ConnectOptions;
use softib_core::verbs::mr::MrInfo;
use softib_core::verbs::srq::SrqInitAttr;
use softib_core::verbs::types::{AccessFlags, Mtu, WcOpcode, WcStatus};
use softib_core::verbs::wr::{RecvWr, RemoteAddr, SendWr, Sge, WrOpcode};
use softib_core::verbs::{CqHandle, SrqHandle};

/// SplitMix64: the tests' own deterministic generator.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 > 1.0 - p
    }
}

/// One operation A posts (lengths in bytes).
#[derive(Debug, Clone, Copy)]
pub enum Op {
    Send(u32),
    SendImm(u32),
    Write(u32),
    WriteImm(u32),
    Read(u32),
    /// FETCH_ADD of this value.
    Faa(u64),
    /// COMPARE_SWAP swapping in this value; it compares with the value the word holds then
    /// when the value is even (and succeeds), with something else when odd (and fails).
    Cas(u64),
}

/// Case count: `PROPTEST_CASES` when set (for long soak runs), else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A receive queue of B with the CQ its receives complete on and the region the RDMA and
/// atomic operations sent to it use.
struct Dest {
    /// XRC: the SRQ (and its number, for the XRCETH); RC: B's QP's own receive queue.
    srq: Option<(SrqHandle, u32)>,
    cq: CqHandle,
    mr: MrInfo,
}

/// What to check of one operation once it has completed successfully.
enum Check {
    /// `len` bytes of A's source at `src` arrived at byte `dst` of destination `k`'s region.
    AtB {
        k: usize,
        dst: u64,
        src: u64,
        len: usize,
    },
    /// READ: `len` bytes of B's pattern at `src` arrived at byte `dst` of A's region.
    AtA { dst: u64, src: u64, len: usize },
    /// ATOMIC: the original value returned at byte `dst` of A's region.
    Atomic { dst: u64, orig: u64 },
}

/// Offset of the word the atomics work on, in every destination's region.
const ATOMIC_AT: u64 = 200 * 1024;

/// B's destinations: RC, B's QP; XRC, the harness's XRC SRQ (B's PD, CQ and region) and a
/// second XRC SRQ of the same domain in a new PD, with a new CQ and a new region.
fn destinations(p: &mut Pair) -> Vec<Dest> {
    let b = &mut p.b;
    let mut v = vec![Dest {
        srq: b.srq.map(|s| (s, b.hca.srq_num(s).unwrap())),
        cq: b.cq,
        mr: b.mr,
    }];
    if p.svc == Svc::Xrc {
        let pd = b.hca.alloc_pd().unwrap();
        let cq = b.hca.create_cq(4096).unwrap();
        let xrcd = b.hca.qp(b.qpn).unwrap().xrcd().unwrap();
        let attr = SrqInitAttr {
            max_wr: 1024,
            max_sge: 1,
            srq_limit: 0,
        };
        let srq = b.hca.create_xrc_srq(pd, xrcd, cq, &attr).unwrap();
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let mr = b.hca.reg_mr(pd, vec![0u8; MR_LEN], access, None).unwrap();
        v.push(Dest {
            srq: Some((srq, b.hca.srq_num(srq).unwrap())),
            cq,
            mr,
        });
    }
    v
}

/// Immediate data of operation `id`.
fn imm(op: Op, id: u64) -> Option<u32> {
    match op {
        Op::SendImm(_) => Some(0x5e00_0000 | id as u32),
        Op::WriteImm(_) => Some(0x3e00_0000 | id as u32),
        _ => None,
    }
}

/// Runs `ops` from A to B on a `svc` pair, operation i going to destination `ops[i].1` (modulo
/// the number of destinations), with frames dropped at rate `loss`; checks the invariants and
/// returns how many operations succeeded.
pub fn run(svc: Svc, ops: &[(Op, usize)], loss: f64, seed: u64, mtu: Mtu) -> usize {
    let opts = ConnectOptions {
        path_mtu: mtu,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        timeout: 10,
        ..ConnectOptions::default()
    };
    let mut p = Pair::new_svc(svc, 0xfff000 ^ (seed as u32 & 0xfff), 77, opts);
    let mut rng = Rng(seed);
    p.filter = Box::new(move |d, f| {
        let keep = !rng.chance(loss);
        if std::env::var("TRACE").is_ok() {
            let q = softib_wire::roce::RocePacket::parse(f).unwrap();
            let b = q.transport.headers.bth;
            eprintln!(
                "{:?} {} {:#x} len={} aeth={:?} {}",
                d,
                b.opcode,
                b.psn.value(),
                q.transport.payload.len(),
                q.transport.headers.aeth.map(|a| a.syndrome),
                if keep { "" } else { "DROPPED" }
            );
        }
        keep
    });
    let dests = destinations(&mut p);
    // A's region: source data for SEND/WRITE at 0.., READ/ATOMIC results at 512 KiB..; B's
    // regions: READ source at 0.., WRITE targets and SEND buffers at 256 KiB.., the atomic
    // word at 200 KiB.
    let src: Vec<u8> = (0..(256 * 1024))
        .map(|i| (i as u64 * 7 + seed) as u8)
        .collect();
    p.a.hca.mr_write(p.a.mr.handle, 0, &src).unwrap();
    for d in &dests {
        p.b.hca.mr_write(d.mr.handle, 0, &src).unwrap();
        p.b.hca
            .mr_write(d.mr.handle, ATOMIC_AT as usize, &0u64.to_le_bytes())
            .unwrap();
    }
    let amr = p.a.mr;
    let mut wrs = Vec::new();
    let mut recvs: Vec<Vec<RecvWr>> = dests.iter().map(|_| Vec::new()).collect();
    let mut src_off = 0u64;
    let mut res_off = 512 * 1024u64;
    let mut dst_off = 256 * 1024u64;
    let mut word = vec![0u64; dests.len()];
    let mut checks = Vec::new();
    for (i, &(op, k)) in ops.iter().enumerate() {
        let id = i as u64 + 1;
        let k = k % dests.len();
        let bmr = dests[k].mr;
        let remote = RemoteAddr {
            addr: bmr.addr + dst_off,
            rkey: bmr.rkey,
        };
        let (opcode, len) = match op {
            Op::Send(len) => (WrOpcode::Send, len),
            Op::SendImm(len) => (WrOpcode::SendWithImm(imm(op, id).unwrap()), len),
            Op::Write(len) => (WrOpcode::RdmaWrite { remote }, len),
            Op::WriteImm(len) => {
                let imm = imm(op, id).unwrap();
                (WrOpcode::RdmaWriteWithImm { remote, imm }, len)
            }
            Op::Read(len) => {
                let remote = RemoteAddr {
                    addr: bmr.addr + (i as u64 * 13) % 4096,
                    rkey: bmr.rkey,
                };
                (WrOpcode::RdmaRead { remote }, len)
            }
            Op::Faa(add) => {
                let remote_addr = bmr.addr + ATOMIC_AT;
                let (rkey, orig) = (bmr.rkey, word[k]);
                word[k] = orig.wrapping_add(add);
                checks.push(Check::Atomic { dst: res_off, orig });
                (
                    WrOpcode::AtomicFetchAdd {
                        remote_addr,
                        rkey,
                        add,
                    },
                    8,
                )
            }
            Op::Cas(swap) => {
                let remote_addr = bmr.addr + ATOMIC_AT;
                let (rkey, orig) = (bmr.rkey, word[k]);
                let compare = if swap % 2 == 0 { orig } else { orig ^ 1 };
                if compare == orig {
                    word[k] = swap;
                }
                checks.push(Check::Atomic { dst: res_off, orig });
                (
                    WrOpcode::AtomicCmpSwp {
                        remote_addr,
                        rkey,
                        compare,
                        swap,
                    },
                    8,
                )
            }
        };
        let local = match op {
            Op::Send(_) | Op::SendImm(_) | Op::Write(_) | Op::WriteImm(_) => {
                checks.push(Check::AtB {
                    k,
                    dst: dst_off,
                    src: src_off,
                    len: len as usize,
                });
                let at = src_off;
                src_off += u64::from(len);
                at
            }
            Op::Read(_) => {
                checks.push(Check::AtA {
                    dst: res_off,
                    src: (i as u64 * 13) % 4096,
                    len: len as usize,
                });
                let at = res_off;
                res_off += u64::from(len) + 64;
                at
            }
            Op::Faa(_) | Op::Cas(_) => {
                let at = res_off;
                res_off += 64;
                at
            }
        };
        if matches!(op, Op::Send(_) | Op::SendImm(_) | Op::WriteImm(_)) {
            // The message consumes a receive WQE of its destination.
            let sge = Sge {
                addr: bmr.addr + dst_off,
                length: len.max(1),
                lkey: bmr.lkey,
            };
            recvs[k].push(RecvWr::new(id, vec![sge]));
        }
        if matches!(
            op,
            Op::Send(_) | Op::SendImm(_) | Op::Write(_) | Op::WriteImm(_)
        ) {
            dst_off += u64::from(len) + 64;
        }
        let sge = Sge {
            addr: amr.addr + local,
            length: len,
            lkey: amr.lkey,
        };
        let wr = SendWr::new(id, opcode).with_sge(sge).signaled();
        wrs.push(match dests[k].srq {
            Some((_, srqn)) => wr.with_xrc_srqn(srqn),
            None => wr,
        });
    }
    for (d, r) in dests.iter().zip(&recvs) {
        if r.is_empty() {
            continue;
        }
        match d.srq {
            Some((srq, _)) => p.b.hca.post_srq_recv(srq, r).unwrap(),
            None => p.b.hca.post_recv(p.b.qpn, r).unwrap(),
        }
    }
    for chunk in wrs.chunks(16) {
        p.a.hca.post_send(p.a.qpn, chunk).unwrap();
        p.run(u64::MAX / 4);
    }
    p.run(u64::MAX / 4);

    let wcs = p.a.hca.poll_cq(p.a.cq, 4096).unwrap();
    let statuses: Vec<_> = wcs.iter().map(|w| w.status).collect();
    if statuses.iter().any(|s| *s != WcStatus::Success) {
        // An error completion is allowed only as retry exhaustion, and then everything after
        // it is flushed; nothing completes twice.
        let first_err = statuses
            .iter()
            .position(|s| *s != WcStatus::Success)
            .unwrap();
        assert_eq!(statuses[first_err], WcStatus::RetryExcErr, "{statuses:?}");
        assert!(statuses[first_err + 1..]
            .iter()
            .all(|s| *s == WcStatus::WrFlushErr));
    }
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(
        ids,
        (1..=ops.len() as u64).collect::<Vec<_>>(),
        "each WR completes once, in order"
    );
    let ok = statuses
        .iter()
        .take_while(|s| **s == WcStatus::Success)
        .count();
    // Data of every successful operation is intact.
    for (i, check) in checks.iter().enumerate().take(ok) {
        match *check {
            Check::AtB {
                k,
                dst,
                src: s,
                len,
            } => {
                let mut got = vec![0u8; len];
                p.b.hca
                    .mr_read(dests[k].mr.handle, dst as usize, &mut got)
                    .unwrap();
                assert_eq!(got, src[s as usize..s as usize + len], "op {i} data at B");
            }
            Check::AtA { dst, src: s, len } => {
                let got = p.a.mem(dst as usize, len);
                assert_eq!(got, src[s as usize..s as usize + len], "op {i} READ data");
            }
            Check::Atomic { dst, orig } => {
                let got = p.a.mem(dst as usize, 8);
                assert_eq!(
                    got,
                    orig.to_le_bytes(),
                    "op {i}: atomic executed exactly once"
                );
            }
        }
    }
    if ok == ops.len() {
        for (k, d) in dests.iter().enumerate() {
            let mut v = [0u8; 8];
            p.b.hca
                .mr_read(d.mr.handle, ATOMIC_AT as usize, &mut v)
                .unwrap();
            assert_eq!(
                u64::from_le_bytes(v),
                word[k],
                "destination {k}: every atomic applied exactly once"
            );
        }
    }
    // Receive side, per destination: completions of the messages sent there, in order, none
    // twice, none failed; all of them when every operation succeeded, and at least those of
    // the operations that did (a message may have been delivered whose acknowledgement was
    // lost for good).
    for (k, d) in dests.iter().enumerate() {
        let want: Vec<(usize, Op)> = ops
            .iter()
            .enumerate()
            .filter(|(_, (op, dk))| {
                dk % dests.len() == k
                    && matches!(op, Op::Send(_) | Op::SendImm(_) | Op::WriteImm(_))
            })
            .map(|(i, &(op, _))| (i, op))
            .collect();
        let rwcs = p.b.hca.poll_cq(d.cq, 4096).unwrap();
        assert!(rwcs.len() <= want.len(), "destination {k}: {rwcs:?}");
        for (w, &(i, op)) in rwcs.iter().zip(&want) {
            let (opcode, len) = match op {
                Op::Send(len) | Op::SendImm(len) => (WcOpcode::Recv, len),
                Op::WriteImm(len) => (WcOpcode::RecvRdmaWithImm, len),
                _ => unreachable!(),
            };
            let id = i as u64 + 1;
            assert_eq!(
                (w.wr_id, w.status, w.opcode, w.byte_len, w.imm_data, w.qp_num),
                (id, WcStatus::Success, opcode, len, imm(op, id), p.b.qpn),
                "destination {k}: message of op {i}"
            );
        }
        let done_ok = want.iter().filter(|(i, _)| *i < ok).count();
        assert!(
            rwcs.len() >= done_ok,
            "destination {k}: {} receive completions, {done_ok} messages acknowledged",
            rwcs.len()
        );
        if ok == ops.len() {
            assert_eq!(rwcs.len(), want.len(), "destination {k}");
        }
    }
    ok
}

/// One operation of an RD run ([`run_rd`]): `op` posted on A's RD QP `from`, for B's RD QP
/// `to` (both modulo the QPs there are), with a wrong Q_Key when `bad_qkey` (B refuses it
/// with NAK-Invalid RD Request).
#[derive(Debug, Clone, Copy)]
pub struct RdOp {
    pub op: Op,
    pub from: usize,
    pub to: usize,
    pub bad_qkey: bool,
}

/// A's RD QPs in an RD run.
pub const RD_SENDERS: usize = 3;
/// B's RD QPs in an RD run.
pub const RD_DESTS: usize = 2;
/// Where a destination's receive buffers start in its region (8 KiB each).
const RD_SLOTS_AT: u64 = 640 * 1024;

/// Runs `ops` over RD with frames dropped at rate `loss`: A has [`RD_SENDERS`] RD QPs (each
/// with its own CQ), B has [`RD_DESTS`] (the second in its own PD, with its own CQ and
/// region), and every message of every QP travels through the one pair of EE contexts.
/// Checks, per sending QP, that its WRs complete exactly once and in order — successes, then
/// at most one error (the refused message of a wrong Q_Key, or exhausted retries, which end
/// the EE context) and flushes; that a QP's failure costs no other QP anything while the EE
/// context lives (all of their operations succeed); that the data of every successful
/// operation is intact and every atomic executed once; and, per (sending QP, destination
/// QP), that the messages land exactly once, in order, intact, never a refused one. Returns
/// how many operations succeeded.
pub fn run_rd(ops: &[RdOp], loss: f64, seed: u64, mtu: Mtu) -> usize {
    use crate::common::RD_QKEY;
    use softib_wire::Qpn;
    let opts = ConnectOptions {
        path_mtu: mtu,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        timeout: 10,
        ..ConnectOptions::default()
    };
    let mut p = Pair::new_svc(Svc::Rd, 0xfff000 ^ (seed as u32 & 0xfff), 77, opts);
    let mut rng = Rng(seed);
    p.filter = Box::new(move |_, _| !rng.chance(loss));
    let (eec, rdd_a, rdd_b) = (p.a.eecn.unwrap(), p.a.rdd.unwrap(), p.b.rdd.unwrap());
    // A's senders: its RD QP and two more, each with its own CQ.
    let mut senders: Vec<(Qpn, CqHandle)> = vec![(p.a.qpn, p.a.cq)];
    for _ in 1..RD_SENDERS {
        let cq = p.a.hca.create_cq(4096).unwrap();
        let pd = p.a.pd;
        senders.push((p.a.rd_qp(pd, rdd_a, cq, RD_QKEY), cq));
    }
    // B's destinations: its RD QP, and one in a PD of its own with its own CQ and region.
    let mut dests: Vec<(Qpn, Dest)> = vec![(
        p.b.qpn,
        Dest {
            srq: None,
            cq: p.b.cq,
            mr: p.b.mr,
        },
    )];
    for _ in 1..RD_DESTS {
        let pd = p.b.hca.alloc_pd().unwrap();
        let cq = p.b.hca.create_cq(4096).unwrap();
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let mr = p.b.hca.reg_mr(pd, vec![0u8; MR_LEN], access, None).unwrap();
        let qpn = p.b.rd_qp(pd, rdd_b, cq, RD_QKEY);
        dests.push((qpn, Dest { srq: None, cq, mr }));
    }
    let src: Vec<u8> = (0..(256 * 1024))
        .map(|i| (i as u64 * 7 + seed) as u8)
        .collect();
    p.a.hca.mr_write(p.a.mr.handle, 0, &src).unwrap();
    for (_, d) in &dests {
        p.b.hca.mr_write(d.mr.handle, 0, &src).unwrap();
        p.b.hca
            .mr_write(d.mr.handle, ATOMIC_AT as usize, &[0u8; 8 * RD_SENDERS])
            .unwrap();
    }
    let amr = p.a.mr;
    let (mut src_off, mut res_off) = (0u64, 512 * 1024u64);
    let mut dst_off = vec![256 * 1024u64; dests.len()];
    // The atomic word of (sender, destination), and its value (after each atomic: the value
    // it leaves, assuming the sender's earlier operations succeeded).
    let mut word = vec![vec![0u64; dests.len()]; senders.len()];
    let mut after = vec![None; ops.len()];
    let mut checks = Vec::new();
    let mut slots = vec![0u64; dests.len()];
    for (i, o) in ops.iter().enumerate() {
        let id = i as u64 + 1;
        let (s, k, op) = (o.from % senders.len(), o.to % dests.len(), o.op);
        let bmr = dests[k].1.mr;
        let remote = RemoteAddr {
            addr: bmr.addr + dst_off[k],
            rkey: bmr.rkey,
        };
        let atomic_at = ATOMIC_AT + 8 * s as u64;
        let (opcode, len) = match op {
            Op::Send(len) => (WrOpcode::Send, len),
            Op::SendImm(len) => (WrOpcode::SendWithImm(imm(op, id).unwrap()), len),
            Op::Write(len) => (WrOpcode::RdmaWrite { remote }, len),
            Op::WriteImm(len) => {
                let imm = imm(op, id).unwrap();
                (WrOpcode::RdmaWriteWithImm { remote, imm }, len)
            }
            Op::Read(len) => {
                let remote = RemoteAddr {
                    addr: bmr.addr + (i as u64 * 13) % 4096,
                    rkey: bmr.rkey,
                };
                (WrOpcode::RdmaRead { remote }, len)
            }
            Op::Faa(add) => {
                let orig = word[s][k];
                if !o.bad_qkey {
                    word[s][k] = orig.wrapping_add(add);
                }
                after[i] = Some(word[s][k]);
                checks.push(Check::Atomic { dst: res_off, orig });
                let (remote_addr, rkey) = (bmr.addr + atomic_at, bmr.rkey);
                let faa = WrOpcode::AtomicFetchAdd {
                    remote_addr,
                    rkey,
                    add,
                };
                (faa, 8)
            }
            Op::Cas(swap) => {
                let orig = word[s][k];
                let compare = if swap % 2 == 0 { orig } else { orig ^ 1 };
                if compare == orig && !o.bad_qkey {
                    word[s][k] = swap;
                }
                after[i] = Some(word[s][k]);
                checks.push(Check::Atomic { dst: res_off, orig });
                let (remote_addr, rkey) = (bmr.addr + atomic_at, bmr.rkey);
                let cas = WrOpcode::AtomicCmpSwp {
                    remote_addr,
                    rkey,
                    compare,
                    swap,
                };
                (cas, 8)
            }
        };
        let local = match op {
            Op::Send(_) | Op::SendImm(_) | Op::Write(_) | Op::WriteImm(_) => {
                // SEND data is checked in the receive buffer it landed in (below).
                let dst = if matches!(op, Op::Write(_) | Op::WriteImm(_)) {
                    dst_off[k]
                } else {
                    u64::MAX
                };
                checks.push(Check::AtB {
                    k,
                    dst,
                    src: src_off,
                    len: len as usize,
                });
                let at = src_off;
                src_off += u64::from(len);
                at
            }
            Op::Read(_) => {
                checks.push(Check::AtA {
                    dst: res_off,
                    src: (i as u64 * 13) % 4096,
                    len: len as usize,
                });
                let at = res_off;
                res_off += u64::from(len) + 64;
                at
            }
            Op::Faa(_) | Op::Cas(_) => {
                let at = res_off;
                res_off += 64;
                at
            }
        };
        if matches!(op, Op::Write(_) | Op::WriteImm(_)) {
            dst_off[k] += u64::from(len) + 64;
        }
        if matches!(op, Op::Send(_) | Op::SendImm(_) | Op::WriteImm(_)) && !o.bad_qkey {
            // A receive buffer of the destination for it (which message lands in which one
            // depends on how the EE context interleaves the senders).
            let at = bmr.addr + RD_SLOTS_AT + 8192 * slots[k];
            let sge = Sge::new(at, 8192, bmr.lkey);
            let wr = RecvWr::new(slots[k], vec![sge]);
            p.b.hca.post_recv(dests[k].0, &[wr]).unwrap();
            slots[k] += 1;
        }
        let qkey = if o.bad_qkey { RD_QKEY ^ 0x100 } else { RD_QKEY };
        let wr = SendWr::new(id, opcode)
            .with_sge(Sge::new(amr.addr + local, len, amr.lkey))
            .signaled()
            .with_rd(eec, dests[k].0, qkey);
        p.a.hca.post_send(senders[s].0, &[wr]).unwrap();
    }
    p.run(u64::MAX / 4);

    let eec_alive = p.a.conn_state() != softib_core::verbs::types::QpState::Err;
    let mut ok_ops = vec![false; ops.len()];
    for (s, &(qpn, cq)) in senders.iter().enumerate() {
        let mine: Vec<usize> = (0..ops.len())
            .filter(|&i| ops[i].from % senders.len() == s)
            .collect();
        let wcs = p.a.hca.poll_cq(cq, 4096).unwrap();
        let got: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
        assert!(wcs.iter().all(|w| w.qp_num == qpn), "sender {s}: {wcs:?}");
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            mine.iter().map(|&i| i as u64 + 1).collect::<Vec<_>>(),
            "sender {s}: each WR completes once, in order: {got:?}"
        );
        let first_bad = mine.iter().position(|&i| ops[i].bad_qkey);
        let n_ok = got.iter().take_while(|g| g.1 == WcStatus::Success).count();
        if let Some(&(_, status)) = got.get(n_ok) {
            let allowed = match status {
                WcStatus::RemInvRdReqErr => first_bad == Some(n_ok),
                WcStatus::RetryExcErr | WcStatus::WrFlushErr => !eec_alive,
                _ => false,
            };
            assert!(
                allowed,
                "sender {s}: {got:?} (EE context alive: {eec_alive})"
            );
            assert!(
                got[n_ok + 1..].iter().all(|g| g.1 == WcStatus::WrFlushErr),
                "sender {s}: {got:?}"
            );
        }
        assert!(
            first_bad.is_none_or(|b| n_ok <= b),
            "sender {s}: a refused message succeeded"
        );
        if eec_alive {
            // Another QP's failure costs this one nothing: everything before its own bad
            // message succeeds.
            assert_eq!(n_ok, first_bad.unwrap_or(mine.len()), "sender {s}: {got:?}");
        }
        for &i in &mine[..n_ok] {
            ok_ops[i] = true;
        }
    }
    // Data of every successful operation.
    for (i, check) in checks.iter().enumerate() {
        if !ok_ops[i] {
            continue;
        }
        match *check {
            Check::AtB { dst: u64::MAX, .. } => {}
            Check::AtB {
                k,
                dst,
                src: s,
                len,
            } => {
                let mut got = vec![0u8; len];
                p.b.hca
                    .mr_read(dests[k].1.mr.handle, dst as usize, &mut got)
                    .unwrap();
                assert_eq!(got, src[s as usize..s as usize + len], "op {i} data at B");
            }
            Check::AtA { dst, src: s, len } => {
                let got = p.a.mem(dst as usize, len);
                assert_eq!(got, src[s as usize..s as usize + len], "op {i} READ data");
            }
            Check::Atomic { dst, orig } => {
                let got = p.a.mem(dst as usize, 8);
                assert_eq!(got, orig.to_le_bytes(), "op {i}: atomic executed once");
            }
        }
    }
    if eec_alive {
        // Each word holds what the last successful atomic on it left (nothing ran after it).
        let mut word = vec![vec![0u64; dests.len()]; senders.len()];
        for (i, o) in ops.iter().enumerate() {
            if let (true, Some(v)) = (ok_ops[i], after[i]) {
                word[o.from % senders.len()][o.to % dests.len()] = v;
            }
        }
        for (s, words) in word.iter().enumerate() {
            for (k, &w) in words.iter().enumerate() {
                let mut v = [0u8; 8];
                let at = (ATOMIC_AT + 8 * s as u64) as usize;
                p.b.hca.mr_read(dests[k].1.mr.handle, at, &mut v).unwrap();
                assert_eq!(u64::from_le_bytes(v), w, "sender {s} at {k}: atomics once");
            }
        }
    }
    // Receive side, per (sender, destination): the messages, in order, once, intact.
    for (k, (qpn, d)) in dests.iter().enumerate() {
        let rwcs = p.b.hca.poll_cq(d.cq, 4096).unwrap();
        assert!(
            rwcs.iter()
                .all(|w| w.status == WcStatus::Success && w.qp_num == *qpn),
            "destination {k}: {rwcs:?}"
        );
        for (s, &(sq, _)) in senders.iter().enumerate() {
            let want: Vec<usize> = (0..ops.len())
                .filter(|&i| {
                    let o = &ops[i];
                    o.from % senders.len() == s
                        && o.to % dests.len() == k
                        && !o.bad_qkey
                        && matches!(o.op, Op::Send(_) | Op::SendImm(_) | Op::WriteImm(_))
                })
                .collect();
            let got: Vec<_> = rwcs.iter().filter(|w| w.src_qp == sq).collect();
            assert!(got.len() <= want.len(), "{s} -> {k}: {got:?}");
            let acked = want.iter().filter(|&&i| ok_ops[i]).count();
            assert!(got.len() >= acked, "{s} -> {k}: {} of {acked}", got.len());
            if eec_alive {
                assert_eq!(got.len(), acked, "{s} -> {k}: nothing more");
            }
            for (w, &i) in got.iter().zip(&want) {
                let id = i as u64 + 1;
                let (opcode, len) = match ops[i].op {
                    Op::Send(len) | Op::SendImm(len) => (WcOpcode::Recv, len),
                    Op::WriteImm(len) => (WcOpcode::RecvRdmaWithImm, len),
                    _ => unreachable!(),
                };
                assert_eq!(
                    (w.opcode, w.byte_len, w.imm_data),
                    (opcode, len, imm(ops[i].op, id)),
                    "{s} -> {k}: message of op {i}"
                );
                if let (Op::Send(_) | Op::SendImm(_), Check::AtB { src: at, .. }) =
                    (ops[i].op, &checks[i])
                {
                    let mut got = vec![0u8; len as usize];
                    let off = (RD_SLOTS_AT + 8192 * w.wr_id) as usize;
                    p.b.hca.mr_read(d.mr.handle, off, &mut got).unwrap();
                    let at = *at as usize;
                    assert_eq!(got, src[at..at + len as usize], "op {i} SEND data");
                }
            }
        }
    }
    ok_ops.iter().filter(|&&o| o).count()
}
