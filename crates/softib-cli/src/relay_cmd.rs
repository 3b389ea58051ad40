//! `softib relay`: the lossy UDP relay of the tests as a tool, to put seeded loss and
//! reordering between two softib processes (see `softib_udp::relay`).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use clap::Args;
use softib_udp::relay::{Relay, RelayConfig};

#[derive(Args, Debug)]
pub struct RelayArgs {
    /// Probability that a datagram is dropped.
    #[arg(long, default_value_t = 0.01)]
    loss: f64,
    /// Probability that a datagram is held back behind the next one.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// Seed of the loss generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 600)]
    duration: u64,
    /// Offer a shared-memory inbox on each side as well: same-host softib peers (in
    /// `--transport auto` or `shm`) then reach the relay, and are reached, without UDP.
    #[arg(long)]
    shm: bool,
    /// Side facing peer A: `LISTEN=PEER`, e.g. `127.0.0.3:4791=127.0.0.1:4791` (peer A runs
    /// with `--peer-via 127.0.0.3:4791`).
    side_a: String,
    /// Side facing peer B: `LISTEN=PEER`, e.g. `127.0.0.4:4791=127.0.0.2:4791`.
    side_b: String,
}

fn side(s: &str) -> Result<(SocketAddr, SocketAddr), String> {
    let (l, p) = s
        .split_once('=')
        .ok_or_else(|| format!("{s}: expected LISTEN=PEER"))?;
    let parse = |x: &str| x.parse::<SocketAddr>().map_err(|e| format!("{x}: {e}"));
    Ok((parse(l)?, parse(p)?))
}

pub fn run(args: RelayArgs) -> ExitCode {
    let r = (|| -> Result<(), Box<dyn std::error::Error>> {
        let (la, pa) = side(&args.side_a)?;
        let (lb, pb) = side(&args.side_b)?;
        let cfg = RelayConfig {
            loss: args.loss,
            reorder: args.reorder,
            seed: args.seed,
        };
        let mut relay = if args.shm {
            Relay::bind_shm(la, pa, lb, pb, cfg)?
        } else {
            Relay::bind(la, pa, lb, pb, cfg)?
        };
        softib_udp::relay::stop_on_signals();
        let stop = AtomicBool::new(false);
        let s = relay.run(&stop, Duration::from_secs(args.duration))?;
        println!("{s:?}");
        Ok(())
    })();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softib relay: {e}");
            ExitCode::FAILURE
        }
    }
}
