"""Reference side of tests/train/instruction_training_test.cpp: transformers' loss with -100
labels on instruction data Cadre prepared, over the same weights:

  sft_loss_ref.py tokenizer <dir>          hf_chat_folder.py's Llama 3-style tokenizer.json and
                                           Llama 3.1's chat template, written into <dir>
  sft_loss_ref.py loss <hf_dir> <data_dir> prints {"loss32", "loss64", "learned"} as JSON

`loss` reads Cadre's train split without Cadre's code (manifest.json; each shard a 64-byte
header - magic, version, token width, count, checksum - then little-endian ids; the labels
shard beside it holds the id where it is learned and one of the values above every id where
not: prompt top - 1, padding top, and in packed data a document's first token top - 2), gives
every window to LlamaForCausalLM with labels = -100 where nothing is learned, and prints the
loss transformers returns (its mean over every learned target of the batch) in float32 (the
folder's weights as float32, as Cadre trains them) and in float64 (the judge). A packed split
(manifest `packing: documents`) is cut back into its documents first, each given to the model
alone (right-padded, positions from 0): the unpacked computation that packing must equal.
"""
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def write_tokenizer(out_dir):
    import hf_chat_folder  # noqa: E402 (imports transformers and tokenizers)
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "third_party", "chat_templates", "llama-3.1-instruct.jinja")) as f:
        hf_chat_folder.write_tokenizer(out_dir, f.read())


def read_shard(path, per):
    with open(path, "rb") as f:
        head = f.read(64)
        assert head[:8] == b"CADRETOK", f"{path}: not a Cadre token shard"
        _version, width, count, _checksum = struct.unpack("<IIQQ", head[8:32])
        values = np.frombuffer(f.read(), dtype="<u2" if width == 2 else "<u4")
    assert values.size == count and count % per == 0, f"{path}: {values.size} values, header {count}"
    return values.astype(np.int64).reshape(-1, per), (1 << (8 * width)) - 1


def unpack(tokens, values, top):
    """Packed windows cut at their document starts (top - 2) into one row per document, right-
    padded with -100 labels; a window's padding tail (nothing learned) is left out."""
    docs = []
    for window, codes in zip(tokens, values):
        starts = list(np.flatnonzero(codes == top - 2)) + [len(codes)]
        for first, end in zip(starts, starts[1:]):
            labels = np.where(codes[first:end] >= top - 2, -100, codes[first:end])
            if (labels != -100).any():
                docs.append((window[first:end], labels))
    width = max(len(t) for t, _ in docs)
    tokens_out = np.zeros((len(docs), width), dtype=np.int64)
    labels_out = np.full((len(docs), width), -100, dtype=np.int64)
    for i, (t, l) in enumerate(docs):
        tokens_out[i, :len(t)], labels_out[i, :len(l)] = t, l
    return tokens_out, labels_out


def train_split(data_dir):
    with open(os.path.join(data_dir, "manifest.json")) as f:
        manifest = json.load(f)
    per = manifest["seq_len"] + 1
    tokens, labels = [], []
    for entry, label_entry in zip(manifest["train"], manifest["train_labels"]):
        window_tokens = read_shard(os.path.join(data_dir, entry["file"]), per)[0]
        values, top = read_shard(os.path.join(data_dir, label_entry["file"]), per)
        if manifest.get("packing") == "documents":
            window_tokens, values = unpack(window_tokens, values, top)
        tokens.append(window_tokens)
        labels.append(np.where(values >= top - 2, -100, values))  # the codes: nothing learned there
    width = max(t.shape[1] for t in tokens)
    tokens = [np.pad(t, ((0, 0), (0, width - t.shape[1]))) for t in tokens]
    labels = [np.pad(l, ((0, 0), (0, width - l.shape[1])), constant_values=-100) for l in labels]
    return torch.from_numpy(np.concatenate(tokens)), torch.from_numpy(np.concatenate(labels))


def loss(hf_dir, data_dir):
    from transformers import LlamaForCausalLM
    tokens, labels = train_split(data_dir)
    assert bool((labels[labels != -100] == tokens[labels != -100]).all()), "a learned label is not its token"
    out = {"learned": int((labels[:, 1:] != -100).sum())}
    for name, dtype in (("loss32", torch.float32), ("loss64", torch.float64)):
        model = LlamaForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).to(dtype).eval()
        with torch.no_grad():
            out[name] = float(model(input_ids=tokens, labels=labels).loss)
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "tokenizer":
        write_tokenizer(sys.argv[2])
    else:
        loss(sys.argv[2], sys.argv[3])
