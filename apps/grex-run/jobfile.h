// SPDX-License-Identifier: Apache-2.0
// grex-run's job files: where a running grex-run leaves its store's address
// and token (readable by its user alone), so `grex-run --status` finds the
// job from another terminal.
#pragma once

#include <grex/result.h>

#include <cstdint>
#include <string>
#include <vector>

namespace grex::run {

/// Writes this process's job file; its path. Errors name the folder and why
/// (a folder another user owns, or open to others, is refused).
Result<std::string> publish_job(const std::string& store_addr, const std::string& token);

/// `grex-run --status [PID]`: asks the running job (the one of this user, or
/// the one grex-run PID leads) and prints its status. Returns the exit code:
/// 0 every rank answered, 3 some did not, 1 no job or no store, 2 usage.
int print_status(const std::vector<std::string>& args, bool json, int64_t timeout_ms);

}  // namespace grex::run
