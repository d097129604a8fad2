// SPDX-License-Identifier: Apache-2.0
// Verbs driver connections: RC queue pairs connected through librdmacm
// (address and route resolution, connect / accept), the lower rank active.
#include <arpa/inet.h>

#include <cerrno>
#include <cstring>

#include "core/clock.h"
#include "core/log.h"
#include "drivers/verbs/verbs_device.h"

namespace grex::verbs {
namespace {

constexpr const char* kSubsys = "verbs";


uint32_t pow2_at_least(uint32_t x) {
  uint32_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

std::string cm_hint(rdma_cm_event_type t) {
  switch (t) {
    case RDMA_CM_EVENT_ADDR_ERROR:
      return "the peer's IP is not reachable from this RDMA device (GREX_IB_GID_INDEX / GREX_IB_IP)";
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return "no route to the peer over this device (Soft-RoCE on lo cannot route: use a dummy or veth netdev)";
    case RDMA_CM_EVENT_UNREACHABLE:
      return "the peer did not answer: is it listening, is the port active, do GID type and path MTU match?";
    case RDMA_CM_EVENT_REJECTED:
      return "the peer refused the connection (another job, or it is not expecting this rank)";
    default:
      return "";
  }
}

}  // namespace

int VerbsDevice::claimed_rank(const rdma_cm_event* ev) const noexcept {
  const auto h = read_hello(ev->param.conn.private_data, ev->param.conn.private_data_len, hello_tag_);
  if (!h || h->rank >= static_cast<uint32_t>(opts_.world_size)) return -1;
  return static_cast<int>(h->rank);
}

VerbsEndpoint::VerbsEndpoint(VerbsDevice* dev, int peer, uint16_t id) : Endpoint(peer), dev_(dev), id_(id) {}

VerbsEndpoint::~VerbsEndpoint() {
  if (cm_ != nullptr && connected_ && !failed_) rdma_disconnect(cm_);
  dev_->forget(this);
  for (const Window& w : windows_) {
    if (w.mw != nullptr) ibv_dealloc_mw(w.mw);
    if (w.reg != nullptr) ibv_dereg_mr(w.reg);
  }
  if (qp_ != nullptr) rdma_destroy_qp(cm_);
  if (rx_mr_ != nullptr) ibv_dereg_mr(rx_mr_);
  if (rx_eager_mr_ != nullptr) ibv_dereg_mr(rx_eager_mr_);
  if (tx_eager_mr_ != nullptr) ibv_dereg_mr(tx_eager_mr_);
  if (tx_mr_ != nullptr) ibv_dereg_mr(tx_mr_);
  if (cm_ != nullptr) rdma_destroy_id(cm_);
}

std::string VerbsEndpoint::describe_peer() const {
  return "rank " + std::to_string(peer_) + " (" + peer_ip_ + " via " + dev_->name() + ")";
}

Result<void> VerbsEndpoint::setup_qp(rdma_cm_id* id) {
  const ibv_device_attr& da = dev_->dev_attr_;
  const uint32_t qd = dev_->opts().queue_depth;
  uint32_t max_wr = static_cast<uint32_t>(da.max_qp_wr);
  sq_depth_ = std::min<uint32_t>(max_wr, 2 * qd + 64);
  rq_depth_ = std::min<uint32_t>(max_wr, 2 * qd + 64);
  ibv_qp_init_attr a{};
  a.send_cq = dev_->cq();
  a.recv_cq = dev_->cq();
  a.srq = dev_->srq();
  a.cap.max_send_wr = sq_depth_;
  a.cap.max_recv_wr = a.srq != nullptr ? 0 : rq_depth_;
  a.cap.max_send_sge = 2;  // an eager message: header and payload
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = dev_->vopts().max_inline;
  a.qp_type = IBV_QPT_RC;
  a.sq_sig_all = 0;
  if (rdma_create_qp(id, dev_->pd(), &a) != 0) {
    a.cap.max_inline_data = 0;  // some devices offer no inline data
    if (rdma_create_qp(id, dev_->pd(), &a) != 0)
      return Error::from_errno("rdma_create_qp (send " + std::to_string(sq_depth_) + ", receive " +
                                   std::to_string(rq_depth_) + " entries)",
                               errno)
          .device(dev_->name())
          .peer(peer_)
          .hint("lower the queue depth");
  }
  cm_ = id;
  qp_ = id->qp;
  max_inline_ = a.cap.max_inline_data;
  if (max_inline_ < sizeof(Ctrl)) {
    tx_slots_.resize(sq_depth_);
    tx_mr_ = ibv_reg_mr(dev_->pd(), tx_slots_.data(), tx_slots_.size() * sizeof(Ctrl), IBV_ACCESS_LOCAL_WRITE);
    if (tx_mr_ == nullptr) return Error::from_errno("ibv_reg_mr (control slots)", errno).device(dev_->name());
  }
  recvs_.resize(pow2_at_least(qd));
  pending_.reset(recvs_.size());
  wants_.reset(qd);
  ctrl_out_.reset(2 * qd + recvs_.size() + 64);  // adverts, wants, credits, and a window to close per receive
  if (dev_->windows()) {
    windows_.resize(recvs_.size());
    for (Window& w : windows_) {
      w.mw = ibv_alloc_mw(dev_->pd(), IBV_MW_TYPE_2);
      if (w.mw == nullptr)
        return Error::from_errno("ibv_alloc_mw (" + std::to_string(recvs_.size()) + " windows)", errno)
            .device(dev_->name())
            .hint("GREX_IB_CONFINE=region goes without memory windows");
      w.key = w.mw->rkey;
    }
  } else if (dev_->registers()) {
    windows_.resize(recvs_.size());  // slots without windows: a registration each while advertised
  }
  sends_.reset(qd);
  adverts_.reset(2 * qd);
  ready_.reset(2 * qd + 2);  // sends, and a request for an advert for each
  writes_.reset(qd);
  ops_.reset(sq_depth_);
  GREX_TRY(offer_eager());
  if (a.srq == nullptr) {  // receive buffers for control SENDs, posted before the peer may send
    rx_slots_.resize(rq_depth_);
    rx_mr_ = ibv_reg_mr(dev_->pd(), rx_slots_.data(), rx_slots_.size() * sizeof(Ctrl), IBV_ACCESS_LOCAL_WRITE);
    if (rx_mr_ == nullptr) return Error::from_errno("ibv_reg_mr (receive slots)", errno).device(dev_->name());
    for (uint32_t i = 0; i < rq_depth_; ++i) repost_recv(i);
  }
  // How long the NIC waits for an ACK before retrying (4.096 us x 2^timeout).
  uint8_t t = dev_->vopts().timeout;
  if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof(t)) != 0)
    GREX_DEBUG(kSubsys, "rdma_set_option(ACK_TIMEOUT) failed: %s", std::strerror(errno));
  return ok();
}

Result<std::unique_ptr<Endpoint>> VerbsDevice::connect(int peer, std::string_view peer_address) {
  const std::optional<Address> addr = parse_address(peer_address);
  if (peer < 0 || peer >= opts_.world_size || peer == opts_.rank || !addr)
    return Error(Errc::kInvalidArgument, "bad verbs peer address '" + std::string(peer_address) + "' for rank " +
                                             std::to_string(peer))
        .device(name())
        .rank(opts_.rank)
        .hint("expected verbs:<a.b.c.d>:<port>:<mtu>");
  const uint32_t mtu = addr->mtu;
  const int64_t deadline = static_cast<int64_t>(now_ns() / 1'000'000) + opts_.connect_timeout_ms;
  auto ep = std::make_unique<VerbsEndpoint>(this, peer, static_cast<uint16_t>(eps_.size()));
  if (eps_.size() >= 0xffff) return Error(Errc::kInternal, "more than 65535 endpoints on one device");
  ep->peer_ip_ = addr->ip_text() + ":" + std::to_string(addr->port);
  auto fail = [&](Error e) { return std::move(e).device(name()).rank(opts_.rank).peer(peer); };
  Hello mine;
  mine.rank = static_cast<uint32_t>(opts_.rank);
  mine.mtu = caps_.mtu_bytes;
  mine.job = hello_tag_;
  EagerRing theirs_ring;  // the peer's offer, from its connect request or reply
  rdma_conn_param cp{};
  cp.private_data = &mine;
  cp.private_data_len = sizeof(mine);
  cp.responder_resources = 1;
  cp.initiator_depth = 1;
  cp.retry_count = vo_.retry_cnt;
  cp.rnr_retry_count = 7;  // 7 = retry forever: a receiver short of buffers slows the sender, never fails it
  uint32_t peer_mtu = mtu;

  if (opts_.rank < peer) {
    // Active side: resolve, create the QP, connect.
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(ec_, &id, ep.get(), RDMA_PS_TCP) != 0) return fail(Error::from_errno("rdma_create_id", errno));
    ep->cm_ = id;  // destroyed with the endpoint from here on
    sockaddr_in src{}, dst{};
    src.sin_family = dst.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl(vo_.ip);
    dst.sin_addr.s_addr = htonl(addr->ip);
    dst.sin_port = htons(addr->port);
    auto step = [&](rdma_cm_event_type want, const char* what) -> Result<void> {
      auto ev = wait_event(id, deadline, false, peer);
      if (!ev) return fail(std::move(ev).error().hint(std::string("while ") + what + " to " + ep->peer_ip_));
      rdma_cm_event_type got = (*ev)->event;
      int status = (*ev)->status;
      rdma_ack_cm_event(*ev);
      if (got != want)
        return fail(Error(Errc::kConnectionFailed, std::string(what) + " " + ep->peer_ip_ + ": " +
                                                       rdma_event_str(got) + " (status " + std::to_string(status) + ")")
                        .hint(cm_hint(got)));
      return ok();
    };
    if (rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst), 2000) != 0)
      return fail(Error::from_errno("rdma_resolve_addr", errno));
    GREX_TRY(step(RDMA_CM_EVENT_ADDR_RESOLVED, "resolving the address of"));
    if (rdma_resolve_route(id, 2000) != 0) return fail(Error::from_errno("rdma_resolve_route", errno));
    GREX_TRY(step(RDMA_CM_EVENT_ROUTE_RESOLVED, "resolving the route to"));
    ep->cm_ = nullptr;  // setup_qp sets it again
    if (auto r = ep->setup_qp(id); !r) {
      if (id->qp != nullptr) rdma_destroy_qp(id);
      rdma_destroy_id(id);
      ep->qp_ = nullptr;
      return fail(std::move(r).error());
    }
    mine.eager = ep->my_ring_;
    if (rdma_connect(id, &cp) != 0) return fail(Error::from_errno("rdma_connect", errno));
    auto ev = wait_event(id, deadline, false, peer);
    if (!ev) return fail(std::move(ev).error().hint("while connecting to " + ep->peer_ip_));
    rdma_cm_event_type got = (*ev)->event;
    int status = (*ev)->status;
    // The reply must be this job's too: whoever accepted is the peer we trust from here on.
    const auto theirs = read_hello((*ev)->param.conn.private_data, (*ev)->param.conn.private_data_len, hello_tag_);
    if (theirs) {
      peer_mtu = std::min(peer_mtu, theirs->mtu);
      theirs_ring = theirs->eager;
    }
    rdma_ack_cm_event(*ev);
    if (got != RDMA_CM_EVENT_ESTABLISHED)
      return fail(Error(Errc::kConnectionFailed, "connecting to " + ep->peer_ip_ + ": " + rdma_event_str(got) +
                                                     " (status " + std::to_string(status) + ")")
                      .hint(cm_hint(got)));
    if (!theirs)
      return fail(Error(Errc::kAuthFailed, "the connection to " + ep->peer_ip_ + " was accepted by another job")
                      .hint("two jobs share the store or the addresses"));
  } else {
    // Passive side: take the peer's request from the listener, accept it.
    auto req = wait_event(listener_, deadline, true, peer);
    if (!req) return fail(std::move(req).error().hint("no connection request from rank " + std::to_string(peer)));
    rdma_cm_event* ev = *req;
    rdma_cm_id* id = ev->id;
    const auto theirs = read_hello(ev->param.conn.private_data, ev->param.conn.private_data_len, hello_tag_);
    if (!theirs) {
      rdma_reject(id, nullptr, 0);
      rdma_ack_cm_event(ev);
      rdma_destroy_id(id);
      return fail(Error(Errc::kConnectionFailed, "a connection request claiming rank " + std::to_string(peer) +
                                                     " belongs to another job")
                      .hint("two jobs share the store or the addresses"));
    }
    peer_mtu = std::min(peer_mtu, theirs->mtu);
    theirs_ring = theirs->eager;
    id->context = ep.get();
    if (auto r = ep->setup_qp(id); !r) {
      rdma_reject(id, nullptr, 0);
      rdma_ack_cm_event(ev);
      if (id->qp != nullptr) rdma_destroy_qp(id);
      rdma_destroy_id(id);
      ep->qp_ = nullptr;
      ep->cm_ = nullptr;
      return fail(std::move(r).error());
    }
    mine.eager = ep->my_ring_;
    int rc = rdma_accept(id, &cp);
    int err = errno;
    rdma_ack_cm_event(ev);
    if (rc != 0) return fail(Error::from_errno("rdma_accept", err));
    auto est = wait_event(id, deadline, false, peer);
    if (!est) return fail(std::move(est).error().hint("accepted rank " + std::to_string(peer) + ", never established"));
    rdma_cm_event_type got = (*est)->event;
    rdma_ack_cm_event(*est);
    if (got != RDMA_CM_EVENT_ESTABLISHED)
      return fail(Error(Errc::kConnectionFailed, std::string("accepting rank ") + std::to_string(peer) + ": " +
                                                     rdma_event_str(got))
                      .hint(cm_hint(got)));
  }
  // rdma_cm set the path MTU from the route; report the one both ends can use.
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  if (ibv_query_qp(ep->qp_, &qa, IBV_QP_PATH_MTU, &qi) == 0) ep->path_mtu_ = 128u << qa.path_mtu;
  if (peer_mtu != 0 && ep->path_mtu_ > peer_mtu)
    GREX_WARN(kSubsys, "path MTU %u to rank %d exceeds its active MTU %u", ep->path_mtu_, peer, peer_mtu);
  if (auto r = ep->setup_eager(theirs_ring); !r) return fail(std::move(r).error());
  ep->connected_ = true;
  eps_.push_back(ep.get());
  qps_[ep->qp_->qp_num] = ep.get();
  GREX_DEBUG(kSubsys, "connected to %s: qp %u, path MTU %u, inline %u", ep->describe_peer().c_str(),
             ep->qp_->qp_num, ep->path_mtu_, ep->max_inline_);
  return std::unique_ptr<Endpoint>(std::move(ep));
}

}  // namespace grex::verbs
