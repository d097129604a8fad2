// SPDX-License-Identifier: Apache-2.0
// The store server's protocol: the HMAC handshake, SET/GET/ADD/CHECK/WAIT, and parked waits.
#include "bootstrap/store_auth.h"
#include "bootstrap/store_server.h"
#include "core/clock.h"
#include "core/log.h"

#include <algorithm>
#include <charconv>

namespace grex::detail::store {
namespace {

// Reads u32 n then n keys; false on a malformed list.

std::string ok_frame() { return FrameWriter(Op::kReplyOk).take(); }

}  // namespace

void StoreServerImpl::greet(Conn& c) {
  auto nonce = make_nonce();
  if (!nonce.ok()) {
    GREX_ERROR("bootstrap", "store %s: %s", where_.c_str(), nonce.error().message().c_str());
    drop(c, "no nonce");
    return;
  }
  c.server_nonce = std::move(*nonce);
  FrameWriter w(Op::kChallenge);
  w.put_raw(c.server_nonce);
  send_frame(c, w.take());
}

void StoreServerImpl::decode_frames(Conn& c) {
  size_t pos = 0;
  // Backpressure: past kMaxBacklogBytes of unsent replies the rest waits in c.in.
  while (!c.dead && !c.waiting && !c.close_after_flush && c.backlog() <= kMaxBacklogBytes &&
         c.in.size() - pos >= kFrameHeaderBytes) {
    uint32_t n = decode_u32(c.in.data() + pos);
    size_t max = c.authed ? kMaxFrameBytes : kMaxAuthFrameBytes;
    if (n == 0 || n > max) {
      GREX_WARN("bootstrap", "store %s: malformed frame (%u bytes) from %s; closing it", where_.c_str(), n,
                c.peer.c_str());
      drop(c, "malformed frame");
      break;
    }
    if (c.in.size() - pos - kFrameHeaderBytes < n) break;  // incomplete
    std::string_view body(c.in.data() + pos + kFrameHeaderBytes, n);
    pos += kFrameHeaderBytes + n;
    if (c.authed) {
      std::string_view inner;
      if (!c.session.open(body, &inner)) {
        GREX_WARN("bootstrap", "store %s: a frame from %s failed its session tag (forged, altered or replayed); closing it",
                  where_.c_str(), c.peer.c_str());
        drop(c, "bad session tag");
        break;
      }
      body = inner;
    }
    bool good = c.authed ? handle_request(c, body) : handle_auth(c, body);
    if (!good) {
      GREX_WARN("bootstrap", "store %s: malformed %s from %s; closing it", where_.c_str(),
                c.authed ? "request" : "handshake", c.peer.c_str());
      drop(c, "malformed frame");
    }
  }
  if (!c.dead) c.in.erase(0, pos);
}

bool StoreServerImpl::handle_auth(Conn& c, std::string_view body) {
  FrameReader r(body);
  uint8_t op = 0;
  std::string_view client_nonce, mac;
  if (!r.get_u8(&op) || op != static_cast<uint8_t>(Op::kAuthResponse) ||
      !r.get_raw(kNonceBytes, &client_nonce) || !r.get_raw(kMacBytes, &mac) || !r.at_end()) {
    return false;
  }
  if (!proof_equal(mac, client_proof(token_, c.server_nonce))) {
    GREX_WARN("bootstrap", "store %s: rejected %s: wrong job token", where_.c_str(), c.peer.c_str());
    c.close_after_flush = true;
    send_frame(c, FrameWriter(Op::kAuthRejected).take());
    return true;
  }
  c.authed = true;
  --unauthed_;
  clients_.fetch_add(1, std::memory_order_acq_rel);
  FrameWriter w(Op::kAuthOk);
  w.put_raw(server_proof(token_, client_nonce));
  send_frame(c, w.take());
  c.session = Session(token_, c.server_nonce, client_nonce, /*is_server=*/true);  // every later frame is tagged
  return true;
}

bool StoreServerImpl::handle_request(Conn& c, std::string_view body) {
  Request q;
  if (!parse_request(body, &q)) return false;
  switch (q.op) {
    case Op::kSet: {
      if (!room_for(c, q.key, q.value.size())) return true;
      auto [it, created] = kv_.try_emplace(std::string(q.key));
      stored_bytes_ += q.value.size() + (created ? q.key.size() : 0);
      stored_bytes_ -= it->second.size();
      it->second.assign(q.value);
      send_frame(c, ok_frame());
      if (created) key_created(it->first);
      return true;
    }
    case Op::kGet:
    case Op::kWait: {
      if (q.timeout_ms < 0) {
        reply_error(c, Errc::kInvalidArgument, std::string(q.op == Op::kGet ? "GET" : "WAIT") +
                                                   " with a negative timeout (" + std::to_string(q.timeout_ms) + " ms)");
        return true;
      }
      std::vector<std::string> keys;
      if (q.op == Op::kGet) keys.emplace_back(q.key);
      for (std::string_view k : q.keys) keys.emplace_back(k);
      park(c, q.op, std::move(keys), q.timeout_ms);
      return true;
    }
    case Op::kAdd:
      return handle_add(c, q.key, q.delta);
    case Op::kErase: {
      // Waiters are not woken: a wait ends when its keys exist, and one
      // already counted as there stays counted.
      int64_t erased = 0;
      for (std::string_view k : q.keys)
        if (auto it = kv_.find(std::string(k)); it != kv_.end()) {
          stored_bytes_ -= it->first.size() + it->second.size();
          kv_.erase(it);
          ++erased;
        }
      FrameWriter w(Op::kReplyInt);
      w.put_i64(erased);
      send_frame(c, w.take());
      return true;
    }
    case Op::kCheck: {
      FrameWriter w(Op::kReplyBits);
      w.put_u32(static_cast<uint32_t>(q.keys.size()));
      for (std::string_view k : q.keys) w.put_u8(kv_.count(std::string(k)) != 0 ? 1 : 0);
      send_frame(c, w.take());
      return true;
    }
    default:
      return false;
  }
}

bool StoreServerImpl::handle_add(Conn& c, std::string_view key, int64_t delta) {
  if (kv_.count(std::string(key)) == 0 && !room_for(c, key, 20)) return true;
  auto [it, created] = kv_.try_emplace(std::string(key), "0");
  if (created) stored_bytes_ += key.size() + 1;
  int64_t cur = 0;
  const std::string& v = it->second;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), cur);
  if (ec != std::errc() || p != v.data() + v.size()) {
    reply_error(c, Errc::kInvalidArgument, "ADD on key '" + it->first + "': its value is not an integer");
    return true;
  }
  int64_t next = 0;
  if (__builtin_add_overflow(cur, delta, &next)) {
    reply_error(c, Errc::kInvalidArgument, "ADD on key '" + it->first + "' overflows int64");
    return true;
  }
  stored_bytes_ -= it->second.size();
  it->second = std::to_string(next);
  stored_bytes_ += it->second.size();
  FrameWriter w(Op::kReplyInt);
  w.put_i64(next);
  send_frame(c, w.take());
  if (created) key_created(it->first);
  return true;
}

// The key space is bounded: a SET or a new ADD key that would pass
// kMaxKeys or kMaxStoredBytes gets an error (the store keeps serving).
bool StoreServerImpl::room_for(Conn& c, std::string_view key, size_t value_bytes) {
  auto it = kv_.find(std::string(key));
  const size_t now = stored_bytes_ - (it != kv_.end() ? it->second.size() : 0);
  const bool new_key = it == kv_.end();
  if ((new_key && kv_.size() >= kMaxKeys) || now + value_bytes + (new_key ? key.size() : 0) > kMaxStoredBytes) {
    reply_error(c, Errc::kNoMemory, "the store is full (" + std::to_string(kv_.size()) + " keys, " +
                                        std::to_string(stored_bytes_ >> 20) + " MiB)");
    return false;
  }
  return true;
}

void StoreServerImpl::park(Conn& c, Op op, std::vector<std::string> keys, int64_t timeout_ms) {
  c.wait_op = op;
  c.wait_keys = std::move(keys);
  c.wait_missing = 0;
  for (const auto& k : c.wait_keys) c.wait_missing += kv_.count(k) == 0 ? 1 : 0;
  if (c.wait_missing == 0) {
    finish_wait(c, /*timed_out=*/false);
    return;
  }
  if (timeout_ms == 0) {
    finish_wait(c, /*timed_out=*/true);
    return;
  }
  c.waiting = true;
  bool forever = timeout_ms < 0 || timeout_ms > kForeverMs;
  c.wait_deadline_ns = forever ? UINT64_MAX : now_ns() + static_cast<uint64_t>(timeout_ms) * 1'000'000ull;
  for (const auto& k : c.wait_keys)
    if (kv_.count(k) == 0) watchers_[k].push_back(c.id);
}

void StoreServerImpl::finish_wait(Conn& c, bool timed_out) {
  if (c.waiting) {
    if (timed_out) unwatch(c);
    resumed_ = true;  // requests queued behind this wait can go now
  }
  c.waiting = false;
  if (timed_out) {
    send_frame(c, FrameWriter(Op::kReplyTimeout).take());
  } else if (c.wait_op == Op::kGet) {
    FrameWriter w(Op::kReplyValue);
    w.put_str(kv_[c.wait_keys.front()]);
    send_frame(c, w.take());
  } else {
    send_frame(c, ok_frame());
  }
  c.wait_keys.clear();
}

void StoreServerImpl::unwatch(Conn& c) {
  for (const auto& k : c.wait_keys) {
    auto it = watchers_.find(k);
    if (it == watchers_.end()) continue;
    auto& ids = it->second;
    ids.erase(std::remove(ids.begin(), ids.end(), c.id), ids.end());
    if (ids.empty()) watchers_.erase(it);
  }
}

void StoreServerImpl::key_created(const std::string& key) {
  auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  std::vector<uint64_t> ids = std::move(it->second);
  watchers_.erase(it);
  for (uint64_t id : ids) {
    auto c = conns_.find(id);
    if (c == conns_.end() || !c->second->waiting) continue;
    Conn& w = *c->second;
    if (--w.wait_missing == 0) finish_wait(w, /*timed_out=*/false);
  }
}

void StoreServerImpl::expire(uint64_t now) {
  for (auto& [id, c] : conns_) {
    if (c->dead) continue;
    if (!c->authed && now >= c->auth_deadline_ns) drop(*c, "no handshake in time");
    else if (c->waiting && now >= c->wait_deadline_ns) finish_wait(*c, /*timed_out=*/true);
  }
}

void StoreServerImpl::reply_error(Conn& c, Errc code, const std::string& msg) {
  FrameWriter w(Op::kReplyError);
  w.put_u32(static_cast<uint32_t>(code));
  w.put_str(msg);
  send_frame(c, w.take());
}

}  // namespace grex::detail::store
