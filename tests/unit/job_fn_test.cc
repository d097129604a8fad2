// SPDX-License-Identifier: Apache-2.0
// detail::JobFn, the collectives' job type: small captures stay inline (no
// allocation per blocking call), large ones go to the heap; either way the
// captured object is called, moved and destroyed exactly once.
#include <gtest/gtest.h>

#include <array>
#include <memory>

#include "collectives/work_queue.h"

namespace grex::detail {
namespace {

struct Counted {
  int* live;
  int* calls;
  explicit Counted(int* l, int* c) : live(l), calls(c) { ++*live; }
  Counted(Counted&& o) noexcept : live(o.live), calls(o.calls) { ++*live; }
  Counted(const Counted& o) : live(o.live), calls(o.calls) { ++*live; }
  ~Counted() { --*live; }
};

template <size_t kPad>
void run_case() {
  int live = 0, calls = 0;
  {
    Counted c(&live, &calls);
    std::array<char, kPad> pad{};
    pad[0] = 7;
    JobFn a([c, pad]() -> Result<void> {
      ++*c.calls;
      if (pad[0] != 7) return Error(Errc::kInternal, "captures lost");
      return ok();
    });
    EXPECT_EQ(live, 2);  // ours and the job's
    JobFn b(std::move(a));
    EXPECT_FALSE(static_cast<bool>(a));
    EXPECT_EQ(live, 2);  // moved, not copied
    JobFn d;
    d = std::move(b);
    EXPECT_TRUE(static_cast<bool>(d));
    EXPECT_TRUE(d());
    EXPECT_TRUE(d());
    EXPECT_EQ(calls, 2);
    d = JobFn([] { return Result<void>(Error(Errc::kTimeout, "second")); });
    EXPECT_EQ(live, 1);  // the first job's captures died with it
    auto r = d();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Errc::kTimeout);
  }
  EXPECT_EQ(live, 0);
}

TEST(JobFn, InlineCapturesAreCalledMovedAndDestroyedOnce) { run_case<8>(); }
TEST(JobFn, HeapCapturesAreCalledMovedAndDestroyedOnce) { run_case<200>(); }

TEST(JobFn, MoveOnlyCaptures) {
  auto p = std::make_unique<int>(41);
  JobFn f([q = std::move(p)]() -> Result<void> {
    ++*q;
    return *q == 42 ? ok() : Result<void>(Error(Errc::kInternal, "wrong value"));
  });
  JobFn g(std::move(f));
  EXPECT_TRUE(g());
}

}  // namespace
}  // namespace grex::detail
