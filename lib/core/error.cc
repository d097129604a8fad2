// SPDX-License-Identifier: Apache-2.0
// grex::Error formatting and error-code names.
#include <grex/result.h>

#include <cstring>

namespace grex {

std::string_view errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::kOk: return "ok";
    case Errc::kInvalidArgument: return "invalid-argument";
    case Errc::kNotSupported: return "not-supported";
    case Errc::kTimeout: return "timeout";
    case Errc::kPeerFailed: return "peer-failed";
    case Errc::kConnectionFailed: return "connection-failed";
    case Errc::kAuthFailed: return "auth-failed";
    case Errc::kAddressInUse: return "address-in-use";
    case Errc::kNoMemory: return "no-memory";
    case Errc::kSystem: return "system";
    case Errc::kProtocol: return "protocol";
    case Errc::kMismatch: return "mismatch";
    case Errc::kNotFound: return "not-found";
    case Errc::kInternal: return "internal";
  }
  return "unknown";
}

Error Error::from_errno(std::string_view what, int err) {
  std::string cause(what);
  cause += ": ";
  cause += std::strerror(err);
  return Error(err == ENOMEM ? Errc::kNoMemory : Errc::kSystem, std::move(cause));
}

Error&& Error::context(std::string_view what) && {
  std::string c(what);
  if (!c.empty() && !cause_.empty()) c += ": ";
  cause_ = c + cause_;
  return std::move(*this);
}

std::string Error::message() const {
  std::string m;
  if (!device_.empty()) m += device_ + ": ";
  if (rank_ >= 0) {
    m += "rank " + std::to_string(rank_);
    if (peer_ >= 0) m += " -> peer " + std::to_string(peer_);
    m += ": ";
  } else if (peer_ >= 0) {
    m += "peer " + std::to_string(peer_) + ": ";
  }
  m += cause_;
  if (!hint_.empty()) m += "; hint: " + hint_;
  return m;
}

}  // namespace grex
