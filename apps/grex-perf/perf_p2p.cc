// SPDX-License-Identifier: Apache-2.0
// The parts the perftest style modes share: polling, posting, preamble, end of run.
#include "perf_p2p.h"

#include <cstdio>
#include <cstdlib>

namespace grex::perf {
namespace {

constexpr int64_t kDefaultStallMs = 60'000;

Json environment_of(const PairJob& job, const PerfArgs& a) {
  Json env = common_environment(a, job.capabilities(), job.size());
  env["flows"] = is_bw(a.mode) ? a.flows : 1;
  env["tx_depth"] = is_bw(a.mode) ? a.tx_depth : 1;
  env["connection"] = job.server_client() ? "server/client" : "launcher";
  return env;
}

}  // namespace

int64_t stall_ms() {
  const char* v = std::getenv("GREX_TIMEOUT_MS");
  long long ms = v != nullptr ? std::atoll(v) : 0;
  return ms > 0 ? ms : kDefaultStallMs;
}

Error post_failed(const PairJob& job, size_t flow, Errc e, const char* what) {
  return Error(e, std::string("grex-perf: flow ") + std::to_string(flow) + ": " + what + " was refused")
      .rank(job.rank());
}

PostResult post_out(PairFlow& fl, Mode mode, size_t bytes, int n, bool with_imm, uint32_t imm, size_t remote_offset) {
  if (is_write(mode)) {
    std::array<WriteRequest, kMaxBatch> w{};
    for (int i = 0; i < n; ++i) {
      w[static_cast<size_t>(i)] = WriteRequest{.region = fl.region, .length = bytes, .remote = fl.peer_region,
                                               .remote_offset = remote_offset, .imm = imm, .with_imm = with_imm};
    }
    return fl.endpoint->post_write(std::span(w.data(), static_cast<size_t>(n)));
  }
  std::array<SendRequest, kMaxBatch> s{};
  for (int i = 0; i < n; ++i) s[static_cast<size_t>(i)] = SendRequest{.region = fl.region, .length = bytes, .tag = kTagData};
  return fl.endpoint->post_send(std::span(s.data(), static_cast<size_t>(n)));
}

std::string p2p_preamble(const PairJob& job, const PerfArgs& a, const char* title) {
  const Capabilities& caps = job.capabilities();
  std::string budget = a.duration_s > 0 ? "Duration       : " + std::to_string(a.duration_s).substr(0, 6) + " s"
                                        : "Iterations     : " + std::to_string(a.effective_iters());
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "%s%20s%s\n"
                " Backend         : %-16s Device         : %s\n"
                " Ranks           : %-16s Flows (-q)     : %d\n"
                " Buffers         : %-16s %s (+%d warmup)\n"
                " TX depth        : %-16s Connection     : %s\n",
                p2p_rule().c_str(), "", title, caps.driver.c_str(), caps.device_name.c_str(),
                job.server_client() ? (job.client() ? "client (rank 0)" : "server (rank 1)") : "0 <-> 1",
                is_bw(a.mode) ? a.flows : 1, a.shared_buffers ? "alloc (device)" : "malloc", budget.c_str(),
                a.effective_warmup(), is_bw(a.mode) ? std::to_string(a.tx_depth).c_str() : "1",
                job.server_client() ? ("server/client, port " + std::to_string(a.port)).c_str() : "launcher");
  std::string out = buf;
  if (std::string cc = effective_cc(a); !cc.empty()) out += " CC              : " + cc + "\n";
  if (a.rdma_cm) out += " -R              : verbs connects through rdma_cm always\n";
  return out + p2p_rule();
}

Result<int> p2p_finish(PairJob& job, const PerfArgs& a, const std::vector<Json>& rows, const PlotData& plot) {
  job.print(p2p_rule());
  for (int r = 0; a.stats && r <= PairJob::kServer; ++r) {  // rank 0's counters first
    if (r == job.rank()) {
      std::string lines = job.counter_lines();
      std::fwrite(lines.data(), 1, lines.size(), stdout);
      std::fflush(stdout);
    }
    GREX_TRY(job.barrier("stats"));
  }
  GREX_TRY(job.barrier("done"));
  if (!job.client()) return 0;  // rank 0 writes the files
  if (!a.json_path.empty())
    GREX_TRY(write_text_file(a.json_path, render_json({{"mode", std::string(mode_name(a.mode))}},
                                                      environment_of(job, a), rows)));
  if (!a.plot_path.empty()) GREX_TRY(write_plot(a.plot_path, plot));
  return 0;
}

}  // namespace grex::perf
