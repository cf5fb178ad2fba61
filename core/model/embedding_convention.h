// Plain data ModelFolder reads from a model folder and the embedding path
// applies: how a sequence's hidden states become one vector.
#pragma once
#include <string>

namespace sy {

enum class Pooling { Mean, Last, Cls };

// The model's own convention, as its files say (sentence-transformers'
// modules.json and pooling config, a GGUF's <arch>.pooling_type); failing
// that, the family's: a decoder exported for embeddings (config.json names a
// bare *Model architecture) pools its last token, a generative model the mean
// of its tokens. Vectors are L2-normalised unless the model's files list
// modules without a Normalize step.
struct EmbeddingConvention {
  Pooling pooling = Pooling::Mean;
  bool normalize = true;
  std::string source;  // what decided it (a file, a GGUF key, or the default's reason)
};

inline const char* pooling_name(Pooling p) { return p == Pooling::Mean ? "mean" : p == Pooling::Last ? "last" : "cls"; }

}  // namespace sy
