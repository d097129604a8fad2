// SPDX-License-Identifier: Apache-2.0
#include "transport/params.h"

#include <cstdlib>
#include <vector>

#include "core/config.h"

namespace grex::detail {

std::string param(const DeviceOptions& o, const char* key, const char* env) {
  auto it = o.params.find(key);
  const bool given = it != o.params.end();
  if (given && o.precedence == Precedence::kOptions) return it->second;
  if (const char* e = std::getenv(env)) return e;
  return given ? it->second : std::string();
}

Result<std::string> param_for_local_rank(const DeviceOptions& o, const char* key, const char* env) {
  const std::string v = param(o, key, env);
  if (v.find(';') == std::string::npos) return v;
  std::vector<std::string> entries;
  for (size_t at = 0;;) {
    const size_t end = v.find(';', at);
    std::string e = v.substr(at, end == std::string::npos ? std::string::npos : end - at);
    const size_t b = e.find_first_not_of(" \t"), z = e.find_last_not_of(" \t");
    e = b == std::string::npos ? std::string() : e.substr(b, z - b + 1);
    if (e.empty())
      return Error(Errc::kInvalidArgument, std::string(env) + "='" + v + "' has an empty entry " +
                                               std::to_string(entries.size()))
          .hint("one entry per local rank, separated by ';'");
    entries.push_back(std::move(e));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  const size_t i = o.local_rank > 0 ? static_cast<size_t>(o.local_rank) % entries.size() : 0;
  return entries[i];
}

Result<int64_t> param_int(const DeviceOptions& o, const char* key, const char* env, int64_t lo, int64_t hi,
                          int64_t def) {
  std::string v = param(o, key, env);
  if (v.empty()) return def;
  int64_t x = GREX_TRY(config::parse_int(v, env));
  if (x < lo || x > hi)
    return Error(Errc::kInvalidArgument,
                 std::string(env) + "=" + v + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

Result<const cc::Algorithm*> param_cc(const DeviceOptions& o) {
  std::string name = param(o, "cc", "GREX_CC");
  if (name.empty() || name == "none") return static_cast<const cc::Algorithm*>(nullptr);
  const cc::Algorithm* a = cc::find(name);
  if (a == nullptr)
    return Error(Errc::kInvalidArgument, "GREX_CC='" + name + "' is not a congestion controller")
        .hint("one of: " + cc::algorithm_names());
  return a;
}

}  // namespace grex::detail
