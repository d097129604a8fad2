// SPDX-License-Identifier: Apache-2.0
// Bootstrap: create() with rank 0 hosting the store, all_gather/barrier, missing ranks, Store::wait's default.
#include "bootstrap/store_util.h"
#include "bootstrap_test_util.h"

#include <future>
#include <map>
#include <mutex>
#include <thread>

namespace grex::testing {
namespace {

BootstrapConfig config(int rank, int world, uint16_t port, int64_t timeout_ms) {
  BootstrapConfig c;
  c.rank = rank;
  c.world_size = world;
  c.store_port = port;
  c.job_token = kToken;
  c.timeout_ms = timeout_ms;
  c.launcher = "explicit";
  return c;
}

// Runs fn(rank) on `world` threads and returns each result.
template <class F>
auto on_ranks(int world, F fn) {
  std::vector<std::future<decltype(fn(0))>> fs;
  for (int r = 0; r < world; ++r) fs.push_back(std::async(std::launch::async, fn, r));
  std::vector<decltype(fn(0))> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

TEST(BootstrapTest, AllGatherAndBarrierWithReusedNames) {
  const int kWorld = 3;
  uint16_t port = free_port();
  auto errors = on_ranks(kWorld, [&](int rank) -> std::string {
    auto b = Bootstrap::create(config(rank, kWorld, port, 5000));
    if (!b.ok()) return b.error().message();
    if ((*b)->rank() != rank || (*b)->world_size() != kWorld) return "wrong rank/world";
    for (int round = 0; round < 3; ++round) {
      auto all = (*b)->all_gather("addr", "r" + std::to_string(rank) + "." + std::to_string(round));
      if (!all.ok()) return all.error().message();
      for (int r = 0; r < kWorld; ++r)
        if ((*all)[r] != "r" + std::to_string(r) + "." + std::to_string(round)) return "bad value " + (*all)[r];
      auto bar = (*b)->barrier("sync");
      if (!bar.ok()) return bar.error().message();
    }
    // Rank 0 hosts the store; its destructor lets the others finish this last barrier.
    auto done = (*b)->barrier("done");
    return done.ok() ? "" : done.error().message();
  });
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(BootstrapTest, RankThatNeverArrivesTimesOutNamingIt) {
  const int kWorld = 3;
  const int64_t kTimeoutMs = 300;
  uint16_t port = free_port();
  auto start = std::chrono::steady_clock::now();
  auto results = on_ranks(2, [&](int rank) -> Result<std::vector<std::string>> {
    auto b = Bootstrap::create(config(rank, kWorld, port, kTimeoutMs));
    if (!b.ok()) return std::move(b).error();
    return (*b)->all_gather("hello", "x");
  });
  EXPECT_LT(ms_since(start), 3000) << "a missing rank must not hang the others";
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(results[r].ok()) << "rank " << r;
    EXPECT_EQ(results[r].error().code(), Errc::kTimeout);
    const std::string m = results[r].error().message();
    EXPECT_NE(m.find("rank 2 never arrived at 'hello' within 300 ms (store 127.0.0.1:" + std::to_string(port) + ")"),
              std::string::npos) << m;
  }
}

TEST(BootstrapTest, CreateRejectsBadConfigs) {
  for (auto [rank, world] : {std::pair{0, 0}, std::pair{0, -1}, std::pair{4, 4}}) {
    auto b = Bootstrap::create(config(rank, world, 29500, 100));
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.error().code(), Errc::kInvalidArgument) << b.error().message();
  }
  BootstrapConfig c = config(0, 1, 29500, 100);
  c.job_token.clear();
  auto b = Bootstrap::create(c);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code(), Errc::kAuthFailed);
}

// Job A's rank 0 is still tearing down, its store up, when job B's rank 1 starts
// with the same address and token (CI's two-host test runs jobs back to back).
// B's rank 1 must not join A's store (it would read A's keys and lose the store
// when A's rank 0 stops it) but wait for B's rank 0 to start its own.
TEST(BootstrapTest, ANextJobsRankWaitsForItsOwnStore) {
  uint16_t port = free_port();
  auto job_a = on_ranks(2, [&](int rank) { return Bootstrap::create(config(rank, 2, port, 5000)); });
  ASSERT_TRUE(job_a[0].ok() && job_a[1].ok());
  job_a[1]->reset();  // A's rank 1 has left; A's rank 0 (and its store) lingers
  auto b1 = std::async(std::launch::async, [&]() -> std::string {
    auto b = Bootstrap::create(config(1, 2, port, 10'000));
    if (!b.ok()) return b.error().message();
    auto all = (*b)->all_gather("addr", "b1");
    if (!all.ok()) return all.error().message();
    auto done = (*b)->barrier("done");
    return !done.ok() ? done.error().message() : (*all)[0] + "," + (*all)[1];
  });
  EXPECT_EQ(b1.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout) << "B's rank 1 ran in A's store";
  job_a[0]->reset();  // A's store stops
  auto b0 = Bootstrap::create(config(0, 2, port, 10'000));
  ASSERT_TRUE(b0.ok()) << b0.error().message();
  auto all = (*b0)->all_gather("addr", "b0");
  ASSERT_TRUE(all.ok()) << all.error().message();
  EXPECT_EQ((*all)[1], "b1");
  ASSERT_TRUE((*b0)->barrier("done").ok());
  EXPECT_EQ(b1.get(), "b0,b1");
}

// Two processes that claim one rank: the second is refused, naming the rank.
TEST(BootstrapTest, ASecondProcessWithTheSameRankIsRefused) {
  uint16_t port = free_port();
  auto r0 = Bootstrap::create(config(0, 3, port, 5000));
  ASSERT_TRUE(r0.ok()) << r0.error().message();
  auto first = Bootstrap::create(config(2, 3, port, 5000));
  ASSERT_TRUE(first.ok()) << first.error().message();
  auto start = std::chrono::steady_clock::now();
  auto second = Bootstrap::create(config(2, 3, port, 300));
  ASSERT_FALSE(second.ok());
  EXPECT_GE(ms_since(start), 250);
  EXPECT_EQ(second.error().code(), Errc::kMismatch);
  EXPECT_NE(second.error().message().find("already seen rank 2 join"), std::string::npos) << second.error().message();
}

TEST(BootstrapTest, CreateReportsPortInUse) {
  auto s = StoreServer::start("127.0.0.1", 0, kToken);
  ASSERT_TRUE(s.ok());
  auto b = Bootstrap::create(config(0, 2, (*s)->port(), 200));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code(), Errc::kAddressInUse);
  EXPECT_NE(b.error().message().find(std::to_string((*s)->port())), std::string::npos) << b.error().message();
}

// A Store that keeps keys in memory, to exercise the base class's wait().
class MapStore final : public Store {
 public:
  Result<void> set(std::string_view k, std::string_view v) override {
    std::lock_guard<std::mutex> l(mu_);
    kv_[std::string(k)] = std::string(v);
    return ok();
  }
  Result<std::string> get(std::string_view k, int64_t timeout_ms) override {
    std::vector<std::string> keys = {std::string(k)};
    GREX_TRY(wait(keys, timeout_ms));
    std::lock_guard<std::mutex> l(mu_);
    return kv_[std::string(k)];
  }
  Result<int64_t> add(std::string_view, int64_t) override { return Error(Errc::kNotSupported, "no add"); }
  Result<std::vector<bool>> check(std::span<const std::string> keys) override {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<bool> out;
    for (const auto& k : keys) out.push_back(kv_.count(k) != 0);
    return out;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> kv_;
};

TEST(BootstrapTest, WithStoreAndTheDefaultWait) {
  auto store = std::make_shared<MapStore>();
  auto b0 = Bootstrap::with_store(store, 0, 2, 2000);
  auto b1 = Bootstrap::with_store(store, 1, 2, 2000);
  auto f = std::async(std::launch::async, [&] { return b1->all_gather("ids", "one"); });
  auto all0 = b0->all_gather("ids", "zero");
  auto all1 = f.get();
  ASSERT_TRUE(all0.ok()) << all0.error().message();
  ASSERT_TRUE(all1.ok()) << all1.error().message();
  EXPECT_EQ(*all0, (std::vector<std::string>{"zero", "one"}));
  EXPECT_EQ(*all1, *all0);

  std::vector<std::string> keys = {"a", "b"};
  ASSERT_TRUE(store->set("a", "1").ok());
  auto w = store->wait(keys, 100);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), Errc::kTimeout);
  EXPECT_NE(w.error().message().find("key 'b' never appeared within 100 ms"), std::string::npos)
      << w.error().message();

  auto lonely = Bootstrap::with_store(store, 0, 3, 150);
  auto r = lonely->barrier("b");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("ranks 1, 2 never arrived at 'b' within 150 ms"), std::string::npos)
      << r.error().message();
}

// LocalStore: ranks that are threads of one process. get() waits for a key
// set later by another thread; add() counts; a wait that times out names the
// missing keys; all_gather and barrier work through Bootstrap::with_store.
TEST(BootstrapTest, LocalStoreForRanksThatAreThreads) {
  auto store = std::make_shared<LocalStore>();
  auto later = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return store->set("k", "v");
  });
  auto got = store->get("k", 5000);
  ASSERT_TRUE(got.ok()) << got.error().message();
  EXPECT_EQ(*got, "v");
  ASSERT_TRUE(later.get().ok());
  EXPECT_EQ(*store->add("n", 5), 5);
  EXPECT_EQ(*store->add("n", -2), 3);
  EXPECT_EQ(*store->get("n", 0), "3");
  EXPECT_EQ(store->add("k", 1).error().code(), Errc::kInvalidArgument);  // "v" is no integer
  std::vector<std::string> keys = {"k", "absent"};
  EXPECT_EQ(*store->check(keys), (std::vector<bool>{true, false}));
  auto w = store->wait(keys, 50);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), Errc::kTimeout);
  EXPECT_NE(w.error().message().find("key 'absent' never appeared within 50 ms"), std::string::npos)
      << w.error().message();
  std::vector<std::future<Result<std::vector<std::string>>>> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.push_back(std::async(std::launch::async, [&, r]() -> Result<std::vector<std::string>> {
      auto b = Bootstrap::with_store(store, r, 3, 5000);
      GREX_TRY(b->barrier("start"));
      return b->all_gather("ids", "rank" + std::to_string(r));
    }));
  for (auto& f : ranks) {
    auto all = f.get();
    ASSERT_TRUE(all.ok()) << all.error().message();
    EXPECT_EQ(*all, (std::vector<std::string>{"rank0", "rank1", "rank2"}));
  }
}

TEST(BootstrapTest, CompactRankLists) {
  using detail::store::compact_ranks;
  EXPECT_EQ(compact_ranks({2}), "2");
  EXPECT_EQ(compact_ranks({2, 5}), "2, 5");
  EXPECT_EQ(compact_ranks({1, 2, 3, 4, 9}), "1-4, 9");
  EXPECT_EQ(compact_ranks({1, 2, 7, 8}), "1, 2, 7, 8");
  std::vector<int> many;
  for (int r = 0; r < 100; r += 2) many.push_back(r);
  std::string s = compact_ranks(many);
  EXPECT_NE(s.find("... (50 in all)"), std::string::npos) << s;
}

}  // namespace
}  // namespace grex::testing
