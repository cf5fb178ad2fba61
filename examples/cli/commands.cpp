#include "commands.h"

#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/generator.h"
#include "graph/onnx_import.h"
#include "tokenizer/llama2c_tokenizer.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace sy::cli {
namespace {

struct Parsed {
  po::variables_map vm;
  bool help = false;
};

Parsed parse(const std::vector<std::string>& args, const po::options_description& desc, const char* usage) {
  Parsed p;
  po::store(po::command_line_parser(args).options(desc).run(), p.vm);
  if (p.vm.count("help")) {
    std::cout << usage << "\n" << desc;
    p.help = true;
    return p;
  }
  po::notify(p.vm);
  return p;
}

// The tokenizer: --tokenizer, else tokenizer.bin or the one tok*.bin beside the model.
std::string find_tokenizer(const std::string& model, const std::string& given) {
  if (!given.empty()) return given;
  fs::path dir = fs::path(model).parent_path();
  if (dir.empty()) dir = ".";
  if (fs::exists(dir / "tokenizer.bin")) return (dir / "tokenizer.bin").string();
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.rfind("tok", 0) == 0 && e.path().extension() == ".bin") found.push_back(e.path());
  }
  SY_CHECK(found.size() == 1, "no --tokenizer given and " << (found.empty() ? "no" : "more than one")
                                                          << " tokenizer (tokenizer.bin or tok*.bin) beside " << model);
  return found[0].string();
}

std::vector<int> parse_ids(const std::string& s) {
  std::vector<int> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long v = 0;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    SY_CHECK(used > 0 && item.find_first_not_of(" \t", used) == std::string::npos && v >= 0 && v <= INT32_MAX,
             "--prompt-ids: '" << item << "' is not a token id");
    ids.push_back(static_cast<int>(v));
  }
  SY_CHECK(!ids.empty(), "the prompt is empty (--prompt-ids has no ids)");
  return ids;
}

struct ModelFlags {
  std::string model;
  int threads = 0;
  int64_t max_context = 0;
  void add(po::options_description& d) {
    d.add_options()("model,m", po::value(&model)->required(), "ONNX decoder model")(
        "threads", po::value(&threads)->default_value(0), "compute threads (0: one per core)")(
        "max-context", po::value(&max_context)->default_value(0),
        "context limit in tokens (0: the model's metadata, else 4096)");
  }
};

struct Runtime {
  std::unique_ptr<ThreadPool> threads;
  KernelRegistry registry = KernelRegistry::with_builtins();
  std::unique_ptr<DecoderModel> model;
  explicit Runtime(const ModelFlags& f) {
    threads = std::make_unique<ThreadPool>(f.threads);
    ModelOptions mo;
    mo.max_context = f.max_context;
    model = DecoderModel::load(f.model, registry, threads.get(), mo);
  }
};

}  // namespace

int cmd_generate(const std::vector<std::string>& args) {
  ModelFlags mf;
  std::string tokenizer_path, prompt_ids;
  std::vector<std::string> prompts;
  GenerationRequest req;
  bool json = false, ignore_eos = false;
  po::options_description d("generate options");
  d.add_options()("help,h", "show this help");
  mf.add(d);
  d.add_options()("tokenizer,t", po::value(&tokenizer_path), "llama2.c tokenizer (default: beside the model)")(
      "prompt,p", po::value(&prompts)->composing(), "prompt text (repeat for a batch)")(
      "prompt-ids", po::value(&prompt_ids), "prompt as comma-separated token ids")(
      "max-tokens,n", po::value(&req.max_tokens)->default_value(256), "tokens to generate at most")(
      "temperature", po::value(&req.sampling.temperature)->default_value(0.f), "0: greedy")(
      "top-k", po::value(&req.sampling.top_k)->default_value(0), "0: off")(
      "top-p", po::value(&req.sampling.top_p)->default_value(1.f), "1: off")(
      "seed", po::value(&req.sampling.seed)->default_value(0), "random seed for sampling")(
      "ignore-eos", po::bool_switch(&ignore_eos), "keep generating past the end-of-sequence token")(
      "json", po::bool_switch(&json), "print one JSON object per prompt");
  auto p = parse(args, d, "usage: switchyard generate --model M [--tokenizer T] (--prompt TEXT | --prompt-ids 1,2,3) [options]");
  if (p.help) return 0;
  SY_CHECK(prompts.empty() || prompt_ids.empty(), "give --prompt or --prompt-ids, not both");
  req.stop_at_eos = !ignore_eos;

  Runtime rt(mf);
  std::optional<Llama2cTokenizer> tok;
  bool need_tok = !json || prompt_ids.empty();
  if (need_tok) tok = Llama2cTokenizer::load(find_tokenizer(mf.model, tokenizer_path));
  std::vector<GenerationRequest> batch;
  if (!prompt_ids.empty()) {
    batch.push_back(req);
    batch.back().prompt = parse_ids(prompt_ids);
  } else if (prompts.empty()) {
    batch.push_back(req);
    batch.back().prompt = {Llama2cTokenizer::kBos};  // no prompt: a story from BOS, like run.c
  } else {
    for (const auto& text : prompts) {
      SY_CHECK(!text.empty(), "the prompt is empty");
      batch.push_back(req);
      batch.back().prompt = tok->encode(text, true, false);
    }
  }
  BaselineGenerator gen(*rt.model);
  // A single prompt in text mode streams its tokens as they come.
  bool stream = !json && batch.size() == 1;
  int prev = batch[0].prompt.back();
  if (stream) {
    std::cout << tok->decode(std::vector<int>(batch[0].prompt.begin() + 1, batch[0].prompt.end()), Llama2cTokenizer::kBos)
              << std::flush;
  }
  auto results = gen.generate(batch, [&](size_t, int t) {
    if (!stream) return;
    std::cout << tok->decode_piece(prev, t) << std::flush;
    prev = t;
  });
  for (size_t r = 0; r < batch.size(); ++r) {
    const auto& res = results[r];
    double e2e_s = res.e2e_ms / 1000.0;
    double tps = e2e_s > 0 ? static_cast<double>(res.tokens.size()) / e2e_s : 0.0;
    if (json) {
      nlohmann::json j;
      j["prompt_ids"] = batch[r].prompt;
      j["ids"] = res.tokens;
      j["text"] = tok ? tok->decode(res.tokens, batch[r].prompt.back()) : "";
      j["finish_reason"] = res.finish_reason;
      j["metrics"] = {{"ttft_ms", res.ttft_ms}, {"tpot_ms", res.tpot_ms()}, {"tokens_per_s", tps}};
      std::cout << j.dump() << "\n";
    } else {
      if (!stream) {
        std::cout << tok->decode(batch[r].prompt, Llama2cTokenizer::kBos).substr(0) << tok->decode(res.tokens, batch[r].prompt.back()) << "\n";
      } else {
        std::cout << "\n";
      }
      std::fprintf(stderr, "[%zu tokens, finish: %s, ttft %.2f ms, tpot %.3f ms, %.0f tokens/s]\n", res.tokens.size(),
                   res.finish_reason.c_str(), res.ttft_ms, res.tpot_ms(), tps);
    }
  }
  return 0;
}

int cmd_logits(const std::vector<std::string>& args) {
  ModelFlags mf;
  std::string prompt_ids;
  bool json = false;
  po::options_description d("logits options");
  d.add_options()("help,h", "show this help");
  mf.add(d);
  d.add_options()("prompt-ids", po::value(&prompt_ids)->required(), "prompt as comma-separated token ids")(
      "json", po::bool_switch(&json), "print {\"last_logits\": [...]}");
  auto p = parse(args, d, "usage: switchyard logits --model M --prompt-ids 1,2,3 [--json]");
  if (p.help) return 0;
  Runtime rt(mf);
  BaselineGenerator gen(*rt.model);
  std::vector<float> logits = gen.last_logits(parse_ids(prompt_ids));
  if (json) {
    std::cout << nlohmann::json{{"last_logits", logits}}.dump() << "\n";
  } else {
    for (size_t i = 0; i < logits.size(); ++i) std::printf("%zu\t%.7g\n", i, static_cast<double>(logits[i]));
  }
  return 0;
}

int cmd_inspect(const std::vector<std::string>& args) {
  std::string model;
  bool json = false;
  po::options_description d("inspect options");
  d.add_options()("help,h", "show this help")("model,m", po::value(&model)->required(), "ONNX model")(
      "json", po::bool_switch(&json), "print JSON");
  auto p = parse(args, d, "usage: switchyard inspect --model M [--json]");
  if (p.help) return 0;
  Graph g = import_onnx_file(model);
  int64_t params = 0, bytes = 0;
  for (const Value& v : g.values)
    if (v.constant) {
      params += v.constant->numel();
      bytes += static_cast<int64_t>(v.constant->bytes());
    }
  auto describe = [&](ValueId id) {
    const Value& v = g.values[static_cast<size_t>(id)];
    return nlohmann::json{{"name", v.name}, {"dtype", dtype_name(v.dtype)}, {"shape", v.shape_str()}};
  };
  nlohmann::json j;
  for (ValueId id : g.inputs) j["inputs"].push_back(describe(id));
  for (const auto& o : g.outputs) {
    auto dj = describe(o.value);
    dj["name"] = o.name;
    j["outputs"].push_back(dj);
  }
  j["opsets"] = g.opsets;
  j["parameters"] = params;
  j["parameter_bytes"] = bytes;
  j["nodes_imported"] = g.live_node_count();
  auto imported_ops = g.op_counts();
  ThreadPool threads(1);
  KernelRegistry registry = KernelRegistry::with_builtins();
  PassContext pctx{registry, &threads, {}};
  simplify_graph(g, pctx);
  auto simplified_ops = g.op_counts();
  j["nodes_simplified"] = g.live_node_count();
  j["op_counts"] = {{"imported", imported_ops}, {"simplified", simplified_ops}};
  if (json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("model       %s\n", model.c_str());
  std::printf("parameters  %lld (%lld bytes)\n", static_cast<long long>(params), static_cast<long long>(bytes));
  std::printf("opsets     ");
  for (const auto& [dom, v] : g.opsets) std::printf(" %s=%lld", dom.empty() ? "ai.onnx" : dom.c_str(), static_cast<long long>(v));
  std::printf("\ninputs:\n");
  for (const auto& in : j["inputs"])
    std::printf("  %-28s %-8s %s\n", in["name"].get<std::string>().c_str(), in["dtype"].get<std::string>().c_str(),
                in["shape"].get<std::string>().c_str());
  std::printf("outputs:\n");
  for (const auto& out : j["outputs"])
    std::printf("  %-28s %-8s %s\n", out["name"].get<std::string>().c_str(), out["dtype"].get<std::string>().c_str(),
                out["shape"].get<std::string>().c_str());
  std::printf("nodes: %zu imported, %zu after simplification\n", j["nodes_imported"].get<size_t>(), g.live_node_count());
  std::printf("  %-24s %9s %11s\n", "op", "imported", "simplified");
  std::set<std::string> ops;
  for (const auto& [k, v] : imported_ops) ops.insert(k);
  for (const auto& [k, v] : simplified_ops) ops.insert(k);
  for (const auto& op : ops) {
    int a = imported_ops.count(op) ? imported_ops.at(op) : 0, b = simplified_ops.count(op) ? simplified_ops.at(op) : 0;
    std::printf("  %-24s %9d %11d\n", op.c_str(), a, b);
  }
  return 0;
}

}  // namespace sy::cli
