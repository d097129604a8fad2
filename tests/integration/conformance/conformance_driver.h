// SPDX-License-Identifier: Apache-2.0
// The per-driver layer of the conformance suite: which driver this run tests
// (GREX_CONFORMANCE_DRIVER), whether it can run here (else a skip that says
// why), its DeviceOptions for each rank, how its ranks run (forked processes,
// or threads of this process for loop), how a rank dies, and how long a
// survivor may take to notice. To add a driver, add a Flavor here: the
// checks in conformance_test.cc stay as they are.
//
//   shm            two forked processes
//   loop           two threads of this process (LocalStore bootstrap)
//   dpdk-memif     two forked processes joined by net_memif
//   dpdk-afpacket  two forked processes, each in a network namespace this
//                  binary creates (veth pair, MTU 9000) and removes at exit
//   verbs          two forked processes on the RDMA device softroce.sh made
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <string>

#include "../verbs/verbs_env.h"

namespace grex::test {

enum class Flavor { kShm, kLoop, kDpdkMemif, kDpdkAfPacket, kVerbs };

/// Exit code of a loop rank that "died" (destroyed its device): threads cannot be killed.
constexpr int kLoopDeathCode = 66;

inline bool driver_built(const char* name) {
  for (const auto& d : Device::available_drivers())
    if (d == name) return true;
  return false;
}

/// Two network namespaces joined by a veth pair, for dpdk over af_packet.
class NetnsPair {
 public:
  NetnsPair() : tag_(std::to_string(::getpid())) {}
  ~NetnsPair() { remove(); }
  /// Creates them; an empty string, or why not.
  std::string create() {
    if (::geteuid() != 0) return "needs root to create network namespaces";
    if (std::system("ip netns list > /dev/null 2>&1") != 0) return "'ip netns' is unavailable (iproute2)";
    const std::string a = ns(0), b = ns(1);
    const std::string cmds[] = {
        "ip netns add " + a,
        "ip netns add " + b,
        "ip link add " + dev(0) + " netns " + a + " type veth peer name " + dev(1) + " netns " + b,
        "ip -n " + a + " link set " + dev(0) + " mtu 9000 up",
        "ip -n " + b + " link set " + dev(1) + " mtu 9000 up",
        "ip -n " + a + " addr add " + ip(0) + "/24 dev " + dev(0),
        "ip -n " + b + " addr add " + ip(1) + "/24 dev " + dev(1),
    };
    made_ = true;
    for (const auto& c : cmds)
      if (std::system((c + " > /dev/null 2>&1").c_str()) != 0) return "could not run '" + c + "' (no veth support?)";
    return "";
  }
  void remove() {
    if (!made_) return;
    made_ = false;
    for (int i = 0; i < 2; ++i)  // deleting a namespace takes its veth end, so both
      (void)!std::system(("ip netns del " + ns(i) + " > /dev/null 2>&1").c_str());
  }
  std::string ns(int i) const { return std::string(i == 0 ? "grexcfA" : "grexcfB") + tag_; }
  std::string dev(int i) const { return std::string(i == 0 ? "cfA" : "cfB") + tag_; }
  static std::string ip(int i) { return i == 0 ? "10.97.1.1" : "10.97.1.2"; }
  /// Moves the calling process into namespace i (a forked rank, before it opens DPDK).
  bool enter(int i) const {
    int fd = ::open(("/var/run/netns/" + ns(i)).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    bool ok = ::setns(fd, CLONE_NEWNET) == 0;
    ::close(fd);
    return ok;
  }

 private:
  std::string tag_;
  bool made_ = false;
};

class Driver {
 public:
  static Driver& get() {
    static Driver d;
    return d;
  }

  const std::string& name() const { return name_; }
  Flavor flavor() const { return flavor_; }
  bool processes() const { return flavor_ != Flavor::kLoop; }

  /// Decided once: run, skip (with why), or fail (a device that should be there is not).
  const Probe& probe() {
    if (!probed_) {
      probe_ = decide();
      probed_ = true;
      if (probe_.kind == Probe::kRun) std::printf("conformance: driver %s%s\n", name_.c_str(), probe_.why.c_str());
    }
    return probe_;
  }

  /// Options for `rank`; `extra` params on top (queue depth etc. are set by the caller after).
  DeviceOptions options(int rank, const std::map<std::string, std::string>& extra = {}) const {
    DeviceOptions o;
    switch (flavor_) {
      case Flavor::kShm: o.driver = "shm"; break;
      case Flavor::kLoop: o.driver = "loop"; break;
      case Flavor::kDpdkMemif:
        o.driver = "dpdk";
        o.params["memif_dir"] = "/tmp";
        break;
      case Flavor::kDpdkAfPacket:
        o.driver = "dpdk";
        o.params["mode"] = "port";
        o.params["port"] = "net_af_packet0,iface=" + netns_.dev(rank) + ",framesz=10240,blocksz=20480,framecnt=512";
        o.params["ip"] = NetnsPair::ip(rank);
        o.params["mtu"] = "9000";
        break;
      case Flavor::kVerbs: o = verbs_options(); break;
    }
    if (flavor_ == Flavor::kDpdkMemif || flavor_ == Flavor::kDpdkAfPacket) o.queue_depth = 2048;
    for (const auto& [k, v] : extra) o.params[k] = v;
    return o;
  }

  /// Parameters that make a dead peer known quickly (dpdk: 1 s of silence;
  /// verbs: IB timeout 12, 2 retries), and the bound the survivor must meet.
  std::map<std::string, std::string> death_params() const {
    if (flavor_ == Flavor::kDpdkMemif || flavor_ == Flavor::kDpdkAfPacket) return {{"give_up_ms", "1000"}};
    if (flavor_ == Flavor::kVerbs) return {{"timeout", "12"}, {"retry_cnt", "2"}};
    return {};
  }
  uint64_t death_bound_ms() const { return flavor_ == Flavor::kShm || flavor_ == Flavor::kLoop ? 1'000 : 5'000; }
  /// The status a rank that died ends with, as run() reports it.
  int death_code() const { return processes() ? 128 + SIGKILL : kLoopDeathCode; }

  /// Runs fn on 2 ranks. Processes are killed after timeout_s; threads
  /// cannot be, so loop's checks bound their own waits.
  RunResult run(const std::function<int(Rank&)>& fn, int timeout_s = 120) {
    auto inside = [this, &fn](Rank& r) -> int {
      if (flavor_ == Flavor::kDpdkAfPacket && !netns_.enter(r.rank)) {
        std::fprintf(stderr, "rank %d: cannot enter namespace %s\n", r.rank, netns_.ns(r.rank).c_str());
        return 91;
      }
      return fn(r);
    };
    return processes() ? run_ranks(2, inside, timeout_s) : run_thread_ranks(2, inside);
  }

  /// A rank leaves abruptly: SIGKILL for a process; for a loop thread, its
  /// endpoints and device go (what a peer sees of a dead process).
  int die(Link& link) const {
    if (processes()) ::raise(SIGKILL);
    link.eps.clear();
    link.dev.reset();
    return kLoopDeathCode;
  }

 private:
  Driver() : name_(env_or("GREX_CONFORMANCE_DRIVER", "shm")) {
    static const std::map<std::string, Flavor> kByName = {{"shm", Flavor::kShm},
                                                          {"loop", Flavor::kLoop},
                                                          {"dpdk-memif", Flavor::kDpdkMemif},
                                                          {"dpdk-afpacket", Flavor::kDpdkAfPacket},
                                                          {"verbs", Flavor::kVerbs}};
    auto it = kByName.find(name_);
    known_ = it != kByName.end();
    if (known_) flavor_ = it->second;
  }

  Probe decide() {
    if (!known_)
      return {Probe::kFail, "GREX_CONFORMANCE_DRIVER='" + name_ +
                                "' is not one of shm, loop, dpdk-memif, dpdk-afpacket, verbs"};
    switch (flavor_) {
      case Flavor::kShm:
      case Flavor::kLoop: return {Probe::kRun, ""};
      case Flavor::kDpdkMemif:
      case Flavor::kDpdkAfPacket: {
        if (!driver_built("dpdk"))
          return {Probe::kSkip, "libgrex was built without DPDK (install libdpdk-dev and reconfigure)"};
        if (flavor_ == Flavor::kDpdkMemif) return {Probe::kRun, " over net_memif"};
        if (std::string why = netns_.create(); !why.empty()) return {Probe::kSkip, "dpdk over af_packet: " + why};
        return {Probe::kRun, " over net_af_packet between namespaces " + netns_.ns(0) + " and " + netns_.ns(1)};
      }
      case Flavor::kVerbs: {
        Probe p = ::grex::test::probe();
        if (p.kind == Probe::kRun) p.why = " on device " + p.why;
        return p;
      }
    }
    return {Probe::kFail, "unreachable"};
  }

  std::string name_;
  bool known_ = false;
  Flavor flavor_ = Flavor::kShm;
  bool probed_ = false;
  Probe probe_;
  NetnsPair netns_;
};

}  // namespace grex::test
