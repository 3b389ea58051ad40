//! The verbs object model: device and port attributes, protection domains, memory regions,
//! completion queues, shared receive queues, address handles, work requests and queue pairs.
//!
//! Objects live inside the [`Hca`](crate::Hca) and are referenced by small `Copy` handles
//! (QPs by their [`Qpn`](softib_wire::Qpn)), never by Rust references.

pub mod ah;
pub mod cq;
pub mod device;
pub mod event;
pub mod mr;
pub mod qp;
pub mod srq;
pub mod types;
pub mod wr;

use crate::table::Key;
use core::fmt;

macro_rules! handle {
    ($(#[$m:meta])* $name:ident, $short:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub(crate) Key);

        impl $name {
            /// Slot index of the object inside its table (stable for the object's lifetime,
            /// reused after it is destroyed).
            pub fn index(self) -> u32 {
                self.0.index
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($short, "#{}.{}"), self.0.index, self.0.generation)
            }
        }
    };
}

handle!(
    /// A protection domain.
    PdHandle,
    "pd"
);
handle!(
    /// A completion queue.
    CqHandle,
    "cq"
);
handle!(
    /// A shared receive queue.
    SrqHandle,
    "srq"
);
handle!(
    /// A memory region.
    MrHandle,
    "mr"
);
handle!(
    /// An address handle.
    AhHandle,
    "ah"
);
handle!(
    /// An XRC domain.
    XrcdHandle,
    "xrcd"
);
handle!(
    /// A reliable datagram domain.
    RddHandle,
    "rdd"
);
