// SPDX-License-Identifier: Apache-2.0
// The store under floods and misbehaving clients (issue 28): thousands of
// connections that never authenticate, a client that never reads its
// replies, an oversized frame, negative timeouts. Each time the store keeps
// serving the job, within bounded memory.
#include "bootstrap_test_util.h"
#include "bootstrap/store_server.h"

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <vector>

namespace grex::testing {
namespace {

using detail::store::FrameWriter;
using detail::store::Op;

size_t rss_bytes() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<size_t>(resident) * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// True when the server has closed fd (EOF or reset), without waiting.
bool closed_now(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char b[256];
  for (;;) {  // the challenge frame first, then EOF
    ssize_t r = ::recv(fd, b, sizeof b, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
    if (r < 0) return false;
  }
}

TEST(StoreFlood, FiveThousandIdleConnectionsDoNotStopTheJob) {
  constexpr int kIdle = 5000;
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  if (lim.rlim_cur < 3 * kIdle) {
    rlimit want{std::min<rlim_t>(lim.rlim_max, 4 * kIdle), lim.rlim_max};
    if (::setrlimit(RLIMIT_NOFILE, &want) != 0 || want.rlim_cur < 3 * kIdle)
      GTEST_SKIP() << "needs " << 3 * kIdle << " file descriptors (RLIMIT_NOFILE " << lim.rlim_max << ")";
  }
  Served s = serve();
  std::vector<int> idle;
  for (int i = 0; i < kIdle; ++i) {
    int fd = raw_connect(s.port, /*authenticate=*/false);
    ASSERT_GE(fd, 0) << "connection " << i;
    idle.push_back(fd);
  }
  // The job still gets in and is served at once.
  const auto t0 = std::chrono::steady_clock::now();
  auto c = TcpStore::connect("127.0.0.1", s.port, kToken, 2000);
  ASSERT_TRUE(c.ok()) << c.error().message();
  ASSERT_TRUE((*c)->set("k", "v").ok());
  EXPECT_EQ((*c)->get("k", 100).value(), "v");
  EXPECT_LT(ms_since(t0), 1000);
  // Only the newest unauthenticated connections are still held: the store's
  // descriptors (rank 0's own) stay bounded.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  int closed = 0;
  for (int fd : idle) closed += closed_now(fd) ? 1 : 0;
  EXPECT_GE(closed, kIdle - static_cast<int>(detail::store::kMaxUnauthenticated));
  for (int fd : idle) ::close(fd);
}

TEST(StoreFlood, AClientThatNeverReadsIsNotQueuedWithoutBound) {
  Served s = serve();
  auto good = TcpStore::connect("127.0.0.1", s.port, kToken, 2000);
  ASSERT_TRUE(good.ok());
  ASSERT_TRUE((*good)->set("big", std::string(8 << 20, 'b')).ok());
  const size_t before = rss_bytes();
  detail::store::Session session;
  int raw = raw_connect(s.port, /*authenticate=*/true, kToken, &session);
  ASSERT_GE(raw, 0);
  int small = 4096;  // a small receive buffer: it fills fast
  ::setsockopt(raw, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  std::string burst;
  for (int i = 0; i < 64; ++i) {  // 512 MiB of replies asked for, none read
    FrameWriter w(Op::kGet);
    w.put_str("big");
    w.put_i64(1000);
    burst += session.seal(w.take());
  }
  ASSERT_TRUE(detail::store::send_all(raw, burst, Deadline::after_ms(2000)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // Others are served meanwhile, and the store did not queue the 512 MiB.
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*good)->set("k", "v").ok());
  EXPECT_EQ((*good)->get("k", 100).value(), "v");
  EXPECT_LT(ms_since(t0), 1000);
  const size_t grew = rss_bytes() - std::min(before, rss_bytes());
  EXPECT_LT(grew, size_t{96} << 20) << "the store queued " << (grew >> 20) << " MiB for a client that never reads";
  ::close(raw);
}

TEST(StoreFlood, OversizedFrameIsRefusedBeforeItsBody) {
  Served s = serve();
  int raw = raw_connect(s.port, /*authenticate=*/true);
  ASSERT_GE(raw, 0);
  // A header claiming one byte more than any frame may have, and 1 MiB of body
  // behind it: the connection closes without the store reading it all.
  const uint32_t n = static_cast<uint32_t>(detail::store::kMaxFrameBytes + 1);
  std::string frame(4, '\0');
  for (int i = 0; i < 4; ++i) frame[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  frame += std::string(1 << 20, 'x');
  (void)detail::store::send_all(raw, frame, Deadline::after_ms(2000));  // may fail once it is closed
  EXPECT_TRUE(closed_by_server(raw));
  ::close(raw);
  auto c = TcpStore::connect("127.0.0.1", s.port, kToken, 2000);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->set("after", "1").ok());
}

TEST(StoreFlood, NegativeTimeoutsAreRefusedNotWaitedForever) {
  Served s = serve();
  auto c = TcpStore::connect("127.0.0.1", s.port, kToken, 2000);
  ASSERT_TRUE(c.ok());
  auto get = std::async(std::launch::async, [&] { return (*c)->get("never", -1); });
  ASSERT_EQ(get.wait_for(std::chrono::seconds(2)), std::future_status::ready) << "GET with timeout -1 hangs";
  auto g = get.get();
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code(), Errc::kInvalidArgument);
  std::vector<std::string> keys = {"never"};
  auto w = (*c)->wait(keys, -5);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), Errc::kInvalidArgument);
  // A client that sends one anyway gets an error reply, not a wait.
  detail::store::Session session;
  int raw = raw_connect(s.port, /*authenticate=*/true, kToken, &session);
  ASSERT_GE(raw, 0);
  FrameWriter fw(Op::kGet);
  fw.put_str("never");
  fw.put_i64(-1);
  ASSERT_TRUE(send_sealed(raw, session, {fw.take()}));
  auto reply = recv_opened(raw, session);
  ASSERT_TRUE(reply.ok()) << reply.error().message();
  EXPECT_EQ(static_cast<uint8_t>((*reply)[0]), static_cast<uint8_t>(Op::kReplyError));
  ::close(raw);
}

}  // namespace
}  // namespace grex::testing
