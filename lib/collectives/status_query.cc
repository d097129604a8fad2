// SPDX-License-Identifier: Apache-2.0
// The job status as a tool asks it (grex/status.h): the request, the
// answers, the stragglers, and the text and JSON grex-status prints.
#include <grex/status.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "core/clock.h"

namespace grex {

namespace {

using json = nlohmann::json;

// Where a rank is in the sequence of collectives: 2k-1 while in the k-th, 2k once it ended.
uint64_t progress(const RankStatus& s) {
  return s.running && s.coll > 0 ? 2 * s.coll - 1 : 2 * s.colls_done;
}

std::string ranks_text(const std::vector<int>& r) {
  if (r.empty()) return "none";
  std::string t = r.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < r.size(); ++i) t += (i > 0 ? ", " : "") + std::to_string(r[i]);
  return t;
}

}  // namespace

RankStatus parse_rank_status(std::string_view text, int rank) {
  RankStatus s;
  s.rank = rank;
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("state")) return s;
  try {
    s.host = j.value("host", "");
    s.pid = j.value("pid", 0);
    s.op = j.value("op", "");
    s.call = j.value("call", "");
    s.coll = j.value("coll", uint64_t{0});
    const std::string state = j.value("state", "");
    s.running = state == "running";
    s.failed = state == "failed";
    s.peer = j.value("peer", -1);
    s.ms = j.value("ms", 0.0);
    if (j.contains("waiting_on") && j["waiting_on"].is_array())
      for (const auto& p : j["waiting_on"]) s.waiting_on.push_back(p.get<int>());
    s.colls_done = j.value("colls_done", uint64_t{0});
    s.last_coll = j.value("last_coll", "");
    s.last_coll_seq = j.value("last_coll_seq", uint64_t{0});
    s.answered = true;
  } catch (const json::exception&) {
    s = RankStatus{};
    s.rank = rank;
  }
  return s;
}

void find_stragglers(CommStatus* c) {
  c->stragglers.clear();
  c->silent.clear();
  uint64_t best = 0;
  for (const RankStatus& s : c->ranks)
    if (s.answered) best = std::max(best, progress(s));
  for (const RankStatus& s : c->ranks) {
    if (!s.answered) c->silent.push_back(s.rank);
    else if (progress(s) < best) c->stragglers.push_back(s.rank);
  }
}

Result<std::vector<CommStatus>> query_job_status(Store& store, int64_t timeout_ms) {
  const Deadline deadline = Deadline::after_ms(timeout_ms);
  const int64_t n = GREX_TRY(store.add("grex/status/comms", 0));
  // The communicators listed and not gone; a name listed twice is the newer one.
  std::map<std::string, int> sizes;
  std::vector<std::string> order;
  for (int64_t i = 1; i <= n; ++i) {
    const std::string idx = std::to_string(i);
    auto gone = GREX_TRY(store.check(std::vector<std::string>{"grex/status/gone/" + idx}));
    std::string v = GREX_TRY(store.get("grex/status/comm/" + idx, std::max<int64_t>(1, deadline.remaining_ms())));
    const size_t sp = v.find(' ');
    if (sp == std::string::npos) continue;
    const std::string name = v.substr(sp + 1);
    const int size = std::atoi(v.substr(0, sp).c_str());
    if (gone[0]) {
      sizes.erase(name);
      continue;
    }
    if (sizes.find(name) == sizes.end()) order.push_back(name);
    sizes[name] = size;
  }
  std::vector<CommStatus> out;
  for (const std::string& name : order)
    if (auto it = sizes.find(name); it != sizes.end() && it->second > 0) {
      CommStatus c;
      c.comm = name;
      c.size = it->second;
      c.ranks.resize(static_cast<size_t>(c.size));
      for (int r = 0; r < c.size; ++r) c.ranks[static_cast<size_t>(r)].rank = r;
      out.push_back(std::move(c));
    }
  if (out.empty())
    return Error(Errc::kNotFound, "no communicator of this job is listed in its store (none created yet, or all gone)");

  const int64_t g = GREX_TRY(store.add("grex/status/req", 1));
  GREX_TRY(store.set("grex/status/go/" + std::to_string(g), ""));
  for (;;) {
    bool all = true;
    for (CommStatus& c : out) {
      std::vector<std::string> keys;
      std::vector<int> which;
      for (const RankStatus& s : c.ranks)
        if (!s.answered) {
          keys.push_back("grex/status/ans/" + std::to_string(g) + "/" + c.comm + "/" + std::to_string(s.rank));
          which.push_back(s.rank);
        }
      if (keys.empty()) continue;
      auto there = GREX_TRY(store.check(keys));
      for (size_t k = 0; k < keys.size(); ++k) {
        if (!there[k]) {
          all = false;
          continue;
        }
        std::string v = GREX_TRY(store.get(keys[k], 0));
        c.ranks[static_cast<size_t>(which[k])] = parse_rank_status(v, which[k]);
      }
    }
    if (all || deadline.expired()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // The answers go (a rank that answers after this leaves its line behind); the
  // announcement stays: a rank that has not seen it yet waits for that key.
  std::vector<std::string> done;
  for (const CommStatus& c : out)
    for (const RankStatus& s : c.ranks)
      done.push_back("grex/status/ans/" + std::to_string(g) + "/" + c.comm + "/" + std::to_string(s.rank));
  (void)store.erase(done);
  for (CommStatus& c : out) find_stragglers(&c);
  return out;
}

std::string format_job_status(const std::vector<CommStatus>& comms) {
  std::string o;
  char line[1024];
  for (const CommStatus& c : comms) {
    const size_t answered = static_cast<size_t>(std::count_if(c.ranks.begin(), c.ranks.end(),
                                                              [](const RankStatus& s) { return s.answered; }));
    std::snprintf(line, sizeof line, "communicator %s: %d ranks, %zu answered\n", c.comm.c_str(), c.size, answered);
    o += line;
    for (const RankStatus& s : c.ranks) {
      if (!s.answered) {
        std::snprintf(line, sizeof line, "  rank %d: no answer\n", s.rank);
        o += line;
        continue;
      }
      std::string doing;
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.0f ms", s.ms);
      if (s.op.empty()) doing = "no call yet";
      else if (s.running) {
        doing = "in " + s.call + (s.coll > 0 ? " (#" + std::to_string(s.coll) + ")" : "") + " for " + ms;
        if (!s.waiting_on.empty()) doing += ", waiting on " + ranks_text(s.waiting_on);
      } else {
        doing = std::string(s.failed ? "failed " : "out of grex for ") + ms + " (" + (s.failed ? "in " : "after ") +
                s.call + (s.coll > 0 ? " #" + std::to_string(s.coll) : "") + ")";
      }
      std::snprintf(line, sizeof line, "  rank %d (%s pid %d): %s; %llu collectives done\n", s.rank, s.host.c_str(),
                    s.pid, doing.c_str(), static_cast<unsigned long long>(s.colls_done));
      o += line;
    }
    o += "  stragglers: " + ranks_text(c.stragglers) + "\n";
    o += "  not answering: " + ranks_text(c.silent) + "\n";
  }
  return o;
}

std::string job_status_json(const std::vector<CommStatus>& comms) {
  json all = json::array();
  for (const CommStatus& c : comms) {
    json ranks = json::array();
    for (const RankStatus& s : c.ranks) {
      json r = {{"rank", s.rank}, {"answered", s.answered}};
      if (s.answered) {
        r.update({{"host", s.host}, {"pid", s.pid}, {"op", s.op}, {"call", s.call}, {"coll", s.coll},
                  {"state", s.running ? "running" : s.failed ? "failed" : s.op.empty() ? "none" : "done"},
                  {"ms", s.ms}, {"waiting_on", s.waiting_on}, {"colls_done", s.colls_done},
                  {"last_coll", s.last_coll}, {"last_coll_seq", s.last_coll_seq}});
        if (s.peer >= 0) r["peer"] = s.peer;
      }
      ranks.push_back(std::move(r));
    }
    all.push_back({{"comm", c.comm}, {"size", c.size}, {"ranks", std::move(ranks)}, {"stragglers", c.stragglers},
                   {"silent", c.silent}});
  }
  return json({{"communicators", std::move(all)}}).dump(2) + "\n";
}

}  // namespace grex
