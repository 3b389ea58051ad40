"""rdma-core's Python bindings (Debian python3-pyverbs) driving softib's libibverbs.so.1.

Run with softib's library first on the loader path:
    LD_LIBRARY_PATH=<repo>/lib /usr/bin/python3 -m unittest -v test_softib
Both ends of every connection live in this process: two contexts of softib0 (each binds its
own 127.0.0.x), or two QPs of one context connected to each other.
"""

import errno
import os
import socket
import struct
import unittest

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ, CQEX, CompChannel, CqInitAttrEx, PollCqAttr
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPEx, QPInitAttr, QPInitAttrEx
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import RecvWR, SendWR, SGE

DEV = 'softib0'
PORT = 1
GID_INDEX = 0
QKEY = 0x11111111
GRH = 40
ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
          | e.IBV_ACCESS_REMOTE_ATOMIC)


def poll(cq, n=1, tries=2_000_000):
    """Polls until n completions arrived; returns them."""
    out = []
    for _ in range(tries):
        got, wcs = cq.poll(n - len(out))
        out.extend(wcs[:got])
        if len(out) >= n:
            return out
    raise AssertionError(f'only {len(out)} of {n} completions arrived')


def poll_ex(cq, n=1, tries=2_000_000):
    """Polls an extended CQ with start_poll / poll_next (which return 0 or ENOENT); returns
    (wr_id, status, opcode, byte_len) per completion."""
    out = []
    for _ in range(tries):
        rc = cq.start_poll(PollCqAttr())
        if rc == errno.ENOENT:
            continue
        assert rc == 0, rc
        while True:
            out.append((cq.wr_id, cq.status, cq.read_opcode(), cq.read_byte_len()))
            if len(out) >= n:
                break
            rc = cq.poll_next()
            if rc == errno.ENOENT:
                break
            assert rc == 0, rc
        cq.end_poll()
        if len(out) >= n:
            return out
    raise AssertionError(f'only {len(out)} of {n} completions arrived')


class End:
    """One side: a context (or a shared one), PD, CQ, MR and a QP."""

    def __init__(self, ctx, qp_type, size=4096, srq=None, ex=False, send_ops=0, cq=None,
                 pd=None):
        self.ctx = ctx
        self.pd = pd or PD(ctx)
        self.cq = cq or CQ(ctx, 64)
        self.size = size
        self.mr = MR(self.pd, size + GRH, ACCESS)
        cap = QPCap(max_send_wr=32, max_recv_wr=0 if srq else 32, max_send_sge=4,
                    max_recv_sge=0 if srq else 4, max_inline_data=64)
        if ex:
            attr = QPInitAttrEx(qp_type=qp_type, pd=self.pd, scq=self.cq, rcq=self.cq,
                                srq=srq, cap=cap,
                                comp_mask=e.IBV_QP_INIT_ATTR_PD
                                | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                                send_ops_flags=send_ops)
            self.qp = QPEx(ctx, attr)
        else:
            self.qp = QP(self.pd, QPInitAttr(qp_type=qp_type, scq=self.cq, rcq=self.cq,
                                             srq=srq, cap=cap))
        self.qp_type = qp_type
        self.gid = ctx.query_gid(PORT, GID_INDEX)
        self.psn = 0x1234 + self.qp.qp_num

    def ah_attr(self, peer):
        gr = GlobalRoute(dgid=peer.gid, sgid_index=GID_INDEX)
        return AHAttr(gr=gr, is_global=1, port_num=PORT)

    def connect(self, peer):
        """RESET -> INIT -> RTR -> RTS towards `peer`."""
        a = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=PORT)
        a.pkey_index = 0
        if self.qp_type == e.IBV_QPT_UD:
            a.qkey = QKEY
            self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
                           | e.IBV_QP_QKEY)
        else:
            a.qp_access_flags = ACCESS
            self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
                           | e.IBV_QP_ACCESS_FLAGS)
        self.assert_state(e.IBV_QPS_INIT)
        a = QPAttr(qp_state=e.IBV_QPS_RTR)
        if self.qp_type == e.IBV_QPT_UD:
            self.qp.modify(a, e.IBV_QP_STATE)
        else:
            a.path_mtu = e.IBV_MTU_1024
            a.dest_qp_num = peer.qp.qp_num
            a.rq_psn = peer.psn
            a.ah_attr = self.ah_attr(peer)
            mask = (e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN
                    | e.IBV_QP_RQ_PSN)
            if self.qp_type == e.IBV_QPT_RC:
                a.max_dest_rd_atomic = 4
                a.min_rnr_timer = 1
                mask |= e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER
            self.qp.modify(a, mask)
        self.assert_state(e.IBV_QPS_RTR)
        a = QPAttr(qp_state=e.IBV_QPS_RTS)
        a.sq_psn = self.psn
        mask = e.IBV_QP_STATE | e.IBV_QP_SQ_PSN
        if self.qp_type == e.IBV_QPT_RC:
            a.timeout = 14
            a.retry_cnt = 7
            a.rnr_retry = 7
            a.max_rd_atomic = 4
            mask |= (e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY
                     | e.IBV_QP_MAX_QP_RD_ATOMIC)
        self.qp.modify(a, mask)
        self.assert_state(e.IBV_QPS_RTS)

    def assert_state(self, state):
        attr, _ = self.qp.query(e.IBV_QP_STATE)
        assert attr.qp_state == state, (attr.qp_state, state)

    def sge(self, length, offset=0):
        return SGE(self.mr.buf + offset, length, self.mr.lkey)

    def post_recv(self, wr_id, length, offset=0):
        self.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[self.sge(length, offset)]))


def pattern(n, seed):
    return bytes((seed * 31 + i * 7) & 0xFF for i in range(n))


class SoftibTest(unittest.TestCase):
    def setUp(self):
        self.ctx_a = d.Context(name=DEV)
        self.ctx_b = d.Context(name=DEV)

    def tearDown(self):
        self.ctx_a.close()
        self.ctx_b.close()

    def pair(self, qp_type, **kw):
        a = End(self.ctx_a, qp_type, **kw)
        b = End(self.ctx_b, qp_type, **kw)
        a.connect(b)
        b.connect(a)
        return a, b

    # ----- device ---------------------------------------------------------------------------

    def test_device_list_and_queries(self):
        names = [dev.name.decode() for dev in d.get_device_list()]
        self.assertIn(DEV, names)
        attr = self.ctx_a.query_device()
        self.assertGreater(attr.max_qp, 0)
        self.assertEqual(attr.phys_port_cnt, 1)
        attr_ex = self.ctx_a.query_device_ex()
        self.assertEqual(attr_ex.orig_attr.max_qp, attr.max_qp)
        port = self.ctx_a.query_port(PORT)
        self.assertEqual(port.state, e.IBV_PORT_ACTIVE)
        self.assertEqual(port.link_layer, e.IBV_LINK_LAYER_ETHERNET)
        # The bound address's GID, then the port's link-local default GID (fe80:: and the
        # port GUID), as a RoCE port of Linux lists them.
        self.assertEqual(port.gid_tbl_len, 2)
        link_local = str(self.ctx_a.query_gid(PORT, 1))
        self.assertTrue(link_local.startswith('fe80:0000:0000:0000:'), link_local)
        # node_guid is the __be64 as the host reads it.
        raw = self.ctx_a.query_device().node_guid
        guid = int.from_bytes(raw.to_bytes(8, 'little'), 'big')
        self.assertEqual(int(link_local.replace(':', '')[16:], 16), guid)
        self.assertEqual(self.ctx_a.query_gid_ex(PORT, 1).gid_type, e.IBV_GID_TYPE_ROCE_V2)
        gid_a = str(self.ctx_a.query_gid(PORT, 0))
        gid_b = str(self.ctx_b.query_gid(PORT, 0))
        self.assertTrue(gid_a.startswith('0000:0000:0000:0000:0000:ffff:7f00:'), gid_a)
        # Two contexts of one device share its GID (and its QPN space), as on any HCA.
        self.assertEqual(gid_a, gid_b, 'the contexts of one device share its GID')
        entry = self.ctx_a.query_gid_ex(PORT, 0)
        self.assertEqual(entry.gid_type, e.IBV_GID_TYPE_ROCE_V2)
        # The GID's net device is the interface of the device's address: lo on loopback.
        self.assertEqual(entry.ndev_ifindex, socket.if_nametoindex('lo'))
        self.assertEqual(self.ctx_a.query_pkey(PORT, 0), 0xFFFF)
        with self.assertRaises(PyverbsRDMAError):
            self.ctx_a.query_port(2)
        with self.assertRaises(PyverbsRDMAError):
            self.ctx_a.query_gid(PORT, 5)

    def test_pd_mr_cq_objects(self):
        pd = PD(self.ctx_a)
        mr = MR(pd, 8192, ACCESS)
        self.assertNotEqual(mr.lkey, 0)
        self.assertNotEqual(mr.rkey, mr.lkey)
        mr.write(b'softib', 6)
        self.assertEqual(mr.read(6, 0), b'softib')
        # Remote write without local write is refused (EINVAL).
        with self.assertRaises(PyverbsRDMAError):
            MR(pd, 4096, e.IBV_ACCESS_REMOTE_WRITE)
        cq = CQ(self.ctx_a, 10)
        self.assertGreaterEqual(cq.cqe, 10)
        cq.resize(100)
        self.assertGreaterEqual(cq.cqe, 100)
        self.assertEqual(cq.poll(1)[0], 0)
        cqex = CQEX(self.ctx_a, CqInitAttrEx(cqe=32, wc_flags=e.IBV_WC_STANDARD_FLAGS))
        self.assertEqual(cqex.start_poll(PollCqAttr()), errno.ENOENT)
        mr.close()
        cq.close()
        cqex.close()

    def test_qp_states_and_flush(self):
        for qp_type in (e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD):
            a, b = self.pair(qp_type)
            attr, init = a.qp.query(e.IBV_QP_STATE | e.IBV_QP_CAP)
            self.assertEqual(attr.qp_state, e.IBV_QPS_RTS)
            self.assertGreaterEqual(init.cap.max_send_wr, 32)
            for i in range(3):
                a.post_recv(100 + i, 64)
            a.qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
            a.assert_state(e.IBV_QPS_ERR)
            wcs = poll(a.cq, 3)
            self.assertEqual([w.wr_id for w in wcs], [100, 101, 102])
            for w in wcs:
                self.assertEqual(w.status, e.IBV_WC_WR_FLUSH_ERR)
            a.qp.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
            a.assert_state(e.IBV_QPS_RESET)
            # Posting a send in RESET is refused.
            wr = SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[a.sge(8)])
            with self.assertRaises(PyverbsRDMAError):
                a.qp.post_send(wr)

    # ----- traffic ----------------------------------------------------------------------------

    def send_recv(self, a, b, size, seed, opcode=e.IBV_WR_SEND, imm=None, ud=False):
        data = pattern(size, seed)
        off = GRH if ud else 0
        b.post_recv(7, size + off)
        a.mr.write(data, size)
        wr = SendWR(wr_id=seed, opcode=opcode, num_sge=1, sg=[a.sge(size)],
                    send_flags=e.IBV_SEND_SIGNALED)
        if imm is not None:
            wr.imm_data = imm
        if ud:
            ah = AH(a.pd, attr=a.ah_attr(b))
            wr.set_wr_ud(ah, b.qp.qp_num, QKEY)
        a.qp.post_send(wr)
        (sw,) = poll(a.cq)
        self.assertEqual((sw.status, sw.wr_id), (e.IBV_WC_SUCCESS, seed))
        (rw,) = poll(b.cq)
        self.assertEqual(rw.status, e.IBV_WC_SUCCESS)
        self.assertEqual(rw.wr_id, 7)
        self.assertEqual(rw.byte_len, size + off)
        self.assertEqual(b.mr.read(size, off), data)
        if imm is not None:
            self.assertTrue(rw.wc_flags & e.IBV_WC_WITH_IMM)
            self.assertEqual(rw.imm_data, imm)
        if ud:
            self.assertTrue(rw.wc_flags & e.IBV_WC_GRH)
            self.assertEqual(rw.src_qp, a.qp.qp_num)
        return rw

    def test_rc_send_write_read_atomics(self):
        a, b = self.pair(e.IBV_QPT_RC)
        for i, size in enumerate((1, 64, 1024, 4096)):
            self.send_recv(a, b, size, i + 1)
        self.send_recv(a, b, 100, 9, opcode=e.IBV_WR_SEND_WITH_IMM, imm=0x01020304)
        # RDMA WRITE into b's region, then READ it back into a's region at offset 2048.
        data = pattern(1500, 3)
        a.mr.write(data, 1500)
        w = SendWR(wr_id=20, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[a.sge(1500)],
                   send_flags=e.IBV_SEND_SIGNALED)
        w.set_wr_rdma(b.mr.rkey, b.mr.buf + 100)
        a.qp.post_send(w)
        self.assertEqual(poll(a.cq)[0].status, e.IBV_WC_SUCCESS)
        self.assertEqual(b.mr.read(1500, 100), data)
        r = SendWR(wr_id=21, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[a.sge(1500, 2048)],
                   send_flags=e.IBV_SEND_SIGNALED)
        r.set_wr_rdma(b.mr.rkey, b.mr.buf + 100)
        a.qp.post_send(r)
        wc = poll(a.cq)[0]
        self.assertEqual((wc.status, wc.opcode), (e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_READ))
        self.assertEqual(a.mr.read(1500, 2048), data)
        # WRITE with immediate consumes a receive.
        b.post_recv(30, 0)
        wi = SendWR(wr_id=22, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1,
                    sg=[a.sge(16)], send_flags=e.IBV_SEND_SIGNALED)
        wi.imm_data = 0xCAFE
        wi.set_wr_rdma(b.mr.rkey, b.mr.buf)
        a.qp.post_send(wi)
        poll(a.cq)
        rw = poll(b.cq)[0]
        self.assertEqual((rw.status, rw.opcode, rw.imm_data),
                         (e.IBV_WC_SUCCESS, e.IBV_WC_RECV_RDMA_WITH_IMM, 0xCAFE))
        # Atomics on b's first 8 bytes.
        b.mr.write(struct.pack('<Q', 100), 8)
        fa = SendWR(wr_id=23, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1,
                    sg=[a.sge(8, 3000)], send_flags=e.IBV_SEND_SIGNALED)
        fa.set_wr_atomic(b.mr.rkey, b.mr.buf, 5, 0)
        a.qp.post_send(fa)
        self.assertEqual(poll(a.cq)[0].status, e.IBV_WC_SUCCESS)
        self.assertEqual(struct.unpack('<Q', a.mr.read(8, 3000))[0], 100)
        self.assertEqual(struct.unpack('<Q', b.mr.read(8, 0))[0], 105)
        cs = SendWR(wr_id=24, opcode=e.IBV_WR_ATOMIC_CMP_AND_SWP, num_sge=1,
                    sg=[a.sge(8, 3008)], send_flags=e.IBV_SEND_SIGNALED)
        cs.set_wr_atomic(b.mr.rkey, b.mr.buf, 105, 7)
        a.qp.post_send(cs)
        self.assertEqual(poll(a.cq)[0].status, e.IBV_WC_SUCCESS)
        self.assertEqual(struct.unpack('<Q', a.mr.read(8, 3008))[0], 105)
        self.assertEqual(struct.unpack('<Q', b.mr.read(8, 0))[0], 7)

    def test_rc_remote_access_error(self):
        a, b = self.pair(e.IBV_QPT_RC)
        w = SendWR(wr_id=5, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[a.sge(64)],
                   send_flags=e.IBV_SEND_SIGNALED)
        w.set_wr_rdma(b.mr.rkey, b.mr.buf + b.size + GRH - 8)  # runs past the region
        a.qp.post_send(w)
        self.assertEqual(poll(a.cq)[0].status, e.IBV_WC_REM_ACCESS_ERR)

    def test_uc_send_and_write(self):
        a, b = self.pair(e.IBV_QPT_UC)
        self.send_recv(a, b, 2000, 4)
        data = pattern(512, 8)
        a.mr.write(data, 512)
        w = SendWR(wr_id=6, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[a.sge(512)],
                   send_flags=e.IBV_SEND_SIGNALED)
        w.set_wr_rdma(b.mr.rkey, b.mr.buf + 1000)
        a.qp.post_send(w)
        self.assertEqual(poll(a.cq)[0].status, e.IBV_WC_SUCCESS)
        for _ in range(2_000_000):
            if b.mr.read(512, 1000) == data:
                break
            b.cq.poll(1)  # drives softib while waiting
        self.assertEqual(b.mr.read(512, 1000), data)

    def test_ud_send_with_grh(self):
        a, b = self.pair(e.IBV_QPT_UD)
        self.send_recv(a, b, 1024, 5, ud=True)
        self.send_recv(a, b, 10, 6, opcode=e.IBV_WR_SEND_WITH_IMM, imm=77, ud=True)

    def test_two_qps_of_one_context(self):
        cq = CQ(self.ctx_a, 64)
        pd = PD(self.ctx_a)
        a = End(self.ctx_a, e.IBV_QPT_RC, cq=cq, pd=pd)
        b = End(self.ctx_a, e.IBV_QPT_RC, cq=CQ(self.ctx_a, 64), pd=pd)
        a.connect(b)
        b.connect(a)
        self.send_recv(a, b, 3000, 11)
        self.send_recv(b, a, 10, 12)

    def test_srq(self):
        pd = PD(self.ctx_b)
        srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=16, max_sge=2)))
        attr = srq.query()
        self.assertGreaterEqual(attr.max_wr, 16)
        srq.modify(SrqAttr(srq_limit=4), e.IBV_SRQ_LIMIT)
        self.assertEqual(srq.query().srq_limit, 4)
        a = End(self.ctx_a, e.IBV_QPT_RC)
        b = End(self.ctx_b, e.IBV_QPT_RC, srq=srq, pd=pd)
        a.connect(b)
        b.connect(a)
        for i in range(8):
            srq.post_recv(RecvWR(wr_id=50 + i, num_sge=1, sg=[b.sge(256, 256 * i)]))
        for i in range(8):
            data = pattern(200, i)
            a.mr.write(data, 200)
            a.qp.post_send(SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1, sg=[a.sge(200)],
                                  send_flags=e.IBV_SEND_SIGNALED))
            poll(a.cq)
            rw = poll(b.cq)[0]
            self.assertEqual((rw.status, rw.wr_id, rw.byte_len), (e.IBV_WC_SUCCESS, 50 + i, 200))
            self.assertEqual(b.mr.read(200, 256 * i), data)

    def test_completion_channel(self):
        ch_b = CompChannel(self.ctx_b)
        cq_b = CQ(self.ctx_b, 16, None, ch_b, 0)
        a = End(self.ctx_a, e.IBV_QPT_RC)
        b = End(self.ctx_b, e.IBV_QPT_RC, cq=cq_b)
        a.connect(b)
        b.connect(a)
        for round_ in range(3):
            cq_b.req_notify()
            b.post_recv(round_, 64)
            a.mr.write(pattern(64, round_), 64)
            a.qp.post_send(SendWR(wr_id=round_, opcode=e.IBV_WR_SEND, num_sge=1,
                                  sg=[a.sge(64)], send_flags=e.IBV_SEND_SIGNALED))
            poll(a.cq)
            ch_b.get_cq_event(cq_b)  # blocks until the completion event
            cq_b.ack_events(1)
            rw = poll(cq_b)[0]
            self.assertEqual((rw.status, rw.wr_id), (e.IBV_WC_SUCCESS, round_))
            self.assertEqual(b.mr.read(64, 0), pattern(64, round_))

    # ----- extended interfaces -------------------------------------------------------------------

    def test_qp_ex_and_cq_ex(self):
        ops = (e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_RDMA_READ
               | e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | e.IBV_QP_EX_WITH_SEND_WITH_IMM)
        cq_a = CQEX(self.ctx_a, CqInitAttrEx(cqe=64, wc_flags=e.IBV_WC_STANDARD_FLAGS))
        cq_b = CQEX(self.ctx_b, CqInitAttrEx(cqe=64, wc_flags=e.IBV_WC_STANDARD_FLAGS))
        a = End(self.ctx_a, e.IBV_QPT_RC, ex=True, send_ops=ops, cq=cq_a)
        b = End(self.ctx_b, e.IBV_QPT_RC, ex=True, send_ops=ops, cq=cq_b)
        a.connect(b)
        b.connect(a)
        # SEND through ibv_wr_*, received into b.
        data = pattern(777, 2)
        a.mr.write(data, 777)
        b.post_recv(90, 1000)
        a.qp.wr_start()
        a.qp.wr_id = 91
        a.qp.wr_flags = e.IBV_SEND_SIGNALED
        a.qp.wr_send()
        a.qp.wr_set_sge(a.sge(777))
        a.qp.wr_complete()
        self.assertEqual(poll_ex(cq_a)[0][:3], (91, e.IBV_WC_SUCCESS, e.IBV_WC_SEND))
        self.assertEqual(poll_ex(cq_b)[0], (90, e.IBV_WC_SUCCESS, e.IBV_WC_RECV, 777))
        self.assertEqual(b.mr.read(777, 0), data)
        # Two WRs in one batch: WRITE then READ back.
        data = pattern(300, 9)
        a.mr.write(data, 300)
        a.qp.wr_start()
        a.qp.wr_id = 92
        a.qp.wr_flags = e.IBV_SEND_SIGNALED
        a.qp.wr_rdma_write(b.mr.rkey, b.mr.buf + 2000)
        a.qp.wr_set_sge(a.sge(300))
        a.qp.wr_id = 93
        a.qp.wr_rdma_read(b.mr.rkey, b.mr.buf + 2000)
        a.qp.wr_set_sge(a.sge(300, 1000))
        a.qp.wr_complete()
        got = poll_ex(cq_a, 2)
        self.assertEqual([(w[0], w[1]) for w in got], [(92, 0), (93, 0)])
        self.assertEqual(b.mr.read(300, 2000), data)
        self.assertEqual(a.mr.read(300, 1000), data)
        # Inline SEND.
        b.post_recv(94, 64)
        a.qp.wr_start()
        a.qp.wr_id = 95
        a.qp.wr_flags = e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE
        a.qp.wr_send()
        a.mr.write(b'inline data!', 12, 3500)
        a.qp.wr_set_inline_data(a.mr.buf + 3500, 12)
        a.qp.wr_complete()
        poll_ex(cq_a)
        self.assertEqual(poll_ex(cq_b)[0][3], 12)
        self.assertEqual(b.mr.read(12, 0), b'inline data!')

    def test_unsupported_features_fail_cleanly(self):
        pd = PD(self.ctx_a)
        from pyverbs.mr import MW
        with self.assertRaises(PyverbsRDMAError) as ex:
            MW(pd, e.IBV_MW_TYPE_1)
        self.assertIn(ex.exception.error_code, (errno.EOPNOTSUPP, errno.ENOSYS))

    def test_xrc_between_two_contexts(self):
        """XRC as rdma-core's own tests set it up (tests/base.py, XRCResources): a domain
        opened through a file, an XRC SRQ, a target QP on context B; an initiator on A naming
        the SRQ by its number. The receive completes on the SRQ's CQ with the target's QPN."""
        import tempfile
        from pyverbs.srq import SrqInitAttrEx
        from pyverbs.xrcd import XRCD, XRCDInitAttr
        with tempfile.NamedTemporaryFile() as f:
            fd = os.open(f.name, os.O_RDONLY)
            try:
                xrcd = XRCD(self.ctx_b, XRCDInitAttr(
                    e.IBV_XRCD_INIT_ATTR_FD | e.IBV_XRCD_INIT_ATTR_OFLAGS, os.O_CREAT, fd))
                # Without O_CREAT another open finds the same domain.
                xrcd2 = XRCD(self.ctx_b, XRCDInitAttr(
                    e.IBV_XRCD_INIT_ATTR_FD | e.IBV_XRCD_INIT_ATTR_OFLAGS, 0, fd))
                pd_b = PD(self.ctx_b)
                cq_b = CQ(self.ctx_b, 16)
                mr_b = MR(pd_b, 4096, ACCESS)
                sa = SrqInitAttrEx(max_wr=16)
                sa.srq_type = e.IBV_SRQT_XRC
                sa.pd = pd_b
                sa.xrcd = xrcd2
                sa.cq = cq_b
                sa.comp_mask = (e.IBV_SRQ_INIT_ATTR_TYPE | e.IBV_SRQ_INIT_ATTR_PD
                                | e.IBV_SRQ_INIT_ATTR_CQ | e.IBV_SRQ_INIT_ATTR_XRCD)
                srq = SRQ(self.ctx_b, sa)
                srqn = srq.get_srq_num()
                tgt = QP(self.ctx_b, QPInitAttrEx(qp_type=e.IBV_QPT_XRC_RECV,
                                                  comp_mask=e.IBV_QP_INIT_ATTR_XRCD,
                                                  xrcd=xrcd))
                pd_a = PD(self.ctx_a)
                cq_a = CQ(self.ctx_a, 16)
                mr_a = MR(pd_a, 4096, ACCESS)
                ini = QP(self.ctx_a, QPInitAttrEx(qp_type=e.IBV_QPT_XRC_SEND, sq_sig_all=1,
                                                  comp_mask=e.IBV_QP_INIT_ATTR_PD, pd=pd_a,
                                                  scq=cq_a,
                                                  cap=QPCap(max_send_wr=8, max_recv_wr=0,
                                                            max_recv_sge=0)))
                for qp, ctx, peer, peer_ctx in ((tgt, self.ctx_b, ini, self.ctx_a),
                                                (ini, self.ctx_a, tgt, self.ctx_b)):
                    a = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=PORT)
                    a.pkey_index = 0
                    a.qp_access_flags = ACCESS if qp is tgt else 0
                    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
                              | e.IBV_QP_ACCESS_FLAGS)
                    a = QPAttr(qp_state=e.IBV_QPS_RTR)
                    a.path_mtu = e.IBV_MTU_1024
                    a.dest_qp_num = peer.qp_num
                    a.rq_psn = 0x77
                    a.max_dest_rd_atomic = 4
                    a.min_rnr_timer = 1
                    gr = GlobalRoute(dgid=peer_ctx.query_gid(PORT, GID_INDEX),
                                     sgid_index=GID_INDEX)
                    a.ah_attr = AHAttr(gr=gr, is_global=1, port_num=PORT)
                    # RC's full masks on both halves, as perftest sets them: accepted.
                    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU
                              | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
                              | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
                    a = QPAttr(qp_state=e.IBV_QPS_RTS)
                    a.sq_psn = 0x77
                    a.timeout = 14
                    a.retry_cnt = 7
                    a.rnr_retry = 7
                    a.max_rd_atomic = 4
                    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT
                              | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY
                              | e.IBV_QP_MAX_QP_RD_ATOMIC)
                data = pattern(3000, 5)
                srq.post_recv(RecvWR(wr_id=9, num_sge=1,
                                     sg=[SGE(mr_b.buf, 4096, mr_b.lkey)]))
                mr_a.write(data, 3000)
                wr = SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1,
                            sg=[SGE(mr_a.buf, 3000, mr_a.lkey)])
                wr.set_qp_type_xrc(srqn)
                ini.post_send(wr)
                (sw,) = poll(cq_a)
                self.assertEqual((sw.status, sw.wr_id), (e.IBV_WC_SUCCESS, 1))
                (rw,) = poll(cq_b)
                self.assertEqual((rw.status, rw.wr_id, rw.byte_len, rw.qp_num),
                                 (e.IBV_WC_SUCCESS, 9, 3000, tgt.qp_num))
                self.assertEqual(mr_b.read(3000, 0), data)
                for o in (ini, tgt, srq, mr_a, mr_b, cq_a, cq_b, pd_a, pd_b, xrcd2, xrcd):
                    o.close()
            finally:
                os.close(fd)


if __name__ == '__main__':
    unittest.main()
