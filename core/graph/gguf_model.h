// GGUF in through the ONNX door: a GGUF decoder becomes the ONNX
// decoder-with-past graph an exporter would have written for it (inputs
// input_ids, attention_mask, position_ids, past_key_values.N.key/value;
// outputs logits, present.N.key/value), built per architecture from the
// file's metadata, so the importer's checker and shape inference, every pass,
// the equivalence probe and every engine mode apply unchanged.
//
// Architectures: llama (and Mistral, which llama.cpp writes as llama),
// qwen2, qwen3, phi3, gemma2, gemma3. Weights stored as Q8_0, Q4_0 or Q4_1
// stay quantized as com.microsoft::MatMulNBits (see gguf/gguf_tensors.h);
// everything else, and everything with `dequantize`, becomes float32 as
// transformers loads it. llama.cpp stores llama's q/k rows permuted for its
// rotary layout; they are put back (whole rows move, so quantized rows move
// exactly) and rotary is written in Hugging Face's halves form.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graph/graph.h"
#include "graph/onnx_import.h"

namespace sy {

struct GgufModelOptions {
  bool dequantize = false;  // every weight as float32 (transformers' view of the file)
};

// What became of the file's tensors, for inspect and the convert summary.
struct GgufModelSummary {
  std::string architecture;
  std::map<std::string, int> stored_types;  // ggml type -> tensors
  int kept_quantized = 0;                   // weights run as MatMulNBits
  int dequantized = 0;                      // weights made float32
  // The model as a Hugging Face config.json would describe it.
  nlohmann::ordered_json config;
};

// Whether `path` is a GGUF file (by its magic, not its name).
bool is_gguf_file(const std::string& path);

namespace gguf {
class File;
}

// The decoder graph of a parsed GGUF file (the fuzzer's entry).
Graph import_gguf(const gguf::File& file, const std::string& model_dir, const ImportOptions& import = {},
                  const GgufModelOptions& options = {}, GgufModelSummary* summary = nullptr);

// The decoder graph of a GGUF file, imported as an ONNX file would be.
Graph import_gguf_file(const std::string& path, const ImportOptions& import = {}, const GgufModelOptions& options = {},
                       GgufModelSummary* summary = nullptr);

// Writes the ONNX model (weights in `<onnx_path>.data`, external data).
GgufModelSummary write_gguf_as_onnx(const std::string& gguf_path, const std::string& onnx_path,
                                    const GgufModelOptions& options = {});

}  // namespace sy
