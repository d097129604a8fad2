// SPDX-License-Identifier: Apache-2.0
// Two reliable::Flows driven by a fuzz input: see flow_script.h.
#include "tests/fuzz/flow_script.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>

#include "drivers/dpdk/dpdk_frame.h"
#include "transport/wire.h"

namespace grex::fuzz {

std::vector<uint8_t> check_tx_packet(const reliable::TxPacket& p, const reliable::Config& cfg) {
  const wire::Header& h = p.hdr;
  FUZZ_CHECK(h.payload_len <= cfg.max_payload);
  FUZZ_CHECK((p.payload != nullptr) == (h.payload_len > 0));
  // Data comes from the caller's registered memory; an advert's packed
  // receives from the flow's own buffer (region nullptr), whole entries.
  if (h.payload_len > 0 && (h.flags & wire::kFlagAdvert) != 0)
    FUZZ_CHECK(p.region == nullptr && h.payload_len % wire::kAdvertEntryBytes == 0);
  else if (h.payload_len > 0)
    FUZZ_CHECK(p.region != nullptr && p.region->contains(p.payload, h.payload_len));
  std::vector<uint8_t> bytes(wire::kHeaderBytes + h.payload_len);
  if (h.payload_len > 0) std::memcpy(bytes.data() + wire::kHeaderBytes, p.payload, h.payload_len);  // ASan: still live?
  wire::encode(h, bytes.data(), p.payload);
  wire::Header back;
  FUZZ_CHECK(wire::decode(bytes.data(), bytes.size(), cfg.max_payload, &back) == wire::Reject::kNone);
  FUZZ_CHECK(back.type == h.type && back.flags == h.flags && back.psn == h.psn && back.msg_id == h.msg_id &&
             back.offset == h.offset && back.msg_len == h.msg_len && back.tag == h.tag);
  return bytes;
}

namespace {

namespace frame = dpdk::frame;

constexpr uint64_t kMaxMessageBytes = 6000;
constexpr uint32_t kTags = 3;
constexpr size_t kWriteTargetBytes = 8192;
constexpr size_t kMaxInboxFrames = 4096;
constexpr uint16_t kUdpPort = 47000;
constexpr uint8_t kCanary = 0xa5;
constexpr int kSettleRounds = 20000;

// GREX_FUZZ_TRACE=1 prints the script as it runs (to study a reproducer).
const bool kTrace = std::getenv("GREX_FUZZ_TRACE") != nullptr;
#define TRACE(...)                                 \
  do {                                             \
    if (kTrace) std::fprintf(stderr, __VA_ARGS__); \
  } while (0)

uint8_t pattern(int side, size_t msg, size_t i) {
  return static_cast<uint8_t>(side * 101 + msg * 31 + i * 7 + (i >> 8));
}

GREX_FUZZ_NO_COVERAGE void fill_pattern(uint8_t* d, size_t n, int side, size_t msg) {
  for (size_t i = 0; i < n; ++i) d[i] = pattern(side, msg, i);
}
GREX_FUZZ_NO_COVERAGE bool is_pattern(const uint8_t* d, size_t n, int side, size_t msg) {
  for (size_t i = 0; i < n; ++i)
    if (d[i] != pattern(side, msg, i)) return false;
  return true;
}
GREX_FUZZ_NO_COVERAGE bool is_canary(const uint8_t* d, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (d[i] != kCanary) return false;
  return true;
}

reliable::Config config_from(uint8_t b) {
  reliable::Config c;
  c.window = uint32_t{16} << (2 * (b & 3));  // 16, 64, 256, 1024
  c.max_payload = std::array<uint32_t, 4>{64, 512, 1400, 8192}[(b >> 2) & 3];
  c.payload_crc = (b & 0x10) != 0;
  c.queue_depth = (b & 0x20) != 0 ? 16 : 4;
  c.ack_every = (b & 0x40) != 0 ? 1 : 32;
  c.reorder_packets = (b & 0x80) != 0 ? 16 : 0;  // issue 31: reordering tolerated
  c.rto_initial_ns = 200'000;
  c.rto_min_ns = 50'000;
  c.rto_max_ns = 20'000'000;
  c.keepalive_ns = 5'000'000;
  c.give_up_ns = 2'000'000'000;
  return c;
}

struct Frame {
  std::vector<uint8_t> bytes;
  bool payload_flipped = false;  // a bit of the grex payload was corrupted on the wire
};

struct Posted {
  std::unique_ptr<OwnedRegion> buf;
  uint64_t offset = 0, length = 0, tag = 0;
  size_t ordinal = 0;                    // among this side's posts of the same kind and tag
  bool valid = false, with_imm = false;  // writes: key and range fit the target's region; imm asked
  bool done = false;
  Status status = Status::kSuccess;
};

enum Kind : uint64_t { kRecvCtx = 1, kSendCtx = 2, kWriteCtx = 3 };
uint64_t ctx(Kind k, size_t i) { return (static_cast<uint64_t>(k) << 32) | i; }

struct Side {
  int rank = 0;
  OwnedRegion write_target;
  TableOfOne table{&write_target};
  std::unique_ptr<reliable::Flow> flow;
  std::deque<Frame> inbox;  // frames on their way to this side
  std::vector<Posted> recvs, sends, writes;
  size_t per_tag_recvs[kTags] = {}, per_tag_sends[kTags] = {};
  std::vector<Completion> remote_writes;  // kRemoteWrite completions seen here
  explicit Side(int r) : rank(r), write_target(kWriteTargetBytes, 100 + r) {}
};

class Script {
 public:
  Script(const uint8_t* data, size_t size) : in_(data, size) {
    const uint8_t b = in_.u8();
    cfg_ = config_from(b);
    checked_ = (b & 0x80) == 0;
    for (int s = 0; s < 2; ++s)
      side_[s].flow = std::make_unique<reliable::Flow>(cfg_, 10 + s, 11 - s, 1 - s, &side_[s].table);
  }
  void run();

 private:
  Side& peer(int s) { return side_[1 - s]; }
  const Posted* matching_send(int s, const Posted& recv) const;
  void post_recv(int s);
  void post_send(int s);
  void post_write(int s);
  void pump(int s, size_t max);
  void deliver_frame(int s, const Frame& f);
  void mangle(int s);
  void forge(int s, bool raw);
  void poll(int s);
  void on_completion(int s, const Completion& c);
  void exchange();
  void settle();

  Reader in_;
  reliable::Config cfg_;
  Side side_[2] = {Side(0), Side(1)};
  uint64_t now_ = 1'000'000;
  bool tainted_ = false;  // forged or corrupted bytes were accepted: content checks are off
  bool closed_ = false;
  // Checked mode finally checks liveness on a lossless wire; unchecked mode
  // checks memory safety and contents only.
  bool checked_ = true;
};

// Receives match sends first-in first-out per tag: the n-th receive of a tag
// holds the n-th send of that tag (nullptr: not posted yet).
const Posted* Script::matching_send(int s, const Posted& recv) const {
  for (const Posted& x : side_[1 - s].sends)
    if (x.tag == recv.tag && x.ordinal == recv.ordinal) return &x;
  return nullptr;
}

void Script::post_recv(int s) {
  Side& me = side_[s];
  Posted p;
  p.length = in_.u16() % (kMaxMessageBytes + 1);
  p.offset = in_.u8() % 8;
  const uint8_t t = in_.u8();
  p.tag = t % kTags;
  p.valid = (t & 0x80) == 0 || p.length == 0;  // else the region is one byte short
  p.buf = std::make_unique<OwnedRegion>(p.offset + p.length - !p.valid, 1);
  std::memset(p.buf->data(), kCanary, p.buf->length());
  const bool ok = me.flow->post_recv({p.buf.get(), p.offset, p.length, p.tag, ctx(kRecvCtx, me.recvs.size())});
  TRACE("side %d: post_recv #%zu len %lu off %lu tag %lu%s%s\n", s, me.recvs.size(), (unsigned long)p.length,
        (unsigned long)p.offset, (unsigned long)p.tag, p.valid ? "" : " (bad region)", ok ? "" : " (queue full)");
  if (!ok) return;
  p.ordinal = p.valid ? me.per_tag_recvs[p.tag]++ : SIZE_MAX;  // a bad receive is never advertised
  me.recvs.push_back(std::move(p));
}

void Script::post_send(int s) {
  Side& me = side_[s];
  Posted p;
  p.length = in_.u16() % (kMaxMessageBytes + 1);
  p.offset = in_.u8() % 8;
  const uint8_t t = in_.u8();
  p.tag = t % kTags;
  p.valid = (t & 0x80) == 0 || p.length == 0;  // else the region is one byte short
  p.buf = std::make_unique<OwnedRegion>(p.offset + p.length - !p.valid, 2);
  fill_pattern(p.buf->data() + p.offset, p.length - !p.valid, s, me.sends.size());
  const bool ok = me.flow->post_send({p.buf.get(), p.offset, p.length, p.tag, ctx(kSendCtx, me.sends.size())});
  TRACE("side %d: post_send #%zu len %lu off %lu tag %lu%s%s\n", s, me.sends.size(), (unsigned long)p.length,
        (unsigned long)p.offset, (unsigned long)p.tag, p.valid ? "" : " (bad region)", ok ? "" : " (queue full)");
  if (!ok) return;
  p.ordinal = p.valid ? me.per_tag_sends[p.tag]++ : SIZE_MAX;  // a bad send fails at once and matches nothing
  me.sends.push_back(std::move(p));
}

void Script::post_write(int s) {
  Side& me = side_[s];
  Posted p;
  p.length = in_.u16() % (kMaxMessageBytes + 1);
  p.buf = std::make_unique<OwnedRegion>(p.length, 3);
  WriteRequest w;
  w.region = p.buf.get();
  w.length = p.length;
  w.remote = peer(s).write_target.remote();
  const uint8_t how = in_.u8();
  if (how & 1) w.remote.rkey ^= 0x40;    // a key the target does not know
  if (how & 2) w.remote.length += 4096;  // claims more than the target registered
  w.remote_offset = in_.u16() % (kWriteTargetBytes + 64);
  w.imm = static_cast<uint32_t>(me.writes.size());  // names the write in the target's completion
  w.with_imm = (how & 4) != 0;
  p.with_imm = w.with_imm;
  p.valid = (how & 1) == 0 && w.remote_offset + w.length <= kWriteTargetBytes;
  w.context = ctx(kWriteCtx, me.writes.size());
  const bool ok = me.flow->post_write(w);
  TRACE("side %d: post_write #%zu len %lu remote_offset %lu rkey %lu remote.length %lu imm %u%s%s\n", s,
        me.writes.size(), (unsigned long)w.length, (unsigned long)w.remote_offset, (unsigned long)w.remote.rkey,
        (unsigned long)w.remote.length, w.imm, w.with_imm ? " with_imm" : "", ok ? "" : " (queue full)");
  if (!ok) return;
  me.writes.push_back(std::move(p));
}

void Script::pump(int s, size_t max) {
  reliable::TxPacket tx[64];
  size_t n = side_[s].flow->poll_tx(std::span<reliable::TxPacket>(tx, std::min<size_t>(max, 64)), now_);
  for (size_t i = 0; i < n; ++i) {
    TRACE("side %d: tx type %u flags %#x psn %u ack %u msg %u off %lu len %lu pay %u\n", s, unsigned(tx[i].hdr.type),
          tx[i].hdr.flags, tx[i].hdr.psn, tx[i].hdr.ack, tx[i].hdr.msg_id, (unsigned long)tx[i].hdr.offset,
          (unsigned long)tx[i].hdr.msg_len, tx[i].hdr.payload_len);
    std::vector<uint8_t> dgram = check_tx_packet(tx[i], cfg_);
    FUZZ_CHECK(tx[i].hdr.flow == static_cast<uint32_t>(11 - s));
    Frame f;
    f.bytes.resize(frame::kHeadersBytes + dgram.size());
    frame::FrameAddr a{{2, 0, 0, 0, 0, uint8_t(s)},
                       {2, 0, 0, 0, 0, uint8_t(1 - s)},
                       0x0a630001u + s,
                       0x0a630002u - s,
                       kUdpPort,
                       kUdpPort};
    FUZZ_CHECK(frame::write_headers(f.bytes.data(), a, dgram.size()));
    std::memcpy(f.bytes.data() + frame::kHeadersBytes, dgram.data(), dgram.size());
    if (peer(s).inbox.size() < kMaxInboxFrames) peer(s).inbox.push_back(std::move(f));
  }
}

// What the driver's RX path does: parse, decode, route by flow id.
void Script::deliver_frame(int s, const Frame& f) {
  frame::Parsed p;
  if (frame::parse(f.bytes.data(), f.bytes.size(), kUdpPort, &p, true) != frame::ParseError::kOk) return;
  wire::Header h;
  if (wire::decode(p.payload, p.payload_len, cfg_.max_payload, &h) != wire::Reject::kNone) return;
  if (h.flow != static_cast<uint32_t>(10 + s)) return;
  if (f.payload_flipped) tainted_ = true;
  TRACE("side %d: rx type %u flags %#x psn %u ack %u sack %#lx msg %u off %lu len %lu pay %u tag %#lx remote %lu%s\n",
        s, unsigned(h.type), h.flags, h.psn, h.ack, (unsigned long)h.sack, h.msg_id, (unsigned long)h.offset,
        (unsigned long)h.msg_len, h.payload_len, (unsigned long)h.tag, (unsigned long)h.remote,
        f.payload_flipped ? " (forged/corrupted)" : "");
  side_[s].flow->on_packet(h, p.payload + wire::kHeaderBytes, now_);
  poll(s);
}

void Script::mangle(int s) {
  std::deque<Frame>& q = side_[s].inbox;
  const uint8_t what = in_.u8();
  const uint16_t arg = in_.u16();
  if (q.empty()) return;
  TRACE("side %d: inbox %s\n", s, std::array<const char*, 4>{"drop", "duplicate", "reorder", "bit flip"}[what % 4]);
  switch (what % 4) {
    case 0:
      q.pop_front();
      break;  // drop
    case 1:
      q.push_back(q.front());
      break;  // duplicate, late
    case 2:
      std::swap(q.front(), q[arg % q.size()]);
      break;   // reorder
    case 3: {  // flip one bit
      Frame& f = q.front();
      size_t bit = arg % (f.bytes.size() * 8);
      f.bytes[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      if (bit / 8 >= frame::kHeadersBytes + wire::kHeaderBytes && !cfg_.payload_crc) f.payload_flipped = true;
      break;
    }
  }
}

// A packet built from input bytes: a header from small fields (encoded, so
// the CRC is right) or, with `raw`, 80 bytes taken as they are.
void Script::forge(int s, bool raw) {
  std::vector<uint8_t> dgram(wire::kHeaderBytes);
  bool fix_crc = false;
  if (raw) {
    size_t got = 0;
    const uint8_t* hdr = in_.take(wire::kHeaderBytes, &got);
    std::memcpy(dgram.data(), hdr, got);
    fix_crc = (in_.u8() & 1) != 0;
  }
  wire::Header h;
  h.type = static_cast<wire::Type>(in_.u8() % (wire::kMaxType + 1));
  h.flags = in_.u8() & 0x1f;
  h.flow = 10 + s;
  h.psn = in_.u8();
  h.ack = in_.u8();
  h.sack = in_.u8();
  h.msg_id = in_.u8();
  h.offset = in_.u16();
  h.msg_len = in_.u16();
  h.tag = (static_cast<uint64_t>(in_.u8() & 1 ? 100 + s : 0) << 32) | in_.u8() % kTags;
  h.remote = in_.u8() & 0x80 ? in_.u16() : 0;
  h.payload_len = std::min<uint32_t>(in_.u16() % (cfg_.max_payload + 1), static_cast<uint32_t>(in_.left()));
  size_t got = 0;
  const uint8_t* payload = in_.take(h.payload_len, &got);
  if (!raw) {
    dgram.resize(wire::kHeaderBytes + got);
    std::memcpy(dgram.data() + wire::kHeaderBytes, payload, got);
    wire::encode(h, dgram.data(), dgram.data() + wire::kHeaderBytes);
  } else {
    dgram.insert(dgram.end(), payload, payload + got);
    if (fix_crc) {  // arbitrary field values behind a valid checksum
      constexpr size_t kCrcAt = wire::kHeaderBytes - 8;
      std::memset(dgram.data() + kCrcAt, 0, 4);
      uint32_t crc = wire::crc32c(dgram.data(), wire::kHeaderBytes);
      if ((dgram[2] & wire::kFlagPayloadCrc) != 0) crc = wire::crc32c(dgram.data() + wire::kHeaderBytes, got, crc);
      for (int k = 0; k < 4; ++k) dgram[kCrcAt + k] = static_cast<uint8_t>(crc >> (8 * k));
    }
  }
  Frame f;
  f.bytes.resize(frame::kHeadersBytes + dgram.size());
  frame::write_headers(f.bytes.data(), frame::FrameAddr{{}, {}, 1, 2, kUdpPort, kUdpPort}, dgram.size());
  std::memcpy(f.bytes.data() + frame::kHeadersBytes, dgram.data(), dgram.size());
  f.payload_flipped = true;  // anything accepted from here is not what a sender sent
  deliver_frame(s, f);
}

void Script::poll(int s) {
  Completion c[32];
  size_t n = 0;
  while ((n = side_[s].flow->poll_completions(c)) > 0)
    for (size_t i = 0; i < n; ++i) on_completion(s, c[i]);
}

void Script::on_completion(int s, const Completion& c) {
  Side& me = side_[s];
  TRACE("side %d: completion op %u status %u bytes %lu tag %lu imm %u context %#lx\n", s, unsigned(c.op),
        unsigned(c.status), (unsigned long)c.bytes, (unsigned long)c.tag, c.imm, (unsigned long)c.context);
  FUZZ_CHECK(c.peer == 1 - s);
  if (c.op == Op::kRemoteWrite) {
    FUZZ_CHECK(c.context == 0);
    me.remote_writes.push_back(c);
    return;
  }
  const Kind kind = static_cast<Kind>(c.context >> 32);
  const size_t i = static_cast<uint32_t>(c.context);
  std::vector<Posted>* list = kind == kRecvCtx ? &me.recvs : kind == kSendCtx ? &me.sends : &me.writes;
  FUZZ_CHECK(kind >= kRecvCtx && kind <= kWriteCtx && i < list->size());
  FUZZ_CHECK(c.op == (kind == kRecvCtx ? Op::kRecv : kind == kSendCtx ? Op::kSend : Op::kWrite));
  Posted& p = (*list)[i];
  FUZZ_CHECK(!p.done);  // reported once
  FUZZ_CHECK(c.bytes <= p.length);
  p.done = true;
  p.status = c.status;
  if (kind != kWriteCtx && !p.valid)  // kLocalError, or the flow failed before a send was matched
    FUZZ_CHECK(c.status != Status::kSuccess && c.status != Status::kTruncated && c.bytes == 0);
  if (kind == kRecvCtx) {
    FUZZ_CHECK(c.tag == p.tag);
    const uint8_t* b = p.buf->data();
    FUZZ_CHECK(is_canary(b, p.offset));  // nothing written before the buffer
    const bool delivered = c.status == Status::kSuccess || c.status == Status::kTruncated;
    if (delivered && !tainted_) {
      const Posted* send = matching_send(s, p);
      FUZZ_CHECK(send != nullptr && send->valid);
      const size_t msg = static_cast<size_t>(send - peer(s).sends.data());
      FUZZ_CHECK(c.bytes == std::min(send->length, p.length));
      FUZZ_CHECK((c.status == Status::kTruncated) == (send->length > p.length));
      FUZZ_CHECK(is_pattern(b + p.offset, c.bytes, 1 - s, msg));
      FUZZ_CHECK(is_canary(b + p.offset + c.bytes, p.length - c.bytes));  // nothing past the message
    }
  } else if (kind == kSendCtx) {
    FUZZ_CHECK(c.tag == p.tag);
  }
  p.buf->poison();  // the transport is done with it: any later access is a bug
}

// Both sides send what they have; everything on the wire arrives.
void Script::exchange() {
  for (int s = 0; s < 2; ++s) {
    pump(s, 64);
    poll(s);
  }
  for (int s = 0; s < 2; ++s)
    while (!side_[s].inbox.empty()) {
      Frame f = std::move(side_[s].inbox.front());
      side_[s].inbox.pop_front();
      deliver_frame(s, f);
    }
}

// A lossless wire until every matched send/receive pair and every write is
// done (or a budget runs out: a stall the protocol must not have).
void Script::settle() {
  auto all_done = [&] {
    for (int s = 0; s < 2; ++s) {
      for (const Posted& w : side_[s].writes)
        if (!w.done) return false;
      for (const Posted& x : side_[s].sends)
        if (!x.done && x.ordinal < peer(s).per_tag_recvs[x.tag]) return false;
      for (const Posted& r : side_[s].recvs)
        if (!r.done && r.ordinal < peer(s).per_tag_sends[r.tag] && matching_send(s, r)->valid) return false;
    }
    return true;
  };
  TRACE("settle from %lu ns\n", (unsigned long)now_);
  for (int round = 0; round < kSettleRounds && !all_done(); ++round) {
    bool quiet = side_[0].inbox.empty() && side_[1].inbox.empty();
    exchange();
    now_ += quiet ? 1'000'000 : 10'000;
    if (side_[0].flow->failed() || side_[1].flow->failed()) return;
  }
  TRACE("settle ends at %lu ns\n", (unsigned long)now_);
  if (!all_done()) {
    std::fprintf(stderr, "stall: matched sends/receives or writes did not complete on a lossless wire:\n");
    for (int s = 0; s < 2; ++s) {
      const char* names[] = {"recv", "send", "write"};
      const std::vector<Posted>* lists[] = {&side_[s].recvs, &side_[s].sends, &side_[s].writes};
      for (int k = 0; k < 3; ++k)
        for (size_t i = 0; i < lists[k]->size(); ++i)
          if (!(*lists[k])[i].done)
            std::fprintf(stderr, "  side %d %s #%zu (tag %lu, ordinal %zu, %lu B) open\n", s, names[k], i,
                         static_cast<unsigned long>((*lists[k])[i].tag), (*lists[k])[i].ordinal,
                         static_cast<unsigned long>((*lists[k])[i].length));
    }
    std::abort();
  }
  // Every valid write with an immediate raised exactly one successful
  // kRemoteWrite at the target; one without raised none.
  for (int s = 0; s < 2; ++s) {
    const std::vector<Posted>& writes = peer(s).writes;
    std::vector<int> seen(writes.size(), 0);
    for (const Completion& c : side_[s].remote_writes) {
      FUZZ_CHECK(c.imm < writes.size());
      const Posted& w = writes[c.imm];
      FUZZ_CHECK(w.with_imm);
      // A write the target cannot place (a key it does not know) raises
      // one kRemoteAccess there once all of it arrived; an empty one places
      // nothing and succeeds.
      FUZZ_CHECK(c.status == (w.valid || w.length == 0 ? Status::kSuccess : Status::kRemoteAccess));
      FUZZ_CHECK(c.bytes == w.length);
      ++seen[c.imm];
    }
    for (size_t i = 0; i < writes.size(); ++i) {
      // Sent (success at the sender: the target's verdict does not come
      // back) or refused before sending (a range beyond the target's
      // registration): the target hears of the first only.
      const bool sent = writes[i].status == Status::kSuccess;
      if (writes[i].valid) FUZZ_CHECK(sent);
      FUZZ_CHECK(seen[i] == (sent && writes[i].with_imm ? 1 : 0));
    }
  }
}

void Script::run() {
  while (!in_.empty()) {
    const uint8_t op = in_.u8();
    const int s = op >> 7;
    switch (op % 11) {
      case 0:
        post_recv(s);
        break;
      case 1:
        post_send(s);
        break;
      case 2:
        post_write(s);
        break;
      case 3:
        pump(s, in_.u8() % 32 + 1);
        break;
      case 4:
        for (int k = in_.u8() % 8 + 1; k > 0 && !side_[s].inbox.empty(); --k) {
          Frame f = std::move(side_[s].inbox.front());
          side_[s].inbox.pop_front();
          deliver_frame(s, f);
        }
        break;
      case 5:
        mangle(s);
        break;
      case 6:
        now_ += uint64_t{1} << (in_.u8() % 34);
        TRACE("now %lu ns\n", (unsigned long)now_);
        break;
      case 7:
        forge(s, false);
        break;
      case 8:
        forge(s, true);
        break;
      case 9:
        TRACE("side %d: close\n", s);
        side_[s].flow->close(static_cast<int>(in_.u8() % 3) - 1);
        closed_ = true;
        break;
      case 10:
        exchange();
        break;
    }
    // Poll after some steps only (bit 4 of the step's byte): completions
    // pile up beyond the flow's ring of 3 * queue_depth, which must hold
    // them back and report them later, never drop them.
    if ((op & 0x10) != 0) {
      poll(0);
      poll(1);
    }
  }
  poll(0);
  poll(1);
  if (checked_ && !tainted_ && !closed_ && !side_[0].flow->failed() && !side_[1].flow->failed()) settle();
}

}  // namespace

void run_flow_script(const uint8_t* data, size_t size) {
  if (size == 0) return;
  Script(data, size).run();
}

}  // namespace grex::fuzz
