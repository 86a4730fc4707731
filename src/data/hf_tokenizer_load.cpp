// Reading tokenizer.json into an HfPipeline (see hf_pipeline.h). Each component type is read
// by one function; unsupported types and options are refused by name rather than ignored,
// since a silently different tokenizer would train or serve on wrong ids.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "core/error.h"
#include "data/hf_json.h"
#include "data/hf_pipeline.h"
#include "data/utf8.h"

namespace cadre::detail {
namespace {

std::string type_of(const JsonField& f) { return f["type"].str(); }

// Sequences nest; a hostile file could nest them deep enough to exhaust the stack.
JsonField sequence_list(const JsonField& f, const char* key) {
  if (std::count(f.path().begin(), f.path().end(), '[') >= 16) f.fail("Sequences nested more than 16 deep");
  return f[key];
}

// A field tokenizers reads as a Rust char: exactly one character.
std::string one_char(const JsonField& f) {
  std::string s = f.str();
  if (s.empty() || !utf8_valid(s) || utf8_char_len(static_cast<unsigned char>(s[0])) != s.size())
    f.fail("expected exactly one character");
  return s;
}

// The largest id accepted: ids index tables, and no real vocabulary comes near it.
constexpr int64_t kMaxId = (int64_t{1} << 24) - 1;

[[noreturn]] void refuse_type(const JsonField& f, const std::string& what) {
  f["type"].fail(str("the ", what, " type '", type_of(f), "' is not supported"));
}

std::pair<std::string, std::string> read_merge(const JsonField& m) {
  if (m.value().is_string()) {
    // "a b": tokenizers splits on every space and wants exactly two parts.
    std::string line = m.str();
    size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      m.fail("a merge written as a string must be two tokens separated by one space");
    return {line.substr(0, space), line.substr(space + 1)};
  }
  if (m.size() != 2) m.fail("a merge must be a pair of tokens");
  return {m.at(0).str(), m.at(1).str()};
}

std::unique_ptr<BpeModel> read_model(const JsonField& m) {
  if (type_of(m) != "BPE") refuse_type(m, "model");
  const JsonField dropout = m["dropout"];
  if (!dropout.is_null() && !(dropout.value().is_number() && dropout.value().get<double>() == 0.0))
    dropout.fail("BPE dropout is not supported (null or 0 only)");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const JsonField f = m[affix];
    if (!f.is_null() && !f.str().empty()) f.fail("is not supported (null only)");
  }
  std::unordered_map<std::string, int> vocab;
  const JsonField v = m["vocab"];
  for (const auto& [token, id] : v.object().items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxId)
      JsonField(id, v.file(), v.path() + "." + token).fail(str("expected an integer id from 0 to ", kMaxId));
    vocab.emplace(token, static_cast<int>(id.get<int64_t>()));
  }
  std::vector<std::pair<std::string, std::string>> merges;
  const JsonField ms = m["merges"];
  if (!ms.is_null())
    for (size_t i = 0; i < ms.size(); ++i) merges.push_back(read_merge(ms.at(i)));
  BpeOptions opt;
  opt.byte_fallback = m["byte_fallback"].boolean_or(false);
  opt.ignore_merges = m["ignore_merges"].boolean_or(false);
  opt.fuse_unk = m["fuse_unk"].boolean_or(false);
  if (!m["unk_token"].is_null()) opt.unk_token = m["unk_token"].str();
  return std::make_unique<BpeModel>(std::move(vocab), merges, opt, m.file());
}

// tokenizers takes an added token's id from the vocabulary when its content is there, and
// numbers a token listed twice anew: files where that differs from the listed id are refused,
// since the listed ids would be wrong ids. (An added token may take a vocabulary token's id:
// it shadows that token in decoding, as in tokenizers.)
void read_added(const JsonField& list, const BpeModel& model, std::vector<AddedToken>& out) {
  if (list.is_null()) return;
  std::unordered_set<int> ids;
  std::unordered_set<std::string> contents;
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonField t = list.at(i);
    AddedToken a;
    a.content = t["content"].str();
    if (a.content.empty()) t["content"].fail("an added token cannot be empty");
    int64_t id = t["id"].integer();
    if (id < 0 || id > kMaxId) t["id"].fail(str("expected an integer id from 0 to ", kMaxId));
    a.id = static_cast<int>(id);
    const int vocab_id = model.token_to_id(a.content);
    if (vocab_id >= 0 && vocab_id != a.id) t["id"].fail(str("the vocabulary gives this token id ", vocab_id));
    if (!ids.insert(a.id).second || !contents.insert(a.content).second)
      t.fail("an added token listed twice (same id or content)");
    a.special = t["special"].boolean_or(false);
    a.lstrip = t["lstrip"].boolean_or(false);
    a.rstrip = t["rstrip"].boolean_or(false);
    a.single_word = t["single_word"].boolean_or(false);
    a.normalized = t["normalized"].boolean_or(!a.special);
    out.push_back(a);
  }
}

// Metaspace's prepend_scheme (default "always"); older files say add_prefix_space: false.
PrependScheme read_prepend_scheme(const JsonField& p) {
  const JsonField f = p["prepend_scheme"];
  PrependScheme scheme = PrependScheme::Always;
  if (!f.is_null()) {
    std::string v = f.str();
    if (v == "first") scheme = PrependScheme::First;
    else if (v == "never") scheme = PrependScheme::Never;
    else if (v != "always") f.fail("expected always, first or never");
  }
  if (!p["add_prefix_space"].boolean_or(true)) {
    if (scheme != PrependScheme::Never) p["add_prefix_space"].fail("false does not match prepend_scheme");
    scheme = PrependScheme::Never;
  }
  return scheme;
}

// Replace's pattern: only the {"String": ...} form (a Regex would need a regex engine).
std::string read_string_pattern(const JsonField& p) {
  const JsonField pattern = p["pattern"];
  if (pattern["String"].is_null()) pattern.fail("only a String pattern is supported");
  std::string s = pattern["String"].str();
  if (s.empty()) pattern["String"].fail("an empty pattern is not supported");
  return s;
}

void read_normalizer(const JsonField& n, std::vector<NormalizerStep>& out) {
  if (n.is_null()) return;
  std::string type = type_of(n);
  if (type == "Sequence") {
    const JsonField list = sequence_list(n, "normalizers");
    for (size_t i = 0; i < list.size(); ++i) read_normalizer(list.at(i), out);
  } else if (type == "NFC") {
    out.push_back({NormalizerStep::Kind::Nfc, "", ""});
  } else if (type == "Prepend") {
    out.push_back({NormalizerStep::Kind::Prepend, "", n["prepend"].str()});
  } else if (type == "Replace") {
    out.push_back({NormalizerStep::Kind::Replace, read_string_pattern(n), n["content"].str()});
  } else {
    refuse_type(n, "normalizer");
  }
}

void read_pre_tokenizer(const JsonField& p, std::vector<PreTokenizerStep>& out) {
  if (p.is_null()) return;
  std::string type = type_of(p);
  if (type == "Sequence") {
    const JsonField list = sequence_list(p, "pretokenizers");
    for (size_t i = 0; i < list.size(); ++i) read_pre_tokenizer(list.at(i), out);
    return;
  }
  PreTokenizerStep step;
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::ByteLevel;
    step.add_prefix_space = p["add_prefix_space"].boolean_or(true);
    step.use_regex = p["use_regex"].boolean_or(true);
  } else if (type == "Split") {
    step.kind = PreTokenizerStep::Kind::Split;
    const JsonField pattern = p["pattern"], regex = pattern["Regex"];
    if (regex.is_null()) pattern.fail("only a Regex pattern (one of GPT-2's, Llama 3's, Qwen 2.5's) is supported");
    if (!split_pattern_from_text(regex.str(), &step.pattern))
      regex.fail("this pattern is not one of the supported ones (GPT-2's, Llama 3's, Qwen 2.5's, written exactly)");
    if (p["behavior"].str() != "Isolated") p["behavior"].fail("only Isolated is supported");
    if (p["invert"].boolean_or(false)) p["invert"].fail("only false is supported");
  } else if (type == "Metaspace") {
    step.kind = PreTokenizerStep::Kind::Metaspace;
    step.replacement = one_char(p["replacement"]);
    step.prepend = read_prepend_scheme(p);
    step.split = p["split"].boolean_or(true);
  } else {
    refuse_type(p, "pre-tokenizer");
  }
  out.push_back(step);
}

std::vector<int> special_ids(const JsonField& specials, const std::string& name, const JsonField& where) {
  const JsonField entry = specials[name.c_str()];
  if (entry.is_null()) where.fail(str("'", name, "' is not in special_tokens"));
  std::vector<int> ids;
  const JsonField list = entry["ids"];
  for (size_t i = 0; i < list.size(); ++i) {
    int64_t id = list.at(i).integer();
    if (id < 0 || id > kMaxId) list.at(i).fail(str("expected an integer id from 0 to ", kMaxId));
    ids.push_back(static_cast<int>(id));
  }
  return ids;
}

TemplateWrap read_template(const JsonField& p) {
  TemplateWrap wrap;
  const JsonField single = p["single"];
  int sequences = 0;
  for (size_t i = 0; i < single.size(); ++i) {
    const JsonField piece = single.at(i);
    if (!piece["Sequence"].is_null()) {
      if (piece["Sequence"]["id"].str() != "A") piece["Sequence"]["id"].fail("a single template can only hold $A");
      ++sequences;
      continue;
    }
    const JsonField special = piece["SpecialToken"];
    std::vector<int> ids = special_ids(p["special_tokens"], special["id"].str(), special["id"]);
    std::vector<int>& side = sequences == 0 ? wrap.before : wrap.after;
    side.insert(side.end(), ids.begin(), ids.end());
  }
  if (sequences != 1) single.fail("the single template must hold $A exactly once");
  return wrap;
}

void read_post_processor(const JsonField& p, std::vector<TemplateWrap>& out) {
  if (p.is_null()) return;
  std::string type = type_of(p);
  if (type == "Sequence") {
    const JsonField list = sequence_list(p, "processors");
    for (size_t i = 0; i < list.size(); ++i) read_post_processor(list.at(i), out);
  } else if (type == "TemplateProcessing") {
    out.push_back(read_template(p));
  } else if (type != "ByteLevel") {  // ByteLevel only trims offsets, which Cadre does not report
    refuse_type(p, "post-processor");
  }
}

void read_decoder(const JsonField& d, std::vector<DecoderStep>& out) {
  std::string type = type_of(d);
  if (type == "Sequence") {
    const JsonField list = sequence_list(d, "decoders");
    for (size_t i = 0; i < list.size(); ++i) read_decoder(list.at(i), out);
    return;
  }
  DecoderStep step;
  if (type == "ByteLevel") {
    step.kind = DecoderStep::Kind::ByteLevel;
  } else if (type == "Replace") {
    step.kind = DecoderStep::Kind::Replace;
    step.from = read_string_pattern(d);
    step.to = d["content"].str();
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::Kind::ByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Kind::Fuse;
  } else if (type == "Strip") {
    step.kind = DecoderStep::Kind::Strip;
    step.from = one_char(d["content"]);
    int64_t start = d["start"].integer(), stop = d["stop"].integer();
    if (start < 0 || stop < 0) d.fail("start and stop must not be negative");
    step.start = static_cast<size_t>(start);
    step.stop = static_cast<size_t>(stop);
  } else if (type == "Metaspace") {
    step.kind = DecoderStep::Kind::Metaspace;
    step.from = one_char(d["replacement"]);
    step.strip_first = read_prepend_scheme(d) != PrependScheme::Never;
  } else {
    refuse_type(d, "decoder");
  }
  out.push_back(step);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CADRE_CONFIG_CHECK(in, path, ": cannot open the tokenizer file");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

HfPipeline load_hf_pipeline(const std::string& path) { return load_hf_pipeline_text(read_file(path), path); }

HfPipeline load_hf_pipeline_text(const std::string& text, const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  CADRE_CONFIG_CHECK(!j.is_discarded(), path, ": not valid JSON");
  CADRE_CONFIG_CHECK(j.is_object(), path, ": expected a JSON object at the top");
  JsonField root(j, path, "");
  const JsonField truncation = root["truncation"], padding = root["padding"];
  if (!truncation.is_null()) truncation.fail("truncation is not supported (null only)");
  if (!padding.is_null()) padding.fail("padding is not supported (null only)");
  HfPipeline p;
  read_normalizer(root["normalizer"], p.normalizer);
  p.model = read_model(root["model"]);
  read_added(root["added_tokens"], *p.model, p.added);
  read_pre_tokenizer(root["pre_tokenizer"], p.pre_tokenizer);
  read_post_processor(root["post_processor"], p.post_processor);
  p.has_decoder = !root["decoder"].is_null();
  if (p.has_decoder) read_decoder(root["decoder"], p.decoder);
  return p;
}

}  // namespace cadre::detail
