// SPDX-License-Identifier: Apache-2.0
// Small TCP helpers for the store: listen, one connect attempt, and deadline-bounded frame I/O.
#pragma once

#include "core/clock.h"

#include <grex/result.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace grex::detail::store {

/// "host:port", with brackets around an IPv6 literal.
std::string host_port(std::string_view host, uint16_t port);

/// A non-blocking listening socket on host:port with SO_REUSEADDR.
/// Errors: kAddressInUse naming host:port, kInvalidArgument for an unknown host.
Result<int> listen_tcp(const std::string& host, uint16_t port);
/// The local port a socket is bound to (0 on failure).
uint16_t bound_port(int fd) noexcept;

/// One non-blocking connect attempt to host:port, bounded by the deadline.
/// Returns a connected non-blocking socket with TCP_NODELAY, or kConnectionFailed
/// (refused, unreachable, unresolvable: worth retrying) with the cause.
Result<int> connect_tcp_once(const std::string& host, uint16_t port, const Deadline& deadline);

/// Makes fd non-blocking and sets TCP_NODELAY (best effort).
void tune_socket(int fd) noexcept;
/// TCP keepalive (probes after 10 s idle, every 5 s, 3 lost: a dead peer in
/// about 25 s) and a 30 s limit on unacknowledged data (TCP_USER_TIMEOUT): a
/// peer whose link went down without a reset ends in an error, not a hang.
void keepalive_socket(int fd) noexcept;

/// Writes all of data before the deadline. kTimeout or kConnectionFailed (peer gone).
Result<void> send_all(int fd, std::string_view data, const Deadline& deadline);
/// Reads one frame and returns its body (at most max_body bytes, else kProtocol).
/// kTimeout at the deadline, kConnectionFailed when the peer closed or reset.
Result<std::string> recv_frame(int fd, const Deadline& deadline, size_t max_body);

}  // namespace grex::detail::store
