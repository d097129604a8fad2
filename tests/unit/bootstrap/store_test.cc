// SPDX-License-Identifier: Apache-2.0
// TcpStore and StoreServer: commands, blocking waits, processes, auth, limits, malformed frames, shutdown.
#include "bootstrap_test_util.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <atomic>
#include <future>
#include <thread>

namespace grex::testing {
namespace {

using detail::store::FrameWriter;
using detail::store::Op;

std::unique_ptr<TcpStore> client(uint16_t port, int64_t timeout_ms = 2000) {
  auto c = TcpStore::connect("127.0.0.1", port, kToken, timeout_ms);
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message());
  return c.ok() ? std::move(*c) : nullptr;
}

TEST(StoreTest, SetGetAddCheckWaitInOneProcess) {
  Served s = serve();
  ASSERT_NE(s.port, 0);
  auto a = client(s.port);
  auto b = client(s.port);
  ASSERT_TRUE(a && b);

  ASSERT_TRUE(a->set("k1", "v1").ok());
  auto v = b->get("k1", 1000);
  ASSERT_TRUE(v.ok()) << v.error().message();
  EXPECT_EQ(*v, "v1");
  ASSERT_TRUE(a->set("k1", std::string("bin\0ary", 7)).ok());  // overwrite, binary-safe
  EXPECT_EQ(b->get("k1", 1000).value(), std::string("bin\0ary", 7));
  ASSERT_TRUE(a->set("empty", "").ok());
  EXPECT_EQ(b->get("empty", 1000).value(), "");

  EXPECT_EQ(a->add("ctr", 5).value(), 5);
  EXPECT_EQ(b->add("ctr", -2).value(), 3);
  EXPECT_EQ(a->get("ctr", 0).value(), "3");
  auto bad_add = a->add("k1", 1);
  ASSERT_FALSE(bad_add.ok());
  EXPECT_EQ(bad_add.error().code(), Errc::kInvalidArgument);
  EXPECT_TRUE(a->set("still", "fine").ok()) << "an error reply must not break the connection";

  std::vector<std::string> keys = {"k1", "nope", "ctr"};
  auto present = b->check(keys);
  ASSERT_TRUE(present.ok());
  EXPECT_EQ(*present, (std::vector<bool>{true, false, true}));

  // A GET on a missing key blocks only its own connection.
  auto start = std::chrono::steady_clock::now();
  auto late = std::async(std::launch::async, [&] { return b->get("late", 5000); });
  auto c = client(s.port);
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->set("other", "x").ok());
  EXPECT_EQ(c->get("other", 100).value(), "x");
  EXPECT_LT(ms_since(start), 1000);
  ASSERT_TRUE(a->set("late", "arrived").ok());
  auto lv = late.get();
  ASSERT_TRUE(lv.ok()) << lv.error().message();
  EXPECT_EQ(*lv, "arrived");

  // wait() returns once every key exists.
  auto waiter = std::async(std::launch::async, [&] {
    std::vector<std::string> ks = {"w1", "w2", "w1"};
    return b->wait(ks, 5000);
  });
  ASSERT_TRUE(a->set("w2", "2").ok());
  ASSERT_TRUE(c->add("w1", 1).ok());
  EXPECT_TRUE(waiter.get().ok());
}

// ERASE removes the keys that exist and says how many; the memory they held
// is free for new keys, and an erased key can be set again.
TEST(StoreTest, EraseRemovesKeys) {
  Served s = serve();
  ASSERT_NE(s.port, 0);
  auto a = client(s.port);
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->set("e1", "v").ok());
  ASSERT_TRUE(a->add("e2", 5).ok());
  const std::vector<std::string> keys = {"e1", "e2", "never"};
  auto n = a->erase(keys);
  ASSERT_TRUE(n.ok()) << n.error().message();
  EXPECT_EQ(*n, 2);
  auto there = a->check(keys);
  ASSERT_TRUE(there.ok());
  EXPECT_EQ(*there, (std::vector<bool>{false, false, false}));
  EXPECT_EQ(a->get("e1", 50).error().code(), Errc::kTimeout);
  EXPECT_EQ(a->add("e2", 1).value(), 1);  // a fresh counter
  ASSERT_TRUE(a->set("e1", "again").ok());
  EXPECT_EQ(a->get("e1", 1000).value(), "again");
  EXPECT_EQ(a->erase(std::vector<std::string>{}).value(), 0);
  LocalStore local;
  ASSERT_TRUE(local.set("x", "1").ok());
  EXPECT_EQ(local.erase(std::vector<std::string>{"x", "y"}).value(), 1);
  EXPECT_FALSE(local.check(std::vector<std::string>{"x"}).value()[0]);
}

TEST(StoreTest, TimeoutsNameTheMissingKeys) {
  Served s = serve();
  auto a = client(s.port);
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->set("here", "1").ok());

  auto start = std::chrono::steady_clock::now();
  auto g = a->get("absent", 150);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code(), Errc::kTimeout);
  EXPECT_NE(g.error().message().find("'absent'"), std::string::npos) << g.error().message();
  EXPECT_GE(ms_since(start), 140);
  EXPECT_LT(ms_since(start), 2000);

  std::vector<std::string> keys = {"here", "gone1", "gone2"};
  auto w = a->wait(keys, 150);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), Errc::kTimeout);
  const std::string m = w.error().message();
  EXPECT_NE(m.find("'gone1', 'gone2'"), std::string::npos) << m;
  EXPECT_EQ(m.find("'here'"), std::string::npos) << m;
  EXPECT_TRUE(a->set("after", "timeouts").ok()) << "a timed-out wait must leave the connection usable";
  EXPECT_EQ(a->get("after", 100).value(), "timeouts");
}

TEST(StoreTest, AcrossProcesses) {
  Served s = serve();
  ASSERT_NE(s.port, 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: only async-signal-safe-ish work, then _exit with a code the parent checks.
    auto c = TcpStore::connect("127.0.0.1", s.port, kToken, 2000);
    if (!c.ok()) _exit(10);
    auto from_parent = (*c)->get("parent/hello", 5000);
    if (!from_parent.ok() || *from_parent != "hi child") _exit(11);
    if (!(*c)->set("child/a", "alpha").ok() || !(*c)->set("child/b", "beta").ok()) _exit(12);
    auto n = (*c)->add("counter", 40);
    _exit(n.ok() ? 0 : 13);
  }
  auto p = client(s.port);
  ASSERT_TRUE(p);
  ASSERT_TRUE(p->set("parent/hello", "hi child").ok());
  std::vector<std::string> keys = {"child/a", "child/b", "counter"};
  auto w = p->wait(keys, 5000);
  EXPECT_TRUE(w.ok()) << w.error().message();
  EXPECT_EQ(p->get("child/a", 1000).value(), "alpha");
  EXPECT_EQ(p->get("child/b", 1000).value(), "beta");
  EXPECT_EQ(p->add("counter", 2).value(), 42);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(StoreTest, WrongTokenIsRejected) {
  Served s = serve();
  auto start = std::chrono::steady_clock::now();
  auto c = TcpStore::connect("127.0.0.1", s.port, "some-other-token", 3000);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), Errc::kAuthFailed);
  const std::string m = c.error().message();
  EXPECT_NE(m.find("store at 127.0.0.1:" + std::to_string(s.port) + " rejected this rank's job token"),
            std::string::npos) << m;
  EXPECT_NE(m.find("GREX_JOB_TOKEN must be the same on every rank"), std::string::npos) << m;
  EXPECT_LT(ms_since(start), 1000) << "a rejection must not be retried until the timeout";
  EXPECT_TRUE(client(s.port)) << "the server keeps serving after a rejection";
}

TEST(StoreTest, MissingTokenIsRejected) {
  Served s = serve();
  auto c = TcpStore::connect("127.0.0.1", s.port, "", 2000);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), Errc::kAuthFailed);
  EXPECT_NE(c.error().message().find("GREX_JOB_TOKEN is not set"), std::string::npos) << c.error().message();

  auto srv = StoreServer::start("127.0.0.1", 0, "");
  ASSERT_FALSE(srv.ok());
  EXPECT_EQ(srv.error().code(), Errc::kInvalidArgument);
}

TEST(StoreTest, ServerMustProveItHoldsTheToken) {
  // A fake server that sends a challenge, then an AuthOk with a bogus proof.
  auto lfd = detail::store::listen_tcp("127.0.0.1", 0);
  ASSERT_TRUE(lfd.ok());
  uint16_t port = detail::store::bound_port(*lfd);
  std::thread fake([fd = *lfd] {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 3000) != 1) return;
    int c = accept(fd, nullptr, nullptr);
    if (c < 0) return;
    FrameWriter ch(Op::kChallenge);
    ch.put_raw(std::string(detail::store::kNonceBytes, 'n'));
    (void)detail::store::send_all(c, ch.take(), Deadline::after_ms(2000));
    (void)detail::store::recv_frame(c, Deadline::after_ms(2000), detail::store::kMaxAuthFrameBytes);
    FrameWriter okf(Op::kAuthOk);
    okf.put_raw(std::string(detail::store::kMacBytes, 'x'));
    (void)detail::store::send_all(c, okf.take(), Deadline::after_ms(2000));
    usleep(200'000);
    close(c);
  });
  auto c = TcpStore::connect("127.0.0.1", port, kToken, 2000);
  fake.join();
  close(*lfd);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), Errc::kAuthFailed);
  EXPECT_NE(c.error().message().find("could not prove it holds the job token"), std::string::npos)
      << c.error().message();
}

TEST(StoreTest, PortInUse) {
  Served s = serve();
  auto second = StoreServer::start("127.0.0.1", s.port, kToken);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code(), Errc::kAddressInUse);
  const std::string m = second.error().message();
  EXPECT_NE(m.find("127.0.0.1:" + std::to_string(s.port)), std::string::npos) << m;
  EXPECT_NE(m.find("another job is using it; pick another MASTER_PORT / GREX_STORE_ADDR"), std::string::npos) << m;
}

TEST(StoreTest, ConnectTimesOutWhenNothingListens) {
  uint16_t port = free_port();
  auto start = std::chrono::steady_clock::now();
  auto c = TcpStore::connect("127.0.0.1", port, kToken, 200);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), Errc::kTimeout);
  EXPECT_NE(c.error().message().find("no store answered at 127.0.0.1:" + std::to_string(port) + " within 200 ms"),
            std::string::npos) << c.error().message();
  EXPECT_GE(ms_since(start), 190);
  EXPECT_LT(ms_since(start), 2000);
}

TEST(StoreTest, ConnectRetriesUntilTheServerStarts) {
  uint16_t port = free_port();
  auto pending = std::async(std::launch::async, [&] { return TcpStore::connect("127.0.0.1", port, kToken, 5000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  auto srv = StoreServer::start("127.0.0.1", port, kToken);
  ASSERT_TRUE(srv.ok()) << srv.error().message();
  auto c = pending.get();
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_TRUE((*c)->set("k", "v").ok());
}

TEST(StoreTest, SizeLimitsAreEnforcedByTheClient) {
  Served s = serve();
  auto a = client(s.port);
  ASSERT_TRUE(a);
  std::string big_key(detail::store::kMaxKeyBytes + 1, 'k');
  auto r = a->set(big_key, "v");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), Errc::kInvalidArgument);
  std::string big_value(1 << 20, 'v');  // 1 MiB is fine
  EXPECT_TRUE(a->set("big", big_value).ok());
  EXPECT_EQ(a->get("big", 1000).value().size(), big_value.size());
}

TEST(StoreTest, MalformedFramesCloseOnlyThatConnection) {
  Served s = serve();
  auto good = client(s.port);
  ASSERT_TRUE(good);
  ASSERT_TRUE(good->set("before", "1").ok());

  // Instead of the handshake: a frame claiming 4 GiB.
  int raw = raw_connect(s.port, /*authenticate=*/false);
  ASSERT_GE(raw, 0);
  const char huge[] = {'\xff', '\xff', '\xff', '\xff', 'x'};
  ASSERT_EQ(send(raw, huge, sizeof(huge), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(huge)));
  EXPECT_TRUE(closed_by_server(raw));
  close(raw);

  // After the handshake (frames sealed in the session, so the parser sees them): an unknown opcode.
  detail::store::Session session;
  raw = raw_connect(s.port, /*authenticate=*/true, kToken, &session);
  ASSERT_GE(raw, 0);
  FrameWriter junk(static_cast<Op>(0x7f));
  junk.put_u32(12345);
  ASSERT_TRUE(send_sealed(raw, session, {junk.take()}));
  EXPECT_TRUE(closed_by_server(raw));
  close(raw);

  // After the handshake: a SET whose key length runs past the frame.
  raw = raw_connect(s.port, /*authenticate=*/true, kToken, &session);
  ASSERT_GE(raw, 0);
  FrameWriter lying(Op::kSet);
  lying.put_u32(1000);
  lying.put_raw("short");
  ASSERT_TRUE(send_sealed(raw, session, {lying.take()}));
  EXPECT_TRUE(closed_by_server(raw));
  close(raw);

  // After the handshake: a key over the 4 KiB limit.
  raw = raw_connect(s.port, /*authenticate=*/true, kToken, &session);
  ASSERT_GE(raw, 0);
  FrameWriter long_key(Op::kSet);
  long_key.put_str(std::string(detail::store::kMaxKeyBytes + 1, 'k'));
  long_key.put_str("v");
  ASSERT_TRUE(send_sealed(raw, session, {long_key.take()}));
  EXPECT_TRUE(closed_by_server(raw));
  close(raw);

  // After the handshake: a valid request without its session tag (what an
  // attacker on the path, who has no key, could inject), and one replayed.
  raw = raw_connect(s.port, /*authenticate=*/true, kToken, &session);
  ASSERT_GE(raw, 0);
  FrameWriter unsealed(Op::kSet);
  unsealed.put_str("injected");
  unsealed.put_str("1");
  ASSERT_TRUE(detail::store::send_all(raw, unsealed.take(), Deadline::after_ms(1000)).ok());
  EXPECT_TRUE(closed_by_server(raw));
  close(raw);
  raw = raw_connect(s.port, /*authenticate=*/true, kToken, &session);
  ASSERT_GE(raw, 0);
  FrameWriter once(Op::kAdd);
  once.put_str("replayed");
  once.put_i64(1);
  const std::string sealed = session.seal(once.take());
  ASSERT_TRUE(detail::store::send_all(raw, sealed + sealed, Deadline::after_ms(1000)).ok());
  EXPECT_TRUE(closed_by_server(raw));  // the first ADD is answered, the copy closes the connection
  close(raw);
  EXPECT_EQ(good->get("replayed", 100).value(), "1");
  std::vector<std::string> injected = {"injected"};
  EXPECT_EQ(good->check(injected).value(), std::vector<bool>{false});

  // A half-sent frame from a client that then vanishes.
  raw = raw_connect(s.port, /*authenticate=*/true);
  ASSERT_GE(raw, 0);
  const char partial[] = {'\x10', '\x00', '\x00', '\x00', '\x10'};
  ASSERT_EQ(send(raw, partial, sizeof(partial), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(partial)));
  close(raw);

  // Everyone else is still served.
  ASSERT_TRUE(good->set("after", "2").ok());
  EXPECT_EQ(good->get("before", 100).value(), "1");
  auto fresh = client(s.port);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->get("after", 100).value(), "2");
}

TEST(StoreTest, RequestsQueuedBehindAWaitAreServedInOrder) {
  Served s = serve();
  detail::store::Session session;
  int raw = raw_connect(s.port, /*authenticate=*/true, kToken, &session);
  ASSERT_GE(raw, 0);
  FrameWriter get(Op::kGet);
  get.put_str("later");
  get.put_i64(5000);
  FrameWriter set(Op::kSet);
  set.put_str("queued");
  set.put_str("yes");
  ASSERT_TRUE(send_sealed(raw, session, {get.take(), set.take()}));
  auto other = client(s.port);
  ASSERT_TRUE(other);
  std::vector<std::string> queued = {"queued"};
  EXPECT_EQ(other->check(queued).value(), std::vector<bool>{false}) << "the SET must wait behind the GET";
  ASSERT_TRUE(other->set("later", "now").ok());
  auto first = recv_opened(raw, session);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(static_cast<uint8_t>((*first)[0]), static_cast<uint8_t>(Op::kReplyValue));
  EXPECT_NE(first->find("now"), std::string::npos);
  auto second = recv_opened(raw, session);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(static_cast<uint8_t>((*second)[0]), static_cast<uint8_t>(Op::kReplyOk));
  EXPECT_EQ(other->get("queued", 1000).value(), "yes");
  close(raw);
}

TEST(StoreTest, ServerStoppedMidSessionGivesConnectionFailed) {
  Served s = serve();
  auto a = client(s.port);
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->set("k", "v").ok());
  auto start = std::chrono::steady_clock::now();
  auto blocked = std::async(std::launch::async, [&] { return a->get("never", 20'000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  s.server->stop();
  auto r = blocked.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), Errc::kConnectionFailed) << r.error().message();
  EXPECT_LT(ms_since(start), 2000);
  auto again = a->set("k", "v2");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code(), Errc::kConnectionFailed);
}

}  // namespace
}  // namespace grex::testing
