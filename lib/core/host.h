// SPDX-License-Identifier: Apache-2.0
// Identity of the host this process runs on, for telling local peers from remote ones.
#pragma once

#include <string>

namespace grex {

/// "<hostname>/<boot id>": equal for two processes exactly when they run on
/// one kernel (one boot), even across containers with the same hostname.
/// What decides whether memory can be shared (shm, memif) and whether ranks
/// compete for the same cores.
std::string machine_id();

/// The "host" a communicator groups ranks by (ranks of one host talk over
/// shared memory, hosts over the network): GREX_HOST_ID where it is set and
/// not empty, else machine_id() plus this process's network namespace
/// ("/net:[4026531840]"). Processes in different network namespaces are
/// different hosts, as containers with their own network are, and as the
/// tests' "hosts" (namespaces joined by veth links) must be. Whitespace is
/// replaced by '_' (the id travels in space-separated records).
std::string host_id();

}  // namespace grex
