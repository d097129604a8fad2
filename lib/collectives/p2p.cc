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
    // The registrations end (with their scope) before finish(), which
    // releases them on success, as a collective's do.
    Result<void> r = ok();
    {
      detail::ScopedRegistration sreg(*c.bufs), rreg(*c.bufs);
      if (dst >= 0) GREX_TRY(sreg.acquire(sendbuf, sendbytes));
      if (src >= 0) GREX_TRY(rreg.acquire(recvbuf, recvbytes));
      r = [&]() -> Result<void> {
        const bool schunk = dst >= 0 && c.p2p_chunked(sendbytes), rchunk = src >= 0 && c.p2p_chunked(recvbytes);
        std::optional<detail::OpId> rid, sid;
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

}  // namespace

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

}  // namespace grex
