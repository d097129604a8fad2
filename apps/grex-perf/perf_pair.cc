// SPDX-License-Identifier: Apache-2.0
// Joining a perftest style run and connecting its flows.
#include "perf_pair.h"

#include <grex/probe.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "perf_format.h"

namespace grex::perf {
namespace {

constexpr size_t kPageBytes = 4096;
constexpr int64_t kClientTimeoutMs = 60'000;
constexpr int64_t kServerWaitMs = 600'000;  // a server waits this long for its client

const char* env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

int64_t env_ms(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long long ms = std::strtoll(v, &end, 10);
  return end != v && *end == '\0' && ms > 0 ? ms : fallback;
}

std::string hex(const void* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<const unsigned char*>(data)[i];
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

Result<RemoteRegion> parse_region(const std::string& text) {
  RemoteRegion r;
  if (text.size() != 2 * sizeof r) return Error(Errc::kProtocol, "grex-perf: malformed peer region '" + text + "'");
  auto* out = reinterpret_cast<unsigned char*>(&r);
  for (size_t i = 0; i < sizeof r; ++i) out[i] = static_cast<unsigned char>(std::stoul(text.substr(2 * i, 2), nullptr, 16));
  return r;
}

}  // namespace

bool launched() noexcept {
  for (const char* v : {"GREX_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

Result<std::unique_ptr<PairJob>> PairJob::connect(const PerfArgs& a, size_t buffer_bytes) {
  std::unique_ptr<PairJob> job(new PairJob());
  job->server_client_ = a.server_client;
  if (a.server_client) {
    // No fixed default: a server without GREX_JOB_TOKEN draws one and prints
    // it with the client's command line (as Jupyter prints its URL).
    const bool server = a.server_host.empty();
    std::string token = env_or("GREX_JOB_TOKEN", "");
    if (token.empty() && !server)
      return Error(Errc::kInvalidArgument, "a grex-perf client needs the server's token")
          .hint("run it as GREX_JOB_TOKEN=<the token the server printed> grex-perf ... " + a.server_host);
    if (token.empty()) {
      std::random_device rd;
      const uint32_t draw[4] = {rd(), rd(), rd(), rd()};
      token = hex(draw, sizeof draw);
    }
    job->token_ = token;
    int64_t timeout = env_ms("GREX_BOOTSTRAP_TIMEOUT_MS", server ? kServerWaitMs : kClientTimeoutMs);
    std::string host = a.server_host;
    if (server) {
      job->server_ = GREX_TRY_CTX(StoreServer::start("0.0.0.0", a.port, token), "grex-perf server");
      host = "127.0.0.1";
      std::fprintf(stderr, "grex-perf: waiting for a client on port %u: GREX_JOB_TOKEN=%s grex-perf %s ... HOST\n",
                   a.port, token.c_str(), std::string(mode_name(a.mode)).c_str());
    }
    std::shared_ptr<Store> store = GREX_TRY_CTX(TcpStore::connect(host, a.port, token, timeout),
                                                server ? "grex-perf server" : "grex-perf client");
    job->bootstrap_ = Bootstrap::with_store(std::move(store), server ? kServer : kClient, 2, timeout);
  } else {
    BootstrapConfig cfg = GREX_TRY(bootstrap_from_env());
    job->token_ = cfg.job_token;
    job->bootstrap_ = GREX_TRY(Bootstrap::create(cfg));
  }
  std::random_device rd;
  const uint32_t nonce[2] = {rd(), rd()};
  auto ids = GREX_TRY_CTX(job->bootstrap_->all_gather("grex-perf/id", hex(nonce, sizeof nonce)), "grex-perf setup");
  const std::string& id = ids[0];
  job->key_prefix_ = "grex-perf/" + id + "/";
  if (job->size() < 2)
    return Error(Errc::kInvalidArgument, std::string(mode_name(a.mode)) + " needs at least 2 ranks, got " +
                                             std::to_string(job->size()))
        .hint("run it as grex-run -n 2 -- grex-perf " + std::string(mode_name(a.mode)) +
              ", or as a server/client pair (see --help)");
  if (job->active()) GREX_TRY(job->open_flows(a, buffer_bytes, id));
  GREX_TRY_CTX(job->barrier("connected"), "grex-perf setup");
  return job;
}

Result<void> PairJob::open_flows(const PerfArgs& a, size_t buffer_bytes, const std::string& job_id) {
  const int peer = client() ? kServer : kClient;
  const size_t bytes = (std::max(buffer_bytes, size_t{1}) + kPageBytes - 1) / kPageBytes * kPageBytes;
  DeviceOptions dopts;
  dopts.driver = effective_backend(a);
  if (dopts.driver == "auto") {  // as a communicator's pair: shm on one host, else the network
    const char* net_var = std::getenv("GREX_NET");
    const std::string net_env = net_var != nullptr && *net_var != '\0' ? net_var : "auto";
    const std::string net = net_env == "auto" ? default_network_backend() : net_env;
    GREX_TRY(put("host/" + std::to_string(rank()), host_identity() + " " + net));
    const std::string theirs = GREX_TRY(take("host/" + std::to_string(peer)));
    const std::string mine = host_identity();
    const size_t sp = theirs.rfind(' ');
    if (theirs.substr(0, sp) == mine)
      dopts.driver = "shm";
    else if (net == "verbs")  // verbs only where both ranks would take it
      dopts.driver = theirs.substr(sp + 1) == "verbs" ? "verbs" : "dpdk";
    else
      dopts.driver = net;
    if (dopts.driver != "shm") dopts.params["cc_default"] = "rttcc";  // as a communicator's flows between hosts
  }
  dopts.rank = rank();
  dopts.world_size = size();
  dopts.connect_timeout_ms = env_ms("GREX_TIMEOUT_MS", kClientTimeoutMs);
  dopts.queue_depth = std::max<uint32_t>(dopts.queue_depth, static_cast<uint32_t>(a.tx_depth));
  dopts.precedence = Precedence::kOptions;  // --cc wins over GREX_CC
  if (std::string cc = effective_cc(a); !cc.empty()) dopts.params["cc"] = cc;
  flows_.resize(static_cast<size_t>(a.flows));
  for (size_t f = 0; f < flows_.size(); ++f) {
    PairFlow& fl = flows_[f];
    const std::string flow = "flow " + std::to_string(f);
    dopts.job_id = job_id + "-q" + std::to_string(f);
    dopts.job_key = derive_job_key(token_, dopts.job_id);
    fl.device = GREX_TRY_CTX(Device::open(dopts), "grex-perf " + flow);
    std::string addr = GREX_TRY(fl.device->local_address());
    const std::string key = "addr/" + std::to_string(f) + "/";
    GREX_TRY(put(key + std::to_string(rank()), addr));
    std::string peer_addr = GREX_TRY(take(key + std::to_string(peer)));
    fl.endpoint = GREX_TRY_CTX(fl.device->connect(peer, peer_addr), "grex-perf " + flow);
    if (a.shared_buffers) {
      fl.region = GREX_TRY_CTX(fl.device->allocate(bytes), "grex-perf --alloc buffer");
      fl.allocated = true;
      fl.buffer = fl.region->addr();
    } else {
      fl.buffer = std::aligned_alloc(kPageBytes, bytes);
      if (fl.buffer == nullptr)
        return Error(Errc::kNoMemory, "grex-perf: cannot allocate " + std::to_string(bytes) + " bytes")
            .hint("use a smaller -s / -e");
      std::memset(fl.buffer, 0, bytes);  // fault the pages in before timing
      fl.region = GREX_TRY_CTX(fl.device->register_memory(fl.buffer, bytes), "grex-perf buffer");
    }
    std::memset(fl.region->addr(), 0, bytes);
    RemoteRegion mine = fl.region->remote();
    const std::string rkey = "region/" + std::to_string(f) + "/";
    GREX_TRY(put(rkey + std::to_string(rank()), hex(&mine, sizeof mine)));
    fl.peer_region = GREX_TRY(parse_region(GREX_TRY(take(rkey + std::to_string(peer)))));
  }
  caps_ = flows_.front().device->capabilities();
  return ok();
}

PairJob::~PairJob() {
  for (PairFlow& fl : flows_) {
    fl.endpoint.reset();
    if (fl.device && fl.region != nullptr) {
      if (fl.allocated) (void)fl.device->free(fl.region);
      else (void)fl.device->deregister_memory(fl.region);
    }
    std::free(fl.allocated ? nullptr : fl.buffer);
    fl.device.reset();
  }
  if (server_client_ && bootstrap_) {
    // The client says goodbye last, so the server's store outlives its final request.
    if (client()) (void)put("bye", "1");
    else (void)take("bye");
  }
  bootstrap_.reset();
  server_.reset();
}

Result<void> PairJob::put(std::string_view key, std::string_view value) {
  return bootstrap_->store().set(key_prefix_ + std::string(key), value);
}

Result<std::string> PairJob::take(std::string_view key) {
  return bootstrap_->store().get(key_prefix_ + std::string(key), bootstrap_->timeout_ms());
}

Result<void> PairJob::barrier(std::string_view name) { return bootstrap_->barrier("grex-perf/" + std::string(name)); }

void PairJob::print(const std::string& text) const {
  if (!prints()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

std::string PairJob::counter_lines() const {
  std::string out;
  for (size_t f = 0; f < flows_.size(); ++f)
    out += stats_lines("rank " + std::to_string(rank()) + " flow " + std::to_string(f) + " (" + caps_.driver + " " +
                           caps_.device_name + ")",
                       flows_[f].device->counters());
  return out;
}

}  // namespace grex::perf
