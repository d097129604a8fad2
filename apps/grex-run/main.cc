// SPDX-License-Identifier: Apache-2.0
// grex-run: command line, the job's in-process rendezvous store, and the hand-off to the Launcher.
#include "jobfile.h"
#include "launcher.h"

#include <grex/bootstrap.h>
#include <grex/probe.h>

#include <CLI/CLI.hpp>
#include <openssl/rand.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <optional>
#include <string>
#include <string_view>
#include <unistd.h>

namespace grex::run {
namespace {

constexpr int kMaxRanks = 1024;          // pipes and store connections cost ~3 fds per rank
constexpr size_t kJobTokenBytes = 32;
constexpr size_t kJobIdBytes = 8;
constexpr const char* kStoreHost = "127.0.0.1";
constexpr const char* kDefaultBackend = "auto";
constexpr int64_t kStatusTimeoutMs = 3000;  // --status waits this long for the ranks' answers

constexpr const char* kUsage =
    "Usage: grex-run -n N [options] [--] PROGRAM [ARGS...]\n"
    "       grex-run --status [--json] [PID]\n"
    "Starts N ranks of PROGRAM on this host with a rendezvous store for them.\n"
    "With --status, asks the running job (this user's; the one grex-run PID\n"
    "leads where several run) what every rank is doing: one line per rank,\n"
    "then the stragglers and the ranks that do not answer (exit 3 if any).\n"
    "\n"
    "  -n, --nproc N          number of ranks to start (1-1024)\n"
    "  --backend NAME         GREX_BACKEND for the ranks (default: inherited, else auto)\n"
    "  --timeout SEC          stop the job after SEC seconds, exit 124 (default: none)\n"
    "  --kill-grace SEC       wait this long after SIGTERM before SIGKILL (default: 5)\n"
    "  --tag-output           prefix each output line with \"[RANK] \" (default)\n"
    "  --no-tag-output        ranks write straight to grex-run's stdout and stderr\n"
    "  -h, --help             print this help\n"
    "  --version              print the version\n"
    "\n"
    "Each rank gets GREX_RANK, GREX_WORLD_SIZE, GREX_LOCAL_RANK, GREX_LOCAL_SIZE,\n"
    "GREX_STORE_ADDR, GREX_STORE_EXTERNAL=1, GREX_JOB_TOKEN, GREX_JOB_ID, GREX_BACKEND\n"
    "and torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,\n"
    "MASTER_PORT (a free port of its own, for torch.distributed's store). Rank 0 keeps grex-run's stdin unless it is a terminal; other\n"
    "ranks read /dev/null.\n"
    "\n"
    "The first rank to fail stops the others (SIGTERM to their process groups,\n"
    "SIGKILL after --kill-grace); SIGINT, SIGTERM and SIGHUP to grex-run are\n"
    "forwarded the same way.\n"
    "Exit status: 0 if every rank exited 0; else the first failing rank's code\n"
    "(128+N if killed by signal N), 124 on --timeout, 127 if PROGRAM cannot be\n"
    "executed, 128+N if grex-run got signal N, 2 for usage errors, 1 if the job\n"
    "could not be set up.\n";

struct Cli {
  LaunchOptions launch;
  std::optional<std::string> backend;
  bool help = false;
  bool version = false;
  bool status = false;
  bool json = false;
  std::vector<std::string> status_args;
};

Result<int> parse_ranks(const std::string& text) {
  int n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || n < 1 || n > kMaxRanks)
    return Error(Errc::kInvalidArgument,
                 "-n needs a number of ranks from 1 to " + std::to_string(kMaxRanks) + ", got '" + text + "'");
  return n;
}

Result<double> parse_seconds(std::string_view option, const std::string& text) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v) || v < 0)
    return Error(Errc::kInvalidArgument, std::string(option) + " needs a number of seconds >= 0, got '" + text + "'");
  return v;
}

/// CLI11's complaint about `opt` in this tool's words, or "" when it is about another option.
std::string option_error(const CLI::Option* opt, std::string_view what) {
  std::string name = opt->get_name();  // CLI11 starts its message with the option's name
  std::string shown = opt->get_snames().empty() ? name : "-" + opt->get_snames().front();  // -n, as in the help
  if (what.starts_with(name + ":")) return shown + " needs a value";
  if (what.starts_with(name.substr(2) + " was given a disallowed flag override")) return name + " takes no value";
  return "";
}

/// Parses argv into cli. Options end at "--" or at the first non-option.
Result<void> parse_args(int argc, char** argv, Cli* cli) {
  CLI::App app("grex-run");
  app.set_help_flag();    // kUsage is the help
  app.prefix_command();   // PROGRAM and its arguments are not grex-run's
  std::string nproc, timeout, kill_grace, backend;
  CLI::Option* help = app.add_flag("-h,--help", cli->help)->disable_flag_override();
  CLI::Option* version = app.add_flag("--version", cli->version)->disable_flag_override();
  const std::vector<CLI::Option*> opts = {
      help,
      version,
      app.add_option("-n,--nproc", nproc)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast),
      app.add_option("--backend", backend)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast),
      app.add_option("--timeout", timeout)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast),
      app.add_option("--kill-grace", kill_grace)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast),
      app.add_flag("--tag-output,!--no-tag-output", cli->launch.tag_output)->disable_flag_override(),
      app.add_flag("--status", cli->status)->disable_flag_override(),
      app.add_flag("--json", cli->json)->disable_flag_override(),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (cli->help || cli->version) return ok();
    for (const CLI::Option* o : opts)
      if (std::string msg = option_error(o, e.what()); !msg.empty()) return Error(Errc::kInvalidArgument, msg);
    return Error(Errc::kInvalidArgument, e.what());
  }
  if (cli->help || cli->version) return ok();
  std::vector<std::string> rest = app.remaining();
  if (cli->status) {
    cli->status_args = rest;
    return ok();
  }
  if (cli->json) return Error(Errc::kInvalidArgument, "--json goes with --status");
  if (!rest.empty() && rest.front() != "--" && rest.front().starts_with("-"))
    return Error(Errc::kInvalidArgument, "unknown option '" + rest.front() + "'");
  if (opts[2]->count() > 0) cli->launch.nprocs = GREX_TRY(parse_ranks(nproc));
  if (opts[3]->count() > 0) {
    if (backend.empty()) return Error(Errc::kInvalidArgument, "--backend needs a name");
    cli->backend = backend;
  }
  if (opts[4]->count() > 0) cli->launch.timeout_s = GREX_TRY(parse_seconds("--timeout", timeout));
  if (opts[5]->count() > 0) cli->launch.kill_grace_s = GREX_TRY(parse_seconds("--kill-grace", kill_grace));
  cli->launch.argv.assign(rest.begin() + (!rest.empty() && rest.front() == "--" ? 1 : 0), rest.end());
  if (opts[2]->count() == 0) return Error(Errc::kInvalidArgument, "-n N (number of ranks) is required");
  if (cli->launch.argv.empty()) return Error(Errc::kInvalidArgument, "no program to run");
  return ok();
}

Result<std::string> random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1)
    return Error(Errc::kSystem, "RAND_bytes failed; is the OpenSSL entropy source available?");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : raw) {
    hex += kHex[c >> 4];
    hex += kHex[c & 0xf];
  }
  return hex;
}

/// Opens /dev/null on any of fds 0-2 that is closed, so pipes never land there.
void ensure_std_fds() {
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) (void)::open("/dev/null", O_RDWR);
}

/// A TCP port free on kStoreHost right now (bound, read back, closed), for
/// torch's own store: MASTER_PORT must not be grex-run's store port, which
/// rank 0's torch.distributed would try to listen on.
Result<uint16_t> free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Error::from_errno("grex-run: socket", errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                   ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0
               ? 0
               : errno;
  ::close(fd);
  if (rc != 0) return Error::from_errno("grex-run: finding a free port for MASTER_PORT", rc);
  return ntohs(a.sin_port);
}

/// The variables every rank shares: store, token, job id, backend.
Result<std::vector<std::string>> job_env(const Cli& cli, const std::string& token,
                                         uint16_t port) {
  std::string addr = std::string(kStoreHost) + ":" + std::to_string(port);
  std::vector<std::string> env = {
      "GREX_JOB_TOKEN=" + token,
      "GREX_JOB_ID=" + GREX_TRY(random_hex(kJobIdBytes)),
      "GREX_STORE_ADDR=" + addr,
      "GREX_STORE_EXTERNAL=1",
      std::string("MASTER_ADDR=") + kStoreHost,
      "MASTER_PORT=" + std::to_string(GREX_TRY(free_port())),
  };
  if (cli.backend) env.push_back("GREX_BACKEND=" + *cli.backend);
  else if (std::getenv("GREX_BACKEND") == nullptr)
    env.push_back(std::string("GREX_BACKEND=") + kDefaultBackend);
  return env;
}

int run_main(int argc, char** argv) {
  ensure_std_fds();
  Cli cli;
  Result<void> parsed = parse_args(argc, argv, &cli);
  if (cli.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cli.version) {
    std::printf("grex-run %s\n", build_info().version.c_str());
    return 0;
  }
  if (!parsed.ok()) {
    std::fprintf(stderr, "grex-run: %s\nTry 'grex-run --help'.\n", parsed.error().cause().c_str());
    return kExitUsage;
  }
  if (cli.status) return print_status(cli.status_args, cli.json, kStatusTimeoutMs);

  // Before the store starts its thread, so that thread inherits the blocked signals.
  Result<std::unique_ptr<Launcher>> launcher = Launcher::create();
  if (!launcher.ok()) {
    std::fprintf(stderr, "%s\n", launcher.error().message().c_str());
    return 1;
  }
  Result<std::string> token = random_hex(kJobTokenBytes);
  if (!token.ok()) {
    std::fprintf(stderr, "grex-run: %s\n", token.error().message().c_str());
    return 1;
  }
  Result<std::unique_ptr<StoreServer>> store = StoreServer::start(kStoreHost, 0, *token);
  if (!store.ok()) {
    std::fprintf(stderr, "grex-run: cannot start the job's store on %s: %s\n", kStoreHost,
                 store.error().message().c_str());
    return 1;
  }
  Result<std::vector<std::string>> env = job_env(cli, *token, (*store)->port());
  if (!env.ok()) {
    std::fprintf(stderr, "grex-run: %s\n", env.error().message().c_str());
    return 1;
  }
  cli.launch.job_env = std::move(*env);
  // For `grex-run --status` from another terminal; the job runs without it where it cannot be written.
  Result<std::string> job_file = publish_job(std::string(kStoreHost) + ":" + std::to_string((*store)->port()), *token);
  if (!job_file.ok())
    std::fprintf(stderr, "grex-run: %s (grex-run --status will not find this job)\n", job_file.error().message().c_str());
  int code = (*launcher)->run(cli.launch);
  if (job_file.ok()) (void)::unlink(job_file->c_str());
  (*store)->stop();
  return code;
}

}  // namespace
}  // namespace grex::run

int main(int argc, char** argv) { return grex::run::run_main(argc, argv); }
