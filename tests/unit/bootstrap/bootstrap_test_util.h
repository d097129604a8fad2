// SPDX-License-Identifier: Apache-2.0
// Helpers for the bootstrap tests: a free local port, elapsed time, and a raw authenticated socket.
#pragma once

#include "bootstrap/store_auth.h"
#include "bootstrap/store_protocol.h"
#include "bootstrap/store_socket.h"
#include "core/clock.h"

#include <grex/bootstrap.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace grex::testing {

inline constexpr const char* kToken = "unit-test-token";

/// Milliseconds since `start`.
inline int64_t ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
}

/// A port that was free a moment ago (a server bound it and let go).
inline uint16_t free_port() {
  auto s = StoreServer::start("127.0.0.1", 0, kToken);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message());
  if (!s.ok()) return 0;
  uint16_t p = (*s)->port();
  (*s)->stop();
  return p;
}

/// Connects a raw socket to the store; if `authenticate`, completes the handshake with `token`.
/// Returns the fd (or -1).
/// With `session`, the handshake's session (store_auth.h) for sealing what
/// the caller sends and opening what it reads (seal()/open() below).
inline int raw_connect(uint16_t port, bool authenticate, const std::string& token = kToken,
                       detail::store::Session* session = nullptr) {
  using namespace detail::store;  // NOLINT
  auto fd = connect_tcp_once("127.0.0.1", port, Deadline::after_ms(2000));
  if (!fd.ok()) return -1;
  if (!authenticate) return *fd;
  auto challenge = recv_frame(*fd, Deadline::after_ms(2000), kMaxAuthFrameBytes);
  if (!challenge.ok() || challenge->size() != 1 + kNonceBytes) return -1;
  std::string client_nonce(kNonceBytes, 'c');
  FrameWriter w(Op::kAuthResponse);
  w.put_raw(client_nonce);
  w.put_raw(client_proof(token, std::string_view(*challenge).substr(1)));
  if (!send_all(*fd, w.take(), Deadline::after_ms(2000)).ok()) return -1;
  auto answer = recv_frame(*fd, Deadline::after_ms(2000), kMaxAuthFrameBytes);
  if (!answer.ok() || static_cast<uint8_t>((*answer)[0]) != static_cast<uint8_t>(Op::kAuthOk)) return -1;
  if (session != nullptr) *session = Session(token, std::string_view(*challenge).substr(1), client_nonce, false);
  return *fd;
}

/// Sends frames (FrameWriter::take() each) sealed in the session.
inline bool send_sealed(int fd, detail::store::Session& s, std::initializer_list<std::string> frames) {
  std::string all;
  for (const auto& f : frames) all += s.seal(f);
  return detail::store::send_all(fd, all, Deadline::after_ms(2000)).ok();
}

/// Reads one reply and opens it; the body without its tag, or an error.
inline Result<std::string> recv_opened(int fd, detail::store::Session& s, int64_t timeout_ms = 2000) {
  auto r = detail::store::recv_frame(fd, Deadline::after_ms(timeout_ms), detail::store::kMaxFrameBytes);
  if (!r.ok()) return std::move(r).error();
  std::string_view inner;
  if (!s.open(*r, &inner)) return Error(Errc::kProtocol, "a reply failed its session tag");
  return std::string(inner);
}

/// True when the server closed fd (EOF or reset) within 2 s; frames it sent first are skipped.
inline bool closed_by_server(int fd) {
  Deadline deadline = Deadline::after_ms(2000);
  for (;;) {
    auto r = detail::store::recv_frame(fd, deadline, detail::store::kMaxFrameBytes);
    if (!r.ok()) return r.error().code() == Errc::kConnectionFailed;
  }
}

/// A store server on a free loopback port, with the test token.
struct Served {
  std::unique_ptr<StoreServer> server;
  uint16_t port = 0;
};

inline Served serve() {
  auto s = StoreServer::start("127.0.0.1", 0, kToken);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message());
  Served out;
  if (s.ok()) {
    out.server = std::move(*s);
    out.port = out.server->port();
  }
  return out;
}

}  // namespace grex::testing
