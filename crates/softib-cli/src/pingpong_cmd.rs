//! `softib pingpong`: `ibv_rc_pingpong` / `ibv_uc_pingpong` / `ibv_ud_pingpong` over softib's
//! UDP runtime, with the same out-of-band exchange (TCP port 18515, one 52-byte
//! `LID:QPN:PSN:GID` message each way, then `done` from the client), the same work request
//! pattern and the same result lines, so either side can be softib or the rdma-core tool.
//!
//! `--service xrc` runs the same ping-pong over XRC, as one connection of
//! `ibv_xsrq_pingpong`: each side has an XRC initiator that sends, and an XRC target in an
//! XRC domain that receives into an XRC SRQ; the exchange message is `ibv_xsrq_pingpong`'s
//! (`LID:QPN RECV:QPN SEND:PSN:SRQN:GID`), and every send names the peer's SRQ.

use std::net::TcpListener;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use softib_core::setup::{ConnectOptions, EndpointInfo};
use softib_core::verbs::ah::AhAttr;
use softib_core::verbs::srq::SrqInitAttr;
use softib_core::verbs::types::{Mtu, QpType, WcStatus};
use softib_core::verbs::wr::{RecvWr, SendWr, Sge, WrOpcode};
use softib_core::verbs::{AhHandle, SrqHandle};
use softib_udp::endpoint::{Endpoint, EndpointConfig, UD_QKEY};
use softib_wire::{Psn, Qpn};

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
    /// XRC: an initiator sends to the peer's XRC SRQ through the peer's target QP.
    Xrc,
    /// RD: an RD QP sends to the peer's RD QP through an EE context.
    Rd,
}

/// The receive half of an XRC side: its target QP and the XRC SRQ it delivers into.
struct XrcRecv {
    tgt: Qpn,
    srq: SrqHandle,
}

/// The exchange message of `--service xrc` (`ibv_xsrq_pingpong`'s: `LID:QPN RECV:QPN SEND:
/// PSN:SRQN:GID`) and `--service rd` (`LID:QPN:PSN:EECN:GID`): hex fields, the GID as 32 hex
/// digits, NUL-terminated, in a fixed 66 bytes.
const DEST_MSG_LEN: usize = 66;

/// What an XRC or RD side tells its peer: its LID, the service's numbers, its GID.
struct Dest {
    lid: u16,
    nums: Vec<u32>,
    gid: softib_core::verbs::types::Gid,
}

impl Dest {
    fn message(&self) -> [u8; DEST_MSG_LEN] {
        let mut s = format!("{:04x}", self.lid);
        for n in &self.nums {
            s += &format!(":{n:06x}");
        }
        s.push(':');
        s.extend(self.gid.0.iter().map(|b| format!("{b:02x}")));
        let mut m = [0u8; DEST_MSG_LEN];
        let n = s.len().min(DEST_MSG_LEN - 1);
        m[..n].copy_from_slice(&s.as_bytes()[..n]);
        m
    }

    /// Parses a message of `nums` numbers.
    fn parse(m: &[u8], nums: usize) -> Result<Dest, Error> {
        let end = m.iter().position(|&b| b == 0).unwrap_or(m.len());
        let s = std::str::from_utf8(&m[..end]).map_err(|_| "exchange message is not text")?;
        let f: Vec<&str> = s.split(':').collect();
        let bad = || -> Error { format!("bad exchange message {s:?}").into() };
        if f.len() != nums + 2 || f[nums + 1].len() != 32 {
            return Err(bad());
        }
        let hex = |x: &str| u32::from_str_radix(x, 16).map_err(|_| bad());
        let gid = f[nums + 1];
        let mut g = [0u8; 16];
        for (i, b) in g.iter_mut().enumerate() {
            *b = u8::from_str_radix(&gid[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Dest {
            lid: hex(f[0])? as u16,
            nums: f[1..=nums]
                .iter()
                .map(|x| hex(x))
                .collect::<Result<_, _>>()?,
            gid: softib_core::verbs::types::Gid(g),
        })
    }
}

#[derive(Args, Debug)]
pub struct PingpongArgs {
    /// Transport service: rc, uc or ud, as `ibv_rc_pingpong` / `ibv_uc_pingpong` /
    /// `ibv_ud_pingpong`; xrc as one connection of `ibv_xsrq_pingpong`; rd through a pair of
    /// EE contexts.
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
        Service::Xrc => QpType::XrcSend,
        Service::Rd => QpType::Rd,
    };
    let xrc = args.service == Service::Xrc;
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
    let xrc_recv = if xrc {
        Some(xrc_receive_side(&mut ep, args.rx_depth)?)
    } else {
        None
    };
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
    let srq = xrc_recv.as_ref().map(|x| x.srq);
    let post_recvs = |ep: &mut Endpoint, n: u32| -> u32 {
        let qpn = ep.qpn;
        let one = std::slice::from_ref(&recv_wr);
        (0..n)
            .take_while(|_| match srq {
                Some(srq) => ep.dev.hca_mut().post_srq_recv(srq, one).is_ok(),
                None => ep.dev.hca_mut().post_recv(qpn, one).is_ok(),
            })
            .count() as u32
    };
    let mut routs = post_recvs(&mut ep, args.rx_depth);
    if routs < args.rx_depth {
        return Err(format!("Couldn't post receive ({routs})").into());
    }
    if usize::from(args.gid_idx) != 0 {
        return Err(format!("can't read sgid of index {}", args.gid_idx).into());
    }
    let opts = ConnectOptions {
        path_mtu: args.mtu,
        sgid_index: args.gid_idx,
        ..ConnectOptions::default()
    };
    let send_sge = Sge::new(send_addr, size as u32, mr.lkey);
    let send_wr = match &xrc_recv {
        Some(x) => xrc_connect(args, &mut ep, x, &opts, send_sge)?,
        None if qp_type == QpType::Rd => rd_connect(args, &mut ep, &opts, send_sge)?,
        None => exchange_and_connect(args, &mut ep, &opts, send_sge)?,
    };
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
    // Let the last ACK leave before the process exits (the peer may still wait for it), and
    // answer the peer's retransmission if that ACK was lost: two transport timer periods of
    // the connection, at most 500 ms.
    let ttr = Duration::from_nanos(4096 << opts.timeout.min(20));
    let linger = Instant::now() + (2 * ttr).min(Duration::from_millis(500));
    while Instant::now() < linger {
        ep.dev.progress(mode, Duration::from_millis(5))?;
    }
    ep.dev.flush_pcap()?;
    args.dev.report(&ep.dev);
    Ok(())
}

/// The out-of-band exchange of the rdma-core examples on TCP `args.port`. The client connects to
/// the server, sends `mine` and reads the server's message into `theirs`; the server accepts one
/// client, reads its message into `theirs`, runs `server_ready` on it (the examples' server
/// connects its QP before it answers) and sends `mine`. Returns the connection for the rest of
/// the conversation.
fn exchange(
    args: &PingpongArgs,
    mine: &[u8],
    theirs: &mut [u8],
    server_ready: impl FnOnce(&[u8]) -> Result<(), Error>,
) -> Result<std::net::TcpStream, Error> {
    match &args.server {
        Some(server) => {
            let mut s = nc::connect_exchange(server, args.port)
                .map_err(|e| format!("Couldn't connect to {server}:{}: {e}", args.port))?;
            nc::write_all(&mut s, mine)?;
            nc::read_full(&mut s, theirs)?;
            Ok(s)
        }
        None => {
            let l = TcpListener::bind(("0.0.0.0", args.port))
                .map_err(|e| format!("Couldn't listen to port {}: {e}", args.port))?;
            let (mut s, _) = l.accept()?;
            nc::read_full(&mut s, theirs)?;
            server_ready(theirs)?;
            nc::write_all(&mut s, mine)?;
            Ok(s)
        }
    }
}

/// The exchange of `ibv_rc/uc/ud_pingpong` (client: send, receive, `done`; server: receive,
/// connect, send, wait for `done`), then the QP is connected; returns the WR every send posts.
fn exchange_and_connect(
    args: &PingpongArgs,
    ep: &mut Endpoint,
    opts: &ConnectOptions,
    send_sge: Sge,
) -> Result<SendWr, Error> {
    let me = ep.info();
    println!(
        "  local address:  LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
        me.lid,
        me.qpn.value(),
        me.psn.value(),
        nc::gid_text(&me.gid)
    );
    let mut ah: Option<AhHandle> = None;
    let mut m = [0u8; nc::PP_MSG_LEN];
    let mut connected = None;
    let mut s = exchange(args, &nc::pp_message(&me), &mut m, |m| {
        let remote = nc::parse_pp_message(m)?;
        args.dev.route_peer(&mut ep.dev, &remote.gid);
        connect(ep, &remote, opts, args, &mut ah)?;
        connected = Some(remote);
        Ok(())
    })?;
    let remote = match connected {
        // The server waits for the client's "done" (5 bytes with the NUL).
        Some(remote) => {
            nc::read_full(&mut s, &mut [0u8; 5])?;
            remote
        }
        // The client says "done", then connects.
        None => {
            nc::write_all(&mut s, b"done\0")?;
            let remote = nc::parse_pp_message(&m)?;
            args.dev.route_peer(&mut ep.dev, &remote.gid);
            connect(ep, &remote, opts, args, &mut ah)?;
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
        .with_sge(send_sge)
        .signaled();
    if let Some(ah) = ah {
        send_wr = send_wr.with_ud(ah, remote.qpn, UD_QKEY);
    }
    Ok(send_wr)
}

/// Makes the receive half of an XRC side: an XRC domain, an XRC SRQ of `rx_depth` WQEs on the
/// endpoint's PD and CQ, and a target QP in the domain, moved to INIT.
fn xrc_receive_side(ep: &mut Endpoint, rx_depth: u32) -> Result<XrcRecv, Error> {
    let (pd, cq) = (ep.pd, ep.cq);
    let hca = ep.dev.hca_mut();
    let xrcd = hca.alloc_xrcd()?;
    let attr = SrqInitAttr {
        max_wr: rx_depth,
        max_sge: 1,
        srq_limit: 0,
    };
    let srq = hca.create_xrc_srq(pd, xrcd, cq, &attr)?;
    let tgt = hca.create_xrc_tgt_qp(xrcd)?;
    let init = softib_core::verbs::qp::QpAttr {
        qp_state: softib_core::verbs::types::QpState::Init,
        port_num: 1,
        qp_access_flags: ConnectOptions::default().access,
        ..Default::default()
    };
    use softib_core::verbs::qp::QpAttrMask as M;
    hca.modify_qp(
        tgt,
        &init,
        M::STATE | M::PORT | M::PKEY_INDEX | M::ACCESS_FLAGS,
    )?;
    Ok(XrcRecv { tgt, srq })
}

/// The XRC exchange (`ibv_xsrq_pingpong`'s message, in the order of the other services), then
/// the initiator is connected to the peer's target and the target to the peer's initiator;
/// returns the WR every send posts, addressed to the peer's SRQ.
fn xrc_connect(
    args: &PingpongArgs,
    ep: &mut Endpoint,
    x: &XrcRecv,
    opts: &ConnectOptions,
    send_sge: Sge,
) -> Result<SendWr, Error> {
    let srqn = ep.dev.hca().srq_num(x.srq)?;
    let me = Dest {
        lid: 0,
        nums: vec![x.tgt.value(), ep.qpn.value(), ep.psn.value(), srqn],
        gid: ep.dev.gid(),
    };
    let print = |what: &str, d: &Dest| {
        println!(
            "{what:>8}: LID {:04x}, QPN RECV {:06x} SEND {:06x}, PSN {:06x}, SRQN {:06x}, GID {}",
            d.lid,
            d.nums[0],
            d.nums[1],
            d.nums[2],
            d.nums[3],
            nc::gid_text(&d.gid)
        )
    };
    let (remote, mut s) = exchange_dests(args, ep, &me, 4, print)?;
    let (recv_qpn, send_qpn, psn, srqn) = (
        remote.nums[0],
        remote.nums[1],
        remote.nums[2],
        remote.nums[3],
    );
    let to = |qpn: u32| EndpointInfo {
        qpn: Qpn::new(qpn),
        psn: Psn::new(psn),
        gid: remote.gid,
        lid: remote.lid,
    };
    ep.connect(&to(recv_qpn), opts)
        .map_err(|e| format!("Couldn't connect the send QP: {e}"))?;
    let psn = ep.psn;
    softib_core::setup::connect_from_init(ep.dev.hca_mut(), x.tgt, psn, &to(send_qpn), opts)
        .map_err(|e| format!("Couldn't connect the receive QP: {e}"))?;
    handshake(&mut s)?;
    Ok(SendWr::new(SEND_WRID, WrOpcode::Send)
        .with_sge(send_sge)
        .signaled()
        .with_xrc_srqn(srqn))
}

/// Sends `me` and receives the peer's message of `nums` numbers (printing both with `print`),
/// and routes towards the peer.
fn exchange_dests(
    args: &PingpongArgs,
    ep: &mut Endpoint,
    me: &Dest,
    nums: usize,
    print: impl Fn(&str, &Dest),
) -> Result<(Dest, std::net::TcpStream), Error> {
    print("local", me);
    let mut m = [0u8; DEST_MSG_LEN];
    let s = exchange(args, &me.message(), &mut m, |_| Ok(()))?;
    let remote = Dest::parse(&m, nums)?;
    print("remote", &remote);
    args.dev.route_peer(&mut ep.dev, &remote.gid);
    Ok((remote, s))
}

/// Both sides are ready once each has connected: a one-byte handshake each way.
fn handshake(s: &mut std::net::TcpStream) -> Result<(), Error> {
    nc::write_all(s, b"R")?;
    nc::read_full(s, &mut [0u8; 1])?;
    Ok(())
}

/// The RD exchange (`LID:QPN:PSN:EECN:GID`), then the QP is made ready and the EE context
/// connected to the peer's; returns the WR every send posts: through the EE context to the
/// peer's QP, with the Q_Key both sides' QPs hold.
fn rd_connect(
    args: &PingpongArgs,
    ep: &mut Endpoint,
    opts: &ConnectOptions,
    send_sge: Sge,
) -> Result<SendWr, Error> {
    let (_, eecn) = ep.rd.ok_or("not an RD endpoint")?;
    let me = Dest {
        lid: 0,
        nums: vec![ep.qpn.value(), ep.psn.value(), eecn.value()],
        gid: ep.dev.gid(),
    };
    let print = |what: &str, d: &Dest| {
        println!(
            "{what:>8}: LID {:04x}, QPN {:06x}, PSN {:06x}, EECN {:06x}, GID {}",
            d.lid,
            d.nums[0],
            d.nums[1],
            d.nums[2],
            nc::gid_text(&d.gid)
        )
    };
    let (remote, mut s) = exchange_dests(args, ep, &me, 3, print)?;
    let info = EndpointInfo {
        qpn: Qpn::new(remote.nums[0]),
        psn: Psn::new(remote.nums[1]),
        gid: remote.gid,
        lid: remote.lid,
    };
    ep.connect(&info, opts)
        .map_err(|e| format!("Couldn't ready the RD QP: {e}"))?;
    ep.connect_eec(softib_wire::Eecn::new(remote.nums[2]), &info, opts)
        .map_err(|e| format!("Couldn't connect the EE context: {e}"))?;
    handshake(&mut s)?;
    Ok(SendWr::new(SEND_WRID, WrOpcode::Send)
        .with_sge(send_sge)
        .signaled()
        .with_rd(eecn, info.qpn, UD_QKEY))
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
