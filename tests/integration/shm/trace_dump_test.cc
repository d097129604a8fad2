// SPDX-License-Identifier: Apache-2.0
// Issue 30's first part: the flight recorder's dumps with GREX_TRACE_DUMP set
// (SIGUSR1 writes every rank's ring as JSON; a timed-out call writes its
// rank's ring with that call marked failed), and GREX_WARN_AFTER_MS's one
// warning naming the rank a long wait is for.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "harness.h"

namespace grex::test {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str(), nullptr, false);
}

// Waits up to 5 s for `p` (the dump runs on the recorder's own thread).
bool appears(const fs::path& p) {
  for (int i = 0; i < 500 && !fs::exists(p); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return fs::exists(p);
}

fs::path scratch(const char* name) {
  fs::path d = fs::temp_directory_path() / (std::string("grex-trace-") + name + "-" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(TraceDump, Sigusr1WritesEveryRanksRing) {
  const fs::path dir = scratch("usr1");
  auto res = run_ranks(3, [&](Rank& r) -> int {
    setenv("GREX_TRACE_DUMP", dir.c_str(), 1);
    CommOptions o;
    o.backend = "shm";
    o.name = "traced";
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    std::vector<float> v(1000, 1.0f);
    for (int i = 0; i < 5; ++i) RANK_OK(c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum));
    int x = r.rank;
    if (r.rank == 0) RANK_OK(c->send(&x, sizeof x, 1, 4));
    if (r.rank == 1) RANK_OK(c->recv(&x, sizeof x, 0, 4));
    RANK_OK(c->barrier());
    const fs::path mine = dir / ("grex-trace." + std::to_string(r.rank) + ".traced.json");
    ::raise(SIGUSR1);
    RANK_CHECK(appears(mine));
    auto j = read_json(mine);
    RANK_CHECK(!j.is_discarded());
    RANK_CHECK(j["rank"] == r.rank);
    const auto& e = j["entries"];
    int allreduces = 0, p2p = 0, barriers = 0;
    for (const auto& x : e) {
      RANK_CHECK(x["state"] == "done" || (x == e.back() && x["state"] == "running"));
      if (x["op"] == "allreduce") {
        ++allreduces;
        RANK_CHECK(x["count"] == 1000 && x["dtype"] == "f32" && x["redop"] == "sum");
      }
      if (x["op"] == "send" || x["op"] == "recv") {
        ++p2p;
        RANK_CHECK(x["peer"] == 1 - r.rank);
      }
      if (x["op"] == "barrier") ++barriers;
    }
    RANK_CHECK(allreduces == 5 && barriers >= 1 && p2p == (r.rank < 2 ? 1 : 0));
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
  fs::remove_all(dir);
}

// Communicator::set_recording: calls made while the recorder is paused
// leave no entry; the ring goes on where it stopped once it resumes.
TEST(TraceDump, APausedRecorderLeavesThoseCallsOut) {
  auto res = run_ranks(2, [&](Rank& r) -> int {
    CommOptions o;
    o.backend = "shm";
    o.name = "paused";
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    float v[2] = {1, 2};
    for (int i = 0; i < 3; ++i) RANK_OK(c->allreduce(v, 2, DataType::kFloat32, ReduceOp::kSum));  // colls 1-3
    c->set_recording(false);
    for (int i = 0; i < 4; ++i) RANK_OK(c->allreduce(v, 2, DataType::kFloat32, ReduceOp::kSum));  // 4-7
    c->set_recording(true);
    RANK_OK(c->broadcast(v, 2, DataType::kFloat32, 0));  // 8
    auto j = nlohmann::json::parse(c->trace_json(), nullptr, false);
    RANK_CHECK(!j.is_discarded());
    const auto& e = j["entries"];
    RANK_CHECK(e.size() == 4);
    for (size_t k = 0; k < 3; ++k) RANK_CHECK(e[k]["op"] == "allreduce" && e[k]["coll"] == k + 1);
    RANK_CHECK(e[3]["op"] == "broadcast" && e[3]["coll"] == 8 && e[3]["seq"] == 3);
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(TraceDump, ATimeoutWritesTheRingWithTheCallFailed) {
  const fs::path dir = scratch("timeout");
  auto res = run_ranks(2, [&](Rank& r) -> int {
    setenv("GREX_TRACE_DUMP", dir.c_str(), 1);
    CommOptions o;
    o.backend = "shm";
    o.name = "stuck";
    o.timeout_ms = 300;
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    float v[4] = {1, 2, 3, 4};
    RANK_OK(c->allreduce(v, 4, DataType::kFloat32, ReduceOp::kSum));
    if (r.rank == 1) {  // rank 0 never joins this one
      std::vector<int64_t> w(5000, 1);
      RANK_CHECK(!c->allreduce(w.data(), w.size(), DataType::kInt64, ReduceOp::kMax).ok());
      const fs::path mine = dir / "grex-trace.1.stuck.json";
      RANK_CHECK(fs::exists(mine));
      auto j = read_json(mine);
      RANK_CHECK(!j.is_discarded());
      const auto& last = j["entries"].back();
      RANK_CHECK(last["op"] == "allreduce" && last["state"] == "failed" && last["count"] == 5000);
      RANK_CHECK(last["dtype"] == "i64" && last["redop"] == "max" && last["coll"] == 2);
    } else {
      std::this_thread::sleep_for(std::chrono::seconds(2));
    }
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
  fs::remove_all(dir);
}

// GREX_WARN_AFTER_MS: rank 1 enters 800 ms late; rank 0 (warning after
// 200 ms, timeout 10 s) logs once, naming rank 1, and the call succeeds.
TEST(TraceDump, ALongWaitWarnsOnceNamingTheRankAwaited) {
  const fs::path dir = scratch("warn");
  auto res = run_ranks(2, [&](Rank& r) -> int {
    CommOptions o;
    o.backend = "shm";
    o.algo = "ring";  // message waits (the flat and direct algorithms wait on shared memory)
    o.cost = "1,10,10";
    o.timeout_ms = 10'000;
    o.warn_after_ms = 200;
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    std::vector<float> v(1 << 20, 1.0f);
    if (r.rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      RANK_OK(c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum));
      return 0;
    }
    // This rank's stderr goes to a file for the call.
    const fs::path log = dir / "rank0.err";
    std::optional<Result<void>> st;
    {
      StderrTo err(log);
      RANK_CHECK(err.ok());
      st = c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    }
    RANK_OK(*st);
    RANK_CHECK(v[0] == 2.0f);
    std::ifstream in(log);
    std::string line;
    int warnings = 0;
    while (std::getline(in, line))
      if (line.find("has waited 200 ms for rank 1") != std::string::npos) {
        ++warnings;
        // What rank 1 does, from its status thread: it has not called yet.
        RANK_CHECK(line.find("rank 1 is alive, not in the collective") != std::string::npos);
      }
    if (warnings != 1) std::fprintf(stdout, "log: %s\n", std::string(std::istreambuf_iterator<char>(std::ifstream(log).rdbuf()), {}).c_str());
    RANK_CHECK(warnings == 1);
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace grex::test
