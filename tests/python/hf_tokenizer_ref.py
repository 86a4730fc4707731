"""Reference side of tests/data/hf_tokenizer_test.cpp: trains small byte-level BPE tokenizers
with the `tokenizers` library (project venv), writes their tokenizer.json files and, for a
corpus of edge cases, what tokenizers encodes and decodes, into <dir>/expected.json.

Usage: hf_tokenizer_ref.py <dir>
       hf_tokenizer_ref.py <tokenizer.json> --bench <text file> [<ids out>]
Cases are bytes (hex), since some are invalid UTF-8: Python cannot hand those to tokenizers, so
the expectation is for bytes.decode("utf-8", "replace"), the repair HfTokenizer documents.
"""
import json
import os
import sys
import time

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")

TRAIN = [
    "The quick brown fox jumps over the lazy dog. It's 2024, isn't it? We'll see; they've gone.",
    "DON'T SHOUT! I'M HERE, YOU'RE THERE, WE'VE WON, SHE'LL GO, HE'D SAY.",
    "Le cœur a ses raisons que la raison ne connaît point. Ça va très bien, merci.",
    "Der Straßenverkehr in München ist übermäßig. Größe, Maß, Fuß.",
    "Быстрая коричневая лиса перепрыгивает через ленивую собаку.",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.",
    "مرحبا بالعالم، هذه جملة عربية للاختبار.",
    "नमस्ते दुनिया, यह हिंदी में एक वाक्य है।",
    "Emoji: 😀😃🎉 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ done.",
    "Numbers 1234567890 3.14159 1,000,000 and ١٢٣ and ５６７ and Ⅻ ².",
    "def main():\n\tif x == 1:\n\t\treturn {'a': [1, 2, 3]}\r\n    pass  # comment\n\n\n",
    "    leading spaces, trailing spaces    \n  \t \u00a0 \u3000 mixed whitespace\u2028line",
    "URLs: https://example.com/path?q=1&r=2 — email: someone@example.org; ~/.cache/*.json",
] * 4
SPECIALS = ["<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]

CASES = [
    "", " ", "  ", "a", " a", "a ", "\n", "\r\n", "\t", "hello world", "Hello  World", "hello   world  ",
    "It's DON'T I'M YOU'RE WE'VE SHE'LL HE'D it's don't 's 'S 'x ''s '\u017fs",
    "1 12 123 1234 12345 123456789 3.14 ١٢٣٤٥ ５６７８ Ⅻ² ½",
    "東京は日本の首都です。北京是中国的首都。",
    "서울은 한국의 수도입니다. ひらがなカタカナ",
    "مرحبا بالعالم، هذه جملة عربية.",
    "नमस्ते दुनिया, यह हिंदी है।",
    "😀😃🎉 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷",
    "line1\nline2\r\nline3\n\n\nline4\r\r\n  \n  x",
    "\t\tindented\n    code();\n\t \t mixed",
    "trailing   \n", "   ", " \n ", "a\u00a0b\u3000c\u2028d\u0085e",
    "<|endoftext|>", "text<|endoftext|>more", "a <|eot_id|> b", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<|endoftext", "<|endoftext|><|endoftext|>", " <|endoftext|> ",
    "[MASK] x [MASK]y z[MASK] w", "hello <WORD> there<WORD>x", "a   <TRIM>   b", "sun flower sunflower sun",
    "punctuation!!! ??? ... --- ((())) \"quoted\" 'single'",
    "https://example.com/a?b=c&d=e",
    "Größe Straße cœur Ça ÜBER",
    "ﬁ ﬆ ſ İ ǅ Ⓐ ㈱",
    "\u200b\u200c\u200d\ufeff zero widths",
    "\U00010d4a\u1c89\U00031350 new letters",
    "x" * 300,
    "cafe\u0301 Cafe\u0301 A\u030a \u212b \u2126 \u0958 a\u0323\u0302 a\u0302\u0323 \u0344 \u1100\u1161\u11a8 \uac00\u11a8",
    " ".join(["word"] * 50),
]
INVALID = [b"abc\xffdef", b"\xc3(", b"\xe2\x82", b"ok\xf0\x9f\x98", b"\xed\xa0\x80x", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80\x80 tail"]


def train(pretok, ignore_merges=False, vocab_size=700):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pretok
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN, trainer)
    return tok


def add_user_tokens(tok):
    from tokenizers import AddedToken
    tok.add_tokens([AddedToken("[MASK]", single_word=True), AddedToken("<WORD>", normalized=False),
                    AddedToken("<TRIM>", lstrip=True, rstrip=True), AddedToken("sun", single_word=True)])
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True)])


def template(tok, bos):
    return processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])


def build(out):
    files = {}
    gpt2 = train(pre_tokenizers.ByteLevel(add_prefix_space=False))
    add_user_tokens(gpt2)
    gpt2.post_processor = processors.ByteLevel(trim_offsets=False)
    files["gpt2"] = gpt2
    prefix = Tokenizer.from_str(gpt2.to_str())
    prefix.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    prefix.post_processor = template(prefix, "<|endoftext|>")
    files["gpt2_prefix"] = prefix
    split = lambda pattern: pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    llama3 = train(split(LLAMA3), ignore_merges=True)
    add_user_tokens(llama3)
    llama3.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False),
                                                 template(llama3, "<|begin_of_text|>")])
    files["llama3"] = llama3
    qwen2 = train(split(QWEN2))
    qwen2.normalizer = normalizers.NFC()  # as Qwen 2.5's tokenizer.json has
    files["qwen2"] = qwen2
    files["llama2"] = sentencepiece_style(metaspace=False)
    files["llama2_unk"] = sentencepiece_style(metaspace=False, byte_tokens=False)
    files["metaspace"] = sentencepiece_style(metaspace=True)
    for name, tok in files.items():
        tok.save(os.path.join(out, f"{name}.json"))
    # The older "a b" string form of merges, in a copy of gpt2.json.
    j = json.load(open(os.path.join(out, "gpt2.json"), encoding="utf-8"))
    j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    json.dump(j, open(os.path.join(out, "gpt2_string_merges.json"), "w", encoding="utf-8"), ensure_ascii=False)
    files["gpt2_string_merges"] = Tokenizer.from_file(os.path.join(out, "gpt2_string_merges.json"))
    return files


def sentencepiece_style(metaspace, byte_tokens=True):
    """Llama 2's layout (normalizer Prepend + Replace, decoders Replace, ByteFallback, Fuse,
    Strip) or Mistral's newer one (Metaspace pre-tokenizer and decoder, prepend_scheme first),
    BPE with byte fallback and a fused <unk>. Training leaves characters outside the corpus
    (and the 256 <0xXX> tokens, added to the vocabulary afterwards as Llama 2 has them) to
    byte fallback; a copy without the byte tokens exercises the fused <unk>."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
        tok.decoder = decoders.Sequence([decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=True),
                                         decoders.ByteFallback(), decoders.Fuse()])
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tok.train_from_iterator([line for line in TRAIN if "\u0645" not in line], trainer)
    add_user_tokens(tok)
    tok.post_processor = template(tok, "<s>")
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    for b in range(256 if byte_tokens else 0):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab) + 10)
    tok = Tokenizer.from_str(json.dumps(j))
    return tok


def random_cases(count=300, seed=3):
    """Random strings of units where added tokens, their stripping and single_word checks,
    whitespace kinds, marks and the pre-tokenizers interact."""
    import random
    rng = random.Random(seed)
    units = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "a", "Z", "the", "é", "e\u0301", "\u0301", "東京",
             "😀", "\u200d", "1", "12345", "\u0663", "'", "'s", "'LL", "<|endoftext|>", "<|eot_id|>", "[MASK]", "<WORD>",
             "<TRIM>", "sun", "<s>", "</s>", "\u2581", "\ufffd", "_", "\u01c5", "!?", "..."]
    return ["".join(rng.choice(units) for _ in range(rng.randint(1, 10))) for _ in range(count)]


def expectations(tok):
    cases = ([c.encode("utf-8") for c in CASES] + INVALID + [line.encode("utf-8") for line in TRAIN[:13]]
             + [c.encode("utf-8") for c in random_cases()])
    out = []
    for raw in cases:
        text = raw.decode("utf-8", "replace")
        plain = tok.encode(text, add_special_tokens=False).ids
        special = tok.encode(text, add_special_tokens=True).ids
        # Slices cut multi-byte characters, so decoding must repair as from_utf8_lossy does.
        pieces = [plain, special, plain[1:], plain[:-1], plain[::2]]
        # Streamed decoding (DecodeStream) of the ids with special tokens, both ways.
        streams = []
        for skip in (False, True):
            stream = decoders.DecodeStream(skip_special_tokens=skip)
            streams.append([stream.step(tok, i) for i in special])
        out.append({"hex": raw.hex(), "ids": plain, "ids_special": special, "stream": streams,
                    "decode": [[p, tok.decode(p, skip_special_tokens=False), tok.decode(p, skip_special_tokens=True)]
                               for p in pieces]})
    return out


GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def random_texts(count=1500, seed=7):
    """Strings over the characters where the patterns' alternatives and backtracking differ."""
    import random
    rng = random.Random(seed)
    alphabet = list(" \t\r\n'sStTrReEvVmMlLdDx\u017f\u0130\u212a9\u0663\u00b2\u2167.,!?-_\u00a0\u3000\u2028\u0085"
                    "\u200b\u200d\u0301\u0915\u093f\u6771\U0001f600\U0001f3fd\ufe0f\u1c89\u000b\u001c")
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24))) for _ in range(count)]


def scanner_expectations():
    """Pieces (UTF-8 hex) of each supported pattern, by tokenizers' own regex engine."""
    texts = random_texts() + CASES
    out = {"texts": [t.encode("utf-8").hex() for t in texts]}
    for name, pattern in (("gpt2", GPT2), ("llama3", LLAMA3), ("qwen2", QWEN2)):
        split = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
        out[name] = [[p.encode("utf-8").hex() for p, _ in split.pre_tokenize_str(t)] for t in texts]
    return out


def nfc_expectations(count=1500, seed=11):
    """NFC of random strings of starters, combining marks of several classes, Hangul jamo
    and syllables, singletons and excluded composites, by tokenizers' own NFC normalizer."""
    import random
    rng = random.Random(seed)
    alphabet = list("aeAEoOuU\u0300\u0301\u0302\u0308\u0323\u0327\u0328\u031b\u0345\u0344\u0340"
                    "\u1100\u1161\u11a8\uac00\uac01\u212b\u2126\u0958\u0915\u093c\u0b47\u0b3e"
                    "\u00e9\u1e69\u0307\u05b0\u05bc\u0e49\u3099\u304b \U0001d15e\U0001d165"
                    "\u0d3b\u1df6\u0898\U00011935\U00011930")  # marks newer than tokenizers' tables
    nfc = normalizers.NFC()
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(count)]
    return [[t.encode("utf-8").hex(), nfc.normalize_str(t).encode("utf-8").hex()] for t in texts]


def bench(tok_path, text_path, ids_path=None):
    """Encoding speed, one thread (RAYON_RS_NUM_THREADS=1), per line and batched; optionally
    writes the ids of every line (one line of ids per line of text) for comparison."""
    os.environ["RAYON_RS_NUM_THREADS"] = "1"
    tok = Tokenizer.from_file(tok_path)
    lines = open(text_path, encoding="utf-8", newline="").read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    size = sum(len(line.encode()) for line in lines)
    for label, run in (("per line", lambda: [tok.encode(line, add_special_tokens=False) for line in lines]),
                       ("encode_batch", lambda: tok.encode_batch(lines, add_special_tokens=False))):
        best = 1e9
        for _ in range(3):
            t = time.perf_counter()
            encodings = run()
            best = min(best, time.perf_counter() - t)
        print(f"tokenizers {label}: {size / best / 1e6:.2f} MB/s ({size} bytes, best of 3)")
    if ids_path:
        with open(ids_path, "w") as f:
            for e in encodings:
                f.write("".join(f"{i} " for i in e.ids) + "\n")


def main():
    if len(sys.argv) >= 4 and sys.argv[2] == "--bench":
        return bench(sys.argv[1], *sys.argv[3:5])
    out = sys.argv[1]
    files = build(out)
    result = {name: {"vocab_size": tok.get_vocab_size(with_added_tokens=True), "cases": expectations(tok)}
              for name, tok in files.items()}
    result["scanners"] = scanner_expectations()
    result["nfc"] = nfc_expectations()
    json.dump(result, open(os.path.join(out, "expected.json"), "w"))


if __name__ == "__main__":
    main()
