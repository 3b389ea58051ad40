//! Re-registration of a memory region (`Hca::rereg_mr`, what `ibv_rereg_mr` runs): the new
//! PD, access rights and translation are what the protection checks see from the call on, the
//! keys stay, a failed call changes nothing, and a range checked before the call (the rest of
//! a multi-packet RDMA WRITE) no longer reaches the region.

mod common;

use common::{hdr, Dir, Pair, Seen};
use softib_core::error::{RegMrError, ReregMrError};
use softib_core::setup::ConnectOptions;
use softib_core::verbs::mr::{MrCheckError, MrMemory, MrRereg};
use softib_core::verbs::types::AccessFlags;
use softib_wire::opcode::Opcode;
use softib_wire::reth::Reth;
use softib_wire::transport::TransportHeaders;

/// B's initial expected PSN.
const P: u32 = 0x100;
/// The default connection's path MTU.
const MTU: usize = 1024;
const NAK_ACCESS: u8 = 0x62;

fn pair() -> Pair {
    Pair::new(P, 0x900, ConnectOptions::default())
}

const RW: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);

fn write_hdr(op: Opcode, psn: u32, reth: Option<Reth>) -> TransportHeaders {
    let mut h = hdr(op, psn);
    h.bth.ack_req = true;
    h.reth = reth;
    h
}

fn syndromes(v: &[Seen]) -> Vec<Option<u8>> {
    v.iter().map(|s| s.syndrome()).collect()
}

/// A WRITE of three packets whose FIRST was checked and placed under the old registration:
/// after the region is re-registered (`change`), the MIDDLE packet is refused with a Remote
/// Access Error NAK and neither the old nor the new bytes take the rest of the message.
fn write_cut_by_rereg(change: impl FnOnce(&mut Pair) -> MrRereg) {
    let mut p = pair();
    let (va, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    let reth = Reth {
        va,
        rkey,
        dma_len: 3 * MTU as u32,
    };
    p.inject(
        Dir::AtoB,
        write_hdr(Opcode::RC_RDMA_WRITE_FIRST, P, Some(reth)),
        &[0x11; MTU],
    );
    let first = p.drain(Dir::BtoA);
    assert!(
        first
            .iter()
            .all(|s| s.syndrome().is_none_or(|b| b & 0x60 == 0)),
        "{first:?}"
    );
    let mut head = vec![0u8; 2 * MTU];
    p.b.hca.mr_read(p.b.mr.handle, 0, &mut head).unwrap();
    assert_eq!(&head[..MTU], &[0x11; MTU][..]);
    assert_eq!(&head[MTU..], &[0u8; MTU][..]);

    let c = change(&mut p);
    let old = p.b.mr;
    let new = p.b.hca.rereg_mr(old.handle, c).unwrap();
    assert_eq!((new.lkey, new.rkey), (old.lkey, old.rkey), "the keys stay");
    assert_ne!(new.handle, old.handle);

    p.inject(
        Dir::AtoB,
        write_hdr(Opcode::RC_RDMA_WRITE_MIDDLE, P + 1, None),
        &[0x22; MTU],
    );
    let out = p.drain(Dir::BtoA);
    assert_eq!(syndromes(&out), vec![Some(NAK_ACCESS)], "{out:?}");
    let mut now = vec![0u8; new.length as usize];
    p.b.hca.mr_read(new.handle, 0, &mut now).unwrap();
    assert!(!now.contains(&0x22), "the MIDDLE packet was placed");
}

#[test]
fn write_in_flight_refused_after_access_change() {
    write_cut_by_rereg(|_| MrRereg {
        access: Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ),
        ..MrRereg::default()
    });
}

#[test]
fn write_in_flight_refused_after_pd_change() {
    write_cut_by_rereg(|p| MrRereg {
        pd: Some(p.b.hca.alloc_pd().unwrap()),
        ..MrRereg::default()
    });
}

#[test]
fn write_in_flight_refused_after_translation_change() {
    write_cut_by_rereg(|_| MrRereg {
        memory: Some((MrMemory::Owned(vec![0u8; 8 * MTU]), None)),
        ..MrRereg::default()
    });
}

/// Even a re-registration that changes nothing visible is a new registration: the message
/// checked under the old one does not go on.
#[test]
fn write_in_flight_refused_after_same_attributes() {
    write_cut_by_rereg(|_| MrRereg::default());
}

#[test]
fn new_attributes_are_checked_and_keys_kept() {
    let mut p = pair();
    let hca = &mut p.b.hca;
    let pd = hca.alloc_pd().unwrap();
    let pd2 = hca.alloc_pd().unwrap();
    let m = hca.reg_mr(pd, vec![7u8; 256], RW, Some(0x10_000)).unwrap();
    let w = AccessFlags::REMOTE_WRITE;
    let before = hca.check_remote(pd, m.rkey, m.addr, 16, w).unwrap();

    // Access: REMOTE_WRITE withdrawn, REMOTE_READ kept; the keys stay.
    let a = hca
        .rereg_mr(
            m.handle,
            MrRereg {
                access: Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ),
                ..MrRereg::default()
            },
        )
        .unwrap();
    assert_eq!(
        (a.lkey, a.rkey, a.addr, a.length, a.pd),
        (m.lkey, m.rkey, m.addr, 256, pd)
    );
    assert!(matches!(
        hca.check_remote(pd, m.rkey, m.addr, 16, w),
        Err(MrCheckError::AccessDenied { .. })
    ));
    assert!(hca
        .check_remote(pd, m.rkey, m.addr, 16, AccessFlags::REMOTE_READ)
        .is_ok());
    // The range checked before no longer reaches the bytes; the old handle is gone.
    assert_eq!(hca.mr_slice(&before), None);
    assert!(hca.query_mr(m.handle).is_err());
    assert_eq!(hca.query_mr(a.handle).unwrap(), a);

    // PD: the region moves to pd2; pd can go, pd2 cannot while the region is in it.
    let b = hca
        .rereg_mr(
            a.handle,
            MrRereg {
                pd: Some(pd2),
                access: Some(RW),
                ..MrRereg::default()
            },
        )
        .unwrap();
    assert_eq!(b.pd, pd2);
    assert_eq!(
        hca.check_local(pd, m.lkey, m.addr, 8, AccessFlags::LOCAL_WRITE),
        Err(MrCheckError::PdMismatch { key: m.lkey })
    );
    assert!(hca.check_remote(pd2, m.rkey, m.addr, 8, w).is_ok());
    assert!(hca.dealloc_pd(pd2).is_err());

    // Translation: new bytes at a new address; the old range is out of bounds.
    let c = hca
        .rereg_mr(
            b.handle,
            MrRereg {
                memory: Some((MrMemory::Owned(vec![9u8; 64]), Some(0x90_000))),
                ..MrRereg::default()
            },
        )
        .unwrap();
    assert_eq!(
        (c.addr, c.length, c.lkey, c.rkey),
        (0x90_000, 64, m.lkey, m.rkey)
    );
    assert!(matches!(
        hca.check_remote(pd2, m.rkey, m.addr, 8, w),
        Err(MrCheckError::OutOfBounds { .. })
    ));
    assert!(matches!(
        hca.check_remote(pd2, m.rkey, 0x90_000 + 60, 8, w),
        Err(MrCheckError::OutOfBounds { .. })
    ));
    let s = hca.check_remote(pd2, m.rkey, 0x90_000 + 56, 8, w).unwrap();
    assert_eq!(hca.mr_slice(&s), Some(&[9u8; 8][..]));
    // An HCA-placed translation gets a fresh page-aligned address.
    let d = hca
        .rereg_mr(
            c.handle,
            MrRereg {
                memory: Some((MrMemory::Owned(vec![1u8; 10]), None)),
                ..MrRereg::default()
            },
        )
        .unwrap();
    assert_eq!(d.addr % 4096, 0);
    assert_eq!(d.length, 10);

    // Back to pd: now pd2 can be freed, pd cannot.
    let e = hca
        .rereg_mr(
            d.handle,
            MrRereg {
                pd: Some(pd),
                ..MrRereg::default()
            },
        )
        .unwrap();
    assert!(hca.dealloc_pd(pd2).is_ok());
    assert!(hca.dealloc_pd(pd).is_err());
    hca.dereg_mr(e.handle).unwrap();
    assert!(hca.dealloc_pd(pd).is_ok());
}

#[test]
fn failed_rereg_changes_nothing() {
    let mut p = pair();
    let hca = &mut p.b.hca;
    let pd = hca.alloc_pd().unwrap();
    let dead = hca.alloc_pd().unwrap();
    hca.dealloc_pd(dead).unwrap();
    let m = hca.reg_mr(pd, vec![0u8; 128], RW, None).unwrap();
    let w = AccessFlags::REMOTE_WRITE;
    let checked = hca.check_remote(pd, m.rkey, m.addr, 8, w).unwrap();
    let bad = [
        (
            MrRereg {
                access: Some(AccessFlags::REMOTE_WRITE),
                ..MrRereg::default()
            },
            ReregMrError::Reg(RegMrError::InvalidAccess(AccessFlags::REMOTE_WRITE)),
        ),
        (
            MrRereg {
                pd: Some(dead),
                ..MrRereg::default()
            },
            ReregMrError::Reg(RegMrError::NoSuchPd(dead)),
        ),
        (
            MrRereg {
                memory: Some((MrMemory::Owned(vec![0u8; 16]), Some(u64::MAX - 4))),
                ..MrRereg::default()
            },
            ReregMrError::Reg(RegMrError::AddressOverflow {
                addr: u64::MAX - 4,
                len: 16,
            }),
        ),
    ];
    for (change, want) in bad {
        assert_eq!(hca.rereg_mr(m.handle, change), Err(want));
        assert_eq!(hca.query_mr(m.handle), Ok(m));
        assert_eq!(hca.mr_slice(&checked).map(<[u8]>::len), Some(8));
    }
    let gone = hca.rereg_mr(m.handle, MrRereg::default()).unwrap();
    assert_eq!(
        hca.rereg_mr(m.handle, MrRereg::default()),
        Err(ReregMrError::NoSuchMr(m.handle))
    );
    hca.dereg_mr(gone.handle).unwrap();
}

/// An R_Key invalidated by a SEND with Invalidate is valid again after a re-registration (a
/// new registration of the region).
#[test]
fn rereg_revalidates_an_invalidated_rkey() {
    let mut p = pair();
    let (rkey, addr) = (p.b.mr.rkey, p.b.mr.addr);
    p.b.hca
        .post_recv(
            p.b.qpn,
            &[softib_core::verbs::wr::RecvWr::new(5, Vec::new())],
        )
        .unwrap();
    let mut h = hdr(Opcode::RC_SEND_ONLY_WITH_INVALIDATE, P);
    h.bth.ack_req = true;
    h.ieth = Some(softib_wire::ieth::Ieth { rkey });
    p.inject(Dir::AtoB, h, &[]);
    let _ = p.drain(Dir::BtoA);
    let pd = p.b.pd;
    let w = AccessFlags::REMOTE_WRITE;
    assert!(p.b.hca.check_remote(pd, rkey, addr, 8, w).is_err());
    let info = p.b.hca.rereg_mr(p.b.mr.handle, MrRereg::default()).unwrap();
    assert_eq!(info.rkey, rkey);
    assert!(p.b.hca.check_remote(pd, rkey, addr, 8, w).is_ok());
}
