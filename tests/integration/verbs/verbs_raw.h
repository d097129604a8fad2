// SPDX-License-Identifier: Apache-2.0
// Raw verbs for the verbs tests: queue pairs in grex's own protection domain
// that post what grex itself never would (a hostile or careless peer), and
// the checks on them.
#pragma once

#ifdef GREX_HAVE_VERBS
#include <infiniband/verbs.h>

#include <chrono>
#include <thread>

#include "verbs_env.h"

namespace grex::test {

// Two RC queue pairs in grex's own protection domain, connected to each other
// on one port: a connected peer that posts what grex itself never would.
struct LoopPair {
  ibv_cq* cq = nullptr;
  ibv_qp* qp[2] = {nullptr, nullptr};
  ~LoopPair() {
    for (ibv_qp* q : qp)
      if (q != nullptr) ibv_destroy_qp(q);
    if (cq != nullptr) ibv_destroy_cq(cq);
  }
};

inline bool make_loop_pair(ibv_pd* pd, uint8_t port, int gid_index, LoopPair* lp) {
  ibv_port_attr pa{};
  ibv_gid gid{};
  if (ibv_query_port(pd->context, port, &pa) != 0 || ibv_query_gid(pd->context, port, gid_index, &gid) != 0) return false;
  if ((lp->cq = ibv_create_cq(pd->context, 16, nullptr, nullptr, 0)) == nullptr) return false;
  for (auto& q : lp->qp) {
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = lp->cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    if ((q = ibv_create_qp(pd, &ia)) == nullptr) return false;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = port;
    a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;  // the MR decides
    if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) return false;
  }
  for (int i = 0; i < 2; ++i) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = pa.active_mtu;
    a.dest_qp_num = lp->qp[1 - i]->qp_num;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = gid;
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index);
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = port;
    if (ibv_modify_qp(lp->qp[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
      return false;
    ibv_qp_attr r{};
    r.qp_state = IBV_QPS_RTS;
    r.timeout = 14;
    r.retry_cnt = 7;
    r.rnr_retry = 7;
    r.max_rd_atomic = 1;
    if (ibv_modify_qp(lp->qp[i], &r, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                         IBV_QP_MAX_QP_RD_ATOMIC) != 0)
      return false;
  }
  return true;
}

// Posts one RDMA READ or WRITE of `len` bytes from qp[0] to (addr, rkey); the completion's status.
inline int one_sided(LoopPair& lp, ibv_mr* local, bool read, uint64_t addr, uint32_t rkey, uint32_t len) {
  ibv_sge sge{reinterpret_cast<uint64_t>(local->addr), len, local->lkey};
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = rkey;
  if (ibv_post_send(lp.qp[0], &wr, &bad) != 0) return -1;
  ibv_wc wc{};
  Deadline dl = Deadline::after_ms(10'000);
  while (!dl.expired()) {
    int n = ibv_poll_cq(lp.cq, 1, &wc);
    if (n < 0) return -1;
    if (n == 1) return wc.status;
  }
  return -2;
}

// One RDMA WRITE of local[0, len) posted straight on `qp`, as a peer that
// ignores grex's protocol would (its completion names no endpoint: grex drops it).
inline bool raw_write(ibv_qp* qp, ibv_mr* local, uint64_t addr, uint32_t rkey, uint32_t len) {
  ibv_sge sge{reinterpret_cast<uint64_t>(local->addr), len, local->lkey};
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = uint64_t{0xffff} << 48;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = rkey;
  return ibv_post_send(qp, &wr, &bad) == 0;
}

inline bool qp_in_error(ibv_qp* qp, int64_t within_ms) {
  Deadline dl = Deadline::after_ms(within_ms);
  do {
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) == 0 && a.qp_state == IBV_QPS_ERR) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  } while (!dl.expired());
  return false;
}

}  // namespace grex::test
#endif
