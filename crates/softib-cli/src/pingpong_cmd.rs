//! `softib pingpong`: `ibv_rc_pingpong` / `ibv_uc_pingpong` / `ibv_ud_pingpong` over softib's
//! UDP runtime, with the same out-of-band exchange (TCP port 18515, one 52-byte
//! `LID:QPN:PSN:GID` message each way, then `done` from the client), the same work request
//! pattern and the same result lines, so either side can be softib or the rdma-core tool.

use std::net::TcpListener;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use softib_core::setup::{ConnectOptions, EndpointInfo};
use softib_core::verbs::ah::AhAttr;
use softib_core::verbs::types::{Mtu, QpType, WcStatus};
use softib_core::verbs::wr::{RecvWr, SendWr, Sge, WrOpcode};
use softib_core::verbs::AhHandle;
use softib_udp::endpoint::{Endpoint, EndpointConfig, UD_QKEY};

use crate::net_common::{self as nc, DeviceArgs, Error};

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// Room for the GRH in front of a UD receive (IBA 11.4.1.1).
const GRH_LEN: usize = 40;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Service {
    Rc,
    Uc,
    Ud,
}

#[derive(Args, Debug)]
pub struct PingpongArgs {
    /// Transport service: rc, uc or ud, as `ibv_rc_pingpong` / `ibv_uc_pingpong` /
    /// `ibv_ud_pingpong`.
    #[arg(long, value_enum, default_value = "rc")]
    service: Service,
    /// Server to connect to; without it, wait for a client.
    server: Option<String>,
    /// TCP port of the exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Size of the message to exchange (default 4096; 2048 for UD).
    #[arg(short = 's', long)]
    size: Option<usize>,
    /// Path MTU of RC and UC, bytes. UD messages are limited by the port's active MTU
    /// (4096), as `ibv_ud_pingpong` checks them.
    #[arg(short = 'm', long, default_value = "1024", value_parser = nc::parse_mtu)]
    mtu: Mtu,
    /// Receives to post at a time.
    #[arg(short = 'r', long, default_value_t = 500)]
    rx_depth: u32,
    /// Number of exchanges.
    #[arg(short = 'n', long, default_value_t = 1000)]
    iters: u32,
    /// Service level (accepted; RoCEv2 carries no SL).
    #[arg(short = 'l', long, default_value_t = 0)]
    sl: u8,
    /// Local GID index (softib has one GID: 0, the bound address).
    #[arg(short = 'g', long, default_value_t = 0)]
    gid_idx: u8,
    /// IB device (softib has one: softib0).
    #[arg(short = 'd', long, default_value = "softib0")]
    ib_dev: String,
    /// Port of the IB device (softib's device has one: 1).
    #[arg(short = 'i', long, default_value_t = 1)]
    ib_port: u8,
    /// Give up after this many seconds without finishing.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    #[command(flatten)]
    dev: DeviceArgs,
}

pub fn run(args: PingpongArgs) -> ExitCode {
    match pingpong(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn pingpong(args: &PingpongArgs) -> Result<(), Error> {
    let qp_type = match args.service {
        Service::Rc => QpType::Rc,
        Service::Uc => QpType::Uc,
        Service::Ud => QpType::Ud,
    };
    if args.ib_dev != "softib0" {
        return Err(format!("IB device {} not found", args.ib_dev).into());
    }
    if args.ib_port != 1 {
        return Err(format!("Couldn't get port info (port {})", args.ib_port).into());
    }
    let ud = qp_type == QpType::Ud;
    let size = args.size.unwrap_or(if ud { 2048 } else { 4096 });
    let buf_len = if ud { size + GRH_LEN } else { size.max(1) };
    let dev = args.dev.open(args.mtu.max(Mtu::Mtu4096))?;
    // A UD message is one packet of at most the port's active MTU (C9-200).
    let port_mtu = dev.hca().query_port(1)?.active_mtu.bytes() as usize;
    if ud && size > port_mtu {
        return Err(format!("Requested size larger than port MTU ({port_mtu})").into());
    }
    let ecfg = EndpointConfig {
        qp_type,
        buf_len,
        send_depth: 1,
        recv_depth: args.rx_depth,
        max_inline: 0,
    };
    let mut ep = Endpoint::new(dev, &ecfg, nc::random_psn())?;
    let mr = ep.mr;
    let fill = vec![0x7b; buf_len];
    ep.dev.hca_mut().mr_write(mr.handle, 0, &fill)?;
    let (recv_addr, recv_len) = (mr.addr, buf_len as u32);
    let send_addr = if ud {
        mr.addr + GRH_LEN as u64
    } else {
        mr.addr
    };
    let recv_wr = RecvWr::new(RECV_WRID, vec![Sge::new(recv_addr, recv_len, mr.lkey)]);
    let post_recvs = |ep: &mut Endpoint, n: u32| -> u32 {
        let qpn = ep.qpn;
        (0..n)
            .take_while(|_| {
                ep.dev
                    .hca_mut()
                    .post_recv(qpn, std::slice::from_ref(&recv_wr))
                    .is_ok()
            })
            .count() as u32
    };
    let mut routs = post_recvs(&mut ep, args.rx_depth);
    if routs < args.rx_depth {
        return Err(format!("Couldn't post receive ({routs})").into());
    }
    let me = ep.info();
    if usize::from(args.gid_idx) != 0 {
        return Err(format!("can't read sgid of index {}", args.gid_idx).into());
    }
    println!(
        "  local address:  LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
        me.lid,
        me.qpn.value(),
        me.psn.value(),
        nc::gid_text(&me.gid)
    );
    let opts = ConnectOptions {
        path_mtu: args.mtu,
        sgid_index: args.gid_idx,
        ..ConnectOptions::default()
    };
    let mut ah: Option<AhHandle> = None;
    let remote = match &args.server {
        Some(server) => {
            let mut s = nc::connect_exchange(server, args.port)
                .map_err(|e| format!("Couldn't connect to {server}:{}: {e}", args.port))?;
            nc::write_all(&mut s, &nc::pp_message(&me))?;
            let mut m = [0u8; nc::PP_MSG_LEN];
            nc::read_full(&mut s, &mut m)?;
            nc::write_all(&mut s, b"done\0")?;
            let remote = nc::parse_pp_message(&m)?;
            args.dev.route_peer(&mut ep.dev, &remote.gid);
            connect(&mut ep, &remote, &opts, args, &mut ah)?;
            remote
        }
        None => {
            let l = TcpListener::bind(("0.0.0.0", args.port))
                .map_err(|e| format!("Couldn't listen to port {}: {e}", args.port))?;
            let (mut s, _) = l.accept()?;
            let mut m = [0u8; nc::PP_MSG_LEN];
            nc::read_full(&mut s, &mut m)?;
            let remote = nc::parse_pp_message(&m)?;
            args.dev.route_peer(&mut ep.dev, &remote.gid);
            connect(&mut ep, &remote, &opts, args, &mut ah)?;
            nc::write_all(&mut s, &nc::pp_message(&me))?;
            // The client's "done" (5 bytes with the NUL).
            let mut done = [0u8; 5];
            nc::read_full(&mut s, &mut done)?;
            remote
        }
    };
    println!(
        "  remote address: LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
        remote.lid,
        remote.qpn.value(),
        remote.psn.value(),
        nc::gid_text(&remote.gid)
    );
    let mut send_wr = SendWr::new(SEND_WRID, WrOpcode::Send)
        .with_sge(Sge::new(send_addr, size as u32, mr.lkey))
        .signaled();
    if let Some(ah) = ah {
        send_wr = send_wr.with_ud(ah, remote.qpn, UD_QKEY);
    }
    let qpn = ep.qpn;
    let mut pending = RECV_WRID;
    if args.server.is_some() {
        ep.dev
            .hca_mut()
            .post_send(qpn, std::slice::from_ref(&send_wr))?;
        pending |= SEND_WRID;
    }
    let iters = args.iters;
    let mode = args.dev.mode();
    let start = Instant::now();
    let deadline = start + Duration::from_secs(args.timeout);
    let (mut rcnt, mut scnt) = (0u32, 0u32);
    while rcnt < iters || scnt < iters {
        let wcs = ep.wait_completions(mode, deadline)?.to_vec();
        if wcs.is_empty() {
            return Err(format!(
                "timed out after {} s: {scnt} sends, {rcnt} receives completed",
                args.timeout
            )
            .into());
        }
        for wc in wcs {
            if wc.status != WcStatus::Success {
                return Err(format!(
                    "Failed status {} ({}) for wr_id {}",
                    wc.status.name(),
                    wc.status.raw(),
                    wc.wr_id
                )
                .into());
            }
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= 1 {
                        routs += post_recvs(&mut ep, args.rx_depth - routs);
                        if routs < args.rx_depth {
                            return Err(format!("Couldn't post receive ({routs})").into());
                        }
                    }
                    rcnt += 1;
                }
                other => return Err(format!("Completion for unknown wr_id {other}").into()),
            }
            pending &= !wc.wr_id;
            if scnt < iters && pending == 0 {
                ep.dev
                    .hca_mut()
                    .post_send(qpn, std::slice::from_ref(&send_wr))?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = size as u64 * u64::from(iters) * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        usec / f64::from(iters)
    );
    // Let the last ACK leave before the process exits (the peer may still wait for it).
    let linger = Instant::now() + Duration::from_millis(20);
    while Instant::now() < linger {
        ep.dev.progress(mode, Duration::from_millis(5))?;
    }
    ep.dev.flush_pcap()?;
    args.dev.report(&ep.dev);
    Ok(())
}

fn connect(
    ep: &mut Endpoint,
    remote: &EndpointInfo,
    opts: &ConnectOptions,
    args: &PingpongArgs,
    ah: &mut Option<AhHandle>,
) -> Result<(), Error> {
    ep.connect(remote, opts)
        .map_err(|e| format!("Couldn't connect to remote QP: {e}"))?;
    if ep.qp_type == QpType::Ud {
        let mut attr = AhAttr::global(1, remote.gid, args.gid_idx);
        if let Some(g) = attr.grh.as_mut() {
            g.hop_limit = 1;
        }
        attr.sl = args.sl;
        let pd = ep.pd;
        *ah = Some(
            ep.dev
                .hca_mut()
                .create_ah(pd, &attr)
                .map_err(|e| format!("Failed to create AH: {e}"))?,
        );
    }
    Ok(())
}
