// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the address strings peers exchange through the store
// (drivers/dpdk/dpdk_address.h): any string either parses or is refused,
// never throws or reads out of bounds, and what parses formats back to the
// same string.
#include <cstdint>
#include <string>
#include <string_view>

#include "drivers/dpdk/dpdk_address.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  grex::dpdk::PeerAddress a;
  if (!grex::dpdk::parse_address(in, &a)) return 0;
  FUZZ_CHECK(a.max_payload >= 64 && a.max_payload <= 65535 && a.udp_port != 0 && !a.host_id.empty());
  grex::dpdk::PeerAddress b;
  const std::string again = grex::dpdk::format_address(a);
  FUZZ_CHECK(grex::dpdk::parse_address(again, &b));
  FUZZ_CHECK(grex::dpdk::format_address(b) == again);
  return 0;
}
