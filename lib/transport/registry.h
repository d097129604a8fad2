// SPDX-License-Identifier: Apache-2.0
// The table of drivers built into this libgrex.
#pragma once

#include <grex/transport.h>

namespace grex::detail {

using DriverOpenFn = Result<std::unique_ptr<Device>> (*)(const DeviceOptions&);

struct DriverEntry {
  const char* name;
  DriverOpenFn open;       // nullptr when compiled out
  const char* missing_hint;  // why it is not built and how to build it
};

/// Every known driver, built or not.
std::span<const DriverEntry> drivers() noexcept;

}  // namespace grex::detail
