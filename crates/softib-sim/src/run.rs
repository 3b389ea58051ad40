//! Runs a scenario and reports what happened.

use std::collections::BTreeMap;
use std::io::Write;

use serde_json::{json, Value};
use softib_core::setup::{connect, connect_eec, ready_rd_qp, ConnectOptions, EndpointInfo};
use softib_core::transport::Counters;
use softib_core::verbs::ah::AhAttr;
use softib_core::verbs::device::GidEntry;
use softib_core::verbs::qp::{QpAttr, QpAttrMask, QpCap, QpInitAttr};
use softib_core::verbs::srq::SrqInitAttr;
use softib_core::verbs::types::{AccessFlags, Gid, GidType, Mtu, QpState, QpType};
use softib_core::verbs::wr::{RemoteAddr, UdDest};
use softib_core::{gid_of_ipv4, mac_for_gid, Hca, HcaConfig};
use softib_fabric::{Capture, Fabric, Faults, LinkConfig, LinkLayer, RunOutcome, Totals};
use softib_wire::Psn;

use crate::config::{OpKind, Service, SimConfig};
use crate::node::{App, Layout, RawRx, RawTx, ReqApp, RespApp, SimNode, Slot, XrcRx};
use crate::pattern;

/// Largest memory the simulator registers per node.
const MAX_REGION: u64 = 4 << 30;
/// Fabric events between two checks of completed WRITEs.
const CHUNK_EVENTS: u64 = 256;

/// Per-QP outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpReport {
    pub qpn: u32,
    pub posted: u64,
    pub completed: u64,
    pub errors: u64,
}

/// What a run did. Everything but `wall_time_s` is a function of the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct SimReport {
    pub config: SimConfig,
    pub posted: u64,
    pub completed: u64,
    /// Completions with a status other than success.
    pub errors: u64,
    /// Every operation completed successfully and every byte checked out (UC: every message
    /// that arrived was intact; the others are counted in `lost`).
    pub verified: bool,
    /// Operations whose data did not match.
    pub verify_failures: u64,
    /// Payload bytes of successful operations.
    pub bytes: u64,
    pub goodput_gbps: f64,
    pub retransmissions: u64,
    pub retrans_by_nak: u64,
    pub retrans_by_timeout: u64,
    pub sim_time_ns: u64,
    /// Wall-clock seconds of the traffic, from the first post to the last check (building the
    /// hosts and registering their memory excluded, as RDMA benchmarks exclude setup).
    pub wall_time_s: f64,
    pub per_qp: Vec<QpReport>,
    pub per_status: BTreeMap<&'static str, u64>,
    pub fabric: Totals,
    pub requester: Counters,
    pub responder: Counters,
    pub events: u64,
    /// Why the run stopped short, if it did.
    pub stopped: Option<String>,
    /// UC / UD / raw: messages the responder received intact, each operation counted once.
    pub delivered: u64,
    /// UC / UD / raw: further copies of messages already received. A duplicating fabric makes
    /// a UD responder deliver a datagram again (UD has no duplicate detection), and a UC
    /// responder accepts a duplicated whole message again (C9-184); the raw receiving
    /// application discards them. Each copy was intact.
    pub duplicates: u64,
    /// UC / UD / raw: messages sent that never arrived whole.
    pub lost: u64,
    /// XRC SEND: messages received (and checked) per XRC SRQ of node B, in SRQ order.
    pub per_srq: Vec<u64>,
    /// RD: per EE context of node A (EECN 1, 2, ...), the messages it carried to completion.
    pub per_eec: Vec<u64>,
}

/// Q_Key of the simulator's RD QPs.
const RD_QKEY: u32 = 0x0052_0000;

/// Q_Key of the simulator's UD QPs.
const UD_QKEY: u32 = 0x0051_0000;

/// The two nodes of a scenario.
const NODE_A: [u8; 4] = [10, 0, 0, 1];
const NODE_B: [u8; 4] = [10, 0, 0, 2];

/// LIDs of the two nodes on a native IB fabric.
const LID_A: u16 = 1;
const LID_B: u16 = 2;

fn hca_for(node: u32, ip: [u8; 4], mtu: Mtu, window: u32, link: LinkLayer) -> Hca {
    if link == LinkLayer::InfiniBand {
        // Node ids 1 and 2 give LIDs 1 and 2.
        let mut cfg = HcaConfig::infiniband(node);
        cfg.ports[0].active_mtu = mtu;
        cfg.device.max_qp_wr = cfg.device.max_qp_wr.max(1 << 16);
        cfg.max_unacked_psns = window;
        return Hca::new(cfg);
    }
    let mut cfg = HcaConfig::new(node);
    let port = &mut cfg.ports[0];
    port.gids.push(GidEntry {
        gid: gid_of_ipv4(ip),
        gid_type: GidType::RoceV2,
    });
    port.max_mtu = Mtu::Mtu4096;
    port.active_mtu = mtu;
    cfg.device.max_qp_wr = cfg.device.max_qp_wr.max(1 << 16);
    cfg.max_unacked_psns = window;
    Hca::new(cfg)
}

/// Builds the scenario's fabric: two nodes, `qps` connected QP pairs, buffers registered and
/// receive queues filled. Returns the fabric with node A first.
pub fn build(cfg: &SimConfig) -> Result<Fabric<SimNode>, String> {
    cfg.validate()?;
    let slots = (cfg.depth as usize * 4).max(4);
    // A UD receive buffer starts with the 40-byte GRH area; a raw message with its header
    // (IPv6 header / RWH).
    let grh = if cfg.service == Service::Ud {
        softib_core::GRH_AREA as u64
    } else {
        0
    };
    let header = u64::from(cfg.service.raw_header_len());
    let slot_len = (u64::from(cfg.size).max(8) + grh + header).next_multiple_of(64);
    let xrc = cfg.service == Service::Xrc;
    // XRC receive buffers: a lane per SRQ, with room for every connection's messages.
    let xrc_layout = Layout {
        slots: slots * cfg.qps as usize,
        slot_len,
    };
    let xrc_region = if xrc && cfg.op == OpKind::Send {
        slot_len * xrc_layout.slots as u64 * u64::from(cfg.srqs)
    } else {
        0
    };
    let region = (slot_len * slots as u64 * u64::from(cfg.qps)).max(xrc_region);
    if region > MAX_REGION {
        return Err(format!(
            "{} QPs x {slots} slots x {slot_len} bytes = {region} bytes per node exceeds the simulator's 4 GiB; lower --size, --depth or --qps",
            cfg.qps
        ));
    }
    let layout = Layout { slots, slot_len };
    let mut a = hca_for(1, NODE_A, cfg.mtu, cfg.window_psns, cfg.link);
    let mut b = hca_for(2, NODE_B, cfg.mtu, cfg.window_psns, cfg.link);
    let native = cfg.link == LinkLayer::InfiniBand;
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let (pa, pb) = (
        a.alloc_pd().map_err(|e| err(&e))?,
        b.alloc_pd().map_err(|e| err(&e))?,
    );
    let cqe = (u64::from(cfg.qps) * (u64::from(cfg.depth) + slots as u64) * 2).min(1 << 20) as u32;
    let (ca, cb) = (
        a.create_cq(cqe).map_err(|e| err(&e))?,
        b.create_cq(cqe).map_err(|e| err(&e))?,
    );
    let ma = a
        .reg_mr(pa, resident_zeroed(region as usize), access, None)
        .map_err(|e| err(&e))?;
    let mut bmem = resident_zeroed(region as usize);
    if cfg.op == OpKind::Read {
        for q in 0..cfg.qps as usize {
            for s in 0..slots {
                let off = layout.offset(q, s) as usize;
                pattern::fill(
                    &mut bmem[off..off + cfg.size as usize],
                    pattern::read_source(cfg.seed, q, s),
                );
            }
        }
    }
    let mb = b.reg_mr(pb, bmem, access, None).map_err(|e| err(&e))?;
    let cap = QpCap {
        max_send_wr: cfg.depth.max(1),
        max_recv_wr: slots as u32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let depth_rd = if cfg.op == OpKind::Read || cfg.op.is_atomic() {
        cfg.depth.min(128) as u8
    } else {
        1
    };
    let opts = ConnectOptions {
        sgid_index: 1,
        path_mtu: cfg.mtu,
        timeout: cfg.timeout,
        retry_cnt: cfg.retry_cnt,
        rnr_retry: 7,
        max_rd_atomic: depth_rd,
        max_dest_rd_atomic: depth_rd,
        ..ConnectOptions::default()
    };
    let qp_type = match cfg.service {
        Service::Rc => QpType::Rc,
        Service::Uc => QpType::Uc,
        Service::Ud => QpType::Ud,
        Service::RawIpv6 => QpType::RawIpv6,
        Service::RawEthertype => QpType::RawEthertype,
        Service::Xrc => QpType::XrcSend,
        Service::Rd => QpType::Rd,
    };
    // RD: one RDD per node and the EE context pairs, EECN i on A connected to EECN i on B.
    let mut rd_eecs = Vec::new();
    let rdds = if cfg.service == Service::Rd {
        let (ra, rb) = (
            a.alloc_rdd().map_err(|e| err(&e))?,
            b.alloc_rdd().map_err(|e| err(&e))?,
        );
        for i in 0..cfg.eecs {
            let (ea, eb) = (
                a.create_eec(ra).map_err(|e| err(&e))?,
                b.create_eec(rb).map_err(|e| err(&e))?,
            );
            let psn_a = Psn::new((cfg.seed as u32).wrapping_mul(2654435761).wrapping_add(i));
            let psn_b = Psn::new((cfg.seed as u32).wrapping_mul(40503).wrapping_add(i * 7));
            let to = |eecn: softib_wire::Eecn, psn: Psn, node: [u8; 4], lid: u16| EndpointInfo {
                qpn: softib_wire::Qpn::new(eecn.value()),
                psn,
                gid: if native {
                    Gid::default()
                } else {
                    gid_of_ipv4(node)
                },
                lid: if native { lid } else { 0 },
            };
            connect_eec(&mut a, ea, psn_a, &to(eb, psn_b, NODE_B, LID_B), &opts)
                .map_err(|e| err(&e))?;
            connect_eec(&mut b, eb, psn_b, &to(ea, psn_a, NODE_A, LID_A), &opts)
                .map_err(|e| err(&e))?;
            rd_eecs.push(ea);
        }
        Some((ra, rb))
    } else {
        None
    };
    let mut rd_dests = Vec::new();
    let uc = cfg.service == Service::Uc;
    // XRC: node B's domain, its SRQs (each with its own CQ) and their numbers.
    let mut xrc_srqs = Vec::new();
    let xrcd = if xrc {
        let xrcd = b.alloc_xrcd().map_err(|e| err(&e))?;
        let attr = SrqInitAttr {
            max_wr: xrc_layout.slots as u32,
            max_sge: 1,
            srq_limit: 0,
        };
        for _ in 0..cfg.srqs {
            let cq = b
                .create_cq((xrc_layout.slots as u32 * 2).min(1 << 15))
                .map_err(|e| err(&e))?;
            let srq = b.create_xrc_srq(pb, xrcd, cq, &attr).map_err(|e| err(&e))?;
            xrc_srqs.push((srq, cq));
        }
        Some(xrcd)
    } else {
        None
    };
    let mut pairs = Vec::new();
    let per_qp = cfg.ops / u64::from(cfg.qps);
    let extra = cfg.ops % u64::from(cfg.qps);
    let mut ud_dests = Vec::new();
    let mut raw_tx = None;
    if cfg.service.is_raw() {
        // One raw QP per node (validated), addressed by LID.
        let qp_type = match cfg.service {
            Service::RawIpv6 => QpType::RawIpv6,
            _ => QpType::RawEthertype,
        };
        let qa = raw_qp(&mut a, pa, ca, cap, qp_type).map_err(|e| err(&e))?;
        let qb = raw_qp(&mut b, pb, cb, cap, qp_type).map_err(|e| err(&e))?;
        let ah = a
            .create_ah(pa, &AhAttr::local(1, LID_B))
            .map_err(|e| err(&e))?;
        let header = match cfg.service {
            Service::RawIpv6 => raw_ipv6_header(&a, &b),
            // RWH: reserved, then the IEEE local experimental EtherType 1.
            _ => vec![0, 0, 0x88, 0xB5],
        };
        raw_tx = Some(RawTx { header, ah });
        pairs.push((qa, qb, cfg.ops));
    }
    for i in 0..cfg.qps {
        if cfg.service.is_raw() {
            break;
        }
        if cfg.service == Service::Ud {
            let qa = a
                .create_qp(pa, &QpInitAttr::new(QpType::Ud, ca, cap))
                .map_err(|e| err(&e))?;
            let qb = b
                .create_qp(pb, &QpInitAttr::new(QpType::Ud, cb, cap))
                .map_err(|e| err(&e))?;
            let psn = (cfg.seed as u32).wrapping_mul(2654435761).wrapping_add(i);
            ud_ready(&mut a, qa, UD_QKEY, psn).map_err(|e| err(&e))?;
            ud_ready(&mut b, qb, UD_QKEY, 0).map_err(|e| err(&e))?;
            // Native IB: LID-routed (no GRH); RoCE: by IPv4-mapped GID.
            let av = if native {
                AhAttr::local(1, LID_B)
            } else {
                AhAttr::global(1, gid_of_ipv4(NODE_B), 1)
            };
            let ah = a.create_ah(pa, &av).map_err(|e| err(&e))?;
            ud_dests.push(UdDest {
                ah,
                remote_qpn: qb,
                remote_qkey: UD_QKEY,
            });
            pairs.push((qa, qb, per_qp + u64::from(u64::from(i) < extra)));
            continue;
        }
        if let Some((ra, rb)) = rdds {
            let init = QpInitAttr::new(QpType::Rd, ca, cap);
            let qa = a.create_rd_qp(pa, ra, &init).map_err(|e| err(&e))?;
            let init = QpInitAttr::new(QpType::Rd, cb, cap);
            let qb = b.create_rd_qp(pb, rb, &init).map_err(|e| err(&e))?;
            ready_rd_qp(&mut a, qa, RD_QKEY, access).map_err(|e| err(&e))?;
            ready_rd_qp(&mut b, qb, RD_QKEY, access).map_err(|e| err(&e))?;
            rd_dests.push(softib_core::verbs::wr::RdDest {
                eecn: rd_eecs[i as usize % rd_eecs.len()],
                remote_qpn: qb,
                remote_qkey: RD_QKEY,
            });
            pairs.push((qa, qb, per_qp + u64::from(u64::from(i) < extra)));
            continue;
        }
        let qa = a
            .create_qp(pa, &QpInitAttr::new(qp_type, ca, cap))
            .map_err(|e| err(&e))?;
        let qb = match xrcd {
            Some(xrcd) => b.create_xrc_tgt_qp(xrcd),
            None => b.create_qp(pb, &QpInitAttr::new(qp_type, cb, cap)),
        }
        .map_err(|e| err(&e))?;
        let psn_a = Psn::new((cfg.seed as u32).wrapping_mul(2654435761).wrapping_add(i));
        let psn_b = Psn::new((cfg.seed as u32).wrapping_mul(40503).wrapping_add(i * 7));
        // Native IB: LID-routed (no GID, so no GRH); RoCE: by IPv4-mapped GID.
        let ia = EndpointInfo {
            qpn: qa,
            psn: psn_a,
            gid: if native {
                Gid::default()
            } else {
                gid_of_ipv4(NODE_A)
            },
            lid: if native { LID_A } else { 0 },
        };
        let ib = EndpointInfo {
            qpn: qb,
            psn: psn_b,
            gid: if native {
                Gid::default()
            } else {
                gid_of_ipv4(NODE_B)
            },
            lid: if native { LID_B } else { 0 },
        };
        connect(&mut a, qa, psn_a, &ib, &opts).map_err(|e| err(&e))?;
        connect(&mut b, qb, psn_b, &ia, &opts).map_err(|e| err(&e))?;
        pairs.push((qa, qb, per_qp + u64::from(u64::from(i) < extra)));
    }
    let mut req = ReqApp::new(
        cfg.op,
        uc,
        cfg.size,
        cfg.depth,
        cfg.seed,
        ca,
        layout,
        ma,
        RemoteAddr {
            addr: mb.addr,
            rkey: mb.rkey,
        },
        pairs.iter().map(|&(qa, _, n)| (qa, n)).collect(),
    );
    req.ud_dests = ud_dests;
    req.rd_dests = rd_dests;
    for &(srq, _) in &xrc_srqs {
        req.xrc_srqns.push(b.srq_num(srq).map_err(|e| err(&e))?);
    }
    let mut resp = RespApp::new(
        cfg.op,
        uc,
        cfg.size,
        cfg.seed,
        cb,
        layout,
        mb,
        pairs.iter().map(|p| (p.1, p.2)).collect(),
    );
    req.raw = raw_tx;
    if cfg.service.is_raw() {
        resp.raw = Some(RawRx {
            header_len: cfg.service.raw_header_len() as usize,
            seen: vec![false; cfg.ops as usize],
            duplicates: 0,
        });
    }
    if cfg.service == Service::Ud {
        resp.ud_seen = Some(pairs.iter().map(|p| vec![0u8; p.2 as usize]).collect());
    }
    if xrc {
        resp.xrc = Some(XrcRx {
            received: vec![vec![0; xrc_srqs.len()]; pairs.len()],
            srqs: xrc_srqs,
            layout: xrc_layout,
        });
    }
    resp.post_initial(&mut b);
    let faults = Faults {
        loss: cfg.loss,
        dup: cfg.dup,
        reorder: cfg.reorder,
        reorder_delay_ns: 4 * cfg.latency_ns.max(1_000),
        corrupt: cfg.corrupt,
        ..Faults::default()
    };
    let link = LinkConfig {
        latency_ns: cfg.latency_ns,
        bandwidth_bps: cfg.bandwidth_bps,
        // Native IB: the IBA MTU (packets may be MTU + 126 bytes); Ethernet: jumbo frames.
        mtu: if native { 4096 } else { 9000 },
        jitter_ns: cfg.jitter_ns,
        faults,
    };
    let trace = std::env::var_os("SOFTIB_TRACE").is_some();
    let mut fabric = Fabric::with_link_layer(cfg.seed, cfg.link);
    // The report verifies every byte itself and does not print the fabric's trace digest,
    // which would read every delivered byte once more.
    fabric.without_trace_hash();
    let mut link_a = link.clone();
    link_a.faults.down = cfg.link_down.clone();
    let node_a = SimNode {
        hca: a,
        app: App::Requester(Box::new(req)),
        trace,
        progress_on_idle_tx: cfg.service.is_raw() || cfg.service == Service::Ud,
    };
    let node_b = SimNode {
        hca: b,
        app: App::Responder(Box::new(resp)),
        trace,
        progress_on_idle_tx: false,
    };
    if native {
        fabric.add_ib_node(node_a, LID_A, 0, link_a);
        fabric.add_ib_node(node_b, LID_B, 0, link);
    } else {
        fabric.add_node(node_a, mac_for_gid(&gid_of_ipv4(NODE_A)), link_a);
        fabric.add_node(node_b, mac_for_gid(&gid_of_ipv4(NODE_B)), link);
    }
    Ok(fabric)
}

/// A zeroed buffer whose pages are all mapped: `ibv_reg_mr` pins a region's pages, so an RDMA
/// application never takes page faults on registered memory during traffic; neither do the
/// simulated hosts (a fresh zeroed allocation would be mapped lazily, page by page, by the
/// first operation that touches it).
fn resident_zeroed(len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    for page in v.chunks_mut(4096) {
        // A store the compiler cannot prove redundant on freshly zeroed memory.
        page[0] = std::hint::black_box(0);
    }
    v
}

/// A raw QP of `qp_type` on port 1, in RTS.
fn raw_qp(
    hca: &mut Hca,
    pd: softib_core::verbs::PdHandle,
    cq: softib_core::verbs::CqHandle,
    cap: QpCap,
    qp_type: QpType,
) -> Result<softib_wire::Qpn, String> {
    let qpn = hca
        .create_qp(pd, &QpInitAttr::new(qp_type, cq, cap))
        .map_err(|e| e.to_string())?;
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    hca.modify_qp(qpn, &init, QpAttrMask::STATE | QpAttrMask::PORT)
        .map_err(|e| e.to_string())?;
    for st in [QpState::Rtr, QpState::Rts] {
        let attr = QpAttr {
            qp_state: st,
            ..QpAttr::default()
        };
        hca.modify_qp(qpn, &attr, QpAttrMask::STATE)
            .map_err(|e| e.to_string())?;
    }
    Ok(qpn)
}

/// The IPv6 header node A's raw datagrams start with: from A's GID to B's, Next Header 253
/// (RFC 3692 experimentation); the HCA fills in PayLen.
fn raw_ipv6_header(a: &Hca, b: &Hca) -> Vec<u8> {
    let gid = |h: &Hca| h.query_port(1).map(|p| p.gids[0].gid.0).unwrap_or_default();
    let g = softib_wire::grh::Grh {
        ip_ver: 6,
        nxt_hdr: 253,
        hop_lmt: 64,
        sgid: gid(a),
        dgid: gid(b),
        ..Default::default()
    };
    let mut h = vec![0u8; softib_wire::grh::LEN];
    let _ = g.emit(&mut h);
    h
}

/// Runs a scenario. `pcap` captures every delivered frame; `progress(done, total)` is called
/// now and then.
pub fn run(
    cfg: &SimConfig,
    pcap: Option<Box<dyn Write>>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SimReport, String> {
    let mut fabric = build(cfg)?;
    let wall = std::time::Instant::now();
    if let Some(w) = pcap {
        fabric
            .capture_pcap(w, Capture::Delivered)
            .map_err(|e| e.to_string())?;
    }
    let nodes: Vec<_> = fabric.nodes().map(|(id, _)| id).collect();
    let (na, nb) = (nodes[0], nodes[1]);
    fabric.node_mut(na).progress(0);
    let mut stopped = None;
    let mut last_report = 0;
    loop {
        let outcome = fabric.drive_bounded(CHUNK_EVENTS);
        let freed = check_writes(&mut fabric, na, nb);
        let (done, completed) = match &fabric.node(na).app {
            App::Requester(r) => (r.done(), r.completed()),
            App::Responder(_) => unreachable!("node A is the requester"),
        };
        if completed >= last_report + 1000 || done {
            progress(completed, cfg.ops);
            last_report = completed;
        }
        // UD and raw datagrams: sends complete when they leave, so the run is done once nothing
        // is left in flight either.
        let datagrams = cfg.service.is_raw() || cfg.service == Service::Ud;
        if done && (!datagrams || outcome == RunOutcome::Idle) {
            break;
        }
        if freed {
            let now = fabric.now();
            fabric.node_mut(na).progress(now);
        }
        if outcome == RunOutcome::Idle && !freed {
            match fabric.next_event_time() {
                Some(t) => fabric.run_until(t),
                None => {
                    stopped = Some("the fabric went idle with work outstanding".to_string());
                    break;
                }
            }
        }
        if fabric.now() > cfg.max_sim_ns {
            stopped = Some(format!(
                "virtual time limit of {} ns reached",
                cfg.max_sim_ns
            ));
            break;
        }
    }
    if cfg.service == Service::Uc && stopped.is_none() {
        // UC work completes when it leaves node A: let what is still on the wire arrive.
        loop {
            if fabric.drive_bounded(CHUNK_EVENTS) == RunOutcome::Idle {
                match fabric.next_event_time() {
                    Some(t) if t <= cfg.max_sim_ns => fabric.run_until(t),
                    _ => break,
                }
            }
        }
    }
    fabric.finish_pcap().map_err(|e| e.to_string())?;
    Ok(report(
        cfg,
        &fabric,
        na,
        nb,
        stopped,
        wall.elapsed().as_secs_f64(),
    ))
}

/// Checks the responder's copy of every completed WRITE and frees its slot.
fn check_writes(
    fabric: &mut Fabric<SimNode>,
    na: softib_fabric::NodeId,
    nb: softib_fabric::NodeId,
) -> bool {
    let (a, b) = fabric.node_pair_mut(na, nb);
    let App::Requester(req) = &mut a.app else {
        return false;
    };
    if req.checks.is_empty() {
        return false;
    }
    let App::Responder(resp) = &b.app else {
        return false;
    };
    let mem = b.hca.mr_bytes(resp.local.handle).unwrap_or(&[]);
    let size = req.size as usize;
    for (q, slot, op) in std::mem::take(&mut req.checks) {
        let off = req.layout.offset(q, slot) as usize;
        let ok = mem
            .get(off..off + size)
            .is_some_and(|got| pattern::check(got, pattern::op_data(req.seed, q, op)));
        if !ok {
            req.verify_failures += 1;
        }
        req.qps[q].slots[slot] = Slot::Free;
    }
    true
}

fn report(
    cfg: &SimConfig,
    fabric: &Fabric<SimNode>,
    na: softib_fabric::NodeId,
    nb: softib_fabric::NodeId,
    stopped: Option<String>,
    wall_time_s: f64,
) -> SimReport {
    let a = fabric.node(na);
    let b = fabric.node(nb);
    let App::Requester(req) = &a.app else {
        unreachable!("node A is the requester")
    };
    let App::Responder(resp) = &b.app else {
        unreachable!("node B is the responder")
    };
    let requester = *a.hca.counters();
    let responder = *b.hca.counters();
    let posted = req.posted();
    let completed = req.completed();
    let errors: u64 = req.qps.iter().map(|q| q.errors).sum();
    let verify_failures = req.verify_failures + resp.verify_failures;
    let received: u64 = resp.received.iter().sum();
    let ud = resp.ud_seen.as_ref();
    let uc = cfg.service == Service::Uc;
    let raw = resp.raw.as_ref();
    // UC, UD and raw: a send completes when it leaves the HCA; what counts is what arrived
    // (each message once), and when: the run lasts until the last message arrived.
    let (sim_time_ns, bytes) = if let Some(seen) = ud {
        let unique = seen.iter().flatten().filter(|&&n| n > 0).count() as u64;
        (fabric.now().max(1), unique * u64::from(cfg.size))
    } else if uc {
        (
            resp.last_delivery_ns.max(1),
            resp.unique * u64::from(cfg.size),
        )
    } else if raw.is_some() {
        (fabric.now().max(1), received * u64::from(cfg.size))
    } else {
        (req.last_completion_ns.max(1), req.bytes_completed)
    };
    let (delivered, duplicates) = if let Some(seen) = ud {
        (
            seen.iter().flatten().filter(|&&n| n > 0).count() as u64,
            seen.iter()
                .flatten()
                .map(|&n| u64::from(n.saturating_sub(1)))
                .sum(),
        )
    } else if uc {
        (resp.unique, resp.duplicates)
    } else if let Some(r) = raw {
        (received, r.duplicates)
    } else {
        (0, 0)
    };
    let lost = if ud.is_some() {
        completed.saturating_sub(errors).saturating_sub(delivered)
    } else if uc || raw.is_some() {
        cfg.ops.saturating_sub(delivered)
    } else {
        0
    };
    // UC, UD and raw: every message that arrived is intact and every send completed; losses
    // are reported (`lost`), not failures.
    let all_received = cfg.service.is_unreliable() || received == cfg.ops;
    let verified = stopped.is_none()
        && errors == 0
        && verify_failures == 0
        && resp.recv_errors == 0
        && completed == cfg.ops
        && (cfg.op != OpKind::Send || all_received);
    SimReport {
        config: cfg.clone(),
        posted,
        completed,
        errors,
        verified,
        verify_failures,
        bytes,
        goodput_gbps: bytes as f64 * 8.0 / sim_time_ns as f64,
        retransmissions: requester.retransmitted_pkts + responder.retransmitted_pkts,
        retrans_by_nak: requester.retry_naks + responder.retry_naks,
        retrans_by_timeout: requester.retry_timeouts + responder.retry_timeouts,
        sim_time_ns,
        wall_time_s,
        per_qp: req
            .qps
            .iter()
            .map(|q| QpReport {
                qpn: q.qpn.value(),
                posted: q.posted,
                completed: q.completed,
                errors: q.errors,
            })
            .collect(),
        per_status: req
            .status_counts
            .iter()
            .map(|&(s, n)| (s.name(), n))
            .collect(),
        fabric: fabric.totals(),
        requester,
        responder,
        events: fabric.events_processed(),
        stopped,
        delivered,
        duplicates,
        lost,
        per_eec: if cfg.service == Service::Rd {
            let k = cfg.eecs.max(1) as usize;
            (0..k)
                .map(|e| req.qps.iter().skip(e).step_by(k).map(|q| q.completed).sum())
                .collect()
        } else {
            Vec::new()
        },
        per_srq: resp.xrc.as_ref().map_or_else(Vec::new, |x| {
            (0..x.srqs.len())
                .map(|s| x.received.iter().map(|q| q[s]).sum())
                .collect()
        }),
    }
}

/// RESET -> INIT (port 1, P_Key index 0, `qkey`) -> RTR -> RTS (first PSN `psn`) for a UD QP.
fn ud_ready(
    hca: &mut Hca,
    qpn: softib_wire::Qpn,
    qkey: u32,
    psn: u32,
) -> Result<(), softib_core::error::ModifyQpError> {
    use softib_core::verbs::qp::{QpAttr, QpAttrMask as M};
    use softib_core::verbs::types::QpState;
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qkey,
        ..QpAttr::default()
    };
    hca.modify_qp(qpn, &init, M::STATE | M::PORT | M::PKEY_INDEX | M::QKEY)?;
    hca.modify_qp(qpn, &QpAttr::to_state(QpState::Rtr), M::STATE)?;
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: Psn::new(psn),
        ..QpAttr::default()
    };
    hca.modify_qp(qpn, &rts, M::STATE | M::SQ_PSN)
}

/// The silent-drop counters of `c` that are not zero, by name.
pub fn nonzero_drops(c: &Counters) -> Vec<(&'static str, u64)> {
    // Everything but the traffic, retry and RC protocol counters, which the report shows
    // elsewhere, is a reason a packet was dropped.
    const NOT_DROPS: [&str; 14] = [
        "sent_pkts",
        "rcvd_pkts",
        "rcvd_seq_err",
        "duplicate_request",
        "rnr_nak_sent",
        "nak_sent",
        "retransmitted_pkts",
        "retry_timeouts",
        "retry_naks",
        "rcvd_rnr_nak",
        "retry_exceeded",
        "rnr_retry_exceeded",
        "path_migrations",
        "raw_delivered",
    ];
    c.named()
        .into_iter()
        .filter(|&(n, v)| v != 0 && !NOT_DROPS.contains(&n))
        .collect()
}

impl SimReport {
    /// The report as one JSON object (keys as `softib sim --json` promises). UC and UD runs
    /// add `delivered`, `duplicates` and `lost` (messages); every run has `drop_counters`, the
    /// non-zero silent-drop counters of each side by reason.
    pub fn to_json(&self) -> Value {
        let mut v = self.json_common();
        if self.config.service.is_unreliable() {
            if let Some(o) = v.as_object_mut() {
                o.insert("delivered".into(), json!(self.delivered));
                o.insert("duplicates".into(), json!(self.duplicates));
                o.insert("lost".into(), json!(self.lost));
            }
        }
        v
    }

    fn json_common(&self) -> Value {
        let c = &self.config;
        let l = &self.fabric.links;
        json!({
            "service": c.service.name(),
            "link": link_name(c.link),
            "op": c.op.name(),
            "size": c.size,
            "ops": c.ops,
            "qps": c.qps,
            "depth": c.depth,
            "mtu": c.mtu.bytes(),
            "loss": c.loss,
            "dup": c.dup,
            "reorder": c.reorder,
            "corrupt": c.corrupt,
            "seed": c.seed,
            "window": c.window_psns,
            "timeout": c.timeout,
            "posted": self.posted,
            "completed": self.completed,
            "errors": self.errors,
            "verified": self.verified,
            "verify_failures": self.verify_failures,
            "bytes": self.bytes,
            "goodput_gbps": self.goodput_gbps,
            "retransmissions": self.retransmissions,
            "retransmissions_nak": self.retrans_by_nak,
            "retransmissions_timeout": self.retrans_by_timeout,
            "sim_time_ns": self.sim_time_ns,
            "wall_time_s": self.wall_time_s,
            "events": self.events,
            "per_qp": self.per_qp.iter().map(|q| json!({"qpn": q.qpn, "posted": q.posted, "completed": q.completed, "errors": q.errors})).collect::<Vec<_>>(),
            "per_srq": self.per_srq,
            "per_eec": self.per_eec,
            "per_status": self.per_status,
            "fabric": {
                "frames_sent": self.fabric.transmitted_frames,
                "frames_delivered": self.fabric.delivered_frames,
                "dropped_loss": l.dropped_loss,
                "duplicated": l.duplicated,
                "reordered": l.reordered,
                "corrupted": l.corrupted,
            },
            "drops": {
                "icrc": self.requester.icrc_err + self.responder.icrc_err,
                "malformed": self.requester.malformed + self.responder.malformed,
                "duplicate_requests": self.responder.duplicate_request,
                "out_of_sequence": self.responder.out_of_seq_dropped + self.responder.rcvd_seq_err,
                "ignored_responses": self.requester.ignored_responses,
            },
            "drop_counters": {
                "requester": nonzero_drops(&self.requester).into_iter().collect::<BTreeMap<_, _>>(),
                "responder": nonzero_drops(&self.responder).into_iter().collect::<BTreeMap<_, _>>(),
            },
            "stopped": self.stopped,
        })
    }

    /// A readable multi-line report.
    pub fn to_text(&self) -> String {
        let c = &self.config;
        let l = &self.fabric.links;
        let mut s = String::new();
        use std::fmt::Write as _;
        let _ = writeln!(
            s,
            "softib sim: {} {} x {} of {} bytes over {} QP(s), depth {}, MTU {}, seed {}",
            c.service.name().to_uppercase(),
            c.op.name().to_uppercase(),
            c.ops,
            c.size,
            c.qps,
            c.depth,
            c.mtu.bytes(),
            c.seed
        );
        if c.link == LinkLayer::InfiniBand {
            let _ = writeln!(
                s,
                "  link:        native InfiniBand (LIDs {LID_A} and {LID_B})"
            );
        }
        // The PSN window and the transport timer belong to RC; the other services have neither.
        let rc_only = if c.service.is_unreliable() {
            String::new()
        } else {
            format!(
                "; window {} PSNs, Ttr 4.096 us x 2^{}",
                c.window_psns, c.timeout
            )
        };
        let _ = writeln!(
            s,
            "  fabric:      {:.0} Gb/s links, {} ns latency, loss {}, dup {}, reorder {}, corrupt {}{rc_only}",
            c.bandwidth_bps as f64 / 1e9,
            c.latency_ns,
            c.loss,
            c.dup,
            c.reorder,
            c.corrupt,
        );
        let _ = writeln!(
            s,
            "  operations:  {} posted, {} completed, {} errors",
            self.posted, self.completed, self.errors
        );
        let _ = writeln!(
            s,
            "  data:        {} bytes, goodput {:.3} Gb/s (simulated)",
            self.bytes, self.goodput_gbps
        );
        if !c.service.is_unreliable() {
            let _ = writeln!(
                s,
                "  retransmitted packets: {} ({} retries after a NAK, {} after a timeout)",
                self.retransmissions, self.retrans_by_nak, self.retrans_by_timeout
            );
        }
        let _ = writeln!(
            s,
            "  frames:      {} sent, {} delivered, {} lost, {} duplicated, {} reordered, {} corrupted (dropped on ICRC: {})",
            self.fabric.transmitted_frames,
            self.fabric.delivered_frames,
            l.dropped(),
            l.duplicated,
            l.reordered,
            l.corrupted,
            self.requester.icrc_err + self.responder.icrc_err
        );
        if c.service.is_unreliable() {
            let _ = writeln!(
                s,
                "  messages:    {} delivered intact, {} lost, {} delivered again ({})",
                self.delivered,
                self.lost,
                self.duplicates,
                match c.service {
                    Service::Ud => "UD does not detect duplicates",
                    Service::Uc => "UC accepts a duplicated whole message again, C9-184",
                    _ => "raw datagrams: duplicates discarded by the receiving application",
                }
            );
            if c.service == Service::Uc {
                let _ = writeln!(
                    s,
                    "               (each carries its operation index as immediate data; {})",
                    if c.op == OpKind::Write {
                        "WRITE runs as RDMA WRITE with immediate"
                    } else {
                        "SEND with immediate"
                    }
                );
            }
        } else {
            let _ = writeln!(
                s,
                "  responder:   {} duplicate requests, {} sequence errors, {} NAKs, {} RNR NAKs",
                self.responder.duplicate_request,
                self.responder.rcvd_seq_err,
                self.responder.nak_sent,
                self.responder.rnr_nak_sent
            );
        }
        for (side, counters) in [("A", &self.requester), ("B", &self.responder)] {
            let drops: Vec<String> = nonzero_drops(counters)
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            if !drops.is_empty() {
                let _ = writeln!(s, "  drops ({side}):   {}", drops.join(" "));
            }
        }
        let statuses: Vec<String> = self
            .per_status
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(s, "  completions: {}", statuses.join(" "));
        for q in &self.per_qp {
            let _ = writeln!(
                s,
                "  QP {:#08x}:  {} posted, {} completed, {} errors",
                q.qpn, q.posted, q.completed, q.errors
            );
        }
        if !self.per_eec.is_empty() {
            let counts: Vec<String> = self.per_eec.iter().map(u64::to_string).collect();
            let _ = writeln!(
                s,
                "  RD EE contexts: {} shared by {} QPs, messages carried per EE context: {}",
                self.per_eec.len(),
                self.per_qp.len(),
                counts.join(" ")
            );
        }
        if !self.per_srq.is_empty() {
            let counts: Vec<String> = self.per_srq.iter().map(u64::to_string).collect();
            let _ = writeln!(
                s,
                "  XRC SRQs:    {} messages received and checked, per SRQ: {}",
                self.per_srq.iter().sum::<u64>(),
                counts.join(" ")
            );
        }
        let _ = writeln!(
            s,
            "  time:        {:.6} s simulated, {:.3} s wall, {} events",
            self.sim_time_ns as f64 / 1e9,
            self.wall_time_s,
            self.events
        );
        if let Some(why) = &self.stopped {
            let _ = writeln!(s, "  stopped:     {why}");
        }
        let _ = writeln!(
            s,
            "  result:      {}",
            if self.verified {
                "verified".to_string()
            } else {
                format!("NOT verified ({} data mismatches)", self.verify_failures)
            }
        );
        s
    }
}

fn link_name(l: LinkLayer) -> &'static str {
    match l {
        LinkLayer::Ethernet => "ethernet",
        LinkLayer::InfiniBand => "ib",
    }
}
