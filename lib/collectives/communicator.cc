// SPDX-License-Identifier: Apache-2.0
// Communicator setup (device, endpoints to every peer), argument checks; point-to-point calls are in p2p.cc.
#include <openssl/err.h>
#include <openssl/rand.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

#include <grex/probe.h>

#include "collectives/comm_impl.h"
#include "collectives/jobs.h"
#include "collectives/placement.h"
#include "collectives/reduce.h"
#include "core/config.h"
#include "core/host.h"
#include "core/log.h"
#include "transport/hybrid.h"

namespace grex {

using detail::bad_arg;

namespace {

constexpr const char* kSubsys = "comm";
constexpr const char* kInit = "init";  // setup lines (GREX_LOG_SUBSYS=INIT)

// `bytes` random bytes as hex; an error when OpenSSL has no entropy (the id
// would repeat, and two jobs could share shared-memory names).
Result<std::string> random_hex(size_t bytes) {
  unsigned char buf[32];
  if (bytes > sizeof buf) return Error(Errc::kInternal, "random_hex: " + std::to_string(bytes) + " bytes asked");
  if (RAND_bytes(buf, static_cast<int>(bytes)) != 1) {
    char why[256] = "no OpenSSL error queued";
    if (unsigned long e = ERR_get_error(); e != 0) ERR_error_string_n(e, why, sizeof why);
    return Error(Errc::kSystem, std::string("RAND_bytes failed to make the communicator id: ") + why)
        .hint("is the OpenSSL entropy source (getrandom, /dev/urandom) available to this process?");
  }
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < bytes; ++i) {
    s += kHex[buf[i] >> 4];
    s += kHex[buf[i] & 15];
  }
  return s;
}

std::string sanitize(std::string_view name) {
  std::string s;
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  return s.substr(0, 40);
}

// Ranks that spin while they wait must not share a CPU: two on one take
// turns at the scheduler's pace, microseconds per step instead of
// nanoseconds. Bootstrap's waits end in wake-ups, and the scheduler likes to
// wake a task next to its waker, so local ranks often leave create() on one
// CPU, and the load balancer can take milliseconds to part them (a short
// 2-rank job measured 7 us per allreduce instead of 0.4 in 1 run of 4). So,
// before the calibration and again last thing in create() (both follow store
// exchanges), each local rank moves to CPU local_index of its mask, then gets
// the whole mask back: the kernel leaves a running task where
// it is. A starting place, not a binding. With more ranks than cores the
// same modulo the CPU count gives each CPU its share: 4 ranks that start 3
// and 1 took 2.3-2.6 us per small allreduce instead of 1.6-1.8 (4 runs of 12).
void spread_local_rank(int local_index, const cpu_set_t& mask) noexcept {
  std::vector<int> allowed;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mask)) allowed.push_back(cpu);
  if (allowed.size() < 2) return;
  const int target = allowed[static_cast<size_t>(local_index) % allowed.size()];
  if (sched_getcpu() == target) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(target, &one);
  if (sched_setaffinity(0, sizeof one, &one) == 0) (void)sched_setaffinity(0, sizeof mask, &mask);
}

Result<void> apply_env(CommOptions* o) {
  // Precedence::kOptions: a field the caller changed from its default is not read from its variable.
  const CommOptions def;
  const bool env_wins = o->precedence == Precedence::kEnvironment;
  auto from_env = [&](auto field) { return env_wins || o->*field == def.*field; };
  if (!env_wins) o->device.precedence = Precedence::kOptions;
  const bool backend_from_env = from_env(&CommOptions::backend);
  if (o->backend.empty()) o->backend = "auto";
  if (backend_from_env) GREX_TRY(config::env_string("GREX_BACKEND", &o->backend));
  if (from_env(&CommOptions::net)) GREX_TRY(config::env_string("GREX_NET", &o->net));
  // loop: in-process ranks (threads) only, for tests of the hybrid device.
  if (o->net != "auto" && o->net != "dpdk" && o->net != "verbs" && o->net != "loop")
    return Error(Errc::kInvalidArgument, "network backend '" + o->net + "' is not one of auto, dpdk, verbs")
        .hint("GREX_NET=auto|dpdk|verbs");
  if (from_env(&CommOptions::host_id)) GREX_TRY(config::env_string("GREX_HOST_ID", &o->host_id));
  if (from_env(&CommOptions::timeout_ms))
    GREX_TRY(config::env_int("GREX_TIMEOUT_MS", &o->timeout_ms, 1, INT64_MAX / 1'000'000));
  uint64_t chunk = o->chunk_bytes;
  if (from_env(&CommOptions::chunk_bytes)) GREX_TRY(config::env_size("GREX_CHUNK_BYTES", &chunk, 4096, 1ull << 30));
  o->chunk_bytes = chunk;
  if (from_env(&CommOptions::name)) GREX_TRY(config::env_string("GREX_COMM_NAME", &o->name));
  if (from_env(&CommOptions::progress)) GREX_TRY(config::env_string("GREX_PROGRESS", &o->progress));
  if (from_env(&CommOptions::spread)) GREX_TRY(config::env_bool("GREX_SPREAD", &o->spread));
  if (from_env(&CommOptions::any_source)) GREX_TRY(config::env_bool("GREX_P2P_ANY_SOURCE", &o->any_source));
  if (from_env(&CommOptions::warn_after_ms))
    GREX_TRY(config::env_int("GREX_WARN_AFTER_MS", &o->warn_after_ms, -1, INT64_MAX / 1'000'000));
  uint64_t trace = o->trace_entries;
  if (from_env(&CommOptions::trace_entries)) GREX_TRY(config::env_size("GREX_TRACE_ENTRIES", &trace, 0, 1u << 24));
  o->trace_entries = trace;
  if (from_env(&CommOptions::stage_sends)) GREX_TRY(config::env_string("GREX_STAGE_SENDS", &o->stage_sends));
  uint64_t stage_min = o->stage_min_bytes;
  if (from_env(&CommOptions::stage_min_bytes))
    GREX_TRY(config::env_size("GREX_STAGE_MIN_BYTES", &stage_min, 0, UINT64_MAX / 2));
  o->stage_min_bytes = stage_min;
  uint64_t flat_max = o->flat_max_bytes;
  if (from_env(&CommOptions::flat_max_bytes))
    GREX_TRY(config::env_size("GREX_FLAT_MAX_BYTES", &flat_max, 0, 16u << 20));
  o->flat_max_bytes = flat_max;
  if (o->stage_sends != "auto" && o->stage_sends != "always" && o->stage_sends != "never")
    return Error(Errc::kInvalidArgument, "stage mode '" + o->stage_sends + "' is not one of auto, always, never")
        .hint("GREX_STAGE_SENDS=auto|always|never");
  if (from_env(&CommOptions::algo)) GREX_TRY(config::env_string("GREX_ALGO", &o->algo));
  if (from_env(&CommOptions::cost)) GREX_TRY(config::env_string("GREX_COST", &o->cost));
  if (from_env(&CommOptions::alltoallv)) GREX_TRY(config::env_string("GREX_ALLTOALLV", &o->alltoallv));
  if (o->alltoallv != "auto" && o->alltoallv != "pairwise" && o->alltoallv != "hierarchical")
    return Error(Errc::kInvalidArgument, "alltoallv mode '" + o->alltoallv + "' is not one of auto, pairwise, hierarchical")
        .hint("GREX_ALLTOALLV=auto|pairwise|hierarchical");
  if (from_env(&CommOptions::topk)) GREX_TRY(config::env_string("GREX_TOPK", &o->topk));
  if (o->topk != "auto" && o->topk != "flat" && o->topk != "hierarchical")
    return Error(Errc::kInvalidArgument, "top-k mode '" + o->topk + "' is not one of auto, flat, hierarchical")
        .hint("GREX_TOPK=auto|flat|hierarchical");
  if (o->algo != "auto" && !detail::parse_algo(o->algo))
    return Error(Errc::kInvalidArgument, "allreduce algorithm '" + o->algo + "' is unknown")
        .hint("GREX_ALGO=auto|ring|rabenseifner|recursive_doubling|tree|direct|flat|hierarchical");
  if (o->cost != "measure") {
    const size_t semi = o->cost.find(';');
    GREX_TRY(detail::CostModel::parse(o->cost.substr(0, semi)));
    if (semi != std::string::npos) GREX_TRY(detail::CostModel::parse(o->cost.substr(semi + 1)));
  }
  if (o->progress != "auto" && o->progress != "spin" && o->progress != "adaptive")
    return Error(Errc::kInvalidArgument, "progress mode '" + o->progress + "' is not one of auto, spin, adaptive")
        .hint("GREX_PROGRESS=auto|spin|adaptive");
  return ok();
}

}  // namespace

size_t dtype_size(DataType t) noexcept {
  switch (t) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kUint8: return 1;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
  }
  return 0;
}

std::string_view dtype_name(DataType t) noexcept {
  switch (t) {
    case DataType::kFloat32: return "f32";
    case DataType::kFloat64: return "f64";
    case DataType::kInt32: return "i32";
    case DataType::kInt64: return "i64";
    case DataType::kUint8: return "u8";
    case DataType::kFloat16: return "f16";
    case DataType::kBFloat16: return "bf16";
  }
  return "?";
}

std::string_view reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
  }
  return "?";
}

namespace {
constexpr std::pair<Compression, std::string_view> kCompressions[] = {{Compression::kNone, "none"},
                                                                     {Compression::kBf16, "bf16"},
                                                                     {Compression::kFp16, "fp16"},
                                                                     {Compression::kInt8, "int8"},
                                                                     {Compression::kTopK, "topk"}};
}  // namespace

std::string_view compression_name(Compression c) noexcept {
  for (const auto& [k, name] : kCompressions)
    if (k == c) return name;
  return "?";
}

std::optional<Compression> compression_from_name(std::string_view name) noexcept {
  for (const auto& [k, n] : kCompressions)
    if (n == name) return k;
  return std::nullopt;
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::~Communicator() {
  if (!impl_) return;
  impl_->status.reset();  // answers no more (the recorder stays until the Impl goes)
  impl_->queue.stop();
  // Endpoints first: closing one still makes progress on its flow, and after a
  // failed collective that flow may hold operations on the registrations and
  // buffers released below (a DPDK flow matched a send against a freed region).
  impl_->endpoints.clear();
  for (auto& d : impl_->deliveries) (void)impl_->device->free(d.copy);
  for (MemoryRegion* r : impl_->spare_copies) (void)impl_->device->free(r);
  if (impl_->hier) {
    for (auto* b : {&impl_->hier->pack, &impl_->hier->mid})
      if (b->mr != nullptr) (void)impl_->device->free(b->mr);
    if (impl_->hier->area && impl_->hier->area->region != nullptr) (void)impl_->device->free(impl_->hier->area->region);
    impl_->hier->area.reset();
  }
  impl_->bufs.reset();
  if (impl_->area && impl_->area->region != nullptr) (void)impl_->device->free(impl_->area->region);
  impl_->area.reset();
}

Result<std::unique_ptr<Communicator>> Communicator::from_env(CommOptions opts) {
  BootstrapConfig cfg = GREX_TRY(bootstrap_from_env());
  std::shared_ptr<Bootstrap> bs = GREX_TRY(Bootstrap::create(cfg));
  return create(std::move(bs), std::move(opts));
}

Result<std::unique_ptr<Communicator>> Communicator::create(std::shared_ptr<Bootstrap> bootstrap, CommOptions opts) {
  if (!bootstrap) return Error(Errc::kInvalidArgument, "Communicator::create: null bootstrap");
  auto impl = std::make_unique<Impl>();
  Impl& c = *impl;
  c.rank = bootstrap->rank();
  c.size = bootstrap->world_size();
  log::set_rank_if_unset(c.rank);  // a launcher's bootstrap set the world rank already
  GREX_TRY(apply_env(&opts));
  c.opts = opts;
  c.bootstrap = std::move(bootstrap);
  const std::string prefix = c.opts.name;

  // Every rank sends "<random id> <machine id> <host id>": rank 0's id names
  // this communicator's shared resources; the others place the ranks.
  const std::string my_id = GREX_TRY_CTX(random_hex(8), "communicator setup");
  std::string host_name = c.opts.host_id.empty() ? host_id() : c.opts.host_id;
  for (char& ch : host_name)
    if (std::isspace(static_cast<unsigned char>(ch))) ch = '_';  // the record is space-separated
  // "<random id> <machine id> <backend>/<net> <host id>": every rank must
  // choose the drivers alike, so a job whose ranks were given different
  // GREX_BACKEND or GREX_NET fails here, naming one.
  // The same record carries any_source, which every rank must share too.
  const std::string choice_of_drivers =
      c.opts.backend + "/" + c.opts.net + (c.opts.any_source ? "+any-source" : "");
  auto ids = GREX_TRY_CTX(c.bootstrap->all_gather(prefix + "/id", my_id + " " + machine_id() + " " + choice_of_drivers +
                                                                      " " + host_name),
                          "communicator setup");
  std::vector<std::string> machines(ids.size()), hosts(ids.size());
  for (size_t r = 0; r < ids.size(); ++r) {
    const size_t a = ids[r].find(' '), b = a == std::string::npos ? a : ids[r].find(' ', a + 1),
                 d = b == std::string::npos ? b : ids[r].find(' ', b + 1);
    if (d == std::string::npos) return Error(Errc::kProtocol, "communicator setup: bad id record '" + ids[r] + "'");
    machines[r] = ids[r].substr(a + 1, b - a - 1);
    if (const std::string theirs = ids[r].substr(b + 1, d - b - 1); theirs != choice_of_drivers)
      return Error(Errc::kMismatch, "communicator setup: rank " + std::to_string(r) +
                                        " runs GREX_BACKEND/GREX_NET[+GREX_P2P_ANY_SOURCE] " + theirs + ", this rank " +
                                        choice_of_drivers)
          .rank(c.rank)
          .peer(static_cast<int>(r))
          .hint("give every rank the same GREX_BACKEND, GREX_NET and GREX_P2P_ANY_SOURCE");
    hosts[r] = ids[r].substr(d + 1);
  }
  const detail::Placement where = detail::place(machines, hosts, c.rank);
  const int nhosts = static_cast<int>(where.hosts.size());
  const auto& my_host = where.hosts[static_cast<size_t>(where.host_of[static_cast<size_t>(c.rank)])];
  const int local = static_cast<int>(my_host.size());
  const int local_index = where.local_of[static_cast<size_t>(c.rank)];
  size_t widest = 0;
  for (const auto& h : where.hosts) widest = std::max(widest, h.size());

  // The drivers: "auto" is shm on one host, the network between hosts, both
  // where hosts hold several ranks.
  std::string net = c.opts.net;
  if (c.opts.backend == "auto" && nhosts > 1 && net == "auto") {
    auto votes = GREX_TRY_CTX(c.bootstrap->all_gather(prefix + "/rdma", default_network_backend() == "verbs" ? "1" : "0"),
                              "communicator setup");
    net = std::all_of(votes.begin(), votes.end(), [](const std::string& v) { return v == "1"; }) ? "verbs" : "dpdk";
  }
  std::vector<std::string> drivers;  // parts; one: a single device
  if (c.opts.backend != "auto")
    drivers = {c.opts.backend};
  else if (nhosts == 1)
    drivers = {"shm"};
  else if (widest == 1)
    drivers = {net};
  else
    drivers = {"shm", net};

  DeviceOptions dopts = c.opts.device;
  if (!c.opts.cc.empty() && dopts.params.count("cc") == 0) dopts.params["cc"] = c.opts.cc;
  dopts.rank = c.rank;
  dopts.world_size = c.size;
  dopts.local_rank = local_index;
  dopts.local_size = local;
  dopts.job_id = ids[0].substr(0, ids[0].find(' ')) + "-" + sanitize(prefix);
  if (dopts.connect_timeout_ms == DeviceOptions{}.connect_timeout_ms) dopts.connect_timeout_ms = c.opts.timeout_ms;
  // The drivers' wire keys come from the job token, salted by this
  // communicator's id. A job on a store that knows no token (torch's) has rank
  // 0 draw a secret and share it through that store: as safe as the store.
  if (dopts.job_key.empty()) {
    std::string secret = c.bootstrap->job_token();
    if (secret.empty()) {
      const std::string drawn = c.rank == 0 ? GREX_TRY_CTX(random_hex(32), "communicator setup") : std::string();
      auto all = GREX_TRY_CTX(c.bootstrap->all_gather(prefix + "/secret", drawn), "communicator setup");
      secret = all[0];
    }
    dopts.job_key = derive_job_key(secret, dopts.job_id);
    if (dopts.job_key.empty()) return Error(Errc::kInternal, "communicator setup: cannot derive the job key (libcrypto)");
  }
  auto open_part = [&](const std::string& driver) -> Result<std::unique_ptr<Device>> {
    DeviceOptions o = dopts;
    o.driver = driver;
    // RTTCC on flows between hosts unless the job names a controller (the
    // driver applies "cc_default" only where neither "cc" nor GREX_CC is set;
    // verbs not on Soft-RoCE, whose RTTs are its scheduling).
    if (nhosts > 1 && driver != "shm") o.params["cc_default"] = "rttcc";
    return Device::open(o);
  };
  if (drivers.size() == 1) {
    c.device = GREX_TRY(open_part(drivers[0]));
  } else {
    std::vector<std::unique_ptr<Device>> parts;
    for (const auto& d : drivers) parts.push_back(GREX_TRY(open_part(d)));
    std::vector<int> route(static_cast<size_t>(c.size));
    for (int p = 0; p < c.size; ++p)
      route[static_cast<size_t>(p)] = where.host_of[static_cast<size_t>(p)] == where.host_of[static_cast<size_t>(c.rank)] ? 0 : 1;
    c.device = GREX_TRY(detail::HybridDevice::create(std::move(parts), std::move(route), c.rank));
  }

  std::string addr = GREX_TRY(c.device->local_address());
  auto addrs = GREX_TRY_CTX(c.bootstrap->all_gather(prefix + "/addr", addr), "communicator setup");
  c.endpoints.resize(static_cast<size_t>(c.size));
  // One driver after the other, each in rank order: every rank meets its
  // peers of a driver in the same order, as with one device. (Interleaved,
  // a rank blocked in shm's connect to a local peer left a remote peer's
  // dpdk handshake unanswered, and that peer in turn its local one.)
  auto* hybrid = dynamic_cast<detail::HybridDevice*>(c.device.get());
  const int nparts = hybrid != nullptr ? static_cast<int>(hybrid->part_count()) : 1;
  for (int part = 0; part < nparts; ++part)
    for (int p = 0; p < c.size; ++p) {
      if (p == c.rank || (hybrid != nullptr && hybrid->route(p) != part)) continue;
      c.endpoints[static_cast<size_t>(p)] = GREX_TRY(c.device->connect(p, addrs[static_cast<size_t>(p)]));
    }
  GREX_TRY_CTX(detail::connected_barrier(*c.bootstrap, *c.device, prefix + "/connected/" + ids[0].substr(0, ids[0].find(' ')),
                                 c.rank, c.size, c.opts.timeout_ms),
               "communicator setup");
  c.engine = std::make_unique<detail::Engine>(c.device.get(), &c.endpoints, c.rank);
  c.engine->set_timeout_ms(c.opts.timeout_ms);
  c.engine->set_warn_after_ms(c.opts.warn_after_ms < 0 ? c.opts.timeout_ms / 10 : c.opts.warn_after_ms);
  if (nhosts > 1) {
    std::vector<uint8_t> remote(static_cast<size_t>(c.size));
    for (size_t p = 0; p < remote.size(); ++p)
      remote[p] = where.host_of[p] != where.host_of[static_cast<size_t>(c.rank)] ? 1 : 0;
    c.engine->set_remote(std::move(remote));
  }
  c.bufs = std::make_unique<detail::Buffers>(*c.device);
  if (c.opts.trace_entries > 0) {
    c.recorder = std::make_unique<detail::Recorder>(c.opts.trace_entries, c.rank, prefix);
    c.engine->set_recorder(c.recorder.get());
    c.status = detail::StatusService::Membership(
        detail::StatusService::join(c.bootstrap, prefix, c.rank, c.size, c.recorder.get()), c.recorder.get());
    if (c.status)
      c.engine->set_long_wait([&c](const char* what, int64_t waited_ms, const std::vector<int>& peers) {
        return c.long_wait(what, waited_ms, peers);
      });
  }
  c.queue.set_background([&c] { return poll_deliveries(c); });
  if (c.opts.any_source) {
    c.notices = std::make_unique<detail::Notices>();
    GREX_TRY_CTX(c.notices->start(*c.device, *c.engine, c.rank, c.size), "communicator setup (notices)");
  }
  c.world.emplace(detail::Group::world(*c.engine, c.rank, c.size));
  c.ctx.device = c.device.get();
  c.ctx.bufs = c.bufs.get();
  c.ctx.opts = &c.opts;
  c.ctx.rank = c.rank;
  cpu_set_t cpus;
  int cores = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  // Ranks of one machine share its cores, whatever their network namespaces.
  bool adaptive = c.opts.progress == "adaptive" || (c.opts.progress == "auto" && where.machine_local > cores);
  c.engine->set_adaptive(adaptive);
  c.ctx.stage = c.opts.stage_sends == "always"  ? detail::Stage::kAlways
                : c.opts.stage_sends == "never" ? detail::Stage::kNever
                                                : detail::Stage::kAuto;
  if (c.opts.algo != "auto") c.select.forced = detail::parse_algo(c.opts.algo);

  const std::string intra = drivers[0], inter = drivers.back();
  if (nhosts > 1 && widest > 1) {
    // The levels: this host's ranks, and this rank's rail.
    auto h = std::make_unique<detail::Hierarchy>();
    h->host_of = where.host_of;
    h->local_of = where.local_of;
    h->hosts = where.hosts;
    h->rails = static_cast<int>(widest);
    for (const auto& hs : where.hosts) h->rails = std::min(h->rails, static_cast<int>(hs.size()));
    h->intra = intra;
    h->inter = inter;
    h->local.caps = hybrid != nullptr ? hybrid->part(0).capabilities() : c.device->capabilities();
    h->rail.caps = hybrid != nullptr ? hybrid->part(1).capabilities() : c.device->capabilities();
    if (hybrid != nullptr) {  // a region's remote() is shm's (hybrid.h)
      h->rail.caps.read = h->rail.caps.write_imm = h->rail.caps.load_store = h->rail.caps.allocate_shared = false;
    }
    std::vector<int> rail;
    int me_in_rail = 0;
    for (const auto& hs : where.hosts)
      if (static_cast<int>(hs.size()) > local_index) {
        if (hs[static_cast<size_t>(local_index)] == c.rank) me_in_rail = static_cast<int>(rail.size());
        rail.push_back(hs[static_cast<size_t>(local_index)]);
      }
    h->local.group.emplace(*c.engine, my_host, local_index);
    h->rail.group.emplace(*c.engine, std::move(rail), me_in_rail);
    for (detail::Level* l : {&h->local, &h->rail}) {
      l->ctx = c.ctx;
      l->ctx.caps = &l->caps;
    }
    c.hier = std::move(h);
    c.ctx.hier = c.hier.get();
  }
  GREX_TRY_CTX(detail::setup_shared_area(c.ctx, *c.world, local == c.size, *c.bootstrap, prefix + "/flat", &c.area),
               "communicator setup (flat allreduce)");
  c.ctx.area = c.area.get();
  if (c.hier) {
    GREX_TRY_CTX(detail::setup_shared_area(c.hier->local.ctx, *c.hier->local.group, true, *c.bootstrap,
                                           prefix + "/local", &c.hier->area, true),
                 "communicator setup (shared slots inside the host)");
    c.hier->local.ctx.area = c.hier->area.get();
  }
  c.barrier_algo = &detail::first_usable(detail::Coll::kBarrier, c.ctx, *c.world, detail::CollArgs{});
  if (c.opts.cost != "measure") {
    // "INTRA;INTER": a level each (the world's flat algorithms take INTER); one: both.
    const size_t semi = c.opts.cost.find(';');
    const detail::CostModel intra_cost = GREX_TRY(detail::CostModel::parse(c.opts.cost.substr(0, semi)));
    const detail::CostModel inter_cost =
        semi == std::string::npos ? intra_cost : GREX_TRY(detail::CostModel::parse(c.opts.cost.substr(semi + 1)));
    c.select.cost = nhosts > 1 ? inter_cost : intra_cost;
    if (c.hier) {
      c.hier->local.select.cost = intra_cost;
      c.hier->rail.select.cost = inter_cost;
      c.hier->world_cost = inter_cost;
    }
  } else if (c.size > 1) {
    // Calibrate spread out too: two ranks left on one CPU by the store's
    // wake-ups ping-pong at the scheduler's pace (alpha 6.2 instead of
    // 0.5 us in 3 of 15 runs, which moved direct's start from 256 KiB to
    // 2 MiB). The calibration ends with a store exchange, so spread again below.
    if (where.machine_local > 1 && c.opts.spread) spread_local_rank(where.machine_index, cpus);
    GREX_TRY_CTX(c.calibrate(), "communicator setup (cost-model calibration)");
  }
  std::string choice;
  if (c.select.forced) {
    choice = detail::algo_name(*c.select.forced);
  } else {  // the model's picks by size: "recursive_doubling from 1 B, direct from 64 KiB"
    const char* last = nullptr;
    for (size_t b = 1; b <= (size_t{1} << 30); b *= 2) {
      const char* a = detail::algo_name(c.allreduce_algo(b));
      if (last != nullptr && std::strcmp(a, last) == 0) continue;
      char from[32];
      std::snprintf(from, sizeof from, b >= 1024 * 1024 ? "%zu MiB" : b >= 1024 ? "%zu KiB" : "%zu B",
                    b >= 1024 * 1024 ? b >> 20 : b >= 1024 ? b >> 10 : b);
      choice += std::string(choice.empty() ? "" : ", ") + a + " from " + from;
      last = a;
    }
  }
  if (nhosts == 1) {
    c.topology = "1 host, " + intra;
  } else {
    c.topology = std::to_string(nhosts) + " hosts (" + detail::describe_hosts(where.hosts) + "), ";
    if (drivers.size() > 1)
      c.topology += "intra-host " + intra + ", inter-host " + inter;
    else
      c.topology += inter + " between every pair";
    if (c.hier) c.topology += ", " + std::to_string(c.hier->rails) + (c.hier->rails == 1 ? " rail" : " rails");
  }
  if (c.hier) {
    GREX_INFO(kInit, "cost model: GREX_COST=%s;%s (intra-host;inter-host: alpha us, beta GB/s, gamma GB/s)",
              c.hier->local.select.cost.describe().c_str(), c.hier->rail.select.cost.describe().c_str());
  } else {
    GREX_INFO(kInit, "cost model: GREX_COST=%s (alpha us, beta GB/s, gamma GB/s)", c.select.cost.describe().c_str());
  }
  std::string others;  // the other collectives' algorithms (the first usable entry: size does not change it)
  for (detail::Coll k : {detail::Coll::kReduceScatter, detail::Coll::kAllgather, detail::Coll::kBroadcast,
                         detail::Coll::kReduce, detail::Coll::kAlltoall}) {
    const detail::CollArgs probe{nullptr, nullptr, 1, DataType::kFloat32, ReduceOp::kSum, 0, 0};
    others += std::string(others.empty() ? "" : ", ") + detail::coll_name(k) + " " +
              detail::first_usable(k, c.ctx, *c.world, probe).name;
  }
  if (c.rank == 0)
    GREX_INFO(kInit, "topology: %s; allreduce: %s; %s", c.topology.c_str(), choice.c_str(), others.c_str());
  GREX_DEBUG(kInit, "%d ranks on this machine, %d cores: %s progress", where.machine_local, cores,
             adaptive ? "adaptive" : "spin");
  if (where.machine_local > 1 && c.opts.spread) spread_local_rank(where.machine_index, cpus);
  GREX_INFO(kInit, "communicator '%s' ready: %d ranks over %s", prefix.c_str(), c.size,
            c.device->capabilities().driver.c_str());
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

int Communicator::rank() const noexcept { return impl_->rank; }
int Communicator::size() const noexcept { return impl_->size; }
Device& Communicator::device() noexcept { return *impl_->device; }
const CommStats& Communicator::stats() const noexcept {
  // Written by whichever thread runs the collectives; read here from the caller's.
  impl_->stats.collectives = impl_->collectives_done.get();
  impl_->stats.bytes_sent = impl_->engine->posted_bytes();
  impl_->stats.bytes_inter_host = impl_->engine->remote_bytes();
  impl_->stats.wait_ns = impl_->engine->wait_ns();
  impl_->stats.gpu_direct = impl_->gpu_direct_calls;
  impl_->stats.gpu_staged = impl_->gpu_staged_calls;
  return impl_->stats;
}
const CommOptions& Communicator::options() const noexcept { return impl_->opts; }
std::string Communicator::topology() const { return impl_->topology; }

std::string Communicator::trace_json() const { return impl_->recorder ? impl_->recorder->json() : ""; }
void Communicator::set_recording(bool on) noexcept {
  if (impl_->recorder) impl_->recorder->set_paused(!on);
}

Result<void> Communicator::Impl::check_p2p(const char* what, const void* buf, size_t bytes, int peer) const {
  if (peer < 0 || peer >= size || peer == rank)
    return bad_arg(rank, what, "peer " + std::to_string(peer) + " is not another rank of 0.." + std::to_string(size - 1));
  if (buf == nullptr && bytes > 0) return bad_arg(rank, what, "null buffer");
  return ok();
}

// Device setup calls (allocate, register, free) go through run(), like a
// collective: inline when nothing is queued, else after the *_async work
// ahead of them, on the worker that owns the device meanwhile (transport.h:
// one thread drives a Device at a time). The collectives' path is unchanged.
Result<void*> Communicator::alloc(size_t bytes) {
  Impl& c = *impl_;
  void* p = nullptr;
  GREX_TRY(c.run([&]() -> Result<void> {
    p = GREX_TRY(c.bufs->alloc(bytes));
    return ok();
  }));
  return p;
}

Result<void> Communicator::free(void* ptr) {
  Impl& c = *impl_;
  return c.run([&]() -> Result<void> {
    if (!GREX_TRY(c.bufs->free(ptr)))
      return Error(Errc::kInvalidArgument, "free: pointer was not returned by Communicator::alloc").rank(c.rank);
    return ok();
  });
}

Result<MemoryRegion*> Communicator::register_memory(void* addr, size_t bytes, MemoryDomain domain) {
  Impl& c = *impl_;
  MemoryRegion* mr = nullptr;
  GREX_TRY(c.run([&]() -> Result<void> {
    mr = GREX_TRY(c.device->register_memory(addr, bytes, domain));
    return ok();
  }));
  return mr;
}

Result<void> Communicator::deregister_memory(MemoryRegion* region) {
  Impl& c = *impl_;
  return c.run([&]() -> Result<void> { return c.device->deregister_memory(region); });
}

}  // namespace grex
