// SPDX-License-Identifier: Apache-2.0
// grex-status: what every rank of a running job is doing, asked through the
// job's store (grex/status.h). For jobs started by mpirun, srun, torchrun
// with grex's store, or by hand; grex-run's own jobs also answer
// `grex-run --status`.
#include <grex/bootstrap.h>
#include <grex/status.h>

#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace {

constexpr const char* kUsage =
    "usage: grex-status [--json] [--timeout-ms N] [--token-file F] HOST:PORT\n"
    "\n"
    "Asks every rank of the job whose store listens at HOST:PORT what it is\n"
    "doing and prints one line per rank: its current call and how long it has\n"
    "run, the ranks it waits for, the collectives it finished; then the\n"
    "stragglers (ranks behind the others) and the ranks that did not answer.\n"
    "  --json           one JSON document instead of the text\n"
    "  --timeout-ms N   wait this long for the answers (default 3000)\n"
    "  --token-file F   read the job token from F (default: GREX_JOB_TOKEN)\n"
    "  -h, --help       this text\n"
    "\n"
    "Exit status: 0 when every rank answered, 3 when some did not, 1 when the\n"
    "store could not be asked, 2 for usage errors.\n";

bool parse_address(const std::string& text, std::string* host, uint16_t* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  *host = text.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  const std::string p = text.substr(colon + 1);
  unsigned v = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
  if (p.empty() || ec != std::errc() || end != p.data() + p.size() || v == 0 || v > 65535) return false;
  *port = static_cast<uint16_t>(v);
  return true;
}

std::optional<std::string> read_token(const std::string& file) {
  if (file.empty()) {
    const char* t = std::getenv("GREX_JOB_TOKEN");
    if (t == nullptr || *t == 0) return std::nullopt;
    return std::string(t);
  }
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::string t;
  std::getline(in, t);
  if (t.empty()) return std::nullopt;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("grex-status");
  app.set_help_flag();
  app.allow_extras();
  bool json = false;
  int64_t timeout_ms = 3000;
  std::string token_file;
  CLI::Option* help = app.add_flag("-h,--help");
  app.add_flag("--json", json);
  app.add_option("--timeout-ms", timeout_ms)->check(CLI::Range(int64_t{1}, int64_t{3'600'000}));
  app.add_option("--token-file", token_file);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (help->count() == 0) {
      std::fprintf(stderr, "grex-status: %s\n%s", e.what(), kUsage);
      return 2;
    }
  }
  if (help->count() > 0) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const std::vector<std::string> rest = app.remaining();
  std::string host;
  uint16_t port = 0;
  if (rest.size() != 1 || !parse_address(rest[0], &host, &port)) {
    std::fprintf(stderr, "grex-status: give the job's store as HOST:PORT\n%s", kUsage);
    return 2;
  }
  const std::optional<std::string> token = read_token(token_file);
  if (!token) {
    std::fprintf(stderr, "grex-status: no job token: set GREX_JOB_TOKEN or give --token-file\n");
    return 2;
  }
  auto store = grex::TcpStore::connect(host, port, *token, timeout_ms);
  if (!store.ok()) {
    std::fprintf(stderr, "grex-status: %s\n", store.error().message().c_str());
    return 1;
  }
  auto status = grex::query_job_status(**store, timeout_ms);
  if (!status.ok()) {
    std::fprintf(stderr, "grex-status: %s\n", status.error().message().c_str());
    return 1;
  }
  std::fputs(json ? grex::job_status_json(*status).c_str() : grex::format_job_status(*status).c_str(), stdout);
  for (const grex::CommStatus& c : *status)
    if (!c.silent.empty()) return 3;
  return 0;
}
