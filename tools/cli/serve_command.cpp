// switchyard serve: the OpenAI-compatible server (tools/server) over the
// embedding API.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "cli_support.h"
#include "commands.h"
#include "openai_server.h"

namespace po = boost::program_options;

namespace sy::cli {

int cmd_serve(const std::vector<std::string>& args) {
  std::string manifest, profile, model, tokenizer, chat_template, tool_parser;
  sy::server::ServerOptions o;
  int threads = 0;
  po::options_description d("serve options");
  d.add_options()("help,h", "show this help")("manifest", po::value(&manifest), "YAML manifest (default: the default manifest; then give --model)")(
      "profile", po::value(&profile), "profile of the manifest (it must select a cache manager)")(
      "model,m", po::value(&model), "override the manifest's model")("host", po::value(&o.host)->default_value("127.0.0.1"), "listen address")(
      "port", po::value(&o.port)->default_value(8000), "listen port")("api-key", po::value(&o.api_key), "require 'Authorization: Bearer KEY' on /v1")(
      "served-model-name", po::value(&o.model_name), "model id in the API (default: the model file's name)")(
      "max-body-bytes", po::value(&o.max_body_bytes)->default_value(1 << 20), "largest request body")(
      "max-prompt-tokens", po::value(&o.max_prompt_tokens)->default_value(0), "longest prompt (0: the context limit)")(
      "max-tokens-limit", po::value(&o.max_tokens_limit)->default_value(4096), "largest max_tokens a request may ask")(
      "shutdown-timeout", po::value(&o.shutdown_timeout_s)->default_value(10), "SIGTERM: seconds to finish in-flight requests")(
      "threads", po::value(&threads)->default_value(0), "compute threads (0: the manifest's)")(
      "tokenizer", po::value(&tokenizer), "tokenizer.json, a model folder or a llama2.c .bin (default: the manifest's, else the model folder's)")(
      "chat-template", po::value(&chat_template), "chat template for /v1/chat/completions (.jinja, or .json with chat_template; default: the model folder's)")(
      "tool-parser", po::value(&tool_parser),
      "how the model writes tool calls: hermes, llama3_json, mistral, deepseek_v3, granite, command_r, gpt_oss (default: its chat template's)")(
      "allowed-origins", po::value(&o.allowed_origins)->default_value("*"), "CORS: origins browsers may call from ('*': any; '': none)");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(d).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: switchyard serve (--manifest M | --model M) [--profile P] [--host H] [--port N] [options]\n" << d;
    return 0;
  }
  po::notify(vm);
  if (manifest.empty()) manifest = default_manifest();
  if (manifest.empty()) {
    std::fprintf(stderr, "switchyard: error: give --manifest (no default manifest was found beside the binary)\n");
    return 1;
  }
  sy_engine_options eo{};
  eo.struct_size = sizeof(eo);
  eo.manifest = manifest.c_str();
  eo.profile = profile.empty() ? nullptr : profile.c_str();
  eo.model = model.empty() ? nullptr : model.c_str();
  eo.threads = threads;
  eo.tokenizer = tokenizer.empty() ? nullptr : tokenizer.c_str();
  eo.chat_template = chat_template.empty() ? nullptr : chat_template.c_str();
  eo.tool_parser = tool_parser.empty() ? nullptr : tool_parser.c_str();
  sy_engine* engine = nullptr;
  if (sy_engine_create(&eo, &engine) != SY_API_OK) {
    std::fprintf(stderr, "switchyard: error: %s\n", sy_last_error());
    return 1;
  }
  int rc = sy::server::serve(engine, o);
  sy_engine_destroy(engine);
  return rc;
}

}  // namespace sy::cli
