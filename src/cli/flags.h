// Command-line flag parsing for subcommands: --name value, --name=value, repeatable and
// multi-value flags, `--` to end flags. Bad flags raise ConfigError (exit code 2).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace cadre {

class Flags {
 public:
  explicit Flags(std::string usage) : usage_(std::move(usage)) {}

  void add(const std::string& name, std::string* target, const std::string& help);
  void add(const std::string& name, int64_t* target, const std::string& help);
  void add(const std::string& name, double* target, const std::string& help);
  void add(const std::string& name, bool* target, const std::string& help);  // takes no value
  // Takes every following value up to the next flag; may be repeated.
  void add(const std::string& name, std::vector<std::string>* target, const std::string& help);

  // Parses args; returns positional arguments (everything after `--` included verbatim).
  // On --help prints usage and throws HelpShown.
  std::vector<std::string> parse(const std::vector<std::string>& args);

  // Names of flags that appeared on the command line.
  bool given(const std::string& name) const;
  std::string usage() const;

  struct HelpShown {};

 private:
  using Target = std::variant<std::string*, int64_t*, double*, bool*, std::vector<std::string>*>;
  struct Flag {
    std::string name, help;
    Target target;
  };
  const Flag* find(const std::string& name) const;

  std::string usage_;
  std::vector<Flag> flags_;
  std::vector<std::string> given_;
};

}  // namespace cadre
