// SPDX-License-Identifier: Apache-2.0
// HybridDevice: endpoints of several drivers behind one Device (hybrid.h).
#include "transport/hybrid.h"

#include <algorithm>
#include <charconv>

namespace grex::detail {
namespace {

// One registration per part; `delta` is where this region starts inside the
// part's (a part's cache may answer with a registration that contains it).
class HybridRegion final : public MemoryRegion {
 public:
  HybridRegion(void* addr, size_t length, MemoryDomain domain) : MemoryRegion(addr, length, domain) {}
  ~HybridRegion() override {
    for (size_t i = parts_used; i-- > 0;) {
      if (part[i] == nullptr) continue;
      if (i == 0 && allocated)
        (void)dev[0]->free(part[0]);
      else
        (void)dev[i]->deregister_memory(part[i]);
    }
  }
  void set_remote() noexcept {
    RemoteRegion r = part[0]->remote();
    r.addr += delta[0];
    r.length = length_;
    remote_ = r;
  }
  std::array<MemoryRegion*, HybridDevice::kMaxParts> part{};
  std::array<Device*, HybridDevice::kMaxParts> dev{};
  std::array<uint64_t, HybridDevice::kMaxParts> delta{};
  size_t parts_used = 0;
  bool allocated = false;  // part[0] came from dev[0]->allocate()
};

// The endpoint of one part, given hybrid regions: each request goes on with
// the part's region and offset.
class HybridEndpoint final : public Endpoint {
 public:
  HybridEndpoint(int peer, size_t part, std::unique_ptr<Endpoint> inner)
      : Endpoint(peer), part_(part), inner_(std::move(inner)) {}

  PostResult post_send(std::span<const SendRequest> reqs) noexcept override {
    return forward(reqs, [this](std::span<const SendRequest> r) { return inner_->post_send(r); });
  }
  PostResult post_recv(std::span<const RecvRequest> reqs) noexcept override {
    return forward(reqs, [this](std::span<const RecvRequest> r) { return inner_->post_recv(r); });
  }
  // One-sided requests carry a peer's remote(), which is part 0's.
  PostResult post_write(std::span<const WriteRequest> reqs) noexcept override {
    if (part_ != 0) return {0, Errc::kNotSupported};
    return forward(reqs, [this](std::span<const WriteRequest> r) { return inner_->post_write(r); });
  }
  PostResult post_read(std::span<const ReadRequest> reqs) noexcept override {
    if (part_ != 0) return {0, Errc::kNotSupported};
    return forward(reqs, [this](std::span<const ReadRequest> r) { return inner_->post_read(r); });
  }
  Result<void*> map(const RemoteRegion& remote) override {
    if (part_ != 0)
      return Error(Errc::kNotSupported, "map: " + inner_->describe_peer() + " is on another host");
    return inner_->map(remote);
  }
  bool peer_failed() const noexcept override { return inner_->peer_failed(); }
  void announce_abort(int culprit) noexcept override { inner_->announce_abort(culprit); }
  int peer_abort_culprit() const noexcept override { return inner_->peer_abort_culprit(); }
  std::string describe_peer() const override { return inner_->describe_peer(); }

 private:
  // Requests are copied in batches of kBatch onto the stack (no allocation
  // on the data path), their regions swapped for the part's.
  static constexpr size_t kBatch = 16;
  template <class Req, class Post>
  PostResult forward(std::span<const Req> reqs, Post post) noexcept {
    size_t done = 0;
    while (done < reqs.size()) {
      Req buf[kBatch];
      const size_t m = std::min(kBatch, reqs.size() - done);
      for (size_t i = 0; i < m; ++i) {
        buf[i] = reqs[done + i];
        if (buf[i].region != nullptr) {
          const auto* h = static_cast<const HybridRegion*>(buf[i].region);
          buf[i].region = h->part[part_];
          buf[i].offset += h->delta[part_];
        }
      }
      PostResult r = post(std::span<const Req>(buf, m));
      done += r.count;
      if (r.count < m || r.error != Errc::kOk) return {done, r.error};
    }
    return {done, Errc::kOk};
  }

  size_t part_;
  std::unique_ptr<Endpoint> inner_;
};

}  // namespace

HybridDevice::HybridDevice(std::vector<std::unique_ptr<Device>> parts, std::vector<int> route, int rank)
    : parts_(std::move(parts)), route_(std::move(route)), rank_(rank) {
  // What every pair can do: message passing, whatever the part. One-sided
  // operations, load/store and shared allocations hold for part 0's pairs
  // only (hybrid.h), so not here.
  caps_.send_recv = true;
  caps_.gpu_memory = true;
  caps_.zero_copy_send = true;
  caps_.max_message_bytes = UINT64_MAX;
  caps_.max_post_batch = UINT32_MAX;
  caps_.queue_depth = UINT32_MAX;
  for (const auto& p : parts_) {
    const Capabilities& c = p->capabilities();
    caps_.driver += (caps_.driver.empty() ? "" : "+") + c.driver;
    caps_.device_name += (caps_.device_name.empty() ? "" : "+") + c.device_name;
    caps_.send_recv = caps_.send_recv && c.send_recv;
    caps_.gpu_memory = caps_.gpu_memory && c.gpu_memory;
    caps_.zero_copy_send = caps_.zero_copy_send && c.zero_copy_send;
    caps_.max_message_bytes = std::min(caps_.max_message_bytes, c.max_message_bytes);
    caps_.max_post_batch = std::min(caps_.max_post_batch, c.max_post_batch);
    caps_.queue_depth = std::min(caps_.queue_depth, c.queue_depth);
    caps_.registration_pins_pages = caps_.registration_pins_pages || c.registration_pins_pages;
    if (c.link_speed_mbps != 0) caps_.link_speed_mbps = c.link_speed_mbps;
    if (c.mtu_bytes != 0) caps_.mtu_bytes = c.mtu_bytes;
  }
}

HybridDevice::~HybridDevice() {
  // The regions deregister from the parts, which must still be there.
  release_all_registrations();
}

Result<std::unique_ptr<HybridDevice>> HybridDevice::create(std::vector<std::unique_ptr<Device>> parts,
                                                           std::vector<int> route, int rank) {
  if (parts.empty() || parts.size() > kMaxParts)
    return Error(Errc::kInvalidArgument, "hybrid device: " + std::to_string(parts.size()) + " parts (1.." +
                                             std::to_string(kMaxParts) + " allowed)");
  for (size_t p = 0; p < route.size(); ++p)
    if (static_cast<int>(p) != rank && (route[p] < 0 || static_cast<size_t>(route[p]) >= parts.size()))
      return Error(Errc::kInvalidArgument, "hybrid device: rank " + std::to_string(p) + " routed to part " +
                                               std::to_string(route[p]));
  return std::unique_ptr<HybridDevice>(new HybridDevice(std::move(parts), std::move(route), rank));
}

Result<std::string> HybridDevice::local_address() {
  std::string out = "hybrid:";
  for (const auto& p : parts_) {
    std::string a = GREX_TRY(p->local_address());
    out += std::to_string(a.size()) + ":" + a;
  }
  return out;
}

Result<std::unique_ptr<Endpoint>> HybridDevice::connect(int peer, std::string_view peer_address) {
  auto bad = [&](const std::string& why) {
    return Error(Errc::kProtocol, "hybrid address of rank " + std::to_string(peer) + ": " + why).rank(rank_).peer(peer);
  };
  if (peer < 0 || static_cast<size_t>(peer) >= route_.size() || peer == rank_)
    return Error(Errc::kInvalidArgument, "cannot connect to rank " + std::to_string(peer)).rank(rank_);
  std::string_view a = peer_address;
  if (a.substr(0, 7) != "hybrid:") return bad("no 'hybrid:' prefix");
  a.remove_prefix(7);
  const auto want = static_cast<size_t>(route_[static_cast<size_t>(peer)]);
  for (size_t i = 0; i < parts_.size(); ++i) {
    size_t len = 0;
    size_t colon = a.find(':');
    if (colon == std::string_view::npos) return bad("part " + std::to_string(i) + " missing");
    auto [end, ec] = std::from_chars(a.data(), a.data() + colon, len);
    if (ec != std::errc() || end != a.data() + colon || len > a.size() - colon - 1)
      return bad("part " + std::to_string(i) + " has a bad length");
    std::string_view part = a.substr(colon + 1, len);
    a.remove_prefix(colon + 1 + len);
    if (i != want) continue;
    auto ep = GREX_TRY(parts_[i]->connect(peer, part));
    return std::unique_ptr<Endpoint>(new HybridEndpoint(peer, i, std::move(ep)));
  }
  return bad("part " + std::to_string(want) + " missing");
}

Result<std::unique_ptr<MemoryRegion>> HybridDevice::do_register(void* addr, size_t length, MemoryDomain domain) {
  auto r = std::make_unique<HybridRegion>(addr, length, domain);
  for (size_t i = 0; i < parts_.size(); ++i) {
    MemoryRegion* m = GREX_TRY(parts_[i]->register_memory(addr, length, domain));  // r's destructor undoes the others
    r->part[i] = m;
    r->dev[i] = parts_[i].get();
    r->delta[i] = static_cast<uint64_t>(static_cast<uint8_t*>(addr) - static_cast<uint8_t*>(m->addr()));
    r->parts_used = i + 1;
  }
  r->set_remote();
  return std::unique_ptr<MemoryRegion>(std::move(r));
}

Result<MemoryRegion*> HybridDevice::allocate(size_t length) {
  MemoryRegion* first = GREX_TRY(parts_[0]->allocate(length));
  auto r = std::make_unique<HybridRegion>(first->addr(), first->length(), first->domain());
  r->part[0] = first;
  r->dev[0] = parts_[0].get();
  r->allocated = true;
  r->parts_used = 1;
  for (size_t i = 1; i < parts_.size(); ++i) {
    MemoryRegion* m = GREX_TRY(parts_[i]->register_memory(first->addr(), first->length(), first->domain()));
    r->part[i] = m;
    r->dev[i] = parts_[i].get();
    r->delta[i] = static_cast<uint64_t>(static_cast<uint8_t*>(first->addr()) - static_cast<uint8_t*>(m->addr()));
    r->parts_used = i + 1;
  }
  r->set_remote();
  MemoryRegion* raw = adopt_registration(std::move(r));
  allocated_.insert(raw);
  return raw;
}

Result<void> HybridDevice::free(MemoryRegion* region) {
  if (allocated_.erase(region) == 0)
    return Error(Errc::kNotFound, "free: region was not returned by allocate()").device(caps_.driver);
  return deregister_memory(region);  // the last reference frees part 0's memory
}

size_t HybridDevice::poll(std::span<Completion> out) noexcept {
  size_t n = 0;
  const size_t k = parts_.size();
  for (size_t j = 0; j < k && n < out.size(); ++j) n += parts_[(next_part_ + j) % k]->poll(out.subspan(n));
  next_part_ = next_part_ + 1 == k ? 0 : next_part_ + 1;  // no part gets the whole span every time
  return n;
}

std::vector<std::pair<std::string, uint64_t>> HybridDevice::counters() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& p : parts_)
    for (auto& [name, v] : p->counters())
      out.emplace_back(name.rfind("peer.", 0) == 0 ? name : p->capabilities().driver + "." + name, v);
  return out;
}

}  // namespace grex::detail
