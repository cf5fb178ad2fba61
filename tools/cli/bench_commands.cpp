// switchyard bench and ab: a workload (generated or from a file) through one
// profile, or through two profiles in turn with their greedy outputs
// compared; a table, JSON and an HTML report.
#include <algorithm>
#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/report.h"
#include "cli_support.h"
#include "commands.h"
#include "http_bench.h"

namespace po = boost::program_options;

namespace sy::cli {

namespace {

// Generator flags shared by bench and ab (a --workload file overrides them).
struct WorkloadFlags {
  std::string path, input_len = "32:256", output_len = "16:128";
  WorkloadSpec spec;
  void add(po::options_description& d) {
    d.add_options()("workload,w", po::value(&path), "workload spec (.yaml) or trace (.jsonl)")(
        "requests", po::value(&spec.requests)->default_value(32), "generated: number of requests")(
        "arrival", po::value(&spec.arrival)->default_value("poisson"), "generated: poisson or burst")(
        "rate", po::value(&spec.rate)->default_value(10), "generated: requests per second (poisson)")(
        "input-len", po::value(&input_len)->default_value("32:256"), "generated: prompt tokens MIN:MAX")(
        "output-len", po::value(&output_len)->default_value("16:128"), "generated: output tokens MIN:MAX")(
        "shared-prefix", po::value(&spec.shared_prefix)->default_value(0), "generated: shared fraction of each prompt")(
        "seed", po::value(&spec.seed)->default_value(1), "generated: seed")(
        "slo-ttft-ms", po::value(&spec.slo.ttft_ms)->default_value(0), "goodput SLO on TTFT (0: none)")(
        "slo-tpot-ms", po::value(&spec.slo.tpot_ms)->default_value(0), "goodput SLO on TPOT (0: none)")(
        "max-concurrency", po::value(&max_concurrency)->default_value(-1),
        "at most N requests in flight (a closed loop; 1: batch-1 latency); overrides the workload's max_concurrency");
  }
  int max_concurrency = -1;
  static void range(const std::string& s, int& lo, int& hi, const char* flag) {
    size_t c = s.find(':');
    try {
      lo = std::stoi(s.substr(0, c));
      hi = c == std::string::npos ? lo : std::stoi(s.substr(c + 1));
    } catch (const std::exception&) {
      SY_THROW(flag << ": expected MIN:MAX or N, got '" << s << "'");
    }
  }
  Workload load(int vocab) {
    Workload w;
    if (!path.empty()) {
      w = load_workload(path, vocab);
    } else {
      range(input_len, spec.input_min, spec.input_max, "--input-len");
      range(output_len, spec.output_min, spec.output_max, "--output-len");
      w = generate_workload(spec, vocab);
      w.name = "generated";
    }
    SY_CHECK(max_concurrency >= -1, "--max-concurrency must be >= 0, got " << max_concurrency);
    if (max_concurrency >= 0) w.max_concurrency = max_concurrency;
    return w;
  }
};

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  SY_CHECK(out, path << ": cannot write");
  out << j.dump(2) << "\n";
}

// Failed requests are part of the results, and a run where any failed says
// so on stderr with the first error (a plugin's failure names the plugin)
// and exits 4: a benchmark of failing requests is not a measurement.
int report_failures(const BenchResult& r, const std::string& name) {
  if (r.failed == 0) return 0;
  auto first = std::find_if(r.results.begin(), r.results.end(), [](const GenerationResult& g) { return !g.error.empty(); });
  std::cerr << name << ": " << r.failed << " of " << r.results.size() << " requests failed"
            << (first == r.results.end() ? std::string() : "; the first error: " + first->error) << "\n";
  return 4;
}

}  // namespace

int cmd_bench(const std::vector<std::string>& args) {
  EngineFlags mf;
  WorkloadFlags wf;
  std::string out = "bench.json", html;
  bool quiet = false;
  po::options_description d("bench options");
  d.add_options()("help,h", "show this help");
  mf.add(d);
  wf.add(d);
  std::string url, api_key, served_model = "stories260K";
  int vocab = 512;
  d.add_options()("out", po::value(&out)->default_value("bench.json"), "JSON results")("html", po::value(&html), "also write an HTML report")(
      "quiet", po::bool_switch(&quiet), "no progress bar")("url", po::value(&url), "drive a running server instead (http://host:port)")(
      "api-key", po::value(&api_key), "with --url: the server's key")("served-model", po::value(&served_model)->default_value("stories260K"),
                                                                       "with --url: the model id")(
      "vocab", po::value(&vocab)->default_value(512), "with --url: token ids are drawn below this");
  auto p = parse(args, d,
                 "usage: switchyard bench (--manifest M [--profile P] | --model M | --url http://host:port) "
                 "[--workload W | generator options]");
  if (p.help) return 0;
  BenchResult r;
  Workload w;
  std::string name;
  if (!url.empty()) {
    // A running server: the same workload through concurrent streaming clients.
    w = wf.load(vocab);
    name = url;
    r = run_workload_http(url, api_key, served_model, w, !quiet);
  } else {
    auto engine = Engine::open(mf.options());
    w = wf.load(static_cast<int>(engine->vocab_size()));
    name = mf.profile.empty() ? "default" : mf.profile;
    r = run_workload(*engine, w, name, !quiet);
  }
  std::vector<BenchResult> rs{r};
  std::cout << "workload " << w.name << ": " << w.requests.size() << " requests\n" << results_table(rs, w.slo);
  auto j = results_json(rs, w.slo);
  j["workload"] = w.name;
  j["max_concurrency"] = w.max_concurrency;
  write_json(out, j);
  if (!html.empty()) write_html_report(html, "switchyard bench: " + name, rs, w.slo, "workload: " + w.name);
  std::cout << "wrote " << out << (html.empty() ? "" : " and " + html) << "\n";
  return report_failures(r, name);
}

int cmd_ab(const std::vector<std::string>& args) {
  EngineFlags mf;
  WorkloadFlags wf;
  std::string profiles, out = "ab.json", html = "ab-report.html";
  bool quiet = false;
  int rounds = 1;
  po::options_description d("ab options");
  d.add_options()("help,h", "show this help");
  mf.add(d);
  wf.add(d);
  d.add_options()("profiles", po::value(&profiles)->required(), "A,B: two profiles of the manifest")(
      "out", po::value(&out)->default_value("ab.json"), "JSON results")("html", po::value(&html)->default_value("ab-report.html"),
                                                                         "HTML report with plots")(
      "quiet", po::bool_switch(&quiet), "no progress bar")(
      "rounds", po::value(&rounds)->default_value(1),
      "run A and B this many times, alternating (A B, B A, ...), and report medians and the per-round ratio B/A");
  auto p = parse(args, d, "usage: switchyard ab --manifest M --profiles A,B (--workload W | generator options)");
  if (p.help) return 0;
  SY_CHECK(!mf.manifest.empty(), "ab needs --manifest");
  size_t comma = profiles.find(',');
  SY_CHECK(comma != std::string::npos && comma > 0 && comma + 1 < profiles.size(), "--profiles: expected A,B, got '" << profiles << "'");
  SY_CHECK(rounds >= 1 && rounds <= 100, "--rounds: expected 1 to 100, got " << rounds);
  std::vector<std::string> names = {profiles.substr(0, comma), profiles.substr(comma + 1)};
  // Rounds alternate which profile runs first (A B, B A, A B, ...), so a
  // drift in the machine's speed falls on both sides.
  std::vector<BenchResult> runs[2];
  Workload w;
  bool loaded = false;
  for (int round = 0; round < rounds; ++round)
    for (size_t k = 0; k < 2; ++k) {
      const size_t i = round % 2 == 0 ? k : 1 - k;
      EngineFlags f = mf;
      f.profile = names[i];
      auto engine = Engine::open(f.options());  // one at a time: the other's memory is freed
      if (!loaded) {
        w = wf.load(static_cast<int>(engine->vocab_size()));
        loaded = true;
      }
      runs[i].push_back(run_workload(*engine, w, names[i], !quiet));
    }
  // Greedy requests must produce the same tokens under both profiles, in every round.
  size_t greedy = 0, differ = 0;
  for (size_t i = 0; i < w.requests.size(); ++i) {
    if (w.requests[i].request.sampling.temperature > 0) continue;
    ++greedy;
    bool same = true;
    for (int round = 0; round < rounds; ++round)
      same = same && runs[0][static_cast<size_t>(round)].results[i].tokens == runs[0][0].results[i].tokens &&
             runs[1][static_cast<size_t>(round)].results[i].tokens == runs[0][0].results[i].tokens;
    differ += !same;
  }
  const std::vector<BenchResult> rs = {runs[0].back(), runs[1].back()};
  std::ostringstream notes;
  notes << "manifest " << mf.manifest << ", workload " << w.name << " (" << w.requests.size() << " requests"
        << (w.max_concurrency > 0 ? ", at most " + std::to_string(w.max_concurrency) + " in flight" : std::string()) << ")\n"
        << "A = " << names[0] << ", B = " << names[1] << "\n"
        << "greedy outputs agree: " << (differ == 0 ? "yes" : "NO") << " (" << greedy - differ << " of " << greedy << " requests identical)"
        << (rounds > 1 ? " in each of " + std::to_string(rounds) + " rounds; the figures and plots below are the last round's" : std::string());
  std::cout << notes.str() << "\n" << results_table(rs, w.slo);
  if (rounds > 1) std::cout << "\n" << rounds_table(runs[0], runs[1]);
  auto j = results_json(rs, w.slo);
  if (rounds > 1) j["rounds"] = rounds_json(runs[0], runs[1]);
  j["workload"] = w.name;
  j["max_concurrency"] = w.max_concurrency;
  j["outputs_agree"] = differ == 0;
  j["greedy_requests"] = greedy;
  j["greedy_requests_differing"] = differ;
  write_json(out, j);
  write_html_report(html, "switchyard ab: " + names[0] + " vs " + names[1], rs, w.slo, notes.str());
  std::cout << "wrote " << out << " and " << html << "\n";
  int failed = 0;
  for (size_t i = 0; i < 2; ++i)
    for (const BenchResult& r : runs[i]) failed = std::max(failed, report_failures(r, names[i]));
  if (failed) return failed;
  return differ == 0 ? 0 : 3;
}

}  // namespace sy::cli
