// SPDX-License-Identifier: Apache-2.0
// Json::dump and the small file helpers every probe uses.
#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/json_text.h"
#include "info.h"

namespace grex::info {

std::string Json::dump(int indent) const {
  const std::string pad(static_cast<size_t>(indent + 2), ' '), close(static_cast<size_t>(indent), ' ');
  std::string out;
  if (std::holds_alternative<std::monostate>(v_)) {
    out = "null";
  } else if (const bool* b = std::get_if<bool>(&v_)) {
    out = *b ? "true" : "false";
  } else if (const int64_t* i = std::get_if<int64_t>(&v_)) {
    out = std::to_string(*i);
  } else if (const double* d = std::get_if<double>(&v_)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", std::isfinite(*d) ? *d : 0.0);
    out = buf;
  } else if (const std::string* s = std::get_if<std::string>(&v_)) {
    append_json_string(out, *s);
  } else if (const auto* a = std::get_if<std::shared_ptr<Array>>(&v_)) {
    if ((*a)->empty()) return "[]";
    out = "[\n";
    for (size_t k = 0; k < (*a)->size(); ++k) out += pad + (**a)[k].dump(indent + 2) + (k + 1 < (*a)->size() ? ",\n" : "\n");
    out += close + "]";
  } else if (const auto* o = std::get_if<std::shared_ptr<Object>>(&v_)) {
    if ((*o)->empty()) return "{}";
    out = "{\n";
    for (size_t k = 0; k < (*o)->size(); ++k) {
      out += pad;
      append_json_string(out, (**o)[k].first);
      out += ": " + (**o)[k].second.dump(indent + 2) + (k + 1 < (*o)->size() ? ",\n" : "\n");
    }
    out += close + "}";
  }
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace grex::info
