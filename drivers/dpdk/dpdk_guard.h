// SPDX-License-Identifier: Apache-2.0
// A fault guard for PMD bursts on links whose peer can vanish (memif).
//
// DPDK 22.11's memif PMD unmaps a link's shared memory from its control
// thread when the peer disconnects, even while the data path is inside a
// burst on that link; the burst then faults. A guarded burst that faults
// returns false instead of crashing the process, and the caller abandons the
// port (its peer is gone). Faults outside a guarded burst go to the previous
// SIGSEGV/SIGBUS handler, or kill the process as usual.
#pragma once

#include <setjmp.h>

namespace grex::dpdk {

namespace detail {
extern thread_local sigjmp_buf* t_burst_guard;
void install_fault_guard() noexcept;
}  // namespace detail

/// Runs f(); returns false if it faulted (SIGSEGV/SIGBUS) instead.
template <class F>
bool guarded_burst(F&& f) noexcept {
  detail::install_fault_guard();
  sigjmp_buf jb;
  if (sigsetjmp(jb, 0) != 0) {  // no mask to restore: the handler runs with SA_NODEFER
    detail::t_burst_guard = nullptr;
    return false;
  }
  detail::t_burst_guard = &jb;
  f();
  detail::t_burst_guard = nullptr;
  return true;
}

}  // namespace grex::dpdk
