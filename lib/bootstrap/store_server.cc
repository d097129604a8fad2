// SPDX-License-Identifier: Apache-2.0
// StoreServer: start/stop, and the single-threaded poll(2) loop with non-blocking socket I/O.
#include "bootstrap/store_server.h"

#include "bootstrap/store_socket.h"
#include "core/clock.h"
#include "core/log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <climits>
#include <cstring>

namespace grex {

namespace detail::store {
namespace {

constexpr int64_t kAcceptPauseMs = 100;       // after EMFILE: let descriptors free up
constexpr size_t kReadChunkBytes = 256 << 10;
constexpr size_t kMaxReadPerWakeBytes = 8 << 20;  // fairness between connections
constexpr int64_t kIdlePollMs = 2;

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  char ip[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
    if (ss.ss_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
      port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
      port = ntohs(a->sin6_port);
    }
  }
  return host_port(ip, port);
}

}  // namespace

StoreServerImpl::StoreServerImpl(int listen_fd, int wake_fd, uint16_t port, std::string token,
                                 std::string where)
    : listen_fd_(listen_fd), wake_fd_(wake_fd), port_(port), token_(std::move(token)),
      where_(std::move(where)) {}

StoreServerImpl::~StoreServerImpl() { stop(); }

void StoreServerImpl::launch() { thread_ = std::thread([this] { run(); }); }

bool StoreServerImpl::wait_idle(int64_t timeout_ms) const {
  Deadline deadline = Deadline::after_ms(timeout_ms);
  while (clients() > 0) {
    if (deadline.expired()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(kIdlePollMs));
  }
  return true;
}

void StoreServerImpl::stop() noexcept {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (listen_fd_ < 0) return;
  stopping_.store(true, std::memory_order_release);
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_, &one, sizeof(one));
  (void)ignored;
  if (thread_.joinable()) thread_.join();
  for (auto& [id, c] : conns_) ::close(c->fd);
  conns_.clear();
  clients_.store(0, std::memory_order_release);
  watchers_.clear();
  ::close(listen_fd_);
  ::close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
  GREX_INFO("bootstrap", "store %s stopped", where_.c_str());
}

int StoreServerImpl::poll_timeout_ms(uint64_t now) const {
  uint64_t next = UINT64_MAX;
  if (accept_paused_until_ns_ > now) next = accept_paused_until_ns_;
  for (const auto& [id, c] : conns_) {
    if (!c->authed) next = std::min(next, c->auth_deadline_ns);
    if (c->waiting) next = std::min(next, c->wait_deadline_ns);
  }
  if (next == UINT64_MAX) return -1;
  if (next <= now) return 0;
  uint64_t ms = (next - now + 999'999) / 1'000'000;
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

void StoreServerImpl::run() noexcept {
  std::vector<pollfd> pfds;
  std::vector<Conn*> polled;
  while (!stopping_.load(std::memory_order_acquire)) {
    uint64_t now = now_ns();
    pfds.clear();
    polled.clear();
    pfds.push_back({wake_fd_, POLLIN, 0});
    pfds.push_back({accept_paused_until_ns_ > now ? -1 : listen_fd_, POLLIN, 0});
    for (auto& [id, c] : conns_) {
      // Backpressure: a client that does not read its replies is not read either.
      short ev = c->backlog() > kMaxBacklogBytes ? 0 : POLLIN;
      if (c->out.size() > c->out_off) ev |= POLLOUT;
      pfds.push_back({c->fd, ev, 0});
      polled.push_back(c.get());
    }
    int rc = ::poll(pfds.data(), pfds.size(), poll_timeout_ms(now));
    if (rc < 0 && errno != EINTR) {
      GREX_ERROR("bootstrap", "store %s: poll failed: %s; the store stops serving", where_.c_str(),
                 std::strerror(errno));
      return;
    }
    if (stopping_.load(std::memory_order_acquire)) return;
    now = now_ns();
    if (rc > 0 && (pfds[1].revents & POLLIN)) accept_all(now);
    for (size_t i = 0; rc > 0 && i < polled.size(); ++i) {
      Conn& c = *polled[i];
      short rev = pfds[i + 2].revents;
      if (!c.dead && (rev & (POLLIN | POLLHUP | POLLERR))) read_from(c);
      if (!c.dead && (rev & POLLOUT)) flush(c);
    }
    expire(now_ns());
    // Decode whatever arrived; go again while waits end, since frames may be queued behind them.
    do {
      resumed_ = false;
      for (auto& [id, c] : conns_)
        if (!c->dead && !c->waiting && !c->in.empty() && c->backlog() <= kMaxBacklogBytes) decode_frames(*c);
    } while (resumed_);
    sweep();
  }
}

void StoreServerImpl::accept_all(uint64_t now) {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        GREX_WARN("bootstrap", "store %s: accept: %s; pausing new connections", where_.c_str(),
                  std::strerror(errno));
        accept_paused_until_ns_ = now + kAcceptPauseMs * 1'000'000ull;
      }
      return;  // EAGAIN, or a connection that died in the backlog
    }
    if (conns_.size() >= kMaxConnections) {  // fds are rank 0's too: never all of them
      ::close(fd);
      if (!warned_full_) GREX_WARN("bootstrap", "store %s: %zu connections; refusing more", where_.c_str(), conns_.size());
      warned_full_ = true;
      continue;
    }
    if (unauthed_ >= kMaxUnauthenticated) {
      // A flood of connections that never authenticate: the oldest goes. A
      // real client answers the challenge within a round trip, so it is
      // never the oldest for long.
      Conn* oldest = nullptr;
      for (auto& [id, x] : conns_)
        if (!x->authed && !x->dead && (oldest == nullptr || x->id < oldest->id)) oldest = x.get();
      if (oldest != nullptr) drop(*oldest, "too many unauthenticated connections");  // closed by sweep()
    }
    tune_socket(fd);
    keepalive_socket(fd);
    auto c = std::make_unique<Conn>();
    c->id = next_id_++;
    c->fd = fd;
    c->peer = peer_name(fd);
    c->auth_deadline_ns = now + kAuthTimeoutMs * 1'000'000ull;
    Conn& ref = *c;
    conns_.emplace(c->id, std::move(c));
    ++unauthed_;
    GREX_DEBUG("bootstrap", "store %s: connection from %s", where_.c_str(), ref.peer.c_str());
    greet(ref);
  }
}

void StoreServerImpl::read_from(Conn& c) {
  size_t total = 0;
  // Before the handshake a client may send one small frame, no more.
  const size_t limit = c.authed ? kMaxReadPerWakeBytes : kFrameHeaderBytes + kMaxAuthFrameBytes;
  while (total < limit) {
    // The frame's length is checked as soon as its header is in, before its body is read.
    if (c.in.size() >= kFrameHeaderBytes) {
      const uint32_t n = decode_u32(c.in.data());
      if (n == 0 || n > (c.authed ? kMaxFrameBytes : kMaxAuthFrameBytes)) {
        GREX_WARN("bootstrap", "store %s: a %u-byte frame from %s; closing it", where_.c_str(), n, c.peer.c_str());
        drop(c, "oversized frame");
        return;
      }
    }
    size_t old = c.in.size();
    c.in.resize(old + kReadChunkBytes);
    ssize_t r = ::recv(c.fd, c.in.data() + old, std::min(kReadChunkBytes, limit - total), 0);
    c.in.resize(old + (r > 0 ? static_cast<size_t>(r) : 0));
    if (r > 0) {
      total += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    drop(c, r == 0 ? "closed by peer" : std::strerror(errno));
    return;
  }
  // A parked connection may queue requests, but not without bound.
  if (c.in.size() > 2 * (kMaxFrameBytes + kFrameHeaderBytes)) drop(c, "too much unread input");
}

void StoreServerImpl::flush(Conn& c) {
  while (c.out_off < c.out.size()) {
    ssize_t w = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
    if (w > 0) {
      c.out_off += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    drop(c, w < 0 ? std::strerror(errno) : "send failed");
    return;
  }
  c.out.clear();
  c.out_off = 0;
  if (c.close_after_flush) drop(c, "handshake rejected");
}

void StoreServerImpl::send_frame(Conn& c, std::string frame) {
  if (c.dead) return;
  if (c.session.active()) frame = c.session.seal(std::move(frame));
  if (c.out.empty()) c.out = std::move(frame);
  else c.out += frame;
  flush(c);
}

void StoreServerImpl::drop(Conn& c, const char* why) {
  if (c.dead) return;
  GREX_DEBUG("bootstrap", "store %s: closing connection from %s: %s", where_.c_str(), c.peer.c_str(), why);
  c.dead = true;
  if (c.authed)
    clients_.fetch_sub(1, std::memory_order_acq_rel);
  else
    --unauthed_;
  if (c.waiting) unwatch(c);
  c.waiting = false;
}

void StoreServerImpl::sweep() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->second->dead) {
      ::close(it->second->fd);
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace detail::store

Result<std::unique_ptr<StoreServer>> StoreServer::start(const std::string& host, uint16_t port,
                                                        std::string job_token) {
  using detail::store::host_port;
  if (job_token.empty()) {
    return Error(Errc::kInvalidArgument, "store: refusing to serve on " + host_port(host, port) +
                                             " without a job token")
        .hint("set GREX_JOB_TOKEN (grex-run sets it for you)");
  }
  int lfd = GREX_TRY(detail::store::listen_tcp(host, port));
  int wfd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wfd < 0) {
    int err = errno;
    ::close(lfd);
    return Error::from_errno("store: eventfd", err);
  }
  uint16_t bound = detail::store::bound_port(lfd);
  auto server = std::make_unique<detail::store::StoreServerImpl>(lfd, wfd, bound, std::move(job_token),
                                                                 host_port(host, bound));
  server->launch();
  GREX_INFO("bootstrap", "store listening on %s", host_port(host, bound).c_str());
  return std::unique_ptr<StoreServer>(std::move(server));
}

}  // namespace grex
