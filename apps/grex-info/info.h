// SPDX-License-Identifier: Apache-2.0
// grex-info: what this host offers each grex backend. Every probe fills a
// Section: a verdict (usable or not, and why), text lines for people and a
// JSON value for scripts.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace grex::info {

/// A JSON value whose objects keep their keys in insertion order.
using Json = nlohmann::ordered_json;

/// What one probe found.
struct Section {
  std::string name;                ///< "shm", "verbs", "dpdk", "cuda"
  bool usable = false;             ///< a grex backend (or GPU path) can run here
  bool networking = false;         ///< usable between hosts (verbs, dpdk)
  std::string summary;             ///< one line: what, or why not
  std::vector<std::string> lines;  ///< details, already indented
  Json json = Json::object();      ///< the same as data: an object whose first key is "usable"
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
