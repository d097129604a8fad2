// SPDX-License-Identifier: Apache-2.0
// machine_id(): hostname plus the kernel's boot id; host_id(): that plus the
// network namespace, or GREX_HOST_ID.
#include "core/host.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>

namespace grex {

std::string machine_id() {
  std::string id;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, id);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return std::string(host) + "/" + id;
}

std::string host_id() {
  std::string id;
  if (const char* v = std::getenv("GREX_HOST_ID"); v != nullptr && *v != 0) {
    id = v;
  } else {
    char ns[64] = {};
    ssize_t n = ::readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
    id = machine_id() + "/" + (n > 0 ? std::string(ns, static_cast<size_t>(n)) : std::string("net:?"));
  }
  for (char& c : id)
    if (std::isspace(static_cast<unsigned char>(c))) c = '_';
  return id;
}

}  // namespace grex
