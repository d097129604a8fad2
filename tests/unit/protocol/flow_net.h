// SPDX-License-Identifier: Apache-2.0
// Two reliable flows over a simulated network (the FaultInjector the drivers
// use on each direction): the harness of the protocol tests.
#pragma once

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "transport/fault_injector.h"
#include "transport/reliable_flow.h"

namespace grex::reliable::test {

class TestRegion final : public MemoryRegion {
 public:
  TestRegion(void* a, size_t n, uint32_t id) : MemoryRegion(a, n, MemoryDomain::kHost) {
    lkey_ = id;
    remote_ = RemoteRegion{reinterpret_cast<uint64_t>(a), n, id, 0};
  }
};

class Regions final : public RegionTable {
 public:
  uint8_t* resolve(uint32_t rkey, uint64_t off, uint64_t len) noexcept override {
    auto it = map.find(rkey);
    if (it == map.end() || off > it->second->length() || len > it->second->length() - off) return nullptr;
    return static_cast<uint8_t*>(it->second->addr()) + off;
  }
  std::map<uint32_t, TestRegion*> map;
};

// One direction of the simulated network.
struct Link {
  FaultInjector faults;
  uint64_t latency_ns = 5'000;
  struct Pkt {
    uint64_t at;
    std::vector<uint8_t> bytes;
  };
  std::deque<Pkt> wire;
  std::vector<std::pair<uint32_t, std::vector<uint8_t>>> held;  // (packets still to overtake, bytes)
  uint64_t malformed = 0;
  uint64_t advert_packets = 0, adverts = 0;  // advert packets offered to the link, receives they name
  std::set<uint32_t> drop_once;  // data psns whose first transmission is lost
  bool stamp_seq = false;  // number every packet as the dpdk driver does (wire::Header::seq)
  uint64_t seq = 0;

  void send(std::vector<uint8_t> bytes, uint64_t now) {
    if (wire::Header a; wire::decode(bytes.data(), bytes.size(), 1 << 16, &a) == wire::Reject::kNone &&
                        a.type == wire::Type::kData && (a.flags & wire::kFlagAdvert) != 0) {
      ++advert_packets;
      adverts += 1 + a.payload_len / wire::kAdvertEntryBytes;
    }
    FaultDecision d = faults.next(static_cast<uint32_t>(bytes.size()));
    if (d.drop) return;
    if (!drop_once.empty()) {
      wire::Header h;
      if (wire::decode(bytes.data(), bytes.size(), 1 << 16, &h) == wire::Reject::kNone &&
          h.type == wire::Type::kData && drop_once.erase(h.psn) == 1)
        return;
    }
    if (d.corrupt) bytes[d.corrupt_bit / 8] ^= static_cast<uint8_t>(1u << (d.corrupt_bit % 8));
    for (auto it = held.begin(); it != held.end();) {
      if (--it->first == 0) {
        wire.push_back({now + latency_ns, std::move(it->second)});
        it = held.erase(it);
      } else {
        ++it;
      }
    }
    if (d.duplicate) wire.push_back({now + latency_ns, bytes});
    if (d.delay > 0)
      held.emplace_back(d.delay, std::move(bytes));
    else
      wire.push_back({now + latency_ns, std::move(bytes)});
  }
  void flush_held(uint64_t now) {  // nothing more to overtake them: let them go
    for (auto& h : held) wire.push_back({now + latency_ns, std::move(h.second)});
    held.clear();
  }
};

struct Net {
  Config cfg;
  Regions regions_a, regions_b;
  std::unique_ptr<Flow> a, b;
  Link ab, ba;
  uint64_t now = 1'000'000;
  uint64_t step_ns = 1'000;

  explicit Net(Config c, FaultConfig f = {}) : cfg(c) {
    a = std::make_unique<Flow>(cfg, 1, 2, 1, &regions_a);
    b = std::make_unique<Flow>(cfg, 2, 1, 0, &regions_b);
    FaultConfig fb = f;
    fb.seed = f.seed + 1000;
    ab.faults = FaultInjector(f);
    ba.faults = FaultInjector(fb);
  }
  static void pump(Flow& f, Link& l, uint64_t now) {
    TxPacket pk[64];
    size_t n = f.poll_tx(pk, now);
    for (size_t i = 0; i < n; ++i) {
      std::vector<uint8_t> bytes(wire::kHeaderBytes + pk[i].hdr.payload_len);
      if (pk[i].hdr.payload_len > 0)
        std::memcpy(bytes.data() + wire::kHeaderBytes, pk[i].payload, pk[i].hdr.payload_len);
      if (l.stamp_seq) pk[i].hdr.seq = ++l.seq;
      wire::encode(pk[i].hdr, bytes.data(), pk[i].payload);
      l.send(std::move(bytes), now);
    }
    if (n == 0) l.flush_held(now);
  }
  // `rx_gap_ns`: how long `f`'s owner had not read its ring (Flow::on_packet).
  void deliver(Link& l, Flow& f, uint64_t rx_gap_ns = 0) {
    while (!l.wire.empty() && l.wire.front().at <= now) {
      auto& p = l.wire.front().bytes;
      wire::Header h;
      if (wire::decode(p.data(), p.size(), cfg.max_payload, &h) == wire::Reject::kNone)
        f.on_packet(h, p.data() + wire::kHeaderBytes, now, rx_gap_ns);
      else
        ++l.malformed;
      l.wire.pop_front();
    }
  }
  void step() {
    now += step_ns;
    pump(*a, ab, now);
    pump(*b, ba, now);
    deliver(ab, *b);
    deliver(ba, *a);
  }
  // Steps until `want_a` and `want_b` completions were collected (or the budget ends).
  bool run(size_t want_a, size_t want_b, std::vector<Completion>* ca, std::vector<Completion>* cb,
           size_t max_steps = 20'000'000) {
    Completion buf[64];
    for (size_t s = 0; s < max_steps; ++s) {
      step();
      size_t n = a->poll_completions(buf);
      ca->insert(ca->end(), buf, buf + n);
      n = b->poll_completions(buf);
      cb->insert(cb->end(), buf, buf + n);
      if (ca->size() >= want_a && cb->size() >= want_b) return true;
    }
    return false;
  }
};

inline uint8_t pattern(size_t msg, size_t i) { return static_cast<uint8_t>(msg * 131 + i * 7 + (i >> 9)); }

}  // namespace grex::reliable::test
