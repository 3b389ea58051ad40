//! Socket options that neither `socket2` nor `rustix` wraps, set through `libc` directly.
//!
//! This is the only module of softib that uses `unsafe`: one `setsockopt(2)` call on a
//! borrowed descriptor with a pointer to a local `c_int`.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// Sets an `int` option at level `SOL_UDP`.
fn set_udp_int(socket: &impl AsFd, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the descriptor is borrowed for the duration of the call; the option value
    // points to a live `c_int` of `len` bytes, which the kernel only reads.
    let r = unsafe {
        libc::setsockopt(
            socket.as_fd().as_raw_fd(),
            libc::SOL_UDP,
            name,
            (&raw const value).cast(),
            len,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `UDP_NO_CHECK6_RX`: accept IPv6 UDP datagrams whose checksum is 0. Linux drops them by
/// default (RFC 8200 requires the checksum), but Linux rxe sends RoCEv2 over IPv6 with UDP
/// checksum 0, relying on the ICRC (RFC 6936 allows zero checksums for tunnel protocols).
pub(crate) fn set_udp_no_check6_rx(socket: &impl AsFd, on: bool) -> io::Result<()> {
    set_udp_int(socket, libc::UDP_NO_CHECK6_RX, on.into())
}

/// `UDP_NO_CHECK6_TX`: send IPv6 UDP datagrams with checksum 0, as rxe does (tests).
#[cfg(test)]
pub(crate) fn set_udp_no_check6_tx(socket: &impl AsFd, on: bool) -> io::Result<()> {
    set_udp_int(socket, libc::UDP_NO_CHECK6_TX, on.into())
}
