// switchyard: the command-line front end of the engine.
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "commands.h"

namespace {
const char* kUsage =
    "usage: switchyard <command> [options]\n"
    "\n"
    "commands:\n"
    "  generate   generate text from a prompt\n"
    "  logits     print the last-position logits of a prompt\n"
    "  embed      texts -> embeddings, pooled as the model says (what /v1/embeddings serves)\n"
    "  inspect    describe a model: inputs, outputs, op counts, parameters\n"
    "  synth      write a Llama-style model with random weights at a preset size\n"
    "  bench      run a workload in-process and report serving metrics\n"
    "  ab         run two profiles of a manifest on one workload, side by side\n"
    "  serve      an OpenAI-compatible HTTP server\n"
    "  optimize   run a profile's passes and write the rewritten model (e.g. quantized)\n"
    "  eval       quality of a profile against a baseline: top-1 agreement, KL, perplexity\n"
    "  devices    the CPU and CUDA devices this build can use (--bandwidth: measured copy bandwidth)\n"
    "  tokenize   text -> ids -> text with a model's tokenizer (tokenizer.json or llama2.c)\n"
    "  chat-template  messages -> the prompt a model's chat template makes\n"
    "  convert    a GGUF file as a model folder (model.onnx, config, tokenizer, chat template)\n"
    "\n"
    "run 'switchyard <command> --help' for the options of a command\n";
}

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  const std::map<std::string, int (*)(const std::vector<std::string>&)> commands = {
      {"generate", sy::cli::cmd_generate}, {"logits", sy::cli::cmd_logits}, {"embed", sy::cli::cmd_embed}, {"inspect", sy::cli::cmd_inspect}, {"synth", sy::cli::cmd_synth}, {"bench", sy::cli::cmd_bench}, {"ab", sy::cli::cmd_ab}, {"serve", sy::cli::cmd_serve},
      {"optimize", sy::cli::cmd_optimize}, {"eval", sy::cli::cmd_eval}, {"devices", sy::cli::cmd_devices}, {"tokenize", sy::cli::cmd_tokenize},
      {"chat-template", sy::cli::cmd_chat_template}, {"convert", sy::cli::cmd_convert}};
  auto it = commands.find(cmd);
  if (it == commands.end()) {
    std::fprintf(stderr, "switchyard: unknown command '%s'\n%s", cmd.c_str(), kUsage);
    return 2;
  }
  try {
    return it->second(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "switchyard: error: %s\n", e.what());
    return 1;
  }
}
