//! `softib status`: the host-wide softib devices of this network namespace and user, the
//! processes that share each one (its members), their QPs and counters, and the ports and
//! listens they hold (`softib_udp::host`).

use std::process::ExitCode;

use clap::Args;
use softib_udp::host::{self, DeviceStatus, PortKind, COUNTERS};

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// One JSON object per device instead of the table.
    #[arg(long)]
    json: bool,
    /// Also the members that left (quiet slots, not reused for a while).
    #[arg(long, short)]
    all: bool,
}

pub fn run(args: StatusArgs) -> ExitCode {
    let devices = host::devices();
    if args.json {
        for d in &devices {
            println!("{}", json(d, args.all));
        }
        return ExitCode::SUCCESS;
    }
    if devices.is_empty() {
        println!("no softib device in use in this network namespace");
        return ExitCode::SUCCESS;
    }
    for d in &devices {
        print!("{}", table(d, args.all));
    }
    ExitCode::SUCCESS
}

/// The table of one device.
fn table(d: &DeviceStatus, all: bool) -> String {
    use std::fmt::Write;
    let live = d.members.iter().filter(|m| m.live).count();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "device {}: {live} process{}, {} socket{} in the group, steering program {}{}",
        d.addr,
        if live == 1 { "" } else { "es" },
        d.sockets,
        if d.sockets == 1 { "" } else { "s" },
        d.generation,
        if d.probing { " (probing)" } else { "" }
    );
    let _ = writeln!(
        s,
        "  {:>4} {:>8} {:<16} {:>6} {:>6} {:>5} {:>12} {:>12} {:>10} {:>10} {:>9}",
        "slot",
        "pid",
        "process",
        "state",
        "index",
        "qps",
        "rx",
        "tx",
        "rx shm",
        "tx shm",
        "handed on"
    );
    for m in d.members.iter().filter(|m| all || m.live) {
        let c = |name: &str| {
            COUNTERS
                .iter()
                .position(|n| *n == name)
                .and_then(|i| m.counters.get(i))
                .copied()
                .unwrap_or(0)
        };
        let state = if m.live {
            "live".to_string()
        } else {
            format!("left {}s", m.secs)
        };
        let index = m.index.map_or("-".to_string(), |i| i.to_string());
        let _ = writeln!(
            s,
            "  {:>4} {:>8} {:<16} {:>6} {:>6} {:>5} {:>12} {:>12} {:>10} {:>10} {:>9}",
            m.slot,
            m.pid,
            m.comm,
            state,
            index,
            c("qps"),
            c("rx_datagrams"),
            c("tx_datagrams"),
            c("rx_shm"),
            c("tx_shm"),
            c("forwarded")
        );
    }
    for (key, slot, kind) in &d.ports {
        let what = match kind {
            PortKind::Bound => "bound",
            PortKind::Listening => "listening",
        };
        let _ = writeln!(s, "  service {key:#018x} {what} by slot {slot}");
    }
    for (id, (dev, ino), holders) in &d.xrc_domains {
        let slots: Vec<String> = holders.iter().map(u8::to_string).collect();
        let _ = writeln!(
            s,
            "  XRC domain {id} (file {dev:#x}:{ino}) held by slot{} {}",
            if holders.len() == 1 { "" } else { "s" },
            slots.join(", ")
        );
    }
    for (srqn, domain, credits) in &d.xrc_srqs {
        let _ = writeln!(
            s,
            "  XRC SRQ {srqn:#08x} of domain {domain} (slot {}): {credits} receive{} not reserved",
            srqn >> 16,
            if *credits == 1 { "" } else { "s" }
        );
    }
    s
}

/// One device as a JSON object.
fn json(d: &DeviceStatus, all: bool) -> serde_json::Value {
    let members: Vec<serde_json::Value> = d
        .members
        .iter()
        .filter(|m| all || m.live)
        .map(|m| {
            let counters: serde_json::Map<String, serde_json::Value> = COUNTERS
                .iter()
                .zip(&m.counters)
                .map(|(n, v)| (n.to_string(), (*v).into()))
                .collect();
            serde_json::json!({
                "slot": m.slot,
                "pid": m.pid,
                "process": m.comm,
                "live": m.live,
                "index": m.index,
                "seconds": m.secs,
                "counters": counters,
            })
        })
        .collect();
    let ports: Vec<serde_json::Value> = d
        .ports
        .iter()
        .map(|(key, slot, kind)| {
            serde_json::json!({
                "service_id": key,
                "slot": slot,
                "kind": match kind { PortKind::Bound => "bound", PortKind::Listening => "listening" },
            })
        })
        .collect();
    let xrc_domains: Vec<serde_json::Value> = d
        .xrc_domains
        .iter()
        .map(|(id, (dev, ino), holders)| {
            serde_json::json!({ "id": id, "st_dev": dev, "st_ino": ino, "slots": holders })
        })
        .collect();
    let xrc_srqs: Vec<serde_json::Value> = d
        .xrc_srqs
        .iter()
        .map(|(srqn, domain, credits)| {
            serde_json::json!({ "srqn": srqn, "domain": domain, "credits": credits })
        })
        .collect();
    serde_json::json!({
        "address": d.addr.to_string(),
        "sockets": d.sockets,
        "generation": d.generation,
        "probing": d.probing,
        "members": members,
        "ports": ports,
        "xrc_domains": xrc_domains,
        "xrc_srqs": xrc_srqs,
    })
}
