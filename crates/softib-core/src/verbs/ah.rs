//! Address vectors (`struct ibv_ah_attr`) and address handles.

use super::device::PortConfig;
use super::types::{Gid, LinkLayer};
use super::PdHandle;

/// GRH fields of an address vector (`struct ibv_global_route`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: Gid,
    /// 20-bit flow label.
    pub flow_label: u32,
    /// Index of the source GID in the port's GID table.
    pub sgid_index: u8,
    /// Hop limit (IPv4 TTL on RoCEv2).
    pub hop_limit: u8,
    /// Traffic class (IP TOS on RoCEv2).
    pub traffic_class: u8,
}

/// An address vector: how to reach a remote port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AhAttr {
    /// Destination LID.
    pub dlid: u16,
    /// Service level, 0..=15.
    pub sl: u8,
    /// Source path bits (low LMC bits of the SLID).
    pub src_path_bits: u8,
    /// Static rate (`enum ibv_rate`; 0 = port rate).
    pub static_rate: u8,
    /// Local port, 1-based.
    pub port_num: u8,
    /// GRH, required on RoCE ports.
    pub grh: Option<GlobalRoute>,
}

impl Default for AhAttr {
    fn default() -> Self {
        AhAttr {
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            port_num: 1,
            grh: None,
        }
    }
}

impl AhAttr {
    /// An address vector that routes by GID through `port_num` (RoCE, or IB across subnets).
    pub fn global(port_num: u8, dgid: Gid, sgid_index: u8) -> AhAttr {
        AhAttr {
            port_num,
            grh: Some(GlobalRoute {
                dgid,
                flow_label: 0,
                sgid_index,
                hop_limit: 64,
                traffic_class: 0,
            }),
            ..AhAttr::default()
        }
    }

    /// A LID-routed address vector on a native IB port.
    pub fn local(port_num: u8, dlid: u16) -> AhAttr {
        AhAttr {
            port_num,
            dlid,
            ..AhAttr::default()
        }
    }
}

/// Why an address vector is unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AhAttrError {
    /// The port number is not 1..=number of ports.
    #[error("port {port} does not exist (the HCA has {num_ports} port(s))")]
    InvalidPort {
        /// Requested port.
        port: u8,
        /// Ports of the HCA.
        num_ports: u8,
    },
    /// The source GID index is past the port's GID table.
    #[error(
        "sgid_index {index} is out of range for port {port} (GID table has {table_len} entries)"
    )]
    SgidIndexOutOfRange {
        /// Port.
        port: u8,
        /// Requested index.
        index: u8,
        /// Table length.
        table_len: usize,
    },
    /// RoCE ports address by GID only, so the address vector needs a GRH.
    #[error("port {port} is a RoCE port: the address vector needs a GRH")]
    GrhRequired {
        /// Port.
        port: u8,
    },
    /// The service level is larger than 15.
    #[error("service level {0} is out of range (0..=15)")]
    InvalidSl(u8),
    /// The flow label does not fit 20 bits.
    #[error("flow label {0:#x} does not fit 20 bits")]
    InvalidFlowLabel(u32),
}

/// Checks an address vector against the HCA's ports.
pub(crate) fn validate_ah_attr(attr: &AhAttr, ports: &[PortConfig]) -> Result<(), AhAttrError> {
    let port = port_config(ports, attr.port_num).ok_or(AhAttrError::InvalidPort {
        port: attr.port_num,
        num_ports: ports.len().min(255) as u8,
    })?;
    if attr.sl > 15 {
        return Err(AhAttrError::InvalidSl(attr.sl));
    }
    match &attr.grh {
        Some(grh) => {
            if usize::from(grh.sgid_index) >= port.gids.len() {
                return Err(AhAttrError::SgidIndexOutOfRange {
                    port: attr.port_num,
                    index: grh.sgid_index,
                    table_len: port.gids.len(),
                });
            }
            if grh.flow_label > 0x000F_FFFF {
                return Err(AhAttrError::InvalidFlowLabel(grh.flow_label));
            }
        }
        None => {
            if port.link_layer == LinkLayer::Ethernet {
                return Err(AhAttrError::GrhRequired {
                    port: attr.port_num,
                });
            }
        }
    }
    Ok(())
}

/// The configuration of 1-based port `port_num`.
pub(crate) fn port_config(ports: &[PortConfig], port_num: u8) -> Option<&PortConfig> {
    usize::from(port_num)
        .checked_sub(1)
        .and_then(|i| ports.get(i))
}

/// An address handle inside the HCA.
#[derive(Debug, Clone)]
pub(crate) struct Ah {
    pub(crate) pd: PdHandle,
    pub(crate) attr: AhAttr,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::device::PortConfig;

    #[test]
    fn validation() {
        let roce = [PortConfig::roce(1)];
        let ib = [PortConfig::infiniband(1, 3)];
        let g = AhAttr::global(1, Gid::from_ipv4([10, 0, 0, 2]), 0);
        assert_eq!(validate_ah_attr(&g, &roce), Ok(()));
        assert_eq!(validate_ah_attr(&g, &ib), Ok(()));
        assert_eq!(
            validate_ah_attr(&AhAttr::local(1, 4), &roce),
            Err(AhAttrError::GrhRequired { port: 1 })
        );
        assert_eq!(validate_ah_attr(&AhAttr::local(1, 4), &ib), Ok(()));
        assert_eq!(
            validate_ah_attr(&AhAttr::local(2, 4), &ib),
            Err(AhAttrError::InvalidPort {
                port: 2,
                num_ports: 1
            })
        );
        assert_eq!(
            validate_ah_attr(&AhAttr::local(0, 4), &ib),
            Err(AhAttrError::InvalidPort {
                port: 0,
                num_ports: 1
            })
        );
        let bad_sgid = AhAttr::global(1, Gid::default(), 1);
        assert_eq!(
            validate_ah_attr(&bad_sgid, &roce),
            Err(AhAttrError::SgidIndexOutOfRange {
                port: 1,
                index: 1,
                table_len: 1
            })
        );
        let mut bad_sl = AhAttr::local(1, 4);
        bad_sl.sl = 16;
        assert_eq!(
            validate_ah_attr(&bad_sl, &ib),
            Err(AhAttrError::InvalidSl(16))
        );
        let mut bad_flow = g;
        bad_flow.grh.as_mut().unwrap().flow_label = 0x10_0000;
        assert_eq!(
            validate_ah_attr(&bad_flow, &roce),
            Err(AhAttrError::InvalidFlowLabel(0x10_0000))
        );
    }
}
