//! Protection domains, memory regions over the application's own memory, address handles.

use softib_core::error::ReregMrError;
use softib_core::verbs::mr::{ExternalMemory, MrMemory, MrRereg};
use softib_core::verbs::types::AccessFlags;
use softib_core::verbs::{AhHandle, MrHandle, PdHandle};

use crate::convert;
use crate::device::SoftContext;
use crate::registry::{self, Kind};
use crate::util::{self, null_errno, ret_errno};
use crate::verbs_h::*;

/// `struct ibv_pd` and its HCA handle.
#[repr(C)]
pub struct SoftPd {
    /// Must be first.
    pub pd: ibv_pd,
    /// The HCA's PD.
    pub handle: PdHandle,
}

/// `struct ibv_mr` and its HCA handle.
#[repr(C)]
pub struct SoftMr {
    /// Must be first.
    pub mr: ibv_mr,
    /// The HCA's region.
    pub handle: MrHandle,
}

/// `struct ibv_ah` and its HCA handle.
#[repr(C)]
pub struct SoftAh {
    /// Must be first.
    pub ah: ibv_ah,
    /// The HCA's address handle.
    pub handle: AhHandle,
}

/// The context of a live PD.
pub unsafe fn pd_parts<'a>(pd: *mut ibv_pd) -> Option<(&'a SoftContext, &'a SoftPd)> {
    if !registry::is_live(pd, Kind::Pd) {
        return None;
    }
    let sp = &*pd.cast::<SoftPd>();
    let sc = SoftContext::from_ctx(sp.pd.context)?;
    Some((sc, sp))
}

symver!(ibv_alloc_pd);
#[export_name = "softib_ibv_alloc_pd"]
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return null_errno(libc::EINVAL);
    };
    let h = match sc.shared.lock().dev.hca_mut().alloc_pd() {
        Ok(h) => h,
        Err(_) => return null_errno(libc::ENOMEM),
    };
    let p = Box::into_raw(Box::new(SoftPd {
        pd: ibv_pd {
            context: ctx,
            handle: 0,
        },
        handle: h,
    }));
    (*p).pd.handle = p as usize as u32;
    registry::add(p.cast::<ibv_pd>(), Kind::Pd);
    p.cast()
}

symver!(ibv_dealloc_pd);
#[export_name = "softib_ibv_dealloc_pd"]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> i32 {
    let Some((sc, sp)) = pd_parts(pd) else {
        return ret_errno(libc::EINVAL);
    };
    if sc
        .shared
        .lock()
        .dev
        .hca_mut()
        .dealloc_pd(sp.handle)
        .is_err()
    {
        return ret_errno(libc::EBUSY);
    }
    registry::remove(pd, Kind::Pd);
    drop(Box::from_raw(pd.cast::<SoftPd>()));
    0
}

/// The application's buffer as the bytes of a region.
#[derive(Debug)]
struct AppMemory {
    ptr: *mut u8,
    len: usize,
    /// The range, for a fault in memory the application unmapped while it is registered.
    _region: crate::fault::Region,
}

impl AppMemory {
    fn new(ptr: *mut u8, len: usize) -> AppMemory {
        AppMemory {
            ptr,
            len,
            _region: crate::fault::Region::new(ptr as usize, len),
        }
    }
}

// SAFETY: the buffer belongs to the application, which keeps it valid while registered
// (the contract of ibv_reg_mr); the engine lock serialises softib's accesses.
unsafe impl Send for AppMemory {}

impl ExternalMemory for AppMemory {
    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: registered memory stays valid until ibv_dereg_mr.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as above; writes only happen where the region grants write access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
    fn clone_box(&self) -> Box<dyn ExternalMemory> {
        Box::new(AppMemory::new(self.ptr, self.len))
    }
}

/// Access flags softib implements; the optional ones (`IBV_ACCESS_OPTIONAL_RANGE`, e.g.
/// relaxed ordering) may be ignored, as rdma-core allows.
/// `IBV_ACCESS_OPTIONAL_RANGE` of verbs.h (a macro bindgen does not evaluate): bits 20-29.
const IBV_ACCESS_OPTIONAL_RANGE: u32 =
    ((IBV_ACCESS_OPTIONAL_FIRST << 10) - 1) & !(IBV_ACCESS_OPTIONAL_FIRST - 1);

const SUPPORTED_ACCESS: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC;

/// The rights of `ibv_reg_mr`'s (`ibv_rereg_mr`'s) `access`: the optional flags dropped, any
/// other flag softib does not implement (memory windows, on-demand paging, zero-based
/// addresses, ...) EOPNOTSUPP, as rxe refuses what it does not support.
fn access_flags(access: u32) -> Result<AccessFlags, i32> {
    let access = access & !IBV_ACCESS_OPTIONAL_RANGE;
    if access & !SUPPORTED_ACCESS != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(AccessFlags::from_bits_truncate(access))
}

fn reg(
    pd: *mut ibv_pd,
    addr: *mut libc::c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    // SAFETY: checked against the registry.
    let Some((sc, sp)) = (unsafe { pd_parts(pd) }) else {
        return null_errno(libc::EINVAL);
    };
    let flags = match access_flags(access) {
        Ok(f) => f,
        Err(e) => return null_errno(e),
    };
    if addr.is_null() && length > 0 {
        return null_errno(libc::EINVAL);
    }
    // rdma-core pins the pages here (rxe: ib_umem_get, writable for any write access), so
    // memory the process cannot access fails now with EFAULT, not later in the progress
    // thread when a peer writes there.
    let writable = flags.intersects(
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
    );
    if !accessible(addr as usize, length, writable) {
        return null_errno(libc::EFAULT);
    }
    populate(addr as usize, length, writable);
    let mem = MrMemory::External(Box::new(AppMemory::new(addr.cast(), length)));
    let info = match sc
        .shared
        .lock()
        .dev
        .hca_mut()
        .reg_mr_memory(sp.handle, mem, flags, Some(iova))
    {
        Ok(i) => i,
        Err(e) => return null_errno(convert::reg_mr_errno(&e)),
    };
    let m = Box::into_raw(Box::new(SoftMr {
        mr: ibv_mr {
            context: sp.pd.context,
            pd,
            addr,
            length,
            handle: 0,
            lkey: info.lkey,
            rkey: info.rkey,
        },
        handle: info.handle,
    }));
    // SAFETY: just allocated.
    unsafe { (*m).mr.handle = info.lkey };
    registry::add(m.cast::<ibv_mr>(), Kind::Mr);
    m.cast()
}

/// Faults in the pages of `[addr, addr + len)` now, writable if `write`, as pinning them does
/// on hardware and rxe (`ib_umem_get`): a page first touched by the data path would cost a
/// page fault in the middle of a message instead (UCX's UD transport, whose receive buffers
/// come fresh from its pool for its first few hundred messages, measured 4-10 us round trips
/// for them against 1.9 us after). Best effort: a kernel without `MADV_POPULATE_*` (before
/// 5.14) or a mapping it refuses leaves the pages to fault later, as before.
fn populate(addr: usize, len: usize, write: bool) {
    if len == 0 {
        return;
    }
    let page = 4096;
    let start = addr & !(page - 1);
    let Some(end) = addr.checked_add(len) else {
        return;
    };
    let advice = if write {
        libc::MADV_POPULATE_WRITE
    } else {
        libc::MADV_POPULATE_READ
    };
    // SAFETY: madvise only faults in pages of the caller's own mappings (checked accessible
    // above); it never changes their contents.
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, advice);
    }
}

/// True if every byte of `[addr, addr + len)` lies in mappings of this process that are
/// readable, and writable if `write` (`/proc/self/maps`, whose lines are sorted by address).
/// If the maps cannot be read the range is accepted, as before this check.
fn accessible(addr: usize, len: usize, write: bool) -> bool {
    if len == 0 {
        return true;
    }
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return true;
    };
    let mut cur = addr;
    for line in maps.lines() {
        let mut it = line.split_whitespace();
        let (Some(range), Some(perms)) = (it.next(), it.next()) else {
            continue;
        };
        let Some((s, e)) = range.split_once('-') else {
            continue;
        };
        let (Ok(s), Ok(e)) = (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16)) else {
            continue;
        };
        if e <= cur {
            continue;
        }
        let p = perms.as_bytes();
        if s > cur || p.first() != Some(&b'r') || (write && p.get(1) != Some(&b'w')) {
            return false;
        }
        cur = e;
        if cur >= end {
            return true;
        }
    }
    false
}

symver!(ibv_reg_mr);
#[export_name = "softib_ibv_reg_mr"]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut libc::c_void,
    length: usize,
    access: i32,
) -> *mut ibv_mr {
    reg(pd, addr, length, addr as u64, access as u32)
}

symver!(ibv_reg_mr_iova);
#[export_name = "softib_ibv_reg_mr_iova"]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut libc::c_void,
    length: usize,
    iova: u64,
    access: i32,
) -> *mut ibv_mr {
    reg(pd, addr, length, iova, access as u32)
}

symver!(ibv_reg_mr_iova2);
#[export_name = "softib_ibv_reg_mr_iova2"]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut libc::c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    reg(pd, addr, length, iova, access)
}

symver!(ibv_dereg_mr);
#[export_name = "softib_ibv_dereg_mr"]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> i32 {
    if !registry::is_live(mr, Kind::Mr) {
        return ret_errno(libc::EINVAL);
    }
    let sm = mr.cast::<SoftMr>();
    let Some(sc) = SoftContext::from_ctx((*sm).mr.context) else {
        return ret_errno(libc::EINVAL);
    };
    if sc
        .shared
        .lock()
        .dev
        .hca_mut()
        .dereg_mr((*sm).handle)
        .is_err()
    {
        return ret_errno(libc::EINVAL);
    }
    registry::remove(mr, Kind::Mr);
    drop(Box::from_raw(sm));
    0
}

symver!(ibv_rereg_mr);
#[export_name = "softib_ibv_rereg_mr"]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: i32,
    pd: *mut ibv_pd,
    addr: *mut libc::c_void,
    length: usize,
    access: i32,
) -> i32 {
    // libibverbs' own checks (ibv_rereg_mr(3)): IBV_REREG_MR_ERR_INPUT with errno EINVAL, the
    // region unchanged.
    let flags = flags as u32;
    if !registry::is_live(mr, Kind::Mr)
        || flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0
        || (flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 && (addr.is_null() || length == 0))
        || (access != 0 && flags & IBV_REREG_MR_CHANGE_ACCESS == 0)
    {
        util::set_errno(libc::EINVAL);
        return IBV_REREG_MR_ERR_INPUT;
    }
    // The kernel's: IBV_REREG_MR_ERR_CMD with its errno. softib checks everything before it
    // changes anything, so the region is still the old one and usable then.
    match rereg(mr, flags, pd, addr, length, access as u32) {
        Ok(()) => 0,
        Err(e) => {
            util::set_errno(e);
            IBV_REREG_MR_ERR_CMD
        }
    }
}

/// `ibv_rereg_mr` past libibverbs' input checks, as the kernel and rxe take it: no flag at
/// all, a PD that is not one of the region's context, access rights a registration would
/// refuse, or memory the process cannot access (EFAULT, as page pinning fails) are errors;
/// otherwise the core re-registers the region with the changes, which keeps its keys.
/// `pd` is looked at only with `IBV_REREG_MR_CHANGE_PD` (callers pass anything there
/// without it).
unsafe fn rereg(
    mr: *mut ibv_mr,
    flags: u32,
    pd: *mut ibv_pd,
    addr: *mut libc::c_void,
    length: usize,
    access: u32,
) -> Result<(), i32> {
    let sm = mr.cast::<SoftMr>();
    let ctx = (*sm).mr.context;
    let sc = SoftContext::from_ctx(ctx).ok_or(libc::EINVAL)?;
    if flags == 0 {
        return Err(libc::EINVAL);
    }
    let mut change = MrRereg::default();
    if flags & IBV_REREG_MR_CHANGE_PD != 0 {
        let (_, sp) = pd_parts(pd).ok_or(libc::EINVAL)?;
        if !std::ptr::eq(sp.pd.context, ctx) {
            return Err(libc::EINVAL);
        }
        change.pd = Some(sp.handle);
    }
    if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
        change.access = Some(access_flags(access)?);
    }
    let old = sc
        .shared
        .lock()
        .dev
        .hca()
        .query_mr((*sm).handle)
        .map_err(|_| libc::EINVAL)?;
    // The bytes the region will cover must be mapped, and writable if it will grant any write
    // access: the new range, or the old one when only the rights grow.
    let flags_now = change.access.unwrap_or(old.access);
    let writable = flags_now.intersects(
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
    );
    let translate = flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0;
    let (ptr, len) = if translate {
        (addr, length)
    } else {
        ((*sm).mr.addr, (*sm).mr.length)
    };
    if !accessible(ptr as usize, len, writable) {
        return Err(libc::EFAULT);
    }
    if translate {
        let mem = MrMemory::External(Box::new(AppMemory::new(addr.cast(), length)));
        change.memory = Some((mem, Some(addr as u64)));
    }
    let info = sc
        .shared
        .lock()
        .dev
        .hca_mut()
        .rereg_mr((*sm).handle, change)
        .map_err(|e| match e {
            ReregMrError::Reg(r) => convert::reg_mr_errno(&r),
            _ => libc::EINVAL,
        })?;
    let m = &mut *sm;
    m.handle = info.handle;
    m.mr.lkey = info.lkey;
    m.mr.rkey = info.rkey;
    if flags & IBV_REREG_MR_CHANGE_PD != 0 {
        m.mr.pd = pd;
    }
    if translate {
        m.mr.addr = addr;
        m.mr.length = length;
    }
    Ok(())
}

// ----- address handles ------------------------------------------------------------------

symver!(ibv_create_ah);
#[export_name = "softib_ibv_create_ah"]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    let Some((sc, sp)) = pd_parts(pd) else {
        return null_errno(libc::EINVAL);
    };
    if attr.is_null() {
        return null_errno(libc::EINVAL);
    }
    let a = convert::ah_attr_from_c(&*attr);
    let h = match sc.shared.lock().dev.hca_mut().create_ah(sp.handle, &a) {
        Ok(h) => h,
        Err(_) => return null_errno(libc::EINVAL),
    };
    let p = Box::into_raw(Box::new(SoftAh {
        ah: ibv_ah {
            context: sp.pd.context,
            pd,
            handle: 0,
        },
        handle: h,
    }));
    registry::add(p.cast::<ibv_ah>(), Kind::Ah);
    p.cast()
}

symver!(ibv_destroy_ah);
#[export_name = "softib_ibv_destroy_ah"]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> i32 {
    if !registry::is_live(ah, Kind::Ah) {
        return ret_errno(libc::EINVAL);
    }
    let sa = ah.cast::<SoftAh>();
    if let Some(sc) = SoftContext::from_ctx((*sa).ah.context) {
        let _ = sc.shared.lock().dev.hca_mut().destroy_ah((*sa).handle);
    }
    registry::remove(ah, Kind::Ah);
    drop(Box::from_raw(sa));
    0
}

/// The AH handle behind an `ibv_ah` (data path: checked at creation, re-checked here).
pub unsafe fn ah_handle(ah: *mut ibv_ah) -> Option<AhHandle> {
    if !registry::is_live(ah, Kind::Ah) {
        return None;
    }
    Some((*ah.cast::<SoftAh>()).handle)
}

symver!(ibv_init_ah_from_wc);
#[export_name = "softib_ibv_init_ah_from_wc"]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    ctx: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> i32 {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return -1;
    };
    if wc.is_null() || ah_attr.is_null() {
        return crate::util::minus_one(libc::EINVAL);
    }
    let wc = &*wc;
    let mut a: ibv_ah_attr = util::zeroed();
    a.dlid = wc.slid;
    a.sl = wc.sl;
    a.src_path_bits = wc.dlid_path_bits;
    a.port_num = port;
    if wc.wc_flags & IBV_WC_GRH != 0 {
        if grh.is_null() {
            return crate::util::minus_one(libc::EINVAL);
        }
        // The 40 bytes before the payload: an IPv6 header/GRH, or for RoCEv2 over IPv4
        // 20 zero bytes and the IPv4 header (as rdma-core reads them).
        let area = &*grh.cast::<[u8; softib_core::GRH_AREA]>();
        let info = softib_core::read_grh_area(area);
        a.is_global = 1;
        // The reply goes back to the sender: its GID is the header's source.
        a.grh.dgid.raw = info.sgid.0;
        a.grh.flow_label = info.flow_label;
        a.grh.traffic_class = info.traffic_class;
        a.grh.hop_limit = 0xFF;
        // The local GID the request was sent to: find its index.
        let idx = {
            let eng = sc.shared.lock();
            eng.dev
                .hca()
                .query_port(port)
                .ok()
                .and_then(|p| p.gids.iter().position(|e| e.gid == info.dgid))
        };
        match idx {
            Some(i) => a.grh.sgid_index = i as u8,
            None => return crate::util::minus_one(libc::ENOENT),
        }
    }
    *ah_attr = a;
    0
}

symver!(ibv_create_ah_from_wc);
#[export_name = "softib_ibv_create_ah_from_wc"]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    let Some((_, sp)) = pd_parts(pd) else {
        return null_errno(libc::EINVAL);
    };
    let mut a: ibv_ah_attr = util::zeroed();
    if ibv_init_ah_from_wc(sp.pd.context, port, wc, grh, &mut a) != 0 {
        return std::ptr::null_mut();
    }
    ibv_create_ah(pd, &mut a)
}
