// SPDX-License-Identifier: Apache-2.0
// TcpStore: the store client — connect with retries, the HMAC handshake, and one request at a time.
#include "bootstrap/store_auth.h"
#include "bootstrap/store_protocol.h"
#include "bootstrap/store_socket.h"
#include "bootstrap/store_util.h"
#include "core/clock.h"
#include "core/log.h"

#include <grex/bootstrap.h>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

namespace grex {

using namespace detail::store;  // NOLINT: the protocol vocabulary is used throughout

namespace {

constexpr int64_t kConnectRetryMs = 50;
constexpr int64_t kMinHandshakeMs = 1'000;  // a connect that lands late still gets to finish the handshake
constexpr int64_t kMinIoTimeoutMs = 5'000;  // SET/ADD/CHECK replies
constexpr int64_t kReplyGraceMs = 5'000;    // GET/WAIT: server-side timeout plus this much

// GET/WAIT: the server answers at timeout_ms; the client gives it kReplyGraceMs more.
Deadline reply_deadline(int64_t timeout_ms) {
  if (timeout_ms < 0 || timeout_ms > kForeverMs) return Deadline::never();
  return Deadline::after_ms(timeout_ms + kReplyGraceMs);
}

const char* const kTokenHint = "GREX_JOB_TOKEN must be the same on every rank (grex-run sets it for you)";

}  // namespace

struct TcpStore::Impl {
  std::string host;
  uint16_t port = 0;
  std::string where;  // "host:port"
  int64_t io_timeout_ms = kMinIoTimeoutMs;
  std::mutex mu;      // one request/reply in flight
  int fd = -1;
  bool broken = false;
  Session session;  // from the handshake on: every frame tagged both ways

  ~Impl() {
    if (fd >= 0) ::close(fd);
  }

  /// Marks the connection unusable and words the error for the caller.
  Error lost(Error e) {
    broken = true;
    Errc code = e.code() == Errc::kTimeout || e.code() == Errc::kProtocol ? e.code() : Errc::kConnectionFailed;
    std::string hint = code == Errc::kTimeout
                           ? "the store at " + where + " stopped answering; is rank 0 (or grex-store) alive?"
                           : "the store at " + where + " went away; look at rank 0's (or grex-store's) log";
    return Error(code, "store " + where + ": " + e.cause()).hint(std::move(hint));
  }

  /// Sends one request and returns the reply body, or marks the connection broken.
  Result<std::string> call(const std::string& frame, const Deadline& deadline) {
    if (broken || fd < 0) {
      return Error(Errc::kConnectionFailed, "store " + where + ": connection is closed after an earlier error")
          .hint("create a new TcpStore");
    }
    if (auto s = send_all(fd, session.seal(frame), deadline); !s.ok()) return lost(std::move(s).error());
    auto tagged = recv_frame(fd, deadline, kMaxFrameBytes);
    if (!tagged.ok()) return lost(std::move(tagged).error());
    std::string_view inner;
    if (!session.open(*tagged, &inner))
      return lost(Error(Errc::kProtocol, "a reply failed its session tag (forged or altered on the way)"));
    tagged->resize(inner.size());  // the body is the tag's prefix: no copy of a large value
    Result<std::string> reply = std::move(*tagged);
    if (static_cast<uint8_t>((*reply)[0]) == static_cast<uint8_t>(Op::kReplyError)) {
      FrameReader r(std::string_view(*reply).substr(1));
      uint32_t code = 0;
      std::string_view msg;
      if (!r.get_u32(&code) || !r.get_str(kMaxFrameBytes, &msg))
        return lost(Error(Errc::kProtocol, "malformed error reply"));
      return Error(static_cast<Errc>(code), "store " + where + ": " + std::string(msg));
    }
    return reply;
  }

  /// Decodes the opcode of a reply; anything but `want` (or kReplyTimeout if allowed) is a protocol error.
  Result<FrameReader> expect(const std::string& body, Op want) {
    FrameReader r(body);
    uint8_t op = 0;
    r.get_u8(&op);
    if (op != static_cast<uint8_t>(want) && op != static_cast<uint8_t>(Op::kReplyTimeout)) {
      broken = true;
      return Error(Errc::kProtocol, "store " + where + ": unexpected reply opcode " + std::to_string(op));
    }
    return r;
  }

  Result<void> handshake(const std::string& token, const Deadline& deadline) {
    std::string challenge = GREX_TRY(recv_frame(fd, deadline, kMaxAuthFrameBytes));
    FrameReader r(challenge);
    uint8_t op = 0;
    std::string_view server_nonce;
    if (!r.get_u8(&op) || op != static_cast<uint8_t>(Op::kChallenge) || !r.get_raw(kNonceBytes, &server_nonce) ||
        !r.at_end()) {
      return Error(Errc::kProtocol, "expected a grex store challenge")
          .hint("is something other than a grex store listening on this port?");
    }
    std::string client_nonce = GREX_TRY(make_nonce());
    FrameWriter w(Op::kAuthResponse);
    w.put_raw(client_nonce);
    w.put_raw(client_proof(token, server_nonce));
    GREX_TRY(send_all(fd, w.take(), deadline));
    std::string answer = GREX_TRY(recv_frame(fd, deadline, kMaxAuthFrameBytes));
    if (static_cast<uint8_t>(answer[0]) == static_cast<uint8_t>(Op::kAuthRejected))
      return Error(Errc::kAuthFailed, "store at " + where + " rejected this rank's job token").hint(kTokenHint);
    FrameReader a(answer);
    std::string_view mac;
    if (!a.get_u8(&op) || op != static_cast<uint8_t>(Op::kAuthOk) || !a.get_raw(kMacBytes, &mac) || !a.at_end() ||
        !proof_equal(mac, server_proof(token, client_nonce))) {
      return Error(Errc::kAuthFailed, "store at " + where + " could not prove it holds the job token")
          .hint(kTokenHint);
    }
    session = Session(token, server_nonce, client_nonce, /*is_server=*/false);
    return ok();
  }
};

TcpStore::TcpStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpStore::~TcpStore() = default;

void TcpStore::interrupt() noexcept {
  // fd is fixed from connect() to the destructor; shutdown(2) wakes a recv
  // blocked in another thread, and the failed call marks the connection broken.
  if (impl_->fd >= 0) ::shutdown(impl_->fd, SHUT_RDWR);
}

Result<std::unique_ptr<TcpStore>> TcpStore::connect(const std::string& host, uint16_t port,
                                                    const std::string& job_token, int64_t timeout_ms) {
  auto impl = std::make_unique<Impl>();
  impl->host = host;
  impl->port = port;
  impl->where = host_port(host, port);
  impl->io_timeout_ms = std::clamp(timeout_ms, kMinIoTimeoutMs, kForeverMs);
  if (job_token.empty()) {
    return Error(Errc::kAuthFailed, "store " + impl->where + ": GREX_JOB_TOKEN is not set; cannot authenticate")
        .hint(kTokenHint);
  }
  Deadline deadline = timeout_ms > kForeverMs ? Deadline::never() : Deadline::after_ms(timeout_ms);
  Error last(Errc::kConnectionFailed, "connection refused");
  for (;;) {
    auto fd = connect_tcp_once(host, port, deadline);
    if (fd.ok()) {
      impl->fd = *fd;
      int64_t left = std::max(deadline.remaining_ms(), kMinHandshakeMs);
      auto hs = impl->handshake(job_token, Deadline::after_ms(left));
      if (hs.ok()) break;
      Errc code = hs.error().code();
      if (code == Errc::kAuthFailed) return std::move(hs).error();
      if (code == Errc::kProtocol) return std::move(hs).error().context("store " + impl->where);
      ::close(impl->fd);  // the server went away mid-handshake: try again
      impl->fd = -1;
      last = std::move(hs).error();
    } else {
      last = std::move(fd).error();
    }
    if (deadline.expired()) {
      return Error(Errc::kTimeout, "no store answered at " + impl->where + " within " + std::to_string(timeout_ms) +
                                       " ms (last error: " + last.cause() + ")")
          .hint("rank 0 (or grex-store) must be running and reachable; check MASTER_ADDR/MASTER_PORT or "
                "GREX_STORE_ADDR and firewalls");
    }
    int64_t nap = std::min(kConnectRetryMs, deadline.remaining_ms());
    std::this_thread::sleep_for(std::chrono::milliseconds(nap));
  }
  GREX_DEBUG("bootstrap", "connected to store %s", impl->where.c_str());
  return std::unique_ptr<TcpStore>(new TcpStore(std::move(impl)));
}

Result<void> TcpStore::set(std::string_view key, std::string_view value) {
  if (key.size() > kMaxKeyBytes || value.size() > kMaxValueBytes) {
    return Error(Errc::kInvalidArgument, "store: SET of a " + std::to_string(key.size()) + "-byte key and " +
                                             std::to_string(value.size()) + "-byte value exceeds the limits (" +
                                             std::to_string(kMaxKeyBytes) + " B keys, 64 MiB values)");
  }
  FrameWriter w(Op::kSet);
  w.put_str(key);
  w.put_str(value);
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::string reply = GREX_TRY(impl_->call(w.take(), Deadline::after_ms(impl_->io_timeout_ms)));
  GREX_TRY(impl_->expect(reply, Op::kReplyOk));
  return ok();
}

Result<std::string> TcpStore::get(std::string_view key, int64_t timeout_ms) {
  if (key.size() > kMaxKeyBytes)
    return Error(Errc::kInvalidArgument, "store: GET key of " + std::to_string(key.size()) + " bytes is too long");
  if (timeout_ms < 0)
    return Error(Errc::kInvalidArgument, "store: GET with a negative timeout (" + std::to_string(timeout_ms) + " ms)")
        .hint("a wait that never ends is a hang: give a timeout (up to 2^40 ms)");
  FrameWriter w(Op::kGet);
  w.put_str(key);
  w.put_i64(timeout_ms);
  Deadline deadline = reply_deadline(timeout_ms);
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::string reply = GREX_TRY(impl_->call(w.take(), deadline));
  FrameReader r = GREX_TRY(impl_->expect(reply, Op::kReplyValue));
  if (static_cast<uint8_t>(reply[0]) == static_cast<uint8_t>(Op::kReplyTimeout)) {
    return Error(Errc::kTimeout, "store " + impl_->where + ": key '" + std::string(key) + "' did not appear within " +
                                     std::to_string(timeout_ms) + " ms");
  }
  std::string_view value;
  if (!r.get_str(kMaxValueBytes, &value)) return impl_->lost(Error(Errc::kProtocol, "malformed GET reply"));
  return std::string(value);
}

Result<int64_t> TcpStore::add(std::string_view key, int64_t delta) {
  if (key.size() > kMaxKeyBytes)
    return Error(Errc::kInvalidArgument, "store: ADD key of " + std::to_string(key.size()) + " bytes is too long");
  FrameWriter w(Op::kAdd);
  w.put_str(key);
  w.put_i64(delta);
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::string reply = GREX_TRY(impl_->call(w.take(), Deadline::after_ms(impl_->io_timeout_ms)));
  FrameReader r = GREX_TRY(impl_->expect(reply, Op::kReplyInt));
  int64_t v = 0;
  if (!r.get_i64(&v)) return impl_->lost(Error(Errc::kProtocol, "malformed ADD reply"));
  return v;
}

Result<std::vector<bool>> TcpStore::check(std::span<const std::string> keys) {
  FrameWriter w(Op::kCheck);
  w.put_u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    if (k.size() > kMaxKeyBytes) return Error(Errc::kInvalidArgument, "store: CHECK key is too long");
    w.put_str(k);
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::string reply = GREX_TRY(impl_->call(w.take(), Deadline::after_ms(impl_->io_timeout_ms)));
  FrameReader r = GREX_TRY(impl_->expect(reply, Op::kReplyBits));
  uint32_t n = 0;
  if (!r.get_u32(&n) || n != keys.size()) return impl_->lost(Error(Errc::kProtocol, "malformed CHECK reply"));
  std::vector<bool> out(n);
  for (uint32_t i = 0; i < n; ++i) {
    uint8_t b = 0;
    if (!r.get_u8(&b)) return impl_->lost(Error(Errc::kProtocol, "malformed CHECK reply"));
    out[i] = b != 0;
  }
  return out;
}

Result<int64_t> TcpStore::erase(std::span<const std::string> keys) {
  if (keys.size() > kMaxKeysPerRequest) {  // in batches the server takes
    int64_t n = 0;
    for (size_t at = 0; at < keys.size(); at += kMaxKeysPerRequest)
      n += GREX_TRY(erase(keys.subspan(at, std::min(keys.size() - at, kMaxKeysPerRequest))));
    return n;
  }
  FrameWriter w(Op::kErase);
  w.put_u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    if (k.size() > kMaxKeyBytes) return Error(Errc::kInvalidArgument, "store: ERASE key is too long");
    w.put_str(k);
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::string reply = GREX_TRY(impl_->call(w.take(), Deadline::after_ms(impl_->io_timeout_ms)));
  FrameReader r = GREX_TRY(impl_->expect(reply, Op::kReplyInt));
  int64_t v = 0;
  if (!r.get_i64(&v)) return impl_->lost(Error(Errc::kProtocol, "malformed ERASE reply"));
  return v;
}

Result<void> TcpStore::wait(std::span<const std::string> keys, int64_t timeout_ms) {
  if (timeout_ms < 0)
    return Error(Errc::kInvalidArgument, "store: WAIT with a negative timeout (" + std::to_string(timeout_ms) + " ms)")
        .hint("a wait that never ends is a hang: give a timeout (up to 2^40 ms)");
  if (keys.size() > kMaxKeysPerRequest) return Store::wait(keys, timeout_ms);
  FrameWriter w(Op::kWait);
  w.put_i64(timeout_ms);
  w.put_u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    if (k.size() > kMaxKeyBytes) return Error(Errc::kInvalidArgument, "store: WAIT key is too long");
    w.put_str(k);
  }
  Deadline deadline = reply_deadline(timeout_ms);
  bool timed_out = false;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    std::string reply = GREX_TRY(impl_->call(w.take(), deadline));
    GREX_TRY(impl_->expect(reply, Op::kReplyOk));
    timed_out = static_cast<uint8_t>(reply[0]) == static_cast<uint8_t>(Op::kReplyTimeout);
  }
  if (!timed_out) return ok();
  return report_missing(*this, keys, timeout_ms, "store " + impl_->where);
}

}  // namespace grex
