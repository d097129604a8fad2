// SPDX-License-Identifier: Apache-2.0
// Environment override parsing.
#include "core/config.h"

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <strings.h>

namespace grex::config {
namespace {

Error bad(std::string_view name, std::string_view text, std::string_view want) {
  return Error(Errc::kInvalidArgument,
               std::string(name) + "='" + std::string(text) + "' is not " + std::string(want));
}

}  // namespace

Result<int64_t> parse_int(std::string_view text, std::string_view name) {
  int64_t v = 0;
  const char* b = text.data();
  const char* e = text.data() + text.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (text.empty() || ec != std::errc() || p != e) return bad(name, text, "an integer");
  return v;
}

Result<uint64_t> parse_size(std::string_view text, std::string_view name) {
  uint64_t v = 0;
  const char* b = text.data();
  const char* e = text.data() + text.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (text.empty() || ec != std::errc()) return bad(name, text, "a size (e.g. 4096, 64K, 1M, 2G)");
  uint64_t mult = 1;
  std::string_view rest(p, static_cast<size_t>(e - p));
  if (!rest.empty()) {
    char c = rest[0];
    if (c == 'k' || c == 'K') mult = 1ull << 10;
    else if (c == 'm' || c == 'M') mult = 1ull << 20;
    else if (c == 'g' || c == 'G') mult = 1ull << 30;
    else return bad(name, text, "a size (e.g. 4096, 64K, 1M, 2G)");
    rest.remove_prefix(1);
    if (rest == "iB" || rest == "B" || rest == "b") rest = {};
    if (!rest.empty()) return bad(name, text, "a size (e.g. 4096, 64K, 1M, 2G)");
  }
  if (v > UINT64_MAX / mult) return bad(name, text, "a size that fits in 64 bits");
  return v * mult;
}

Result<bool> parse_bool(std::string_view text, std::string_view name) {
  std::string t(text);
  for (const char* y : {"1", "true", "yes", "on"})
    if (strcasecmp(t.c_str(), y) == 0) return true;
  for (const char* n : {"0", "false", "no", "off"})
    if (strcasecmp(t.c_str(), n) == 0) return false;
  return bad(name, text, "a boolean (1/0, true/false, yes/no, on/off)");
}

Result<void> env_int(const char* name, int64_t* value, int64_t min, int64_t max) {
  const char* s = std::getenv(name);
  if (s == nullptr) return ok();
  int64_t v = GREX_TRY(parse_int(s, name));
  if (v < min || v > max)
    return Error(Errc::kInvalidArgument, std::string(name) + "=" + s + " is outside [" +
                                             std::to_string(min) + ", " + std::to_string(max) + "]");
  *value = v;
  return ok();
}

Result<void> env_int(const char* name, int* value, int64_t min, int64_t max) {
  int64_t v = *value;
  GREX_TRY(env_int(name, &v, min, max));
  *value = static_cast<int>(v);
  return ok();
}

Result<void> env_size(const char* name, uint64_t* value, uint64_t min, uint64_t max) {
  const char* s = std::getenv(name);
  if (s == nullptr) return ok();
  uint64_t v = GREX_TRY(parse_size(s, name));
  if (v < min || v > max)
    return Error(Errc::kInvalidArgument, std::string(name) + "=" + s + " is outside [" +
                                             std::to_string(min) + ", " + std::to_string(max) + "] bytes");
  *value = v;
  return ok();
}

Result<void> env_bool(const char* name, bool* value) {
  const char* s = std::getenv(name);
  if (s == nullptr) return ok();
  *value = GREX_TRY(parse_bool(s, name));
  return ok();
}

Result<void> env_string(const char* name, std::string* value) {
  const char* s = std::getenv(name);
  if (s != nullptr) *value = s;
  return ok();
}

std::string env_or_empty(const char* name) {
  const char* s = std::getenv(name);
  return s != nullptr ? std::string(s) : std::string();
}

}  // namespace grex::config
