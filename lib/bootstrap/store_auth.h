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

}  // namespace grex::detail::store
