// SPDX-License-Identifier: Apache-2.0
// Point-to-point calls: send, recv and sendrecv as jobs on the communicator's
// worker (the blocking calls run them inline; the stream forms in
// collectives_api.cc between their copies).
#include <optional>
#include <string>

#include "collectives/comm_impl.h"
#include "collectives/jobs.h"
#include "collectives/stream.h"

namespace grex {

Result<detail::JobFn> send_job(Communicator::Impl& c, const void* buf, size_t bytes, int peer, uint32_t tag) {
  GREX_TRY(c.check_p2p("send", buf, bytes, peer));
  return detail::JobFn([&c, buf, bytes, peer, tag]() -> Result<void> {
    GREX_TRY(c.check_usable("send"));
    // The registration ends (with its scope) before finish(), which releases
    // it on success, as a collective's does.
    Result<void> r = ok();
    {
      detail::ScopedRegistration reg(*c.bufs);
      GREX_TRY(reg.acquire(buf, bytes));
      r = [&]() -> Result<void> {
        if (c.p2p_chunked(bytes)) {
          bool stage = c.ctx.should_stage(reg.get(), bytes);
          if (stage) GREX_TRY(c.bufs->ensure_staging(c.opts.chunk_bytes * detail::kStreamWindow));
          detail::StreamSide snd{peer, reg.get(), reg.offset(buf), bytes, stage};
          return detail::stream(c.ctx, *c.world, snd, detail::StreamSide{}, c.opts.chunk_bytes, tag,
                                [](size_t, const uint8_t*, uint64_t, uint64_t) {});
        }
        auto id = GREX_TRY(c.engine->send(peer, reg.get(), reg.offset(buf), bytes, tag));
        return c.engine->wait(id, c.ctx.deadline(), "send");
      }();
    }
    return c.finish(std::move(r), "send");
  });
}

Result<detail::JobFn> recv_job(Communicator::Impl& c, void* buf, size_t bytes, int peer, uint32_t tag) {
  GREX_TRY(c.check_p2p("recv", buf, bytes, peer));
  return detail::JobFn([&c, buf, bytes, peer, tag]() -> Result<void> {
    GREX_TRY(c.check_usable("recv"));
    Result<void> r = ok();
    {
      detail::ScopedRegistration reg(*c.bufs);  // ends before finish(), as in send_job()
      GREX_TRY(reg.acquire(buf, bytes));
      r = [&]() -> Result<void> {
        if (c.p2p_chunked(bytes)) {
          detail::StreamSide rcv{peer, reg.get(), reg.offset(buf), bytes};
          return detail::stream(c.ctx, *c.world, detail::StreamSide{}, rcv, c.opts.chunk_bytes, tag,
                                [](size_t, const uint8_t*, uint64_t, uint64_t) {});
        }
        auto id = GREX_TRY(c.engine->recv(peer, reg.get(), reg.offset(buf), bytes, tag));
        GREX_TRY(c.engine->wait(id, c.ctx.deadline(), "recv"));
        if (c.engine->bytes(id) != bytes)
          return Error(Errc::kMismatch, "expected " + std::to_string(bytes) + " bytes, got " +
                                            std::to_string(c.engine->bytes(id)))
              .rank(c.rank)
              .peer(peer);
        return ok();
      }();
    }
    return c.finish(std::move(r), "recv");
  });
}

// Both directions at once (MPI_Sendrecv): whatever is not chunked is posted
// first, then the chunked parts run as one pipelined exchange.
Result<detail::JobFn> sendrecv_job(Communicator::Impl& c, const void* sendbuf, size_t sendbytes, int dst,
                                   void* recvbuf, size_t recvbytes, int src, uint32_t tag) {
  GREX_TRY(c.check_p2p("sendrecv", sendbuf, sendbytes, dst));
  GREX_TRY(c.check_p2p("sendrecv", recvbuf, recvbytes, src));
  return detail::JobFn([&c, sendbuf, sendbytes, dst, recvbuf, recvbytes, src, tag]() -> Result<void> {
    GREX_TRY(c.check_usable("sendrecv"));
    Result<void> r = ok();
    {
      detail::ScopedRegistration sreg(*c.bufs), rreg(*c.bufs);
      GREX_TRY(sreg.acquire(sendbuf, sendbytes));
      GREX_TRY(rreg.acquire(recvbuf, recvbytes));
      r = [&]() -> Result<void> {
        const bool schunk = c.p2p_chunked(sendbytes), rchunk = c.p2p_chunked(recvbytes);
        std::optional<detail::OpId> rid, sid;
        if (!rchunk) rid = GREX_TRY(c.engine->recv(src, rreg.get(), rreg.offset(recvbuf), recvbytes, tag));
        if (!schunk) sid = GREX_TRY(c.engine->send(dst, sreg.get(), sreg.offset(sendbuf), sendbytes, tag));
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
        if (sid) GREX_TRY(c.engine->wait(*sid, deadline, "sendrecv"));
        if (rid) {
          GREX_TRY(c.engine->wait(*rid, deadline, "sendrecv"));
          if (c.engine->bytes(*rid) != recvbytes)
            return Error(Errc::kMismatch, "sendrecv: expected " + std::to_string(recvbytes) + " bytes from rank " +
                                              std::to_string(src) + ", got " + std::to_string(c.engine->bytes(*rid)))
                .rank(c.rank)
                .peer(src);
        }
        return ok();
      }();
    }
    return c.finish(std::move(r), "sendrecv");
  });
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
