// One front door for a model argument. Everything that goes with a model is
// decided here and nowhere else: which file holds the graph, its tokenizer,
// chat template, end-of-generation ids, sampling defaults, context length
// and served name. A model argument is an ONNX file, a GGUF file, or a
// folder holding one (model.onnx, the file genai_config.json names, the only
// *.onnx, or the only *.gguf of a folder without ONNX files).
//
// The engine, the facade, the C API (and through it the server, Python and
// Ray) and the CLI all open a ModelFolder; the text library below it knows
// tokenizer files and template sources, never folders.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/model_io.h"
#include "model/embedding_convention.h"
#include "model/sampling_defaults.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "text/tool_calls.h"

namespace sy {

// What a manifest or a caller puts in place of the folder's own files.
struct ModelFolderOptions {
  std::string tokenizer;      // a tokenizer file, or a folder holding one ("": the model's)
  std::string chat_template;  // a .jinja file, or a JSON file with "chat_template" ("": the model's)
  std::string tool_parser;    // a tool-call family's name ("": the chat template's)
};

class ModelFolder {
 public:
  // Throws sy::Error naming the path when it holds no model, or naming the
  // file and key of a malformed genai_config.json.
  static ModelFolder open(const std::string& model, ModelFolderOptions options = {});

  const std::string& argument() const { return argument_; }  // as given
  const std::string& model_file() const { return model_file_; }  // the ONNX or GGUF file
  const std::string& dir() const { return dir_; }                // the folder beside it
  bool is_gguf() const { return gguf_; }
  // genai_config.json beside the model (onnxruntime-genai), if any.
  const GenaiConfig* genai() const { return genai_ ? &*genai_ : nullptr; }
  // The name a server reports: the argument's last path part, ".onnx" dropped.
  std::string name() const;

  // The tokenizer file: the override, else beside the model (tokenizer.json,
  // tokenizer.bin, one tok*.bin) or the GGUF file itself; "" when none.
  const std::string& tokenizer_file() const { return tokenizer_file_; }
  // Loaded on first use and shared. Throws naming where it looked when
  // there is none.
  std::shared_ptr<const Tokenizer> tokenizer() const;
  // The override, else the tokenizer folder's, else the model folder's
  // (chat_template.jinja, chat_template.json, tokenizer_config.json; a GGUF
  // file's tokenizer.chat_template); nullopt when there is none. Compiled
  // on first use; throws naming the file for malformed JSON or syntax.
  const std::optional<ChatTemplate>& chat_template() const;
  // How the model writes tool calls: the named family, else its chat
  // template's (text/tool_calls.h). Throws naming an unknown name.
  const ToolCallFamily& tool_call_family() const;

  // End-of-generation ids: genai_config.json, the GGUF's eos/eot/eom, then
  // generation_config.json or config.json (one id or a list), then
  // tokenizer_config.json's eos_token; {2} (llama2.c's) when none says.
  std::vector<int> eos_ids() const;
  // generation_config.json's sampling (or genai_config.json's "search").
  SamplingDefaults sampling_defaults() const;
  // How hidden states pool into an embedding (model/embedding_convention.h).
  // Throws naming the file of a malformed sentence-transformers config.
  EmbeddingConvention embedding_convention() const;
  // genai_config.json's context length; 0 when the folder does not say (the
  // graph's metadata then decides, engine/decoder_model.cpp).
  int64_t context_length() const { return genai_ ? genai_->context_length : 0; }
  // config.json's max_position_embeddings (or n_positions,
  // max_sequence_length, seq_length); 0 when absent. What the passes assume
  // after genai_config.json and the graph's metadata.
  int64_t config_context_length() const;

  // A tokenizer argument on its own (a router's, `switchyard tokenize`'s): a
  // file as given, or a folder's tokenizer file. Throws naming the path
  // when there is none.
  static std::string tokenizer_file_of(const std::string& path);
  // The same, "" when there is none.
  static std::string find_tokenizer_file(const std::string& path);
  // A tokenizer file with what goes with it: tokenizer_config.json beside a
  // tokenizer.json (transformers reads the two together).
  static std::unique_ptr<Tokenizer> load_tokenizer_file(const std::string& file);
  // A template file on its own; special tokens from a tokenizer_config.json
  // beside it, else those of `model` (a model or tokenizer file, or a
  // folder; "": none).
  static ChatTemplate chat_template_file(const std::string& path, const std::string& model = {});
  // The template of the folder holding `path` (a model, a tokenizer file or
  // a GGUF file); nullopt when it has none.
  static std::optional<ChatTemplate> chat_template_of(const std::string& path);

 private:
  struct Lazy;  // what is loaded on first use, shared by copies
  std::string argument_, model_file_, dir_, tokenizer_file_, chat_template_file_, tool_parser_;
  bool gguf_ = false;
  std::optional<GenaiConfig> genai_;
  std::shared_ptr<Lazy> lazy_;
};

}  // namespace sy
