//! Operation mixes from A to B under seeded loss on both directions, for the reliable services
//! (`rc_lossy.rs`, `xrc_lossy.rs`): every operation completes exactly once, in order, with
//! intact data, or the QP reports an error completion — never a silent loss or a duplicate
//! delivery.
//!
//! Each operation goes to one of B's receive queues ("destinations"): on RC there is one, B's
//! QP; on XRC there are two XRC SRQs of B's domain, each in its own protection domain with its
//! own CQ and its own memory region, and each operation names one of them in its XRCETH (its
//! RDMA and atomic targets are in that SRQ's region). Receives are checked per destination:
//! every message that consumes a receive WQE completes in its destination's CQ exactly once,
//! in posting order, with its length and immediate data.

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
