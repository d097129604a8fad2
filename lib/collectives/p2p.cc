// SPDX-License-Identifier: Apache-2.0
// Point-to-point calls: send, recv and sendrecv as one job on the communicator's
// worker (the blocking calls run them inline; the stream forms in
// collectives_api.cc between their copies).
#include <optional>
#include <string>

#include "collectives/comm_impl.h"
#include "collectives/jobs.h"
#include "collectives/stream.h"

namespace grex {

namespace {

// Sends sendbytes to dst while receiving recvbytes from src; dst < 0 or
// src < 0 leaves that side out (send, recv). Whatever is not chunked is
// posted first, then the chunked sides run as one pipelined exchange. Large
// messages go as a stream of chunks (both ranks decide alike from the size).
Result<detail::JobFn> p2p_job(Communicator::Impl& c, const char* what, const void* sendbuf, size_t sendbytes, int dst,
                              void* recvbuf, size_t recvbytes, int src, uint32_t tag) {
  if (dst >= 0) GREX_TRY(c.check_p2p(what, sendbuf, sendbytes, dst));
  if (src >= 0) GREX_TRY(c.check_p2p(what, recvbuf, recvbytes, src));
  return detail::JobFn([&c, what, sendbuf, sendbytes, dst, recvbuf, recvbytes, src, tag]() -> Result<void> {
    GREX_TRY(c.check_usable(what));
    // The recorder's entry: bytes as the count, the peer (sendrecv: the destination; root: its source).
    if (c.recorder)
      c.recorder->start(what, 0, dst >= 0 ? sendbytes : recvbytes, -1, -1, dst >= 0 && src >= 0 ? src : -1,
                        dst >= 0 ? dst : src, c.engine->posted_bytes());
    // The registrations end (with their scope) before finish(), which
    // releases them on success, as a collective's do.
    Result<void> r = ok();
    {
      detail::ScopedRegistration sreg(*c.bufs), rreg(*c.bufs);
      if (dst >= 0) GREX_TRY(sreg.acquire(sendbuf, sendbytes));
      if (src >= 0) GREX_TRY(rreg.acquire(recvbuf, recvbytes));
      r = [&]() -> Result<void> {
        const bool schunk = dst >= 0 && c.p2p_chunked(sendbytes), rchunk = src >= 0 && c.p2p_chunked(recvbytes);
        std::optional<detail::OpId> rid, sid, nid;
        if (c.notices) {  // any_source: the notice goes first; a receive takes (or owes) its sender's
          GREX_TRY(c.notices->service(*c.engine));
          if (dst >= 0) nid = GREX_TRY(c.notices->post(*c.engine, dst, tag, sendbytes));
          if (src >= 0) c.notices->consume(src, tag);
        }
        if (src >= 0 && !rchunk) rid = GREX_TRY(c.engine->recv(src, rreg.get(), rreg.offset(recvbuf), recvbytes, tag));
        if (dst >= 0 && !schunk) sid = GREX_TRY(c.engine->send(dst, sreg.get(), sreg.offset(sendbuf), sendbytes, tag));
        if (schunk || rchunk) {
          detail::StreamSide snd, rcv;
          if (schunk) {
            const bool stage = c.ctx.should_stage(sreg.get(), sendbytes);
            if (stage) GREX_TRY(c.bufs->ensure_staging(c.opts.chunk_bytes * detail::kStreamWindow));
            snd = detail::StreamSide{dst, sreg.get(), sreg.offset(sendbuf), sendbytes, stage};
          }
          if (rchunk) rcv = detail::StreamSide{src, rreg.get(), rreg.offset(recvbuf), recvbytes};
          GREX_TRY(detail::stream(c.ctx, *c.world, snd, rcv, c.opts.chunk_bytes, tag,
                                  [](size_t, const uint8_t*, uint64_t, uint64_t) {}));
        }
        const Deadline deadline = c.ctx.deadline();
        if (sid) GREX_TRY(c.engine->wait(*sid, deadline, what));
        if (nid) GREX_TRY(c.engine->wait(*nid, deadline, what));
        if (rid) {
          GREX_TRY(c.engine->wait(*rid, deadline, what));
          if (c.engine->bytes(*rid) != recvbytes)
            return Error(Errc::kMismatch, "expected " + std::to_string(recvbytes) + " bytes from rank " +
                                              std::to_string(src) + ", got " + std::to_string(c.engine->bytes(*rid)))
                .rank(c.rank)
                .peer(src);
        }
        return ok();
      }();
    }
    return c.finish(std::move(r), what);
  });
}

Result<void> check_any_source(const Communicator::Impl& c, const char* what) {
  if (c.notices) return ok();
  return Error(Errc::kInvalidArgument, std::string(what) + " needs CommOptions::any_source on every rank")
      .rank(c.rank)
      .hint("set GREX_P2P_ANY_SOURCE=1 for every rank (sends then carry a 16-byte notice)");
}

}  // namespace

Result<detail::JobFn> recv_any_job(Communicator::Impl& c, void* buf, size_t bytes, uint32_t tag, int* source) {
  GREX_TRY(check_any_source(c, "recv_any"));
  if (buf == nullptr && bytes > 0) return detail::bad_arg(c.rank, "recv_any", "null buffer");
  return detail::JobFn([&c, buf, bytes, tag, source]() -> Result<void> {
    GREX_TRY(c.check_usable("recv_any"));
    const Deadline deadline = c.ctx.deadline();
    for (uint32_t spins = 1;; ++spins) {
      GREX_TRY(c.notices->service(*c.engine));
      if (auto n = c.notices->peek(tag, -1)) {
        const auto [src, sent] = *n;
        if (sent != bytes)
          return c.finish(Error(Errc::kMismatch, "rank " + std::to_string(src) + " sent " + std::to_string(sent) +
                                                     " bytes with tag " + std::to_string(tag) + ", this rank receives " +
                                                     std::to_string(bytes))
                              .rank(c.rank)
                              .peer(src),
                          "recv_any");
        *source = src;
        return GREX_TRY(p2p_job(c, "recv_any", nullptr, 0, -1, buf, bytes, src, tag))();
      }
      if (auto r = c.engine->progress(); !r) return c.finish(std::move(r), "recv_any");
      if ((spins & 255) != 0) continue;
      // A rank that is gone may have been the one to send: say so rather
      // than wait for the others.
      for (int p = 0; p < c.size; ++p) {
        if (p == c.rank) continue;
        Result<void> dead = c.engine->check_peer(p);
        if (dead && c.notices->peer_failed(p))
          dead = Error(Errc::kPeerFailed, "rank " + std::to_string(p) + " stopped taking notices (it exited?)")
                     .rank(c.rank)
                     .peer(p);
        if (!dead) return c.finish(std::move(dead), "recv_any");
      }
      if (deadline.expired())  // nothing was posted: the communicator stays usable
        return Error(Errc::kTimeout, "recv_any: no rank sent a message with tag " + std::to_string(tag) +
                                         " within " + std::to_string(c.opts.timeout_ms) + " ms")
            .rank(c.rank)
            .hint("no rank has sent with this tag yet; raise GREX_TIMEOUT_MS if a sender is just slow");
    }
  });
}

Result<detail::JobFn> iprobe_job(Communicator::Impl& c, uint32_t tag, int source, std::optional<Probe>* out) {
  GREX_TRY(check_any_source(c, "iprobe"));
  if (source >= 0) GREX_TRY(c.check_p2p("iprobe", nullptr, 0, source));
  return detail::JobFn([&c, tag, source, out]() -> Result<void> {
    GREX_TRY(c.check_usable("iprobe"));
    if (auto r = c.engine->progress(); !r) return c.finish(std::move(r), "iprobe");
    GREX_TRY(c.notices->service(*c.engine));
    if (auto n = c.notices->peek(tag, source)) *out = Probe{n->first, n->second};
    return ok();
  });
}

Result<detail::JobFn> send_job(Communicator::Impl& c, const void* buf, size_t bytes, int peer, uint32_t tag) {
  if (peer < 0) return c.check_p2p("send", buf, bytes, peer).error();
  return p2p_job(c, "send", buf, bytes, peer, nullptr, 0, -1, tag);
}

Result<detail::JobFn> recv_job(Communicator::Impl& c, void* buf, size_t bytes, int peer, uint32_t tag) {
  if (peer < 0) return c.check_p2p("recv", buf, bytes, peer).error();
  return p2p_job(c, "recv", nullptr, 0, -1, buf, bytes, peer, tag);
}

Result<detail::JobFn> sendrecv_job(Communicator::Impl& c, const void* sendbuf, size_t sendbytes, int dst,
                                   void* recvbuf, size_t recvbytes, int src, uint32_t tag) {
  // A negative rank is an argument error here, not "no such side".
  if (dst < 0) return c.check_p2p("sendrecv", sendbuf, sendbytes, dst).error();
  if (src < 0) return c.check_p2p("sendrecv", recvbuf, recvbytes, src).error();
  return p2p_job(c, "sendrecv", sendbuf, sendbytes, dst, recvbuf, recvbytes, src, tag);
}

Result<void> Communicator::send(const void* buf, size_t bytes, int peer, uint32_t tag) {
  return impl_->run(GREX_TRY(send_job(*impl_, buf, bytes, peer, tag)));
}

Result<void> Communicator::sendrecv(const void* sendbuf, size_t sendbytes, int dst, void* recvbuf, size_t recvbytes,
                                    int src, uint32_t tag) {
  return impl_->run(GREX_TRY(sendrecv_job(*impl_, sendbuf, sendbytes, dst, recvbuf, recvbytes, src, tag)));
}

Result<void> Communicator::recv(void* buf, size_t bytes, int peer, uint32_t tag) {
  return impl_->run(GREX_TRY(recv_job(*impl_, buf, bytes, peer, tag)));
}

Result<int> Communicator::recv_any(void* buf, size_t bytes, uint32_t tag) {
  int source = -1;
  GREX_TRY(impl_->run(GREX_TRY(recv_any_job(*impl_, buf, bytes, tag, &source))));
  return source;
}

Result<std::optional<Probe>> Communicator::iprobe(uint32_t tag, int source) {
  std::optional<Probe> found;
  GREX_TRY(impl_->run(GREX_TRY(iprobe_job(*impl_, tag, source, &found))));
  return found;
}

}  // namespace grex
