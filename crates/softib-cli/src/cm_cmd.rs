//! `softib cm probe`: sends one rdma_cm connection request (an IB CM REQ to the TCP port space,
//! with the RDMA IP CM header) from a softib device to a peer's CM and reports what the peer's
//! CM answered: a REP (accepted: softib then rejects it, so the peer's listener lets go), a REJ
//! with its reason, or nothing. A diagnostic for CM interop (the rxe guest's kernel CM behind
//! `rping -s`), and the first user of [`softib_core::cm::CmPort`] over real UDP.

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use softib_core::cm::{CmConfig, CmEvent, CmPort, ConnectParams};
use softib_core::verbs::types::Mtu;
use softib_udp::frame::gid_of_ip;
use softib_wire::cm::{ip_service_id, port_space, rej_reason, IpCmHdr};
use softib_wire::Qpn;

use crate::net_common::{gid_text, random_psn, DeviceArgs};

#[derive(Subcommand, Debug)]
pub enum CmCommand {
    /// Send one rdma_cm REQ and report the peer CM's answer (exit 0 only for a REP).
    Probe(ProbeArgs),
    /// Listen on an rdma_cm port for one REQ, print it, and reject it (or accept it, wait for
    /// the RTU and disconnect: `--accept`). Exit 0 when the exchange completed.
    Listen(ListenArgs),
}

#[derive(Args, Debug)]
pub struct ListenArgs {
    /// Local address of the device: `IP` or `IP:PORT`.
    #[arg(long, default_value = "127.0.0.1")]
    bind: String,
    /// rdma_cm port to listen on (TCP port space).
    #[arg(long, default_value = "7174")]
    port: u16,
    /// Accept the REQ (REP), wait for the RTU, then disconnect (DREQ, DREP).
    #[arg(long)]
    accept: bool,
    /// How long to wait for each step, milliseconds.
    #[arg(long, default_value = "10000")]
    timeout_ms: u64,
    /// Capture every packet to this pcap file.
    #[arg(long)]
    pcap: Option<std::path::PathBuf>,
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
    /// After the REP: send the RTU (established), then disconnect (DREQ) and wait for the
    /// DREP, instead of rejecting the REP.
    #[arg(long)]
    establish: bool,
}

pub fn run(cmd: CmCommand) -> ExitCode {
    match cmd {
        CmCommand::Probe(a) => probe(a),
        CmCommand::Listen(a) => listen(a),
    }
}

/// A softib device with a CM port on its QP1.
struct CmDevice {
    d: softib_udp::Device,
    port: CmPort,
}

impl CmDevice {
    fn open(bind: &str, pcap: Option<std::path::PathBuf>) -> Result<CmDevice, String> {
        let mut d = DeviceArgs::plain(bind, pcap)
            .open(Mtu::Mtu1024)
            .map_err(|e| e.to_string())?;
        let first_id = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|t| t.subsec_nanos())
            .unwrap_or(1))
            | 1;
        let cfg = CmConfig {
            max_cm_retries: 3,
            cm_response_timeout: 18,
            ..CmConfig::new(
                d.gid(),
                0x0200_00ff_fe00_0000 | u64::from(first_id & 0xffff),
                first_id,
            )
        };
        let pd = d.hca_mut().alloc_pd().map_err(|e| e.to_string())?;
        let port = CmPort::new(d.hca_mut(), pd, 1, 0, cfg).map_err(|e| e.to_string())?;
        Ok(CmDevice { d, port })
    }

    /// Runs the device and the CM until `f` returns `Some` for an event, or `ms` pass.
    fn until<T>(&mut self, ms: u64, mut f: impl FnMut(CmEvent) -> Option<T>) -> Option<T> {
        let deadline = std::time::Instant::now() + Duration::from_millis(ms);
        while std::time::Instant::now() < deadline {
            let _ = self.d.poll_io();
            let now = self.d.now();
            self.port.poll(self.d.hca_mut(), now);
            let _ = self.d.flush(now);
            while let Some(e) = self.port.agent().poll_event() {
                println!("event: {}", describe(&e));
                if let Some(t) = f(e) {
                    return Some(t);
                }
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        None
    }

    /// Lets what the CM queued leave, and writes the capture.
    fn drain(&mut self) {
        for _ in 0..20 {
            let now = self.d.now();
            self.port.poll(self.d.hca_mut(), now);
            let _ = self.d.poll_io();
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = self.d.flush_pcap();
    }
}

fn describe(e: &CmEvent) -> String {
    match e {
        CmEvent::ConnectRequest { id, peer, req, .. } => format!(
            "ConnectRequest {:#x} from {} (service {:#018x}, QPN {:#x}, PSN {:#x}, comm id {:#x}, MTU {}, resp res {}, init depth {}, LIDs {:#x}->{:#x})",
            id.0,
            gid_text(peer),
            req.service_id,
            req.local_qpn.value(),
            req.starting_psn.value(),
            req.local_comm_id,
            req.path_mtu,
            req.responder_resources,
            req.initiator_depth,
            req.primary_local_lid,
            req.primary_remote_lid
        ),
        CmEvent::ConnectReply { id, rep } => format!(
            "ConnectReply {:#x} (QPN {:#x}, PSN {:#x}, comm id {:#x})",
            id.0,
            rep.local_qpn.value(),
            rep.starting_psn.value(),
            rep.local_comm_id
        ),
        CmEvent::Rejected { id, rej } => format!(
            "Rejected {:#x} (reason {}, message {})",
            id.0, rej.reason, rej.message_rejected
        ),
        other => format!("{other:?}"),
    }
}

fn listen(a: ListenArgs) -> ExitCode {
    let mut c = match CmDevice::open(&a.bind, a.pcap.clone()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("softib cm listen: {e}");
            return ExitCode::from(2);
        }
    };
    let sid = ip_service_id(port_space::TCP, a.port);
    if let Err(e) = c.port.agent().listen(sid) {
        eprintln!("softib cm listen: {e}");
        return ExitCode::from(2);
    }
    println!("listening: service {sid:#018x} on {}", gid_text(&c.d.gid()));
    let Some((id, req)) = c.until(a.timeout_ms, |e| match e {
        CmEvent::ConnectRequest { id, req, .. } => Some((id, req)),
        _ => None,
    }) else {
        println!("no REQ");
        return ExitCode::from(1);
    };
    if let Ok(h) = IpCmHdr::parse(&req.private_data) {
        println!(
            "IP CM header: version {} IPv{} source port {} {} -> {}",
            h.version,
            h.ip_version,
            h.src_port,
            gid_text(&softib_core::verbs::types::Gid(h.src_ip)),
            gid_text(&softib_core::verbs::types::Gid(h.dst_ip))
        );
    }
    let now = c.d.now();
    if !a.accept {
        let _ = c
            .port
            .agent()
            .reject(now, id, rej_reason::CONSUMER_DEFINED, b"");
        c.drain();
        println!("rejected");
        return ExitCode::SUCCESS;
    }
    let accept = softib_core::cm::AcceptParams {
        qpn: Qpn::new(0x00_ab_ce),
        starting_psn: random_psn(),
        responder_resources: req.initiator_depth.min(1),
        initiator_depth: req.responder_resources.min(1),
        target_ack_delay: 15,
        rnr_retry_count: 7,
        ..Default::default()
    };
    if let Err(e) = c.port.agent().accept(now, id, &accept) {
        eprintln!("softib cm listen: {e}");
        return ExitCode::from(2);
    }
    let established = c.until(a.timeout_ms, |e| match e {
        CmEvent::Established { .. } => Some(true),
        CmEvent::Rejected { .. } | CmEvent::Unreachable { .. } => Some(false),
        CmEvent::DisconnectRequest { .. } => Some(true),
        _ => None,
    });
    if established != Some(true) {
        c.drain();
        println!("not established");
        return ExitCode::from(1);
    }
    let now = c.d.now();
    // Disconnect (or answer the peer's DREQ if it came first).
    let _ = c.port.agent().disconnect(now, id, b"");
    let done = c.until(a.timeout_ms, |e| match e {
        CmEvent::Disconnected { .. } => Some(()),
        _ => None,
    });
    c.drain();
    if done.is_some() || c.port.agent().state(id) == Some(softib_core::cm::State::TimeWait) {
        println!("disconnected");
        ExitCode::SUCCESS
    } else {
        println!("no DREP");
        ExitCode::from(1)
    }
}

fn probe(a: ProbeArgs) -> ExitCode {
    let mut c = match CmDevice::open(&a.bind, a.pcap.clone()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("softib cm probe: {e}");
            return ExitCode::from(2);
        }
    };
    let local_gid = c.d.gid();
    let peer = gid_of_ip(a.peer);
    let src_port = 0x8000 | (random_psn().value() as u16 & 0x3fff);
    let Some(hdr) = IpCmHdr::for_ips(c.d.local_addr().ip(), a.peer, src_port) else {
        eprintln!("softib cm probe: --bind and --peer must both be IPv4 or both IPv6");
        return ExitCode::from(2);
    };
    let mut private = vec![0u8; IpCmHdr::LEN];
    hdr.emit(&mut private).expect("36 bytes");
    let params = ConnectParams {
        private_data: private,
        // No QP stands behind the probe: the number is only carried in the REQ.
        ..ConnectParams::rc(
            ip_service_id(port_space::TCP, a.port),
            peer,
            Qpn::new(0x00_ab_cd),
            random_psn(),
        )
    };
    let now = c.d.now();
    let id = match c.port.agent().connect(now, &params) {
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
    let replied = c.until(a.timeout_ms, |e| match e {
        CmEvent::ConnectReply { .. } => Some(true),
        CmEvent::Rejected { .. } | CmEvent::Unreachable { .. } => Some(false),
        _ => None,
    });
    if replied != Some(true) {
        c.drain();
        println!(
            "{}",
            if replied.is_none() {
                "no answer"
            } else {
                "not accepted"
            }
        );
        return ExitCode::from(1);
    }
    let now = c.d.now();
    if !a.establish {
        let _ = c
            .port
            .agent()
            .reject(now, id, rej_reason::CONSUMER_DEFINED, b"");
        c.drain();
        println!("accepted by the peer CM (REP); rejected it");
        return ExitCode::SUCCESS;
    }
    let _ = c.port.agent().establish(id, b"");
    // Connected for a moment; the peer may disconnect first.
    let peer_first = c
        .until(100, |e| {
            matches!(
                e,
                CmEvent::DisconnectRequest { .. } | CmEvent::Disconnected { .. }
            )
            .then_some(())
        })
        .is_some();
    let now = c.d.now();
    // Sends the DREQ, or answers the peer's with the DREP.
    let _ = c.port.agent().disconnect(now, id, b"");
    let done = peer_first
        || c.until(a.timeout_ms, |e| match e {
            CmEvent::Disconnected { .. } => Some(()),
            // Crossed DREQs: answered below.
            CmEvent::DisconnectRequest { .. } => Some(()),
            _ => None,
        })
        .is_some();
    if c.port.agent().state(id) == Some(softib_core::cm::State::DreqRcvd) {
        let now = c.d.now();
        let _ = c.port.agent().disconnect(now, id, b"");
    }
    c.drain();
    if done {
        println!("established, then disconnected");
        ExitCode::SUCCESS
    } else {
        println!("established; no DREP");
        ExitCode::from(1)
    }
}
