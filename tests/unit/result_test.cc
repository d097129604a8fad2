// SPDX-License-Identifier: Apache-2.0
// grex::Result / Error / GREX_TRY behaviour.
#include <grex/result.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <memory>

namespace grex {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return Error(Errc::kInvalidArgument, "value " + std::to_string(v) + " is not positive");
  return v;
}

Result<int> doubled(int v) {
  int x = GREX_TRY(parse_positive(v));
  return 2 * x;
}

Result<void> check_then_ctx(int v) {
  GREX_TRY_CTX(parse_positive(v), "checking input");
  return ok();
}

TEST(Result, CarriesValueOrError) {
  auto a = doubled(21);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, 42);
  auto b = doubled(-1);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code(), Errc::kInvalidArgument);
  EXPECT_EQ(b.error().cause(), "value -1 is not positive");
  EXPECT_EQ(b.value_or(7), 7);
}

TEST(Result, TryCtxPrefixesCauseAndKeepsCode) {
  auto r = check_then_ctx(0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), Errc::kInvalidArgument);
  EXPECT_EQ(r.error().cause(), "checking input: value 0 is not positive");
  EXPECT_TRUE(check_then_ctx(3).ok());
}

TEST(Result, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 5);
  Result<std::unique_ptr<int>> e = Error(Errc::kNoMemory, "none");
  EXPECT_FALSE(e.ok());
  e = std::make_unique<int>(9);  // error -> value by assignment
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(**e, 9);
}

TEST(Error, MessageNamesDeviceRankPeerCauseAndHint) {
  Error e = Error(Errc::kTimeout, "QP timed out after 7 retries").device("verbs").rank(3).peer(5).hint(
      "check GID index (GREX_IB_GID_INDEX)");
  EXPECT_EQ(e.message(), "verbs: rank 3 -> peer 5: QP timed out after 7 retries; hint: check GID index (GREX_IB_GID_INDEX)");
  EXPECT_EQ(Error(Errc::kTimeout, "x").message(), "x");
  EXPECT_EQ(Error(Errc::kTimeout, "x").peer(2).message(), "peer 2: x");
  EXPECT_EQ(e.peer_rank(), 5);
  EXPECT_EQ(e.rank_or(-1), 3);
}

TEST(Error, FromErrnoNamesTheCallAndMapsEnomem) {
  Error e = Error::from_errno("open(/x)", ENOENT);
  EXPECT_EQ(e.code(), Errc::kSystem);
  EXPECT_NE(e.cause().find("open(/x): No such file"), std::string::npos) << e.cause();
  EXPECT_EQ(Error::from_errno("mmap", ENOMEM).code(), Errc::kNoMemory);
}

TEST(Error, CodeNamesAreStable) {
  EXPECT_EQ(errc_name(Errc::kPeerFailed), "peer-failed");
  EXPECT_EQ(errc_name(Errc::kAuthFailed), "auth-failed");
  EXPECT_EQ(errc_name(Errc::kOk), "ok");
}

}  // namespace
}  // namespace grex
