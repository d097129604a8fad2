// SPDX-License-Identifier: Apache-2.0
// What the verbs suites share: the driver under test and its DeviceOptions
// (the Soft-RoCE device tests/scripts/softroce.sh made, when there is one),
// the skip rule (REQUIRE_VERBS), and data-path helpers for a transport that
// may accept only part of a batch.
//
// Environment:
//   GREX_RXE_DEV, GREX_IB_GID_INDEX  set by softroce.sh: passed as the params
//                                    "dev" and "gid_index" (without them the
//                                    driver picks the first active port)
//   GREX_SOFTROCE=host|vm            set by softroce.sh: a device must exist, so
//                                    "no RDMA device" is a failure, not a skip,
//                                    and the rxe-specific checks apply
//   GREX_TEST_VERBS_DRIVER=NAME      development only: run the same cases over
//                                    another driver (shm) to check the harness
//                                    itself; verbs-only checks then skip
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "../shm/harness.h"
#include "core/clock.h"

namespace grex::test {

inline std::string env_or(const char* name, const char* def = "") {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : std::string(def);
}

/// The driver these suites exercise: "verbs" unless GREX_TEST_VERBS_DRIVER says otherwise.
inline std::string verbs_driver() { return env_or("GREX_TEST_VERBS_DRIVER", "verbs"); }
inline bool testing_verbs() { return verbs_driver() == "verbs"; }
/// Running under tests/scripts/softroce.sh (host rdma_rxe or the qemu VM).
inline bool under_softroce() { return !env_or("GREX_SOFTROCE").empty(); }

/// DeviceOptions for the driver under test, on softroce.sh's device when set.
inline DeviceOptions verbs_options(const std::map<std::string, std::string>& extra = {}) {
  DeviceOptions o;
  o.driver = verbs_driver();
  if (auto dev = env_or("GREX_RXE_DEV"); !dev.empty()) o.params["dev"] = dev;
  if (auto gid = env_or("GREX_IB_GID_INDEX"); !gid.empty()) o.params["gid_index"] = gid;
  for (const auto& [k, v] : extra) o.params[k] = v;
  return o;
}

/// Whether the cases can run here: decided once per process by opening the
/// device in a child process (a crash in open cannot take the test binary,
/// and its XML report, with it; the parent forks the ranks with no verbs state).
struct Probe {
  enum Kind { kRun, kSkip, kFail } kind = kRun;
  std::string why;
};

inline Probe probe_device() {
  const std::string driver = verbs_driver();
  bool built = false;
  for (const auto& d : Device::available_drivers()) built |= d == driver;
  if (!built) {
    DeviceOptions o;
    o.driver = driver;
    auto d = Device::open(o);  // not built: fails at once, with the registry's reason
    std::string detail = d.ok() ? "" : " (" + d.error().message() + ")";
    if (driver == "verbs")
      return {Probe::kSkip,
              "libgrex was built without rdma-core: install libibverbs-dev librdmacm-dev and reconfigure" + detail};
    return {Probe::kSkip, "driver '" + driver + "' (GREX_TEST_VERBS_DRIVER) is not built into this libgrex" + detail};
  }
  int fds[2];
  if (::pipe(fds) != 0) return {Probe::kFail, "pipe() failed"};
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    DeviceOptions o = verbs_options();
    o.job_id = "verbs-probe-" + std::to_string(::getpid());
    std::string msg;
    {  // the device is closed again before the parent hears back
      auto d = Device::open(o);
      msg = d.ok() ? "ok " + (*d)->capabilities().device_name
                   : (d.error().code() == Errc::kNotFound ? "notfound " : "error ") + d.error().message();
    }
    ssize_t w = ::write(fds[1], msg.data(), msg.size());
    (void)w;
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) msg.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return {Probe::kFail, "fork() for the device probe failed"};
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return {Probe::kFail, "opening driver '" + driver + "' crashed the probe process (status " +
                              std::to_string(status) + ")"};
  if (msg.rfind("ok ", 0) == 0) return {Probe::kRun, msg.substr(3)};
  if (msg.rfind("notfound ", 0) == 0) {
    std::string err = msg.substr(9);
    if (under_softroce())
      return {Probe::kFail, "softroce.sh made " + env_or("GREX_RXE_DEV", "an rxe device") +
                                " (GREX_SOFTROCE=" + env_or("GREX_SOFTROCE") + ") but driver '" + driver +
                                "' found none: " + err};
    return {Probe::kSkip, "no RDMA device: run under tests/scripts/softroce.sh (" + err + ")"};
  }
  return {Probe::kFail, "opening driver '" + driver + "' failed: " + (msg.empty() ? "?" : msg.substr(6))};
}

inline const Probe& probe() {
  static const Probe p = [] {
    Probe q = probe_device();
    if (q.kind == Probe::kRun)
      std::printf("verbs suites: driver '%s' on device '%s'%s%s\n", verbs_driver().c_str(), q.why.c_str(),
                  under_softroce() ? ", GREX_SOFTROCE=" : "", env_or("GREX_SOFTROCE").c_str());
    return q;
  }();
  return p;
}

/// First statement of every case: skips (with the reason) or fails per probe().
#define REQUIRE_VERBS()                                                        \
  do {                                                                         \
    const ::grex::test::Probe& probe_ = ::grex::test::probe();                 \
    if (probe_.kind == ::grex::test::Probe::kSkip) GTEST_SKIP() << probe_.why; \
    if (probe_.kind == ::grex::test::Probe::kFail) FAIL() << probe_.why;       \
  } while (0)

/// checksum() of the bytes fill(p, n, seed) writes, without a buffer (a
/// receiver of 64 MiB need not hold a second 64 MiB copy in a 512 MiB VM).
inline uint64_t fill_checksum(size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    h = (h ^ static_cast<uint8_t>(x)) * 1099511628211ull;
  }
  return h;
}

/// Posts every request, polling (completions go to `done`) whenever the
/// transport takes only part of the batch with error kOk (queue full), as
/// transport.h allows. False after printing why on an error or timeout.
template <class Req, class Post>
bool post_all(Device& dev, const std::vector<Req>& reqs, Post post, std::vector<Completion>* done,
              int64_t timeout_ms = 60'000) {
  Deadline dl = Deadline::after_ms(timeout_ms);
  Completion cs[32];
  size_t at = 0;
  while (at < reqs.size()) {
    PostResult pr = post(std::span<const Req>(reqs).subspan(at));
    at += pr.count;
    if (pr.error != Errc::kOk) {
      std::fprintf(stderr, "post_all: %zu of %zu posted, then error %s\n", at, reqs.size(),
                   std::string(errc_name(pr.error)).c_str());
      return false;
    }
    if (at < reqs.size()) {
      size_t n = dev.poll(cs);
      done->insert(done->end(), cs, cs + n);
      if (dl.expired()) {
        std::fprintf(stderr, "post_all: queue stayed full; %zu of %zu posted\n", at, reqs.size());
        return false;
      }
    }
  }
  return true;
}

/// A device counter by name (UINT64_MAX when the device has none of that name).
inline uint64_t counter_of(Device& dev, const std::string& name) {
  for (auto& [k, v] : dev.counters())
    if (k == name) return v;
  return UINT64_MAX;
}

inline const char* op_name(Op op) {
  switch (op) {
    case Op::kSend: return "send";
    case Op::kRecv: return "recv";
    case Op::kWrite: return "write";
    case Op::kRemoteWrite: return "remote-write";
    case Op::kRead: return "read";
  }
  return "?";
}

inline void print_completion(const char* what, const Completion& c) {
  std::fprintf(stderr, "%s: op %s status %s context %llu bytes %llu tag %llu peer %d imm %u\n", what, op_name(c.op),
               std::string(status_name(c.status)).c_str(), static_cast<unsigned long long>(c.context),
               static_cast<unsigned long long>(c.bytes), static_cast<unsigned long long>(c.tag), c.peer, c.imm);
}

}  // namespace grex::test
