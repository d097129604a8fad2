// SPDX-License-Identifier: Apache-2.0
// HMAC-SHA256 proofs and nonces for the store handshake (OpenSSL libcrypto).
#include "bootstrap/store_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
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

Session::Session(std::string_view token, std::string_view server_nonce, std::string_view client_nonce, bool is_server)
    : server_(is_server) {
  std::string nonces(server_nonce);
  nonces.append(client_nonce);
  key_ = proof(token, "grex-store-v1 session", nonces);  // empty on failure: inactive, and open() fails
}

std::string Session::tag(char dir, uint64_t n, std::string_view body) const {
  unsigned char head[9];
  head[0] = static_cast<unsigned char>(dir);
  for (int i = 0; i < 8; ++i) head[1 + i] = static_cast<unsigned char>(n >> (8 * i));
  unsigned char mac[EVP_MAX_MD_SIZE];
  size_t len = 0;
  // The algorithm is looked up once per process, not per frame (a provider
  // search); a context per frame is what HMAC's key setup needs anyway.
  static EVP_MAC* const m = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* c = m != nullptr ? EVP_MAC_CTX_new(m) : nullptr;
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0), OSSL_PARAM_construct_end()};
  const bool ok = c != nullptr &&
                  EVP_MAC_init(c, reinterpret_cast<const unsigned char*>(key_.data()), key_.size(), params) == 1 &&
                  EVP_MAC_update(c, head, sizeof(head)) == 1 &&
                  EVP_MAC_update(c, reinterpret_cast<const unsigned char*>(body.data()), body.size()) == 1 &&
                  EVP_MAC_final(c, mac, &len, sizeof(mac)) == 1 && len >= kSessionTagBytes;
  EVP_MAC_CTX_free(c);
  return ok ? std::string(reinterpret_cast<const char*>(mac), kSessionTagBytes) : std::string();
}

std::string Session::seal(std::string frame) {
  if (!active()) return frame;
  const std::string t = tag(server_ ? 'S' : 'C', tx_++, std::string_view(frame).substr(kFrameHeaderBytes));
  frame.append(t.empty() ? std::string(kSessionTagBytes, '\0') : t);
  const auto n = static_cast<uint32_t>(frame.size() - kFrameHeaderBytes);
  for (int i = 0; i < 4; ++i) frame[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return frame;
}

bool Session::open(std::string_view body, std::string_view* inner) {
  if (!active() || body.size() <= kSessionTagBytes) return false;
  const std::string_view in = body.substr(0, body.size() - kSessionTagBytes);
  const std::string want = tag(server_ ? 'C' : 'S', rx_, in);
  if (want.size() != kSessionTagBytes ||
      CRYPTO_memcmp(want.data(), body.data() + in.size(), kSessionTagBytes) != 0)
    return false;
  ++rx_;
  *inner = in;
  return true;
}

}  // namespace grex::detail::store
