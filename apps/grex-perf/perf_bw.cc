// SPDX-License-Identifier: Apache-2.0
// send_bw and write_bw: a window of -t requests in flight on each of -q flows,
// perftest's ib_send_bw / ib_write_bw on the transport contract.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "perf_p2p.h"

namespace grex::perf {
namespace {

constexpr int kServerRxDepth = 512;  // perftest's default rx depth
constexpr int kPeakBlock = 64;       // completions per block of the peak bandwidth
constexpr size_t kMemcpyBudgetBytes = size_t{1} << 30;  // bytes copied per --memcpy-ref measurement

// What one side measured for one size.
struct BwSample {
  int64_t iters = 0;    // timed messages per flow
  double peak_gbs = 0;  // best block of kPeakBlock completions
  double avg_gbs = 0;   // all timed bytes over the timed interval
  double mpps = 0;
};

// Peak bandwidth over blocks of completions: one completion at a time would
// see batches of completions as absurd rates.
class PeakMeter {
 public:
  explicit PeakMeter(size_t bytes, int block) : bytes_(bytes), block_(block) {}
  void completion(uint64_t now) {
    if (n_ == 0) start_ = now;
    if (++n_ == block_) {
      if (now > start_) best_ = std::max(best_, static_cast<double>(bytes_) * block_ / static_cast<double>(now - start_));
      n_ = 0;
    }
  }
  double best(double average) const { return std::max(best_, average); }

 private:
  size_t bytes_;
  int block_;
  int n_ = 0;
  uint64_t start_ = 0;
  double best_ = 0;
};

// Client: streams on every flow with `depth` requests in flight, `iters` per
// flow or, with duration_s > 0, until that many seconds passed.
Result<BwSample> stream(PairJob& job, Mode mode, size_t bytes, int depth, int64_t iters, double duration_s) {
  auto& flows = job.flows();
  struct State {
    int64_t posted = 0, done = 0;
    int inflight = 0;
  };
  std::vector<State> st(flows.size());
  PeakMeter peak(bytes, std::max(depth, kPeakBlock));
  Poller poller(job);
  const uint64_t t0 = now_ns();
  const bool by_time = duration_s > 0;
  const uint64_t deadline = by_time ? t0 + static_cast<uint64_t>(duration_s * 1e9) : UINT64_MAX;
  for (bool busy = true; busy;) {
    const bool posting = !by_time || now_ns() < deadline;
    busy = false;
    for (size_t f = 0; f < flows.size(); ++f) {
      State& s = st[f];
      int64_t want = std::min<int64_t>(depth - s.inflight, kMaxBatch);
      if (!by_time) want = std::min(want, iters - s.posted);
      if (posting && want > 0) {
        PostResult pr = post_out(flows[f], mode, bytes, static_cast<int>(want));
        if (pr.error != Errc::kOk) return post_failed(job, f, pr.error, is_write(mode) ? "a write" : "a send");
        s.posted += static_cast<int64_t>(pr.count);
        s.inflight += static_cast<int>(pr.count);
      }
    }
    GREX_TRY(poller.poll([&](size_t f, const Completion& c) {
      if (c.op != Op::kSend && c.op != Op::kWrite) return;
      --st[f].inflight;
      ++st[f].done;
      peak.completion(now_ns());
    }));
    for (const State& s : st) busy |= s.inflight > 0 || (by_time ? posting : s.posted < iters);
  }
  const uint64_t ns = std::max<uint64_t>(now_ns() - t0, 1);
  int64_t done = 0;
  for (const State& s : st) done += s.done;
  BwSample r;
  r.iters = done / static_cast<int64_t>(flows.size());
  r.avg_gbs = static_cast<double>(bytes) * static_cast<double>(done) / static_cast<double>(ns);
  r.peak_gbs = peak.best(r.avg_gbs);
  r.mpps = static_cast<double>(done) * 1e3 / static_cast<double>(ns);
  return r;
}

// Client: ends the round on every flow in band and waits until that is done.
// send_bw: a zero-length message, then as many more as the server has
// receives still posted; write_bw: a write with immediate kImmEnd.
Result<void> end_round(PairJob& job, Mode mode, size_t bytes, size_t round) {
  auto& flows = job.flows();
  auto post_all = [&](std::vector<int64_t> counts) -> Result<void> {
    Poller poller(job);
    std::vector<int64_t> inflight(flows.size(), 0);
    for (bool busy = true; busy;) {
      busy = false;
      for (size_t f = 0; f < flows.size(); ++f) {
        int n = static_cast<int>(std::min<int64_t>(counts[f], kMaxBatch));
        if (n > 0) {
          PostResult pr = is_write(mode) ? post_out(flows[f], mode, bytes, n, true, kImmEnd)
                                         : post_out(flows[f], mode, 0, n);
          if (pr.error != Errc::kOk) return post_failed(job, f, pr.error, "the end of a round");
          counts[f] -= static_cast<int64_t>(pr.count);
          inflight[f] += static_cast<int64_t>(pr.count);
        }
      }
      GREX_TRY(poller.poll([&](size_t f, const Completion& c) {
        if (c.op == Op::kSend || c.op == Op::kWrite) --inflight[f];
      }));
      for (size_t f = 0; f < flows.size(); ++f) busy |= counts[f] > 0 || inflight[f] > 0;
    }
    return ok();
  };
  GREX_TRY(post_all(std::vector<int64_t>(flows.size(), 1)));
  if (is_write(mode)) return ok();
  std::vector<int64_t> fill(flows.size());
  for (size_t f = 0; f < flows.size(); ++f)
    fill[f] = std::stoll(GREX_TRY(job.take("fill/" + std::to_string(round) + "/" + std::to_string(f))));
  return post_all(std::move(fill));
}

// Server side of send_bw / write_bw for one round. send_bw: keeps `rx_depth`
// receives posted per flow and measures from the end of the warmup to the last
// message; write_bw: only waits for the end (the writes need no receiver, but
// drivers that land bytes in poll() need polling). Returns what it measured.
Result<BwSample> serve_round(PairJob& job, Mode mode, size_t bytes, int64_t warmup, size_t round) {
  auto& flows = job.flows();
  const bool sends = !is_write(mode);
  const int rx_depth = static_cast<int>(std::min<uint32_t>(job.capabilities().queue_depth, kServerRxDepth));
  struct State {
    int posted = 0;  // receives outstanding
    bool ended = false;
  };
  std::vector<State> st(flows.size());
  auto post_recvs = [&](size_t f, int n) -> Result<void> {
    std::array<RecvRequest, kMaxBatch> r{};
    while (n > 0) {
      int k = std::min(n, kMaxBatch);
      for (int i = 0; i < k; ++i)
        r[static_cast<size_t>(i)] = RecvRequest{.region = flows[f].region, .length = bytes, .tag = kTagData};
      PostResult pr = flows[f].endpoint->post_recv(std::span(r.data(), static_cast<size_t>(k)));
      if (pr.error != Errc::kOk || pr.count == 0) return post_failed(job, f, pr.error, "a receive");
      st[f].posted += static_cast<int>(pr.count);
      n -= static_cast<int>(pr.count);
    }
    return ok();
  };
  if (sends)
    for (size_t f = 0; f < flows.size(); ++f) GREX_TRY(post_recvs(f, rx_depth));
  GREX_TRY(job.put("ready/" + std::to_string(round), "1"));

  int64_t received = 0, timed = 0;
  uint64_t t_start = 0, t_last = 0;
  // Receives complete in bursts (a driver delivers what arrived since the last
  // poll): the server's peak takes blocks of several receive windows.
  PeakMeter peak(bytes, 4 * kServerRxDepth);
  Poller poller(job);
  std::vector<size_t> repost;
  for (size_t ended = 0; ended < flows.size();) {
    repost.clear();
    GREX_TRY(poller.poll([&](size_t f, const Completion& c) {
      if (c.op == Op::kRemoteWrite && c.imm == kImmEnd) {
        st[f].ended = true;
        ++ended;
      }
      if (c.op != Op::kRecv) return;
      --st[f].posted;
      if (c.bytes == 0) {
        st[f].ended = true;
        ++ended;
        return;
      }
      uint64_t now = now_ns();
      if (++received <= warmup * static_cast<int64_t>(flows.size()) || t_start == 0) {
        t_start = now;  // the timed interval starts at the last warmup message
      } else {
        ++timed;
        t_last = now;
        peak.completion(now);
      }
      if (!st[f].ended) repost.push_back(f);
    }));
    for (size_t f : repost) GREX_TRY(post_recvs(f, 1));
  }
  if (sends) {
    // The client sends one zero-length message per receive still posted.
    for (size_t f = 0; f < flows.size(); ++f)
      GREX_TRY(job.put("fill/" + std::to_string(round) + "/" + std::to_string(f), std::to_string(st[f].posted)));
    auto outstanding = [&] {
      int n = 0;
      for (const State& s : st) n += s.posted;
      return n;
    };
    while (outstanding() > 0)
      GREX_TRY(poller.poll([&](size_t f, const Completion& c) {
        if (c.op == Op::kRecv) --st[f].posted;
      }));
  }
  BwSample r;
  const uint64_t ns = t_last > t_start ? t_last - t_start : 0;
  r.iters = timed / static_cast<int64_t>(flows.size());
  if (ns > 0) {
    r.avg_gbs = static_cast<double>(bytes) * static_cast<double>(timed) / static_cast<double>(ns);
    r.mpps = static_cast<double>(timed) * 1e3 / static_cast<double>(ns);
  }
  r.peak_gbs = peak.best(r.avg_gbs);
  return r;
}

// Single-core memcpy bandwidth (GB/s) for `bytes`, for --memcpy-ref.
double memcpy_gbs(void* dst, const void* src, size_t bytes) {
  size_t reps = std::clamp<size_t>(kMemcpyBudgetBytes / std::max<size_t>(bytes, 1), 3, 1'000'000);
  std::memcpy(dst, src, bytes);  // warm caches and TLB
  uint64_t t0 = now_ns();
  for (size_t i = 0; i < reps; ++i) {
    std::memcpy(dst, src, bytes);
    asm volatile("" : : "r"(dst) : "memory");  // keep every copy
  }
  uint64_t ns = std::max<uint64_t>(now_ns() - t0, 1);
  return static_cast<double>(bytes) * static_cast<double>(reps) / static_cast<double>(ns);
}
}  // namespace

Result<int> run_bw(const PerfArgs& a) {
  std::vector<size_t> sizes = p2p_sizes(a);
  auto job = GREX_TRY(PairJob::connect(a, sizes.back()));
  const bool writes = is_write(a.mode);
  const bool measures = job->client() || !writes;  // a write_bw server sees no traffic to measure
  std::string title = writes ? "RDMA_Write BW Test" : "Send BW Test";
  std::string header = bw_header(a.report_gbits, a.memcpy_ref && job->client());
  if (!measures) header = "# the client measures write_bw: its table is the result\n";
  job->print(p2p_preamble(*job, a, title.c_str()) + header);
  const double unit = a.report_gbits ? 8.0 : 1e9 / 1048576.0;  // GB/s -> Gb/sec or perftest's MB/sec
  const int64_t iters = a.effective_iters(), warmup = a.effective_warmup();
  std::vector<Json> rows;
  PlotData plot{"grex-perf " + std::string(mode_name(a.mode)) + " (" + job->capabilities().driver + ")",
                a.report_gbits ? "Gb/s" : "MB/s (2^20 bytes)", {"BW average"}, {}};
  std::vector<unsigned char> copy_dst;
  if (a.memcpy_ref && job->client()) copy_dst.resize(sizes.back());
  Progress progress(job->client(), sizes.size());
  for (size_t round = 0; round < sizes.size(); ++round) {
    const size_t bytes = sizes[round];
    BwSample s;
    double ref = -1.0;
    if (job->client()) {
      if (a.memcpy_ref) ref = memcpy_gbs(copy_dst.data(), job->flows().front().buffer, bytes);
      GREX_TRY(job->take("ready/" + std::to_string(round)));
      if (warmup > 0) GREX_TRY(stream(*job, a.mode, bytes, a.tx_depth, warmup, 0));
      s = GREX_TRY(stream(*job, a.mode, bytes, a.tx_depth, iters, a.duration_s));
      GREX_TRY(end_round(*job, a.mode, bytes, round));
    } else if (job->active()) {
      s = GREX_TRY(serve_round(*job, a.mode, bytes, warmup, round));
    }
    if (measures && job->prints()) {
      double ratio = ref > 0 ? s.avg_gbs / ref : 0.0;
      job->print(bw_row(bytes, static_cast<int>(s.iters), s.peak_gbs * unit, s.avg_gbs * unit, s.mpps, ref, ratio));
      rows.push_back({{"bytes", static_cast<int64_t>(bytes)}, {"iterations", s.iters}, {"bw_peak_gbs", s.peak_gbs},
                      {"bw_avg_gbs", s.avg_gbs}, {"msg_rate_mpps", s.mpps}});
      if (ref > 0) {
        rows.back()["memcpy_gbs"] = ref;
        rows.back()["ratio"] = ratio;
      }
      plot.points.push_back({bytes, {s.avg_gbs * unit}});
    }
    progress.step(round + 1, std::to_string(bytes) + " B");
  }
  progress.done();
  return p2p_finish(*job, a, rows, plot);
}

}  // namespace grex::perf
