//! `softib devinfo`: the soft RoCEv2 device as `ibv_devinfo -v` shows a device.

use std::process::ExitCode;

use clap::Args;
use softib_core::verbs::types::Mtu;
use softib_core::Hca;

use crate::net_common::{gid_text, DeviceArgs};

#[derive(Args, Debug)]
pub struct DevinfoArgs {
    /// Local address of the device (its GID): `IP` or `IP:PORT`.
    #[arg(long, default_value = "127.0.0.1")]
    bind: String,
    /// Active MTU of the port, bytes.
    #[arg(short = 'm', long, default_value = "4096", value_parser = crate::net_common::parse_mtu)]
    mtu: Mtu,
    /// Print every device limit (`ibv_devinfo -v`).
    #[arg(short = 'v', long)]
    verbose: bool,
}

pub fn run(args: DevinfoArgs) -> ExitCode {
    let dev = DeviceArgs::plain(&args.bind, None);
    let cfg = match dev.config(args.mtu) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("softib devinfo: {e}");
            return ExitCode::from(2);
        }
    };
    // The device as `softib pingpong` / `softib bench` open it (no socket needed to show it).
    let hca = Hca::new(cfg.hca_config());
    print!("{}", describe(&hca, &cfg.bind.to_string(), args.verbose));
    ExitCode::SUCCESS
}

fn describe(hca: &Hca, bind: &str, verbose: bool) -> String {
    use std::fmt::Write;
    let d = hca.query_device();
    let g = |v: u64| {
        let b = v.to_be_bytes();
        format!(
            "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
        )
    };
    let mut s = String::new();
    let _ = writeln!(s, "hca_id:\tsoftib0");
    let _ = writeln!(s, "\ttransport:\t\t\tInfiniBand (0)");
    let _ = writeln!(s, "\tfw_ver:\t\t\t\t{}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(s, "\tnode_guid:\t\t\t{}", g(d.node_guid));
    let _ = writeln!(s, "\tsys_image_guid:\t\t\t{}", g(d.sys_image_guid));
    let _ = writeln!(s, "\tvendor_id:\t\t\t{:#06x}", d.vendor_id);
    let _ = writeln!(s, "\tvendor_part_id:\t\t\t{}", d.vendor_part_id);
    let _ = writeln!(s, "\thw_ver:\t\t\t\t{:#x}", d.hw_ver);
    let _ = writeln!(s, "\tphys_port_cnt:\t\t\t{}", d.phys_port_cnt);
    if verbose {
        let rows: [(&str, u64); 24] = [
            ("max_mr_size", d.max_mr_size),
            ("page_size_cap", d.page_size_cap),
            ("max_qp", d.max_qp.into()),
            ("max_qp_wr", d.max_qp_wr.into()),
            ("max_sge", d.max_sge.into()),
            ("max_sge_rd", d.max_sge_rd.into()),
            ("max_cq", d.max_cq.into()),
            ("max_cqe", d.max_cqe.into()),
            ("max_mr", d.max_mr.into()),
            ("max_pd", d.max_pd.into()),
            ("max_qp_rd_atom", d.max_qp_rd_atom.into()),
            ("max_qp_init_rd_atom", d.max_qp_init_rd_atom.into()),
            ("max_res_rd_atom", d.max_res_rd_atom.into()),
            ("max_mw", d.max_mw.into()),
            ("max_mcast_grp", d.max_mcast_grp.into()),
            ("max_mcast_qp_attach", d.max_mcast_qp_attach.into()),
            (
                "max_total_mcast_qp_attach",
                d.max_total_mcast_qp_attach.into(),
            ),
            ("max_ah", d.max_ah.into()),
            ("max_srq", d.max_srq.into()),
            ("max_srq_wr", d.max_srq_wr.into()),
            ("max_srq_sge", d.max_srq_sge.into()),
            ("max_pkeys", d.max_pkeys.into()),
            ("local_ca_ack_delay", d.local_ca_ack_delay.into()),
            ("max_msg_sz", d.max_msg_sz.into()),
        ];
        for (k, v) in rows {
            let _ = writeln!(
                s,
                "\t{k}:\t{}{v:#x}",
                if k.len() < 15 { "\t\t" } else { "\t" }
            );
        }
        let _ = writeln!(s, "\tatomic_cap:\t\t\t{:?}", d.atomic_cap);
        let _ = writeln!(s, "\tmax_inline_data:\t\t{}", d.max_inline_data);
        let _ = writeln!(s, "\ticrc_crc32:\t\t\t{}", softib_wire::icrc::crc_way());
    }
    for p in 1..=d.phys_port_cnt {
        let Ok(a) = hca.query_port(p) else { continue };
        let _ = writeln!(s, "\t\tport:\t{p}");
        let _ = writeln!(s, "\t\t\tstate:\t\t\t{:?}", a.state);
        let _ = writeln!(
            s,
            "\t\t\tmax_mtu:\t\t{} ({})",
            a.max_mtu.bytes(),
            a.max_mtu.raw()
        );
        let _ = writeln!(
            s,
            "\t\t\tactive_mtu:\t\t{} ({})",
            a.active_mtu.bytes(),
            a.active_mtu.raw()
        );
        let _ = writeln!(s, "\t\t\tsm_lid:\t\t\t{}", a.sm_lid);
        let _ = writeln!(s, "\t\t\tport_lid:\t\t{}", a.lid);
        let _ = writeln!(s, "\t\t\tport_lmc:\t\t{:#04x}", a.lmc);
        let _ = writeln!(s, "\t\t\tlink_layer:\t\t{:?}", a.link_layer);
        if verbose {
            let _ = writeln!(s, "\t\t\tmax_msg_sz:\t\t{:#x}", a.max_msg_sz);
            let _ = writeln!(s, "\t\t\tmax_vl_num:\t\t{}", a.max_vl_num);
            let _ = writeln!(s, "\t\t\tpkey_tbl_len:\t\t{}", a.pkey_tbl_len);
            let _ = writeln!(s, "\t\t\tgid_tbl_len:\t\t{}", a.gid_tbl_len);
        }
        for (i, e) in a.gids.iter().enumerate() {
            let _ = writeln!(s, "\t\t\tGID[{i:3}]:\t\t{}, RoCE v2", gid_text(&e.gid));
        }
        let _ = writeln!(s, "\t\t\tsocket:\t\t\tudp {bind}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devinfo_names_the_gid_of_the_bound_address() {
        let mut cfg = softib_udp::DeviceConfig::new("127.0.0.2:4791".parse().unwrap());
        cfg.active_mtu = Mtu::Mtu1024;
        let hca = Hca::new(cfg.hca_config());
        let s = describe(&hca, "127.0.0.2:4791", true);
        assert!(s.contains("GID[  0]:\t\t::ffff:127.0.0.2, RoCE v2"), "{s}");
        assert!(s.contains("active_mtu:\t\t1024 (3)"), "{s}");
        assert!(s.contains("max_qp_rd_atom"), "{s}");
    }
}
