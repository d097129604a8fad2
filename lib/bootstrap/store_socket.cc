// SPDX-License-Identifier: Apache-2.0
// TCP socket helpers for the store: resolve, listen, connect once, send and receive frames.
#include "bootstrap/store_socket.h"

#include <grex/bootstrap.h>

#include "bootstrap/store_protocol.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>

namespace grex::detail::store {
namespace {

struct AddrInfoFree {
  void operator()(addrinfo* ai) const noexcept { freeaddrinfo(ai); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoFree>;

Result<AddrInfoPtr> resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    return Error(Errc::kInvalidArgument,
                 "cannot resolve '" + host + "': " + gai_strerror(rc))
        .hint("check the store host (GREX_STORE_ADDR or MASTER_ADDR)");
  }
  return AddrInfoPtr(res);
}

int poll_ms(const Deadline& deadline) {
  int64_t ms = deadline.remaining_ms();
  return ms > INT_MAX ? -1 : static_cast<int>(ms);
}

// Waits for `events` on fd; false when the deadline passed first.
Result<bool> wait_fd(int fd, short events, const Deadline& deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, poll_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return Error::from_errno("poll", errno);
  }
}

Error peer_gone(int err) {
  return Error(Errc::kConnectionFailed,
               err == 0 ? std::string("the store closed the connection")
                        : std::string("connection to the store lost: ") + std::strerror(err));
}

Result<void> recv_exact(int fd, char* buf, size_t n, const Deadline& deadline) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::recv(fd, buf + got, n - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return peer_gone(0);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return peer_gone(errno);
    if (!GREX_TRY(wait_fd(fd, POLLIN, deadline)))
      return Error(Errc::kTimeout, "no reply from the store in time");
  }
  return ok();
}

}  // namespace

std::string host_port(std::string_view host, uint16_t port) {
  std::string h(host);
  if (h.find(':') != std::string::npos) h = "[" + h + "]";
  return h + ":" + std::to_string(port);
}

void tune_socket(int fd) noexcept {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void keepalive_socket(int fd) noexcept {
  int on = 1, idle = 10, intvl = 5, cnt = 3;
  unsigned user_timeout_ms = 30'000;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

Result<int> listen_tcp(const std::string& host, uint16_t port) {
  AddrInfoPtr ai = GREX_TRY(resolve(host, port, /*passive=*/true));
  int last_err = 0;
  for (addrinfo* a = ai.get(); a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      last_err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) return fd;
    last_err = errno;
    ::close(fd);
  }
  if (last_err == EADDRINUSE) {
    return Error(Errc::kAddressInUse, "store: cannot listen on " + host_port(host, port) +
                                          ": address already in use")
        .hint("another job is using it; pick another MASTER_PORT / GREX_STORE_ADDR");
  }
  return Error::from_errno("store: cannot listen on " + host_port(host, port), last_err)
      .hint("the store host must be an address of this machine (or 0.0.0.0)");
}

uint16_t bound_port(int fd) noexcept {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

Result<int> connect_tcp_once(const std::string& host, uint16_t port, const Deadline& deadline) {
  auto ai = resolve(host, port, /*passive=*/false);
  if (!ai.ok()) return Error(Errc::kConnectionFailed, ai.error().cause());
  int last_err = ECONNREFUSED;
  for (addrinfo* a = ai->get(); a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      last_err = errno;
      continue;
    }
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      auto ready = wait_fd(fd, POLLOUT, deadline);
      int err = ETIMEDOUT;
      socklen_t len = sizeof(err);
      if (ready.ok() && *ready && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) rc = 0;
      else errno = err;
    }
    if (rc == 0) {
      tune_socket(fd);
      keepalive_socket(fd);
      return fd;
    }
    last_err = errno;
    ::close(fd);
  }
  return Error(Errc::kConnectionFailed, std::string("connect: ") + std::strerror(last_err));
}

Result<void> send_all(int fd, std::string_view data, const Deadline& deadline) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t w = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (w >= 0) {
      sent += static_cast<size_t>(w);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return peer_gone(errno);
    if (!GREX_TRY(wait_fd(fd, POLLOUT, deadline)))
      return Error(Errc::kTimeout, "the store did not accept the request in time");
  }
  return ok();
}

Result<std::string> recv_frame(int fd, const Deadline& deadline, size_t max_body) {
  char header[kFrameHeaderBytes];
  GREX_TRY(recv_exact(fd, header, sizeof(header), deadline));
  uint32_t n = decode_u32(header);
  if (n == 0 || n > max_body)
    return Error(Errc::kProtocol, "the store sent a frame of " + std::to_string(n) + " bytes");
  std::string body(n, '\0');
  GREX_TRY(recv_exact(fd, body.data(), n, deadline));
  return body;
}

}  // namespace grex::detail::store

namespace grex {

std::string store_address(std::string_view host, uint16_t port) { return detail::store::host_port(host, port); }

}  // namespace grex
