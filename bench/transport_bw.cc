// SPDX-License-Identifier: Apache-2.0
// Transport-level goodput and latency for any backend (the perftest of the
// Device/Endpoint API): rank 0 keeps `depth` sends of `size` bytes in flight to
// rank 1, which keeps as many receives posted; then an 8-byte ping-pong.
// Run under grex-run:  grex-run -n 2 --backend dpdk -- transport_bw -s 1M -t 16 -d 3
// Output (rank 0): "bw <bytes> <gbit/s> <msgs/s> <in flight>" per size, "lat 8 <us half-rtt>"
// and "xlat 8 <us>" (both send 8 bytes at once and wait for the other's: one exchange).
// -w measures one-sided writes instead (ib_write_bw / ib_write_lat style); -d 0 skips goodput.
#include <grex/bootstrap.h>
#include <grex/transport.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/config.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::vector<size_t> sizes;
  int depth = 16;
  size_t max_inflight = 0;  // -B: bytes in flight at most (0: depth x size)
  bool writes = false;      // -w: one-sided writes (perftest ib_write_bw / ib_write_lat)
  double seconds = 2.0;
  int lat_iters = 20000;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "transport_bw: %s\n", what.c_str());
  std::exit(1);
}

template <class T>
T check(grex::Result<T> r, const char* what) {
  if (!r) die(std::string(what) + ": " + r.error().message());
  return std::move(r).value();
}

void drain(grex::Device& dev, size_t want, size_t* got) {
  // Not a local array: Completion's member initialisers would clear 2.5 KB on every poll.
  static grex::Completion cs[64];
  size_t n = dev.poll(cs);
  for (size_t i = 0; i < n; ++i)
    if (cs[i].status != grex::Status::kSuccess) die(std::string("completion failed: ") + std::string(grex::status_name(cs[i].status)));
  *got += n;
  (void)want;
}

// -w: rank 0 writes into rank 1's region, `depth` writes in flight, for
// `seconds` per size (the target does nothing: one-sided, as ib_write_bw).
// Latency as ib_write_lat: each side writes 8 bytes into the other and spins
// on its own buffer until the peer's value lands.
void run_writes(const Args& a, grex::Bootstrap& bs, grex::Device& dev, grex::Endpoint& ep, grex::MemoryRegion* mr,
                uint8_t* buf, int me) {
  grex::RemoteRegion mine = mr->remote();
  auto all = check(bs.all_gather("tbw/region", std::string(reinterpret_cast<char*>(&mine), sizeof(mine))), "region");
  grex::RemoteRegion theirs;
  std::memcpy(&theirs, all[static_cast<size_t>(1 - me)].data(), sizeof(theirs));
  grex::Completion cs[64];
  for (size_t size : a.sizes) {
    int depth = a.depth;
    if (a.max_inflight > 0 && size > 0)
      depth = static_cast<int>(std::clamp<size_t>(a.max_inflight / size, 1, static_cast<size_t>(a.depth)));
    // The target only polls (a DPDK target moves the bytes in its poll), until
    // a zero-byte message says the writer is done.
    grex::RecvRequest fin{mr, 0, 0, 9, 0};
    if (me == 1 && ep.post_recv({&fin, 1}).count != 1) die("post_recv");
    check(bs.barrier("tbw/w" + std::to_string(size)), "barrier");
    if (me == 1) {
      for (size_t got = 0; got == 0;) {
        size_t n = dev.poll(cs);
        for (size_t i = 0; i < n; ++i) got += cs[i].op == grex::Op::kRecv;
      }
    }
    if (me == 0) {
      size_t posted = 0, done = 0;
      std::vector<grex::WriteRequest> batch(static_cast<size_t>(depth));
      auto t0 = Clock::now();
      auto end = t0 + std::chrono::duration<double>(a.seconds);
      while (true) {
        bool more = Clock::now() < end;
        // Refill the window in one batch. Every write reads and lands at
        // offset 0, as ib_write_bw does: buffers stay cache-resident.
        size_t k = 0;
        while (more && k < batch.size() && posted + k - done < static_cast<size_t>(depth)) {
          batch[k] = grex::WriteRequest{mr, 0, size, theirs, 0, 0, false, posted + k};
          ++k;
        }
        if (k > 0) posted += ep.post_write({batch.data(), k}).count;
        size_t n = dev.poll(cs);
        for (size_t i = 0; i < n; ++i)
          if (cs[i].status != grex::Status::kSuccess) die("write failed: " + std::string(grex::status_name(cs[i].status)));
        done += n;
        if (!more && done == posted) break;
      }
      double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      grex::SendRequest f{mr, 0, 0, 9, 0};
      if (ep.post_send({&f, 1}).count != 1) die("post_send");
      for (size_t got = 0; got == 0;) {
        size_t n = dev.poll(cs);
        for (size_t i = 0; i < n; ++i) got += cs[i].op == grex::Op::kSend;
      }
      std::printf("bw %zu %.3f %.0f %d\n", size, static_cast<double>(size * done) * 8 / secs / 1e9,
                  static_cast<double>(done) / secs, depth);
      std::fflush(stdout);
    }
    check(bs.barrier("tbw/w" + std::to_string(size) + "/done"), "barrier");
  }
  // Latency: buf[0..8) is where the peer's value lands, buf[64..72) our source.
  check(bs.barrier("tbw/wlat"), "barrier");
  auto* landing = reinterpret_cast<uint64_t*>(buf);
  auto* source = reinterpret_cast<uint64_t*>(buf + 64);
  *landing = 0;
  check(bs.barrier("tbw/wlat2"), "barrier");
  // As ib_write_lat: reap our write's completion, then spin on memory.
  // (A verbs write lands without the target polling; shm and dpdk move the
  // bytes in poll(), so the spin polls too, every 64 loads.)
  size_t completed = 0;
  auto wait_for = [&](uint64_t v) {
    for (uint32_t spins = 0; __atomic_load_n(landing, __ATOMIC_ACQUIRE) != v; ++spins)
      if ((spins & 63) == 0) completed += dev.poll(cs);
  };
  auto reap = [&](size_t want) {
    while (completed < want) completed += dev.poll(cs);
  };
  std::vector<double> half_rtt_us;
  half_rtt_us.reserve(static_cast<size_t>(a.lat_iters));
  auto t0 = Clock::now();
  for (uint64_t i = 1; i <= static_cast<uint64_t>(a.lat_iters); ++i) {
    auto t = Clock::now();
    if (me == 1) wait_for(i);
    *source = i;
    grex::WriteRequest w{mr, 64, 8, theirs, 0, 0, false, i};
    if (ep.post_write({&w, 1}).count != 1) die("post_write");
    reap(i);
    if (me == 0) {
      wait_for(i);
      half_rtt_us.push_back(std::chrono::duration<double>(Clock::now() - t).count() / 2 * 1e6);
    }
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  for (int i = 0; i < 1000; ++i) dev.poll(cs);  // reap the last completions
  if (me == 0 && !half_rtt_us.empty()) {
    std::sort(half_rtt_us.begin(), half_rtt_us.end());
    // mean, then the median (perftest's t_avg and t_typical)
    std::printf("lat 8 %.2f %.2f\n", secs / a.lat_iters / 2 * 1e6, half_rtt_us[half_rtt_us.size() / 2]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "-s" && i + 1 < argc) {
      a.sizes.push_back(check(grex::config::parse_size(argv[++i], "-s"), "-s"));
    } else if (k == "-t" && i + 1 < argc) {
      a.depth = std::atoi(argv[++i]);
    } else if (k == "-B" && i + 1 < argc) {
      a.max_inflight = check(grex::config::parse_size(argv[++i], "-B"), "-B");
    } else if (k == "-w") {
      a.writes = true;
    } else if (k == "-d" && i + 1 < argc) {
      a.seconds = std::atof(argv[++i]);
    } else if (k == "-l" && i + 1 < argc) {
      a.lat_iters = std::atoi(argv[++i]);
    } else {
      die("usage: transport_bw [-w] [-s SIZE]... [-t DEPTH] [-B MAX_BYTES_IN_FLIGHT] [-d SECONDS] [-l LAT_ITERS]");
    }
  }
  if (a.sizes.empty()) a.sizes = {8192, 65536, 1 << 20, 4 << 20};
  auto cfg = check(grex::bootstrap_from_env(), "bootstrap");
  std::shared_ptr<grex::Bootstrap> bs = check(grex::Bootstrap::create(cfg), "bootstrap");
  if (bs->world_size() != 2) die("run with exactly 2 ranks");
  const int me = bs->rank(), peer = 1 - me;
  grex::DeviceOptions o;
  o.driver = grex::config::env_or_empty("GREX_BACKEND");
  if (o.driver.empty()) o.driver = "shm";
  o.rank = me;
  o.world_size = 2;
  o.queue_depth = 4096;
  auto ids = check(bs->all_gather("tbw/id", std::to_string(getpid())), "id");
  o.job_id = "tbw" + ids[0];
  auto dev = check(grex::Device::open(o), "open");
  auto addrs = check(bs->all_gather("tbw/addr", check(dev->local_address(), "address")), "addresses");
  auto ep = check(dev->connect(peer, addrs[static_cast<size_t>(peer)]), "connect");
  size_t need = 0;  // the largest size x its messages in flight
  for (size_t s : a.sizes) {
    size_t d = static_cast<size_t>(a.depth);
    if (a.max_inflight > 0 && s > 0) d = std::clamp<size_t>(a.max_inflight / s, 1, d);
    need = std::max(need, s * d);
  }
  std::vector<uint8_t> buf(need + 128, 1);
  grex::MemoryRegion* mr = check(dev->register_memory(buf.data(), buf.size()), "register");
  check(bs->barrier("tbw/ready"), "barrier");

  if (a.writes) {
    run_writes(a, *bs, *dev, *ep, mr, buf.data(), me);
    a.sizes.clear();
    a.lat_iters = 0;
  }
  if (a.seconds <= 0) a.sizes.clear();  // -d 0: the latencies only
  const int max_depth = a.depth;
  for (size_t size : a.sizes) {
    // Messages in flight: -t, fewer where -B caps the bytes (at least one).
    a.depth = max_depth;
    if (a.max_inflight > 0 && size > 0)
      a.depth = static_cast<int>(std::clamp<size_t>(a.max_inflight / size, 1, static_cast<size_t>(max_depth)));
    // Both sides agree on the message count: as many as rank 0 manages in
    // `seconds`, learned from a short calibration run through the store.
    size_t count = 0;
    if (me == 0) {
      double per = 0;
      {
        // Long enough to get past start-up effects (first-touch faults,
        // cold caches): 64 MiB or 65536 messages, at least 4 windows.
        size_t n = std::max<size_t>(4 * static_cast<size_t>(a.depth),
                                    std::min<size_t>(65536, (size_t{64} << 20) / std::max<size_t>(size, 1)));
        check(bs->all_gather("tbw/cal" + std::to_string(size), std::to_string(n)), "cal");
        auto t0 = Clock::now();
        size_t posted = 0, done = 0;
        while (done < n) {
          while (posted < n && posted - done < static_cast<size_t>(a.depth)) {
            grex::SendRequest r{mr, (posted % static_cast<size_t>(a.depth)) * size, size, 1, posted};
            if (ep->post_send({&r, 1}).count == 0) break;
            ++posted;
          }
          drain(*dev, n, &done);
        }
        per = std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(n);
      }
      count = std::max<size_t>(32, static_cast<size_t>(a.seconds / std::max(per, 1e-9)));
      check(bs->all_gather("tbw/n" + std::to_string(size), std::to_string(count)), "count");
    } else {
      auto cal = check(bs->all_gather("tbw/cal" + std::to_string(size), ""), "cal");
      size_t n = std::stoul(cal[0]);
      size_t posted = 0, done = 0;
      while (done < n) {
        while (posted < n && posted - done < static_cast<size_t>(a.depth)) {
          grex::RecvRequest r{mr, (posted % static_cast<size_t>(a.depth)) * size, size, 1, posted};
          if (ep->post_recv({&r, 1}).count == 0) break;
          ++posted;
        }
        drain(*dev, n, &done);
      }
      auto nn = check(bs->all_gather("tbw/n" + std::to_string(size), ""), "count");
      count = std::stoul(nn[0]);
    }
    check(bs->barrier("tbw/go" + std::to_string(size)), "barrier");
    auto t0 = Clock::now();
    size_t posted = 0, done = 0;
    while (done < count) {
      while (posted < count && posted - done < static_cast<size_t>(a.depth)) {
        uint64_t off = (posted % static_cast<size_t>(a.depth)) * size;
        bool okp = me == 0 ? ep->post_send({std::array<grex::SendRequest, 1>{{{mr, off, size, 1, posted}}}}).count == 1
                           : ep->post_recv({std::array<grex::RecvRequest, 1>{{{mr, off, size, 1, posted}}}}).count == 1;
        if (!okp) break;
        ++posted;
      }
      drain(*dev, count, &done);
    }
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    auto times = check(bs->all_gather("tbw/t" + std::to_string(size), std::to_string(s)), "times");
    double slow = std::max(std::stod(times[0]), std::stod(times[1]));
    if (me == 0)
      std::printf("bw %zu %.2f %.0f %d\n", size, static_cast<double>(size * count) * 8 / slow / 1e9,
                  static_cast<double>(count) / slow, a.depth);
    std::fflush(stdout);
  }

  // 8-byte ping-pong: half round trip.
  check(bs->barrier("tbw/lat"), "barrier");
  auto t0 = Clock::now();
  for (int i = 0; i < a.lat_iters; ++i) {  // (write mode measured its own)
    size_t done = 0;
    grex::RecvRequest rr{mr, 0, 8, 2, 1};
    if (ep->post_recv({&rr, 1}).count != 1) die("post_recv");
    if (me == 0) {
      grex::SendRequest sr{mr, 64, 8, 2, 2};
      if (ep->post_send({&sr, 1}).count != 1) die("post_send");
      while (done < 2) drain(*dev, 2, &done);
    } else {
      while (done < 1) drain(*dev, 1, &done);
      grex::SendRequest sr{mr, 64, 8, 2, 2};
      if (ep->post_send({&sr, 1}).count != 1) die("post_send");
      while (done < 2) drain(*dev, 2, &done);
    }
  }
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (me == 0 && a.lat_iters > 0) std::printf("lat 8 %.2f\n", s / a.lat_iters / 2 * 1e6);
  // 8-byte ping-pong with the receives posted ahead, as ib_send_lat does:
  // two receives stay posted, each re-posted as soon as it completed, and a
  // send's completion (the peer's ACK) is reaped by the next send but one.
  // So neither the ACKs nor the adverts of the receives sit between a
  // message and its answer: only the two messages do.
  check(bs->barrier("tbw/plat"), "barrier");
  {
    static grex::Completion cs[64];
    size_t recvs = 0, sends = 0, posted_recvs = 0;
    bool repost = true;
    auto post_recv = [&] {
      grex::RecvRequest rr{mr, 256 + (posted_recvs % 2) * 8, 8, 4, posted_recvs};
      if (auto pr = ep->post_recv({&rr, 1}); pr.count != 1)
        die("post_recv (ahead): " + std::to_string(static_cast<int>(pr.error)) + " after " + std::to_string(posted_recvs));
      ++posted_recvs;
    };
    auto poll_once = [&] {
      const size_t n = dev->poll(cs);
      for (size_t k = 0; k < n; ++k) {
        if (cs[k].status != grex::Status::kSuccess) die("completion failed");
        if (cs[k].op == grex::Op::kRecv) {
          ++recvs;
          if (repost) post_recv();
        } else {
          ++sends;
        }
      }
    };
    auto send = [&](size_t i) {
      while (sends + 2 <= i) poll_once();  // at most two sends unacknowledged
      grex::SendRequest sr{mr, 64, 8, 4, i};
      if (ep->post_send({&sr, 1}).count != 1) die("post_send");
    };
    post_recv();
    post_recv();
    check(bs->barrier("tbw/plat2"), "barrier");
    const auto n = static_cast<size_t>(a.lat_iters);
    t0 = Clock::now();
    for (size_t i = 0; i < n; ++i) {
      if (me == 0) send(i);
      while (recvs <= i) poll_once();
      if (me == 1) send(i);
    }
    while (sends < n) poll_once();
    s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (me == 0 && a.lat_iters > 0) std::printf("plat 8 %.2f\n", s / a.lat_iters / 2 * 1e6);
    // The two receives still posted take two more messages each way (a
    // receive left posted would hold the ones posted after it).
    repost = false;
    send(n);
    send(n + 1);
    while (recvs < n + 2 || sends < n + 2) poll_once();
  }
  // 8-byte crossing exchange: both send at once and wait for the other's
  // message (a 2-rank allreduce's one step), time per exchange.
  check(bs->barrier("tbw/xlat"), "barrier");
  t0 = Clock::now();
  for (int i = 0; i < a.lat_iters; ++i) {
    size_t done = 0;
    grex::RecvRequest rr{mr, 0, 8, 3, 1};
    grex::SendRequest sr{mr, 64, 8, 3, 2};
    if (ep->post_recv({&rr, 1}).count != 1) die("post_recv");
    if (ep->post_send({&sr, 1}).count != 1) die("post_send");
    while (done < 2) drain(*dev, 2, &done);
  }
  s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (me == 0 && a.lat_iters > 0) std::printf("xlat 8 %.2f\n", s / a.lat_iters * 1e6);
  if (std::getenv("TBW_STATS") != nullptr) {
    std::string line = "stats rank " + std::to_string(me) + ":";
    for (const auto& [k, v] : dev->counters())
      if (v != 0) line += " " + k + "=" + std::to_string(v);
    std::printf("%s\n", line.c_str());
  }
  check(bs->barrier("tbw/done"), "barrier");
  (void)dev->deregister_memory(mr);
  return 0;
}
