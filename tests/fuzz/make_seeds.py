#!/usr/bin/env python3
"""Writes the small seed inputs of the fuzzers into corpus/ (committed; rerun
only to change them). ONNX seeds are tiny single-op and two-op models with
the shapes the importer's checks care about; tokenizer seeds are small
llama2.c tokenizer files followed by the 0xFF 0xFE marker and a text; request
seeds are OpenAI bodies. Manifest seeds are copies of the example manifests."""
import json
import os
import shutil
import struct

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

here = os.path.dirname(os.path.abspath(__file__))
corpus = os.path.join(here, "corpus")


def save(model, name):
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(corpus, "onnx", name))


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "seed", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


save(model([helper.make_node("Add", ["a", "b"], ["y"])], [f32("a", [2, 3]), f32("b", [3])], [f32("y", [2, 3])]), "add.onnx")
w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w")
save(model([helper.make_node("MatMul", ["x", "w"], ["y"])], [f32("x", ["batch", 3])], [f32("y", ["batch", 4])], [w]), "matmul.onnx")
shape = numpy_helper.from_array(np.array([0, -1], dtype=np.int64), "shape")
save(model([helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=-1)],
           [f32("x", [1, 2, 3])], [f32("y", [1, 6])], [shape]), "reshape_softmax.onnx")
table = numpy_helper.from_array(np.ones((8, 4), dtype=np.float32), "table")
save(model([helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)],
           [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "seq"])], [f32("y", [1, "seq", 4])], [table]), "gather.onnx")
c = numpy_helper.from_array(np.array([2.0], dtype=np.float32), "c")
save(model([helper.make_node("Mul", ["c", "c"], ["cc"]), helper.make_node("Div", ["x", "cc"], ["y"])],
           [f32("x", [4])], [f32("y", [4])], [c]), "fold.onnx")
save(model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ConstantOfShape", ["s"], ["y"],
                                                                        value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]))],
           [f32("x", [2, 2])], [f32("y", [2, 2])]), "constant_of_shape.onnx")
save(model([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]), helper.make_node("ReduceMean", ["t"], ["y"], axes=[1], keepdims=0)],
           [f32("x", [3, 5])], [f32("y", [5])]), "transpose_reduce.onnx")
ext = helper.make_tensor("big", TensorProto.FLOAT, [4], [0.0] * 4)
ext.ClearField("float_data")
ext.data_location = TensorProto.EXTERNAL
ext.external_data.add(key="location", value="weights.bin")
ext.external_data.add(key="length", value="16")
m = model([helper.make_node("Add", ["x", "big"], ["y"])], [f32("x", [4])], [f32("y", [4])], [ext])
onnx.save(m, os.path.join(corpus, "onnx", "external.onnx"))


def tokenizer_bytes(pieces):
    out = struct.pack("<i", max(len(p) for p in pieces))
    for i, p in enumerate(pieces):
        b = p.encode()
        out += struct.pack("<fi", -float(i), len(b)) + b
    return out


pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(256)] + [" ", "a", "b", "ab", " a", "the", " the", "e", "t", "h"]
for name, text in (("basic", "the ab a"), ("bytes", "h\u00e9llo \u2603"), ("empty", "")):
    with open(os.path.join(corpus, "tokenizer", name + ".bin"), "wb") as f:
        f.write(tokenizer_bytes(pieces) + b"\xff\xfe" + text.encode())
with open(os.path.join(corpus, "tokenizer", "text_only.txt"), "wb") as f:
    f.write("Once upon a time, there was a little girl named Lily.".encode())

requests = [
    (0, {"model": "stories260K", "prompt": "Once upon a time", "max_tokens": 16}),
    (0, {"prompt": [1, 403, 407], "max_tokens": 8, "temperature": 0, "stop": ["\n", "."], "n": 2, "seed": 7}),
    (0, {"prompt": ["a", "b"], "stream": True, "top_p": 0.9}),
    (0, {"prompt": [[1, 2], [1, 3, 4]], "max_completion_tokens": 4}),
    (1, {"model": "stories260K", "messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 32}),
    (1, {"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}], "stop": "z"}),
]
for i, (chat, body) in enumerate(requests):
    with open(os.path.join(corpus, "request", "%d.json" % i), "wb") as f:
        f.write(bytes([chat]) + json.dumps(body).encode())

for name in ("stories.yaml", "quantize.yaml", "speculative.yaml", "synth.yaml"):
    shutil.copy(os.path.join(here, "..", "..", "examples", "manifests", name), os.path.join(corpus, "manifest", name))
print("seeds written to", corpus)


def hf_tokenizer_seeds():
    """tokenizer.json seeds, one per model family and piece type, each
    followed by the 0xFF 0xFE marker and a text (trained with the tokenizers
    library: pip install tokenizers)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    out = os.path.join(corpus, "hf_tokenizer")
    os.makedirs(out, exist_ok=True)
    text = "Hello world! It's 2024 — naïve café 東京 😀\n\tcode(x) {y}"

    def save(tok, name, t=text):
        with open(os.path.join(out, name), "wb") as f:
            f.write(tok.to_str().encode() + b"\xff\xfe" + t.encode())

    train = ["Once upon a time there was a cat. It's 12 years old!", "Les élèves ont mangé. 東京は日本の首都です。 😀"] * 20
    t = Tokenizer(models.BPE(ignore_merges=True))
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"(?i:'s|'t)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+(?!\S)|\s+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.TemplateProcessing(single="<|begin|> $A", pair="<|begin|> $A <|begin|> $B", special_tokens=[("<|begin|>", 0)])
    t.train_from_iterator(train, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|begin|>", "<|end|>"],
                                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    save(t, "bytelevel_bpe.json")
    t = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    t.train_from_iterator(train, trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(0x20, 0x30)] + ["<0xE6>", "<0x9D>", "<0xB1>", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>"],
                                                     show_progress=False))
    save(t, "spm_bpe.json", "<|begin|>special<|end|> inside")
    t = Tokenizer(models.Unigram())
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip()])
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Metaspace()
    t.train_from_iterator(train, trainers.UnigramTrainer(vocab_size=120, special_tokens=["<unk>"], unk_token="<unk>", show_progress=False))
    save(t, "unigram.json")
    t = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer()
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.Punctuation()])
    t.decoder = decoders.WordPiece()
    t.post_processor = processors.BertProcessing(("[SEP]", 1), ("[CLS]", 2))
    t.train_from_iterator(train, trainers.WordPieceTrainer(vocab_size=150, special_tokens=["[UNK]", "[SEP]", "[CLS]"], show_progress=False))
    save(t, "wordpiece.json")
    t = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    save(t, "wordlevel.json", "a b c a")
    with open(os.path.join(out, "text_only.txt"), "w") as f:
        f.write(text)


def chat_template_seeds():
    """The chat templates the tests compare with jinja2."""
    out = os.path.join(corpus, "chat_template")
    os.makedirs(out, exist_ok=True)
    templates = os.path.join(here, "..", "text", "chat", "templates")
    for name in sorted(os.listdir(templates)):
        shutil.copy(os.path.join(templates, name), os.path.join(out, name))


hf_tokenizer_seeds()
chat_template_seeds()
