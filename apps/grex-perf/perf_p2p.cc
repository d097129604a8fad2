// SPDX-License-Identifier: Apache-2.0
// The send_bw and send_lat modes: perftest style point-to-point runs between
// ranks 0 and 1 over Communicator::send/recv; other ranks wait at a barrier.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/clock.h"
#include "perf_common.h"

namespace grex::perf {
namespace {

constexpr uint32_t kTagData = 1;
constexpr uint32_t kTagAck = 2;
constexpr int kSender = 0;
constexpr int kReceiver = 1;
constexpr size_t kMemcpyBudgetBytes = size_t{1} << 30;  // bytes copied per --memcpy-ref measurement
constexpr size_t kMemcpyMinReps = 3;
constexpr size_t kMemcpyMaxReps = 1'000'000;

Result<void> need_two_ranks(const Communicator& comm, Mode mode) {
  if (comm.size() >= 2) return ok();
  return Error(Errc::kInvalidArgument, std::string(mode_name(mode)) + " needs at least 2 ranks, got " +
                                           std::to_string(comm.size()))
      .hint("run it as grex-run -n 2 -- grex-perf " + std::string(mode_name(mode)));
}

// Single-core memcpy bandwidth (payload bytes per second, GB/s) for `bytes`.
double memcpy_gbs(void* dst, const void* src, size_t bytes) {
  size_t reps = std::clamp(kMemcpyBudgetBytes / std::max<size_t>(bytes, 1), kMemcpyMinReps, kMemcpyMaxReps);
  std::memcpy(dst, src, bytes);  // warm caches and TLB
  uint64_t t0 = now_ns();
  for (size_t i = 0; i < reps; ++i) {
    std::memcpy(dst, src, bytes);
    asm volatile("" : : "r"(dst) : "memory");  // keep every copy
  }
  uint64_t ns = std::max<uint64_t>(now_ns() - t0, 1);
  return static_cast<double>(bytes) * static_cast<double>(reps) / static_cast<double>(ns);
}

std::string p2p_preamble(Communicator& comm, const PerfArgs& a, const char* title) {
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "%s%20s%s\n"
                " Backend         : %-16s Ranks          : %d (0 <-> 1)\n"
                " Buffers         : %-16s Iterations     : %d (+%d warmup)\n",
                p2p_rule().c_str(), "", title, comm.device().capabilities().driver.c_str(), comm.size(),
                buffer_kind(comm, a.shared_buffers).c_str(), a.effective_iters(), a.effective_warmup());
  std::string out = buf;
  if (a.mode == Mode::kSendBw) {
    out += " TX depth        : 1 (blocking Communicator::send)";
    if (a.tx_depth != 1) out += "; -t " + std::to_string(a.tx_depth) + " asked, windowed sends are not in this version";
    out += "\n";
  }
  return out + p2p_rule();
}

struct BwSample {
  double peak_gbs = 0;  // payload bytes per ns over the fastest message-to-message interval
  double avg_gbs = 0;   // payload bytes per ns from the first send to the receiver's ack
  double mpps = 0;
};

// Rank 0: warmup, ack, then `iters` timed sends closed by the receiver's ack.
Result<BwSample> send_stream(Communicator& comm, void* buf, size_t bytes, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) GREX_TRY(comm.send(buf, bytes, kReceiver, kTagData));
  GREX_TRY(comm.recv(buf, 0, kReceiver, kTagAck));
  std::vector<uint64_t> done(static_cast<size_t>(iters));
  uint64_t t0 = now_ns();
  for (int i = 0; i < iters; ++i) {
    GREX_TRY(comm.send(buf, bytes, kReceiver, kTagData));
    done[static_cast<size_t>(i)] = now_ns();
  }
  GREX_TRY(comm.recv(buf, 0, kReceiver, kTagAck));
  uint64_t total_ns = std::max<uint64_t>(now_ns() - t0, 1);
  uint64_t best_ns = UINT64_MAX, prev = t0;
  for (uint64_t t : done) {
    best_ns = std::min(best_ns, t - prev);
    prev = t;
  }
  BwSample s;
  s.peak_gbs = static_cast<double>(bytes) / static_cast<double>(std::max<uint64_t>(best_ns, 1));
  s.avg_gbs = static_cast<double>(bytes) * iters / static_cast<double>(total_ns);
  s.mpps = iters * 1e3 / static_cast<double>(total_ns);
  return s;
}

// Rank 1: the mirror of send_stream.
Result<void> receive_stream(Communicator& comm, void* buf, size_t bytes, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) GREX_TRY(comm.recv(buf, bytes, kSender, kTagData));
  GREX_TRY(comm.send(buf, 0, kSender, kTagAck));
  for (int i = 0; i < iters; ++i) GREX_TRY(comm.recv(buf, bytes, kSender, kTagData));
  return comm.send(buf, 0, kSender, kTagAck);
}

}  // namespace

Result<int> run_send_bw(Communicator& comm, const PerfArgs& a) {
  GREX_TRY(need_two_ranks(comm, a.mode));
  std::vector<size_t> sizes = p2p_sizes(a);
  bool active = comm.rank() == kSender || comm.rank() == kReceiver;
  PerfBuffer buf, copy_dst;
  if (active) buf = GREX_TRY(PerfBuffer::create(comm, sizes.back(), a.shared_buffers));
  if (comm.rank() == kSender && a.memcpy_ref) copy_dst = GREX_TRY(PerfBuffer::create(comm, sizes.back(), false));

  print_rank0(comm, p2p_preamble(comm, a, "Send BW Test") + bw_header(a.report_gbits, a.memcpy_ref));
  double unit = a.report_gbits ? 8.0 : 1.0;
  std::vector<JsonObject> json;
  for (size_t bytes : sizes) {
    if (comm.rank() == kSender) {
      double ref = a.memcpy_ref ? memcpy_gbs(copy_dst.data(), buf.data(), bytes) : -1.0;
      BwSample s = GREX_TRY(send_stream(comm, buf.data(), bytes, a.effective_warmup(), a.effective_iters()));
      double ratio = ref > 0 ? s.avg_gbs / ref : 0.0;
      print_rank0(comm, bw_row(bytes, a.effective_iters(), s.peak_gbs * unit, s.avg_gbs * unit, s.mpps, ref, ratio));
      json.push_back({{"bytes", static_cast<int64_t>(bytes)}, {"iterations", int64_t{a.effective_iters()}},
                      {"bw_peak_gbs", s.peak_gbs}, {"bw_avg_gbs", s.avg_gbs}, {"msg_rate_mpps", s.mpps}});
      if (a.memcpy_ref) {
        json.back().emplace_back("memcpy_gbs", ref);
        json.back().emplace_back("ratio", ratio);
      }
    } else if (comm.rank() == kReceiver) {
      GREX_TRY(receive_stream(comm, buf.data(), bytes, a.effective_warmup(), a.effective_iters()));
    }
    GREX_TRY(comm.barrier());
  }
  print_rank0(comm, p2p_rule());
  GREX_TRY(write_json_rows(comm, a,
                           {{"backend", comm.device().capabilities().driver},
                            {"buffers", buffer_kind(comm, a.shared_buffers)}},
                           json));
  return 0;
}

Result<int> run_send_lat(Communicator& comm, const PerfArgs& a) {
  GREX_TRY(need_two_ranks(comm, a.mode));
  std::vector<size_t> sizes = p2p_sizes(a);
  PerfBuffer buf;
  if (comm.rank() == kSender || comm.rank() == kReceiver)
    buf = GREX_TRY(PerfBuffer::create(comm, sizes.back(), a.shared_buffers));

  print_rank0(comm, p2p_preamble(comm, a, "Send Latency Test") + lat_header());
  int iters = a.effective_iters(), warmup = a.effective_warmup();
  std::vector<double> samples_us(static_cast<size_t>(iters));
  std::vector<JsonObject> json;
  for (size_t bytes : sizes) {
    if (comm.rank() == kSender) {
      for (int i = 0; i < warmup + iters; ++i) {
        uint64_t t0 = now_ns();
        GREX_TRY(comm.send(buf.data(), bytes, kReceiver, kTagData));
        GREX_TRY(comm.recv(buf.data(), bytes, kReceiver, kTagData));
        if (i >= warmup) samples_us[static_cast<size_t>(i - warmup)] = static_cast<double>(now_ns() - t0) / 2e3;
      }
      LatencyStats s = latency_stats(samples_us);
      print_rank0(comm, lat_row(bytes, iters, s));
      json.push_back({{"bytes", static_cast<int64_t>(bytes)}, {"iterations", int64_t{iters}}, {"t_min_us", s.min},
                      {"t_max_us", s.max}, {"t_typical_us", s.typical}, {"t_avg_us", s.avg},
                      {"t_stdev_us", s.stdev}, {"p99_us", s.p99}, {"p999_us", s.p999}});
    } else if (comm.rank() == kReceiver) {
      for (int i = 0; i < warmup + iters; ++i) {
        GREX_TRY(comm.recv(buf.data(), bytes, kSender, kTagData));
        GREX_TRY(comm.send(buf.data(), bytes, kSender, kTagData));
      }
    }
    GREX_TRY(comm.barrier());
  }
  print_rank0(comm, p2p_rule());
  GREX_TRY(write_json_rows(comm, a,
                           {{"backend", comm.device().capabilities().driver},
                            {"buffers", buffer_kind(comm, a.shared_buffers)}},
                           json));
  return 0;
}

}  // namespace grex::perf
