// SPDX-License-Identifier: Apache-2.0
// host_id(): hostname plus the kernel's boot id.
#include "core/host.h"

#include <unistd.h>

#include <fstream>

namespace grex {

std::string host_id() {
  std::string id;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, id);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return std::string(host) + "/" + id;
}

}  // namespace grex
