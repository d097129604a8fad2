// SPDX-License-Identifier: Apache-2.0
// HMAC-SHA256 proofs and nonces for the store handshake (OpenSSL libcrypto).
#include "bootstrap/store_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace grex::detail::store {
namespace {

constexpr std::string_view kClientLabel = "grex-store-v1 client";
constexpr std::string_view kServerLabel = "grex-store-v1 server";

std::string proof(std::string_view token, std::string_view label, std::string_view nonce) {
  std::string msg;
  msg.reserve(label.size() + nonce.size());
  msg.append(label);
  msg.append(nonce);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  if (HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), mac, &mac_len) == nullptr ||
      mac_len != kMacBytes) {
    return std::string();  // never equal to a real proof
  }
  return std::string(reinterpret_cast<const char*>(mac), mac_len);
}

}  // namespace

Result<std::string> make_nonce() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) != 1)
    return Error(Errc::kSystem, "store: RAND_bytes failed to produce a nonce");
  return nonce;
}

std::string client_proof(std::string_view token, std::string_view server_nonce) {
  return proof(token, kClientLabel, server_nonce);
}

std::string server_proof(std::string_view token, std::string_view client_nonce) {
  return proof(token, kServerLabel, client_nonce);
}

bool proof_equal(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size() || a.size() != kMacBytes) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace grex::detail::store
