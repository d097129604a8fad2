// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the store protocol (lib/bootstrap/store_protocol.h):
// the input is a byte stream cut into frames the way the server cuts it
// (4-byte length, at most kMaxFrameBytes), and each body goes through
// parse_request, the server's only request parser. Invariants: what it
// accepts respects every limit, holds no more keys than the body could
// carry, and encodes back to exactly the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "bootstrap/store_protocol.h"
#include "tests/fuzz/fuzz_support.h"

namespace grex::fuzz {
namespace {

using namespace detail::store;  // NOLINT

std::string encode(const Request& q) {
  FrameWriter w(q.op);
  switch (q.op) {
    case Op::kSet:
      w.put_str(q.key);
      w.put_str(q.value);
      break;
    case Op::kGet:
      w.put_str(q.key);
      w.put_i64(q.timeout_ms);
      break;
    case Op::kAdd:
      w.put_str(q.key);
      w.put_i64(q.delta);
      break;
    case Op::kWait:
      w.put_i64(q.timeout_ms);
      [[fallthrough]];
    case Op::kCheck:
    case Op::kErase:
      w.put_u32(static_cast<uint32_t>(q.keys.size()));
      for (std::string_view k : q.keys) w.put_str(k);
      break;
    default:
      std::abort();
  }
  return w.take().substr(kFrameHeaderBytes);
}

void one_body(std::string_view body) {
  Request q;
  if (!parse_request(body, &q)) return;
  FUZZ_CHECK(q.key.size() <= kMaxKeyBytes && q.value.size() <= kMaxValueBytes);
  FUZZ_CHECK(q.keys.size() <= kMaxKeysPerRequest && q.keys.size() <= body.size() / 4);
  for (std::string_view k : q.keys) {
    FUZZ_CHECK(k.size() <= kMaxKeyBytes);
    FUZZ_CHECK(k.data() >= body.data() && k.data() + k.size() <= body.data() + body.size());
  }
  FUZZ_CHECK(encode(q) == body);  // the format has one encoding per request
}

}  // namespace
}  // namespace grex::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace grex::detail::store;  // NOLINT
  std::string_view in(reinterpret_cast<const char*>(data), size);
  grex::fuzz::one_body(in);  // the whole input as one body, too
  while (in.size() >= kFrameHeaderBytes) {
    const uint32_t n = decode_u32(in.data());
    if (n == 0 || n > kMaxFrameBytes || in.size() - kFrameHeaderBytes < n) break;  // the server drops the connection
    grex::fuzz::one_body(in.substr(kFrameHeaderBytes, n));
    in.remove_prefix(kFrameHeaderBytes + n);
  }
  return 0;
}
