#include "commands.h"

#include "cli_support.h"

#include <boost/program_options.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>


namespace po = boost::program_options;

namespace sy::cli {

int cmd_generate(const std::vector<std::string>& args) {
  EngineFlags mf;
  std::string tokenizer_path, prompt_ids, system_prompt, chat_template_file;
  std::string json_schema_file, grammar_file, regex;
  bool chat = false, json_object = false;
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
      "chat", po::bool_switch(&chat), "send the prompt as a user message through the model's chat template")(
      "system", po::value(&system_prompt), "with --chat: a system message first")(
      "chat-template", po::value(&chat_template_file), "with --chat: this template (.jinja or .json) instead of the model folder's")(
      "min-p", po::value(&req.sampling.min_p)->default_value(0.f), "0: off")(
      "presence-penalty", po::value(&req.sampling.presence_penalty)->default_value(0.f), "OpenAI's, [-2, 2]")(
      "frequency-penalty", po::value(&req.sampling.frequency_penalty)->default_value(0.f), "OpenAI's, [-2, 2]")(
      "repetition-penalty", po::value(&req.sampling.repetition_penalty)->default_value(1.f), "Hugging Face's; 1: off")(
      "json-schema", po::value(&json_schema_file), "structured output: text matching the JSON schema in FILE")(
      "json-object", po::bool_switch(&json_object), "structured output: any JSON object")(
      "grammar", po::value(&grammar_file), "structured output: text matching the EBNF/GBNF grammar in FILE (rule 'root')")(
      "regex", po::value(&regex), "structured output: text matching the regular expression")(
      "json", po::bool_switch(&json), "print one JSON object per prompt");
  auto p = parse(args, d,
                 "usage: switchyard generate (--model M | --manifest F [--profile P]) [--tokenizer T] "
                 "(--prompt TEXT | --prompt-ids 1,2,3) [options]");
  if (p.help) return 0;
  SY_CHECK(prompts.empty() || prompt_ids.empty(), "give --prompt or --prompt-ids, not both");
  SY_CHECK(!chat || !prompts.empty(), "--chat needs --prompt (the user message)");
  SY_CHECK(chat || (system_prompt.empty() && chat_template_file.empty()), "--system and --chat-template go with --chat");
  req.stop_at_eos = !ignore_eos;
  SY_CHECK((!json_schema_file.empty()) + json_object + (!grammar_file.empty()) + (!regex.empty()) <= 1,
           "give one of --json-schema, --json-object, --grammar and --regex");
  if (!json_schema_file.empty()) req.constraint = {"json_schema", read_text_file(json_schema_file)};
  if (json_object) req.constraint = {"json_object", ""};
  if (!grammar_file.empty()) req.constraint = {"grammar", read_text_file(grammar_file)};
  if (!regex.empty()) req.constraint = {"regex", regex};

  EngineOptions options = mf.options();
  if (!tokenizer_path.empty()) options.tokenizer = tokenizer_path;
  if (!chat_template_file.empty()) options.chat_template = chat_template_file;
  auto engine = Engine::open(options);
  if (!engine->fallback_reason().empty() && !json)
    std::fprintf(stderr, "[%s; running the graph as exported]\n", engine->fallback_reason().c_str());
  const ModelFolder& folder = engine->folder();
  // Options left at their defaults take the model's recommended sampling.
  if (const SamplingDefaults rec = engine->recommended_sampling(); !rec.empty()) {
    auto unset = [&](const char* opt) { return p.vm.count(opt) == 0 || p.vm[opt].defaulted(); };
    if (rec.temperature && unset("temperature")) req.sampling.temperature = *rec.temperature;
    if (rec.top_p && unset("top-p")) req.sampling.top_p = *rec.top_p;
    if (rec.top_k && unset("top-k")) req.sampling.top_k = *rec.top_k;
    if (rec.min_p && unset("min-p")) req.sampling.min_p = *rec.min_p;
    if (rec.repetition_penalty && unset("repetition-penalty")) req.sampling.repetition_penalty = *rec.repetition_penalty;
    if (!json) std::fprintf(stderr, "[sampling defaults from %s]\n", rec.source.c_str());
  }
  std::shared_ptr<const Tokenizer> tok;
  // Text needs a tokenizer; with --prompt-ids and none beside the model the
  // ids are printed instead.
  if (prompt_ids.empty() || !folder.tokenizer_file().empty()) tok = folder.tokenizer();
  auto ids_text = [](const std::vector<int>& ids) {
    std::string out;
    for (int t : ids) {
      if (!out.empty()) out += ' ';
      out += std::to_string(t);
    }
    return out;
  };
  std::vector<GenerationRequest> batch;
  if (!prompt_ids.empty()) {
    batch.push_back(req);
    batch.back().prompt = parse_ids(prompt_ids);
  } else if (prompts.empty()) {
    batch.push_back(req);
    batch.back().prompt = tok->encode("", true);  // no prompt: from BOS alone, like run.c
    SY_CHECK(!batch.back().prompt.empty(), "give --prompt: this tokenizer adds no BOS to start from");
  } else {
    std::optional<ChatTemplate> chat_template;
    if (chat) {
      chat_template = folder.chat_template();
      SY_CHECK(chat_template, "--chat: the model folder has no chat template (tokenizer_config.json chat_template or chat_template.jinja); "
                              "give --chat-template FILE");
    }
    for (const auto& text : prompts) {
      SY_CHECK(!text.empty(), "the prompt is empty");
      batch.push_back(req);
      if (chat_template) {
        ChatRequest cr;
        if (!system_prompt.empty()) cr.messages.push_back({{"role", "system"}, {"content", system_prompt}});
        cr.messages.push_back({{"role", "user"}, {"content", text}});
        batch.back().prompt = tok->encode(chat_template->apply(cr), false);  // the template writes BOS itself
      } else {
        batch.back().prompt = tok->encode(text, true);
      }
    }
  }
  // A single prompt in text mode streams its tokens as they come.
  bool stream = !json && batch.size() == 1 && tok;
  std::unique_ptr<StreamDecoder> streamer;
  if (stream) {
    std::cout << tok->decode(batch[0].prompt, true) << std::flush;
    streamer = std::make_unique<StreamDecoder>(*tok, batch[0].prompt, true);
  }
  auto results = engine->generate(batch, [&](size_t, int t) {
    if (streamer) std::cout << streamer->push(t) << std::flush;
  });
  if (streamer) std::cout << streamer->flush();
  if (engine->has_step_engine() && !json) {
    const StepEngineMetrics m = engine->metrics();
    std::fprintf(stderr, "[step engine: %lld steps, KV blocks peak %d of %d, prefix cache hit rate %.3f (%lld of %lld prompt tokens), %lld preemptions]\n",
                 static_cast<long long>(m.steps), m.peak_used_blocks, m.total_blocks, m.prefix_hit_rate(),
                 static_cast<long long>(m.cached_tokens), static_cast<long long>(m.prompt_tokens), static_cast<long long>(m.preemptions));
    if (m.spec_drafts > 0 || m.spec_declined > 0)
      std::fprintf(stderr,
                   "[speculative: %lld drafts, %lld tokens proposed, %lld accepted, acceptance rate %.3f, mean accepted length %.2f, "
                   "declined %lld]\n",
                   static_cast<long long>(m.spec_drafts), static_cast<long long>(m.spec_draft_tokens),
                   static_cast<long long>(m.spec_accepted_tokens), m.spec_acceptance_rate(), m.spec_mean_accepted_length(),
                   static_cast<long long>(m.spec_declined));
  }
  for (size_t r = 0; r < batch.size(); ++r) {
    const auto& res = results[r];
    double e2e_s = res.e2e_ms / 1000.0;
    double tps = e2e_s > 0 ? static_cast<double>(res.tokens.size()) / e2e_s : 0.0;
    if (json) {
      nlohmann::json j;
      j["prompt_ids"] = batch[r].prompt;
      j["ids"] = res.tokens;
      j["text"] = tok ? decode_continuation(*tok, batch[r].prompt, res.tokens) : "";
      j["finish_reason"] = finish_reason_name(res.finish_reason);
      j["cached_tokens"] = res.cached_tokens;
      j["metrics"] = {{"ttft_ms", res.ttft_ms}, {"tpot_ms", res.tpot_ms()}, {"tokens_per_s", tps}};
      // Text cut inside a character (max_tokens) is not valid UTF-8: shown
      // with U+FFFD, the ids keep the exact output.
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      if (!tok) {
        std::cout << ids_text(batch[r].prompt) << " | " << ids_text(res.tokens) << "\n";
      } else if (!stream) {
        std::cout << tok->decode(batch[r].prompt, true) << decode_continuation(*tok, batch[r].prompt, res.tokens) << "\n";
      } else {
        std::cout << "\n";
      }
      std::fprintf(stderr, "[%zu tokens, finish: %s, ttft %.2f ms, tpot %.3f ms, %.0f tokens/s]\n", res.tokens.size(),
                   finish_reason_name(res.finish_reason), res.ttft_ms, res.tpot_ms(), tps);
    }
  }
  return 0;
}

int cmd_logits(const std::vector<std::string>& args) {
  EngineFlags mf;
  std::string prompt_ids, batch;
  bool json = false;
  po::options_description d("logits options");
  d.add_options()("help,h", "show this help");
  mf.add(d);
  d.add_options()("prompt-ids", po::value(&prompt_ids), "prompt as comma-separated token ids")(
      "batch", po::value(&batch), "a JSON file holding a list of prompts (lists of token ids): one line of JSON each, one model load")(
      "json", po::bool_switch(&json), "print {\"last_logits\": [...]}");
  auto p = parse(args, d,
                 "usage: switchyard logits (--model M | --manifest F [--profile P]) (--prompt-ids 1,2,3 [--json] | --batch prompts.json)");
  if (p.help) return 0;
  if (prompt_ids.empty() == batch.empty()) throw Error("give --prompt-ids or --batch (one of them)");
  auto engine = Engine::open(mf.options());
  if (!batch.empty()) {
    std::ifstream in(batch);
    if (!in) throw Error(batch + ": cannot read");
    nlohmann::json prompts;
    try {
      prompts = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw Error(batch + ": not valid JSON: " + e.what());
    }
    if (!prompts.is_array()) throw Error(batch + ": expected a list of prompts (lists of token ids)");
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (!prompts[i].is_array() || prompts[i].empty()) throw Error(batch + ": prompt " + std::to_string(i) + " is not a non-empty list of token ids");
      std::vector<int> ids;
      for (const auto& x : prompts[i]) {
        if (!x.is_number_integer()) throw Error(batch + ": prompt " + std::to_string(i) + " holds " + x.dump() + ", not a token id");
        ids.push_back(x.get<int>());
      }
      std::cout << nlohmann::json{{"last_logits", engine->last_logits(ids)}}.dump() << "\n";
    }
    return 0;
  }
  std::vector<float> logits = engine->last_logits(parse_ids(prompt_ids));
  if (json) {
    std::cout << nlohmann::json{{"last_logits", logits}}.dump() << "\n";
  } else {
    for (size_t i = 0; i < logits.size(); ++i) std::printf("%zu\t%.7g\n", i, static_cast<double>(logits[i]));
  }
  return 0;
}

}  // namespace sy::cli
