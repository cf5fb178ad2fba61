// What the subcommands share: option parsing with --help, the engine flags
// (--model/--manifest/--profile/--threads/--max-context), tokenizer lookup.
#pragma once
#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "facade/engine.h"

namespace sy::cli {

namespace po = boost::program_options;

struct Parsed {
  po::variables_map vm;
  bool help = false;
};

// Parses args; with --help prints usage and the options and sets help.
Parsed parse(const std::vector<std::string>& args, const po::options_description& desc, const char* usage);

// --prompt-ids: "1,2,3"; throws naming the item that is not a token id.
std::vector<int> parse_ids(const std::string& s);

// The whole file as text; throws naming the path when it cannot be read.
std::string read_text_file(const std::string& path);

// The default manifest: $SWITCHYARD_DEFAULT_MANIFEST, else share/switchyard/
// default.yaml beside the binary (build tree) or in its prefix (installed);
// "" when there is none.
std::string default_manifest();

// Flags every command shares: where the engine configuration comes from.
struct EngineFlags {
  std::string model, manifest, profile;
  int threads = 0;
  std::string device;
  int64_t max_context = 0;
  bool dequantize = false;  // GGUF: every weight as float32
  void add(po::options_description& d);
  // The engine options: the manifest (given, else the default one), the
  // profile and the overrides.
  EngineOptions options() const;
};

}  // namespace sy::cli
