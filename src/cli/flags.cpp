// Flag parser implementation.
#include "cli/flags.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace cadre {

void Flags::add(const std::string& n, std::string* t, const std::string& h) { flags_.push_back({n, h, t}); }
void Flags::add(const std::string& n, int64_t* t, const std::string& h) { flags_.push_back({n, h, t}); }
void Flags::add(const std::string& n, double* t, const std::string& h) { flags_.push_back({n, h, t}); }
void Flags::add(const std::string& n, bool* t, const std::string& h) { flags_.push_back({n, h, t}); }
void Flags::add(const std::string& n, std::vector<std::string>* t, const std::string& h) {
  flags_.push_back({n, h, t});
}

const Flags::Flag* Flags::find(const std::string& name) const {
  for (const auto& f : flags_)
    if (f.name == name) return &f;
  return nullptr;
}

bool Flags::given(const std::string& name) const {
  return std::find(given_.begin(), given_.end(), name) != given_.end();
}

std::string Flags::usage() const {
  std::string out = "usage: " + usage_ + "\n";
  for (const auto& f : flags_) {
    std::string left = "  " + f.name;
    if (!std::holds_alternative<bool*>(f.target)) left += " <value>";
    if (left.size() < 28) left.resize(28, ' ');
    out += left + " " + f.help + "\n";
  }
  return out;
}

static bool looks_like_flag(const std::string& s) { return s.size() > 1 && s[0] == '-' && !(s[1] >= '0' && s[1] <= '9'); }

std::vector<std::string> Flags::parse(const std::vector<std::string>& args) {
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      positional.insert(positional.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg == "-h" || arg == "--help") {
      std::fputs(usage().c_str(), stdout);
      throw HelpShown{};
    }
    if (!looks_like_flag(arg)) {
      positional.push_back(arg);
      continue;
    }
    std::string name = arg, inline_value;
    bool has_inline = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
      has_inline = true;
    }
    const Flag* flag = find(name);
    if (!flag) throw ConfigError(str("unknown flag '", name, "'\n", usage()));
    given_.push_back(name);

    if (auto* b = std::get_if<bool*>(&flag->target)) {
      if (has_inline) {
        CADRE_CONFIG_CHECK(inline_value == "true" || inline_value == "false",
                           "flag ", name, " takes true or false, got '", inline_value, "'");
        **b = inline_value == "true";
      } else {
        **b = true;
      }
      continue;
    }
    if (auto* v = std::get_if<std::vector<std::string>*>(&flag->target)) {
      size_t before = (*v)->size();
      if (has_inline) (*v)->push_back(inline_value);
      while (i + 1 < args.size() && !looks_like_flag(args[i + 1]) && args[i + 1] != "--") (*v)->push_back(args[++i]);
      CADRE_CONFIG_CHECK((*v)->size() > before, "flag ", name, " needs at least one value");
      continue;
    }
    std::string value;
    if (has_inline) {
      value = inline_value;
    } else {
      CADRE_CONFIG_CHECK(i + 1 < args.size(), "flag ", name, " needs a value");
      value = args[++i];
    }
    if (auto* s = std::get_if<std::string*>(&flag->target)) {
      **s = value;
    } else if (auto* n = std::get_if<int64_t*>(&flag->target)) {
      size_t used = 0;
      try { **n = std::stoll(value, &used); } catch (const std::exception&) { used = 0; }
      CADRE_CONFIG_CHECK(used == value.size() && !value.empty(), "flag ", name, " expects an integer, got '", value, "'");
    } else if (auto* d = std::get_if<double*>(&flag->target)) {
      size_t used = 0;
      try { **d = std::stod(value, &used); } catch (const std::exception&) { used = 0; }
      CADRE_CONFIG_CHECK(used == value.size() && !value.empty(), "flag ", name, " expects a number, got '", value, "'");
    }
  }
  return positional;
}

}  // namespace cadre
