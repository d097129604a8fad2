// SPDX-License-Identifier: Apache-2.0
// The shm driver against a hostile or broken peer and a hostile local user
// (issue 28): a peer that rewrites the segment's geometry and forges a slot
// whose length exceeds the slot gets this rank an error, never a crash or a
// copy from outside the slot; a segment another user created first is refused
// by name and owner. Across real processes.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <new>
#include <vector>

#include "drivers/shm/shm_heap.h"
#include "drivers/shm/shm_segment.h"
#include "harness.h"

namespace grex::test {
namespace {

constexpr uint64_t kForgedTag = 77;

// Where this process maps the segment whose name contains `name` (its file is
// unlinked once both sides are in: /proc/self/maps still names it).
uint8_t* find_mapping(const std::string& name) {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return nullptr;
  char line[512];
  uint8_t* at = nullptr;
  while (at == nullptr && std::fgets(line, sizeof line, f) != nullptr)
    if (std::strstr(line, name.c_str()) != nullptr) at = reinterpret_cast<uint8_t*>(std::strtoull(line, nullptr, 16));
  std::fclose(f);
  return at;
}

int hostile_rank(Rank& r) {
  auto pids = r.bootstrap->all_gather("pid", std::to_string(::getpid()));
  RANK_OK(pids);
  auto link = open_link(r, "hostile");
  RANK_OK(link);
  Device& dev = *link->dev;
  std::vector<uint8_t> buf(1 << 20);
  auto reg = dev.register_memory(buf.data(), buf.size());
  RANK_OK(reg);
  MemoryRegion* mr = *reg;
  std::vector<Completion> done;
  if (r.rank == 0) {  // the victim: the segment's creator, receiving
    for (uint64_t tag : {1, 2}) {  // two honest messages: before and after the header is rewritten
      RANK_CHECK(link->to(1).post_recv(std::vector<RecvRequest>{{mr, 0, 4096, tag, tag}}).count == 1);
      done.clear();
      RANK_CHECK(drain(dev, 1, &done));
      RANK_CHECK(done.back().status == Status::kSuccess && done.back().bytes == 100);
      RANK_CHECK(buf[99] == static_cast<uint8_t>(tag));
      RANK_OK(r.bootstrap->barrier("honest-" + std::to_string(tag)));
    }
    // The forged slot claims 1 GiB in an 8 KiB slot: the receive must fail, and
    // nothing may be copied from beyond the slot.
    std::memset(buf.data(), 0xab, buf.size());
    RANK_CHECK(link->to(1).post_recv(std::vector<RecvRequest>{{mr, 0, buf.size(), kForgedTag, 9}}).count == 1);
    RANK_OK(r.bootstrap->barrier("armed"));
    RANK_OK(r.bootstrap->barrier("forged"));
    done.clear();
    RANK_CHECK(drain(dev, 1, &done, 10'000));
    RANK_CHECK(done.back().op == Op::kRecv && done.back().context == 9);
    RANK_CHECK(done.back().status != Status::kSuccess);
    RANK_CHECK(done.back().bytes == 0);
    for (size_t i = 0; i < buf.size(); ++i) RANK_CHECK(buf[i] == 0xab);
    RANK_OK(r.bootstrap->barrier("checked"));
    return 0;
  }
  // The hostile peer: honest first, then it writes where the driver does not.
  uint8_t* base = find_mapping("/grex-t" + (*pids)[0] + "-hostile-0-1");
  RANK_CHECK(base != nullptr);
  auto* hdr = reinterpret_cast<shm::SegmentHeader*>(base);
  const uint32_t slots = hdr->slots, slot_bytes = hdr->slot_bytes;
  for (uint64_t tag : {1, 2}) {
    std::memset(buf.data(), static_cast<int>(tag), 100);
    RANK_CHECK(link->to(0).post_send(std::vector<SendRequest>{{mr, 0, 100, tag, tag}}).count == 1);
    done.clear();
    RANK_CHECK(drain(dev, 1, &done));
    RANK_OK(r.bootstrap->barrier("honest-" + std::to_string(tag)));
    if (tag == 1) {
      // Rewrite the geometry: no slots, huge slots. The victim keeps its own copy.
      hdr->slots = 0;
      hdr->slot_bytes = 0xffffffc0u;
    }
  }
  RANK_OK(r.bootstrap->barrier("armed"));
  // Forge the next slot of ring 1 (this side to the victim): sequence 2.
  auto* s = reinterpret_cast<shm::SlotHeader*>(base + sizeof(shm::SegmentHeader) + 2 * sizeof(shm::PinTable) +
                                                (size_t{slots} + 2 % slots) * slot_bytes);
  s->type = shm::SlotType::kEager;
  s->seq = 2;
  s->tag = kForgedTag;
  s->length = 1ull << 30;
  s->inline_bytes = 0;
  s->state.store(1, std::memory_order_release);
  RANK_OK(r.bootstrap->barrier("forged"));
  RANK_OK(r.bootstrap->barrier("checked"));
  return 0;
}

TEST(ShmHostile, PeerRewritingGeometryAndSlotLengthsGetsAnErrorNotACopy) {
  auto res = run_ranks(2, hostile_rank);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(ShmHostile, SegmentPreCreatedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create a segment as another user (nobody)";
  const std::string name = "/grex-hostile-" + std::to_string(::getpid()) + "-0-1";
  const uid_t nobody = 65534;
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A local user who guessed the name: a segment with a valid header, open to all.
    if (::setgid(nobody) != 0 || ::setuid(nobody) != 0) _exit(2);
    int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0666);
    if (fd < 0 || ::fchmod(fd, 0666) != 0) _exit(3);
    const size_t bytes = shm::Segment::bytes_for(16, 8192);
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) _exit(4);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) _exit(5);
    auto* h = new (p) shm::SegmentHeader();
    h->magic = shm::kSegmentMagic;
    h->version = shm::kSegmentVersion;
    h->slots = 16;
    h->slot_bytes = 8192;
    h->ready.store(1);
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "the child could not create the segment as nobody";
  auto opened = shm::Segment::open(name, 500);
  auto created = shm::Segment::create(name, 16, 8192);
  struct stat sb {};
  const bool still_theirs = ::stat(("/dev/shm" + name).c_str(), &sb) == 0 && sb.st_uid == nobody;
  ::shm_unlink(name.c_str());
  ASSERT_FALSE(opened.ok()) << "a segment of uid 65534 was opened";
  EXPECT_EQ(opened.error().code(), Errc::kAuthFailed);
  EXPECT_NE(opened.error().message().find("belongs to uid 65534"), std::string::npos) << opened.error().message();
  ASSERT_FALSE(created.ok()) << "a segment of uid 65534 was replaced";
  EXPECT_NE(created.error().message().find("belongs to uid 65534"), std::string::npos) << created.error().message();
  EXPECT_TRUE(still_theirs);
}

TEST(ShmHostile, SegmentsAreMadeForTheirOwnerOnly) {
  const std::string name = "/grex-mode-" + std::to_string(::getpid()) + "-0-1";
  auto s = shm::Segment::create(name, 16, 8192);
  ASSERT_TRUE(s.ok()) << s.error().message();
  struct stat sb {};
  ASSERT_EQ(::stat(("/dev/shm" + name).c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  EXPECT_EQ(sb.st_uid, ::geteuid());
  // Opened to others afterwards (a chmod by someone who could): refused.
  ASSERT_EQ(::chmod(("/dev/shm" + name).c_str(), 0644), 0);
  auto o = shm::Segment::open(name, 500);
  ::shm_unlink(name.c_str());
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.error().message().find("mode 644"), std::string::npos) << o.error().message();
}

// A peer's memory is mapped only where the peer cannot pull it away: a memfd
// sealed against shrinking (a shrink under our mapping would be SIGBUS in this
// process). The driver's own memfds are sealed so.
TEST(ShmHostile, OnlyPeerMemorySealedAgainstShrinkingIsMapped) {
  constexpr uint64_t kBytes = 1 << 20;
  int open_fd = ::memfd_create("grex-test-unsealed", MFD_CLOEXEC);
  ASSERT_GE(open_fd, 0);
  ASSERT_EQ(::ftruncate(open_fd, kBytes), 0);
  uint64_t len = kBytes;
  errno = 0;
  EXPECT_EQ(shm::map_peer_fd(::getpid(), open_fd, 0, &len, false), nullptr);
  EXPECT_EQ(errno, EPERM);
  ::close(open_fd);

  int fd = ::memfd_create("grex-test-sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, kBytes), 0);
  ASSERT_TRUE(shm::seal_size(fd));
  len = kBytes;
  uint8_t* p = shm::map_peer_fd(::getpid(), fd, 0, &len, false);
  ASSERT_NE(p, nullptr);
  EXPECT_NE(::ftruncate(fd, 4096), 0);  // the peer (anyone) can no longer shrink it
  p[kBytes - 1] = 1;                    // still backed
  len = 2 * kBytes;                     // more than the file holds: refused
  EXPECT_EQ(shm::map_peer_fd(::getpid(), fd, 0, &len, false), nullptr);
  ::munmap(p, kBytes);
  ::close(fd);
}

}  // namespace
}  // namespace grex::test
