"""/v1/embeddings and `switchyard embed` against independent references.

The reference is ONNX Runtime running each export with the LM head's input
(the final hidden states) added as a graph output, pooled and normalised in
numpy by the convention the model's files state: the mean of the tokens for
a generative model, the last token for a decoder embedding model (config.json
naming a bare *Model architecture), sentence-transformers' modules.json and
pooling config when the folder has them, a GGUF's <arch>.pooling_type. The
server is checked through the official openai client, which asks for base64
vectors by default."""
import base64
import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from openai import BadRequestError, NotFoundError, OpenAI

from conftest import API_KEY, start_server, stop_server

CLI = os.environ["SWITCHYARD_CLI"]
ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "models" / "real"
STORIES = ROOT.parent.parent / "shared" / "models" / "stories260K.onnx"
IDS = [[1, 203, 207, 61, 178, 1], [1, 9, 27, 300]]  # inside every tiny vocabulary (320 ids)


def hidden_states(onnx_path, ids):
    """The LM head's input at every position, by ONNX Runtime."""
    m = onnx.load(str(onnx_path))
    head = next(n for n in m.graph.node if "logits" in n.output)
    while head.op_type != "MatMul":  # an elementwise tail (Gemma 2's soft-capping) after the head
        head = next(n for n in m.graph.node if head.input[0] in n.output)
    m.graph.output.append(onnx.helper.make_tensor_value_info(head.input[0], onnx.TensorProto.FLOAT, None))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {}
    for i in sess.get_inputs():
        if i.name == "input_ids":
            feeds[i.name] = np.array([ids], dtype=np.int64)
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones((1, len(ids)), dtype=np.int64)
        elif i.name == "position_ids":
            feeds[i.name] = np.arange(len(ids), dtype=np.int64)[None]
        else:  # past keys/values: batch 1, nothing cached yet
            shape = [1 if k == 0 else d if isinstance(d, int) else 0 for k, d in enumerate(i.shape)]
            feeds[i.name] = np.zeros(shape, dtype=np.float16 if "float16" in i.type else np.float32)
    return sess.run([head.input[0]], feeds)[0][0].astype(np.float64)


def pooled(h, pooling="mean", normalize=True):
    v = h.mean(axis=0) if pooling == "mean" else h[-1] if pooling == "last" else h[0]
    return v / np.linalg.norm(v) if normalize else v


def embed(model, ids, expect_error=False):
    out = subprocess.run([CLI, "embed", "--model", str(model), *sum((["--prompt-ids", ",".join(map(str, x))] for x in ids), [])],
                         capture_output=True, text=True, timeout=600)
    if expect_error:
        assert out.returncode != 0
        return out.stderr
    assert out.returncode == 0, out.stderr
    return [np.array(json.loads(line)["embedding"]) for line in out.stdout.splitlines()], out.stderr


# Exports of several families and exporters (TorchScript, dynamo, optimum).
EXPORTS = ["qwen2-torchscript", "llama3-dynamo", "mistral-optimum", "phi3-dynamo", "gpt2-optimum", "gptneox-torchscript",
           "gemma2-torchscript", "gemma2-dynamo"]  # Gemma 2: logits soft-capped after the head


@pytest.mark.parametrize("export", EXPORTS)
def test_embed_equals_onnxruntime_on_real_exports(export):
    folder = REAL / export
    vecs, log = embed(folder, IDS)
    assert "pooling: mean, L2-normalised" in log  # *ForCausalLM: a generative model
    for ids, v in zip(IDS, vecs):
        ref = pooled(hidden_states(folder / "model.onnx", ids))
        assert np.abs(v - ref).max() < 1e-4, export


def variant(files):
    """The Qwen2 export with extra or replaced files, in a temporary folder."""
    tmp = tempfile.TemporaryDirectory()
    src = REAL / "qwen2-torchscript"
    for f in src.iterdir():
        if f.name not in files:
            os.symlink(f, Path(tmp.name) / f.name)
    for name, content in files.items():
        path = Path(tmp.name) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content))
    return tmp


def st_modules(pooling_dir, normalize):
    mods = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": pooling_dir, "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        mods.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    return mods


def st_pooling(mode):
    return {"word_embedding_dimension": 32, **{f"pooling_mode_{m}": m == mode for m in
            ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "lasttoken")}}


@pytest.mark.parametrize("files,pooling,normalize", [
    ({"modules.json": st_modules("1_Pooling", True), "1_Pooling/config.json": st_pooling("lasttoken")}, "last", True),
    ({"modules.json": st_modules("pool", False), "pool/config.json": st_pooling("mean_tokens")}, "mean", False),
    ({"modules.json": st_modules("1_Pooling", True), "1_Pooling/config.json": st_pooling("cls_token")}, "first", True),
])
def test_sentence_transformers_pooling_is_followed(files, pooling, normalize):
    with variant(files) as folder:
        (v,), log = embed(folder, IDS[:1])
        assert f"pooling: {'cls' if pooling == 'first' else pooling}" in log and "config.json" in log
        ref = pooled(hidden_states(REAL / "qwen2-torchscript" / "model.onnx", IDS[0]), pooling, normalize)
        assert np.abs(v - ref).max() < 1e-4


def test_a_decoder_embedding_model_pools_its_last_token():
    config = json.loads((REAL / "qwen2-torchscript" / "config.json").read_text())
    with variant({"config.json": dict(config, architectures=["Qwen2Model"])}) as folder:
        (v,), log = embed(folder, IDS[:1])
        assert "pooling: last" in log and "Qwen2Model" in log
        ref = pooled(hidden_states(REAL / "qwen2-torchscript" / "model.onnx", IDS[0]), "last")
        assert np.abs(v - ref).max() < 1e-4


def test_an_unsupported_pooling_is_refused_naming_the_file():
    files = {"modules.json": st_modules("1_Pooling", True), "1_Pooling/config.json": st_pooling("max_tokens")}
    with variant(files) as folder:
        err = embed(folder, IDS[:1], expect_error=True)
        assert "1_Pooling/config.json" in err and "pooling_mode_lasttoken" in err


def test_a_gguf_pooling_type_is_followed():
    gguf = pytest.importorskip("gguf")
    src = gguf.GGUFReader(str(REAL / "qwen3-gguf" / "model.gguf"))
    arch = bytes(src.fields["general.architecture"].parts[-1]).decode()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "model.gguf"
        w = gguf.GGUFWriter(str(out), arch)
        for f in src.fields.values():  # every key as it is, then pooling_type = 3 (last)
            if f.name.startswith("GGUF.") or f.name == "general.architecture":
                continue
            vtype = f.types[0]
            if vtype == gguf.GGUFValueType.ARRAY:
                w.add_key_value(f.name, f.contents(), vtype, sub_type=f.types[-1])
            else:
                w.add_key_value(f.name, f.contents(), vtype)
        w.add_uint32(f"{arch}.pooling_type", 3)
        for t in src.tensors:
            w.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        (last,), log = embed(out, IDS[:1])
        assert f"{arch}.pooling_type" in log and "pooling: last" in log
        (mean,), log = embed(REAL / "qwen3-gguf" / "model.gguf", IDS[:1])
        assert "pooling: mean" in log
        assert np.abs(last - mean).max() > 1e-3  # the key changed what is pooled
        assert abs(np.linalg.norm(last) - 1) < 1e-5


@pytest.fixture(scope="module")
def client():
    proc, port = start_server()
    yield OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY)
    stop_server(proc)


def test_openai_client_embeddings_equal_the_reference(client):
    model = client.models.list().data[0].id
    texts = ["Once upon a time", "The little dog ran home."]
    r = client.embeddings.create(model=model, input=texts)  # base64 on the wire (the client's default)
    assert [d.index for d in r.data] == [0, 1] and r.model == model
    ids = [client.post("/../tokenize", body={"prompt": t}, cast_to=object)["tokens"] for t in texts]
    assert r.usage.prompt_tokens == r.usage.total_tokens == sum(map(len, ids))
    for d, x in zip(r.data, ids):
        ref = pooled(hidden_states(STORIES, x))
        assert np.abs(np.array(d.embedding) - ref).max() < 1e-4
    # Floats, token ids and lists of token ids give the same vectors.
    f = client.embeddings.create(model=model, input=texts[0], encoding_format="float")
    assert np.abs(np.array(f.data[0].embedding) - np.array(r.data[0].embedding)).max() == 0
    t = client.embeddings.create(model=model, input=ids, encoding_format="float")
    assert [d.embedding for d in t.data] == [list(np.frombuffer(base64.b64decode(client.post("/embeddings", body={
        "input": x, "encoding_format": "base64"}, cast_to=object)["data"][0]["embedding"]), dtype="<f4").astype(float)) for x in texts]


def test_embeddings_refusals_name_the_field(client):
    model = client.models.list().data[0].id
    cases = [({"input": ""}, "input"), ({"input": []}, "input"), ({"input": [1, -2]}, "input"), ({"input": [[1, 2], "x"]}, "input"),
             ({"input": "a", "encoding_format": "int8"}, "encoding_format"), ({"input": "a", "dimensions": 3}, "dimensions"),
             ({"input": [1, 999999]}, "input"), ({"input": "a", "truncate_prompt_tokens": 4}, "truncate_prompt_tokens"),
             ({"input": "a", "normalize": False}, "normalize")]
    for body, param in cases:
        with pytest.raises(BadRequestError) as e:
            client.post("/embeddings", body={"model": model, **body}, cast_to=object)
        assert e.value.body["param"] == param, body
    with pytest.raises(NotFoundError):
        client.embeddings.create(model="another-model", input="a")
