//! Memory regions.
//!
//! A memory region's bytes are either owned by the region (a `Vec<u8>` inside the HCA, what
//! the simulator and the CLI tools use) or lent by the driver through [`ExternalMemory`] (the
//! C library registers the application's own buffers this way, without a copy). Each region has an I/O virtual address range `[iova, iova + length)`, chosen by the
//! caller or assigned by the HCA, plus a PD, access rights, an L_Key and an R_Key.
//!
//! Keys follow rxe's layout: `(index << 8) | key`, where `index` (24 bits, from 1) names the
//! region's slot and `key` is an 8-bit tag that changes with every registration, so a key of a
//! deregistered region does not match a new region reusing the slot. The L_Key and R_Key of a
//! region differ in bit 7 of the tag; neither is ever 0.
//!
//! [`Hca::check_local`](crate::Hca::check_local) and
//! [`Hca::check_remote`](crate::Hca::check_remote) are the protection checks the data
//! path runs when a WR executes (IBA 10.6): key valid, PD match, access rights and
//! bounds (computed without overflow). A zero-length access is valid with any key.

use super::types::AccessFlags;
use super::{MrHandle, PdHandle};
use crate::table::{Key, Table};

/// Page size used for HCA-assigned addresses.
const PAGE: u64 = 4096;

/// Public description of a registered region (what `ibv_reg_mr` returns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrInfo {
    /// The region.
    pub handle: MrHandle,
    /// Protection domain.
    pub pd: PdHandle,
    /// First I/O virtual address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// Access rights.
    pub access: AccessFlags,
}

/// Memory lent to a region by the driver: the application's own buffer, which the data path
/// reads and writes in place. The implementation guarantees that the bytes stay valid for as
/// long as the region exists.
pub trait ExternalMemory: std::fmt::Debug + Send {
    /// The region's bytes.
    fn bytes(&self) -> &[u8];
    /// The region's bytes, writable.
    fn bytes_mut(&mut self) -> &mut [u8];
    /// Another handle to the same bytes (when an HCA is cloned).
    fn clone_box(&self) -> Box<dyn ExternalMemory>;
}

/// Where a region's bytes live.
#[derive(Debug)]
pub enum MrMemory {
    /// Owned by the region.
    Owned(Vec<u8>),
    /// Lent by the driver.
    External(Box<dyn ExternalMemory>),
}

impl Clone for MrMemory {
    fn clone(&self) -> MrMemory {
        match self {
            MrMemory::Owned(v) => MrMemory::Owned(v.clone()),
            MrMemory::External(e) => MrMemory::External(e.clone_box()),
        }
    }
}

impl From<Vec<u8>> for MrMemory {
    fn from(v: Vec<u8>) -> MrMemory {
        MrMemory::Owned(v)
    }
}

impl std::ops::Deref for MrMemory {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            MrMemory::Owned(v) => v,
            MrMemory::External(e) => e.bytes(),
        }
    }
}

impl std::ops::DerefMut for MrMemory {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            MrMemory::Owned(v) => v,
            MrMemory::External(e) => e.bytes_mut(),
        }
    }
}

/// What [`Hca::rereg_mr`](crate::Hca::rereg_mr) changes in a region; `None` keeps the
/// region's own.
#[derive(Debug, Default)]
pub struct MrRereg {
    /// The new protection domain.
    pub pd: Option<PdHandle>,
    /// The new access rights.
    pub access: Option<AccessFlags>,
    /// The new bytes and their first I/O virtual address (`None`: assigned by the HCA).
    pub memory: Option<(MrMemory, Option<u64>)>,
}

/// A region inside the HCA.
#[derive(Debug, Clone)]
pub(crate) struct Mr {
    pub(crate) pd: PdHandle,
    pub(crate) iova: u64,
    pub(crate) access: AccessFlags,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    /// False once the R_Key was invalidated (SEND with invalidate): remote access is refused.
    pub(crate) rkey_valid: bool,
    pub(crate) data: MrMemory,
}

impl Mr {
    #[inline(always)]
    fn len(&self) -> u64 {
        self.data.len() as u64
    }
}

/// The table slot a key names (its index is the key's high 24 bits, less one).
#[inline(always)]
fn slot_index(key: u32) -> Option<u32> {
    (key >> 8).checked_sub(1)
}

/// The offset of `addr` in `mr`, the region in the slot `key` names, when `key` is its L_Key
/// (`remote` false) or valid R_Key (true) and it grants `needed` over `[addr, addr + len)` to
/// `pd` (a non-empty access); the first check that fails otherwise.
#[inline(always)]
fn grant(
    mr: &Mr,
    pd: PdHandle,
    key: u32,
    addr: u64,
    len: u64,
    needed: AccessFlags,
    remote: bool,
) -> Result<usize, MrCheckError> {
    let named = if remote {
        mr.rkey == key && mr.rkey_valid
    } else {
        mr.lkey == key
    };
    if !named {
        return Err(MrCheckError::InvalidKey { key });
    }
    if mr.pd != pd {
        return Err(MrCheckError::PdMismatch { key });
    }
    if !mr.access.contains(needed) {
        return Err(MrCheckError::AccessDenied {
            key,
            needed,
            granted: mr.access,
        });
    }
    let mr_len = mr.len();
    let out = || MrCheckError::OutOfBounds {
        key,
        addr,
        len,
        mr_addr: mr.iova,
        mr_len,
    };
    let offset = addr.checked_sub(mr.iova).ok_or_else(out)?;
    let end = offset.checked_add(len).ok_or_else(out)?;
    if end > mr_len {
        return Err(out());
    }
    // Both fit in the Vec's length, so they fit usize.
    Ok(offset as usize)
}

/// A checked byte range inside a memory region: the result of a successful protection check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrSlice {
    /// The region, `None` for a zero-length access (which names no region).
    pub mr: Option<MrHandle>,
    /// Offset of the first byte inside the region's buffer.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

impl MrSlice {
    /// The empty access.
    pub const EMPTY: MrSlice = MrSlice {
        mr: None,
        offset: 0,
        len: 0,
    };
}

/// Why a memory access fails its protection check. The data path maps these onto
/// `IBV_WC_LOC_PROT_ERR` / `IBV_WC_LOC_LEN_ERR` (local) or a Remote Access Error NAK (remote).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MrCheckError {
    /// No region has this key.
    #[error("key {key:#x} does not name a memory region")]
    InvalidKey {
        /// The key.
        key: u32,
    },
    /// The region belongs to another protection domain.
    #[error("memory region of key {key:#x} belongs to another protection domain")]
    PdMismatch {
        /// The key.
        key: u32,
    },
    /// The region lacks an access right the operation needs.
    #[error("memory region of key {key:#x} grants {granted:?}, the access needs {needed:?}")]
    AccessDenied {
        /// The key.
        key: u32,
        /// Rights needed.
        needed: AccessFlags,
        /// Rights the region grants.
        granted: AccessFlags,
    },
    /// The range is not inside the region (including `addr + len` overflowing 64 bits).
    #[error(
        "range {addr:#x}+{len} is outside the memory region {mr_addr:#x}+{mr_len} of key {key:#x}"
    )]
    OutOfBounds {
        /// The key.
        key: u32,
        /// Requested address.
        addr: u64,
        /// Requested length.
        len: u64,
        /// Region start.
        mr_addr: u64,
        /// Region length.
        mr_len: u64,
    },
}

/// Errors of application access to region bytes by handle and offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MrAccessError {
    /// The handle does not name a live region.
    #[error("no such memory region {0:?}")]
    NoSuchMr(MrHandle),
    /// The range exceeds the region.
    #[error("range offset {offset} length {len} exceeds the memory region length {mr_len}")]
    OutOfBounds {
        /// Offset.
        offset: usize,
        /// Length.
        len: usize,
        /// Region length.
        mr_len: usize,
    },
}

/// Why `reg_mr` fails (besides a bad PD, reported by the verb).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MrRegFailure {
    InvalidAccess,
    AddressOverflow,
    AddressSpaceExhausted,
    TooManyMrs,
}

/// Why `rereg` fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MrReregFailure {
    NoSuchMr,
    Reg(MrRegFailure),
}

/// Largest slot index an R_Key/L_Key can name (24 bits, index 0 unused).
const MAX_KEY_INDEX: u32 = 0x00FF_FFFF;

/// All memory regions of an HCA.
#[derive(Debug, Clone)]
pub(crate) struct MrTable {
    table: Table<Mr>,
    next_tag: u8,
    next_iova: u64,
}

impl MrTable {
    pub(crate) fn new(iova_base: u64) -> MrTable {
        MrTable {
            table: Table::default(),
            next_tag: 0,
            next_iova: iova_base,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// Registers `data` as a region. `iova = None` asks the HCA to place it: regions are laid
    /// out page-aligned and upward from the configured base, with one unmapped page between
    /// neighbours, so an overrun of one region never lands in another.
    pub(crate) fn register(
        &mut self,
        pd: PdHandle,
        data: impl Into<MrMemory>,
        access: AccessFlags,
        iova: Option<u64>,
    ) -> Result<MrInfo, MrRegFailure> {
        let data = data.into();
        // ibv_reg_mr / IBA memory registration rules: remote write or atomic access requires local write.
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(MrRegFailure::InvalidAccess);
        }
        let len = data.len() as u64;
        let (addr, next_iova) = match iova {
            Some(a) => {
                a.checked_add(len).ok_or(MrRegFailure::AddressOverflow)?;
                (a, self.next_iova)
            }
            None => {
                let a = self.next_iova;
                let next = a
                    .checked_add(len)
                    .and_then(|end| end.checked_next_multiple_of(PAGE))
                    .and_then(|end| end.checked_add(PAGE))
                    .ok_or(MrRegFailure::AddressSpaceExhausted)?;
                (a, next)
            }
        };
        let key = self.table.next_key();
        let index = key.index + 1;
        if index > MAX_KEY_INDEX {
            return Err(MrRegFailure::TooManyMrs);
        }
        let tag = self.next_tag & 0x7F;
        self.next_tag = self.next_tag.wrapping_add(1);
        let lkey = (index << 8) | u32::from(tag);
        let rkey = (index << 8) | u32::from(tag | 0x80);
        let inserted = self.table.insert(Mr {
            pd,
            iova: addr,
            access,
            lkey,
            rkey,
            rkey_valid: true,
            data,
        });
        debug_assert_eq!(inserted, key);
        self.next_iova = next_iova;
        Ok(MrInfo {
            handle: MrHandle(key),
            pd,
            addr,
            length: len,
            lkey,
            rkey,
            access,
        })
    }

    /// Re-registers region `mr` (`ibv_rereg_mr`): into `pd`, with `access`, and over `memory`
    /// at `iova` when given (`None` for the I/O address: placed by the HCA as at
    /// registration). Conceptually a deregistration followed by a registration that keeps the
    /// region's slot and keys: the region's handle changes (the returned info's), so every
    /// range checked before ([`MrSlice`], the rest of a multi-packet WRITE, a READ response
    /// being sent) misses from now on and the next access is checked against the new
    /// attributes; the R_Key is valid again. On failure the region is unchanged.
    pub(crate) fn rereg(
        &mut self,
        mr: MrHandle,
        pd: PdHandle,
        access: AccessFlags,
        memory: Option<(MrMemory, Option<u64>)>,
    ) -> Result<MrInfo, MrReregFailure> {
        if self.get(mr).is_none() {
            return Err(MrReregFailure::NoSuchMr);
        }
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(MrReregFailure::Reg(MrRegFailure::InvalidAccess));
        }
        let mut next_iova = self.next_iova;
        let placed = match memory {
            None => None,
            Some((data, iova)) => {
                let len = data.len() as u64;
                let addr = match iova {
                    Some(a) => {
                        a.checked_add(len)
                            .ok_or(MrReregFailure::Reg(MrRegFailure::AddressOverflow))?;
                        a
                    }
                    None => {
                        let a = self.next_iova;
                        next_iova = a
                            .checked_add(len)
                            .and_then(|end| end.checked_next_multiple_of(PAGE))
                            .and_then(|end| end.checked_add(PAGE))
                            .ok_or(MrReregFailure::Reg(MrRegFailure::AddressSpaceExhausted))?;
                        a
                    }
                };
                Some((data, addr))
            }
        };
        let key = self.table.renew(mr.0).ok_or(MrReregFailure::NoSuchMr)?;
        self.next_iova = next_iova;
        let m = self.table.get_mut(key).ok_or(MrReregFailure::NoSuchMr)?;
        m.pd = pd;
        m.access = access;
        m.rkey_valid = true;
        if let Some((data, addr)) = placed {
            m.data = data;
            m.iova = addr;
        }
        self.info(MrHandle(key)).ok_or(MrReregFailure::NoSuchMr)
    }

    pub(crate) fn remove(&mut self, mr: MrHandle) -> Option<PdHandle> {
        self.table.remove(mr.0).map(|m| m.pd)
    }

    #[inline]
    pub(crate) fn get(&self, mr: MrHandle) -> Option<&Mr> {
        self.table.get(mr.0)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, mr: MrHandle) -> Option<&mut Mr> {
        self.table.get_mut(mr.0)
    }

    pub(crate) fn info(&self, mr: MrHandle) -> Option<MrInfo> {
        self.get(mr).map(|m| MrInfo {
            handle: mr,
            pd: m.pd,
            addr: m.iova,
            length: m.len(),
            lkey: m.lkey,
            rkey: m.rkey,
            access: m.access,
        })
    }

    #[inline]
    fn lookup(&self, key: u32) -> Option<(Key, &Mr)> {
        self.table.get_by_index(slot_index(key)?)
    }

    /// [`MrTable::lookup`], mutable.
    #[inline]
    fn lookup_mut(&mut self, key: u32) -> Option<&mut Mr> {
        self.table.get_by_index_mut(slot_index(key)?)
    }

    #[inline]
    fn check(
        &self,
        pd: PdHandle,
        key: u32,
        addr: u64,
        len: u64,
        needed: AccessFlags,
        remote: bool,
    ) -> Result<MrSlice, MrCheckError> {
        if len == 0 {
            return Ok(MrSlice::EMPTY);
        }
        let (slot, _, offset) = self.find(pd, key, addr, len, needed, remote)?;
        Ok(MrSlice {
            mr: Some(MrHandle(slot)),
            offset,
            len: len as usize,
        })
    }

    /// The region `key` names and the offset of `addr` in it, when it grants `needed` over
    /// `[addr, addr + len)` to `pd` (a non-empty access).
    #[inline(always)]
    fn find(
        &self,
        pd: PdHandle,
        key: u32,
        addr: u64,
        len: u64,
        needed: AccessFlags,
        remote: bool,
    ) -> Result<(Key, &Mr, usize), MrCheckError> {
        let (slot, mr) = self.lookup(key).ok_or(MrCheckError::InvalidKey { key })?;
        let offset = grant(mr, pd, key, addr, len, needed, remote)?;
        Ok((slot, mr, offset))
    }

    /// [`MrTable::check_local`] and [`MrTable::slice`] in one step: the bytes of a granted
    /// local access, `None` when it is refused.
    #[inline(always)]
    pub(crate) fn local_bytes(
        &self,
        pd: PdHandle,
        lkey: u32,
        addr: u64,
        len: u64,
        needed: AccessFlags,
    ) -> Option<&[u8]> {
        if len == 0 {
            return Some(&[]);
        }
        let (_, mr, offset) = self.find(pd, lkey, addr, len, needed, false).ok()?;
        mr.data.get(offset..offset + len as usize)
    }

    /// [`MrTable::check_local`] (`remote` false) or [`MrTable::check_remote`] (true) and
    /// [`MrTable::slice_mut`] in one step: the bytes of a granted access, writable; `None`
    /// when it is refused.
    #[inline(always)]
    pub(crate) fn bytes_mut(
        &mut self,
        pd: PdHandle,
        key: u32,
        addr: u64,
        len: u64,
        needed: AccessFlags,
        remote: bool,
    ) -> Option<&mut [u8]> {
        if len == 0 {
            return Some(&mut []);
        }
        // One look-up, mutable: the checks are `find`'s.
        let mr = self.lookup_mut(key)?;
        let offset = grant(mr, pd, key, addr, len, needed, remote).ok()?;
        mr.data.get_mut(offset..offset + len as usize)
    }

    /// Checks a local access through an L_Key. `needed` is empty for reads of local memory
    /// (gathering a send) and [`AccessFlags::LOCAL_WRITE`] when the HCA writes local memory
    /// (receive scatter, RDMA READ response, atomic result).
    #[inline]
    pub(crate) fn check_local(
        &self,
        pd: PdHandle,
        lkey: u32,
        addr: u64,
        len: u64,
        needed: AccessFlags,
    ) -> Result<MrSlice, MrCheckError> {
        self.check(pd, lkey, addr, len, needed, false)
    }

    /// Checks a remote access through an R_Key. `needed` is `REMOTE_READ`, `REMOTE_WRITE` or
    /// `REMOTE_ATOMIC`.
    #[inline]
    pub(crate) fn check_remote(
        &self,
        pd: PdHandle,
        rkey: u32,
        va: u64,
        len: u64,
        needed: AccessFlags,
    ) -> Result<MrSlice, MrCheckError> {
        self.check(pd, rkey, va, len, needed, true)
    }

    /// Invalidates the R_Key `rkey` of a region in `pd` (IBA: SEND with invalidate); returns
    /// whether such a region existed.
    pub(crate) fn invalidate_rkey(&mut self, pd: PdHandle, rkey: u32) -> bool {
        match self.lookup(rkey) {
            Some((slot, mr)) if mr.rkey == rkey && mr.pd == pd => {
                if let Some(m) = self.get_mut(MrHandle(slot)) {
                    m.rkey_valid = false;
                }
                true
            }
            _ => false,
        }
    }

    #[inline]
    pub(crate) fn slice(&self, s: &MrSlice) -> Option<&[u8]> {
        match s.mr {
            None => Some(&[]),
            Some(h) => self
                .get(h)?
                .data
                .get(s.offset..s.offset.checked_add(s.len)?),
        }
    }

    #[inline]
    pub(crate) fn slice_mut(&mut self, s: &MrSlice) -> Option<&mut [u8]> {
        match s.mr {
            None => Some(&mut []),
            Some(h) => {
                let end = s.offset.checked_add(s.len)?;
                self.get_mut(h)?.data.get_mut(s.offset..end)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Key;

    fn pd(i: u32) -> PdHandle {
        PdHandle(Key {
            index: i,
            generation: 0,
        })
    }

    const RW: AccessFlags = AccessFlags::LOCAL_WRITE
        .union(AccessFlags::REMOTE_WRITE)
        .union(AccessFlags::REMOTE_READ);

    #[test]
    fn keys_are_distinct_nonzero_and_rxe_shaped() {
        let mut t = MrTable::new(0x1000_0000);
        let a = t.register(pd(0), vec![0; 10], RW, None).unwrap();
        let b = t.register(pd(0), vec![0; 10], RW, None).unwrap();
        for k in [a.lkey, a.rkey, b.lkey, b.rkey] {
            assert_ne!(k, 0);
        }
        assert_ne!(a.lkey, a.rkey);
        assert_ne!(a.lkey, b.lkey);
        assert_eq!(a.lkey >> 8, 1);
        assert_eq!(b.lkey >> 8, 2);
        assert_eq!(a.lkey >> 8, a.rkey >> 8);
        // Reusing a slot changes the tag, so the old key misses.
        t.remove(a.handle).unwrap();
        let c = t.register(pd(0), vec![0; 10], RW, None).unwrap();
        assert_eq!(c.lkey >> 8, a.lkey >> 8);
        assert_ne!(c.lkey, a.lkey);
        assert_eq!(
            t.check_local(pd(0), a.lkey, c.addr, 1, AccessFlags::empty()),
            Err(MrCheckError::InvalidKey { key: a.lkey })
        );
    }

    #[test]
    fn assigned_addresses_are_disjoint_and_page_aligned() {
        let mut t = MrTable::new(0x7f00_0000_0000);
        let a = t.register(pd(0), vec![0; 5000], RW, None).unwrap();
        let b = t.register(pd(0), vec![0; 1], RW, None).unwrap();
        let c = t.register(pd(0), vec![0; 0], RW, None).unwrap();
        assert_eq!(a.addr, 0x7f00_0000_0000);
        assert_eq!(b.addr % PAGE, 0);
        assert!(b.addr >= a.addr + a.length + PAGE);
        assert!(c.addr >= b.addr + b.length + PAGE);
        // A caller-chosen address is kept and does not move the HCA's cursor.
        let d = t
            .register(pd(0), vec![0; 8], RW, Some(0xdead_0000))
            .unwrap();
        assert_eq!(d.addr, 0xdead_0000);
        let e = t.register(pd(0), vec![0; 8], RW, None).unwrap();
        assert!(e.addr > c.addr && e.addr < 0x7f01_0000_0000);
    }

    #[test]
    fn registration_rules() {
        let mut t = MrTable::new(0);
        assert_eq!(
            t.register(pd(0), vec![0; 4], AccessFlags::REMOTE_WRITE, None),
            Err(MrRegFailure::InvalidAccess)
        );
        assert_eq!(
            t.register(pd(0), vec![0; 4], AccessFlags::REMOTE_ATOMIC, None),
            Err(MrRegFailure::InvalidAccess)
        );
        assert!(t
            .register(pd(0), vec![0; 4], AccessFlags::REMOTE_READ, None)
            .is_ok());
        assert_eq!(
            t.register(pd(0), vec![0; 4], RW, Some(u64::MAX - 2)),
            Err(MrRegFailure::AddressOverflow)
        );
        let mut t = MrTable::new(u64::MAX - 100);
        assert_eq!(
            t.register(pd(0), vec![0; 4], RW, None),
            Err(MrRegFailure::AddressSpaceExhausted)
        );
    }

    #[test]
    fn local_check_bounds() {
        let mut t = MrTable::new(0x10_000);
        let m = t.register(pd(0), vec![0; 100], RW, None).unwrap();
        let none = AccessFlags::empty();
        let s = t.check_local(pd(0), m.lkey, m.addr + 10, 90, none).unwrap();
        assert_eq!(
            s,
            MrSlice {
                mr: Some(m.handle),
                offset: 10,
                len: 90
            }
        );
        assert_eq!(t.slice(&s).unwrap().len(), 90);
        assert!(matches!(
            t.check_local(pd(0), m.lkey, m.addr + 10, 91, none),
            Err(MrCheckError::OutOfBounds { .. })
        ));
        assert!(matches!(
            t.check_local(pd(0), m.lkey, m.addr - 1, 2, none),
            Err(MrCheckError::OutOfBounds { .. })
        ));
        // addr + len overflows 64 bits.
        assert!(matches!(
            t.check_local(pd(0), m.lkey, u64::MAX, 2, none),
            Err(MrCheckError::OutOfBounds { .. })
        ));
        assert!(matches!(
            t.check_local(pd(0), m.lkey, m.addr + 1, u64::MAX, none),
            Err(MrCheckError::OutOfBounds { .. })
        ));
        // Whole region.
        assert!(t.check_local(pd(0), m.lkey, m.addr, 100, none).is_ok());
    }

    #[test]
    fn local_check_keys_pd_access() {
        let mut t = MrTable::new(0x10_000);
        let ro = t
            .register(pd(0), vec![0; 16], AccessFlags::empty(), None)
            .unwrap();
        let rw = t.register(pd(0), vec![0; 16], RW, None).unwrap();
        let lw = AccessFlags::LOCAL_WRITE;
        // Reading local memory needs no right; writing needs LOCAL_WRITE.
        assert!(t
            .check_local(pd(0), ro.lkey, ro.addr, 4, AccessFlags::empty())
            .is_ok());
        assert_eq!(
            t.check_local(pd(0), ro.lkey, ro.addr, 4, lw),
            Err(MrCheckError::AccessDenied {
                key: ro.lkey,
                needed: lw,
                granted: AccessFlags::empty()
            })
        );
        assert!(t.check_local(pd(0), rw.lkey, rw.addr, 4, lw).is_ok());
        // PD mismatch.
        assert_eq!(
            t.check_local(pd(1), rw.lkey, rw.addr, 4, lw),
            Err(MrCheckError::PdMismatch { key: rw.lkey })
        );
        // An R_Key is not an L_Key and vice versa.
        assert_eq!(
            t.check_local(pd(0), rw.rkey, rw.addr, 4, lw),
            Err(MrCheckError::InvalidKey { key: rw.rkey })
        );
        assert_eq!(
            t.check_remote(pd(0), rw.lkey, rw.addr, 4, AccessFlags::REMOTE_READ),
            Err(MrCheckError::InvalidKey { key: rw.lkey })
        );
        // Unknown keys, including index 0.
        for k in [0u32, 0xFF, 0x7700, u32::MAX] {
            assert_eq!(
                t.check_local(pd(0), k, rw.addr, 4, lw),
                Err(MrCheckError::InvalidKey { key: k })
            );
        }
    }

    #[test]
    fn remote_check_access_flags() {
        let mut t = MrTable::new(0x10_000);
        let r = t
            .register(pd(0), vec![0; 16], AccessFlags::REMOTE_READ, None)
            .unwrap();
        let w = t
            .register(
                pd(0),
                vec![0; 16],
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
                None,
            )
            .unwrap();
        let a = t
            .register(
                pd(0),
                vec![0; 16],
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC,
                None,
            )
            .unwrap();
        let local_only = t
            .register(pd(0), vec![0; 16], AccessFlags::LOCAL_WRITE, None)
            .unwrap();
        let cases = [
            (r, AccessFlags::REMOTE_READ, true),
            (r, AccessFlags::REMOTE_WRITE, false),
            (r, AccessFlags::REMOTE_ATOMIC, false),
            (w, AccessFlags::REMOTE_WRITE, true),
            (w, AccessFlags::REMOTE_READ, false),
            (a, AccessFlags::REMOTE_ATOMIC, true),
            (a, AccessFlags::REMOTE_WRITE, false),
            (local_only, AccessFlags::REMOTE_READ, false),
        ];
        for (m, need, ok) in cases {
            let res = t.check_remote(pd(0), m.rkey, m.addr, 8, need);
            assert_eq!(res.is_ok(), ok, "{need:?} on {:?}", m.access);
            if !ok {
                assert!(matches!(res, Err(MrCheckError::AccessDenied { .. })));
            }
        }
        assert_eq!(
            t.check_remote(pd(3), r.rkey, r.addr, 8, AccessFlags::REMOTE_READ),
            Err(MrCheckError::PdMismatch { key: r.rkey })
        );
        assert!(matches!(
            t.check_remote(pd(0), r.rkey, r.addr + 9, 8, AccessFlags::REMOTE_READ),
            Err(MrCheckError::OutOfBounds { .. })
        ));
    }

    #[test]
    fn zero_length_is_valid_with_any_key() {
        let t = MrTable::new(0);
        for k in [0, 1, 0x1234_5678, u32::MAX] {
            assert_eq!(
                t.check_local(pd(9), k, u64::MAX, 0, AccessFlags::LOCAL_WRITE),
                Ok(MrSlice::EMPTY)
            );
            assert_eq!(
                t.check_remote(pd(9), k, 0, 0, AccessFlags::REMOTE_ATOMIC),
                Ok(MrSlice::EMPTY)
            );
        }
        assert_eq!(t.slice(&MrSlice::EMPTY), Some(&[][..]));
    }
}
