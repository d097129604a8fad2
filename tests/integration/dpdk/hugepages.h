// SPDX-License-Identifier: Apache-2.0
// Hugepages for a test that runs DPDK on them (memif zero-copy mode).
#pragma once

#include <cstdio>
#include <string>

namespace grex::test {

// Hugepages for a test: takes `pages` 2 MiB pages that are free now, or
// reserves that many more (root) and gives them back when it goes.
class Hugepages {
 public:
  explicit Hugepages(long pages) {
    const long total = read_long("/proc/sys/vm/nr_hugepages");
    if (free_pages() >= pages) return;
    FILE* f = std::fopen("/proc/sys/vm/nr_hugepages", "w");
    if (f == nullptr || total < 0) {
      if (f != nullptr) std::fclose(f);
      why_ = "no " + std::to_string(pages) + " free hugepages and /proc/sys/vm/nr_hugepages is not writable (not root)";
      return;
    }
    std::fprintf(f, "%ld\n", total + pages);
    std::fclose(f);
    restore_ = total;
    if (free_pages() < pages) why_ = "the kernel could not reserve " + std::to_string(pages) + " hugepages";
  }
  ~Hugepages() {
    if (restore_ < 0) return;
    if (FILE* f = std::fopen("/proc/sys/vm/nr_hugepages", "w")) {
      std::fprintf(f, "%ld\n", restore_);
      std::fclose(f);
    }
  }
  const std::string& why_not() const { return why_; }

 private:
  static long read_long(const char* path) {
    long v = -1;
    if (FILE* f = std::fopen(path, "r")) {
      if (std::fscanf(f, "%ld", &v) != 1) v = -1;
      std::fclose(f);
    }
    return v;
  }
  static long free_pages() {
    long v = 0;
    if (FILE* f = std::fopen("/proc/meminfo", "r")) {
      char line[256];
      while (std::fgets(line, sizeof(line), f) != nullptr)
        if (std::sscanf(line, "HugePages_Free: %ld", &v) == 1) break;
      std::fclose(f);
    }
    return v;
  }
  long restore_ = -1;
  std::string why_;
};

}  // namespace grex::test
