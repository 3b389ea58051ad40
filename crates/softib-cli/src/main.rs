//! `softib` — the softib command line.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench_cmd;
mod cm_cmd;
mod compliance;
mod devinfo_cmd;
mod net_common;
mod pcap_cmd;
mod perftest;
mod pingpong_cmd;
mod relay_cmd;
mod run_cmd;
mod sim_cmd;
mod status_cmd;
mod synth;

#[derive(Parser)]
#[command(
    name = "softib",
    version,
    about = "softib: an InfiniBand transport engine (IBA vol. 1 ch. 9)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check and decode pcap captures of RoCEv2 (Ethernet) or native IB (DLT_USER0) packets.
    Pcap {
        #[command(subcommand)]
        command: pcap_cmd::PcapCommand,
    },
    /// Run RC or UC traffic between two simulated hosts on a deterministic, fault-injecting
    /// fabric and verify every byte (`softib sim sweep` for goodput against loss).
    Sim(Box<sim_cmd::SimArgs>),
    /// Traceability report: which compliance statements are covered by tests.
    Compliance(compliance::ComplianceArgs),
    /// Show the soft RoCEv2 device (like `ibv_devinfo`).
    Devinfo(devinfo_cmd::DevinfoArgs),
    /// Ping-pong over real UDP, exchange-compatible with `ibv_rc/uc/ud_pingpong`.
    Pingpong(Box<pingpong_cmd::PingpongArgs>),
    /// perftest-style bandwidth / latency over real UDP, and the raw-UDP baseline.
    Bench(Box<bench_cmd::BenchArgs>),
    /// A lossy, reordering UDP relay between two softib processes (seeded).
    Relay(relay_cmd::RelayArgs),
    /// Communication Manager diagnostics (`softib cm probe`: one rdma_cm REQ to a peer's CM).
    Cm {
        #[command(subcommand)]
        command: cm_cmd::CmCommand,
    },
    /// The host-wide devices in use on this host (network namespace): the processes that
    /// share each one, their QPs and counters, the ports and listens they hold.
    Status(status_cmd::StatusArgs),
    /// Run an unmodified RDMA program (built against rdma-core's libibverbs) on softib:
    /// `softib run [--bind IP] -- PROGRAM ARGS...`.
    Run(run_cmd::RunArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Pcap { command } => pcap_cmd::run(command),
        Command::Compliance(args) => compliance::run(args),
        Command::Sim(args) => sim_cmd::run(*args),
        Command::Devinfo(args) => devinfo_cmd::run(args),
        Command::Pingpong(args) => pingpong_cmd::run(*args),
        Command::Bench(args) => bench_cmd::run(*args),
        Command::Relay(args) => relay_cmd::run(args),
        Command::Run(args) => run_cmd::run(args),
        Command::Status(args) => status_cmd::run(args),
        Command::Cm { command } => cm_cmd::run(command),
    }
}
