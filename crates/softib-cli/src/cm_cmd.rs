//! `softib cm probe`: sends one rdma_cm connection request (an IB CM REQ to the TCP port space,
//! with the RDMA IP CM header) from a softib device to a peer's CM and reports what the peer's
//! CM answered: a REP (accepted: softib then rejects it, so the peer's listener lets go), a REJ
//! with its reason, or nothing. A diagnostic for CM interop (the rxe guest's kernel CM behind
//! `rping -s`), and the first user of [`softib_core::cm::CmPort`] over real UDP.

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use softib_core::cm::{CmConfig, CmEvent, CmPort, CmService, ConnectParams};
use softib_core::verbs::types::Mtu;
use softib_udp::frame::gid_of_ip;
use softib_wire::cm::{ip_service_id, port_space, rej_reason, IpCmHdr};
use softib_wire::Qpn;

use crate::net_common::{gid_text, random_psn, DeviceArgs};

#[derive(Subcommand, Debug)]
pub enum CmCommand {
    /// Send one rdma_cm REQ and report the peer CM's answer (exit 0 only for a REP).
    Probe(ProbeArgs),
}

#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// Local address of the device: `IP` or `IP:PORT`.
    #[arg(long, default_value = "127.0.0.1")]
    bind: String,
    /// The peer's IP address (its CM answers on UDP 4791, QP1).
    #[arg(long)]
    peer: IpAddr,
    /// rdma_cm port the peer listens on (rping's default 7174).
    #[arg(long, default_value = "7174")]
    port: u16,
    /// How long to wait for the answer, milliseconds.
    #[arg(long, default_value = "5000")]
    timeout_ms: u64,
    /// Capture every packet to this pcap file.
    #[arg(long)]
    pcap: Option<std::path::PathBuf>,
}

pub fn run(cmd: CmCommand) -> ExitCode {
    match cmd {
        CmCommand::Probe(a) => probe(a),
    }
}

fn probe(a: ProbeArgs) -> ExitCode {
    let dev = DeviceArgs {
        bind: a.bind.clone(),
        pcap: a.pcap.clone(),
        events: false,
        no_ipv4_icrc_check: false,
        no_gso: false,
        peer_via: None,
        stats: false,
        window: 128,
        busy_yields: softib_udp::BUSY_YIELDS,
    };
    let mut d = match dev.open(Mtu::Mtu1024) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("softib cm probe: {e}");
            return ExitCode::from(2);
        }
    };
    let local_gid = d.gid();
    let peer = gid_of_ip(a.peer);
    let now = d.now();
    let first_id = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or(1))
        | 1;
    let cfg = CmConfig {
        max_cm_retries: 3,
        cm_response_timeout: 18,
        ..CmConfig::new(
            local_gid,
            0x0200_00ff_fe00_0000 | u64::from(first_id & 0xffff),
            first_id,
        )
    };
    let pd = match d.hca_mut().alloc_pd() {
        Ok(pd) => pd,
        Err(e) => {
            eprintln!("softib cm probe: {e}");
            return ExitCode::from(2);
        }
    };
    let mut port = match CmPort::new(d.hca_mut(), pd, 1, 0, cfg) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("softib cm probe: {e}");
            return ExitCode::from(2);
        }
    };
    let mut private = vec![0u8; IpCmHdr::LEN];
    let src_port = 0x8000 | (first_id as u16 & 0x3fff);
    let hdr = IpCmHdr {
        version: 0,
        ip_version: if a.peer.is_ipv4() { 4 } else { 6 },
        src_port,
        src_ip: local_gid.0,
        dst_ip: peer.0,
    };
    hdr.emit(&mut private).expect("36 bytes");
    let params = ConnectParams {
        service_id: ip_service_id(port_space::TCP, a.port),
        peer,
        service: CmService::Rc,
        // No QP stands behind the probe: the number is only carried in the REQ.
        qpn: Qpn::new(0x00_ab_cd),
        starting_psn: random_psn(),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: 3,
        pkey: 0xffff,
        srq: false,
        local_ack_timeout: 14,
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        sl: 0,
        private_data: private,
    };
    let id = match port.agent().connect(now, &params) {
        Ok(id) => id,
        Err(e) => {
            eprintln!("softib cm probe: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "REQ {} -> {} service {:#018x} comm id {:#x}",
        gid_text(&local_gid),
        gid_text(&peer),
        params.service_id,
        id.0
    );
    let deadline = std::time::Instant::now() + Duration::from_millis(a.timeout_ms);
    let mut code = ExitCode::from(1);
    let mut outcome = None;
    while std::time::Instant::now() < deadline && outcome.is_none() {
        let _ = d.poll_io();
        let now = d.now();
        port.poll(d.hca_mut(), now);
        let _ = d.flush(now);
        while let Some(e) = port.agent().poll_event() {
            match e {
                CmEvent::ConnectReply { rep, .. } => {
                    outcome = Some(format!(
                        "REP: accepted by the peer CM (its QPN {:#x}, PSN {:#x}, comm id {:#x})",
                        rep.local_qpn.value(),
                        rep.starting_psn.value(),
                        rep.local_comm_id
                    ));
                    code = ExitCode::SUCCESS;
                    let _ = port
                        .agent()
                        .reject(now, id, rej_reason::CONSUMER_DEFINED, b"");
                }
                CmEvent::Rejected { rej, .. } => {
                    outcome = Some(format!(
                        "REJ: reason {} (message {}, ARI length {})",
                        rej.reason, rej.message_rejected, rej.reject_info_length
                    ));
                }
                CmEvent::Unreachable { .. } => outcome = Some("no answer".into()),
                _ => {}
            }
        }
        if outcome.is_none() {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    // Let the REJ (after a REP) leave.
    for _ in 0..20 {
        let now = d.now();
        port.poll(d.hca_mut(), now);
        let _ = d.poll_io();
        std::thread::sleep(Duration::from_millis(1));
    }
    let _ = d.flush_pcap();
    println!("{}", outcome.unwrap_or_else(|| "no answer".into()));
    code
}
