// switchyard embed: texts (or token ids) -> their embeddings, pooled and
// normalised as the model says (what /v1/embeddings serves), one JSON line
// each. For scripts and for tests that compare against a reference.
#include "commands.h"

#include "cli_support.h"

#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

namespace po = boost::program_options;

namespace sy::cli {

int cmd_embed(const std::vector<std::string>& args) {
  EngineFlags mf;
  std::vector<std::string> prompts, prompt_ids;
  po::options_description d("embed options");
  d.add_options()("help,h", "show this help");
  mf.add(d);
  d.add_options()("prompt", po::value(&prompts)->composing(), "a text to embed (repeatable; BOS added as for a prompt)")(
      "prompt-ids", po::value(&prompt_ids)->composing(), "token ids to embed, comma-separated (repeatable)");
  auto p = parse(args, d, "usage: switchyard embed (--model M | --manifest F [--profile P]) (--prompt TEXT | --prompt-ids 1,2,3)...");
  if (p.help) return 0;
  if (prompts.empty() && prompt_ids.empty()) throw Error("give --prompt or --prompt-ids (repeatable)");
  auto engine = Engine::open(mf.options());
  const EmbeddingConvention& c = engine->embedding_convention();
  std::cerr << "[pooling: " << pooling_name(c.pooling) << (c.normalize ? ", L2-normalised" : ", not normalised") << "; from " << c.source << "]\n";
  std::vector<std::vector<int>> inputs;
  if (!prompts.empty()) {
    const auto tok = engine->folder().tokenizer();
    for (const auto& text : prompts) inputs.push_back(tok->encode(text, true));
  }
  for (const auto& ids : prompt_ids) inputs.push_back(parse_ids(ids));
  for (const auto& ids : inputs)
    std::cout << nlohmann::json{{"tokens", ids.size()}, {"embedding", engine->embedding(ids)}}.dump() << "\n";
  return 0;
}

}  // namespace sy::cli
