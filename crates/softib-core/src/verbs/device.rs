//! Device and port attributes, and the configuration an [`Hca`](crate::Hca) is built from.
//!
//! The defaults are the limits Linux rxe (kernel 6.12) advertises, so a softib endpoint looks
//! like an rxe peer unless configured otherwise. Every limit is enforced by the verbs.

use super::types::{AtomicCap, Gid, GidType, LinkLayer, Mtu, PortState};

/// Device limits and identity (`struct ibv_device_attr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Node GUID.
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// Largest memory region, bytes.
    pub max_mr_size: u64,
    /// Supported page sizes (bit n set: 2^n bytes).
    pub page_size_cap: u64,
    /// IEEE OUI of the vendor.
    pub vendor_id: u32,
    /// Vendor part number.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Maximum number of QPs.
    pub max_qp: u32,
    /// Maximum outstanding WRs on any send or receive queue.
    pub max_qp_wr: u32,
    /// Maximum SGEs per send or receive WR.
    pub max_sge: u32,
    /// Maximum SGEs per RDMA READ WR.
    pub max_sge_rd: u32,
    /// Maximum number of CQs.
    pub max_cq: u32,
    /// Maximum CQ entries per CQ.
    pub max_cqe: u32,
    /// Maximum number of memory regions.
    pub max_mr: u32,
    /// Maximum number of protection domains.
    pub max_pd: u32,
    /// Maximum incoming RDMA READ / atomic requests a QP may have outstanding (responder
    /// resources, bounds `max_dest_rd_atomic`).
    pub max_qp_rd_atom: u32,
    /// Maximum RDMA READ / atomic requests a QP may initiate concurrently (bounds
    /// `max_rd_atomic`).
    pub max_qp_init_rd_atom: u32,
    /// Maximum responder resources for the whole device.
    pub max_res_rd_atom: u32,
    /// Atomic support level.
    pub atomic_cap: AtomicCap,
    /// Maximum number of memory windows.
    pub max_mw: u32,
    /// Maximum multicast groups.
    pub max_mcast_grp: u32,
    /// Maximum QPs per multicast group.
    pub max_mcast_qp_attach: u32,
    /// Maximum QP attachments over all multicast groups.
    pub max_total_mcast_qp_attach: u32,
    /// Maximum number of address handles.
    pub max_ah: u32,
    /// Maximum number of shared receive queues.
    pub max_srq: u32,
    /// Maximum WRs per SRQ.
    pub max_srq_wr: u32,
    /// Maximum SGEs per SRQ WR.
    pub max_srq_sge: u32,
    /// Maximum inline data per send WR, bytes.
    pub max_inline_data: u32,
    /// Largest message the device transfers, bytes.
    pub max_msg_sz: u32,
    /// Partition table size of the device.
    pub max_pkeys: u16,
    /// Local CA ACK delay (IBA 4.096 µs × 2^n exponent).
    pub local_ca_ack_delay: u8,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
}

/// The largest CQ a device offers: mlx5's 4 194 303 entries (2^22 - 1) rather than rxe's
/// 32 767, because middleware sizes its CQs for hardware (libfabric's `ofi_rxm` asks for
/// 262 144) and fails on a smaller device. A CQ's storage grows with the completions it holds
/// at once, not with its size, so a large CQ costs nothing until it fills (`verbs::cq`).
pub const MAX_CQE: u32 = (1 << 22) - 1;

impl DeviceAttr {
    /// The limits Linux rxe advertises (kernel 6.12), with the given GUIDs, except `max_cqe`,
    /// which is mlx5's ([`MAX_CQE`]).
    pub fn rxe_defaults(node_guid: u64) -> DeviceAttr {
        DeviceAttr {
            node_guid,
            sys_image_guid: node_guid,
            max_mr_size: u64::MAX,
            page_size_cap: 0xFFFF_F000,
            vendor_id: 0x00FF_FFFF,
            vendor_part_id: 0,
            hw_ver: 0,
            max_qp: (1 << 20) - 16,
            max_qp_wr: 1 << 20,
            max_sge: 32,
            max_sge_rd: 32,
            max_cq: 1 << 20,
            max_cqe: MAX_CQE,
            max_mr: (1 << 19) - 1,
            max_pd: 1 << 20,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            max_res_rd_atom: 0x3F000,
            atomic_cap: AtomicCap::Hca,
            max_mw: 1 << 19,
            max_mcast_grp: 8192,
            max_mcast_qp_attach: 56,
            max_total_mcast_qp_attach: 0x70000,
            max_ah: (1 << 15) - 1,
            max_srq: (1 << 20) - 0x20001,
            max_srq_wr: 1 << 20,
            max_srq_sge: 27,
            max_inline_data: 512,
            max_msg_sz: 1 << 31,
            max_pkeys: 64,
            local_ca_ack_delay: 15,
            phys_port_cnt: 1,
        }
    }
}

/// One GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// How packets sourced from this GID are encapsulated.
    pub gid_type: GidType,
}

/// Configuration of one port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    /// Logical port state.
    pub state: PortState,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// MTU of the attached link; a QP's path MTU may not exceed it.
    pub active_mtu: Mtu,
    /// Base LID (0 on RoCE).
    pub lid: u16,
    /// LID of the subnet manager.
    pub sm_lid: u16,
    /// LID mask control: the port answers to `lid .. lid + 2^lmc`.
    pub lmc: u8,
    /// Number of data VLs.
    pub max_vl_num: u8,
    /// Largest message, bytes.
    pub max_msg_sz: u32,
    /// GID table; index 0 is the default GID.
    pub gids: Vec<GidEntry>,
    /// P_Key table.
    pub pkeys: Vec<u16>,
}

impl PortConfig {
    /// A RoCEv2 port like rxe's on a 1500-byte Ethernet link: LID 0, active MTU 1024, one
    /// link-local GID derived from `port_guid`, P_Key table `[0xFFFF]`.
    pub fn roce(port_guid: u64) -> PortConfig {
        PortConfig {
            state: PortState::Active,
            link_layer: LinkLayer::Ethernet,
            max_mtu: Mtu::Mtu4096,
            active_mtu: Mtu::Mtu1024,
            lid: 0,
            sm_lid: 0,
            lmc: 0,
            max_vl_num: 1,
            max_msg_sz: 1 << 31,
            gids: vec![GidEntry {
                gid: Gid::new(Gid::LINK_LOCAL_PREFIX, port_guid),
                gid_type: GidType::RoceV2,
            }],
            pkeys: vec![0xFFFF],
        }
    }

    /// A native InfiniBand port with the given base LID, active MTU 4096, one link-local GID
    /// derived from `port_guid`, P_Key table `[0xFFFF]`.
    pub fn infiniband(port_guid: u64, lid: u16) -> PortConfig {
        PortConfig {
            state: PortState::Active,
            link_layer: LinkLayer::InfiniBand,
            max_mtu: Mtu::Mtu4096,
            active_mtu: Mtu::Mtu4096,
            lid,
            sm_lid: 1,
            lmc: 0,
            max_vl_num: 1,
            max_msg_sz: 1 << 31,
            gids: vec![GidEntry {
                gid: Gid::new(Gid::LINK_LOCAL_PREFIX, port_guid),
                gid_type: GidType::Ib,
            }],
            pkeys: vec![0xFFFF],
        }
    }
}

/// Port attributes as `query_port` reports them (`struct ibv_port_attr` plus the tables).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical port state.
    pub state: PortState,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// Active MTU.
    pub active_mtu: Mtu,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// Largest message, bytes.
    pub max_msg_sz: u32,
    /// Base LID.
    pub lid: u16,
    /// LID of the subnet manager.
    pub sm_lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Number of data VLs.
    pub max_vl_num: u8,
    /// GID table.
    pub gids: Vec<GidEntry>,
    /// P_Key table.
    pub pkeys: Vec<u16>,
}

impl PortAttr {
    pub(crate) fn from_config(c: &PortConfig) -> PortAttr {
        PortAttr {
            state: c.state,
            link_layer: c.link_layer,
            max_mtu: c.max_mtu,
            active_mtu: c.active_mtu,
            gid_tbl_len: u32::try_from(c.gids.len()).unwrap_or(u32::MAX),
            pkey_tbl_len: u16::try_from(c.pkeys.len()).unwrap_or(u16::MAX),
            max_msg_sz: c.max_msg_sz,
            lid: c.lid,
            sm_lid: c.sm_lid,
            lmc: c.lmc,
            max_vl_num: c.max_vl_num,
            gids: c.gids.clone(),
            pkeys: c.pkeys.clone(),
        }
    }
}

/// Everything an [`Hca`](crate::Hca) is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaConfig {
    /// Device limits and GUIDs. `phys_port_cnt` is overwritten with `ports.len()`.
    pub device: DeviceAttr,
    /// Ports 1..=N, in order.
    pub ports: Vec<PortConfig>,
    /// Base of the I/O virtual addresses the HCA assigns to memory regions registered without
    /// a caller-chosen address.
    pub mr_iova_base: u64,
    /// Most PSNs a requester leaves unacknowledged (IBA allows up to 2^23, C9-61; Linux rxe
    /// uses 128). Go-back-N resends about this many packets per loss, so a window near the
    /// bandwidth-delay product keeps goodput up under loss.
    pub max_unacked_psns: u32,
    /// How RoCEv2 headers are numbered. `None` (the default) numbers them as Linux rxe does:
    /// IPv4 identification counting up per packet, UDP source port `0xC000 | hash(QPN)`.
    /// `Some(port)` writes what the kernel sends for a driver that hands the packet to an
    /// unconnected UDP socket bound to `port` with `IP_MTU_DISCOVER = IP_PMTUDISC_DO`:
    /// IPv4 identification 0 (DF set), UDP source port `port`. The ICRC covers both fields,
    /// so this makes it match the header the peer receives.
    pub udp_socket_port: Option<u16>,
    /// The numbers this HCA gives its QPs, SRQs and EE contexts. `None` (the default): QPNs
    /// from 0x11 up, as rxe numbers them, SRQ numbers and EECNs from the whole 24-bit space.
    /// `Some(range)`: all three inside `range` only, for an HCA that is one process's share
    /// of a device other processes use too (each gets its own range, so a number names one
    /// process's object across the device; softib-udp's host-wide devices).
    pub numbers: Option<NumberRange>,
}

/// A range of 24-bit object numbers (QPNs, SRQ numbers, EECNs), and where handing them out
/// starts (numbers are given upward from `start`, wrapping from `last` to `first`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumberRange {
    /// Lowest number of the range.
    pub first: u32,
    /// Highest number of the range (at most 2^24 - 2: 2^24 - 1 is the multicast QPN).
    pub last: u32,
    /// The first number handed out.
    pub start: u32,
}

impl NumberRange {
    /// The next number at or after `*cursor` (kept in the range) for which `used` is false,
    /// moving the cursor past it; `None` when every number of the range is used.
    pub fn next_free(&self, cursor: &mut u32, used: impl Fn(u32) -> bool) -> Option<u32> {
        let span = u64::from(self.last.saturating_sub(self.first)) + 1;
        for _ in 0..span {
            let n = if (self.first..=self.last).contains(cursor) {
                *cursor
            } else {
                self.first
            };
            *cursor = if n >= self.last { self.first } else { n + 1 };
            if !used(n) {
                return Some(n);
            }
        }
        None
    }
}

impl HcaConfig {
    /// OUI-style prefix of the node GUIDs softib derives from a node id (a locally administered
    /// EUI-64, `02:00:00:ff:fe:xx:xx:xx`).
    pub const GUID_PREFIX: u64 = 0x0200_00ff_fe00_0000;

    /// The node GUID derived from `node_id` (its low 24 bits).
    pub const fn node_guid_for(node_id: u32) -> u64 {
        HcaConfig::GUID_PREFIX | (node_id as u64 & 0x00FF_FFFF)
    }

    /// An rxe-like RoCEv2 device with one port: rxe limits, node GUID derived from `node_id`,
    /// LID 0, active MTU 1024, GID `fe80::<node GUID>`, P_Key table `[0xFFFF]`.
    pub fn new(node_id: u32) -> HcaConfig {
        let guid = HcaConfig::node_guid_for(node_id);
        HcaConfig {
            device: DeviceAttr::rxe_defaults(guid),
            ports: vec![PortConfig::roce(guid)],
            mr_iova_base: 0x0000_7f00_0000_0000,
            max_unacked_psns: 128,
            udp_socket_port: None,
            numbers: None,
        }
    }

    /// A native InfiniBand device with one port whose LID is `node_id`'s low 16 bits (or 1 if
    /// those are zero), otherwise like [`HcaConfig::new`].
    pub fn infiniband(node_id: u32) -> HcaConfig {
        let guid = HcaConfig::node_guid_for(node_id);
        let lid = match node_id as u16 {
            0 => 1,
            l => l,
        };
        HcaConfig {
            device: DeviceAttr::rxe_defaults(guid),
            ports: vec![PortConfig::infiniband(guid, lid)],
            mr_iova_base: 0x0000_7f00_0000_0000,
            max_unacked_psns: 128,
            udp_socket_port: None,
            numbers: None,
        }
    }
}

impl Default for HcaConfig {
    fn default() -> Self {
        HcaConfig::new(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_rxe() {
        let c = HcaConfig::new(7);
        assert_eq!(c.device.node_guid, 0x0200_00ff_fe00_0007);
        assert_eq!(c.device.max_qp, 1_048_560);
        assert_eq!(c.device.max_cqe, 4_194_303, "mlx5's, not rxe's 32 767");
        assert_eq!(c.device.max_sge, 32);
        assert_eq!(c.device.max_srq_sge, 27);
        assert_eq!(c.device.max_inline_data, 512);
        assert_eq!(c.device.max_qp_rd_atom, 128);
        assert_eq!(c.device.local_ca_ack_delay, 15);
        assert_eq!(c.ports.len(), 1);
        let p = &c.ports[0];
        assert_eq!(p.active_mtu, Mtu::Mtu1024);
        assert_eq!(p.max_mtu, Mtu::Mtu4096);
        assert_eq!(p.pkeys, vec![0xFFFF]);
        assert_eq!(p.lid, 0);
        assert_eq!(p.gids[0].gid.interface_id(), c.device.node_guid);
        assert_eq!(p.gids[0].gid.subnet_prefix(), Gid::LINK_LOCAL_PREFIX);
        assert_eq!(p.max_msg_sz, 1 << 31);
    }

    #[test]
    fn infiniband_config_has_a_lid() {
        assert_eq!(HcaConfig::infiniband(0x10005).ports[0].lid, 5);
        assert_eq!(HcaConfig::infiniband(0x10000).ports[0].lid, 1);
        assert_eq!(
            HcaConfig::infiniband(3).ports[0].link_layer,
            LinkLayer::InfiniBand
        );
    }

    #[test]
    fn port_attr_reports_table_lengths() {
        let mut c = PortConfig::roce(1);
        c.pkeys.push(0x8001);
        let a = PortAttr::from_config(&c);
        assert_eq!(a.pkey_tbl_len, 2);
        assert_eq!(a.gid_tbl_len, 1);
        assert_eq!(a.active_mtu, Mtu::Mtu1024);
    }
}
