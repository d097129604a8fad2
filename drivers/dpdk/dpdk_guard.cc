// SPDX-License-Identifier: Apache-2.0
// The burst fault guard's signal handler (see dpdk_guard.h).
#include "drivers/dpdk/dpdk_guard.h"

#include <signal.h>

#include <mutex>

namespace grex::dpdk::detail {
namespace {

struct sigaction g_prev_segv;
struct sigaction g_prev_bus;

void on_fault(int sig, siginfo_t* info, void* ctx) {
  if (t_burst_guard != nullptr) siglongjmp(*t_burst_guard, 1);
  const struct sigaction& prev = sig == SIGSEGV ? g_prev_segv : g_prev_bus;
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, ctx);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  signal(sig, SIG_DFL);  // not a guarded burst: die as the process would have
  raise(sig);
}

}  // namespace

thread_local sigjmp_buf* t_burst_guard = nullptr;

void install_fault_guard() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa = {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_prev_segv);
    sigaction(SIGBUS, &sa, &g_prev_bus);
  });
}

}  // namespace grex::dpdk::detail
