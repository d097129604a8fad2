// SPDX-License-Identifier: Apache-2.0
// Entry point of the shared-memory driver (intra-host ranks).
#pragma once

#include <grex/transport.h>

namespace grex::shm {

/// Opens the shm device. Params (env override in brackets):
///   slots      ring slots per direction per peer [GREX_SHM_SLOTS], default 128
///   slot_bytes bytes per slot, header included [GREX_SHM_SLOT_BYTES], default 8192
///   cma        use process_vm_readv/writev for user memory [GREX_SHM_CMA], default 1
///   heap_bytes address space of the shared heap allocate() carves and peers
///              map at connect [GREX_SHM_HEAP_BYTES], default 64 GiB (0: off)
Result<std::unique_ptr<Device>> open_device(const DeviceOptions& opts);

}  // namespace grex::shm
