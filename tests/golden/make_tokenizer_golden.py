#!/usr/bin/env python3
"""Makes the golden vectors that hold hotswap's tokenizer (model_loader/tokenizer/) against the
Hugging Face `tokenizers` package, which nobody here wrote.

Run it from a virtual environment OUTSIDE the repository, never in CI (nothing is downloaded
from a model hub: each tokenizer is trained here on a small corpus):

    python3 -m venv /opt/hotswap-golden-venv
    /opt/hotswap-golden-venv/bin/pip install tokenizers
    /opt/hotswap-golden-venv/bin/python tests/golden/make_tokenizer_golden.py

For each of four configurations it writes tests/golden/tokenizer/<name>/tokenizer.json and
golden.json (the ids of every test string with and without special tokens, and the decoded
text with and without them):
  - gpt2:         byte-level BPE, GPT-2's byte-level pre-tokenizer regex, no normalizer;
  - llama3:       Llama-3's split regex (digits in runs of 1-3), byte-level, ignore_merges, a
                  template that adds <|begin_of_text|>;
  - qwen2:        NFC normalizer, Qwen2's split regex (single digits), byte-level;
  - sentencepiece: Llama-2 / Mistral as transformers exports them: normalizer Prepend("▁") +
                  Replace(" ", "▁"), no pre-tokenizer, BPE with byte fallback over <0x00>..<0xFF>,
                  decoder Replace + ByteFallback + Fuse + Strip, a template that adds <s>.
"""

import json
import os
import sys
import unicodedata

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tokenizer")

GPT2_PATTERN = None  # the ByteLevel pre-tokenizer's own (use_regex=True)
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# What the tokenizers are trained on: enough English for merges that matter, some accents.
TRAIN = [
    "The quick brown fox jumps over the lazy dog. It's what they've said they'd do.",
    "We'll see; I'm sure you're right, and it isn't the first time.",
    "Weights are pushed from the trainer into the inference engine every few minutes.",
    "In reinforcement learning the policy generates rollouts, and the trainer updates it.",
    "Café, naïve, résumé, façade, jalapeño: accents are common in borrowed words.",
    "Numbers: 1234567890, 3.14159, 2026-12-01, 42 and 1000000.",
    "def main():\n    return 0\n\n\nif __name__ == '__main__':\n    main()\n",
    "Tabs\tand  double  spaces   and\nnewlines\r\nmatter too.",
] * 20

# What the golden ids are taken of: every class of text the tokenizer must split alike.
TESTS = [
    "Hello world",
    " leading space and trailing space ",
    "It's, they're, we've, I'm, you'll, he'd, IT'S, They'RE",
    "Café naïve résumé",
    "e\u0301 (e + combining acute) and \u00e9 (precomposed), A\u030a\u212b",
    "日本語のテキストと中文文本，한국어",
    "emoji 😀👍🏽 and a family 👨\u200d👩\u200d👧\u200d👦 and a flag 🇫🇷",
    "digits 1 12 123 1234 12345 3.14159 0007",
    "spaces:  two,   three,    four;\ttab\t\ttabs",
    "lines\nnew\n\nblank\r\ncrlf\n   \n  indented",
    "   ",
    "",
    "a",
    "special <|endoftext|> inside<|endoftext|>text",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|>Hello<|eot_id|>",
    "<s> and </s> and <unk> as text",
    "Mixed: café 日本 😀 123 it's\n\tend",
    "ÿ\u0000\u007f control \u0001 chars",
    "\u00a0non-breaking\u2003em space\u3000ideographic",
    "The quick brown fox jumps over the lazy dog.",
    "what they've said they'd do",
    "déjà vu, Ångström, Zoë, Œuvre",
    "∑ math ≤ ≥ ∞ → arrows ←",
    "hotswap swaps weights: hotswap, hotswapped",
]


def train_byte_level(pattern, normalizer, specials, ignore_merges, vocab_size=600):
    model = models.BPE(ignore_merges=ignore_merges) if ignore_merges else models.BPE()
    tok = Tokenizer(model)
    if normalizer is not None:
        tok.normalizer = normalizer
    if pattern is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
            ]
        )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TRAIN, trainer)
    return tok


def sentencepiece_style():
    # Train a BPE over the metaspace alphabet, then lay out the vocabulary as Llama-2 does:
    # <unk>, <s>, </s>, the 256 byte tokens, then the learned pieces.
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tok.train_from_iterator(TRAIN, trainer)
    spec = json.loads(tok.to_str())
    learned = sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for piece, _ in learned:
        if piece not in vocab:
            vocab[piece] = len(vocab)
    spec["model"]["vocab"] = vocab
    spec["model"]["byte_fallback"] = True
    spec["model"]["fuse_unk"] = True
    spec["pre_tokenizer"] = None
    spec["added_tokens"] = [
        {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for c, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))
    ]
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)]
    )
    return tok


def build():
    gpt2 = train_byte_level(None, None, ["<|endoftext|>"], False)
    llama3 = train_byte_level(
        LLAMA3_PATTERN, None, ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], True
    )
    # A word in the vocabulary that no merge sequence reaches: with ignore_merges it is one
    # token, without it BPE would split it (the golden ids tell the two apart).
    spec = json.loads(llama3.to_str())
    spec["model"]["vocab"]["Ġhotswap"] = len(spec["model"]["vocab"]) + len(spec["added_tokens"])
    llama3 = Tokenizer.from_str(json.dumps(spec))
    bos = llama3.token_to_id("<|begin_of_text|>")
    llama3.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A",
        pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", bos)],
    )
    qwen2 = train_byte_level(
        QWEN2_PATTERN, normalizers.NFC(), ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], False
    )
    return {"gpt2": gpt2, "llama3": llama3, "qwen2": qwen2, "sentencepiece": sentencepiece_style()}


def main():
    for name, tok in build().items():
        folder = os.path.join(OUT, name)
        os.makedirs(folder, exist_ok=True)
        tok.save(os.path.join(folder, "tokenizer.json"), pretty=True)
        cases = []
        for text in TESTS:
            with_special = tok.encode(text, add_special_tokens=True).ids
            without = tok.encode(text, add_special_tokens=False).ids
            cases.append(
                {
                    "text": text,
                    "ids": with_special,
                    "ids_without_special_tokens": without,
                    "decoded": tok.decode(with_special, skip_special_tokens=False),
                    "decoded_skipping_special_tokens": tok.decode(with_special, skip_special_tokens=True),
                    "decoded_without_special_tokens": tok.decode(without, skip_special_tokens=False),
                }
            )
        with open(os.path.join(folder, "golden.json"), "w", encoding="utf-8") as f:
            json.dump(
                {"tokenizers_version": tokenizers.__version__, "made_by": "tests/golden/make_tokenizer_golden.py",
                 "cases": cases},
                f, ensure_ascii=False, indent=1,
            )
        lossless = sum(c["decoded_without_special_tokens"] == c["text"] for c in cases)
        print(f"{name}: vocab {tok.get_vocab_size()}, {len(cases)} cases, decode(encode(s)) == s on {lossless}")


if __name__ == "__main__":
    sys.exit(main())
