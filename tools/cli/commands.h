// The `switchyard` subcommands. Each parses its own options and returns the
// process exit code; errors are printed by main as "switchyard: error: ...".
#pragma once
#include <string>
#include <vector>

namespace sy::cli {

int cmd_generate(const std::vector<std::string>& args);
int cmd_logits(const std::vector<std::string>& args);
int cmd_embed(const std::vector<std::string>& args);
int cmd_inspect(const std::vector<std::string>& args);
int cmd_synth(const std::vector<std::string>& args);
int cmd_bench(const std::vector<std::string>& args);
int cmd_ab(const std::vector<std::string>& args);
int cmd_serve(const std::vector<std::string>& args);
int cmd_optimize(const std::vector<std::string>& args);
int cmd_eval(const std::vector<std::string>& args);
int cmd_devices(const std::vector<std::string>& args);
int cmd_tokenize(const std::vector<std::string>& args);
int cmd_chat_template(const std::vector<std::string>& args);
int cmd_convert(const std::vector<std::string>& args);

}  // namespace sy::cli
