// SPDX-License-Identifier: Apache-2.0
// JSON text helpers for the tools' --json output (grex-perf, grex-info).
#pragma once

#include <string>
#include <string_view>

namespace grex {

/// Appends `s` to `out` as a JSON string literal: quoted, with ", \ and
/// control characters escaped (RFC 8259 section 7).
void append_json_string(std::string& out, std::string_view s);

}  // namespace grex
