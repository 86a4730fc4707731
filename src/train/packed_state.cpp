// Packing a rank's staged state into one buffer, and moving it between ranks (packed_state.h).
#include "train/packed_state.h"

#include <ATen/ATen.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "ckpt/manifest.h"
#include "core/error.h"
#include "train/checkpointing.h"

namespace cadre {
namespace {

int64_t words_for(size_t bytes) { return int64_t((bytes + 7) / 8); }

std::string header_text(const PackedState& s) {
  nlohmann::json pieces = nlohmann::json::array();
  for (const SnapshotPiece& p : s.pieces)
    pieces.push_back({{"tensor", p.tensor}, {"dtype", p.dtype}, {"shape", p.shape}, {"offsets", p.box.offsets},
                      {"sizes", p.box.sizes}, {"offset", p.offset}});
  return nlohmann::json{{"step", s.step},
                        {"owner", s.owner},
                        {"world", s.world},
                        {"stage", s.stage},
                        {"data_position", s.data_position},
                        {"optimizer_steps", s.optimizer_steps},
                        {"micro_batches", s.micro_batches},
                        {"record", s.record},
                        {"pieces", pieces}}
      .dump();
}

// The header as received: every piece must be a box inside its tensor, of a known dtype, and
// lie inside the `bytes` that come with it.
PackedState parse_header(const std::string& text, int64_t bytes, const std::string& from) {
  PackedState s;
  try {
    const nlohmann::json h = nlohmann::json::parse(text);
    s.step = h.at("step").get<int64_t>();
    s.owner = h.at("owner").get<int>();
    s.world = h.at("world").get<int>();
    s.stage = h.at("stage").get<int>();
    CADRE_CHECK(s.stage >= 0, "negative pipeline stage ", s.stage);
    s.data_position = h.at("data_position").get<int64_t>();
    s.optimizer_steps = h.at("optimizer_steps").get<int64_t>();
    s.micro_batches = h.at("micro_batches").get<int64_t>();
    s.record = h.at("record").get<std::string>();
    for (const auto& p : h.at("pieces")) {
      SnapshotPiece piece{p.at("tensor").get<std::string>(), p.at("dtype").get<std::string>(),
                          p.at("shape").get<std::vector<int64_t>>(),
                          Box{p.at("offsets").get<std::vector<int64_t>>(), p.at("sizes").get<std::vector<int64_t>>()},
                          p.at("offset").get<size_t>()};
      CADRE_CHECK(box_fits(piece.box, piece.shape), "piece of '", piece.tensor, "' ", box_text(piece.box),
                  " is outside its tensor");
      const size_t n = snapshot_piece_bytes(piece);  // throws on an unknown dtype
      CADRE_CHECK(piece.offset <= size_t(bytes) && n <= size_t(bytes) - piece.offset, "piece of '", piece.tensor,
                  "' lies outside the ", bytes, " bytes sent");
      s.pieces.push_back(std::move(piece));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(str("in-memory state from ", from, ": bad header (", e.what(), ")"));
  } catch (const Error& e) {
    throw Error(str("in-memory state from ", from, ": ", e.what()));
  }
  return s;
}

}  // namespace

PackedState pack_state(Snapshot& staged, FSDPModule& model, Optimizer& optimizer, int rank, int world,
                       PackedScalars scalars) {
  staged.clear();
  stage_train_state(staged, model, optimizer, rank);
  staged.finish();  // copies from a device, if any
  PackedState s;
  s.step = scalars.step;
  s.owner = rank;
  s.world = world;
  s.stage = scalars.stage;
  s.data_position = scalars.data_position;
  s.optimizer_steps = scalars.optimizer_steps;
  s.micro_batches = scalars.micro_batches;
  s.record = std::move(scalars.record);
  s.bytes = at::empty({words_for(staged.size())}, at::kLong);
  char* base = static_cast<char*>(s.bytes.data_ptr());
  for (const SnapshotPiece& p : staged.pieces()) {
    std::memcpy(base + p.offset, staged.data(p), snapshot_piece_bytes(p));
    s.pieces.push_back(p);
  }
  staged.release_pages();
  return s;
}

PackedSend::PackedSend(const PackedState& state, comm::Communicator& group, int root) {
  const std::string text = header_text(state);
  header_ = at::zeros({words_for(text.size())}, at::kLong);
  std::memcpy(header_.data_ptr(), text.data(), text.size());
  sizes_ = at::tensor({int64_t(text.size()), state.bytes.numel()}, at::kLong);
  works_.push_back(group.broadcast_async(sizes_, root));
  works_.push_back(group.broadcast_async(header_, root));
  works_.push_back(group.broadcast_async(state.bytes, root));
}

void PackedSend::wait() {
  for (comm::Work& w : works_) w.wait();
  works_.clear();
}

PackedState receive_packed(comm::Communicator& group, int root) {
  at::Tensor sizes = at::empty({2}, at::kLong);
  group.broadcast(sizes, root);
  const int64_t text_bytes = sizes[0].item<int64_t>(), words = sizes[1].item<int64_t>();
  const std::string from = str("rank ", root, " of group '", group.name(), "'");
  CADRE_CHECK(text_bytes > 0 && text_bytes < (int64_t{1} << 30) && words >= 0, "in-memory state from ", from,
              ": bad sizes ", text_bytes, ", ", words);
  at::Tensor header = at::empty({words_for(size_t(text_bytes))}, at::kLong);
  group.broadcast(header, root);
  PackedState s = parse_header(std::string(static_cast<const char*>(header.data_ptr()), size_t(text_bytes)),
                               words * 8, from);
  s.bytes = at::empty({words}, at::kLong);
  group.broadcast(s.bytes, root);
  return s;
}

}  // namespace cadre
