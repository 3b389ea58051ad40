//! `softib bench`: perftest-style bandwidth and latency tests over softib's UDP runtime, and
//! `softib bench raw-udp`, the plain-UDP baseline with the same batching.
//!
//! # Exchange (softib bench, version 1)
//!
//! The client connects to the server's TCP port (`-p`, 18515) and both sides send one line
//! (client first, then the server's answer):
//!
//! ```text
//! SOFTIB-BENCH/1 <op> <size> <iters> <LID>:<QPN>:<PSN>:<GID> <rkey> <vaddr>\n
//! ```
//!
//! `op` is `write`, `read`, `send` or `atomic`; LID, QPN and PSN are hex as in the pingpong
//! message, GID 32 hex digits of its bytes, `rkey` 8 hex digits and `vaddr` 16 hex digits of
//! the side's buffer. After the test the client sends `done\n` and the server answers
//! `done\n`. (perftest's own exchange is a different message; it is not spoken yet.)
//!
//! # What is measured
//!
//! Bandwidth (`--bw`, the default): the client keeps `--tx-depth` WRs outstanding (READ and
//! atomics: 16, the responder resources it asks for) and requests a completion every 16th WR;
//! time runs from the first post to the last completion. Peak is the best rate over any
//! window of at least a tenth of the iterations. Latency (`--lat`): one WR outstanding at a
//! time, each timed from post to completion (a full round trip for every operation; perftest
//! halves the round trip of WRITE and SEND latency, softib does not). `write --lat
//! --pingpong` measures as perftest's `ib_write_lat` does: the two sides write to each other
//! in turn, each spinning until the other's WRITE lands in its memory, and half of each turn
//! is reported (the one-way figure).

use std::io::{BufRead, BufReader, IoSliceMut, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use quinn_udp::{RecvMeta, Transmit, UdpSockRef, UdpSocketState, BATCH_SIZE};
use softib_core::setup::{ConnectOptions, EndpointInfo};
use softib_core::verbs::types::{Mtu, QpType, SendFlags, WcStatus};
use softib_core::verbs::wr::{RecvWr, RemoteAddr, SendWr, Sge, WrOpcode};
use softib_udp::endpoint::{Endpoint, EndpointConfig};

use crate::net_common::{self as nc, DeviceArgs, Error};
use crate::perftest::{self, Exchange, Incoming, Keys, Report};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Op {
    Write,
    Read,
    Send,
    Atomic,
    /// Plain UDP datagrams, no softib: the baseline of the ratios.
    RawUdp,
    /// No network: the cost of one ICRC of an RC SEND of `--size` bytes over RoCEv2/IPv4
    /// (what each side of a message computes), against `crc32fast` over as many bytes.
    Icrc,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read => "read",
            Op::Send => "send",
            Op::Atomic => "atomic",
            Op::RawUdp => "raw-udp",
            Op::Icrc => "icrc",
        }
    }
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Operation.
    #[arg(value_enum)]
    op: Op,
    /// Server to connect to; without it, wait for a client.
    server: Option<String>,
    /// Message size, bytes (atomics: always 8).
    #[arg(short = 's', long, default_value_t = 65536)]
    size: usize,
    /// Number of messages.
    #[arg(short = 'n', long, default_value_t = 5000)]
    iters: u64,
    /// Measure bandwidth (default).
    #[arg(long, conflicts_with = "lat")]
    bw: bool,
    /// Measure latency.
    #[arg(long)]
    lat: bool,
    /// With `write --lat`, on both sides: perftest's `ib_write_lat` method. The two sides
    /// write `--size` bytes into each other's buffer in turn, each waiting until the other's
    /// write has landed in its own memory, and the latency of a turn is half its round trip
    /// (the one-way figure `ib_write_lat` prints). Without it, `--lat` times each WR from
    /// post to completion: a WRITE and its ACK, a whole round trip.
    #[arg(long, requires = "lat")]
    pingpong: bool,
    /// Print the result as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// TCP port of the exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Outstanding WRs (bandwidth).
    #[arg(short = 't', long, default_value_t = 128)]
    tx_depth: u32,
    /// Path MTU, bytes (raw-udp: datagram payload size of --bw).
    #[arg(short = 'm', long, default_value = "4096", value_parser = nc::parse_mtu)]
    mtu: Mtu,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Client: speak perftest's exchange (to an `ib_write_bw`, `ib_read_bw`, `ib_send_bw` or
    /// `ib_atomic_bw` server, or a softib server). A server recognises either exchange by
    /// itself. With perftest both sides must be given the same size and iterations.
    #[arg(long)]
    perftest: bool,
    /// raw-udp --bw: the sender numbers every datagram (a 64-bit sequence number, little
    /// endian, in its first bytes) and the receiver reads every number and counts gaps and
    /// reordering, the least a real receiver does with each datagram. Without it the receiver
    /// only adds up the lengths the kernel reports and never touches a payload.
    #[arg(long)]
    seq: bool,
    #[command(flatten)]
    dev: DeviceArgs,
}

pub fn run(args: BenchArgs) -> ExitCode {
    let r = if args.op == Op::RawUdp {
        raw_udp(&args)
    } else if args.op == Op::Icrc {
        icrc_cost(&args)
    } else if args.server.is_some() {
        client(&args)
    } else {
        server(&args)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softib bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Message size of an operation.
fn msg_size(op: Op, size: usize) -> usize {
    if op == Op::Atomic {
        8
    } else {
        size.max(1)
    }
}

const RD_ATOMIC: u8 = 16;
const CQ_MOD: u64 = 16;
const SERVER_RECVS: u32 = 8192;

fn options(mtu: Mtu) -> ConnectOptions {
    ConnectOptions {
        path_mtu: mtu,
        max_rd_atomic: RD_ATOMIC,
        max_dest_rd_atomic: RD_ATOMIC,
        ..ConnectOptions::default()
    }
}

fn endpoint(args: &BenchArgs, buf_len: usize, recv_depth: u32) -> Result<Endpoint, Error> {
    let dev = args.dev.open(args.mtu)?;
    let cfg = EndpointConfig {
        qp_type: QpType::Rc,
        buf_len: buf_len.max(8),
        send_depth: args.tx_depth.max(1),
        recv_depth,
        max_inline: 0,
    };
    Endpoint::new(dev, &cfg, nc::random_psn())
}

fn hello(op: Op, size: usize, iters: u64, ep: &Endpoint) -> String {
    let m = nc::pp_message(&ep.info());
    let text = std::str::from_utf8(&m[..nc::PP_MSG_LEN - 1]).unwrap_or("");
    format!(
        "SOFTIB-BENCH/1 {} {size} {iters} {text} {:08x} {:016x}\n",
        op.name(),
        ep.mr.rkey,
        ep.mr.addr
    )
}

struct Hello {
    op: String,
    size: usize,
    iters: u64,
    info: EndpointInfo,
    remote: RemoteAddr,
}

fn parse_hello(line: &str) -> Result<Hello, Error> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 7 || f[0] != "SOFTIB-BENCH/1" {
        return Err(format!("exchange: unexpected message {line:?}").into());
    }
    let bad = |what: &str| format!("exchange: bad {what} in {line:?}");
    Ok(Hello {
        op: f[1].to_string(),
        size: f[2].parse().map_err(|_| bad("size"))?,
        iters: f[3].parse().map_err(|_| bad("iterations"))?,
        info: nc::parse_pp_message(f[4].as_bytes())?,
        remote: RemoteAddr::new(
            u64::from_str_radix(f[6], 16).map_err(|_| bad("vaddr"))?,
            u32::from_str_radix(f[5], 16).map_err(|_| bad("rkey"))?,
        ),
    })
}

fn read_line(r: &mut BufReader<TcpStream>) -> Result<String, Error> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    if line.is_empty() {
        return Err("exchange: connection closed".into());
    }
    Ok(line)
}

fn server(args: &BenchArgs) -> Result<(), Error> {
    let pingpong = write_pingpong_mode(args)?;
    let l = TcpListener::bind(("0.0.0.0", args.port))
        .map_err(|e| format!("couldn't listen to port {}: {e}", args.port))?;
    let (s, _) = l.accept()?;
    // A perftest client opens with its version ("6.06"), a softib client with its hello.
    let mut first = [0u8; 1];
    s.peek(&mut first)?;
    if perftest::looks_like_version(&first) {
        return perftest_server(args, s);
    }
    let mut r = BufReader::new(s.try_clone()?);
    let h = parse_hello(&read_line(&mut r)?)?;
    if h.op != args.op.name() {
        return Err(format!("client runs {}, this side {}", h.op, args.op.name()).into());
    }
    let size = msg_size(args.op, h.size);
    let recvs = if args.op == Op::Send { SERVER_RECVS } else { 1 };
    let mut ep = endpoint(args, if pingpong { 2 * size } else { size }, recvs)?;
    args.dev.route_peer(&mut ep.dev, &h.info.gid);
    ep.connect(&h.info, &options(args.mtu))?;
    let mr = ep.mr;
    let qpn = ep.qpn;
    let rwr = RecvWr::new(0, vec![Sge::new(mr.addr, size as u32, mr.lkey)]);
    if args.op == Op::Send {
        for _ in 0..recvs {
            ep.dev
                .hca_mut()
                .post_recv(qpn, std::slice::from_ref(&rwr))?;
        }
    }
    (&s).write_all(hello(args.op, size, h.iters, &ep).as_bytes())?;
    if pingpong {
        write_pingpong(&mut ep, args, h.remote, size, h.iters, false)?;
    }
    s.set_nonblocking(true)?;
    let mode = args.dev.mode();
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let mut line = String::new();
    let mut wcs = vec![softib_core::verbs::cq::WorkCompletion::default(); 64];
    let rwrs = vec![rwr.clone(); wcs.len()];
    let mut last_check = Instant::now();
    loop {
        ep.dev.progress(mode, Duration::from_millis(1))?;
        if args.op == Op::Send {
            take_receives(&mut ep, &mut wcs, &rwrs)?;
        }
        // The control connection is looked at once a millisecond, not on every poll.
        if last_check.elapsed() < Duration::from_millis(1) {
            continue;
        }
        last_check = Instant::now();
        match r.read_line(&mut line) {
            Ok(0) => return Err("exchange: client went away".into()),
            Ok(_) if line.trim() == "done" => break,
            Ok(_) => return Err(format!("exchange: unexpected {line:?}").into()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
        if Instant::now() > deadline {
            return Err("timed out".into());
        }
    }
    s.set_nonblocking(false)?;
    (&s).write_all(b"done\n")?;
    ep.dev.flush_pcap()?;
    args.dev.report(&ep.dev);
    Ok(())
}

/// Takes every receive completion of a SEND server's CQ (all must be successful) and posts as
/// many receives again; returns how many. All of them, not one batch of `wcs`: a round of
/// the engine can consume a thousand receive WQEs (a long receive batch after a sleep), and
/// reposting fewer per round drained the queue into RNR NAKs (`bench send -e` over shared
/// memory: 0.08 Mpps, 1 400 RNR waits in 100 000 messages).
fn take_receives(
    ep: &mut Endpoint,
    wcs: &mut [softib_core::verbs::cq::WorkCompletion],
    rwrs: &[RecvWr],
) -> Result<usize, Error> {
    let (cq, qpn) = (ep.cq, ep.qpn);
    let mut total = 0;
    loop {
        let n = ep.dev.hca_mut().poll_cq_into(cq, wcs)?;
        if let Some(wc) = wcs[..n].iter().find(|wc| wc.status != WcStatus::Success) {
            return Err(format!("receive failed: {}", wc.status.name()).into());
        }
        if n > 0 {
            ep.dev.hca_mut().post_recv(qpn, &rwrs[..n])?;
        }
        total += n;
        if n < wcs.len() {
            return Ok(total);
        }
    }
}

fn client(args: &BenchArgs) -> Result<(), Error> {
    if args.perftest {
        return perftest_client(args);
    }
    let pingpong = write_pingpong_mode(args)?;
    let server = args.server.as_deref().unwrap_or_default();
    let s = nc::connect_exchange(server, args.port)
        .map_err(|e| format!("couldn't connect to {server}:{}: {e}", args.port))?;
    s.set_nodelay(true)?;
    let size = msg_size(args.op, args.size);
    let mut ep = endpoint(args, if pingpong { 2 * size } else { size }, 16)?;
    (&s).write_all(hello(args.op, size, args.iters, &ep).as_bytes())?;
    let mut r = BufReader::new(s.try_clone()?);
    let h = parse_hello(&read_line(&mut r)?)?;
    args.dev.route_peer(&mut ep.dev, &h.info.gid);
    ep.connect(&h.info, &options(args.mtu))?;
    let run = if pingpong {
        write_pingpong(&mut ep, args, h.remote, size, args.iters, true)?
    } else {
        run_ops(&mut ep, args, h.remote, size)?
    };
    (&s).write_all(b"done\n")?;
    let _ = read_line(&mut r);
    ep.dev.flush_pcap()?;
    args.dev.report(&ep.dev);
    print_run(args, size, run);
    Ok(())
}

/// What a client run measured.
struct Run {
    n: u64,
    secs: f64,
    peak_msgs: f64,
    /// Per-WR latencies, µs (`--lat`).
    lats: Vec<f64>,
}

fn print_run(args: &BenchArgs, size: usize, mut run: Run) {
    if args.lat {
        print_lat(args, size, &mut run.lats);
    } else {
        print_bw(args, size, run.n, run.secs, run.peak_msgs);
    }
}

/// Runs `--iters` operations of `size` bytes on the connected QP of `ep` against `remote`
/// (the peer's buffer for WRITE, READ and atomics).
fn run_ops(
    ep: &mut Endpoint,
    args: &BenchArgs,
    remote: RemoteAddr,
    size: usize,
) -> Result<Run, Error> {
    let lat = args.lat;
    let depth = match args.op {
        _ if lat => 1,
        Op::Read | Op::Atomic => u64::from(RD_ATOMIC).min(u64::from(args.tx_depth)),
        _ => u64::from(args.tx_depth.max(1)),
    };
    let mr = ep.mr;
    let op = match args.op {
        Op::Write => WrOpcode::RdmaWrite { remote },
        Op::Read => WrOpcode::RdmaRead { remote },
        Op::Send => WrOpcode::Send,
        _ => WrOpcode::AtomicFetchAdd {
            remote_addr: remote.addr,
            rkey: remote.rkey,
            add: 1,
        },
    };
    // WRs are built once and reused: each post only renumbers them (no allocation per WR).
    let template = SendWr::new(0, op).with_sge(Sge::new(mr.addr, size as u32, mr.lkey));
    let qpn = ep.qpn;
    let mode = args.dev.mode();
    let n = args.iters.max(1);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(args.timeout);
    let mut batch: Vec<SendWr> = vec![template; depth.min(n) as usize];
    let (mut posted, mut done) = (0u64, 0u64);
    let mut samples: Vec<(u64, Instant)> = vec![(0, start)];
    let mut lats: Vec<f64> = Vec::new();
    let mut t_post = start;
    while done < n {
        let room = (n - posted).min(depth - (posted - done)) as usize;
        if room > 0 {
            for (k, wr) in batch[..room].iter_mut().enumerate() {
                let i = posted + k as u64;
                wr.wr_id = i;
                wr.flags = if lat || (i + 1) % CQ_MOD == 0 || i + 1 == n || depth <= CQ_MOD {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::empty()
                };
            }
            if lat {
                t_post = Instant::now();
            }
            ep.dev.hca_mut().post_send(qpn, &batch[..room])?;
            posted += room as u64;
        }
        let wcs = ep.wait_completions(mode, deadline)?;
        if wcs.is_empty() {
            return Err(format!("timed out: {done} of {n} completed").into());
        }
        let now = Instant::now();
        for wc in wcs {
            if wc.status != WcStatus::Success {
                return Err(format!("WR {} failed: {}", wc.wr_id, wc.status.name()).into());
            }
            done = wc.wr_id + 1;
        }
        if lat {
            lats.push(now.duration_since(t_post).as_secs_f64() * 1e6);
        }
        samples.push((done, now));
    }
    Ok(Run {
        n,
        secs: start.elapsed().as_secs_f64(),
        peak_msgs: peak_rate(&samples),
        lats,
    })
}

/// Takes the completions queued on `ep`'s CQ (all must be successful); returns how many.
fn send_completions(
    ep: &mut Endpoint,
    wcs: &mut [softib_core::verbs::cq::WorkCompletion],
) -> Result<u64, Error> {
    let got = ep.dev.hca_mut().poll_cq_into(ep.cq, wcs)?;
    if let Some(wc) = wcs[..got].iter().find(|wc| wc.status != WcStatus::Success) {
        return Err(format!("WR {} failed: {}", wc.wr_id, wc.status.name()).into());
    }
    Ok(got as u64)
}

/// True for `write --lat --pingpong`; an error for `--pingpong` with another operation.
fn write_pingpong_mode(args: &BenchArgs) -> Result<bool, Error> {
    if args.pingpong && args.op != Op::Write {
        return Err("--pingpong is a WRITE latency test (perftest's ib_write_lat)".into());
    }
    Ok(args.pingpong)
}

/// `write --lat --pingpong` (perftest's `ib_write_lat` method) on one side: `iters` turns in
/// which the initiator (the client) writes `size` bytes from the second half of its buffer
/// into the first half of the peer's (`remote`) and waits until the peer's write lands in
/// the first half of its own; the other side waits first and answers. The last byte of each
/// write is the turn's marker (1..=255, cycling), which tells the waiting side it has
/// arrived. The initiator returns each turn's round trip halved.
fn write_pingpong(
    ep: &mut Endpoint,
    args: &BenchArgs,
    remote: RemoteAddr,
    size: usize,
    iters: u64,
    initiator: bool,
) -> Result<Run, Error> {
    let (mr, qpn) = (ep.mr, ep.qpn);
    let size = size.max(1);
    let mode = args.dev.mode();
    let n = iters.max(1);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(args.timeout);
    let mut wr = SendWr::new(0, WrOpcode::RdmaWrite { remote }).with_sge(Sge::new(
        mr.addr + size as u64,
        size as u32,
        mr.lkey,
    ));
    let mut wcs = vec![softib_core::verbs::cq::WorkCompletion::default(); 16];
    let mut lats = Vec::with_capacity(if initiator { n as usize } else { 0 });
    // Completions are asked for now and then (and for the last turn), so that the send
    // queue's CQ is drained without a completion per turn.
    let mut signaled = 0u64;
    let mut send = |ep: &mut Endpoint, i: u64, marker: u8| -> Result<(), Error> {
        ep.dev
            .hca_mut()
            .mr_write(mr.handle, 2 * size - 1, &[marker])?;
        wr.wr_id = i;
        wr.flags = if i % 16 == 15 || i + 1 == n {
            signaled += 1;
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        };
        ep.dev.hca_mut().post_send(qpn, std::slice::from_ref(&wr))?;
        Ok(())
    };
    let mut completed = 0u64;
    let mut wait_for = |ep: &mut Endpoint, marker: u8| -> Result<(), Error> {
        let mut byte = [0u8];
        let mut polls = 0u32;
        loop {
            ep.dev.progress(mode, Duration::from_millis(1))?;
            ep.dev.hca().mr_read(mr.handle, size - 1, &mut byte)?;
            if byte[0] == marker {
                break;
            }
            polls = polls.wrapping_add(1);
            if polls % 1024 == 0 && Instant::now() > deadline {
                return Err("timed out".into());
            }
        }
        completed += send_completions(ep, &mut wcs)?;
        Ok(())
    };
    for i in 0..n {
        let marker = (i % 255) as u8 + 1;
        if initiator {
            let t0 = Instant::now();
            send(ep, i, marker)?;
            wait_for(ep, marker)?;
            lats.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
        } else {
            wait_for(ep, marker)?;
            send(ep, i, marker)?;
        }
    }
    // The last WRITE is acknowledged before the run ends, and the peer's last WRITE too: the
    // ACK for it leaves in the next round at the latest.
    loop {
        ep.dev.progress(mode, Duration::from_millis(1))?;
        completed += send_completions(ep, &mut wcs)?;
        if completed >= signaled {
            break;
        }
        if Instant::now() > deadline {
            return Err("timed out".into());
        }
    }
    Ok(Run {
        n,
        secs: start.elapsed().as_secs_f64(),
        peak_msgs: 0.0,
        lats,
    })
}

/// Best messages/second over any window of at least a tenth of the run time (completions
/// arrive in bursts, one ACK completing many WRs, so shorter windows would overstate it).
fn peak_rate(samples: &[(u64, Instant)]) -> f64 {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return 0.0;
    };
    let w = last.1.duration_since(first.1) / 10;
    let mut best = 0.0f64;
    let mut j = 0;
    for i in 0..samples.len() {
        j = j.max(i);
        while j < samples.len() && samples[j].1.duration_since(samples[i].1) < w {
            j += 1;
        }
        if j == samples.len() {
            break;
        }
        let dt = samples[j].1.duration_since(samples[i].1).as_secs_f64();
        if dt > 0.0 {
            best = best.max((samples[j].0 - samples[i].0) as f64 / dt);
        }
    }
    best
}

fn print_bw(args: &BenchArgs, size: usize, n: u64, secs: f64, peak_msgs: f64) {
    let avg_msgs = n as f64 / secs;
    let peak_msgs = peak_msgs.max(avg_msgs);
    let b = size as f64;
    let (peak_gb, avg_gb) = (peak_msgs * b * 8.0 / 1e9, avg_msgs * b * 8.0 / 1e9);
    let (peak_mib, avg_mib) = (peak_msgs * b / 1048576.0, avg_msgs * b / 1048576.0);
    let mpps = avg_msgs / 1e6;
    if args.json {
        let v = serde_json::json!({
            "tool": "softib bench", "op": args.op.name(), "mode": "bw",
            "bytes": size, "iterations": n, "seconds": secs,
            "bw_peak_gbps": peak_gb, "bw_avg_gbps": avg_gb,
            "bw_peak_mibps": peak_mib, "bw_avg_mibps": avg_mib,
            "msg_rate_mpps": mpps,
        });
        println!("{v}");
        return;
    }
    let line = "-".repeat(100);
    println!("{line}");
    println!(
        " {:<10} {:<13} {:<17} {:<20} {:<17} {:<20} {:<14}",
        "#bytes",
        "#iterations",
        "BW peak[Gb/sec]",
        "BW average[Gb/sec]",
        "BW peak[MiB/sec]",
        "BW average[MiB/sec]",
        "MsgRate[Mpps]"
    );
    println!(
        " {size:<10} {n:<13} {peak_gb:<17.2} {avg_gb:<20.2} {peak_mib:<17.2} {avg_mib:<20.2} {mpps:<14.6}"
    );
    println!("{line}");
}

fn print_lat(args: &BenchArgs, size: usize, lats: &mut [f64]) {
    lats.sort_by(|a, b| a.total_cmp(b));
    let n = lats.len().max(1);
    let at = |q: f64| {
        lats.get(((n as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let (min, med, p99, max) = (at(0.0), at(0.5), at(0.99), at(1.0));
    let avg = lats.iter().sum::<f64>() / n as f64;
    if args.json {
        let v = serde_json::json!({
            "tool": "softib bench", "op": args.op.name(), "mode": "lat",
            "bytes": size, "iterations": lats.len(),
            "t_min_us": min, "t_median_us": med, "t_p99_us": p99, "t_max_us": max,
            "t_avg_us": avg,
        });
        println!("{v}");
        return;
    }
    let line = "-".repeat(96);
    println!("{line}");
    println!(
        " {:<10} {:<13} {:<14} {:<17} {:<14} {:<14} {:<14}",
        "#bytes",
        "#iterations",
        "t_min[usec]",
        "t_median[usec]",
        "t_p99[usec]",
        "t_max[usec]",
        "t_avg[usec]"
    );
    println!(
        " {size:<10} {:<13} {min:<14.2} {med:<17.2} {p99:<14.2} {max:<14.2} {avg:<14.2}",
        lats.len()
    );
    println!("{line}");
}

// ----- perftest's exchange ---------------------------------------------------------------

/// This side's keys: the QP, its first PSN, the buffer, the GID; out_reads is the READ/atomic
/// depth this responder takes (1 for WRITE and SEND, as perftest announces).
fn perftest_keys(args: &BenchArgs, ep: &Endpoint) -> Keys {
    Keys {
        lid: 0,
        out_reads: match args.op {
            Op::Read | Op::Atomic => u16::from(RD_ATOMIC),
            _ => 1,
        },
        qpn: ep.qpn.value(),
        psn: ep.psn.value(),
        rkey: ep.mr.rkey,
        vaddr: ep.mr.addr,
        gid: ep.dev.gid(),
        srqn: 0,
    }
}

/// Connects the QP of `ep` to the peer's keys at the agreed MTU.
fn perftest_connect(
    args: &BenchArgs,
    ep: &mut Endpoint,
    theirs: &Keys,
    mtu: Mtu,
) -> Result<(), Error> {
    // perftest refuses to mix an IPv4-mapped GID with an IPv6 one (ctx_check_gid_compatibility).
    let v4 = |g: &softib_core::verbs::types::Gid| {
        g.0[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]
    };
    if v4(&theirs.gid) != v4(&ep.dev.gid()) {
        return Err(format!(
            "the peer's GID {} and this side's {} are not both IPv4 (or both IPv6)",
            nc::gid_text(&theirs.gid),
            nc::gid_text(&ep.dev.gid())
        )
        .into());
    }
    let info = EndpointInfo {
        qpn: softib_wire::Qpn::new(theirs.qpn),
        psn: softib_wire::Psn::new(theirs.psn),
        gid: theirs.gid,
        lid: theirs.lid,
    };
    args.dev.route_peer(&mut ep.dev, &info.gid);
    let o = ConnectOptions {
        path_mtu: mtu,
        // The peer responder takes at most its out_reads outstanding READs/atomics.
        max_rd_atomic: RD_ATOMIC.min(theirs.out_reads.clamp(1, 255) as u8),
        max_dest_rd_atomic: RD_ATOMIC,
        ..ConnectOptions::default()
    };
    ep.connect(&info, &o)
}

/// Bytes of the buffer a perftest peer may target: perftest's client cycles its remote
/// address through `max(size, cycle buffer)` bytes from the announced VA.
fn perftest_buf_len(size: usize, cycle_buffer: u32) -> usize {
    size.max(cycle_buffer as usize) + size
}

/// `softib bench --perftest SERVER`: the client's side of perftest's exchange (see
/// [`crate::perftest`]).
fn perftest_client(args: &BenchArgs) -> Result<(), Error> {
    if args.pingpong {
        return Err("--pingpong speaks softib's exchange, not perftest's".into());
    }
    let server = args.server.as_deref().unwrap_or_default();
    let s = nc::connect_exchange(server, args.port)
        .map_err(|e| format!("couldn't connect to {server}:{}: {e}", args.port))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(args.timeout)))?;
    let mut x = Exchange::new(s, true);
    let agreed = x.preamble(args.mtu)?;
    let size = msg_size(args.op, args.size);
    let mut ep = endpoint(args, size, 16)?;
    let keys = perftest_keys(args, &ep);
    let theirs = x.handshake(&keys)?;
    perftest_connect(args, &mut ep, &theirs, agreed.mtu)?;
    // The server is in RTR/RTS after the second handshake; perftest's SEND server has its
    // receives posted by the fourth.
    let syncs = if args.op == Op::Send { 3 } else { 2 };
    for _ in 0..syncs {
        x.handshake(&keys)?;
    }
    let run = run_ops(
        &mut ep,
        args,
        RemoteAddr::new(theirs.vaddr, theirs.rkey),
        size,
    )?;
    if args.op != Op::Send {
        x.handshake(&keys)?;
        x.swap_report(&Report::of_run(size, run.n, run.secs, run.peak_msgs))?;
    }
    x.handshake(&keys)?;
    x.done();
    ep.dev.flush_pcap()?;
    args.dev.report(&ep.dev);
    print_run(args, size, run);
    Ok(())
}

/// The server's side of perftest's exchange: answers whatever the client sends (see
/// [`crate::perftest`]) while driving the device. WRITE, READ and atomics print the client's
/// report, SEND the rate this side received at.
fn perftest_server(args: &BenchArgs, s: TcpStream) -> Result<(), Error> {
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(args.timeout)))?;
    let mut x = Exchange::new(s.try_clone()?, false);
    let agreed = x.preamble(args.mtu)?;
    let size = msg_size(args.op, args.size);
    let recvs = if args.op == Op::Send { SERVER_RECVS } else { 1 };
    let mut ep = endpoint(args, perftest_buf_len(size, agreed.cycle_buffer), recvs)?;
    let keys = perftest_keys(args, &ep);
    let (mr, qpn) = (ep.mr, ep.qpn);
    let rwr = RecvWr::new(0, vec![Sge::new(mr.addr, size as u32, mr.lkey)]);
    if args.op == Op::Send {
        let rwrs = vec![rwr.clone(); recvs as usize];
        ep.dev.hca_mut().post_recv(qpn, &rwrs)?;
    }
    let report_fields = perftest::report_field_lens(x.peer_version);
    s.set_nonblocking(true)?;
    let mode = args.dev.mode();
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let mut wcs = vec![softib_core::verbs::cq::WorkCompletion::default(); 64];
    let rwrs = vec![rwr; wcs.len()];
    let mut inbox: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 512];
    let (mut connected, mut handshakes) = (false, 0u32);
    let mut report: Vec<Vec<u8>> = Vec::new();
    let mut received = 0u64;
    let mut samples: Vec<(u64, Instant)> = Vec::new();
    let mut last_check = Instant::now();
    let mut finished = false;
    while !finished {
        ep.dev.progress(mode, Duration::from_millis(1))?;
        if args.op == Op::Send {
            let n = take_receives(&mut ep, &mut wcs, &rwrs)?;
            if n > 0 {
                received += n as u64;
                samples.push((received, Instant::now()));
            }
        }
        // The control connection is looked at once a millisecond, not on every poll.
        if last_check.elapsed() < Duration::from_millis(1) {
            continue;
        }
        last_check = Instant::now();
        if last_check > deadline {
            return Err("timed out".into());
        }
        let mut closed = false;
        match (&s).read(&mut chunk) {
            Ok(0) => closed = true,
            Ok(k) => inbox.extend_from_slice(&chunk[..k]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
        // Answer every complete message.
        loop {
            // Inside a report its fields follow one another, whatever their first byte.
            let in_report = !report.is_empty() && report.len() < report_fields.len();
            let want = if in_report {
                report_fields[report.len()]
            } else {
                match Incoming::classify(&inbox) {
                    Some(k) => k.len(),
                    None if inbox.is_empty() => break,
                    None => {
                        return Err(format!(
                            "perftest exchange: unexpected bytes {:02x?}",
                            &inbox[..inbox.len().min(16)]
                        )
                        .into())
                    }
                }
            };
            if inbox.len() < want {
                break;
            }
            let msg: Vec<u8> = inbox.drain(..want).collect();
            s.set_nonblocking(false)?;
            if in_report || (report.is_empty() && msg[0] == 0) {
                // A report field: answered with zeros of its size.
                report.push(msg);
                (&s).write_all(&vec![0u8; want])?;
            } else if msg.as_slice() == perftest::DONE {
                x.done();
                finished = true;
            } else {
                let theirs = Keys::parse(&msg)?;
                if !connected {
                    perftest_connect(args, &mut ep, &theirs, agreed.mtu)?;
                    connected = true;
                }
                (&s).write_all(&keys.to_message())?;
                handshakes += 1;
            }
            s.set_nonblocking(true)?;
        }
        if closed && !finished {
            if handshakes >= 2 {
                break;
            }
            return Err("perftest exchange: the client went away".into());
        }
    }
    ep.dev.flush_pcap()?;
    args.dev.report(&ep.dev);
    if args.op == Op::Send {
        let n = args.iters.max(1);
        if received < n {
            return Err(format!("received {received} of {n} messages").into());
        }
        let (t0, t1) = (samples[0].1, samples[samples.len() - 1].1);
        let secs = t1.duration_since(t0).as_secs_f64().max(1e-9);
        // From the first completion to the last: the first message's own time is not seen.
        let rate = (received - samples[0].0) as f64 / secs;
        let secs = received as f64 / rate.max(1e-9);
        print_bw(args, size, received, secs, peak_rate(&samples));
    } else if let Ok(fields) = <[Vec<u8>; 5]>::try_from(report) {
        let r = Report::from_fields(&fields);
        let (secs, peak_msgs) = r.run();
        print_bw(args, r.size as usize, r.iters, secs, peak_msgs);
    } else {
        return Err("perftest exchange: the client sent no report".into());
    }
    Ok(())
}

// ----- the ICRC's share ------------------------------------------------------------------

/// `softib bench icrc`: times the ICRC of an RC SEND-only packet with `--size` payload bytes
/// over RoCEv2/IPv4 (the masked IPv4 and UDP headers, BTH and payload: what the sender
/// computes and the receiver checks for every packet) and, in alternating rounds, `crc32fast`
/// over the same number of bytes in one piece. Prints ns per ICRC (best of 15 rounds of
/// `--iters` ICRCs over 64 distinct packets, so that the compiler cannot fold them) and the
/// ratio to crc32fast. `bench/udp-ratios.sh` sets it beside raw UDP's time per datagram.
fn icrc_cost(args: &BenchArgs) -> Result<(), Error> {
    use softib_wire::icrc;
    use std::hint::black_box;
    let size = args.size;
    let iters = args.iters.max(1);
    // IPv4 header (20 bytes, DF, TTL 64, UDP), UDP header to 4791, then BTH + payload.
    let udp_len = (8 + 12 + size + icrc::LEN) as u16;
    let ip_len = 20 + udp_len;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[127, 0, 0, 2]);
    ip[16..20].copy_from_slice(&[127, 0, 0, 1]);
    let mut udp = [0u8; 8];
    udp[0..2].copy_from_slice(&4791u16.to_be_bytes());
    udp[2..4].copy_from_slice(&4791u16.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    const PKTS: usize = 64;
    let covered = 12 + size;
    let mut pkts = vec![0u8; PKTS * covered];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for b in pkts.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let mut flat = vec![0u8; 8 + 20 + 8 + covered];
    let n_flat = flat.len();
    fn time(pkts: &[u8], covered: usize, iters: u64, mut f: impl FnMut(&[u8]) -> u32) -> f64 {
        let t = Instant::now();
        let mut acc = 0u32;
        for p in pkts.chunks_exact(covered).cycle().take(iters as usize) {
            acc ^= f(black_box(p));
        }
        black_box(acc);
        t.elapsed().as_secs_f64() * 1e9 / iters as f64
    }
    let (mut best_icrc, mut best_crc) = (f64::MAX, f64::MAX);
    for _ in 0..15 {
        best_icrc = best_icrc.min(time(&pkts, covered, iters, |p| icrc::roce_v4(&ip, &udp, p)));
        best_crc = best_crc.min(time(&pkts, covered, iters, |p| {
            flat[n_flat - covered..].copy_from_slice(p);
            crc32fast::hash(black_box(&flat))
        }));
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({"tool": "softib bench", "op": "icrc", "bytes": size,
                "covered_bytes": n_flat, "icrc_ns": best_icrc,
                "crc32fast_copy_ns": best_crc, "ratio_to_crc32fast": best_icrc / best_crc})
        );
    } else {
        println!(
            "ICRC of a {size}-byte RC SEND over RoCEv2/IPv4 ({n_flat} covered bytes): {best_icrc:.1} ns; \
             crc32fast over as many bytes (after a copy of the packet's): {best_crc:.1} ns; ratio {:.2}",
            best_icrc / best_crc
        );
    }
    Ok(())
}

// ----- raw UDP baseline -------------------------------------------------------------------

/// The raw-UDP baseline: `--bw` streams `iters` messages of `--size` bytes, each cut into
/// datagrams of at most `--mtu` bytes, sent in GSO batches of up to 64 equal segments
/// (`sendmsg` with UDP_SEGMENT; the same batching softib's runtime uses), received with
/// `recvmmsg` + GRO; the receiver (the side without SERVER) reports the rate it saw, from its
/// first to its last data datagram. An empty datagram ends the stream. With `--seq` (both
/// sides) the sender numbers its datagrams and the receiver reads every number, as any real
/// receiver at least looks at each datagram it gets; without it the receiver never reads a
/// payload. `--lat` bounces one
/// `--size` datagram back and forth `iters` times with busy polling and prints usec/iter
/// like pingpong. Idle polls yield the CPU, or sleep in poll(2) with `-e`, as softib's
/// progress engine does. Both sides use `--bind` (default 127.0.0.1:4791) locally; the client sends
/// to SERVER port 4791 (or SERVER:PORT).
fn raw_udp(args: &BenchArgs) -> Result<(), Error> {
    let local = args.dev.bind_addr()?;
    let sock = UdpSocket::bind(local).map_err(|e| format!("bind {local}: {e}"))?;
    let state = UdpSocketState::new(UdpSockRef::from(&sock))?;
    let sref = socket2::SockRef::from(&sock);
    let _ = sref.set_recv_buffer_size(4 << 20);
    let _ = sref.set_send_buffer_size(4 << 20);
    let peer: Option<SocketAddr> = match &args.server {
        Some(s) => Some(match s.parse::<SocketAddr>() {
            Ok(a) => a,
            Err(_) => SocketAddr::new(
                s.parse::<IpAddr>()
                    .map_err(|_| format!("{s}: not an IP address"))?,
                softib_wire::udp::ROCEV2_PORT,
            ),
        }),
        None => None,
    };
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let size = args.size.max(1);
    let mut bufs = vec![0u8; 65536 * BATCH_SIZE];
    let mut meta = vec![RecvMeta::default(); BATCH_SIZE];
    let mut idle = 0u32;
    let mode = args.dev.mode();
    let mut recv = |bufs: &mut [u8], meta: &mut [RecvMeta]| -> std::io::Result<usize> {
        let mut chunks = bufs.chunks_exact_mut(65536);
        let mut slices: [IoSliceMut<'_>; BATCH_SIZE] =
            std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or_default()));
        match state.recv(UdpSockRef::from(&sock), &mut slices, meta) {
            Ok(n) => {
                idle = 0;
                Ok(n)
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // Idle: the same discipline as softib's progress engine.
                idle = idle.saturating_add(1);
                softib_udp::idle_step(
                    &sock,
                    mode,
                    idle,
                    args.dev.busy_yields,
                    Duration::from_millis(10),
                )?;
                Ok(0)
            }
            Err(e) => Err(e),
        }
    };
    if args.lat {
        let payload = vec![0x5au8; size];
        let mut got = 0u64;
        let start = Instant::now();
        let mut from = peer;
        if let Some(p) = peer {
            sock.send_to(&payload, p)?;
        }
        while got < args.iters {
            let n = recv(&mut bufs, &mut meta)?;
            for m in meta.iter().take(n) {
                got += 1;
                from = Some(m.addr);
                if peer.is_none() || got < args.iters {
                    sock.send_to(&payload, m.addr)?;
                }
            }
            if Instant::now() > deadline {
                return Err(format!("timed out after {got} round trips").into());
            }
        }
        let _ = from;
        let usec = start.elapsed().as_secs_f64() * 1e6;
        if args.json {
            println!(
                "{}",
                serde_json::json!({"tool": "softib bench", "op": "raw-udp", "mode": "lat",
                    "bytes": size, "iterations": args.iters, "usec_per_iter": usec / args.iters as f64})
            );
        } else {
            println!(
                "{} iters in {:.2} seconds = {:.2} usec/iter",
                args.iters,
                usec / 1e6,
                usec / args.iters as f64
            );
        }
        return Ok(());
    }
    let seg = size.min(args.mtu.bytes() as usize);
    match peer {
        Some(p) => {
            // Sender: messages as datagrams, GSO runs of up to the kernel's most segments.
            let mut msg_datagrams: Vec<usize> = Vec::new();
            let mut left = size;
            while left > 0 {
                msg_datagrams.push(left.min(seg));
                left -= left.min(seg);
            }
            let total: Vec<usize> = (0..args.iters)
                .flat_map(|_| msg_datagrams.iter().copied())
                .collect();
            let mut data = vec![0x5au8; 65536];
            let mut seq = 0u64;
            // The kernel's most segments per GSO send, as softib's UDP device uses.
            let max_segs = if state.max_gso_segments() > 1 {
                softib_udp::gso_max_segments()
            } else {
                1
            };
            let mut i = 0;
            let mut syscalls = 0u64;
            while i < total.len() {
                let mut j = i + 1;
                let mut bytes = total[i];
                while j < total.len()
                    && j - i < max_segs
                    && total[j - 1] == seg
                    && total[j] <= seg
                    && bytes + total[j] <= 65_000
                {
                    bytes += total[j];
                    j += 1;
                }
                if args.seq {
                    // Every segment but the last is total[i] bytes long.
                    for k in 0..j - i {
                        let at = k * total[i];
                        let n = total[i + k].min(8);
                        data[at..at + n].copy_from_slice(&seq.to_le_bytes()[..n]);
                        seq += 1;
                    }
                }
                let t = Transmit {
                    destination: p,
                    ecn: None,
                    contents: &data[..bytes],
                    segment_size: (j - i > 1).then_some(total[i]),
                    src_ip: None,
                };
                loop {
                    syscalls += 1;
                    match state.try_send(UdpSockRef::from(&sock), &t) {
                        Ok(()) => break,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::yield_now()
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                i = j;
            }
            for _ in 0..10 {
                sock.send_to(&[], p)?;
                std::thread::sleep(Duration::from_millis(2));
            }
            if !args.json {
                println!("sent {} datagrams in {syscalls} system calls", total.len());
            }
            Ok(())
        }
        None => {
            let (mut bytes, mut datagrams) = (0u64, 0u64);
            // --seq: the next sequence number expected, datagrams missing, datagrams that
            // arrived after a later one.
            let (mut next_seq, mut lost, mut reordered) = (0u64, 0u64, 0u64);
            let mut first: Option<Instant> = None;
            let mut last = Instant::now();
            'outer: loop {
                let n = recv(&mut bufs, &mut meta)?;
                let now = Instant::now();
                for (m, buf) in meta.iter().take(n).zip(bufs.chunks_exact(65536)) {
                    if m.len == 0 {
                        if first.is_some() {
                            break 'outer;
                        }
                        continue;
                    }
                    first.get_or_insert(now);
                    last = now;
                    bytes += m.len as u64;
                    datagrams += m.len.div_ceil(m.stride.max(1)) as u64;
                    if args.seq {
                        for d in buf[..m.len].chunks(m.stride.max(1)) {
                            let (got, want) = match d.first_chunk::<8>() {
                                Some(b) => (u64::from_le_bytes(*b), next_seq),
                                None => {
                                    // A datagram under 8 bytes holds the low bytes.
                                    let mut b = [0u8; 8];
                                    b[..d.len()].copy_from_slice(d);
                                    let mask = u64::MAX >> (64 - 8 * d.len());
                                    (u64::from_le_bytes(b), next_seq & mask)
                                }
                            };
                            if got == want {
                                next_seq += 1;
                            } else if got > want {
                                lost += got - want;
                                next_seq += got - want + 1;
                            } else {
                                reordered += 1;
                                lost = lost.saturating_sub(1);
                            }
                        }
                    }
                }
                if now > deadline {
                    return Err("timed out".into());
                }
            }
            let secs = last
                .duration_since(first.unwrap_or(last))
                .as_secs_f64()
                .max(1e-9);
            let msgs = bytes / size as u64;
            let (gbps, mib) = (
                bytes as f64 * 8.0 / secs / 1e9,
                bytes as f64 / secs / 1048576.0,
            );
            let mpps = msgs as f64 / secs / 1e6;
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({"tool": "softib bench", "op": "raw-udp", "mode": "bw",
                        "bytes": size, "iterations": msgs, "datagrams": datagrams,
                        "sent_iterations": args.iters, "seconds": secs,
                        "bw_avg_gbps": gbps, "bw_avg_mibps": mib, "msg_rate_mpps": mpps,
                        "seq_checked": args.seq, "seq_lost": lost, "seq_reordered": reordered})
                );
            } else {
                println!(
                    "raw-udp: {msgs} messages of {size} B ({datagrams} datagrams) in {secs:.3} s: {gbps:.2} Gb/sec, {mib:.2} MiB/sec, {mpps:.6} Mpps"
                );
                if args.seq {
                    println!(
                        "raw-udp: sequence numbers: {lost} datagrams lost, {reordered} reordered"
                    );
                }
            }
            let _ = std::io::stdout().flush();
            Ok(())
        }
    }
}
