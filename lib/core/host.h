// SPDX-License-Identifier: Apache-2.0
// Identity of the host this process runs on, for telling local peers from remote ones.
#pragma once

#include <string>

namespace grex {

/// "<hostname>/<boot id>": equal for two processes exactly when they share a
/// host (and its boot), even across containers with the same hostname.
std::string host_id();

}  // namespace grex
