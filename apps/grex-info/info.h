// SPDX-License-Identifier: Apache-2.0
// grex-info: what this host offers each grex backend. Every probe fills a
// Section: a verdict (usable or not, and why), text lines for people and a
// JSON value for scripts.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace grex::info {

/// A JSON value: null, bool, integer, number, string, array or object (keys in insertion order).
class Json {
 public:
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;
  Json() = default;
  Json(bool b) : v_(b) {}                                      // NOLINT: implicit by design
  Json(int i) : v_(static_cast<int64_t>(i)) {}                 // NOLINT
  Json(int64_t i) : v_(i) {}                                   // NOLINT
  Json(uint64_t i) : v_(static_cast<int64_t>(i)) {}            // NOLINT
  Json(double d) : v_(d) {}                                    // NOLINT
  Json(const char* s) : v_(std::string(s)) {}                  // NOLINT
  Json(std::string s) : v_(std::move(s)) {}                    // NOLINT
  Json(Array a) : v_(std::make_shared<Array>(std::move(a))) {}    // NOLINT
  Json(Object o) : v_(std::make_shared<Object>(std::move(o))) {}  // NOLINT

  /// Indented JSON text, with `indent` spaces of nesting already.
  std::string dump(int indent = 0) const;

 private:
  std::variant<std::monostate, bool, int64_t, double, std::string, std::shared_ptr<Array>, std::shared_ptr<Object>> v_;
};

/// What one probe found.
struct Section {
  std::string name;                ///< "shm", "verbs", "dpdk", "cuda"
  bool usable = false;             ///< a grex backend (or GPU path) can run here
  bool networking = false;         ///< usable between hosts (verbs, dpdk)
  std::string summary;             ///< one line: what, or why not
  std::vector<std::string> lines;  ///< details, already indented
  Json::Object json;               ///< the same as data
};

Section probe_shm();
Section probe_verbs();
Section probe_dpdk();
Section probe_cuda();

/// Reads a small sysfs / procfs file, trailing newline removed; "" when missing.
std::string read_text(const std::string& path);
/// Entries of a directory (no . and ..), sorted; empty when missing.
std::vector<std::string> list_dir(const std::string& path);

}  // namespace grex::info
