//! `softib sim` and `softib sim sweep`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use softib_core::verbs::types::Mtu;
use softib_sim::svg::{line_chart, Series};
use softib_sim::{LinkLayer, OpKind, Service, SimConfig, SimReport};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ServiceArg {
    /// Reliable connected.
    Rc,
    /// Unreliable connected (send and write only): every message carries its operation index
    /// as immediate data (write runs as RDMA WRITE with immediate) so the receiver sees each
    /// message; messages that do not arrive whole are reported as lost.
    Uc,
    /// Unreliable datagram (`--op send` only, `--size` 8..=MTU).
    Ud,
    /// Raw IPv6 datagrams (implies --link ib).
    RawIpv6,
    /// Raw EtherType datagrams (implies --link ib).
    RawEthertype,
    /// Extended reliable connected: each QP of node A is an XRC initiator connected to an XRC
    /// target on node B; the targets share one XRC domain with --srqs XRC SRQs, and each
    /// QP's operation k goes to SRQ k mod --srqs.
    Xrc,
    /// Reliable datagram: --qps RD QPs on each node, QP q of node A sending to QP q of node B
    /// through EE context q mod --eecs (many QPs, few reliable connections).
    Rd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LinkArg {
    /// RoCEv2 over Ethernet.
    Ethernet,
    /// Native InfiniBand (LRH, VCRC; the switch forwards by DLID).
    Ib,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OpArg {
    Send,
    Write,
    Read,
    Cas,
    Faa,
}

/// Options shared by a single run and a sweep.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Transport service.
    #[arg(long, value_enum, default_value = "rc")]
    service: ServiceArg,
    /// Link layer of the fabric (raw services need ib and imply it).
    #[arg(long, value_enum)]
    link: Option<LinkArg>,
    /// Operation of every work request [default: write; send for ud and the raw services,
    /// which only send].
    #[arg(long, value_enum)]
    op: Option<OpArg>,
    /// Message size in bytes (atomics move 8) [default: 65536; 1024 for ud and the raw
    /// services, whose messages are single packets].
    #[arg(long)]
    size: Option<u32>,
    /// Operations in total.
    #[arg(long, default_value_t = 2000)]
    ops: u64,
    /// QP pairs (operations are spread evenly).
    #[arg(long, default_value_t = 1)]
    qps: u32,
    /// XRC SRQs of node B (--service xrc).
    #[arg(long, default_value_t = 3)]
    srqs: u32,
    /// EE context pairs the RD QPs share (--service rd).
    #[arg(long, default_value_t = 2)]
    eecs: u32,
    /// Outstanding work requests per QP.
    #[arg(long, default_value_t = 16)]
    depth: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(long, default_value_t = 4096)]
    mtu: u32,
    /// Per-frame duplication probability, every link direction.
    #[arg(long, default_value_t = 0.0)]
    dup: f64,
    /// Per-frame reordering probability.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// Per-frame corruption probability (one flipped bit, caught by the ICRC).
    #[arg(long, default_value_t = 0.0)]
    corrupt: f64,
    /// One-way latency per link in ns.
    #[arg(long, default_value_t = 1000)]
    latency_ns: u64,
    /// Extra random delay per frame in ns (never reorders).
    #[arg(long, default_value_t = 0)]
    jitter_ns: u64,
    /// Link bandwidth in Gb/s.
    #[arg(long, default_value_t = 100.0)]
    gbps: f64,
    /// Requester PSN window: most packets unacknowledged per QP (IBA allows up to 2^23).
    #[arg(long, default_value_t = 32)]
    window: u32,
    /// Transport timer exponent: Ttr = 4.096 us x 2^timeout (0 = never). Default: derived
    /// from the path (about twice the worst round trip, with what every QP or EE context may
    /// have in flight queued on the link).
    #[arg(long)]
    timeout: Option<u8>,
    /// Transport retry count (0..=7).
    #[arg(long, default_value_t = 7)]
    retry: u8,
    /// Seed of every random decision; same seed, same run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// One JSON object (sweep: an array) instead of the readable report.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SimArgs {
    #[command(subcommand)]
    sweep: Option<SimSub>,
    #[command(flatten)]
    common: Option<Common>,
    /// Per-frame loss probability, every link direction.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Write every delivered frame to this pcap (RoCEv2 with the Ethernet link type; with
    /// --link ib, native IB packets as DLT_USER0).
    #[arg(long)]
    pcap: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum SimSub {
    /// Goodput against loss: one run per loss rate, a table (or JSON array) and an SVG plot.
    Sweep {
        #[command(flatten)]
        common: Common,
        /// Loss rates, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "0,0.001,0.01,0.05")]
        loss: Vec<f64>,
        /// Write the goodput-against-loss chart here (SVG).
        #[arg(long)]
        plot: Option<PathBuf>,
    },
}

fn config(c: &Common, loss: f64) -> Result<SimConfig, String> {
    let mtu = match c.mtu {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        4096 => Mtu::Mtu4096,
        m => {
            return Err(format!(
                "--mtu {m} is not an IB MTU (256, 512, 1024, 2048, 4096)"
            ))
        }
    };
    if !(c.gbps > 0.0 && c.gbps.is_finite()) {
        return Err(format!("--gbps must be positive, got {}", c.gbps));
    }
    let datagrams = matches!(
        c.service,
        ServiceArg::Ud | ServiceArg::RawIpv6 | ServiceArg::RawEthertype
    );
    let cfg = SimConfig {
        service: match c.service {
            ServiceArg::Rc => Service::Rc,
            ServiceArg::Uc => Service::Uc,
            ServiceArg::Ud => Service::Ud,
            ServiceArg::RawIpv6 => Service::RawIpv6,
            ServiceArg::RawEthertype => Service::RawEthertype,
            ServiceArg::Xrc => Service::Xrc,
            ServiceArg::Rd => Service::Rd,
        },
        link: match (c.link, c.service) {
            (Some(LinkArg::Ib), _) | (None, ServiceArg::RawIpv6 | ServiceArg::RawEthertype) => {
                LinkLayer::InfiniBand
            }
            _ => LinkLayer::Ethernet,
        },
        op: match c
            .op
            .unwrap_or(if datagrams { OpArg::Send } else { OpArg::Write })
        {
            OpArg::Send => OpKind::Send,
            OpArg::Write => OpKind::Write,
            OpArg::Read => OpKind::Read,
            OpArg::Cas => OpKind::Cas,
            OpArg::Faa => OpKind::Faa,
        },
        size: c.size.unwrap_or(if datagrams { 1024 } else { 65536 }),
        ops: c.ops,
        qps: c.qps,
        srqs: c.srqs,
        eecs: c.eecs,
        depth: c.depth,
        mtu,
        loss,
        dup: c.dup,
        reorder: c.reorder,
        corrupt: c.corrupt,
        latency_ns: c.latency_ns,
        jitter_ns: c.jitter_ns,
        bandwidth_bps: (c.gbps * 1e9) as u64,
        window_psns: c.window,
        timeout: c.timeout.unwrap_or(0),
        retry_cnt: c.retry,
        seed: c.seed,
        ..SimConfig::default()
    };
    let mut cfg = cfg;
    if c.timeout.is_none() {
        cfg.timeout = cfg.path_timeout();
    }
    cfg.validate()?;
    Ok(cfg)
}

fn progress_bar(total: u64, json: bool) -> ProgressBar {
    // Only long runs get a bar, and only on a terminal (indicatif hides it otherwise).
    if json || total < 20_000 {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} ops {elapsed_precise} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

fn run_one(cfg: &SimConfig, pcap: Option<&PathBuf>, json: bool) -> Result<SimReport, String> {
    let sink: Option<Box<dyn std::io::Write>> = match pcap {
        Some(p) => Some(Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?,
        ))),
        None => None,
    };
    let pb = progress_bar(cfg.ops, json);
    let r = softib_sim::run(cfg, sink, &mut |done, _| pb.set_position(done));
    pb.finish_and_clear();
    r
}

pub fn run(args: SimArgs) -> ExitCode {
    match args.sweep {
        Some(SimSub::Sweep { common, loss, plot }) => sweep(&common, &loss, plot.as_ref()),
        None => {
            let common = args.common.unwrap_or_else(|| {
                // No flags at all: clap leaves the flattened group empty.
                <Common as clap::FromArgMatches>::from_arg_matches(
                    &<Common as clap::Args>::augment_args(clap::Command::new("sim"))
                        .get_matches_from(["sim"]),
                )
                .expect("defaults parse")
            });
            let cfg = match config(&common, args.loss) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("softib sim: {e}");
                    return ExitCode::from(2);
                }
            };
            match run_one(&cfg, args.pcap.as_ref(), common.json) {
                Ok(r) => {
                    if common.json {
                        println!("{}", r.to_json());
                    } else {
                        print!("{}", r.to_text());
                        if let Some(p) = &args.pcap {
                            println!("  pcap:        {}", p.display());
                        }
                    }
                    if r.verified {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("softib sim: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn sweep(common: &Common, losses: &[f64], plot: Option<&PathBuf>) -> ExitCode {
    let mut reports = Vec::new();
    for &loss in losses {
        let cfg = match config(common, loss) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("softib sim sweep: {e}");
                return ExitCode::from(2);
            }
        };
        match run_one(&cfg, None, common.json) {
            Ok(r) => reports.push(r),
            Err(e) => {
                eprintln!("softib sim sweep: loss {loss}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let all_verified = reports.iter().all(|r| r.verified);
    if common.json {
        let arr: Vec<_> = reports.iter().map(|r| r.to_json()).collect();
        println!("{}", serde_json::Value::Array(arr));
    } else {
        let base = reports.first().map(|r| r.goodput_gbps).unwrap_or(0.0);
        let c = &reports[0].config;
        println!(
            "softib sim sweep: {} {} x {} of {} bytes, depth {}, MTU {}, seed {}",
            c.service.name().to_uppercase(),
            c.op.name().to_uppercase(),
            c.ops,
            c.size,
            c.depth,
            c.mtu.bytes(),
            c.seed
        );
        println!(
            "{:>8}  {:>13}  {:>9}  {:>11}  {:>9}  {:>9}  {:>8}",
            "loss", "goodput Gb/s", "vs first", "retransmit", "by NAK", "by timer", "result"
        );
        for r in &reports {
            println!(
                "{:>8}  {:>13.3}  {:>8.1}%  {:>11}  {:>9}  {:>9}  {:>8}",
                r.config.loss,
                r.goodput_gbps,
                if base > 0.0 {
                    100.0 * r.goodput_gbps / base
                } else {
                    0.0
                },
                r.retransmissions,
                r.retrans_by_nak,
                r.retrans_by_timeout,
                if r.verified { "verified" } else { "FAILED" }
            );
        }
    }
    if let Some(p) = plot {
        let c = &reports[0].config;
        let title = format!(
            "softib {} {} {} B: goodput vs loss (seed {})",
            c.service.name().to_uppercase(),
            c.op.name().to_uppercase(),
            c.size,
            c.seed
        );
        let svg = line_chart(
            &title,
            "frame loss probability (each link direction)",
            "goodput (Gb/s, simulated)",
            &[Series {
                name: "goodput",
                points: reports
                    .iter()
                    .map(|r| (r.config.loss, r.goodput_gbps))
                    .collect(),
            }],
        );
        if let Err(e) = std::fs::write(p, svg) {
            eprintln!("softib sim sweep: {}: {e}", p.display());
            return ExitCode::FAILURE;
        }
        if !common.json {
            println!("plot: {}", p.display());
        }
    }
    if all_verified {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
