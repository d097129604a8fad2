// SPDX-License-Identifier: Apache-2.0
// send_lat and write_lat: ping-pong between ranks 0 and 1 on one flow,
// perftest's ib_send_lat / ib_write_lat on the transport contract.
#include <cstring>
#include <string>
#include <vector>

#include "perf_p2p.h"

namespace grex::perf {
namespace {

constexpr size_t kMaxLatencySamples = 10'000'000;

// The rounds a latency run makes: `iters` after `warmup`, or with duration_s
// > 0 as many as fit after the warmup.
class LatencyBudget {
 public:
  LatencyBudget(int64_t warmup, int64_t iters, double duration_s)
      : warmup_(warmup), iters_(iters), duration_ns_(duration_s > 0 ? static_cast<uint64_t>(duration_s * 1e9) : 0) {}
  bool more(int64_t i, size_t samples) {
    if (i == warmup_ && duration_ns_ > 0) deadline_ = now_ns() + duration_ns_;
    if (samples >= kMaxLatencySamples) return false;
    return duration_ns_ > 0 ? i < warmup_ || now_ns() < deadline_ : i < warmup_ + iters_;
  }
  bool timed(int64_t i) const { return i >= warmup_; }

 private:
  int64_t warmup_, iters_;
  uint64_t duration_ns_;
  uint64_t deadline_ = UINT64_MAX;
};

// send_lat on flow 0 for one size: the client times round trips of tagged
// messages, then ends the round with a zero-length one; the server answers
// each message until then. Message and reply use the two halves of the buffer,
// so a reply never lands in a send still in flight.
Result<std::vector<double>> ping_pong_sends(PairJob& job, size_t bytes, size_t max_bytes, LatencyBudget budget,
                                            size_t round) {
  PairFlow& fl = job.flows().front();
  Poller poller(job);
  int sends_inflight = 0;
  bool got_reply = false, got_end = false;
  auto on = [&](size_t, const Completion& c) {
    if (c.op == Op::kSend) --sends_inflight;
    if (c.op == Op::kRecv) (c.bytes == 0 ? got_end : got_reply) = true;
  };
  auto post_recv = [&]() -> Result<void> {
    RecvRequest r{.region = fl.region, .offset = max_bytes, .length = bytes, .tag = kTagData};
    PostResult pr = fl.endpoint->post_recv(std::span(&r, 1));
    if (pr.count != 1) return post_failed(job, 0, pr.error, "a receive");
    return ok();
  };
  auto send = [&](size_t len) -> Result<void> {
    PostResult pr = post_out(fl, Mode::kSendLat, len, 1);
    if (pr.count != 1) return post_failed(job, 0, pr.error, "a send");
    ++sends_inflight;
    return ok();
  };
  auto wait_for = [&](auto&& done) -> Result<void> {
    while (!done()) GREX_TRY(poller.poll(on));
    return ok();
  };
  std::vector<double> samples;
  if (!job.client()) {
    GREX_TRY(post_recv());
    GREX_TRY(job.put("ready/" + std::to_string(round), "1"));
    for (;;) {
      GREX_TRY(wait_for([&] { return got_reply || got_end; }));
      if (got_end) break;
      got_reply = false;
      GREX_TRY(post_recv());
      GREX_TRY(send(bytes));
    }
    GREX_TRY(wait_for([&] { return sends_inflight == 0; }));
    return samples;
  }
  GREX_TRY(job.take("ready/" + std::to_string(round)));
  for (int64_t i = 0; budget.more(i, samples.size()); ++i) {
    const uint64_t t0 = now_ns();
    GREX_TRY(post_recv());
    GREX_TRY(send(bytes));
    GREX_TRY(wait_for([&] { return got_reply && sends_inflight == 0; }));
    got_reply = false;
    if (budget.timed(i)) samples.push_back(static_cast<double>(now_ns() - t0) / 2e3);
  }
  GREX_TRY(send(0));
  GREX_TRY(wait_for([&] { return sends_inflight == 0; }));
  return samples;
}

// write_lat as ib_write_lat: plain writes (no immediate) into the other side's
// second half; each side spins on the last byte of its own landing area until
// round trip i's mark arrives, polling the device every 64 loads (shm and dpdk
// move the bytes inside poll(); a verbs write lands without it). The client
// ends the round with a write with immediate kImmEnd.
Result<std::vector<double>> ping_pong_writes(PairJob& job, size_t bytes, size_t max_bytes, LatencyBudget budget,
                                             size_t round) {
  PairFlow& fl = job.flows().front();
  Poller poller(job);
  auto* base = static_cast<uint8_t*>(fl.region->addr());
  uint8_t* landing_last = base + max_bytes + bytes - 1;
  uint8_t* source_last = base + bytes - 1;
  std::memset(base + max_bytes, 0, bytes);
  auto mark = [](int64_t i) { return static_cast<uint8_t>(1 + i % 255); };  // never 0, differs from the last
  int writes_inflight = 0;
  bool got_end = false;
  auto on = [&](size_t, const Completion& c) {
    if (c.op == Op::kWrite) --writes_inflight;
    if (c.op == Op::kRemoteWrite && c.imm == kImmEnd) got_end = true;
  };
  // Waits for mark(i) in the landing area; false when the round ended instead.
  auto arrived = [&](int64_t i) -> Result<bool> {
    for (uint32_t spins = 0;; ++spins) {
      if (__atomic_load_n(landing_last, __ATOMIC_ACQUIRE) == mark(i)) return true;
      if ((spins & 63) == 0) {
        GREX_TRY(poller.poll(on));
        if (got_end) return false;
      }
    }
  };
  auto write = [&](int64_t i, bool end) -> Result<void> {
    *source_last = mark(i);
    PostResult pr = post_out(fl, Mode::kWriteLat, bytes, 1, end, end ? kImmEnd : 0, max_bytes);
    if (pr.count != 1) return post_failed(job, 0, pr.error, "a write");
    ++writes_inflight;
    return ok();
  };
  auto reap = [&]() -> Result<void> {
    while (writes_inflight > 0) GREX_TRY(poller.poll(on));
    return ok();
  };
  std::vector<double> samples;
  if (!job.client()) {
    GREX_TRY(job.put("ready/" + std::to_string(round), "1"));
    for (int64_t i = 0; GREX_TRY(arrived(i)); ++i) {
      GREX_TRY(write(i, false));
      GREX_TRY(reap());
    }
    return samples;
  }
  GREX_TRY(job.take("ready/" + std::to_string(round)));
  int64_t i = 0;
  for (; budget.more(i, samples.size()); ++i) {
    const uint64_t t0 = now_ns();
    GREX_TRY(write(i, false));
    GREX_TRY(reap());
    if (!GREX_TRY(arrived(i))) return Error(Errc::kProtocol, "grex-perf: the server ended a write_lat round");
    if (budget.timed(i)) samples.push_back(static_cast<double>(now_ns() - t0) / 2e3);
  }
  GREX_TRY(write(i, true));
  GREX_TRY(reap());
  return samples;
}
}  // namespace

Result<int> run_lat(const PerfArgs& a) {
  std::vector<size_t> sizes = p2p_sizes(a);
  // Message and reply use the two halves of the buffer.
  auto job = GREX_TRY(PairJob::connect(a, 2 * sizes.back()));
  std::string title = is_write(a.mode) ? "RDMA_Write Latency Test" : "Send Latency Test";
  job->print(p2p_preamble(*job, a, title.c_str()) +
             (job->client() ? lat_header() : "# the client times the round trips: its table is the result\n"));
  std::vector<Json> rows;
  PlotData plot{"grex-perf " + std::string(mode_name(a.mode)) + " (" + job->capabilities().driver + ")", "usec",
                {"t_typical", "99% percentile"}, {}};
  Progress progress(job->client(), sizes.size());
  for (size_t round = 0; round < sizes.size(); ++round) {
    const size_t bytes = sizes[round];
    if (job->active()) {
      LatencyBudget budget(a.effective_warmup(), a.effective_iters(), a.duration_s);
      std::vector<double> samples =
          GREX_TRY(is_write(a.mode) ? ping_pong_writes(*job, bytes, sizes.back(), budget, round)
                                    : ping_pong_sends(*job, bytes, sizes.back(), budget, round));
      if (job->client()) {
        int64_t n = static_cast<int64_t>(samples.size());
        LatencyStats s = latency_stats(samples);
        job->print(lat_row(bytes, static_cast<int>(n), s));
        rows.push_back({{"bytes", static_cast<int64_t>(bytes)}, {"iterations", n}, {"t_min_us", s.min},
                        {"t_max_us", s.max}, {"t_typical_us", s.typical}, {"t_avg_us", s.avg},
                        {"t_stdev_us", s.stdev}, {"p99_us", s.p99}, {"p999_us", s.p999}});
        plot.points.push_back({bytes, {s.typical, s.p99}});
      }
    }
    progress.step(round + 1, std::to_string(bytes) + " B");
  }
  progress.done();
  return p2p_finish(*job, a, rows, plot);
}

}  // namespace grex::perf
