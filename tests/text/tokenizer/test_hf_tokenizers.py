"""tokenizer.json in C++ against the Hugging Face tokenizers library: four
tokenizers trained here with the library, one per family (GPT-2 byte-level
BPE, Llama-3-style regex + byte-level BPE, Llama-2-style SentencePiece BPE
with byte fallback, a Unigram model), about 100 strings each: ids and the
decoded text identical to the library's, with and without special tokens."""
import json
import os
import subprocess
import tempfile

import pytest
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

CLI = os.environ["SWITCHYARD_CLI"]

CORPUS = [
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
    "One day, she saw a big red ball. The sun was warm and the sky was blue. Tom said: \"Can I play too?\"",
    "def add(a, b):\n    return a + b  # 12 + 34 = 46\n\tprint('done')",
    "Les élèves ont mangé des crêpes à Noël. Über straße naïve café résumé.",
    "東京は日本の首都です。我喜欢学习中文。한국어도 배우고 싶어요.",
    "Emoji: 😀🎉👍🏽 and symbols ∑ ≤ ≥ → ← ©®™ € £ ¥.",
    "I'm sure you'll see they've done what we'd said, isn't it? Don't!",
    "Numbers 0 1 22 333 4444 55555 3.14159 1e-9 -42 +7 1,000,000",
    "Mixed: Привет мир, مرحبا بالعالم, שלום עולם, γειά σου κόσμε.",
] * 40

SPECIALS = ["<|begin|>", "<|end|>", "<|pad|>"]


def gpt2_bpe():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def llama3_bpe():
    pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
               r"\s+(?!\S)|\s+")
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    bos = tok.token_to_id("<|begin|>")
    tok.post_processor = processors.TemplateProcessing(single="<|begin|> $A", special_tokens=[("<|begin|>", bos)])
    return tok


def llama2_spm_bpe():
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1)])
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=["<unk>", "<s>", "</s>"] + bytes_, show_progress=False,
                                  limit_alphabet=60)
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


def unigram():
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(prepend_scheme="always"),
                                                 pre_tokenizers.Digits(individual_digits=True)])
    tok.decoder = decoders.Metaspace(prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>",
                                      show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>",
                                                       special_tokens=[("<s>", 1), ("</s>", 2)])
    return tok


FAMILIES = {"gpt2-bpe": gpt2_bpe, "llama3-bpe": llama3_bpe, "llama2-spm-bpe": llama2_spm_bpe, "unigram": unigram}


def strings_under_test():
    s = ["", " ", "   ", "\t", "\n", "\n\n\n", " \t \n ", "a", "A", "hello", " hello", "hello ", "Hello, World!",
         "  leading and trailing  ", "tabs\tand\nnewlines\r\n", "12345", "3.14159", "1,000,000 and 42%", "0x1F", "007",
         "I'm", "you're", "they've", "it's", "we'll", "I'd", "don't", "won't", "CAN'T",
         "café", "naïve", "résumé", "über", "Straße", "ﬁ ligature", "Å Å", "e\u0301", "ＡＢＣ", "①②③",
         "日本語", "中文字符", "한국어", "こんにちは世界", "漢字かなカナ",
         "😀", "👍🏽", "👨‍👩‍👧", "🎉🎉🎉", "a😀b",
         "Привет", "مرحبا", "שלום", "γειά", "हिन्दी", "ไทย",
         "def f(x):\n    return x**2", "if (a && b) { c++; }", "<html><body>Hi</body></html>", "SELECT * FROM t;",
         "https://example.com/a?b=c&d=e", "user@example.com", "#hashtag @mention", "$100.00", "C:\\path\\to\\file",
         "<|begin|>", "<|end|>", "text <|begin|> inside", "<|begin|>start", "end<|end|>", "a<|pad|>b<|pad|>c",
         "<|begin|><|end|>", "not <|special| token", "<s>", "</s>", "<unk>", "x</s>y",
         "....", "!!!???", "---", "___", "***", "\"quoted\"", "'single'", "(paren) [bracket] {brace}",
         "Once upon a time", "once upon a time", "ONCE UPON A TIME", "The quick brown fox jumps over the lazy dog.",
         "a b c d e f g", "aaaaaaaaaaaaaaaaaaaa", "abcabcabcabc", " " * 17 + "x",
         "mixed 中文 and English and 日本語 😀", "\u00a0non-breaking\u00a0space", "zero\u200bwidth", "\u2028line sep",
         "control\x01char", "\x7f del", "tab\tsep\tvalues", "trailing newline\n", "\r\nCRLF\r\n"]
    s.append("supercalifragilistic" * 5000)  # a 100 KB word
    return s


@pytest.fixture(scope="module", params=list(FAMILIES))
def trained(request):
    tok = FAMILIES[request.param]()
    d = tempfile.mkdtemp()
    path = os.path.join(d, "tokenizer.json")
    tok.save(path)
    return request.param, tok, path


def run_cli(path, texts, add_special):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(texts, f)
        batch = f.name
    args = [CLI, "tokenize", "--tokenizer", path, "--batch", batch] + (["--add-special-tokens"] if add_special else [])
    out = subprocess.run(args, capture_output=True, text=True, encoding="utf-8", errors="surrogateescape", timeout=600)
    os.unlink(batch)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.split("\n") if line]


@pytest.mark.parametrize("add_special", [False, True])
def test_ids_and_decoded_text_equal_the_library(trained, add_special):
    name, tok, path = trained
    texts = strings_under_test()
    got = run_cli(path, texts, add_special)
    assert len(got) == len(texts)
    mismatches = []
    for text, g in zip(texts, got):
        ids = tok.encode(text, add_special_tokens=add_special).ids
        decoded = tok.decode(ids, skip_special_tokens=False)
        if g["ids"] != ids or g["decoded"] != decoded:
            mismatches.append((text[:60], ids[:20], g["ids"][:20], decoded[:60], g["decoded"][:60]))
    assert not mismatches, f"{name}: {len(mismatches)} of {len(texts)} differ; first: {mismatches[:3]}"


def test_a_megabyte_prompt_encodes_in_well_under_a_second(trained):
    name, tok, path = trained
    text_file = os.path.join(os.path.dirname(path), "big.txt")
    with open(text_file, "w", encoding="utf-8") as f:
        f.write(" ".join(CORPUS) * 40)  # just over 1 MiB
    size = os.path.getsize(text_file)
    assert size > 1 << 20
    out = subprocess.run([CLI, "tokenize", "--tokenizer", path, "--text-file", text_file, "--json", "--time"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    print(f"{name}: {out.stderr.strip()}")
    with open(text_file, encoding="utf-8") as f:
        assert json.loads(out.stdout)["ids"] == tok.encode(f.read(), add_special_tokens=False).ids


@pytest.mark.parametrize("flags", [{"add_bos_token": False, "add_eos_token": True}, {"add_bos_token": True, "add_eos_token": True},
                                   {"add_bos_token": False}])
def test_llama_class_tokenizers_take_bos_and_eos_from_tokenizer_config(flags):
    """transformers' LlamaTokenizerFast rebuilds the post-processor from
    tokenizer_config.json's add_bos_token / add_eos_token (defaults true /
    false) whatever tokenizer.json holds; PreTrainedTokenizerFast does not."""
    tok = llama2_spm_bpe()  # its tokenizer.json adds <s>
    texts = ["Hello world", "Once upon a time"]
    for cls in ("LlamaTokenizerFast", "PreTrainedTokenizerFast"):
        d = tempfile.mkdtemp()
        tok.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": cls, "bos_token": "<s>", "eos_token": {"content": "</s>"}, **flags}, f)
        got = [r["ids"] for r in run_cli(d, texts, True)]
        for text, ids in zip(texts, got):
            plain = tok.encode(text, add_special_tokens=False).ids
            if cls == "LlamaTokenizerFast":
                want = ([tok.token_to_id("<s>")] if flags.get("add_bos_token", True) else []) + plain + \
                       ([tok.token_to_id("</s>")] if flags.get("add_eos_token", False) else [])
            else:
                want = tok.encode(text, add_special_tokens=True).ids
            assert ids == want, (cls, flags, text)
