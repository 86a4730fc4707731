"""Writes a Hugging Face Llama 3-style chat model folder whose greedy answer is known, for
serving tests: a byte-level BPE tokenizer.json trained here with `tokenizers` (Llama 3's
pre-tokenizer pattern and special tokens, <|begin_of_text|> added by its post-processor), Llama
3.1 instruct's chat template (third_party/chat_templates), and a tiny LlamaForCausalLM
(transformers' save_pretrained) with weights set so that greedy decoding answers "Hello" and
then <|eot_id|>:

  hf_chat_folder.py <out_dir>

tokenizer_config.json's eos_token is <|end_of_text|>; only generation_config.json's eos_token_id
list also names <|eot_id|> (as Llama 3 instruct ships), so a server that stops after "Hello" read
that list. How the weights decide: one residual dimension d is never written by attention or
the MLP (their output rows for d are zero), so it carries the current token's embedding[d]: +1
for every token but "Hello", -1 for it. The final norm keeps only d, and the head maps +d to
"Hello" and -d to <|eot_id|>: after any prompt the answer is "Hello", after "Hello" <|eot_id|>.
"""
import os
import sys

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
CORPUS = ["Hello there. Hello, how are you? Say hello to the user.",
          "The assistant answers questions briefly and politely.",
          "system user assistant Cutting Knowledge Date: December 2023 Today Date: 26 Jul 2024"] * 20
ANSWER = "Hello"


def write_tokenizer(out_dir: str, template: str) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
                                                       special_tokens=[("<|begin_of_text|>", bos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
    fast.chat_template = template
    fast.save_pretrained(out_dir)
    return fast


def crafted_model(vocab: int, answer: int, eot: int) -> LlamaForCausalLM:
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=vocab, max_position_embeddings=512, rms_norm_eps=1e-5,
                         tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, hidden_act="silu")
    torch.manual_seed(11)
    model = LlamaForCausalLM(config)
    d = 0
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn(p.shape) if p.dim() == 1 else 0.02 * torch.randn(p.shape))
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[d].zero_()
            layer.mlp.down_proj.weight[d].zero_()
        model.model.embed_tokens.weight[:, d] = 1.0
        model.model.embed_tokens.weight[answer, d] = -1.0
        model.model.norm.weight.zero_()
        model.model.norm.weight[d] = 1.0
        model.lm_head.weight.zero_()
        model.lm_head.weight[answer, d] = 10.0
        model.lm_head.weight[eot, d] = -10.0
    return model


def main():
    out_dir = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "third_party", "chat_templates", "llama-3.1-instruct.jinja")) as f:
        template = f.read()
    tok = write_tokenizer(out_dir, template)
    answer, eot = tok.convert_tokens_to_ids(ANSWER), tok.convert_tokens_to_ids("<|eot_id|>")
    assert answer != tok.unk_token_id and answer is not None, f"'{ANSWER}' is not one token"
    end = tok.convert_tokens_to_ids("<|end_of_text|>")
    crafted_model(len(tok), answer, eot).save_pretrained(out_dir, safe_serialization=True)
    GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=[end, eot]).save_pretrained(out_dir)


if __name__ == "__main__":
    main()
