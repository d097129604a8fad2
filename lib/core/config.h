// SPDX-License-Identifier: Apache-2.0
// Typed reads of GREX_* environment overrides, with errors that name the variable.
#pragma once

#include <grex/result.h>

#include <cstdint>
#include <string>

namespace grex::config {

/// Parses a decimal integer; rejects trailing junk and overflow.
Result<int64_t> parse_int(std::string_view text, std::string_view name);
/// Parses a byte size with optional K/M/G suffix (powers of 1024): "64K", "1M", "4096".
Result<uint64_t> parse_size(std::string_view text, std::string_view name);
/// Parses 1/0, true/false, yes/no, on/off.
Result<bool> parse_bool(std::string_view text, std::string_view name);

/// If env var `name` is set, parses it into *value; unset leaves *value alone.
Result<void> env_int(const char* name, int64_t* value, int64_t min, int64_t max);
Result<void> env_int(const char* name, int* value, int64_t min, int64_t max);
Result<void> env_size(const char* name, uint64_t* value, uint64_t min, uint64_t max);
Result<void> env_bool(const char* name, bool* value);
Result<void> env_string(const char* name, std::string* value);

/// Reads env var `name`, or "" when unset.
std::string env_or_empty(const char* name);

}  // namespace grex::config
