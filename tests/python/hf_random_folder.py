"""Writes a Hugging Face Llama folder with random weights, with the real `transformers`
(LlamaForCausalLM(config).save_pretrained), for loading tests:

  hf_random_folder.py <out_dir> <dim> <layers> <heads> <kv_heads> <ffn> <vocab> <max_shard_size> [tied [theta]]

bfloat16, untied head (`tied`: the head is the embedding, as Llama 3.2 1B), RoPE theta 10000
(or `theta`), 256 positions, every tensor random (norm scales too, so a loader that leaves the
model's own initialisation in place is caught), split into files of at most max_shard_size
(e.g. "200MB") with model.safetensors.index.json when it takes more than one.
"""
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    out_dir, dim, layers, heads, kv, ffn, vocab, max_shard = sys.argv[1:9]
    tied = len(sys.argv) > 9 and sys.argv[9] == "tied"
    theta = float(sys.argv[10]) if len(sys.argv) > 10 else 10000.0
    config = LlamaConfig(hidden_size=int(dim), intermediate_size=int(ffn), num_hidden_layers=int(layers),
                         num_attention_heads=int(heads), num_key_value_heads=int(kv), vocab_size=int(vocab),
                         max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=tied,
                         rope_parameters={"rope_type": "default", "rope_theta": theta},
                         bos_token_id=1, eos_token_id=2, hidden_act="silu")
    torch.manual_seed(7)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model = model.to_empty(device="cpu").to(torch.bfloat16)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape))
            else:
                p.copy_(0.02 * torch.randn(p.shape))
    model.save_pretrained(out_dir, max_shard_size=max_shard, safe_serialization=True)


if __name__ == "__main__":
    main()
