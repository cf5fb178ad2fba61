// The shared stories tokenizer, loaded once per fuzzer process; empty when
// ../shared is missing (the targets then skip what needs it).
#pragma once
#include <optional>

#include "base/error.h"
#include "text/llama2c_tokenizer.h"

inline const std::optional<sy::Llama2cTokenizer>& shared_tokenizer() {
  static const std::optional<sy::Llama2cTokenizer> tok = []() -> std::optional<sy::Llama2cTokenizer> {
    try {
      return sy::Llama2cTokenizer::load(SWITCHYARD_SHARED_DIR "/models/tok512.bin");
    } catch (const sy::Error&) {
      return std::nullopt;
    }
  }();
  return tok;
}
