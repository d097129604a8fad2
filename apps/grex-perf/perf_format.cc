// SPDX-License-Identifier: Apache-2.0
// grex-perf's output: nccl-tests / perftest tables, latency statistics and JSON.
#include "perf_format.h"


#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace grex::perf {
namespace {

// snprintf into a std::string.
__attribute__((format(printf, 1, 2))) std::string sfmt(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return n < 0 ? std::string() : std::string(buf, std::min(static_cast<size_t>(n), sizeof buf - 1));
}

// Lead columns of the nccl-tests table (44 characters wide; 52 with root).
constexpr const char* kLeadNames = "# %10s  %12s  %8s  %6s";
constexpr const char* kRootName = "  %6s";
// One placement's group (33 characters wide).
constexpr const char* kGroupNames = "  %7s  %6s  %6s  %6s";

// Drops the padding after the last column and ends the line.
std::string end_line(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  s += '\n';
  return s;
}

size_t nearest_rank(size_t n, double fraction) {
  auto k = static_cast<size_t>(std::ceil(fraction * static_cast<double>(n)));
  return std::clamp<size_t>(k, 1, n) - 1;
}

// A number to the 6 significant digits the tables print; other values as they are.
Json rounded(const Json& v) {
  if (!v.is_number_float() || !std::isfinite(v.get<double>())) return v;
  return std::strtod(sfmt("%.6g", v.get<double>()).c_str(), nullptr);
}

// `obj` on one line as {"key": value, ...}: nlohmann-json writes each key and
// value; only the spacing between them is this file's.
std::string one_line(const Json& obj) {
  std::string out = "{";
  for (auto it = obj.begin(); it != obj.end(); ++it)
    out += (it == obj.begin() ? "" : ", ") + Json(it.key()).dump() + ": " + rounded(it.value()).dump();
  return out + "}";
}

}  // namespace

double busbw_factor(Mode mode, int nranks) noexcept {
  if (nranks < 1) return 0.0;
  double n = nranks;
  switch (mode) {
    case Mode::kAllreduce: return 2.0 * (n - 1) / n;
    case Mode::kReduceScatter:
    case Mode::kAllgather:
    case Mode::kAlltoall: return (n - 1) / n;
    case Mode::kBroadcast:
    case Mode::kReduce:
    case Mode::kSendrecv:
    case Mode::kSendBw:
    case Mode::kWriteBw:
    case Mode::kWriteLat:
    case Mode::kSendLat: return 1.0;
  }
  return 1.0;
}

size_t collective_count(Mode mode, size_t size_bytes, DataType type, int nranks) noexcept {
  size_t count = size_bytes / dtype_size(type);
  if (mode_blocks_per_rank(mode)) count /= static_cast<size_t>(std::max(nranks, 1));
  return count;
}

size_t collective_bytes(Mode mode, size_t count, DataType type, int nranks) noexcept {
  size_t bytes = count * dtype_size(type);
  if (mode_blocks_per_rank(mode)) bytes *= static_cast<size_t>(std::max(nranks, 1));
  return bytes;
}

double algbw_gbs(size_t bytes, double time_us) noexcept {
  return time_us > 0 ? static_cast<double>(bytes) / (time_us * 1e3) : 0.0;
}

std::string collective_header(Placement placement, bool with_root) {
  bool both = placement == Placement::kBoth;
  std::string root_blank = with_root ? sfmt(kRootName, "") : "";
  std::string out = sfmt(kLeadNames, "", "", "", "") + root_blank;
  if (both || placement == Placement::kOutOfPlace) out += "           out-of-place          ";
  if (both || placement == Placement::kInPlace) out += "             in-place            ";
  out = end_line(std::move(out));
  out += sfmt(kLeadNames, "size", "count", "type", "redop");
  if (with_root) out += sfmt(kRootName, "root");
  int groups = both ? 2 : 1;
  for (int g = 0; g < groups; ++g) out += sfmt(kGroupNames, "time", "algbw", "busbw", "#wrong");
  out += "\n";
  out += sfmt(kLeadNames, "(B)", "(elements)", "", "") + root_blank;
  for (int g = 0; g < groups; ++g) out += sfmt(kGroupNames, "(us)", "(GB/s)", "(GB/s)", "");
  return end_line(std::move(out));
}

std::string collective_row(size_t bytes, size_t count, DataType type, ReduceOp op,
                           std::span<const CollectiveResult> groups) {
  return collective_row(bytes, count, type, reduce_op_name(op), std::nullopt, groups);
}

std::string collective_row(size_t bytes, size_t count, DataType type, std::string_view redop,
                           std::optional<int> root, std::span<const CollectiveResult> groups) {
  std::string out = sfmt("%12zu  %12zu  %8s  %6s", bytes, count, std::string(type_label(type)).c_str(),
                         std::string(redop).c_str());
  if (root) out += sfmt("  %6d", *root);
  for (const auto& g : groups) {
    std::string wrong = g.checked ? std::to_string(g.wrong) : "N/A";
    out += sfmt("  %7s  %6.2f  %6.2f  %6s", format_time_us(g.time_us).c_str(), g.algbw, g.busbw, wrong.c_str());
  }
  return out + "\n";
}

std::string format_time_us(double us) {
  if (us >= 10000.0) return sfmt("%7.0f", us);
  if (us >= 100.0) return sfmt("%7.1f", us);
  return sfmt("%7.2f", us);
}

LatencyStats latency_stats(std::vector<double>& samples_us) {
  LatencyStats s;
  if (samples_us.empty()) return s;
  std::sort(samples_us.begin(), samples_us.end());
  size_t n = samples_us.size();
  double sum = 0;
  for (double v : samples_us) sum += v;
  s.min = samples_us.front();
  s.max = samples_us.back();
  s.avg = sum / static_cast<double>(n);
  s.typical = n % 2 == 1 ? samples_us[n / 2] : 0.5 * (samples_us[n / 2 - 1] + samples_us[n / 2]);
  double var = 0;
  for (double v : samples_us) var += (v - s.avg) * (v - s.avg);
  s.stdev = std::sqrt(var / static_cast<double>(n));
  s.p99 = samples_us[nearest_rank(n, 0.99)];
  s.p999 = samples_us[nearest_rank(n, 0.999)];
  return s;
}

std::string p2p_rule() { return std::string(87, '-') + "\n"; }

std::string bw_header(bool gbits, bool memcpy_ref) {
  const char* unit = gbits ? "Gb/sec" : "MB/sec";  // perftest's units (MB = 2^20 bytes)
  std::string peak = sfmt("BW peak[%s]", unit);
  std::string avg = sfmt("BW average[%s]", unit);
  std::string out = sfmt(" %-10s %-14s %-18s %-21s %-14s", "#bytes", "#iterations", peak.c_str(), avg.c_str(),
                         "MsgRate[Mpps]");
  if (memcpy_ref) out += sfmt(" %-15s %-8s", "memcpy[GB/s]", "ratio");
  return end_line(std::move(out));
}

std::string bw_row(size_t bytes, int iters, double peak, double avg, double msg_rate_mpps, double memcpy_gbs,
                   double ratio) {
  std::string out = sfmt(" %-10zu %-14d %-18.2f %-21.2f %-14.6f", bytes, iters, peak, avg, msg_rate_mpps);
  if (memcpy_gbs >= 0) out += sfmt(" %-15.2f %-8.3f", memcpy_gbs, ratio);
  return end_line(std::move(out));
}

std::string lat_header() {
  return end_line(sfmt(" %-10s %-12s %-12s %-12s %-16s %-12s %-14s %-22s %-24s", "#bytes", "#iterations", "t_min[usec]",
              "t_max[usec]", "t_typical[usec]", "t_avg[usec]", "t_stdev[usec]", "99% percentile[usec]",
              "99.9% percentile[usec]"));
}

std::string lat_row(size_t bytes, int iters, const LatencyStats& s) {
  return end_line(sfmt(" %-10zu %-12d %-12.2f %-12.2f %-16.2f %-12.2f %-14.2f %-22.2f %-24.2f", bytes, iters, s.min,
                       s.max, s.typical, s.avg, s.stdev, s.p99, s.p999));
}

std::string stats_lines(const std::string& head, const std::vector<std::pair<std::string, uint64_t>>& counters) {
  std::string out = "# stats " + head + ":";
  std::vector<std::pair<std::string, std::string>> flows;  // (peer, " name=value ...") in first-seen order
  for (const auto& [name, value] : counters) {
    if (name.rfind("peer.", 0) == 0) {
      size_t dot = name.find('.', 5);
      if (dot == std::string::npos) continue;
      std::string peer = name.substr(5, dot - 5);
      auto it = std::find_if(flows.begin(), flows.end(), [&](const auto& f) { return f.first == peer; });
      if (it == flows.end()) it = flows.insert(flows.end(), {peer, ""});
      if (value != 0) it->second += " " + name.substr(dot + 1) + "=" + std::to_string(value);
    } else if (value != 0) {
      out += " " + name + "=" + std::to_string(value);
    }
  }
  out += "\n";
  for (const auto& [peer, text] : flows) out += "# stats " + head + " flow to rank " + peer + ":" + text + "\n";
  return out;
}

std::string render_json(const Json& meta, const Json& environment, const std::vector<Json>& rows) {
  std::string out = one_line(meta);
  out.pop_back();  // the outer object goes on after meta's keys
  out += meta.empty() ? "" : ", ";
  if (!environment.empty()) out += Json("environment").dump() + ": " + one_line(environment) + ",\n ";
  out += Json("rows").dump() + ": [";
  for (size_t i = 0; i < rows.size(); ++i) out += (i == 0 ? "\n  " : ",\n  ") + one_line(rows[i]);
  out += rows.empty() ? "]}\n" : "\n]}\n";
  return out;
}

Result<void> write_text_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return Error::from_errno("grex-perf: cannot open '" + path + "'", errno);
  size_t n = std::fwrite(text.data(), 1, text.size(), f);
  int err = n == text.size() ? 0 : errno;
  if (std::fclose(f) != 0 && err == 0) err = errno;
  if (err != 0) return Error::from_errno("grex-perf: cannot write '" + path + "'", err);
  return ok();
}

}  // namespace grex::perf
