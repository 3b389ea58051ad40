//! The IBA opcode table (IBA Table 38; `spec/tables.md` §1): for each BTH opcode its service,
//! operation, position in a message, the extension headers that follow the BTH and whether it
//! carries a payload. This is the one place the wire layer and the engine look this up.
//!
//! Sources for rows beyond RC/UC/UD: RD rows follow Linux rxe's header masks; RD_RESYNC, the XRC
//! rows (IBA 1.2 XRC annex) and the RoCEv2 CNP (0x81, 16 reserved bytes after the BTH) follow
//! Wireshark and libtins. RD_FLUSH / RD_ATOMIC_WRITE are inferred from the RD prefix.

use core::fmt;

/// A BTH opcode byte. Any value can be held; [`Opcode::info`] says whether it is defined.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Opcode(pub u8);

/// Transport service, from opcode bits 7:5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    Rc,
    Uc,
    Rd,
    Ud,
    /// Congestion notification packet (RoCEv2 CNP, 0x81).
    Cnp,
    Xrc,
}

impl Service {
    pub const fn name(self) -> &'static str {
        match self {
            Service::Rc => "RC",
            Service::Uc => "UC",
            Service::Rd => "RD",
            Service::Ud => "UD",
            Service::Cnp => "CNP",
            Service::Xrc => "XRC",
        }
    }
}

/// What an opcode does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Send,
    RdmaWrite,
    RdmaReadRequest,
    RdmaReadResponse,
    Acknowledge,
    AtomicAcknowledge,
    CompareSwap,
    FetchAdd,
    Resync,
    Flush,
    AtomicWrite,
    Cnp,
}

impl Operation {
    /// True for the packets a responder sends back (ACK, atomic ACK, READ response).
    pub const fn is_response(self) -> bool {
        matches!(
            self,
            Operation::Acknowledge | Operation::AtomicAcknowledge | Operation::RdmaReadResponse
        )
    }
}

/// Position of a packet inside a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    First,
    Middle,
    Last,
    /// A whole message in one packet (also every single-packet operation: ACK, atomics, READ request).
    Only,
}

/// The set of extension headers that follow the BTH, in wire order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtHeaders(u16);

impl ExtHeaders {
    pub const NONE: ExtHeaders = ExtHeaders(0);
    pub const RDETH: ExtHeaders = ExtHeaders(1 << 0);
    pub const DETH: ExtHeaders = ExtHeaders(1 << 1);
    pub const XRCETH: ExtHeaders = ExtHeaders(1 << 2);
    pub const FETH: ExtHeaders = ExtHeaders(1 << 3);
    pub const RETH: ExtHeaders = ExtHeaders(1 << 4);
    pub const AETH: ExtHeaders = ExtHeaders(1 << 5);
    pub const ATOMIC_ETH: ExtHeaders = ExtHeaders(1 << 6);
    pub const ATOMIC_ACK_ETH: ExtHeaders = ExtHeaders(1 << 7);
    pub const IMMDT: ExtHeaders = ExtHeaders(1 << 8);
    pub const IETH: ExtHeaders = ExtHeaders(1 << 9);
    /// The 16 reserved bytes of a RoCEv2 CNP.
    pub const CNP_RESERVED: ExtHeaders = ExtHeaders(1 << 10);

    /// Every header in wire order with its length in bytes.
    pub const WIRE_ORDER: [(ExtHeaders, usize); 11] = [
        (Self::RDETH, 4),
        (Self::DETH, 8),
        (Self::XRCETH, 4),
        (Self::FETH, 4),
        (Self::RETH, 16),
        (Self::AETH, 4),
        (Self::ATOMIC_ETH, 28),
        (Self::ATOMIC_ACK_ETH, 8),
        (Self::IMMDT, 4),
        (Self::IETH, 4),
        (Self::CNP_RESERVED, 16),
    ];

    pub const fn contains(self, other: ExtHeaders) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn union(self, other: ExtHeaders) -> ExtHeaders {
        ExtHeaders(self.0 | other.0)
    }

    pub const fn bits(self) -> u16 {
        self.0
    }

    /// Total length in bytes of these headers.
    pub const fn len(self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < Self::WIRE_ORDER.len() {
            if self.contains(Self::WIRE_ORDER[i].0) {
                n += Self::WIRE_ORDER[i].1;
            }
            i += 1;
        }
        n
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl core::ops::BitOr for ExtHeaders {
    type Output = ExtHeaders;
    fn bitor(self, rhs: ExtHeaders) -> ExtHeaders {
        self.union(rhs)
    }
}

impl fmt::Debug for ExtHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 11] = [
            "RDETH",
            "DETH",
            "XRCETH",
            "FETH",
            "RETH",
            "AETH",
            "AtomicETH",
            "AtomicAckETH",
            "ImmDt",
            "IETH",
            "CNP-reserved",
        ];
        let mut first = true;
        for (i, (h, _)) in Self::WIRE_ORDER.iter().enumerate() {
            if self.contains(*h) {
                if !first {
                    f.write_str("+")?;
                }
                f.write_str(NAMES[i])?;
                first = false;
            }
        }
        if first {
            f.write_str("-")?;
        }
        Ok(())
    }
}

/// One row of the opcode table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    pub opcode: Opcode,
    /// Upper-case spec name, e.g. `RC_SEND_ONLY`.
    pub name: &'static str,
    pub service: Service,
    pub operation: Operation,
    pub position: Position,
    /// Extension headers between the BTH and the payload.
    pub headers: ExtHeaders,
    /// Whether the packet carries a data payload (possibly zero bytes).
    pub payload: bool,
}

impl OpcodeInfo {
    /// BTH plus extension headers, in bytes.
    pub const fn transport_header_len(&self) -> usize {
        crate::bth::LEN + self.headers.len()
    }
    pub const fn has_immediate(&self) -> bool {
        self.headers.contains(ExtHeaders::IMMDT)
    }
    pub const fn has_invalidate(&self) -> bool {
        self.headers.contains(ExtHeaders::IETH)
    }
    /// True for the first packet of a message (FIRST or ONLY).
    pub const fn starts_message(&self) -> bool {
        matches!(self.position, Position::First | Position::Only)
    }
    /// True for the last packet of a message (LAST or ONLY).
    pub const fn ends_message(&self) -> bool {
        matches!(self.position, Position::Last | Position::Only)
    }
}

use ExtHeaders as E;
use Operation::{
    Acknowledge, AtomicAcknowledge, AtomicWrite, CompareSwap, FetchAdd, Flush, RdmaReadRequest,
    RdmaReadResponse, RdmaWrite, Resync, Send,
};
use Position::{First, Last, Middle, Only};
use Service::{Rc, Rd, Uc, Ud, Xrc};

const fn row(
    op: u8,
    name: &'static str,
    service: Service,
    operation: Operation,
    position: Position,
    headers: &[ExtHeaders],
    payload: bool,
) -> OpcodeInfo {
    let mut set = ExtHeaders::NONE;
    let mut i = 0;
    while i < headers.len() {
        set = set.union(headers[i]);
        i += 1;
    }
    OpcodeInfo {
        opcode: Opcode(op),
        name,
        service,
        operation,
        position,
        headers: set,
        payload,
    }
}

/// Every defined opcode, in numeric order.
pub const ROWS: &[OpcodeInfo] = &[
    row(0x00, "RC_SEND_FIRST", Rc, Send, First, &[], true),
    row(0x01, "RC_SEND_MIDDLE", Rc, Send, Middle, &[], true),
    row(0x02, "RC_SEND_LAST", Rc, Send, Last, &[], true),
    row(
        0x03,
        "RC_SEND_LAST_WITH_IMMEDIATE",
        Rc,
        Send,
        Last,
        &[E::IMMDT],
        true,
    ),
    row(0x04, "RC_SEND_ONLY", Rc, Send, Only, &[], true),
    row(
        0x05,
        "RC_SEND_ONLY_WITH_IMMEDIATE",
        Rc,
        Send,
        Only,
        &[E::IMMDT],
        true,
    ),
    row(
        0x06,
        "RC_RDMA_WRITE_FIRST",
        Rc,
        RdmaWrite,
        First,
        &[E::RETH],
        true,
    ),
    row(
        0x07,
        "RC_RDMA_WRITE_MIDDLE",
        Rc,
        RdmaWrite,
        Middle,
        &[],
        true,
    ),
    row(0x08, "RC_RDMA_WRITE_LAST", Rc, RdmaWrite, Last, &[], true),
    row(
        0x09,
        "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        Rc,
        RdmaWrite,
        Last,
        &[E::IMMDT],
        true,
    ),
    row(
        0x0A,
        "RC_RDMA_WRITE_ONLY",
        Rc,
        RdmaWrite,
        Only,
        &[E::RETH],
        true,
    ),
    row(
        0x0B,
        "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        Rc,
        RdmaWrite,
        Only,
        &[E::RETH, E::IMMDT],
        true,
    ),
    row(
        0x0C,
        "RC_RDMA_READ_REQUEST",
        Rc,
        RdmaReadRequest,
        Only,
        &[E::RETH],
        false,
    ),
    row(
        0x0D,
        "RC_RDMA_READ_RESPONSE_FIRST",
        Rc,
        RdmaReadResponse,
        First,
        &[E::AETH],
        true,
    ),
    row(
        0x0E,
        "RC_RDMA_READ_RESPONSE_MIDDLE",
        Rc,
        RdmaReadResponse,
        Middle,
        &[],
        true,
    ),
    row(
        0x0F,
        "RC_RDMA_READ_RESPONSE_LAST",
        Rc,
        RdmaReadResponse,
        Last,
        &[E::AETH],
        true,
    ),
    row(
        0x10,
        "RC_RDMA_READ_RESPONSE_ONLY",
        Rc,
        RdmaReadResponse,
        Only,
        &[E::AETH],
        true,
    ),
    row(
        0x11,
        "RC_ACKNOWLEDGE",
        Rc,
        Acknowledge,
        Only,
        &[E::AETH],
        false,
    ),
    row(
        0x12,
        "RC_ATOMIC_ACKNOWLEDGE",
        Rc,
        AtomicAcknowledge,
        Only,
        &[E::AETH, E::ATOMIC_ACK_ETH],
        false,
    ),
    row(
        0x13,
        "RC_COMPARE_SWAP",
        Rc,
        CompareSwap,
        Only,
        &[E::ATOMIC_ETH],
        false,
    ),
    row(
        0x14,
        "RC_FETCH_ADD",
        Rc,
        FetchAdd,
        Only,
        &[E::ATOMIC_ETH],
        false,
    ),
    row(
        0x16,
        "RC_SEND_LAST_WITH_INVALIDATE",
        Rc,
        Send,
        Last,
        &[E::IETH],
        true,
    ),
    row(
        0x17,
        "RC_SEND_ONLY_WITH_INVALIDATE",
        Rc,
        Send,
        Only,
        &[E::IETH],
        true,
    ),
    row(
        0x1C,
        "RC_FLUSH",
        Rc,
        Flush,
        Only,
        &[E::FETH, E::RETH],
        false,
    ),
    row(
        0x1D,
        "RC_ATOMIC_WRITE",
        Rc,
        AtomicWrite,
        Only,
        &[E::RETH],
        true,
    ),
    row(0x20, "UC_SEND_FIRST", Uc, Send, First, &[], true),
    row(0x21, "UC_SEND_MIDDLE", Uc, Send, Middle, &[], true),
    row(0x22, "UC_SEND_LAST", Uc, Send, Last, &[], true),
    row(
        0x23,
        "UC_SEND_LAST_WITH_IMMEDIATE",
        Uc,
        Send,
        Last,
        &[E::IMMDT],
        true,
    ),
    row(0x24, "UC_SEND_ONLY", Uc, Send, Only, &[], true),
    row(
        0x25,
        "UC_SEND_ONLY_WITH_IMMEDIATE",
        Uc,
        Send,
        Only,
        &[E::IMMDT],
        true,
    ),
    row(
        0x26,
        "UC_RDMA_WRITE_FIRST",
        Uc,
        RdmaWrite,
        First,
        &[E::RETH],
        true,
    ),
    row(
        0x27,
        "UC_RDMA_WRITE_MIDDLE",
        Uc,
        RdmaWrite,
        Middle,
        &[],
        true,
    ),
    row(0x28, "UC_RDMA_WRITE_LAST", Uc, RdmaWrite, Last, &[], true),
    row(
        0x29,
        "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        Uc,
        RdmaWrite,
        Last,
        &[E::IMMDT],
        true,
    ),
    row(
        0x2A,
        "UC_RDMA_WRITE_ONLY",
        Uc,
        RdmaWrite,
        Only,
        &[E::RETH],
        true,
    ),
    row(
        0x2B,
        "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        Uc,
        RdmaWrite,
        Only,
        &[E::RETH, E::IMMDT],
        true,
    ),
    row(
        0x40,
        "RD_SEND_FIRST",
        Rd,
        Send,
        First,
        &[E::RDETH, E::DETH],
        true,
    ),
    row(
        0x41,
        "RD_SEND_MIDDLE",
        Rd,
        Send,
        Middle,
        &[E::RDETH, E::DETH],
        true,
    ),
    row(
        0x42,
        "RD_SEND_LAST",
        Rd,
        Send,
        Last,
        &[E::RDETH, E::DETH],
        true,
    ),
    row(
        0x43,
        "RD_SEND_LAST_WITH_IMMEDIATE",
        Rd,
        Send,
        Last,
        &[E::RDETH, E::DETH, E::IMMDT],
        true,
    ),
    row(
        0x44,
        "RD_SEND_ONLY",
        Rd,
        Send,
        Only,
        &[E::RDETH, E::DETH],
        true,
    ),
    row(
        0x45,
        "RD_SEND_ONLY_WITH_IMMEDIATE",
        Rd,
        Send,
        Only,
        &[E::RDETH, E::DETH, E::IMMDT],
        true,
    ),
    row(
        0x46,
        "RD_RDMA_WRITE_FIRST",
        Rd,
        RdmaWrite,
        First,
        &[E::RDETH, E::DETH, E::RETH],
        true,
    ),
    row(
        0x47,
        "RD_RDMA_WRITE_MIDDLE",
        Rd,
        RdmaWrite,
        Middle,
        &[E::RDETH, E::DETH],
        true,
    ),
    row(
        0x48,
        "RD_RDMA_WRITE_LAST",
        Rd,
        RdmaWrite,
        Last,
        &[E::RDETH, E::DETH],
        true,
    ),
    row(
        0x49,
        "RD_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        Rd,
        RdmaWrite,
        Last,
        &[E::RDETH, E::DETH, E::IMMDT],
        true,
    ),
    row(
        0x4A,
        "RD_RDMA_WRITE_ONLY",
        Rd,
        RdmaWrite,
        Only,
        &[E::RDETH, E::DETH, E::RETH],
        true,
    ),
    row(
        0x4B,
        "RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        Rd,
        RdmaWrite,
        Only,
        &[E::RDETH, E::DETH, E::RETH, E::IMMDT],
        true,
    ),
    row(
        0x4C,
        "RD_RDMA_READ_REQUEST",
        Rd,
        RdmaReadRequest,
        Only,
        &[E::RDETH, E::DETH, E::RETH],
        false,
    ),
    row(
        0x4D,
        "RD_RDMA_READ_RESPONSE_FIRST",
        Rd,
        RdmaReadResponse,
        First,
        &[E::RDETH, E::AETH],
        true,
    ),
    row(
        0x4E,
        "RD_RDMA_READ_RESPONSE_MIDDLE",
        Rd,
        RdmaReadResponse,
        Middle,
        &[E::RDETH],
        true,
    ),
    row(
        0x4F,
        "RD_RDMA_READ_RESPONSE_LAST",
        Rd,
        RdmaReadResponse,
        Last,
        &[E::RDETH, E::AETH],
        true,
    ),
    row(
        0x50,
        "RD_RDMA_READ_RESPONSE_ONLY",
        Rd,
        RdmaReadResponse,
        Only,
        &[E::RDETH, E::AETH],
        true,
    ),
    row(
        0x51,
        "RD_ACKNOWLEDGE",
        Rd,
        Acknowledge,
        Only,
        &[E::RDETH, E::AETH],
        false,
    ),
    row(
        0x52,
        "RD_ATOMIC_ACKNOWLEDGE",
        Rd,
        AtomicAcknowledge,
        Only,
        &[E::RDETH, E::AETH, E::ATOMIC_ACK_ETH],
        false,
    ),
    row(
        0x53,
        "RD_COMPARE_SWAP",
        Rd,
        CompareSwap,
        Only,
        &[E::RDETH, E::DETH, E::ATOMIC_ETH],
        false,
    ),
    row(
        0x54,
        "RD_FETCH_ADD",
        Rd,
        FetchAdd,
        Only,
        &[E::RDETH, E::DETH, E::ATOMIC_ETH],
        false,
    ),
    row(
        0x55,
        "RD_RESYNC",
        Rd,
        Resync,
        Only,
        &[E::RDETH, E::DETH],
        false,
    ),
    row(
        0x5C,
        "RD_FLUSH",
        Rd,
        Flush,
        Only,
        &[E::RDETH, E::DETH, E::FETH, E::RETH],
        false,
    ),
    row(
        0x5D,
        "RD_ATOMIC_WRITE",
        Rd,
        AtomicWrite,
        Only,
        &[E::RDETH, E::DETH, E::RETH],
        true,
    ),
    row(0x64, "UD_SEND_ONLY", Ud, Send, Only, &[E::DETH], true),
    row(
        0x65,
        "UD_SEND_ONLY_WITH_IMMEDIATE",
        Ud,
        Send,
        Only,
        &[E::DETH, E::IMMDT],
        true,
    ),
    row(
        0x81,
        "CNP",
        Service::Cnp,
        Operation::Cnp,
        Only,
        &[E::CNP_RESERVED],
        false,
    ),
    row(0xA0, "XRC_SEND_FIRST", Xrc, Send, First, &[E::XRCETH], true),
    row(
        0xA1,
        "XRC_SEND_MIDDLE",
        Xrc,
        Send,
        Middle,
        &[E::XRCETH],
        true,
    ),
    row(0xA2, "XRC_SEND_LAST", Xrc, Send, Last, &[E::XRCETH], true),
    row(
        0xA3,
        "XRC_SEND_LAST_WITH_IMMEDIATE",
        Xrc,
        Send,
        Last,
        &[E::XRCETH, E::IMMDT],
        true,
    ),
    row(0xA4, "XRC_SEND_ONLY", Xrc, Send, Only, &[E::XRCETH], true),
    row(
        0xA5,
        "XRC_SEND_ONLY_WITH_IMMEDIATE",
        Xrc,
        Send,
        Only,
        &[E::XRCETH, E::IMMDT],
        true,
    ),
    row(
        0xA6,
        "XRC_RDMA_WRITE_FIRST",
        Xrc,
        RdmaWrite,
        First,
        &[E::XRCETH, E::RETH],
        true,
    ),
    row(
        0xA7,
        "XRC_RDMA_WRITE_MIDDLE",
        Xrc,
        RdmaWrite,
        Middle,
        &[E::XRCETH],
        true,
    ),
    row(
        0xA8,
        "XRC_RDMA_WRITE_LAST",
        Xrc,
        RdmaWrite,
        Last,
        &[E::XRCETH],
        true,
    ),
    row(
        0xA9,
        "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        Xrc,
        RdmaWrite,
        Last,
        &[E::XRCETH, E::IMMDT],
        true,
    ),
    row(
        0xAA,
        "XRC_RDMA_WRITE_ONLY",
        Xrc,
        RdmaWrite,
        Only,
        &[E::XRCETH, E::RETH],
        true,
    ),
    row(
        0xAB,
        "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        Xrc,
        RdmaWrite,
        Only,
        &[E::XRCETH, E::RETH, E::IMMDT],
        true,
    ),
    row(
        0xAC,
        "XRC_RDMA_READ_REQUEST",
        Xrc,
        RdmaReadRequest,
        Only,
        &[E::XRCETH, E::RETH],
        false,
    ),
    row(
        0xAD,
        "XRC_RDMA_READ_RESPONSE_FIRST",
        Xrc,
        RdmaReadResponse,
        First,
        &[E::AETH],
        true,
    ),
    row(
        0xAE,
        "XRC_RDMA_READ_RESPONSE_MIDDLE",
        Xrc,
        RdmaReadResponse,
        Middle,
        &[],
        true,
    ),
    row(
        0xAF,
        "XRC_RDMA_READ_RESPONSE_LAST",
        Xrc,
        RdmaReadResponse,
        Last,
        &[E::AETH],
        true,
    ),
    row(
        0xB0,
        "XRC_RDMA_READ_RESPONSE_ONLY",
        Xrc,
        RdmaReadResponse,
        Only,
        &[E::AETH],
        true,
    ),
    row(
        0xB1,
        "XRC_ACKNOWLEDGE",
        Xrc,
        Acknowledge,
        Only,
        &[E::AETH],
        false,
    ),
    row(
        0xB2,
        "XRC_ATOMIC_ACKNOWLEDGE",
        Xrc,
        AtomicAcknowledge,
        Only,
        &[E::AETH, E::ATOMIC_ACK_ETH],
        false,
    ),
    row(
        0xB3,
        "XRC_COMPARE_SWAP",
        Xrc,
        CompareSwap,
        Only,
        &[E::XRCETH, E::ATOMIC_ETH],
        false,
    ),
    row(
        0xB4,
        "XRC_FETCH_ADD",
        Xrc,
        FetchAdd,
        Only,
        &[E::XRCETH, E::ATOMIC_ETH],
        false,
    ),
    row(
        0xB6,
        "XRC_SEND_LAST_WITH_INVALIDATE",
        Xrc,
        Send,
        Last,
        &[E::XRCETH, E::IETH],
        true,
    ),
    row(
        0xB7,
        "XRC_SEND_ONLY_WITH_INVALIDATE",
        Xrc,
        Send,
        Only,
        &[E::XRCETH, E::IETH],
        true,
    ),
];

static TABLE: [Option<OpcodeInfo>; 256] = {
    let mut t = [None; 256];
    let mut i = 0;
    while i < ROWS.len() {
        t[ROWS[i].opcode.0 as usize] = Some(ROWS[i]);
        i += 1;
    }
    t
};

impl Opcode {
    pub const RC_SEND_FIRST: Opcode = Opcode(0x00);
    pub const RC_SEND_MIDDLE: Opcode = Opcode(0x01);
    pub const RC_SEND_LAST: Opcode = Opcode(0x02);
    pub const RC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x03);
    pub const RC_SEND_ONLY: Opcode = Opcode(0x04);
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x05);
    pub const RC_RDMA_WRITE_FIRST: Opcode = Opcode(0x06);
    pub const RC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x07);
    pub const RC_RDMA_WRITE_LAST: Opcode = Opcode(0x08);
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x09);
    pub const RC_RDMA_WRITE_ONLY: Opcode = Opcode(0x0A);
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x0B);
    pub const RC_RDMA_READ_REQUEST: Opcode = Opcode(0x0C);
    pub const RC_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(0x0D);
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(0x0E);
    pub const RC_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(0x0F);
    pub const RC_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(0x10);
    pub const RC_ACKNOWLEDGE: Opcode = Opcode(0x11);
    pub const RC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x12);
    pub const RC_COMPARE_SWAP: Opcode = Opcode(0x13);
    pub const RC_FETCH_ADD: Opcode = Opcode(0x14);
    pub const RC_SEND_LAST_WITH_INVALIDATE: Opcode = Opcode(0x16);
    pub const RC_SEND_ONLY_WITH_INVALIDATE: Opcode = Opcode(0x17);
    pub const RC_FLUSH: Opcode = Opcode(0x1C);
    pub const RC_ATOMIC_WRITE: Opcode = Opcode(0x1D);
    pub const UC_SEND_FIRST: Opcode = Opcode(0x20);
    pub const UC_SEND_MIDDLE: Opcode = Opcode(0x21);
    pub const UC_SEND_LAST: Opcode = Opcode(0x22);
    pub const UC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x23);
    pub const UC_SEND_ONLY: Opcode = Opcode(0x24);
    pub const UC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x25);
    pub const UC_RDMA_WRITE_FIRST: Opcode = Opcode(0x26);
    pub const UC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x27);
    pub const UC_RDMA_WRITE_LAST: Opcode = Opcode(0x28);
    pub const UC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x29);
    pub const UC_RDMA_WRITE_ONLY: Opcode = Opcode(0x2A);
    pub const UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x2B);
    pub const RD_SEND_FIRST: Opcode = Opcode(0x40);
    pub const RD_SEND_MIDDLE: Opcode = Opcode(0x41);
    pub const RD_SEND_LAST: Opcode = Opcode(0x42);
    pub const RD_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x43);
    pub const RD_SEND_ONLY: Opcode = Opcode(0x44);
    pub const RD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x45);
    pub const RD_RDMA_WRITE_FIRST: Opcode = Opcode(0x46);
    pub const RD_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x47);
    pub const RD_RDMA_WRITE_LAST: Opcode = Opcode(0x48);
    pub const RD_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x49);
    pub const RD_RDMA_WRITE_ONLY: Opcode = Opcode(0x4A);
    pub const RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x4B);
    pub const RD_RDMA_READ_REQUEST: Opcode = Opcode(0x4C);
    pub const RD_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(0x4D);
    pub const RD_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(0x4E);
    pub const RD_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(0x4F);
    pub const RD_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(0x50);
    pub const RD_ACKNOWLEDGE: Opcode = Opcode(0x51);
    pub const RD_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x52);
    pub const RD_COMPARE_SWAP: Opcode = Opcode(0x53);
    pub const RD_FETCH_ADD: Opcode = Opcode(0x54);
    pub const RD_RESYNC: Opcode = Opcode(0x55);
    pub const RD_FLUSH: Opcode = Opcode(0x5C);
    pub const RD_ATOMIC_WRITE: Opcode = Opcode(0x5D);
    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x65);
    pub const CNP: Opcode = Opcode(0x81);
    pub const XRC_SEND_FIRST: Opcode = Opcode(0xA0);
    pub const XRC_SEND_MIDDLE: Opcode = Opcode(0xA1);
    pub const XRC_SEND_LAST: Opcode = Opcode(0xA2);
    pub const XRC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0xA3);
    pub const XRC_SEND_ONLY: Opcode = Opcode(0xA4);
    pub const XRC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0xA5);
    pub const XRC_RDMA_WRITE_FIRST: Opcode = Opcode(0xA6);
    pub const XRC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0xA7);
    pub const XRC_RDMA_WRITE_LAST: Opcode = Opcode(0xA8);
    pub const XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0xA9);
    pub const XRC_RDMA_WRITE_ONLY: Opcode = Opcode(0xAA);
    pub const XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0xAB);
    pub const XRC_RDMA_READ_REQUEST: Opcode = Opcode(0xAC);
    pub const XRC_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(0xAD);
    pub const XRC_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(0xAE);
    pub const XRC_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(0xAF);
    pub const XRC_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(0xB0);
    pub const XRC_ACKNOWLEDGE: Opcode = Opcode(0xB1);
    pub const XRC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0xB2);
    pub const XRC_COMPARE_SWAP: Opcode = Opcode(0xB3);
    pub const XRC_FETCH_ADD: Opcode = Opcode(0xB4);
    pub const XRC_SEND_LAST_WITH_INVALIDATE: Opcode = Opcode(0xB6);
    pub const XRC_SEND_ONLY_WITH_INVALIDATE: Opcode = Opcode(0xB7);

    /// The table row for this opcode, or `None` for a reserved / undefined value.
    #[inline]
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        TABLE[self.0 as usize].as_ref()
    }

    /// The spec name, or `"UNKNOWN"`.
    pub fn name(self) -> &'static str {
        self.info().map_or("UNKNOWN", |i| i.name)
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:#04x})", self.name(), self.0)
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (opcode, BTH + extension header bytes) as listed in `spec/tables.md` §1.
    const DOCUMENTED_LEN: &[(u8, usize)] = &[
        (0x00, 12),
        (0x01, 12),
        (0x02, 12),
        (0x03, 16),
        (0x04, 12),
        (0x05, 16),
        (0x06, 28),
        (0x07, 12),
        (0x08, 12),
        (0x09, 16),
        (0x0A, 28),
        (0x0B, 32),
        (0x0C, 28),
        (0x0D, 16),
        (0x0E, 12),
        (0x0F, 16),
        (0x10, 16),
        (0x11, 16),
        (0x12, 24),
        (0x13, 40),
        (0x14, 40),
        (0x16, 16),
        (0x17, 16),
        (0x1C, 32),
        (0x1D, 28),
        (0x20, 12),
        (0x21, 12),
        (0x22, 12),
        (0x23, 16),
        (0x24, 12),
        (0x25, 16),
        (0x26, 28),
        (0x27, 12),
        (0x28, 12),
        (0x29, 16),
        (0x2A, 28),
        (0x2B, 32),
        (0x40, 24),
        (0x41, 24),
        (0x42, 24),
        (0x43, 28),
        (0x44, 24),
        (0x45, 28),
        (0x46, 40),
        (0x47, 24),
        (0x48, 24),
        (0x49, 28),
        (0x4A, 40),
        (0x4B, 44),
        (0x4C, 40),
        (0x4D, 20),
        (0x4E, 16),
        (0x4F, 20),
        (0x50, 20),
        (0x51, 20),
        (0x52, 28),
        (0x53, 52),
        (0x54, 52),
        (0x55, 24),
        (0x5C, 44),
        (0x5D, 40),
        (0x64, 20),
        (0x65, 24),
        (0x81, 28),
        (0xA0, 16),
        (0xA1, 16),
        (0xA2, 16),
        (0xA3, 20),
        (0xA4, 16),
        (0xA5, 20),
        (0xA6, 32),
        (0xA7, 16),
        (0xA8, 16),
        (0xA9, 20),
        (0xAA, 32),
        (0xAB, 36),
        (0xAC, 32),
        (0xAD, 16),
        (0xAE, 12),
        (0xAF, 16),
        (0xB0, 16),
        (0xB1, 16),
        (0xB2, 24),
        (0xB3, 44),
        (0xB4, 44),
        (0xB6, 20),
        (0xB7, 20),
    ];

    #[test]
    fn header_lengths_match_documented_table() {
        assert_eq!(DOCUMENTED_LEN.len(), ROWS.len());
        for &(op, len) in DOCUMENTED_LEN {
            let info = Opcode(op)
                .info()
                .expect("documented opcode is in the table");
            assert_eq!(info.transport_header_len(), len, "{}", info.name);
        }
    }

    #[test]
    fn rows_are_sorted_unique_and_service_matches_prefix() {
        for w in ROWS.windows(2) {
            assert!(w[0].opcode < w[1].opcode);
        }
        for r in ROWS {
            let expect = match r.opcode.0 >> 5 {
                0 => Service::Rc,
                1 => Service::Uc,
                2 => Service::Rd,
                3 => Service::Ud,
                4 => Service::Cnp,
                5 => Service::Xrc,
                _ => unreachable!(),
            };
            assert_eq!(r.service, expect, "{}", r.name);
            assert!(r.name.starts_with(r.service.name()));
        }
    }

    #[test]
    fn undefined_opcodes() {
        for op in [
            0x15u8, 0x18, 0x1E, 0x1F, 0x2C, 0x3F, 0x56, 0x60, 0x66, 0x80, 0xB5, 0xBC, 0xC0, 0xE0,
            0xFF,
        ] {
            assert!(Opcode(op).info().is_none(), "{op:#x}");
        }
        assert_eq!(Opcode(0xFF).name(), "UNKNOWN");
    }

    #[test]
    fn immediate_and_invalidate_never_together() {
        for r in ROWS {
            assert!(!(r.has_immediate() && r.has_invalidate()), "{}", r.name);
        }
    }
}
