// SPDX-License-Identifier: Apache-2.0
// grex-store: a standalone rendezvous store server for jobs that run with GREX_STORE_EXTERNAL=1.
#include <grex/bootstrap.h>

#include <CLI/CLI.hpp>

#include <charconv>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

namespace {

constexpr uint16_t kDefaultPort = 29500;

void usage(FILE* to) {
  std::fprintf(to,
               "usage: grex-store [--host H] [--port P]\n"
               "\n"
               "Serves the grex rendezvous store until SIGINT or SIGTERM.\n"
               "  --host H   address to listen on (default 0.0.0.0: every interface)\n"
               "  --port P   TCP port (default %u; 0 picks a free one and prints it)\n"
               "  --help     this text\n"
               "\n"
               "GREX_JOB_TOKEN (required) is the shared secret every rank must present.\n"
               "Ranks find the store with GREX_STORE_ADDR=host:port and GREX_STORE_EXTERNAL=1.\n",
               static_cast<unsigned>(kDefaultPort));
}

// A TCP port written as a whole decimal number in 0..65535; nullopt otherwise.
std::optional<uint16_t> parse_port(const std::string& text) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end || v < 0 || v > 65535) return std::nullopt;
  return static_cast<uint16_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "0.0.0.0";
  std::string port_text = std::to_string(kDefaultPort);
  CLI::App app("grex-store");
  app.set_help_flag();  // usage() is the help
  app.allow_extras();   // reported below, in this tool's words
  CLI::Option* help = app.add_flag("-h,--help");
  CLI::Option* host_opt = app.add_option("--host", host)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  CLI::Option* port_opt = app.add_option("--port", port_text)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    if (help->count() == 0) {
      for (const CLI::Option* o : {host_opt, port_opt})  // CLI11 starts the message with the option's name
        if (what.starts_with(o->get_name() + ":")) what = o->get_name() + " needs a value";
      std::fprintf(stderr, "grex-store: %s\n", what.c_str());
      return 2;
    }
  }
  if (help->count() > 0) {
    usage(stdout);
    return 0;
  }
  if (!app.remaining().empty()) {
    std::fprintf(stderr, "grex-store: unknown argument '%s'\n", app.remaining().front().c_str());
    usage(stderr);
    return 2;
  }
  std::optional<uint16_t> port = parse_port(port_text);
  if (!port) {
    std::fprintf(stderr, "grex-store: --port '%s' is not a port in 0..65535\n", port_text.c_str());
    return 2;
  }
  const char* token_env = std::getenv("GREX_JOB_TOKEN");
  std::string token = token_env != nullptr ? token_env : "";
  if (token.empty()) {
    std::fprintf(stderr, "grex-store: GREX_JOB_TOKEN is not set; export the job's token (every rank must use the same)\n");
    return 2;
  }

  // Block the stop signals before the server thread starts, so only sigwait() below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto server = grex::StoreServer::start(host, *port, token);
  if (!server.ok()) {
    std::fprintf(stderr, "grex-store: %s\n", server.error().message().c_str());
    return 1;
  }
  std::printf("grex-store listening on %s\n", grex::store_address(host, (*server)->port()).c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "grex-store: %s, stopping\n", strsignal(sig));
  (*server)->stop();
  return 0;
}
