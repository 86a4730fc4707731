// `fuzz_seeds DIR`: writes the fuzzers' seed corpora from real files, made by Cadre's own
// writers (token shards, dataset manifests, a committed checkpoint, safetensors, store
// protocol exchanges), one directory per fuzz target. Configs and etcd answers come from
// configs/ and tests/fuzz/corpus/ (captured from etcd 3.4).
#include <ATen/ATen.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_saver.h"
#include "ckpt/safetensors.h"
#include "core/file_util.h"
#include "data/manifest.h"
#include "data/token_shard.h"
#include "store/auth.h"
#include "store/session.h"
#include "store/wire.h"

namespace fs = std::filesystem;
using namespace cadre;

namespace {

void put(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

void token_shards(const fs::path& out) {
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 200; ++i) tokens.push_back((i * 7919) % 512);
  shard_write((out / "u16.bin").string(), tokens, 2);
  tokens.push_back(1u << 20);
  shard_write((out / "u32.bin").string(), tokens, 4);
}

void dataset_manifests(const fs::path& out, const fs::path& scratch) {
  DatasetManifest tokens;
  tokens.tokenizer = "tokenizer.model";
  tokens.vocab_size = 512;
  tokens.seq_len = 64;
  tokens.bos_id = 1;
  tokens.eos_id = 2;
  tokens.documents = 10;
  tokens.tokens = 6500;
  tokens.train = {{"train_00000.bin", 90, 1234567890123ull}, {"train_00001.bin", 8, 42}};
  tokens.val = {{"val_00000.bin", 2, 7}};
  DatasetManifest images;
  images.kind = "images";
  images.channels = 1;
  images.height = images.width = 28;
  images.num_classes = 10;
  images.pixel_mean = 0.1307;
  images.pixel_std = 0.3081;
  images.train = {{"train_00000.bin", 60000, 99}};
  images.val = {{"val_00000.bin", 10000, 98}};
  DatasetManifest encoded;
  encoded.kind = "encoded_images";
  encoded.channels = 3;
  encoded.num_classes = 2;
  encoded.classes = {"cat", "dog"};
  encoded.skipped = 1;
  encoded.train = {{"train_00000.enc", 900, 97}};
  encoded.val = {{"val_00000.enc", 100, 96}};
  for (const auto& [name, m] : {std::pair<std::string, DatasetManifest>{"tokens.json", tokens}, {"images.json", images},
                                {"encoded_images.json", encoded}}) {
    fs::create_directories(scratch / name);
    manifest_write((scratch / name).string(), m);
    put(out, name, file_read((scratch / name / "manifest.json").string()));
  }
}

// A committed checkpoint written by the real saver (one rank, a tensor in two pieces).
void checkpoint(const fs::path& out, const fs::path& scratch) {
  const fs::path dir = scratch / "ckpt";
  {
    CheckpointSaver saver({dir.string(), 0, 1, 3, /*async=*/false}, [](bool ok) { return ok; });
    Snapshot& snap = saver.stage();
    std::vector<float> values(30);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
    // "model.w" as two blocks of columns (a tensor-parallel split), the others whole.
    std::memcpy(snap.add({"model.w", "float32", {6, 5}, Box{{0, 0}, {6, 2}}, 0}), values.data(), 12 * sizeof(float));
    std::memcpy(snap.add({"model.w", "float32", {6, 5}, Box{{0, 2}, {6, 3}}, 0}), values.data() + 12, 18 * sizeof(float));
    std::memcpy(snap.add({"model.b", "float32", {7}, box_whole({7}), 0}), values.data(), 7 * sizeof(float));
    uint8_t rng[16] = {1, 2, 3};
    std::memcpy(snap.add({"rng.cpu.rank0", "uint8", {16}, box_whole({16}), 0}), rng, 16);
    CheckpointManifest header;
    header.step = 20;
    header.world_size = 1;
    header.strategy = "FULL_SHARD";
    header.state = {{"data_position", 240}, {"optimizer_steps", 20}};
    header.config_yaml = "model:\n  arch: llama\n";
    saver.submit(header);
    saver.wait();
  }
  const fs::path step = dir / checkpoint_name(20);
  put(out, "manifest.json", file_read((step / kManifestFile).string()));
  put(out, "COMMITTED", file_read((step / kCommittedFile).string()));
}

void safetensors(const fs::path& out) {
  safetensors_write((out / "model.safetensors").string(),
                    {{"model.embed_tokens.weight", at::arange(24, at::kFloat).view({4, 6})},
                     {"model.norm.weight", at::ones({6}, at::kBFloat16)},
                     {"step", at::full({1}, 7, at::kLong)}},
                    {{"format", "pt"}});
}

// Byte streams the way a peer sends them: the client's proof (side 0), authenticated request
// frames for every operation (side 1), and a server's greeting, verdict and replies (side 2).
void store_protocol(const fs::path& out) {
  using namespace cadre::store;
  const std::string secret = "fuzz-job-secret-0123456789";
  const std::string ns(kNonceBytes, 's'), nc(kNonceBytes, 'c');
  std::string proof;
  frame_append(proof, proof_encode(nc, auth_proof(secret, Role::Client, ns, nc)));
  put(out, "handshake", std::string(1, '\0') + proof);
  std::string requests;
  auto req = [&](Op op, std::vector<std::string> keys, std::string value = "", std::string desired = "",
                 int64_t delta = 0, uint32_t wait_ms = 0) {
    Request r;
    r.op = op;
    r.keys = std::move(keys);
    r.value = std::move(value);
    r.desired = std::move(desired);
    r.delta = delta;
    r.wait_ms = wait_ms;
    frame_append(requests, request_encode(r));
  };
  req(Op::Set, {"cadre/none/g0/round"}, "0");
  req(Op::Get, {"cadre/none/g0/round"});
  req(Op::Add, {"cadre/none/g0/r0/joined"}, "", "", 1);
  req(Op::CompareSet, {"cadre/none/g0/r0/closed"}, "", "1 0");
  req(Op::Check, {"a", "cadre/none/g0/round"});
  req(Op::Wait, {"cadre/none/g0/round"}, "", "", 0, 10);
  req(Op::Delete, {"a"});
  req(Op::NumKeys, {});
  req(Op::Ping, {});
  put(out, "requests", std::string(1, '\1') + requests);
  std::string server;
  frame_append(server, hello_encode(ns));
  frame_append(server, verdict_encode(true, auth_proof(secret, Role::Server, nc, ns)));
  frame_append(server, reply_encode({Status::Ok, "0", 0}));
  frame_append(server, reply_encode({Status::NotFound, "", 0}));
  frame_append(server, reply_encode({Status::Failed, "add: not an integer", 0}));
  put(out, "server", std::string(1, '\2') + server);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_seeds DIR\n";
    return 2;
  }
  const fs::path out = argv[1], scratch = out / ".scratch";
  try {
    remove_tree(scratch);
    for (const char* t : {"token_shard", "safetensors_header"}) fs::create_directories(out / t);
    token_shards(out / "token_shard");
    dataset_manifests(out / "dataset_manifest", scratch);
    checkpoint(out / "checkpoint_manifest", scratch);
    safetensors(out / "safetensors_header");
    store_protocol(out / "store_protocol");
    remove_tree(scratch);
  } catch (const std::exception& e) {
    std::cerr << "fuzz_seeds: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
