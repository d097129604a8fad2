// SPDX-License-Identifier: Apache-2.0
// The store server's internals: connection state, the key-value map and the waiters on missing keys.
//
// One thread runs the poll(2) loop (store_server.cc); frames are decoded and
// answered in store_server_ops.cc. Nothing here is touched by another thread
// except stopping_ and the wake eventfd.
#pragma once

#include "bootstrap/store_auth.h"
#include "bootstrap/store_protocol.h"

#include <grex/bootstrap.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace grex::detail::store {

/// One client connection, owned by the server thread.
struct Conn {
  uint64_t id = 0;
  int fd = -1;
  std::string peer;            ///< "ip:port" for logs
  bool authed = false;
  std::string server_nonce;    ///< the challenge sent on accept
  Session session;             ///< after kAuthOk: every frame tagged both ways
  uint64_t auth_deadline_ns = 0;
  std::string in;              ///< received bytes not yet decoded
  std::string out;             ///< encoded replies not yet sent
  size_t out_off = 0;
  bool close_after_flush = false;
  bool dead = false;
  // A GET or WAIT parked until its keys exist or its deadline passes.
  bool waiting = false;
  Op wait_op = Op::kWait;
  std::vector<std::string> wait_keys;
  size_t wait_missing = 0;
  uint64_t wait_deadline_ns = UINT64_MAX;
  size_t backlog() const noexcept { return out.size() - out_off; }
};

/// What one store holds and serves at most (issue 28: a store that holds under floods).
inline constexpr size_t kMaxConnections = 16384;   ///< beyond: new connections are closed at once
inline constexpr size_t kMaxUnauthenticated = 128;  ///< beyond: the oldest unauthenticated one is closed
inline constexpr int64_t kAuthTimeoutMs = 5'000;    ///< to answer the challenge
inline constexpr size_t kMaxBacklogBytes = 16 << 20;  ///< unsent replies: past this a client's requests wait
inline constexpr size_t kMaxStoredBytes = size_t{2} << 30;  ///< keys and values together
inline constexpr size_t kMaxKeys = 1 << 20;

class StoreServerImpl final : public StoreServer {
 public:
  StoreServerImpl(int listen_fd, int wake_fd, uint16_t port, std::string token, std::string where);
  ~StoreServerImpl() override;
  uint16_t port() const noexcept override { return port_; }
  void stop() noexcept override;
  /// Starts the poll thread.
  void launch();
  /// Waits up to timeout_ms until no authenticated client is connected; false on timeout.
  /// Lets the hosting rank outlive the others' last requests before it stops the store.
  bool wait_idle(int64_t timeout_ms) const;
  /// Authenticated clients connected now.
  int clients() const noexcept { return clients_.load(std::memory_order_acquire); }

 private:
  // store_server.cc: the loop and socket I/O.
  void run() noexcept;
  int poll_timeout_ms(uint64_t now) const;
  void accept_all(uint64_t now);
  void read_from(Conn& c);
  void flush(Conn& c);
  void send_frame(Conn& c, std::string frame);
  void drop(Conn& c, const char* why);
  void sweep();
  // store_server_ops.cc: the handshake, commands and waits.
  void greet(Conn& c);
  void decode_frames(Conn& c);
  bool handle_auth(Conn& c, std::string_view body);
  bool handle_request(Conn& c, std::string_view body);
  bool handle_add(Conn& c, std::string_view key, int64_t delta);
  bool room_for(Conn& c, std::string_view key, size_t value_bytes);
  void park(Conn& c, Op op, std::vector<std::string> keys, int64_t timeout_ms);
  void finish_wait(Conn& c, bool timed_out);
  void unwatch(Conn& c);
  void key_created(const std::string& key);
  void expire(uint64_t now);
  void reply_error(Conn& c, Errc code, const std::string& msg);

  int listen_fd_;
  int wake_fd_;
  uint16_t port_;
  std::string token_;
  std::string where_;  ///< "host:port" for logs
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> clients_{0};
  std::mutex stop_mu_;
  uint64_t next_id_ = 1;
  uint64_t accept_paused_until_ns_ = 0;
  bool resumed_ = false;  ///< a parked wait ended during this loop turn
  bool warned_full_ = false;
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::unordered_map<std::string, std::string> kv_;
  size_t stored_bytes_ = 0;   ///< keys and values in kv_
  size_t unauthed_ = 0;       ///< connections still in the handshake
  /// key -> ids of connections parked on it (the key does not exist yet).
  std::unordered_map<std::string, std::vector<uint64_t>> watchers_;
};

}  // namespace grex::detail::store
