#!/usr/bin/env python3
"""Writes anvil's tokenizer test fixtures (tests/tokenizer/fixtures/) with the real libraries.

Run with the Python that has `tokenizers` and `tiktoken` (the pyenv python3 on PATH):

    python3 tools/tokenizer_fixtures.py [--anvil build-tok/anvil] [--llama3 PATH]
    python3 tools/tokenizer_fixtures.py --only-normalizers

Every tokenizer is trained here by Hugging Face `tokenizers` on a small corpus made from the
fortunes package, some Python standard-library source and multilingual samples, then saved in
the layout of a real model family:
  llama3_like   byte-level BPE, Llama 3 split regex + ByteLevel(use_regex=false), ignore_merges,
                BOS template, the 256 Llama 3.1 special tokens after the vocab
  gpt2_like     ByteLevel pre-tokenizer with its own regex, legacy "a b" merges, added tokens
                with lstrip / rstrip / single_word / normalized flags
  sp_like       SentencePiece-style (Llama 2 / TinyLlama / Mistral): Prepend + Replace
                normalizer, byte_fallback, unk, <s> template, Replace/ByteFallback/Fuse/Strip
  sp_metaspace  the same model behind a Metaspace(prepend_scheme=first) pre-tokenizer/decoder
  qwen2_like    byte-level BPE behind an NFC normalizer and Qwen2's split regex (single
                digits), <|endoftext|> / <|im_start|> / <|im_end|> specials; nfc.expected.json
                holds strings and their NFC form from Python's unicodedata
  norm_<form>   a tiny byte-level BPE behind each Unicode normalizer (NFC, NFD, NFKC, NFKD, and
                a Sequence of NFKD and a nonspacing-mark Replace), with texts that exercise
                compatibility characters, composition, mark ordering and Hangul; a case whose
                HF normalization differs from Python's unicodedata (HF's Unicode tables are
                older) also records the unicodedata-normalized ids under "unicode_gap"
  tiktoken      llama3_like's ranks written as a tiktoken-format tokenizer.model; expected ids
                from tiktoken.Encoding with the Llama 3 pattern and specials, split the way
                Meta's Llama 3 tokenizer.encode does (400k-char windows, 25k-char runs)
Each <name>.expected.json holds texts (or a repeat recipe for long ones), HF's or tiktoken's
ids without and with special tokens (long cases as length + FNV-1a hash), and HF's decode.
A run rewrites every fixture from scratch (HF training may differ slightly between library
versions), so commit the outputs together, and re-run with --anvil afterwards so that
anvil_trained.* and the training regression reference stay in step.

Two optional fixtures need things that are not committed:
  --anvil BINARY  runs `anvil tokenizer train` on the committed corpus, keeps its tokenizer.json
                  and records what HF `tokenizers` encodes with it (anvil_trained.*). Without the
                  binary this step is skipped and the committed files are left as they are.
  --llama3 PATH   Meta's real Llama 3 tokenizer.model (the PyPI package llama-models ships one;
                  `python3 tools/tokenizer_fixtures.py --install-llama3` fetches it into
                  ~/.cache/anvil/llama3/). Expected ids go to llama3_real.expected.json; the
                  C++ test runs only where the file is present.
"""
import argparse
import base64
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)
import tiktoken

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "tokenizer", "fixtures")
LLAMA3_CACHE = os.path.expanduser("~/.cache/anvil/llama3/tokenizer.model")

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")


def llama3_special_tokens():
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
             "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
             "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    i = 3
    while len(names) < 256:
        names.append(f"<|reserved_special_token_{i}|>")
        i += 1
    return names


MULTILINGUAL = [
    "今天天气很好，我们去公园散步吧。机器学习是人工智能的一个分支，它让计算机从数据中学习。",
    "東京は日本の首都です。ひらがなとカタカナ、そして漢字を使います。私は毎朝コーヒーを飲みます。",
    "안녕하세요, 세계! 오늘은 좋은 날입니다. 한국어 문장을 토큰화합니다.",
    "Привет, мир! Это проверка токенизатора на русском языке. Съешь же ещё этих мягких булок.",
    "مرحبا بالعالم. هذه جملة باللغة العربية لاختبار المحلل.",
    "नमस्ते दुनिया। यह हिंदी में एक परीक्षण वाक्य है।",
    "Ελληνικά: Γειά σου Κόσμε. Français : café, naïve, résumé, où est la bibliothèque ?",
    "Emoji 😀🎉👍🏽 and family 👨‍👩‍👧‍👦, math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢, rare Han 𠜎𠜱.",
    "Numbers 1234567890, 3.14159, -42, 1,000,000, 2024-01-01T12:34:56Z, ١٢٣٤.",
    "def main(argv):\n\tfor i in range(10):\n\t\tprint(i ** 2)  # squares\n    return 0\n",
]


def build_corpus():
    """Returns the training text: fortunes, some stdlib source and multilingual samples."""
    parts = []
    fortune_files = sorted(p for p in glob.glob("/usr/share/games/fortunes/*")
                           if "." not in os.path.basename(p) and os.path.isfile(p))
    budget = 1_200_000
    for path in fortune_files:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(120_000)
        parts.append(text)
        budget -= len(text)
        if budget <= 0:
            break
    stdlib = os.path.dirname(json.__file__)
    for path in sorted(glob.glob(os.path.join(stdlib, "*.py")))[:4]:
        with open(path, encoding="utf-8") as f:
            parts.append(f.read())
    for i in range(40):
        for sample in MULTILINGUAL:
            parts.append(sample if i % 2 == 0 else sample.replace("。", "。\n"))
    return "\n".join(parts)


def text_cases(specials):
    """Returns (name, text) pairs; `specials` are special tokens of the tokenizer at hand."""
    s0, s1 = specials[0], specials[1]
    cases = [
        ("english", "Hello, world! This is a test of the tokenizer."),
        ("contractions", "I'm sure they'll say it's fine; we've DONE it, HAVEN'T we? It'S ok."),
        ("chinese", MULTILINGUAL[0]),
        ("japanese", MULTILINGUAL[1]),
        ("mixed_scripts", MULTILINGUAL[2] + " " + MULTILINGUAL[3] + " " + MULTILINGUAL[4] +
         " " + MULTILINGUAL[5]),
        ("code", "def f(x):\n\tif x > 0:\n\t\treturn x ** 2\n        else:    \n"
                 "            return -x\n\n\n"),
        ("whitespace_runs", "a" + " " * 100 + "b\n\n\n    \t\t  \r\n end   "),
        ("emoji", MULTILINGUAL[7]),
        ("numbers", MULTILINGUAL[8] + " 12 123 1234 12345 ⅷ"),
        ("specials_inside", f"{s0}Hello{s1} world {s0} x{s1}{s1}y"),
        ("empty", ""),
        ("spaces_only", "   "),
        ("accents", "café naïve résumé e\u0301 n\u0303"),
        ("edges", " leading and trailing  "),
        ("unicode_spaces", "line1\r\nline2\u00a0nbsp\u3000ideographic\u2028sep\u0085nel "
                           "\u180emvs \u200bzwsp\u1680ogham\x1cfs\x0bvt \u180e\u180e x"),
        ("long_run_a", "a" * 3000),
        ("long_run_bang", "!" * 500 + "?"),
        ("long_spaces", " " * 3000 + "x"),
        ("mixed_long", ("word " * 200 + "\n") * 3),
    ]
    return cases


def fnv1a(ids):
    h = 0xcbf29ce484222325
    for i in ids:
        h ^= i & 0xFFFFFFFF
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def case_record(name, text, ids, ids_special, decoded, recipe=None):
    record = {"name": name}
    if recipe is not None:
        record["parts"] = recipe
    else:
        record["text"] = text
    if len(ids) > 3000:
        record["ids_len"], record["ids_fnv"] = len(ids), fnv1a(ids)
        record["ids_special_len"] = len(ids_special)
        record["ids_special_fnv"] = fnv1a(ids_special)
    else:
        record["ids"], record["ids_special"] = ids, ids_special
        if decoded is not None:
            record["decoded"] = decoded
    return record


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    size = os.path.getsize(path)
    assert size < 1_000_000, f"{path} is {size} bytes; fixtures must stay small"
    print(f"  wrote {os.path.relpath(path, ROOT)} ({size} bytes)")


def write_hf_expected(name, tokenizer, specials, extra_cases=()):
    cases = []
    for case_name, text in list(text_cases(specials)) + list(extra_cases):
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        ids_special = tokenizer.encode(text, add_special_tokens=True).ids
        decoded = tokenizer.decode(ids, skip_special_tokens=False)
        cases.append(case_record(case_name, text, ids, ids_special, decoded))
    write_json(os.path.join(OUT, f"{name}.expected.json"),
               {"tokenizer": f"{name}.tokenizer.json", "cases": cases})


def save_tokenizer(name, tokenizer_json):
    write_json(os.path.join(OUT, f"{name}.tokenizer.json"), tokenizer_json)
    return Tokenizer.from_file(os.path.join(OUT, f"{name}.tokenizer.json"))


def train_byte_level(corpus, vocab_size, pre_tokenizer):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([corpus], trainer=trainer)
    return tok


def make_llama3_like(corpus):
    split = pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False)
    tok = train_byte_level(corpus, 1500, pre_tokenizers.Sequence(
        [split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]))
    tok.decoder = decoders.ByteLevel()
    specials = llama3_special_tokens()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    bos = tok.token_to_id(specials[0])
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    spec = json.loads(tok.to_str())
    spec["model"]["ignore_merges"] = True  # the trainer rebuilds the model without it
    tok = save_tokenizer("llama3_like", spec)
    write_hf_expected("llama3_like", tok, specials)
    return tok, spec


def make_gpt2_like(corpus):
    tok = train_byte_level(corpus, 1000, pre_tokenizers.ByteLevel(add_prefix_space=False))
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False),
                            AddedToken("<mask>", special=True, lstrip=True, normalized=False),
                            AddedToken("<sep>", special=True, rstrip=True, normalized=False)])
    tok.add_tokens([AddedToken("[CAT]", single_word=True, normalized=False),
                    AddedToken("hello world", normalized=True)])
    spec = json.loads(tok.to_str())
    spec["model"]["merges"] = [f"{a} {b}" for a, b in spec["model"]["merges"]]  # legacy form
    tok = save_tokenizer("gpt2_like", spec)
    extra = [("added_flags", "x <mask> y<sep>   z [CAT] a[CAT]b ([CAT]) say hello world!"),
             ("added_glued", "<mask><mask>  <sep> <sep>\n[CAT][CAT] hello worldly")]
    write_hf_expected("gpt2_like", tok, ["<|endoftext|>", "<mask>"], extra)


def sp_byte_tokens():
    return [f"<0x{b:02X}>" for b in range(256)]


def train_sp_model(corpus):
    """Trains a SentencePiece-style BPE; returns its tokenizer.json dict (model part used)."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always",
                                                 split=True)
    trainer = trainers.BpeTrainer(vocab_size=1000, show_progress=False, limit_alphabet=120,
                                  special_tokens=["<unk>", "<s>", "</s>"] + sp_byte_tokens())
    tok.train_from_iterator([corpus], trainer=trainer)
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] in
                            ("<unk>", "<s>", "</s>")]
    for t in spec["added_tokens"]:
        t["normalized"] = False
    return spec


def sp_template(spec):
    bos = spec["model"]["vocab"]["<s>"]
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [bos], "tokens": ["<s>"]}}}


def make_sp_like(corpus):
    spec = train_sp_model(corpus)
    llama2 = dict(spec)
    llama2["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    llama2["pre_tokenizer"] = None
    llama2["post_processor"] = sp_template(spec)
    llama2["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    tok = save_tokenizer("sp_like", llama2)
    extra = [("byte_fallback", "Unseen: ☃ ꙮ 𝄞 \u0007 ok"), ("literal_byte_token", "<0x41>")]
    write_hf_expected("sp_like", tok, ["<s>", "</s>"], extra)

    meta = dict(spec)
    meta["normalizer"] = None
    meta["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                             "split": False}
    meta["post_processor"] = sp_template(spec)
    meta["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    tok = save_tokenizer("sp_metaspace", meta)
    write_hf_expected("sp_metaspace", tok, ["<s>", "</s>"], extra)


def make_qwen2_like(corpus):
    split = pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False)
    tok = train_byte_level(corpus, 1200, pre_tokenizers.Sequence(
        [split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]))
    tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok = save_tokenizer("qwen2_like", json.loads(tok.to_str()))
    extra = [("nfc_changes", "A\u030A \u212B \u2126 \u1100\u1161\u11A8 \uF900 a\u0302\u0323 "
                             "\u0958 \u09C7\u09BE Cafe\u0301 \u0301start")]
    write_hf_expected("qwen2_like", tok, specials, extra)


NORMALIZER_TEXTS = [
    ("ascii", "Hello, world! Plain ASCII never changes."),
    ("ligatures", "\ufb01nance \ufb02ow o\ufb03ce \ufb00 \ufb06 fine"),
    ("circled", "\u2460\u2461\u2473 \u2474 \u2488 \u24b6\u24d0 \u3280"),
    ("fullwidth", "\uff28\uff45\uff4c\uff4c\uff4f\uff0c\uff37\uff4f\uff52\uff4c\uff44\uff01 "
                  "\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19 \uff04\uff05"),
    ("units", "\u339e \u338f \u337b \u2103 \u2122 \u00bd \u2153 H\u2082O x\u00b2 \u207f \u00aa\u00ba"),
    ("composed", "caf\u00e9 na\u00efve \u00c5ngstr\u00f6m r\u00e9sum\u00e9 \u00f1 \u1e9b\u0323"),
    ("decomposed", "cafe\u0301 nai\u0308ve A\u030angstro\u0308m n\u0303 \u017f\u0323\u0307"),
    ("angstrom_ohm", "\u00c5 A\u030a \u212b \u03a9 \u2126 \u212a K"),
    ("mark_order", "a\u0302\u0323 a\u0323\u0302 \u1ead Vie\u0302\u0323t x\u0308\u0301\u0327y"),
    ("leading_mark", "\u0301start \u0308\u0301"),
    ("hangul", "\ud55c\uad6d\uc5b4 \uc548\ub155\ud558\uc138\uc694 \uac00\u11a8"),
    ("hangul_jamo", "\u1112\u1161\u11ab\u1100\u116e\u11a8 \u1100\u1161"),
    ("hangul_compat_jamo", "\u3131\u314f \u3134\u3153\u3139 \u3164"),
    ("kana", "\uff76\uff9e\uff77\uff9e \uff8a\uff9f \uff71 \u304b\u3099 \u30cf\u309a \u309b"),
    ("cjk_compat", "\uf900\ufa10 \u2f00\u2f08 \u3300 \u337f"),
    ("greek", "\u03ac \u0390 \u1fbf \u037e \u0387 \u03b1\u0313\u0301\u0345 \u03d2\u0301"),
    ("indic", "\u0958 \u0915\u093c \u09c7\u09be \u0b47\u0b3e \u0f73 \u0f71\u0f72"),
    ("arabic_forms", "\ufefb \ufdfa \ufe8d\ufe92 \ufdf2"),
    ("math_letters", "\U0001d400\U0001d401\U0001d402 \U0001d518\U0001d52b \u210c \u2115 \u2160\u216b \u217b"),
    ("spaces", "a\u00a0b\u2003c\u3000d\u2009e \u2024\u2025\u2026 \u2032\u2033"),
    ("emoji", "\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f \U0001f1ef\U0001f1f5"),
    ("added_token", "\ufb01ne fine \ufb01nest, and ne \ufb01ne"),
    ("empty", ""),
    # Characters whose decomposition, composition or combining class came after Unicode 9.0,
    # the data HF's normalizers behave by (they reorder Adlam's 9.0 marks, not U+1DF6 of 10.0):
    # SQUARE ERA NAME REIWA (12.1), SEGMENTED DIGIT ONE (13.0), MODIFIER LETTER CAPITAL C and
    # SMALL CAPITAL AA (14.0), the DIVES AKURU vowel sign O pair (13.0), and marks of class 230
    # or 232 (10.0, 11.0, 13.0) before a dot below (class 220).
    ("unicode_after_9", "\u32ff \U0001fbf1 \ua7f2 \U00010781 \U00011935\U00011930 "
                        "a\u1df6\u0323 a\U00010d24\u0323 a\u1ac1\u0323"),
]

NORMALIZER_SPECS = [
    ("nfc", {"type": "NFC"}, "NFC"),
    ("nfd", {"type": "NFD"}, "NFD"),
    ("nfkc", {"type": "NFKC"}, "NFKC"),
    ("nfkd", {"type": "NFKD"}, "NFKD"),
    # Accent stripping as several model families spell it: NFKD, then drop nonspacing marks.
    ("nfkd_strip", {"type": "Sequence", "normalizers": [
        {"type": "NFKD"},
        {"type": "Replace", "pattern": {"Regex": "\\p{Mn}"}, "content": ""}]}, None),
]


def unicodedata_form(form, text):
    """Returns Python's unicodedata normalization of `text` (Sequence specs pass form None)."""
    import unicodedata
    if form is not None:
        return unicodedata.normalize(form, text)
    return "".join(c for c in unicodedata.normalize("NFKD", text)
                   if unicodedata.category(c) != "Mn")


def make_normalizer_fixtures():
    """Writes norm_<form>.tokenizer.json / .expected.json: one tiny byte-level BPE behind each
    Unicode normalizer, and HF's ids for texts that exercise it. Where HF's normalization of a
    text differs from Python's unicodedata (HF's Unicode tables are older), the case also holds
    the ids of the unicodedata-normalized text under `unicode_gap`."""
    import unicodedata
    corpus = []
    for _, text in NORMALIZER_TEXTS:
        for form in ("NFC", "NFD", "NFKC", "NFKD"):
            corpus.append(unicodedata.normalize(form, text))
    base = train_byte_level("\n".join(corpus * 3 + MULTILINGUAL), 600,
                            pre_tokenizers.ByteLevel(add_prefix_space=False))
    base.decoder = decoders.ByteLevel()
    base.post_processor = processors.ByteLevel(trim_offsets=False)
    base.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    base.add_tokens([AddedToken("\ufb01ne", normalized=True)])
    plain = Tokenizer.from_str(base.to_str())
    for name, normalizer, form in NORMALIZER_SPECS:
        spec = json.loads(base.to_str())
        spec["normalizer"] = normalizer
        tok = save_tokenizer(f"norm_{name}", spec)
        cases = []
        for case_name, text in NORMALIZER_TEXTS:
            ids = tok.encode(text, add_special_tokens=False).ids
            ids_special = tok.encode(text, add_special_tokens=True).ids
            record = case_record(case_name, text, ids, ids_special,
                                 tok.decode(ids, skip_special_tokens=False))
            expected = unicodedata_form(form, text)
            if tok.normalizer.normalize_str(text) != expected:
                plain.normalizer = None
                record["unicode_gap"] = {
                    "unicodedata": unicodedata.unidata_version,
                    "ids": plain.encode(expected, add_special_tokens=False).ids,
                    "ids_special": plain.encode(expected, add_special_tokens=True).ids}
            cases.append(record)
        write_json(os.path.join(OUT, f"norm_{name}.expected.json"),
                   {"tokenizer": f"norm_{name}.tokenizer.json", "cases": cases})


def make_nfc_cases():
    """Writes strings and their NFC form (Python unicodedata) for anvil's NFC tables."""
    import random
    import unicodedata
    fixed = ["", "plain", "e\u0301", "A\u030A", "\u212B", "\u2126", "\u0958", "\u0344",
             "\u0F73", "\U0001D15E", "\u09C7\u09BE", "\u1100\u1161", "\u1100\u1161\u11A8",
             "\uAC00\u11A8", "\uF900\uFA10", "a\u0323\u0302", "a\u0302\u0323",
             "\u0301a\u0301", "\u03B1\u0313\u0301\u0345", "Vie\u0302\u0323t Nam",
             "\U0002F800", "x\u0308\u0301\u0327y"]
    pool = [c for c in map(chr, range(0x300, 0x370))]
    pool += [chr(cp) for cp in range(0xC0, 0x250)] + list("aeiouAEIOUnckgz ")
    pool += [chr(cp) for cp in range(0x1100, 0x1113)] + [chr(cp) for cp in range(0x1161, 0x1176)]
    pool += [chr(cp) for cp in range(0x11A8, 0x11C3)] + ["\uAC00", "\uD7A3", "\uC6D0"]
    pool += [chr(cp) for cp in (0x0915, 0x093C, 0x09C7, 0x09BE, 0x0B47, 0x0B3E, 0x0F71, 0x0F72,
                                0x1E0C, 0x1E0D, 0x1F00, 0x1FBF, 0x212B, 0xF900, 0x30AB, 0x3099)]
    rng = random.Random(20240601)
    randomized = ["".join(rng.choice(pool) for _ in range(rng.randint(1, 10))) for _ in range(400)]
    cases = [[s, unicodedata.normalize("NFC", s)] for s in fixed + randomized]
    write_json(os.path.join(OUT, "nfc.expected.json"),
               {"unicode_version": unicodedata.unidata_version, "cases": cases})


def meta_llama3_encode(encoding, text, bos):
    """Meta's Llama 3 Tokenizer.encode (llama/tokenizer.py) with allowed_special="all"."""
    def split_runs(s, max_len):
        run_len, run_is_space, start = 0, (s[0].isspace() if s else False), 0
        for i in range(len(s)):
            is_space = s[i].isspace()
            if run_is_space ^ is_space:
                run_len, run_is_space = 1, is_space
            else:
                run_len += 1
                if run_len > max_len:
                    yield s[start:i]
                    start, run_len = i, 1
        yield s[start:]

    ids = [bos] if bos is not None else []
    for i in range(0, len(text), 400_000):
        for piece in split_runs(text[i:i + 400_000], 25_000):
            ids.extend(encoding.encode(piece, allowed_special="all"))
    return ids


def tiktoken_cases(specials):
    cases = [(n, t, None) for n, t in text_cases(specials)]
    cases.append(("meta_25k_letters", None, [["x", 26000], [" y", 1]]))
    cases.append(("meta_25k_spaces", None, [["z", 1], [" ", 26000], ["w", 1]]))
    cases.append(("meta_400k_window", None, [["ab ", 140000]]))
    return cases


def write_tiktoken_expected(name, encoding, specials, bos, model_file):
    cases = []
    for case_name, text, recipe in tiktoken_cases(specials):
        if recipe is not None:
            text = "".join(s * n for s, n in recipe)
        ids = meta_llama3_encode(encoding, text, None)
        ids_special = meta_llama3_encode(encoding, text, bos)
        decoded = encoding.decode(ids) if len(ids) <= 3000 else None
        cases.append(case_record(case_name, text, ids, ids_special, decoded, recipe))
    write_json(os.path.join(OUT, f"{name}.expected.json"),
               {"tokenizer": model_file, "cases": cases})


def make_tiktoken(llama3_spec):
    vocab = llama3_spec["model"]["vocab"]
    byte_of = {c: b for b, c in enumerate(byte_level_alphabet())}
    ranks = {}
    for token, rank in vocab.items():
        if rank < 1500:
            ranks[bytes(byte_of[c] for c in token)] = rank
    assert sorted(ranks.values()) == list(range(len(ranks)))
    path = os.path.join(OUT, "tiktoken.tokenizer.model")
    with open(path, "w") as f:
        for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(token).decode()} {rank}\n")
    print(f"  wrote {os.path.relpath(path, ROOT)} ({os.path.getsize(path)} bytes)")
    specials = llama3_special_tokens()
    encoding = tiktoken.Encoding(name="llama3_like", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks,
                                 special_tokens={s: len(ranks) + i for i, s in enumerate(specials)})
    write_tiktoken_expected("tiktoken", encoding, specials, len(ranks), "tiktoken.tokenizer.model")


def byte_level_alphabet():
    """GPT-2's bytes_to_unicode, as a list indexed by byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def make_error_fixtures():
    unigram = Tokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0), ("b", -2.0), ("ab", -1.5)],
                                       unk_id=0, byte_fallback=False))
    write_json(os.path.join(OUT, "unigram.tokenizer.json"), json.loads(unigram.to_str()))
    wordpiece = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    write_json(os.path.join(OUT, "wordpiece.tokenizer.json"), json.loads(wordpiece.to_str()))


def make_anvil_trained(anvil):
    corpus = os.path.join(OUT, "train_corpus.txt")
    out = os.path.join(OUT, "anvil_trained.tokenizer.json")
    if not anvil or not os.access(anvil, os.X_OK):
        print(f"  skipped anvil_trained: no anvil binary (pass --anvil PATH); keeping the "
              "committed anvil_trained.* files")
        return
    subprocess.run([anvil, "tokenizer", "train", "--input", corpus, "--vocab-size", "600",
                    "--out", out, "--threads", "1"], check=True)
    print(f"  wrote {os.path.relpath(out, ROOT)} ({os.path.getsize(out)} bytes) with {anvil}")
    tok = Tokenizer.from_file(out)
    write_hf_expected("anvil_trained", tok, ["<|endoftext|>", "<|endoftext|>"])


def write_train_corpus(corpus):
    """Commits a small slice of the corpus for anvil's own training tests."""
    text = corpus[:60_000] + "\n" + "\n".join(MULTILINGUAL) * 3 + "\n<|endoftext|>\nThe end.\n"
    path = os.path.join(OUT, "train_corpus.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"  wrote {os.path.relpath(path, ROOT)} ({os.path.getsize(path)} bytes)")


def install_llama3():
    """Fetches the llama-models wheel from PyPI and extracts Llama 3's tokenizer.model."""
    tmp = tempfile.mkdtemp()
    try:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp,
                        "llama-models==0.3.0"], check=True)
        wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
        os.makedirs(os.path.dirname(LLAMA3_CACHE), exist_ok=True)
        with zipfile.ZipFile(wheel) as z, open(LLAMA3_CACHE, "wb") as out:
            out.write(z.read("llama_models/llama3/tokenizer.model"))
        print(f"installed {LLAMA3_CACHE}")
    finally:
        shutil.rmtree(tmp)


def make_llama3_real(path):
    if not path or not os.path.exists(path):
        print("  skipped llama3_real: no Llama 3 tokenizer.model (pass --llama3 PATH or run "
              "--install-llama3)")
        return
    ranks = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    specials = llama3_special_tokens()
    encoding = tiktoken.Encoding(name="llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks,
                                 special_tokens={s: len(ranks) + i for i, s in enumerate(specials)})
    write_tiktoken_expected("llama3_real", encoding, specials, len(ranks), "tokenizer.model")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--anvil", help="anvil binary for the anvil_trained fixture")
    parser.add_argument("--llama3", default=LLAMA3_CACHE, help="Meta Llama 3 tokenizer.model")
    parser.add_argument("--install-llama3", action="store_true",
                        help=f"fetch llama-models from PyPI and extract {LLAMA3_CACHE}")
    parser.add_argument("--only-normalizers", action="store_true",
                        help="write only the norm_* fixtures (they need no corpus or training "
                             "of the others, so the other committed fixtures stay as they are)")
    args = parser.parse_args()
    if args.install_llama3:
        install_llama3()
        return
    os.makedirs(OUT, exist_ok=True)
    if args.only_normalizers:
        make_normalizer_fixtures()
        return
    corpus = build_corpus()
    print(f"corpus: {len(corpus)} characters")
    write_train_corpus(corpus)
    _, llama3_spec = make_llama3_like(corpus)
    make_gpt2_like(corpus)
    make_sp_like(corpus)
    make_tiktoken(llama3_spec)
    make_qwen2_like(corpus)
    make_nfc_cases()
    make_normalizer_fixtures()
    make_error_fixtures()
    make_anvil_trained(args.anvil)
    make_llama3_real(args.llama3)


if __name__ == "__main__":
    main()
