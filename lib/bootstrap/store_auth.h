// SPDX-License-Identifier: Apache-2.0
// The store's mutual HMAC-SHA256 challenge: nonces and the two proofs keyed by the job token.
#pragma once

#include "bootstrap/store_protocol.h"

#include <grex/result.h>

#include <string>
#include <string_view>

namespace grex::detail::store {

/// kNonceBytes random bytes from the OpenSSL CSPRNG.
Result<std::string> make_nonce();
/// The client's proof: HMAC(token, "grex-store-v1 client" || server_nonce).
std::string client_proof(std::string_view token, std::string_view server_nonce);
/// The server's proof: HMAC(token, "grex-store-v1 server" || client_nonce).
std::string server_proof(std::string_view token, std::string_view client_nonce);
/// Constant-time equality of two proofs (false when sizes differ).
bool proof_equal(std::string_view a, std::string_view b) noexcept;

/// The session after the handshake (issue 28): every frame after kAuthOk, both
/// ways, ends in a kSessionTagBytes tag, HMAC-SHA256 over its direction, its
/// number on that direction and its body, keyed by
/// HMAC(token, "grex-store-v1 session" || server nonce || client nonce).
/// A frame forged, altered, replayed, dropped or reordered on the way fails.
inline constexpr size_t kSessionTagBytes = 16;
class Session {
 public:
  Session() = default;
  Session(std::string_view token, std::string_view server_nonce, std::string_view client_nonce, bool is_server);
  bool active() const noexcept { return !key_.empty(); }
  /// A finished frame (FrameWriter::take) with the tag appended and its length fixed.
  std::string seal(std::string frame);
  /// Checks and strips the tag of a received frame body; false when it fails.
  bool open(std::string_view body, std::string_view* inner);

 private:
  std::string tag(char dir, uint64_t n, std::string_view body) const;
  std::string key_;
  bool server_ = false;
  uint64_t tx_ = 0, rx_ = 0;
};

}  // namespace grex::detail::store
