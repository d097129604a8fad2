// SPDX-License-Identifier: Apache-2.0
// Driver settings: a key of DeviceOptions::params and its GREX_* environment
// variable, the one DeviceOptions::precedence names winning. Shared by the drivers.
#pragma once

#include <grex/transport.h>

#include <cstdint>
#include <string>

#include "congestion/cc.h"

namespace grex::detail {

/// The value of `env` when it is set, else of `key` in o.params; under
/// Precedence::kOptions a key in o.params wins. "" if neither is set.
std::string param(const DeviceOptions& o, const char* key, const char* env);
/// param() for settings that may differ per local rank: a value holding ';'
/// is a list, and local rank i takes entry i modulo its length (local rank
/// unknown: the first). Empty entries are an error naming `env`.
Result<std::string> param_for_local_rank(const DeviceOptions& o, const char* key, const char* env);
/// param() as an integer in [lo, hi]; `def` when unset. Errors name `env`.
Result<int64_t> param_int(const DeviceOptions& o, const char* key, const char* env, int64_t lo, int64_t hi,
                          int64_t def);
/// The congestion controller named by "cc" / GREX_CC; nullptr when unset or
/// "none". Errors: kInvalidArgument for a name that is no controller.
Result<const cc::Algorithm*> param_cc(const DeviceOptions& o);

}  // namespace grex::detail
