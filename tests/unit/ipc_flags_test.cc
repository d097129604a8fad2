// SPDX-License-Identifier: Apache-2.0
// The GPU-to-GPU barrier page (gpu/ipc_flags.h) without a GPU: what the
// streams write and wait on is plain shared memory, so its sharing between
// processes, its refusals and its cyclic epochs are checked on any host.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "gpu/ipc_flags.h"

namespace grex::gpu {
namespace {

bool name_exists(const std::string& name) {
  int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (fd >= 0) ::close(fd);
  return fd >= 0;
}

TEST(IpcFlags, ProcessesShareTheSlotsUntilUnmapped) {
  auto made = IpcFlags::create(4);
  ASSERT_TRUE(made) << made.error().message();
  IpcFlags& f = *made;
  EXPECT_EQ(f.name().rfind("/grex-gpu-", 0), 0u);
  EXPECT_EQ(f.bytes(), 4096u);
  EXPECT_EQ(f.snapshot(), std::vector<uint32_t>(4, 0));
  struct stat st{};
  int fd = ::shm_open(f.name().c_str(), O_RDONLY, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fstat(fd, &st), 0);
  ::close(fd);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "nobody else may read or write the barrier words";
  f.store(0, 3);  // this rank reached barrier 3
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // another rank: opens it by name, sees barrier 3, reaches 7
    auto o = IpcFlags::open(f.name(), 4);
    if (!o || o->load(0) != 3) ::_exit(1);
    o->store(2, 7);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(f.load(2), 7u) << "the other process's store is seen here";
  EXPECT_EQ(f.behind(3), (std::vector<int>{1, 3}));
  EXPECT_EQ(f.broken_by(), -1);
  f.mark_broken(2);
  f.mark_broken(0);
  EXPECT_EQ(f.broken_by(), 2) << "the first rank that failed is the one named";
  f.unlink();
  EXPECT_FALSE(name_exists(f.name())) << "unlinked once every rank opened it";
  EXPECT_EQ(f.load(2), 7u) << "the mapping outlives the name";
  auto late = IpcFlags::open(f.name(), 4);
  EXPECT_FALSE(late);
}

TEST(IpcFlags, TheCreatorRemovesTheNameIfNobodyDid) {
  std::string name;
  {
    auto made = IpcFlags::create(2);
    ASSERT_TRUE(made);
    name = made->name();
    EXPECT_TRUE(name_exists(name));
    auto other = IpcFlags::create(2);
    ASSERT_TRUE(other);
    EXPECT_NE(other->name(), name) << "names are drawn at random";
  }
  EXPECT_FALSE(name_exists(name));
}

TEST(IpcFlags, RefusesPagesThatAreNotTheJobs) {
  // Not a barrier page name at all.
  for (const char* bad : {"/etc/passwd", "/grex-gpu-", "grex-gpu-0123456789abcdef0123456789abcdef",
                          "/grex-gpu-0123456789abcdef0123456789abcde/", "/grex-gpu-0123456789abcdef0123456789abcdef0"}) {
    auto o = IpcFlags::open(bad, 2);
    ASSERT_FALSE(o) << bad;
    EXPECT_EQ(o.error().code(), Errc::kProtocol) << bad;
  }
  // Of another size than the ranks give (a page made for 100 ranks).
  auto big = IpcFlags::create(100);
  ASSERT_TRUE(big);
  auto o = IpcFlags::open(big->name(), 2);
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code(), Errc::kAuthFailed);
  // Readable by others: someone else's page, or a planted one.
  std::string planted = "/grex-gpu-00000000000000000000000000" + std::to_string(100000 + ::getpid() % 900000);
  ::shm_unlink(planted.c_str());
  int fd = ::shm_open(planted.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fchmod(fd, 0644), 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  ::close(fd);
  o = IpcFlags::open(planted, 2);
  ::shm_unlink(planted.c_str());
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().code(), Errc::kAuthFailed);
  // Gone.
  EXPECT_FALSE(IpcFlags::open(planted, 2));
}

TEST(IpcFlags, EpochsCompareCyclicallyAsTheStreamWaits) {
  EXPECT_TRUE(IpcFlags::reached(5, 5));
  EXPECT_TRUE(IpcFlags::reached(6, 5));
  EXPECT_FALSE(IpcFlags::reached(4, 5));
  EXPECT_TRUE(IpcFlags::reached(0, 0xffffffffu)) << "past the wrap";
  EXPECT_FALSE(IpcFlags::reached(0xffffffffu, 0));
  // After a failure every slot is set 2^30 ahead of the call's last barrier:
  // every wait a stream may still hold (this call's, later calls') passes.
  auto made = IpcFlags::create(3);
  ASSERT_TRUE(made);
  for (uint32_t last : {10u, 0xfffffff0u}) {
    made->store_all(last + (1u << 30));
    for (uint32_t e : {last - 5, last, last + 1, last + 1000000})
      EXPECT_TRUE(made->behind(e).empty()) << "epoch " << e << " after release at " << last;
  }
}

}  // namespace
}  // namespace grex::gpu
