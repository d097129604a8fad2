// SPDX-License-Identifier: Apache-2.0
// The verbs driver's rdma_cm events: waiting for one connection's, keeping
// connect requests for the connect() that will claim them (only this job's,
// one per rank), and disconnects of live endpoints.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "core/clock.h"
#include "core/log.h"
#include "drivers/verbs/verbs_device.h"

namespace grex::verbs {
namespace {

constexpr const char* kSubsys = "verbs";

}  // namespace

// ---------------------------------------------------------------- events

// Waits for the next CM event on `id` (or, with want_request, for a connect
// request from rank `peer` on the listener). Events for other ids are
// handled or kept for their own connect() call.
Result<rdma_cm_event*> VerbsDevice::wait_event(rdma_cm_id* id, int64_t deadline_ms, bool want_request, int peer) {
  if (want_request) {
    for (size_t i = 0; i < requests_.size(); ++i)
      if (requests_[i].first == peer) {
        rdma_cm_event* ev = requests_[i].second;
        requests_.erase(requests_.begin() + static_cast<long>(i));
        return ev;
      }
  }
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ec_, &ev) == 0) {
      stats.cm_events.add();
      if (want_request && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && claimed_rank(ev) == peer) return ev;
      if (!want_request && ev->id == id) return ev;
      handle_stray(ev);
      continue;
    }
    if (errno != EAGAIN) return Error::from_errno("rdma_get_cm_event", errno).device(name());
    int64_t left = deadline_ms - static_cast<int64_t>(now_ns() / 1'000'000);
    if (left <= 0) return Error(Errc::kTimeout, "timed out waiting for rdma_cm").device(name());
    pollfd p{ec_->fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100)));
  }
}

// A CM event nobody is waiting for: a connect request from a rank whose
// connect() comes later (kept), or a disconnect of a live endpoint.
void VerbsDevice::handle_stray(rdma_cm_event* ev) noexcept {
  if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
    // The job's tag first, then the rank it claims; one waiting request per
    // rank at most, so the queue is bounded by the world size.
    const int from = claimed_rank(ev);
    const bool queued = std::any_of(requests_.begin(), requests_.end(), [&](const auto& r) { return r.first == from; });
    if (from >= 0 && !queued && requests_.size() < static_cast<size_t>(opts_.world_size)) {
      requests_.emplace_back(from, ev);  // acknowledged when claimed
      return;
    }
    stats.rejected_requests.add();
    GREX_WARN(kSubsys, "%s: rejected a connection request (%s)", name().c_str(),
              from < 0 ? "not this job's, or no grex rank" : "a second one for the same rank");
    rdma_reject(ev->id, nullptr, 0);
    rdma_cm_id* id = ev->id;
    rdma_ack_cm_event(ev);
    rdma_destroy_id(id);
    return;
  }
  VerbsEndpoint* ep = ev->id != nullptr ? static_cast<VerbsEndpoint*>(ev->id->context) : nullptr;
  rdma_cm_event_type type = ev->event;
  rdma_ack_cm_event(ev);
  if (ep == nullptr) return;
  switch (type) {
    case RDMA_CM_EVENT_DISCONNECTED:
      // Not yet: what the peer sent before it closed is already in our CQ.
      // poll() fails the endpoint once it has drained the CQ.
      ep->disconnected_ = true;
      break;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      ep->fail(Status::kLocalError, "the RDMA device was removed");
      break;
    default:
      break;
  }
}

// Called from poll() about once a millisecond: CM events (disconnects) and
// async device events (port down, QP fatal) never wait for a completion.
void VerbsDevice::poll_events() noexcept {
  rdma_cm_event* ev = nullptr;
  while (rdma_get_cm_event(ec_, &ev) == 0) {
    stats.cm_events.add();
    handle_stray(ev);
  }
  ibv_async_event ae;
  while (ibv_get_async_event(ctx_, &ae) == 0) {
    stats.async_events.add();
    switch (ae.event_type) {
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
        if (VerbsEndpoint* ep = by_qp(ae.element.qp->qp_num))
          ep->fail(ae.event_type == IBV_EVENT_QP_ACCESS_ERR ? Status::kRemoteAccess : Status::kLocalError,
                   std::string("async event: ") + ibv_event_type_str(ae.event_type));
        break;
      case IBV_EVENT_PORT_ERR:
      case IBV_EVENT_DEVICE_FATAL:
        GREX_WARN(kSubsys, "%s: %s (port %u)", name().c_str(), ibv_event_type_str(ae.event_type), vo_.port);
        for (VerbsEndpoint* ep : eps_)
          if (ep != nullptr)
            ep->fail(Status::kLocalError, std::string(ibv_event_type_str(ae.event_type)) + " on " + name() + " port " +
                                              std::to_string(vo_.port) + " (check the link: ibv_devinfo)");
        break;
      default:
        GREX_DEBUG(kSubsys, "%s: async event %s", name().c_str(), ibv_event_type_str(ae.event_type));
    }
    ibv_ack_async_event(&ae);
  }
}

}  // namespace grex::verbs
