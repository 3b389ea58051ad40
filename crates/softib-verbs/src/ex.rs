//! The extended verbs reached through `struct verbs_context` by verbs.h's static inline
//! wrappers: `ibv_query_device_ex`, `ibv_create_cq_ex` with the `ibv_start_poll` /
//! `ibv_next_poll` / `ibv_wc_read_*` interface, `ibv_create_qp_ex` with the `ibv_wr_*`
//! posting interface, `ibv_create_srq_ex`. Entries left NULL make the wrappers return
//! EOPNOTSUPP, as rdma-core does for a provider without them.

use softib_core::verbs::cq::WorkCompletion;
use softib_core::verbs::types::SendFlags;
use softib_core::verbs::wr::{RemoteAddr, SendWr, Sge, UdDest, WrOpcode};
use softib_wire::Qpn;

use crate::cq::{self, SoftCq};
use crate::device::{self, SoftContext};
use crate::qp::{self, SoftQp};
use crate::registry::{self, Kind};
use crate::util::{self, null_errno};
use crate::verbs_h::*;

/// Send operations the `ibv_wr_*` interface supports.
pub const SUPPORTED_SEND_OPS: u64 = (IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_SEND_WITH_INV) as u64;

/// `wc_flags` an extended CQ can report.
const SUPPORTED_WC_FLAGS: u64 = (IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS) as u64;

/// Fills the extended ops of a new context.
pub fn fill_verbs_context(v: &mut verbs_context) {
    v.query_port = Some(device::vctx_query_port);
    v.query_device_ex = Some(query_device_ex);
    v.create_cq_ex = Some(create_cq_ex);
    v.create_qp_ex = Some(create_qp_ex);
    v.create_srq_ex = Some(create_srq_ex);
    v.get_srq_num = Some(crate::xrc::get_srq_num);
    v.open_xrcd = Some(crate::xrc::open_xrcd);
    v.close_xrcd = Some(crate::xrc::close_xrcd);
    v.open_qp = Some(crate::xrc::open_qp);
}

unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> i32 {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    if !input.is_null() && (*input).comp_mask != 0 {
        return libc::EINVAL;
    }
    let base = std::mem::size_of::<ibv_device_attr>();
    if attr_size < base {
        return libc::EINVAL;
    }
    let mut a: ibv_device_attr_ex = util::zeroed();
    a.orig_attr = device::device_attr(sc);
    a.phys_port_cnt_ex = u32::from(a.orig_attr.phys_port_cnt);
    let n = attr_size.min(std::mem::size_of::<ibv_device_attr_ex>());
    std::ptr::copy_nonoverlapping(
        (&a as *const ibv_device_attr_ex).cast::<u8>(),
        attr.cast::<u8>(),
        n,
    );
    0
}

// ----- extended CQ -----------------------------------------------------------------------

unsafe extern "C" fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    if attr.is_null() {
        return null_errno(libc::EINVAL);
    }
    let a = &*attr;
    if a.wc_flags & !SUPPORTED_WC_FLAGS != 0 {
        return null_errno(libc::EOPNOTSUPP);
    }
    if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS) != 0 {
        return null_errno(libc::EOPNOTSUPP);
    }
    if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
        && a.flags & !(IBV_CREATE_CQ_ATTR_SINGLE_THREADED) != 0
    {
        return null_errno(libc::EOPNOTSUPP);
    }
    match cq::create(
        ctx,
        i32::try_from(a.cqe).unwrap_or(-1),
        a.cq_context,
        a.channel,
        a.comp_vector,
        a.wc_flags,
    ) {
        Ok(p) => p.cast(),
        Err(e) => null_errno(e),
    }
}

/// Fills the polling entries of an extended CQ.
pub fn fill_cq_ex(ex: &mut ibv_cq_ex) {
    ex.start_poll = Some(start_poll);
    ex.next_poll = Some(next_poll);
    ex.end_poll = Some(end_poll);
    ex.read_opcode = Some(read_opcode);
    ex.read_vendor_err = Some(read_vendor_err);
    ex.read_byte_len = Some(read_byte_len);
    ex.read_imm_data = Some(read_imm_data);
    ex.read_qp_num = Some(read_qp_num);
    ex.read_src_qp = Some(read_src_qp);
    ex.read_wc_flags = Some(read_wc_flags);
    ex.read_slid = Some(read_slid);
    ex.read_sl = Some(read_sl);
    ex.read_dlid_path_bits = Some(read_dlid_path_bits);
}

/// Takes the next completion into `cur`; ENOENT when the CQ is empty.
unsafe fn advance(cq: *mut ibv_cq_ex) -> i32 {
    let p = cq.cast::<SoftCq>();
    let mut w = [WorkCompletion::default()];
    let shared: &crate::context::Shared = &(*p).shared;
    let got = {
        let mut eng = shared.app_poll();
        let got = eng.take_completions(shared, (*p).handle, &mut w);
        if matches!(got, Ok(1)) {
            // A DISCONNECTED event waiting for this completion to be polled goes out.
            crate::cma::kern::release_held(&mut eng);
        }
        got
    };
    shared.polled(*got.as_ref().unwrap_or(&0));
    match got {
        Ok(1) => {
            (*p).cur = w[0];
            (*p).ex.wr_id = w[0].wr_id;
            (*p).ex.status = w[0].status.raw();
            0
        }
        Ok(_) => libc::ENOENT,
        Err(_) => libc::EIO,
    }
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> i32 {
    if cq.is_null() || (!attr.is_null() && (*attr).comp_mask != 0) {
        return libc::EINVAL;
    }
    advance(cq)
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> i32 {
    if cq.is_null() {
        return libc::EINVAL;
    }
    advance(cq)
}

unsafe extern "C" fn end_poll(_cq: *mut ibv_cq_ex) {}

unsafe fn cur<'a>(cq: *mut ibv_cq_ex) -> &'a WorkCompletion {
    &(*cq.cast::<SoftCq>()).cur
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> ibv_wc_opcode {
    cur(cq).opcode.raw()
}
unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    cur(cq).vendor_err
}
unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    cur(cq).byte_len
}
unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> __be32 {
    let c = cur(cq);
    match (c.imm_data, c.invalidated_rkey) {
        (Some(imm), _) => imm.to_be(),
        (None, Some(rkey)) => rkey,
        _ => 0,
    }
}
unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    cur(cq).qp_num.value()
}
unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    cur(cq).src_qp.value()
}
unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> u32 {
    cur(cq).wc_flags.bits()
}
unsafe extern "C" fn read_slid(cq: *mut ibv_cq_ex) -> u32 {
    u32::from(cur(cq).slid)
}
unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    crate::convert::wc_sl(cur(cq))
}
unsafe extern "C" fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8 {
    cur(cq).dlid_path_bits
}

// ----- extended QP -----------------------------------------------------------------------

unsafe extern "C" fn create_qp_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    match qp::create(ctx, attr) {
        Ok(p) => p.cast(),
        Err(e) => null_errno(e),
    }
}

symver!(ibv_qp_to_qp_ex);
/// `ibv_qp_to_qp_ex`: the extended QP, for QPs created with `send_ops_flags`.
#[export_name = "softib_ibv_qp_to_qp_ex"]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(q: *mut ibv_qp) -> *mut ibv_qp_ex {
    match qp::soft_qp(q) {
        Some(s) if s.has_ex => q.cast(),
        Some(_) => null_errno(libc::EOPNOTSUPP),
        None => null_errno(libc::EINVAL),
    }
}

/// Fills the `ibv_wr_*` entries of an extended QP. Every entry is set (the inline wrappers
/// call them unchecked); operations the QP was not created for fail its `ibv_wr_complete`.
pub fn fill_qp_ex(ex: &mut ibv_qp_ex, _send_ops: u64) {
    ex.wr_start = Some(wr_start);
    ex.wr_complete = Some(wr_complete);
    ex.wr_abort = Some(wr_abort);
    ex.wr_send = Some(wr_send);
    ex.wr_send_imm = Some(wr_send_imm);
    ex.wr_send_inv = Some(wr_send_inv);
    ex.wr_rdma_write = Some(wr_rdma_write);
    ex.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    ex.wr_rdma_read = Some(wr_rdma_read);
    ex.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    ex.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    ex.wr_set_sge = Some(wr_set_sge);
    ex.wr_set_sge_list = Some(wr_set_sge_list);
    ex.wr_set_inline_data = Some(wr_set_inline_data);
    ex.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    ex.wr_set_ud_addr = Some(wr_set_ud_addr);
    ex.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    ex.wr_bind_mw = Some(wr_bind_mw);
    ex.wr_local_inv = Some(wr_local_inv);
    ex.wr_send_tso = Some(wr_send_tso);
    ex.wr_atomic_write = Some(wr_atomic_write);
}

unsafe fn sq<'a>(q: *mut ibv_qp_ex) -> &'a mut SoftQp {
    &mut *q.cast::<SoftQp>()
}

/// The WRs an `ibv_wr_*` batch builds between `ibv_wr_start` and `ibv_wr_complete`. The WRs
/// and their buffers (gather lists, inline bytes) stay from one batch to the next, so that
/// building and posting a batch allocates nothing once the QP has built one as long.
#[derive(Debug, Default)]
pub struct WrBatch {
    /// The batch's WRs are the first `used`; the others keep their buffers for later ones.
    slots: Vec<SendWr>,
    used: usize,
    /// Inline buffers of earlier WRs, for the next `ibv_wr_set_inline_data*`.
    spare_inline: Vec<Vec<u8>>,
}

impl WrBatch {
    /// Empties the batch (its buffers stay).
    pub fn clear(&mut self) {
        self.used = 0;
    }

    /// The WRs built since the batch was last emptied.
    pub fn wrs(&self) -> &[SendWr] {
        &self.slots[..self.used]
    }

    /// Starts a WR: a slot left by an earlier batch is reset to `SendWr::new` but keeps its
    /// gather list's buffer, and its inline buffer goes to the spares.
    fn begin(&mut self, wr_id: u64, opcode: WrOpcode, flags: SendFlags) {
        if self.used == self.slots.len() {
            self.slots.push(SendWr::new(wr_id, opcode));
        }
        let w = &mut self.slots[self.used];
        if let Some(v) = w.inline_data.take() {
            self.spare_inline.push(v);
        }
        let mut sg_list = std::mem::take(&mut w.sg_list);
        sg_list.clear();
        *w = SendWr {
            sg_list,
            flags,
            ..SendWr::new(wr_id, opcode)
        };
        self.used += 1;
    }

    /// The WR being built.
    fn last_mut(&mut self) -> Option<&mut SendWr> {
        self.slots[..self.used].last_mut()
    }

    /// The WR being built takes its payload from `sges` (`ibv_wr_set_sge*`).
    fn set_sges(&mut self, sges: impl Iterator<Item = Sge>) {
        let Some(w) = self.slots[..self.used].last_mut() else {
            return;
        };
        if let Some(v) = w.inline_data.take() {
            self.spare_inline.push(v);
        }
        w.flags.remove(SendFlags::INLINE);
        w.sg_list.clear();
        w.sg_list.extend(sges);
    }

    /// The WR being built carries `data` inline (`ibv_wr_set_inline_data*`).
    fn set_inline(&mut self, data: Vec<u8>) {
        let Some(w) = self.slots[..self.used].last_mut() else {
            self.spare_inline.push(data);
            return;
        };
        if let Some(v) = w.inline_data.replace(data) {
            self.spare_inline.push(v);
        }
        w.sg_list.clear();
        w.flags |= SendFlags::INLINE;
    }

    /// An empty buffer for inline bytes, a spare one when there is one.
    fn inline_buffer(&mut self) -> Vec<u8> {
        let mut v = self.spare_inline.pop().unwrap_or_default();
        v.clear();
        v
    }
}

unsafe extern "C" fn wr_start(q: *mut ibv_qp_ex) {
    let s = sq(q);
    s.wr_batch.clear();
    s.wr_error = 0;
}

unsafe extern "C" fn wr_abort(q: *mut ibv_qp_ex) {
    let s = sq(q);
    s.wr_batch.clear();
    s.wr_error = 0;
}

unsafe extern "C" fn wr_complete(q: *mut ibv_qp_ex) -> i32 {
    let s = sq(q);
    let err = std::mem::take(&mut s.wr_error);
    if err != 0 {
        s.wr_batch.clear();
        return err;
    }
    let shared = s.shared.clone();
    shared
        .app_polls
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut eng = shared.lock();
    let rc = match eng.dev.hca_mut().post_send(s.qpn, s.wr_batch.wrs()) {
        Ok(()) => 0,
        Err(e) => crate::convert::post_send_errno(&e),
    };
    s.wr_batch.clear();
    // Sent as `ibv_post_send`'s are: at once, or with the application's next poll.
    eng.posted(&shared);
    rc
}

/// Starts a new WR of the batch with the QP's current `wr_id` and `wr_flags`.
unsafe fn begin(q: *mut ibv_qp_ex, opcode: WrOpcode, send_ops_bit: u32) {
    let s = sq(q);
    let mut flags = SendFlags::from_bits_truncate(s.ex.wr_flags);
    flags.remove(SendFlags::INLINE);
    if s.send_ops & u64::from(send_ops_bit) == 0 {
        s.wr_error = libc::EOPNOTSUPP;
    }
    s.wr_batch.begin(s.ex.wr_id, opcode, flags);
}

unsafe fn last<'a>(q: *mut ibv_qp_ex) -> Option<&'a mut SendWr> {
    let s = sq(q);
    let w = s.wr_batch.last_mut();
    if w.is_none() {
        s.wr_error = libc::EINVAL;
    }
    w
}

unsafe extern "C" fn wr_send(q: *mut ibv_qp_ex) {
    begin(q, WrOpcode::Send, IBV_QP_EX_WITH_SEND);
}
unsafe extern "C" fn wr_send_imm(q: *mut ibv_qp_ex, imm: __be32) {
    begin(
        q,
        WrOpcode::SendWithImm(u32::from_be(imm)),
        IBV_QP_EX_WITH_SEND_WITH_IMM,
    );
}
unsafe extern "C" fn wr_send_inv(q: *mut ibv_qp_ex, rkey: u32) {
    begin(q, WrOpcode::SendWithInv(rkey), IBV_QP_EX_WITH_SEND_WITH_INV);
}
unsafe extern "C" fn wr_rdma_write(q: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    begin(
        q,
        WrOpcode::RdmaWrite {
            remote: RemoteAddr::new(addr, rkey),
        },
        IBV_QP_EX_WITH_RDMA_WRITE,
    );
}
unsafe extern "C" fn wr_rdma_write_imm(q: *mut ibv_qp_ex, rkey: u32, addr: u64, imm: __be32) {
    begin(
        q,
        WrOpcode::RdmaWriteWithImm {
            remote: RemoteAddr::new(addr, rkey),
            imm: u32::from_be(imm),
        },
        IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
    );
}
unsafe extern "C" fn wr_rdma_read(q: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    begin(
        q,
        WrOpcode::RdmaRead {
            remote: RemoteAddr::new(addr, rkey),
        },
        IBV_QP_EX_WITH_RDMA_READ,
    );
}
unsafe extern "C" fn wr_atomic_cmp_swp(
    q: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    compare: u64,
    swap: u64,
) {
    begin(
        q,
        WrOpcode::AtomicCmpSwp {
            remote_addr: addr,
            rkey,
            compare,
            swap,
        },
        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
    );
}
unsafe extern "C" fn wr_atomic_fetch_add(q: *mut ibv_qp_ex, rkey: u32, addr: u64, add: u64) {
    begin(
        q,
        WrOpcode::AtomicFetchAdd {
            remote_addr: addr,
            rkey,
            add,
        },
        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
    );
}
unsafe extern "C" fn wr_set_sge(q: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    if last(q).is_some() {
        let one = Sge::new(addr, length, lkey);
        sq(q).wr_batch.set_sges(std::iter::once(one));
    }
}
unsafe extern "C" fn wr_set_sge_list(q: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    // Checked before the list is read (a list shorter than n is never read past).
    if (n > 0 && list.is_null()) || n > sq(q).max_send_sge as usize {
        sq(q).wr_error = libc::EINVAL;
        return;
    }
    if last(q).is_some() {
        let list: &[ibv_sge] = if n == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(list, n)
        };
        let sges = list.iter().map(|s| Sge::new(s.addr, s.length, s.lkey));
        sq(q).wr_batch.set_sges(sges);
    }
}
unsafe extern "C" fn wr_set_inline_data(q: *mut ibv_qp_ex, addr: *mut libc::c_void, len: usize) {
    let buf = ibv_data_buf { addr, length: len };
    wr_set_inline_data_list(q, 1, &buf);
}
unsafe extern "C" fn wr_set_inline_data_list(
    q: *mut ibv_qp_ex,
    n: usize,
    list: *const ibv_data_buf,
) {
    if n > 0 && list.is_null() {
        sq(q).wr_error = libc::EINVAL;
        return;
    }
    // The running total is checked against the QP's inline capability before each buffer is
    // read (as rdma-core's rxe provider does): a length larger than its buffer, or more
    // entries than the list holds, are refused instead of read past once over the limit.
    let max = sq(q).max_inline as usize;
    let mut data = sq(q).wr_batch.inline_buffer();
    for i in 0..n {
        let b = &*list.add(i);
        if b.length == 0 {
            continue;
        }
        if b.length > max - data.len() {
            sq(q).wr_error = libc::ENOSPC;
            sq(q).wr_batch.spare_inline.push(data);
            return;
        }
        if b.addr.is_null() {
            sq(q).wr_error = libc::EINVAL;
            sq(q).wr_batch.spare_inline.push(data);
            return;
        }
        data.extend_from_slice(std::slice::from_raw_parts(b.addr.cast::<u8>(), b.length));
    }
    if last(q).is_some() {
        sq(q).wr_batch.set_inline(data);
    } else {
        sq(q).wr_batch.spare_inline.push(data);
    }
}
unsafe extern "C" fn wr_set_ud_addr(q: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    let Some(h) = crate::mr::ah_handle(ah) else {
        sq(q).wr_error = libc::EINVAL;
        return;
    };
    if let Some(w) = last(q) {
        w.ud = Some(UdDest {
            ah: h,
            remote_qpn: Qpn::new(qpn),
            remote_qkey: qkey,
        });
    }
}
unsafe extern "C" fn wr_set_xrc_srqn(q: *mut ibv_qp_ex, srqn: u32) {
    // Only an XRC initiator names a remote SRQ.
    if sq(q).qp_type != softib_core::verbs::types::QpType::XrcSend {
        sq(q).wr_error = libc::EOPNOTSUPP;
        return;
    }
    if let Some(w) = last(q) {
        w.xrc_remote_srqn = srqn;
    }
}
unsafe extern "C" fn wr_bind_mw(
    q: *mut ibv_qp_ex,
    _mw: *mut ibv_mw,
    _rkey: u32,
    _bind: *const ibv_mw_bind_info,
) {
    sq(q).wr_error = libc::EOPNOTSUPP;
}
unsafe extern "C" fn wr_local_inv(q: *mut ibv_qp_ex, _rkey: u32) {
    sq(q).wr_error = libc::EOPNOTSUPP;
}
unsafe extern "C" fn wr_send_tso(
    q: *mut ibv_qp_ex,
    _hdr: *mut libc::c_void,
    _hdr_sz: u16,
    _mss: u16,
) {
    sq(q).wr_error = libc::EOPNOTSUPP;
}
unsafe extern "C" fn wr_atomic_write(
    q: *mut ibv_qp_ex,
    _rkey: u32,
    _addr: u64,
    _data: *const libc::c_void,
) {
    sq(q).wr_error = libc::EOPNOTSUPP;
}

// ----- extended SRQ ------------------------------------------------------------------------

unsafe extern "C" fn create_srq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    if SoftContext::from_ctx(ctx).is_none() || attr.is_null() {
        return null_errno(libc::EINVAL);
    }
    let a = &mut *attr;
    // rdma-core: bits beyond the ones it knows are EOPNOTSUPP, a missing PD EINVAL, an XRC SRQ
    // without its domain or CQ EINVAL. Tag matching SRQs are not supported.
    let known = IBV_SRQ_INIT_ATTR_TYPE
        | IBV_SRQ_INIT_ATTR_PD
        | IBV_SRQ_INIT_ATTR_XRCD
        | IBV_SRQ_INIT_ATTR_CQ;
    if a.comp_mask & !known != 0 {
        return null_errno(libc::EOPNOTSUPP);
    }
    let srq_type = if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 {
        a.srq_type
    } else {
        IBV_SRQT_BASIC
    };
    if srq_type != IBV_SRQT_BASIC && srq_type != IBV_SRQT_XRC {
        return null_errno(libc::EOPNOTSUPP);
    }
    if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0
        || !registry::is_live(a.pd, Kind::Pd)
        || !std::ptr::eq((*a.pd).context, ctx)
    {
        return null_errno(libc::EINVAL);
    }
    let xrc = if srq_type == IBV_SRQT_XRC {
        let needed = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
        if a.comp_mask & needed != needed {
            return null_errno(libc::EINVAL);
        }
        let Some(x) = crate::xrc::soft_xrcd(a.xrcd, ctx) else {
            return null_errno(libc::EINVAL);
        };
        let Some(cq) = qp::cq_handle(a.cq, ctx) else {
            return null_errno(libc::EINVAL);
        };
        Some((x, cq))
    } else {
        None
    };
    match qp::create_srq(a.pd, a.srq_context, &mut a.attr, xrc) {
        Ok(p) => p.cast(),
        Err(e) => null_errno(e),
    }
}
