// Sentences built from a small vocabulary with a fixed grammar, so a model can learn them.
#include "support/corpus.h"

#include <filesystem>
#include <fstream>
#include <vector>

namespace cadre::test {

void write_corpus(const std::string& dir, int files, size_t bytes_per_file, uint64_t seed) {
  static const std::vector<std::string> subjects = {"The council", "Our nation", "The people", "Congress",
                                                    "The government", "Every citizen", "The treasury", "This union"};
  static const std::vector<std::string> verbs = {"must secure", "will protect", "has improved", "should consider",
                                                 "can strengthen", "shall review", "may expand", "did restore"};
  static const std::vector<std::string> objects = {"the public credit", "our common defense", "the general welfare",
                                                   "the blessings of liberty", "domestic tranquility",
                                                   "the rights of labor", "foreign commerce", "the western lands"};
  static const std::vector<std::string> tails = {"this year", "without delay", "with care", "in good faith",
                                                 "for all states", "before winter", "by law", "at once"};
  std::filesystem::create_directories(dir);
  uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 12345;
  auto next = [&](size_t n) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<size_t>(state % n);
  };
  for (int f = 0; f < files; ++f) {
    std::ofstream out(dir + "/doc_" + std::to_string(f) + ".txt");
    size_t written = 0;
    while (written < bytes_per_file) {
      std::string s = subjects[next(subjects.size())] + " " + verbs[next(verbs.size())] + " " +
                      objects[next(objects.size())] + " " + tails[next(tails.size())] + ". ";
      out << s;
      written += s.size();
    }
    out << "\n";
  }
}

}  // namespace cadre::test
