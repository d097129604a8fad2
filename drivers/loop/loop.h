// SPDX-License-Identifier: Apache-2.0
// Entry point of the loop driver: devices of one process, joined in memory.
#pragma once

#include <grex/transport.h>

namespace grex::loop {

/// Opens a loop device. Devices of one process find each other through a
/// process-wide registry keyed by their local_address(); endpoints move bytes
/// with memcpy and report completions through each device's poll(), under
/// the same contract as the other drivers. Meant for tests: the ranks of a
/// job are threads of one process (LocalStore for their bootstrap).
/// Params (env override in brackets):
///   slots      message slots per direction per peer [GREX_LOOP_SLOTS], default 256
/// Errors: kInvalidArgument for a bad parameter or an empty job id.
Result<std::unique_ptr<Device>> open_device(const DeviceOptions& opts);

}  // namespace grex::loop
