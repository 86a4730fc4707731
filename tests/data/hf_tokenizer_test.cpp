// HfTokenizer against the Python `tokenizers` library (project venv, CADRE_VENV_PYTHON):
// tests/python/hf_tokenizer_ref.py trains small BPE tokenizers now (byte-level: GPT-2's
// ByteLevel regex with and without add_prefix_space, Llama 3's Split pattern with
// ignore_merges and a TemplateProcessing <|begin_of_text|>, Qwen 2.5's pattern, merges in both
// JSON forms; SentencePiece-style: Llama 2's Prepend/Replace normalizer and decoder sequence,
// Mistral's Metaspace, byte fallback, fused <unk>; Qwen 2.5's NFC; added tokens with
// single_word/lstrip/rstrip/normalized) and writes what tokenizers encodes and decodes for a
// corpus of edge cases (several scripts, emoji and ZWJ sequences, digit and whitespace runs,
// \r\n, upper-case contractions, special-token strings, invalid UTF-8, random mixes of these,
// and id slices that cut characters). Ids, decodes and streamed decodes (DecodeStream, id by
// id) must be equal exactly.
// Also: the pre-tokenizer scanners and NFC against tokenizers' own regex engine and normalizer
// on random strings, thread safety, arbitrary bytes, and refusals naming the file and field.
// The Python side runs once per build tree and inputs (~1 s), not once per test process.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "core/error.h"
#include "core/file_util.h"
#include "data/hf_decode_stream.h"
#include "data/hf_tokenizer.h"
#include "data/pretokenize_scan.h"
#include "data/unicode_nfc.h"
#include "data/unicode_tables.h"
#include "support/process.h"

namespace {

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string show(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += std::to_string(id) + " ";
  return s;
}

// The reference files. ctest runs each test in its own process, so they are made once and
// kept in the build tree, under a key of everything they depend on: the script, the pinned
// requirements and the venv's site-packages (its modification time changes with any install).
std::string reference_key() {
  namespace fs = std::filesystem;
  std::string key = cadre::file_read(CADRE_SOURCE_DIR "/tests/python/hf_tokenizer_ref.py");
  for (const char* req : {"/python/requirements.txt", "/python/requirements-torch.txt"})
    if (fs::exists(std::string(CADRE_SOURCE_DIR) + req)) key += cadre::file_read(std::string(CADRE_SOURCE_DIR) + req);
  key += CADRE_VENV_PYTHON;
  std::error_code ec;
  fs::path lib = fs::path(CADRE_VENV_PYTHON).parent_path().parent_path() / "lib";
  for (const auto& entry : fs::directory_iterator(lib, ec)) {
    auto t = fs::last_write_time(entry.path() / "site-packages", ec);
    if (!ec) key += std::to_string(t.time_since_epoch().count());
  }
  char hex[32];
  std::snprintf(hex, sizeof hex, "%016zx", std::hash<std::string>{}(key));
  return hex;
}

struct Reference {
  std::string dir;
  cadre::test::TempDir scratch{"hf-tokenizer"};  // this process's edited copies
  nlohmann::json expected;
  std::string error;
  Reference() {
    namespace fs = std::filesystem;
    std::string build = CADRE_BIN;
    dir = build.substr(0, build.rfind("/bin/")) + "/tests/data/hf_tokenizer_ref/" + reference_key();
    if (!fs::exists(dir + "/expected.json")) {
      // Made beside and renamed into place, so that concurrent test processes never see half.
      std::string tmp = dir + ".tmp" + std::to_string(::getpid());
      fs::create_directories(tmp);
      auto py = cadre::test::run_process({CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/hf_tokenizer_ref.py", tmp});
      if (py.exit_code != 0) {
        error = py.output;
        fs::remove_all(tmp);
        return;
      }
      std::error_code ec;
      fs::rename(tmp, dir, ec);
      if (ec) fs::remove_all(tmp);  // another process got there first: use its copy
    }
    expected = nlohmann::json::parse(cadre::file_read(dir + "/expected.json"));
  }
  std::string file(const std::string& name) const { return dir + "/" + name; }
};

Reference& reference() {
  static Reference r;
  return r;
}

void check_against_tokenizers(const std::string& name) {
  Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  cadre::HfTokenizer tok(ref.file(name + ".json"));
  const nlohmann::json& exp = ref.expected.at(name);
  EXPECT_GE(tok.vocab_size(), exp.at("vocab_size").get<int64_t>());
  int checked = 0;
  for (const auto& c : exp.at("cases")) {
    std::string text = from_hex(c.at("hex").get<std::string>());
    SCOPED_TRACE(name + " case '" + text + "'");
    auto ids = c.at("ids").get<std::vector<int>>();
    EXPECT_EQ(show(tok.encode(text, false)), show(ids));
    EXPECT_EQ(show(tok.encode(text, true)), show(c.at("ids_special").get<std::vector<int>>()));
    for (bool skip : {false, true}) {
      cadre::HfDecodeStream stream(tok, skip);
      const auto& want = c.at("stream").at(skip ? 1 : 0);
      auto special = c.at("ids_special").get<std::vector<int>>();
      for (size_t i = 0; i < special.size(); ++i) {
        std::string text;
        bool ready = stream.step(special[i], &text);
        EXPECT_EQ(ready, !want[i].is_null()) << "stream step " << i << " skip " << skip;
        if (ready && !want[i].is_null()) {
          EXPECT_EQ(text, want[i].get<std::string>()) << "stream step " << i;
        }
      }
    }
    for (const auto& d : c.at("decode")) {
      auto piece = d.at(0).get<std::vector<int>>();
      EXPECT_EQ(tok.decode(piece, false), d.at(1).get<std::string>()) << show(piece);
      EXPECT_EQ(tok.decode(piece, true), d.at(2).get<std::string>()) << show(piece);
    }
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

// A copy of a reference file with one edit made to its JSON, for the refusal tests.
std::string edited(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  Reference& ref = reference();
  nlohmann::json j = nlohmann::json::parse(cadre::file_read(ref.file(name + ".json")));
  edit(j);
  std::string path = ref.scratch / ("edited_" + name + ".json");
  cadre::test::write_text(path, j.dump());
  return path;
}

void expect_refusal(const std::string& path, const std::string& field, const std::string& why) {
  try {
    cadre::HfTokenizer tok(path);
    ADD_FAILURE() << "no error for " << field;
  } catch (const cadre::ConfigError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("field '" + field), std::string::npos) << what;
    EXPECT_NE(what.find(why), std::string::npos) << what;
  }
}

}  // namespace

TEST(HfTokenizer, Gpt2ByteLevelMatchesTokenizers) { check_against_tokenizers("gpt2"); }
TEST(HfTokenizer, Gpt2StringFormMergesMatchTokenizers) { check_against_tokenizers("gpt2_string_merges"); }
TEST(HfTokenizer, Gpt2AddPrefixSpaceAndTemplateMatchTokenizers) { check_against_tokenizers("gpt2_prefix"); }
TEST(HfTokenizer, Llama3SplitIgnoreMergesAndBosMatchTokenizers) { check_against_tokenizers("llama3"); }
TEST(HfTokenizer, Qwen2SplitMatchesTokenizers) { check_against_tokenizers("qwen2"); }
TEST(HfTokenizer, Llama2PrependReplaceByteFallbackMatchTokenizers) { check_against_tokenizers("llama2"); }
TEST(HfTokenizer, FusedUnknownTokensMatchTokenizers) { check_against_tokenizers("llama2_unk"); }
TEST(HfTokenizer, MetaspaceMatchesTokenizers) { check_against_tokenizers("metaspace"); }

// The hand-written scanners against tokenizers' regex engine itself, piece by piece, on random
// strings over the characters where alternatives and backtracking differ (contractions in any
// case including U+017F, which Oniguruma folds to 's', digits of several scripts, whitespace
// kinds, line breaks, marks, emoji) and on the corpus.
TEST(HfTokenizer, ScannersSplitAsTheRegexEngineDoes) {
  Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const nlohmann::json& exp = ref.expected.at("scanners");
  const auto& texts = exp.at("texts");
  using cadre::detail::SplitPattern;
  for (auto [name, pattern] : {std::pair{"gpt2", SplitPattern::Gpt2}, std::pair{"llama3", SplitPattern::Llama3},
                               std::pair{"qwen2", SplitPattern::Qwen2}}) {
    for (size_t i = 0; i < texts.size(); ++i) {
      std::string text = from_hex(texts[i].get<std::string>());
      std::vector<std::pair<size_t, size_t>> ranges;
      cadre::detail::split_isolated(pattern, text, ranges);
      std::string got, want;
      for (const auto& [b, e] : ranges) got += "[" + text.substr(b, e - b) + "]";
      for (const auto& piece : exp.at(name)[i]) want += "[" + from_hex(piece.get<std::string>()) + "]";
      EXPECT_EQ(got, want) << name << " text " << texts[i];
    }
  }
}

TEST(HfTokenizer, NfcAsTokenizersNormalizes) {
  Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  for (const auto& pair : ref.expected.at("nfc")) {
    std::string in = from_hex(pair.at(0).get<std::string>()), want = from_hex(pair.at(1).get<std::string>());
    EXPECT_EQ(cadre::detail::nfc(in), want) << pair.at(0);
  }
}

TEST(HfTokenizer, TokenLookupsAndSpecialTokens) {
  Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  cadre::HfTokenizer tok(ref.file("llama3.json"));
  int eot = tok.token_to_id("<|eot_id|>");
  ASSERT_GE(eot, 0);
  EXPECT_EQ(tok.id_to_token(eot), "<|eot_id|>");
  EXPECT_TRUE(tok.is_special(eot));
  EXPECT_FALSE(tok.is_special(tok.token_to_id("[MASK]")));
  EXPECT_EQ(tok.token_to_id("no such token"), -1);
  EXPECT_EQ(tok.id_to_token(1 << 30), "");
  EXPECT_EQ(tok.decode({1 << 30, -5}, false), "");  // unknown ids are skipped
}

// A token's bytes, as logprobs report them: concatenated over an encoding they are the text's
// bytes, also where a token holds part of a multi-byte character.
TEST(HfTokenizer, TokenBytesConcatenateToTheText) {
  Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const std::string text = "Gr\xC3\xB6\xC3\x9F" "e \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\x80 done\nx";
  for (const char* name : {"llama3", "gpt2", "llama2"}) {
    cadre::HfTokenizer tok(ref.file(std::string(name) + ".json"));
    std::string bytes;
    for (int id : tok.encode(text, false)) bytes += tok.token_bytes(id);
    // The Llama 2 layout's normalizer puts a space mark before the text.
    EXPECT_EQ(bytes, std::string(name) == "llama2" ? " " + text : text) << name;
  }
}

// encode() is const and shared across data-loading threads: its word cache must hold up.
TEST(HfTokenizer, ConcurrentEncodingGivesTheSameIds) {
  Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  cadre::HfTokenizer tok(ref.file("llama3.json"));
  std::vector<std::string> texts;
  for (const auto& c : ref.expected.at("llama3").at("cases")) texts.push_back(from_hex(c.at("hex").get<std::string>()));
  std::vector<std::vector<int>> want;
  for (const auto& t : texts) want.push_back(tok.encode(t, true));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int round = 0; round < 20; ++round)
        for (size_t i = 0; i < texts.size(); ++i) mismatches[k] += tok.encode(texts[(i + k) % texts.size()], true) != want[(i + k) % texts.size()];
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(HfTokenizer, ArbitraryBytesNeverCrashAndRoundTripAfterRepair) {
  Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  cadre::HfTokenizer tok(ref.file("llama3.json"));
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (int round = 0; round < 300; ++round) {
    std::string bytes;
    for (int i = 0; i < 40; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      bytes += static_cast<char>(state >> 56);
    }
    std::vector<int> ids = tok.encode(bytes, false);
    std::string back = tok.decode(ids, false);
    // Decoding repairs nothing more: the encoder already replaced the invalid bytes.
    EXPECT_EQ(tok.encode(back, false), ids);
  }
}

TEST(HfTokenizer, UnsupportedPartsAreRefusedNamingFileAndField) {
  Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  expect_refusal(edited("llama3", [](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+"; }),
                 "pre_tokenizer.pretokenizers[0].pattern.Regex", "not one of the supported");
  expect_refusal(edited("llama3", [](nlohmann::json& j) { j["normalizer"] = {{"type", "NFKC"}}; }), "normalizer.type",
                 "'NFKC' is not supported");
  expect_refusal(edited("llama2", [](nlohmann::json& j) { j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +"}}; }),
                 "normalizer.normalizers[1].pattern", "only a String pattern");
  expect_refusal(edited("gpt2", [](nlohmann::json& j) { j["model"]["dropout"] = 0.1; }), "model.dropout", "dropout");
  expect_refusal(edited("gpt2", [](nlohmann::json& j) { j["model"]["continuing_subword_prefix"] = "##"; }),
                 "model.continuing_subword_prefix", "not supported");
  expect_refusal(edited("gpt2", [](nlohmann::json& j) { j["model"]["type"] = "WordPiece"; }), "model.type",
                 "'WordPiece' is not supported");
  expect_refusal(edited("gpt2", [](nlohmann::json& j) { j["model"]["merges"][2] = "abc"; }), "model.merges[2]",
                 "two tokens");
  expect_refusal(edited("gpt2", [](nlohmann::json& j) { j["model"]["vocab"] = 3; }), "model.vocab", "expected an object");
  expect_refusal(edited("llama3", [](nlohmann::json& j) { j["model"]["merges"][5] = {"zz", "qq"}; }), "model.merges[5]",
                 "'zz' is not in model.vocab");
  expect_refusal(edited("gpt2", [](nlohmann::json& j) { j["decoder"] = {{"type", "WordPiece"}}; }), "decoder.type",
                 "not supported");
  expect_refusal(edited("gpt2", [](nlohmann::json& j) { j["added_tokens"][0]["id"] = int64_t{1} << 40; }),
                 "added_tokens[0].id", "expected an integer id");
  // tokenizers would give these other ids than the file lists.
  expect_refusal(edited("gpt2", [](nlohmann::json& j) { j["added_tokens"][0]["id"] = 5; }), "added_tokens[0].id",
                 "the vocabulary gives this token id 0");
  expect_refusal(edited("gpt2", [](nlohmann::json& j) { j["added_tokens"].push_back(j["added_tokens"].back()); }),
                 "added_tokens[", "listed twice");
  expect_refusal(edited("llama2", [](nlohmann::json& j) {
                   nlohmann::json d = j["decoder"];
                   for (int i = 0; i < 40; ++i) d = {{"type", "Sequence"}, {"decoders", {d}}};
                   j["decoder"] = d;
                 }),
                 "decoder.decoders[0]", "nested more than 16 deep");
  std::string bad = ref.scratch / "not_json.json";
  cadre::test::write_text(bad, "{\"model\": ");
  EXPECT_THROW(cadre::HfTokenizer{bad}, cadre::ConfigError);
}

TEST(HfTokenizer, UnicodeTableAgreesWithOnigurumaSpotChecks) {
  using namespace cadre::detail;
  EXPECT_TRUE(is_letter(U'A') && is_letter(U'ß') && is_letter(U'東') && is_letter(U'ه'));
  EXPECT_TRUE(is_number(U'7') && is_number(U'٣') && is_number(U'Ⅻ') && is_number(U'²'));
  EXPECT_FALSE(is_letter(U'😀') || is_number(U'😀') || is_white_space(U'😀'));
  EXPECT_TRUE(is_white_space(0x85) && is_white_space(0x3000) && !is_white_space(0x200B) && !is_white_space(0x1C));
  // Assigned in Unicode 15 and 16, which tokenizers' Oniguruma knows and Python 3.11's does not.
  EXPECT_TRUE(is_letter(0x1C89) && is_letter(0x10D4A) && is_letter(0x31350));
}
