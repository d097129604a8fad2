// SPDX-License-Identifier: Apache-2.0
// Issue 30: which rank is stuck. A 4-rank job where rank 2 sleeps before its
// 10th allreduce: the job's status (asked through the store, as grex-status
// does) names rank 2 as the straggler and shows the others in allreduce #10
// waiting on it; each waiting rank warns once, naming what rank 2 does; at
// the timeout the error names rank 2 as alive and not in the collective. A
// rank that calls another collective is named with both calls; a rank
// stopped with SIGSTOP is named as not answering.
#include <gtest/gtest.h>

#include <grex/status.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness.h"

namespace grex::test {
namespace {

namespace fs = std::filesystem;

constexpr int kRanks = 4;
constexpr int kLate = 2;  // the rank that sleeps
constexpr int kAt = 10;   // before this allreduce

fs::path scratch(const char* name) {
  fs::path d = fs::temp_directory_path() / (std::string("grex-status-") + name + "-" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

CommOptions options(int64_t timeout_ms, int64_t warn_ms) {
  CommOptions o;
  o.backend = "shm";
  o.name = "job";
  o.timeout_ms = timeout_ms;
  o.warn_after_ms = warn_ms;
  return o;
}

TEST(Status, TheStragglerIsNamedAndTheOthersWaitOnIt) {
  const fs::path dir = scratch("straggler");
  auto res = run_ranks(kRanks, [&](Rank& r) -> int {
    auto c = make_comm(r, options(30'000, 400));
    RANK_CHECK(c != nullptr);
    std::vector<float> v(16, 1.0f);
    StderrTo err(dir / ("rank" + std::to_string(r.rank) + ".err"));
    RANK_CHECK(err.ok());
    for (int i = 1; i <= 12; ++i) {
      if (r.rank == kLate && i == kAt) {
        // Asleep in the application: ask the job what it does, from this
        // rank's process, through a connection of its own (as grex-status).
        std::this_thread::sleep_for(std::chrono::milliseconds(1200));
        auto st = TcpStore::connect("127.0.0.1", r.store_port, r.job_token, 5000);
        RANK_OK(st);
        auto all = query_job_status(**st, 3000);
        RANK_OK(all);
        RANK_CHECK(all->size() == 1);
        const CommStatus& js = all->front();
        std::fprintf(stdout, "%s", format_job_status(*all).c_str());
        RANK_CHECK(js.comm == "job" && js.size == kRanks);
        RANK_CHECK(js.silent.empty());
        RANK_CHECK(js.stragglers == std::vector<int>{kLate});
        for (const RankStatus& s : js.ranks) {
          RANK_CHECK(s.answered && s.pid > 0);
          if (s.rank == kLate) {
            RANK_CHECK(!s.running && s.colls_done == kAt - 1 && s.last_coll == "allreduce");
            RANK_CHECK(s.ms >= 1000);
          } else {
            RANK_CHECK(s.running && s.op == "allreduce" && s.coll == kAt && s.colls_done == kAt - 1);
            RANK_CHECK(s.ms >= 1000);
            RANK_CHECK(std::find(s.waiting_on.begin(), s.waiting_on.end(), kLate) != s.waiting_on.end());
          }
        }
        // The same as JSON parses and says the same.
        RANK_CHECK(job_status_json(*all).find("\"stragglers\": [\n        2\n      ]") != std::string::npos);
      }
      RANK_OK(c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum));
    }
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
  // Each waiting rank warned once, naming rank 2 and what it did (no rank 2 line).
  for (int r = 0; r < kRanks; ++r) {
    const std::string log = slurp(dir / ("rank" + std::to_string(r) + ".err"));
    const int warnings = count_of(log, "(GREX_WARN_AFTER_MS)");
    if (r == kLate) {
      EXPECT_EQ(warnings, 0) << log;
      continue;
    }
    EXPECT_EQ(warnings, 1) << "rank " << r << ":\n" << log;
    EXPECT_NE(log.find("allreduce #10"), std::string::npos) << log;
    EXPECT_NE(log.find("rank 2 is alive, not in the collective"), std::string::npos) << log;
    EXPECT_NE(log.find("its last collective allreduce #9 ended"), std::string::npos) << log;
  }
  fs::remove_all(dir);
}

TEST(Status, TheTimeoutNamesTheRankBehindAsAliveAndNotInTheCollective) {
  auto res = run_ranks(kRanks, [&](Rank& r) -> int {
    auto c = make_comm(r, options(1500, 0));
    RANK_CHECK(c != nullptr);
    std::vector<float> v(16, 1.0f);
    for (int i = 1; i < kAt; ++i) RANK_OK(c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum));
    if (r.rank == kLate) {
      std::this_thread::sleep_for(std::chrono::milliseconds(4500));
      // The others gave up meanwhile. Over shared memory they had published
      // their vectors before they waited, so this call may even succeed; it
      // must end either way.
      (void)c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
      return 0;
    }
    auto st = c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    RANK_CHECK(!st.ok());
    const std::string m = st.error().message();
    std::fprintf(stdout, "rank %d: %s\n", r.rank, m.c_str());
    // The rank that timed out names rank 2; a rank told by a peer names it as the culprit.
    RANK_CHECK(m.find("rank 2") != std::string::npos);
    if (st.error().code() == Errc::kTimeout) RANK_CHECK(m.find("rank 2 is alive, not in the collective") != std::string::npos);
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(Status, ARankInAnotherCollectiveIsNamedWithBothCalls) {
  auto res = run_ranks(kRanks, [&](Rank& r) -> int {
    auto c = make_comm(r, options(1500, 0));
    RANK_CHECK(c != nullptr);
    std::vector<float> v(16, 1.0f), all(16 * kRanks);
    for (int i = 1; i < kAt; ++i) RANK_OK(c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum));
    auto st = r.rank == 3 ? c->allgather(v.data(), all.data(), v.size(), DataType::kFloat32)
                          : c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    RANK_CHECK(!st.ok());
    const std::string m = st.error().message();
    std::fprintf(stdout, "rank %d: %s\n", r.rank, m.c_str());
    RANK_CHECK(m.find("allgather") != std::string::npos && m.find("allreduce") != std::string::npos);
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(Status, AStoppedRankIsNamedAsNotAnswering) {
  auto res = run_ranks(3, [&](Rank& r) -> int {
    auto c = make_comm(r, options(1500, 0));
    RANK_CHECK(c != nullptr);
    std::vector<float> v(16, 1.0f);
    RANK_OK(c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum));
    if (r.rank == 1) {
      RANK_OK(r.bootstrap->store().set("stopped", std::to_string(getpid())));
      ::kill(::getpid(), SIGSTOP);  // every thread stops; rank 0 continues it below
      return 0;
    }
    auto st = c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    RANK_CHECK(!st.ok());
    const std::string m = st.error().message();
    std::fprintf(stdout, "rank %d: %s\n", r.rank, m.c_str());
    if (st.error().code() == Errc::kTimeout) RANK_CHECK(m.find("rank 1 is not answering") != std::string::npos);
    if (r.rank == 0) {
      auto pid = r.bootstrap->store().get("stopped", 1000);
      RANK_OK(pid);
      ::kill(static_cast<pid_t>(std::stoi(*pid)), SIGCONT);
    }
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// The recorder's ring wraps under 8 threads of async work: 8 threads take
// turns issuing allreduce_async (a communicator is used by one thread at a
// time) while a reader takes the ring and the job status; the 64-entry ring
// ends holding the newest 64 calls, whole, numbered without a gap.
TEST(Status, TheRingWrapsUnderEightThreadsOfAsyncWork) {
  auto res = run_ranks(2, [&](Rank& r) -> int {
    CommOptions o = options(30'000, 0);
    o.trace_entries = 64;
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    constexpr int kThreads = 8, kEach = 100;
    std::mutex turn;
    std::atomic<int> failures{0};
    std::atomic<bool> done{false};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
      ts.emplace_back([&] {
        std::vector<float> v(8, 1.0f);  // every call alike: the threads' turns differ between the ranks
        for (int i = 0; i < kEach; ++i) {
          {
            std::lock_guard<std::mutex> lock(turn);
            auto p = c->allreduce_async(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
            if (!p.ok() || !(*p)->wait().ok()) ++failures;
          }
        }
      });
    std::thread reader([&] {
      while (!done.load()) {
        auto j = nlohmann::json::parse(c->trace_json(), nullptr, false);
        if (j.is_discarded()) ++failures;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    for (auto& t : ts) t.join();
    done = true;
    reader.join();
    RANK_CHECK(failures.load() == 0);
    auto j = nlohmann::json::parse(c->trace_json(), nullptr, false);
    RANK_CHECK(!j.is_discarded());
    const auto& e = j["entries"];
    RANK_CHECK(e.size() == 64);
    uint64_t seq = e[0]["seq"].get<uint64_t>(), coll = e[0]["coll"].get<uint64_t>();
    for (const auto& x : e) {
      RANK_CHECK(x["seq"].get<uint64_t>() == seq++ && x["coll"].get<uint64_t>() == coll++);
      RANK_CHECK(x["op"] == "allreduce" && x["state"] == "done");
    }
    RANK_CHECK(coll - 1 == static_cast<uint64_t>(kThreads * kEach));
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
}  // namespace grex::test
