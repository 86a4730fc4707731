// How an export splits tensors into files and sizes its files, against what transformers and
// huggingface_hub do (their rules restated here, the examples worked by hand):
// - tensors fill a file in order until the next would pass the maximum; one larger than the
//   maximum goes alone and the file being filled carries on after it; one file is
//   model.safetensors, several are model-0000k-of-0000n.safetensors;
// - --max-shard-size as transformers' convert_file_size_to_int reads it;
// - the index lists each tensor once, with total_size the tensors' bytes;
// - a streamed safetensors file must receive exactly the bytes its header lists.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "ckpt/hf_export.h"
#include "ckpt/hf_shard_plan.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "support/process.h"

namespace {

std::vector<std::vector<size_t>> groups(const std::vector<cadre::HfShardFile>& files) {
  std::vector<std::vector<size_t>> out;
  for (const auto& f : files) out.push_back(f.tensors);
  return out;
}

TEST(HfShardPlan, FillsFilesInOrderAndGivesALargeTensorAFileOfItsOwn) {
  // 40 + 50 fit 100; 30 would pass it; 250 is alone; 30 + 60 fit; 20 starts a new file.
  const auto files = cadre::hf_shard_plan({40, 50, 30, 250, 60, 20}, 100);
  EXPECT_EQ(groups(files), (std::vector<std::vector<size_t>>{{0, 1}, {3}, {2, 4}, {5}}));
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(files[0].name, "model-00001-of-00004.safetensors");
  EXPECT_EQ(files[3].name, "model-00004-of-00004.safetensors");
  EXPECT_EQ(files[1].bytes, 250u);
  const auto one = cadre::hf_shard_plan({40, 60}, 100);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].name, "model.safetensors");

  const auto index = nlohmann::json::parse(cadre::hf_index_json(files, {"a", "b", "c", "d", "e", "f"}, 112));
  EXPECT_EQ(index["metadata"]["total_size"], 450);
  EXPECT_EQ(index["metadata"]["total_parameters"], 112);
  EXPECT_EQ(index["weight_map"].size(), 6u);
  EXPECT_EQ(index["weight_map"]["c"], "model-00003-of-00004.safetensors");
  EXPECT_TRUE(cadre::hf_is_weights_file("model-00003-of-00004.safetensors"));
  EXPECT_TRUE(cadre::hf_is_weights_file("model.safetensors.index.json"));
  EXPECT_FALSE(cadre::hf_is_weights_file("tokenizer.json"));
  EXPECT_FALSE(cadre::hf_is_weights_file("model-1-of-2.safetensors"));
}

TEST(HfShardPlan, MaxShardSizeReadsAsTransformersReadsIt) {
  EXPECT_EQ(cadre::hf_parse_size("100MB"), 100'000'000u);
  EXPECT_EQ(cadre::hf_parse_size("100MiB"), 100u << 20);
  EXPECT_EQ(cadre::hf_parse_size("5GB"), 5'000'000'000u);
  EXPECT_EQ(cadre::hf_parse_size("2gib"), uint64_t{2} << 30);
  EXPECT_EQ(cadre::hf_parse_size("100kB"), 100'000u);
  EXPECT_EQ(cadre::hf_parse_size("8Mb"), 1'000'000u) << "a lowercase b is bits, as in transformers";
  EXPECT_EQ(cadre::hf_parse_size("4096"), 4096u);
  for (const char* bad : {"1.5GB", "GB", "-5MB", "5 GB", "5XB", "0MB", ""}) {
    try {
      cadre::hf_parse_size(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const cadre::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--max-shard-size"), std::string::npos) << e.what();
    }
  }
}

TEST(HfShardPlan, AStreamedFileMustReceiveExactlyTheBytesItsHeaderLists) {
  cadre::test::TempDir dir("safetensors-stream");
  const std::vector<cadre::SafetensorsTensor> list = {{"a", at::kBFloat16, {3, 2}}, {"b", at::kFloat, {4}}};
  {
    cadre::SafetensorsWriter short_of(dir / "short.safetensors", list, {});
    short_of.write(std::vector<char>(12).data(), 12);
    EXPECT_THROW(short_of.finish(), cadre::Error);
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "short.safetensors")) << "nothing published";
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "no temporary left behind";
  cadre::SafetensorsWriter over(dir / "over.safetensors", list, {});
  EXPECT_THROW(over.write(std::vector<char>(29).data(), 29), cadre::Error);

  const at::Tensor a = at::arange(6, at::kFloat).reshape({3, 2}).to(at::kBFloat16), b = at::arange(4, at::kFloat);
  cadre::SafetensorsWriter writer(dir / "t.safetensors", list, {{"format", "pt"}});
  writer.write(a.data_ptr(), 12);
  writer.write(b.data_ptr(), 16);
  writer.finish();
  const auto back = cadre::safetensors_read(dir / "t.safetensors");
  EXPECT_TRUE(at::equal(back.at("a"), a));
  EXPECT_TRUE(at::equal(back.at("b"), b));
}

}  // namespace
