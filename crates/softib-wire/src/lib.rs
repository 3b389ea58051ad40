//! softib-wire: byte-exact InfiniBand and RoCEv2 wire formats.
//!
//! One module per header. Each header module offers a zero-copy view (`XxxView<T: AsRef<[u8]>>`,
//! `new_checked` / `check_len`, getters, setters on `AsMut<[u8]>`) and a plain struct with
//! `parse(&[u8])` and `emit(&mut [u8])`. After `new_checked` succeeds, no accessor panics; every
//! parser returns a typed [`Error`] naming the header and field at fault, never panics, and does
//! not allocate.
//!
//! Whole packets: [`transport`] (BTH, extension headers, payload, pad), [`native`] (LRH [+ GRH]
//! framing with ICRC and VCRC, and the raw IPv6 / raw EtherType forms selected by LRH:LNH) and
//! [`roce`] (Ethernet + IPv4/IPv6 + UDP 4791 + transport + ICRC). [`icrc`] and [`vcrc`] compute
//! the CRCs; [`pcap`] reads and writes classic pcap files. [`mad`] and [`cm`]: the management
//! datagram carried to QP1 and the Communication Manager's messages in it.

#![forbid(unsafe_code)]

mod bytes;
pub mod error;
mod field_macros;
pub mod opcode;
pub mod psn;

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod deth;
pub mod feth;
pub mod grh;
pub mod ieth;
pub mod immdt;
pub mod lrh;
pub mod rdeth;
pub mod reth;
pub mod rwh;
pub mod xrceth;

pub mod ethernet;
pub mod ipv4;
pub mod udp;

pub mod cm;
pub mod mad;

pub mod icrc;
pub mod vcrc;

pub mod native;
pub mod roce;
pub mod transport;

pub mod pcap;

pub use error::{Error, Field, Header, Result};
pub use opcode::{ExtHeaders, Opcode, OpcodeInfo, Operation, Position, Service};
pub use psn::{Eecn, Msn, Psn, Qpn, XrcSrqn};
