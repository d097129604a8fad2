// SPDX-License-Identifier: Apache-2.0
/// @file transport.h
/// The transport contract every backend (shm, dpdk, verbs, loop) implements.
/// Its test is the conformance suite (tests/integration/conformance, meson
/// suite `conformance`): one source run against every driver.
///
/// A Device is opened by driver name. Two ranks exchange the strings from
/// Device::local_address() (through the bootstrap store) and each calls
/// Device::connect() for the other, which yields an Endpoint. Memory is
/// registered once (MemoryRegion) and reused. The data path posts batches of
/// work requests on an Endpoint and drains Completions from the Device.
///
/// Threads and blocking:
///  - A Device and its Endpoints are driven by one thread at a time; no call
///    is thread-safe against another call on the same Device. Different
///    Devices may be driven by different threads.
///  - Setup calls (open, connect, register_memory, allocate) may block, up to
///    the timeouts in DeviceOptions, and return Result<T>.
///  - Data-path calls (post_*, poll) never block, never allocate, never take
///    a lock, and never throw. A post returns how many requests it accepted;
///    fewer than given means the queue is full (error kOk: poll, then post the
///    rest) or the endpoint cannot take them at all (error set).
///  - Progress happens inside Device::poll(): a backend that moves bytes with
///    the CPU (shm) copies there. A request's buffer belongs to the transport
///    from post until its Completion is returned by poll().
#pragma once

#include <grex/memory.h>
#include <grex/result.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace grex {

/// What a device offers. Fixed after open.
struct Capabilities {
  std::string driver;              ///< "shm", "dpdk", "verbs", "loop"
  std::string device_name;         ///< e.g. "shm", "rxe0", "net_memif0"
  bool send_recv = false;          ///< tagged two-sided messages
  bool write_imm = false;          ///< one-sided write with immediate
  bool gpu_memory = false;         ///< MemoryDomain::kCudaDevice registrations
  bool zero_copy_send = false;     ///< the sender never copies payload
  bool allocate_shared = false;    ///< allocate() returns memory peers read directly
  bool read = false;               ///< one-sided read from a peer's region (post_read)
  bool load_store = false;         ///< Endpoint::map: plain loads and stores into a peer's allocate()d memory
  uint64_t max_message_bytes = 0;  ///< largest single send / write
  uint32_t max_post_batch = 0;     ///< most requests one post call accepts
  uint32_t queue_depth = 0;        ///< outstanding requests per endpoint and direction
  uint64_t link_speed_mbps = 0;    ///< 0 when not meaningful (shm)
  uint32_t mtu_bytes = 0;          ///< 0 when not meaningful (shm)
  /// Registration pins the physical pages (verbs): a registration outlives
  /// free() + malloc() at the same address only by pointing at the old pages,
  /// so callers must not keep registrations of memory they do not own.
  bool registration_pins_pages = false;
};

/// Which source wins where a setting is given both in an options struct
/// (DeviceOptions::params, a CommOptions field) and in its GREX_* environment
/// variable.
enum class Precedence : uint8_t {
  /// The variable (the default): a user retunes a program with variables,
  /// without rebuilding it.
  kEnvironment = 0,
  /// What the program set: a params key that is present, a CommOptions field
  /// changed from its default. The variable of a setting the program left
  /// alone still applies. For tools whose command line must beat the
  /// environment (grex-perf --backend, --cc).
  kOptions = 1,
};

/// Options for Device::open. Driver-specific settings go in `params`
/// ("slots" -> "256"); each driver documents its keys and GREX_* overrides,
/// which win over `params` unless `precedence` is kOptions.
struct DeviceOptions {
  std::string driver = "shm";           ///< backend name
  int rank = 0;                         ///< this process's rank (for names and errors)
  int world_size = 1;                   ///< ranks in the job
  /// This rank's index among the ranks of its host, and their number (-1, 0:
  /// unknown; Communicator::create sets both). A driver setting that is a
  /// list separated by ';' (GREX_DPDK_PORT, GREX_IB_DEV) gives local rank i
  /// its entry i (modulo the list's length): one NIC per local rank, as
  /// NCCL's rails.
  int local_rank = -1;
  int local_size = 0;
  std::string job_id;                   ///< unique per job; namespaces shared resources
  /// 32 bytes of key material only this job's ranks know (Communicator::create
  /// derives it from the job token and job id); drivers key their wire
  /// authentication from it. Empty: derived from job_id alone, which guards
  /// against accidents and other jobs, not against an attacker who reads the id.
  std::string job_key;
  int64_t connect_timeout_ms = 30'000;  ///< connect() gives up after this
  uint32_t queue_depth = 1024;          ///< per endpoint and direction
  std::map<std::string, std::string> params;  ///< driver-specific key=value settings
  Precedence precedence = Precedence::kEnvironment;  ///< params or their GREX_* variables
};

/// DeviceOptions::job_key from the job's secret (its token) and job id
/// (HKDF-SHA256; docs/security.md). Every rank derives the same 32 bytes.
std::string derive_job_key(std::string_view secret, std::string_view job_id);

/// Kind of operation a Completion reports.
enum class Op : uint8_t {
  kSend = 0,         ///< a posted SendRequest finished (buffer reusable)
  kRecv = 1,         ///< a posted RecvRequest was filled
  kWrite = 2,        ///< a posted WriteRequest finished locally
  kRemoteWrite = 3,  ///< a peer's write-with-immediate landed in a local region
  kRead = 4,         ///< a posted ReadRequest finished (the bytes are in the local region)
};

/// Per-operation outcome.
enum class Status : uint8_t {
  kSuccess = 0,
  kTruncated = 1,     ///< the message was longer than the receive buffer (bytes = buffer size)
  kCancelled = 2,     ///< the endpoint was closed first
  kPeerGone = 3,      ///< the peer process or connection died
  kRemoteAccess = 4,  ///< the target rejected the remote key or range
  kLocalError = 5,    ///< the local side failed (bad region, OS error)
  kNotSupported = 6,  ///< the backend cannot do this operation
};

/// Short name of a status ("success", "peer-gone", ...).
std::string_view status_name(Status s) noexcept;

/// One finished operation, returned by Device::poll.
struct Completion {
  uint64_t context = 0;  ///< the request's context (0 for kRemoteWrite)
  uint64_t bytes = 0;    ///< bytes moved (received length for kRecv)
  uint64_t tag = 0;      ///< matched tag (kSend, kRecv)
  int32_t peer = -1;     ///< rank of the endpoint's peer
  uint32_t imm = 0;      ///< immediate value (kRemoteWrite)
  Op op = Op::kSend;
  Status status = Status::kSuccess;
};

/// Whether a request's [offset, offset+length) lies in `region` (an empty
/// range needs no region): drivers check every request with this before use.
inline bool request_in_bounds(const MemoryRegion* region, uint64_t offset, uint64_t length) noexcept {
  return length == 0 || (region != nullptr && region->holds(offset, length));
}

/// Two-sided send: `length` bytes at `offset` in `region`, matched by `tag`.
struct SendRequest {
  const MemoryRegion* region = nullptr;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t tag = 0;
  uint64_t context = 0;
};

/// Receive buffer for a message with `tag`. Messages with equal tags from one
/// peer match receives in the order both were posted.
struct RecvRequest {
  const MemoryRegion* region = nullptr;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t tag = 0;
  uint64_t context = 0;
};

/// One-sided write of local bytes into a peer's advertised region. With
/// `with_imm` the peer's poll() reports an Op::kRemoteWrite carrying `imm`
/// after the bytes are visible; without it the peer is not told.
struct WriteRequest {
  const MemoryRegion* region = nullptr;
  uint64_t offset = 0;
  uint64_t length = 0;
  RemoteRegion remote{};
  uint64_t remote_offset = 0;
  uint32_t imm = 0;
  bool with_imm = true;
  uint64_t context = 0;
  /// Hint: the destination bytes are in no cache and the peer reads them
  /// later, so a driver that copies with the CPU (shm) may use streaming
  /// stores. Leave false when the destination was just read (in place).
  bool cold_destination = false;
};

/// One-sided read of a peer's advertised region into local bytes. The peer
/// is not told; the reader learns of completion from its own poll().
struct ReadRequest {
  const MemoryRegion* region = nullptr;  ///< local destination
  uint64_t offset = 0;
  uint64_t length = 0;
  RemoteRegion remote{};
  uint64_t remote_offset = 0;
  uint64_t context = 0;
};

/// What a post call did: `count` requests accepted (a prefix of the batch).
/// error == kOk with count < size means "queue full; poll and post the rest".
struct PostResult {
  size_t count = 0;
  Errc error = Errc::kOk;
};

/// A connection to one peer rank. Created by Device::connect; must be
/// destroyed before its Device. Not thread-safe (see file comment).
class Endpoint {
 public:
  virtual ~Endpoint() = default;
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  /// The rank at the other end.
  int peer() const noexcept { return peer_; }

  /// Posts sends; never blocks. Default: nothing accepted, kNotSupported.
  virtual PostResult post_send(std::span<const SendRequest> reqs) noexcept;
  /// Posts receive buffers; never blocks. Default: kNotSupported.
  virtual PostResult post_recv(std::span<const RecvRequest> reqs) noexcept;
  /// Posts one-sided writes; never blocks. Default: kNotSupported.
  virtual PostResult post_write(std::span<const WriteRequest> reqs) noexcept;
  /// Posts one-sided reads; never blocks. Default: kNotSupported.
  virtual PostResult post_read(std::span<const ReadRequest> reqs) noexcept;
  /// Where Capabilities::load_store holds: a pointer through which this
  /// process reads and writes the peer's region (one the peer got from
  /// Device::allocate) with plain loads and stores, valid while this endpoint
  /// lives. Caches are coherent and stores become visible to the peer in the
  /// order the CPU makes them (x86-TSO), so a flag stored with release
  /// ordering after data publishes the data. kInvalidArgument for a region
  /// that is not the peer's allocate()d memory, kSystem when mapping fails;
  /// default: kNotSupported.
  virtual Result<void*> map(const RemoteRegion& remote);

  /// The peer is known to be gone (process exit, connection loss).
  virtual bool peer_failed() const noexcept { return false; }
  /// Tells the peer, best effort, that this rank is abandoning the job
  /// because rank `culprit` failed, so the peer can name the root cause.
  virtual void announce_abort(int culprit) noexcept { (void)culprit; }
  /// The rank the peer blamed in its announce_abort(), or -1.
  virtual int peer_abort_culprit() const noexcept { return -1; }
  /// Human-readable description of the peer ("rank 3 (pid 4711)").
  virtual std::string describe_peer() const;

 protected:
  explicit Endpoint(int peer) : peer_(peer) {}
  int peer_;
};

/// An opened backend. Owns memory registrations and the completion queue.
class Device {
 public:
  /// Opens the driver named in `opts.driver` ("shm", "dpdk", "verbs", "loop").
  /// Errors: kNotFound for unknown or not-built drivers (the message lists
  /// those available), driver-specific errors otherwise.
  static Result<std::unique_ptr<Device>> open(const DeviceOptions& opts);
  /// Names of the drivers built into this libgrex.
  static std::vector<std::string> available_drivers();

  virtual ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  /// What this device offers.
  virtual const Capabilities& capabilities() const noexcept = 0;

  /// Opaque address string this rank publishes so peers can connect to it.
  virtual Result<std::string> local_address() = 0;

  /// Connects to `peer`, whose local_address() was `peer_address`. Both ranks
  /// call connect() for each other. Blocks up to connect_timeout_ms.
  virtual Result<std::unique_ptr<Endpoint>> connect(int peer, std::string_view peer_address) = 0;

  /// Registers [addr, addr+length). A range inside an existing registration
  /// returns that one (reference counted); release each call with
  /// deregister_memory. Deregister before freeing the memory.
  Result<MemoryRegion*> register_memory(void* addr, size_t length,
                                        MemoryDomain domain = MemoryDomain::kHost);
  /// Drops one reference taken by register_memory. Every operation posted
  /// on the region must have completed, or its endpoint been destroyed, by
  /// the time the last reference goes: drivers that move bytes in software
  /// (shm, dpdk) read the region through pending operations.
  Result<void> deregister_memory(MemoryRegion* region);

  /// Allocates `length` bytes of registered memory the device serves best
  /// (shm: shareable, so peers copy straight from it). Release with free().
  /// Default: page-aligned host memory registered normally.
  virtual Result<MemoryRegion*> allocate(size_t length);
  /// Releases memory from allocate().
  virtual Result<void> free(MemoryRegion* region);

  /// Makes progress and returns up to out.size() completions. Never blocks.
  virtual size_t poll(std::span<Completion> out) noexcept = 0;
  /// For callers that would otherwise spin on an idle device: blocks up to
  /// `timeout_ns` until the device may have something for poll() (verbs: a
  /// completion-channel event). Call it only after a poll() that returned
  /// nothing, and poll() again after it returns. Returns false at once when
  /// the driver cannot block (the caller sleeps or yields instead).
  virtual bool wait(uint64_t timeout_ns) noexcept {
    (void)timeout_ns;
    return false;
  }

  /// Counters of this device ("bytes_sent", ...), for --stats and tests.
  /// Per-flow values are named "peer.<rank>.<name>" (the flow to that rank).
  virtual std::vector<std::pair<std::string, uint64_t>> counters() const { return {}; }

  /// Number of live registrations (cache entries), for tests.
  size_t registration_count() const noexcept;

 protected:
  Device();
  /// Driver hook: register a range the cache has not seen.
  virtual Result<std::unique_ptr<MemoryRegion>> do_register(void* addr, size_t length,
                                                            MemoryDomain domain) = 0;
  /// Enters a region the driver made itself (allocate()) into the cache, one reference.
  MemoryRegion* adopt_registration(std::unique_ptr<MemoryRegion> region);
  /// Destroys every registration now; drivers call it first in their destructor.
  void release_all_registrations() noexcept;

 private:
  struct Cache;
  std::unique_ptr<Cache> cache_;
};

}  // namespace grex
