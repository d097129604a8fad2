// SPDX-License-Identifier: Apache-2.0
// ccsim command line: usage() and parse_args(), read by CLI11.
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "congestion/sim/fabric.h"
#include "congestion/sim/sim.h"

namespace grex::ccsim {
namespace {

/// Thrown by an option's callback when its value does not convert.
struct BadValue {
  std::string option, value;
};

/// A callback that converts the value into *out with std::from_chars (all of
/// it; a finite number for doubles, no sign for integers) or throws BadValue.
template <class T>
std::function<void(const std::string&)> number(const char* option, T* out, bool positive = false) {
  return [=](const std::string& v) {
    T x{};
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    bool ok = !v.empty() && ec == std::errc() && end == v.data() + v.size() && (!positive || x > 0);
    if constexpr (std::is_floating_point_v<T>) ok = ok && std::isfinite(x);
    if (!ok) throw BadValue{option, v};
    *out = x;
  };
}

/// A callback that sets *out to the value of `choices` named by the value, or throws BadValue.
template <class T>
std::function<void(const std::string&)> choice(const char* option, T* out,
                                               std::vector<std::pair<std::string_view, T>> choices) {
  return [=](const std::string& v) {
    for (const auto& [name, value] : choices)
      if (v == name) {
        *out = value;
        return;
      }
    throw BadValue{option, v};
  };
}

// Every option takes its last value (flags take none), then parses; false
// with *error in this tool's words.
bool parse_with(CLI::App& app, const std::vector<CLI::Option*>& opts, int argc, const char* const* argv,
                std::string* error) {
  for (CLI::Option* o : opts) {
    if (o->get_items_expected_max() == 0)
      o->disable_flag_override();  // --ecn=1 is an error, as it always was
    else
      o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  try {
    app.parse(argc, argv);
  } catch (const BadValue& bad) {
    *error = "bad value '" + bad.value + "' for " + bad.option;
    return false;
  } catch (const CLI::ParseError& e) {
    *error = e.what();
    for (const CLI::Option* o : opts) {  // CLI11 starts the message with the option's name
      const std::string name = o->get_name();
      if (error->starts_with(name + ":")) *error = name + " needs a value";
      if (error->starts_with(name.substr(2) + " was given a disallowed flag override")) *error = name + " takes no value";
    }
    return false;
  }
  if (!app.remaining().empty()) {
    *error = "unknown option " + app.remaining().front();
    return false;
  }
  return true;
}

}  // namespace

std::string usage() {
  return "usage: grex-ccsim [options]\n"
         "  packet-level incast simulator driving the congestion controllers of congestion/cc.h\n"
         "  --cc NAME            algorithm: " +
         cc::algorithm_names() +
         " (default rttcc)\n"
         "  --flows N            flows (default 2), flow i on host i % H\n"
         "  --hosts H            sender hosts (default min(N, 64))\n"
         "  --gbps G             line rate of every link, Gbit/s (default 100)\n"
         "  --mtu B              data payload per packet (default 4096; +64 B header on the wire)\n"
         "  --base-rtt-us T      propagation RTT (default 10: idle probe RTT 10.34 us at 100G)\n"
         "  --rttcc-target-us T  RTTCC's target delay (default: max(13, 1.25 x the idle probe RTT))\n"
         "  --buffer-mb M        switch buffer, MB = 1e6 B (default 32)\n"
         "  --ecn                RED-like ECN marking at the switch\n"
         "  --kmin-kb K --kmax-kb K --pmax P   marking (default 100, 400, 0.2)\n"
         "  --lossy              tail drop + NACK/resend instead of PFC (lossless is the default)\n"
         "  --cnp-interval-us T  receiver's CnpPacer interval (default: the DCQCN set's, 50; dcqcn-mlx5 4)\n"
         "  --scenario S         long | burst | join-leave (default long)\n"
         "  --burst-kb K         burst: bytes per flow per burst (default 64)\n"
         "  --burst-period-us T  burst: period (default 1000)\n"
         "  --stagger-us T       join-leave: flow i starts at i*T (default 1000)\n"
         "  --duration-ms T      simulated time (default 100)\n"
         "  --warmup-ms T        metrics window starts here (default 10 % of the duration)\n"
         "  --pace payload|wire  bytes the pacer meters against the rate (default payload)\n"
         "  --jitter-ns J        random extra host->switch delay per packet, 0..J ns (default 4)\n"
         "  --seed S             random seed (ECN marking, jitter), default 1\n"
         "  --sample-us T        time-series period (default 10)\n"
         "  --json FILE          write the JSON summary there (default: stdout)\n"
         "  --csv FILE           write the time series there\n"
         "  --topology leaf-spine  a leaf-spine fabric instead (its options: --topology leaf-spine --help)\n"
         "  --help\n";
}

bool parse_args(int argc, const char* const* argv, Cli* out, std::string* error) {
  Config& c = out->cfg;
  CLI::App app("grex-ccsim");
  app.set_help_flag();  // usage() is the help
  app.allow_extras();   // reported below, in this tool's words
  std::vector<CLI::Option*> opts = {
      app.add_flag("-h,--help", out->help),
      app.add_flag("--ecn", c.ecn),
      app.add_flag("--lossy,!--lossless", c.lossy),
      app.add_option("--cc", c.cc),
      app.add_option_function<std::string>("--flows", number("--flows", &c.flows)),
      app.add_option_function<std::string>("--hosts", number("--hosts", &c.hosts)),
      app.add_option_function<std::string>("--gbps", number("--gbps", &c.gbps)),
      app.add_option_function<std::string>("--mtu", number("--mtu", &c.mtu_bytes)),
      app.add_option_function<std::string>("--base-rtt-us", number("--base-rtt-us", &c.base_rtt_us)),
      app.add_option_function<std::string>("--rttcc-target-us",
                                           number("--rttcc-target-us", &c.rttcc_target_us, true)),
      app.add_option_function<std::string>("--buffer-mb", number("--buffer-mb", &c.buffer_mb)),
      app.add_option_function<std::string>("--kmin-kb", number("--kmin-kb", &c.kmin_kb)),
      app.add_option_function<std::string>("--kmax-kb", number("--kmax-kb", &c.kmax_kb)),
      app.add_option_function<std::string>("--pmax", number("--pmax", &c.pmax)),
      app.add_option_function<std::string>("--cnp-interval-us", number("--cnp-interval-us", &c.cnp_interval_us)),
      app.add_option_function<std::string>(
          "--scenario", choice<Scenario>("--scenario", &c.scenario,
                                         {{"long", Scenario::kLong},
                                          {"burst", Scenario::kBurst},
                                          {"join-leave", Scenario::kJoinLeave}})),
      app.add_option_function<std::string>("--burst-kb", number("--burst-kb", &c.burst_kb)),
      app.add_option_function<std::string>("--burst-period-us", number("--burst-period-us", &c.burst_period_us)),
      app.add_option_function<std::string>("--stagger-us", number("--stagger-us", &c.stagger_us)),
      app.add_option_function<std::string>("--duration-ms", number("--duration-ms", &c.duration_ms)),
      app.add_option_function<std::string>("--warmup-ms", number("--warmup-ms", &c.warmup_ms)),
      app.add_option_function<std::string>(
          "--pace", choice<bool>("--pace", &c.pace_wire_bytes, {{"payload", false}, {"wire", true}})),
      app.add_option_function<std::string>("--jitter-ns", number("--jitter-ns", &c.jitter_ns)),
      app.add_option_function<std::string>("--seed", number("--seed", &c.seed)),
      app.add_option_function<std::string>("--sample-us", number("--sample-us", &c.sample_us)),
      app.add_option("--json", out->json_path),
      app.add_option("--csv", out->csv_path),
  };
  return parse_with(app, opts, argc, argv, error);
}

std::string fabric_usage() {
  return "usage: grex-ccsim --topology leaf-spine [options]\n"
         "  a leaf-spine fabric: L leaves, S spines, H hosts per leaf, ECMP by a hash of the\n"
         "  packet's entropy, flows under the congestion controllers of congestion/cc.h\n"
         "  --cc NAME              algorithm: " +
         cc::algorithm_names() +
         " (default rttcc)\n"
         "  --leaves L --spines S --hosts-per-leaf H   (default 2, 4, 4)\n"
         "  --host-gbps G          host <-> leaf links (default 100)\n"
         "  --spine-gbps G         leaf <-> spine links (default 100)\n"
         "  --mtu B                data payload per packet (default 4096; +64 B header)\n"
         "  --hop-us T             propagation of every link (default 1)\n"
         "  --buffer-kb K          per output port; a packet past it is trimmed and NACKed (default 1000)\n"
         "  --ecn --kmin-kb K --kmax-kb K --pmax P   RED-like marking at every port (100, 400, 0.2)\n"
         "  --paths P              entropies a flow sprays over, round robin (default 1: ECMP, one path)\n"
         "  --spray oblivious|reps oblivious: round robin over --paths; reps: reuse the entropies whose\n"
         "                         packets came back unmarked (needs --ecn to see busy paths)\n"
         "  --path-cc              a controller per path (oblivious spraying over --paths 2 or more)\n"
         "  --pattern P            permutation | ring | incast | alltoall (default permutation)\n"
         "  --credits              receiver credits: a first window unscheduled, then what the receiver\n"
         "                         grants, an MTU per packet time of its link (EQDS-like)\n"
         "  --unscheduled-kb K     credits: the first window (default one idle RTT at the host rate)\n"
         "  --incast-senders K     incast: hosts 1..K send to host 0 (default every other host)\n"
         "  --flow-kb K            bytes per flow (default 0: long-lived)\n"
         "  --duration-ms T        simulated time at most (default 10)\n"
         "  --warmup-ms T          long-lived goodput is measured after it (default 10 %)\n"
         "  --fail-spine S --fail-at-ms T   spine S fails at T\n"
         "  --slow-spine S --slow-factor F  spine S's links run at F x --spine-gbps (F default 0.25)\n"
         "  --rttcc-target-us T    RTTCC's target (default max(13, 1.25 x the idle cross-leaf RTT))\n"
         "  --rttcc-hop-target-us H  added to it per switch hop past the first (default 3; 0: none)\n"
         "  --seed S               permutation, entropies, ECN (default 1)\n"
         "  --json FILE            write the JSON summary there (default: stdout)\n"
         "  --csv FILE             goodput and the largest port queue over time (t_us,goodput_gbps,max_queue_kb)\n"
         "  --sample-us T          its interval (default 50)\n";
}

bool parse_fabric_args(int argc, const char* const* argv, FabricCli* out, std::string* error) {
  FabricConfig& c = out->cfg;
  std::string topology;
  CLI::App app("grex-ccsim");
  app.set_help_flag();
  app.allow_extras();
  std::vector<CLI::Option*> opts = {
      app.add_flag("-h,--help", out->help),
      app.add_flag("--ecn", c.ecn),
      app.add_flag("--credits", c.credits),
      app.add_flag("--path-cc", c.path_cc),
      app.add_option("--topology", topology),
      app.add_option("--cc", c.cc),
      app.add_option_function<std::string>("--leaves", number("--leaves", &c.leaves)),
      app.add_option_function<std::string>("--spines", number("--spines", &c.spines)),
      app.add_option_function<std::string>("--hosts-per-leaf", number("--hosts-per-leaf", &c.hosts_per_leaf)),
      app.add_option_function<std::string>("--host-gbps", number("--host-gbps", &c.host_gbps)),
      app.add_option_function<std::string>("--spine-gbps", number("--spine-gbps", &c.spine_gbps)),
      app.add_option_function<std::string>("--mtu", number("--mtu", &c.mtu_bytes)),
      app.add_option_function<std::string>("--hop-us", number("--hop-us", &c.hop_us)),
      app.add_option_function<std::string>("--buffer-kb", number("--buffer-kb", &c.buffer_kb)),
      app.add_option_function<std::string>("--kmin-kb", number("--kmin-kb", &c.kmin_kb)),
      app.add_option_function<std::string>("--kmax-kb", number("--kmax-kb", &c.kmax_kb)),
      app.add_option_function<std::string>("--pmax", number("--pmax", &c.pmax)),
      app.add_option_function<std::string>("--paths", number("--paths", &c.paths)),
      app.add_option_function<std::string>(
          "--spray", choice<Spray>("--spray", &c.spray, {{"oblivious", Spray::kOblivious}, {"reps", Spray::kReps}})),
      app.add_option_function<std::string>(
          "--pattern", choice<Pattern>("--pattern", &c.pattern,
                                       {{"permutation", Pattern::kPermutation},
                                        {"ring", Pattern::kRing},
                                        {"incast", Pattern::kIncast},
                                        {"alltoall", Pattern::kAlltoall}})),
      app.add_option_function<std::string>("--incast-senders", number("--incast-senders", &c.incast_senders)),
      app.add_option_function<std::string>("--unscheduled-kb", number("--unscheduled-kb", &c.unscheduled_kb)),
      app.add_option_function<std::string>("--flow-kb", number("--flow-kb", &c.flow_kb)),
      app.add_option_function<std::string>("--duration-ms", number("--duration-ms", &c.duration_ms)),
      app.add_option_function<std::string>("--warmup-ms", number("--warmup-ms", &c.warmup_ms)),
      app.add_option_function<std::string>("--fail-spine", number("--fail-spine", &c.failed_spine)),
      app.add_option_function<std::string>("--fail-at-ms", number("--fail-at-ms", &c.fail_at_ms)),
      app.add_option_function<std::string>("--slow-spine", number("--slow-spine", &c.slow_spine)),
      app.add_option_function<std::string>("--slow-factor", number("--slow-factor", &c.slow_factor)),
      app.add_option_function<std::string>("--rttcc-target-us",
                                           number("--rttcc-target-us", &c.rttcc_target_us, true)),
      app.add_option_function<std::string>("--rttcc-hop-target-us",
                                           number("--rttcc-hop-target-us", &c.rttcc_hop_target_us)),
      app.add_option_function<std::string>("--seed", number("--seed", &c.seed)),
      app.add_option("--json", out->json_path),
      app.add_option("--csv", out->csv_path),
      app.add_option_function<std::string>("--sample-us", number("--sample-us", &c.sample_us, true)),
  };
  if (!parse_with(app, opts, argc, argv, error)) return false;
  if (!out->csv_path.empty() && c.sample_us == 0) c.sample_us = 50;
  if (topology != "leaf-spine") {
    *error = "--topology '" + topology + "': leaf-spine is the one topology besides the single switch";
    return false;
  }
  return true;
}

}  // namespace grex::ccsim
