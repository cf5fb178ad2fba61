// switchyard tokenize: text -> ids -> text with a model folder's tokenizer
// (tokenizer.json or llama2.c's tokenizer.bin), for checking a tokenizer
// against its reference implementation.
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "commands.h"

namespace sy::cli {

int cmd_tokenize(const std::vector<std::string>& args) {
  std::string tokenizer, text, text_file, batch;
  bool add_special = false, json = false, timing = false;
  po::options_description d("tokenize options");
  d.add_options()("help,h", "show this help")("tokenizer", po::value(&tokenizer)->required(),
                                               "a model folder, a tokenizer.json or a llama2.c .bin")(
      "text", po::value(&text), "the text")("text-file", po::value(&text_file), "read the text from a file (bytes as they are)")(
      "add-special-tokens", po::bool_switch(&add_special), "add the tokenizer's BOS/EOS (its post-processor)")(
      "json", po::bool_switch(&json), "print {\"ids\": [...], \"decoded\": \"...\"}")(
      "time", po::bool_switch(&timing), "print the encoding time to stderr")(
      "batch", po::value(&batch), "a JSON file with an array of texts: prints one JSON line per text");
  auto p = parse(args, d, "usage: switchyard tokenize --tokenizer PATH (--text TEXT | --text-file F) [--add-special-tokens] [--json]");
  if (p.help) return 0;
  if (!batch.empty()) {
    // Many texts in one process (tests compare hundreds against a reference).
    std::ifstream in(batch, std::ios::binary);
    SY_CHECK(in, batch << ": cannot open");
    auto texts = nlohmann::json::parse(in);
    SY_CHECK(texts.is_array(), batch << ": expected a JSON array of strings");
    auto tok = ModelFolder::load_tokenizer_file(ModelFolder::tokenizer_file_of(tokenizer));
    for (const auto& t : texts) {
      std::vector<int> ids = tok->encode(t.get<std::string>(), add_special);
      nlohmann::json j{{"ids", ids}, {"decoded", tok->decode(ids, false)}};
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    return 0;
  }
  SY_CHECK((p.vm.count("text") != 0) != !text_file.empty(), "give --text or --text-file (one of them)");
  if (!text_file.empty()) {
    std::ifstream in(text_file, std::ios::binary);
    SY_CHECK(in, text_file << ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  auto tok = ModelFolder::load_tokenizer_file(ModelFolder::tokenizer_file_of(tokenizer));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int> ids = tok->encode(text, add_special);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (timing) std::fprintf(stderr, "[%zu bytes -> %zu tokens in %.1f ms (%s)]\n", text.size(), ids.size(), ms, tok->kind().c_str());
  const std::string decoded = tok->decode(ids, false);
  if (json) {
    nlohmann::json j{{"ids", ids}, {"decoded", decoded}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
  std::cout << "\n" << decoded << "\n";
  return 0;
}

}  // namespace sy::cli
