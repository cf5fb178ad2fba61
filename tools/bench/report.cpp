#include "bench/report.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "facade/engine.h"

namespace sy {
namespace {

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;
};

// A line chart as inline SVG with axes, ticks and a legend.
std::string chart(const std::string& title, const std::string& xlabel, const std::string& ylabel, const std::vector<Series>& series) {
  const double W = 560, H = 300, L = 60, R = 20, T = 30, B = 45;
  double xmax = 0, ymax = 0;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points) {
      xmax = std::max(xmax, x);
      ymax = std::max(ymax, y);
    }
  if (xmax <= 0) xmax = 1;
  if (ymax <= 0) ymax = 1;
  ymax *= 1.05;
  auto px = [&](double x) { return L + (W - L - R) * x / xmax; };
  auto py = [&](double y) { return H - B - (H - T - B) * y / ymax; };
  std::ostringstream os;
  os.precision(4);
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' role='img' aria-label='" << escape(title) << "'>";
  os << "<text x='" << W / 2 << "' y='18' text-anchor='middle' font-size='14' font-weight='bold'>" << escape(title) << "</text>";
  os << "<line x1='" << L << "' y1='" << H - B << "' x2='" << W - R << "' y2='" << H - B << "' stroke='#333'/>";
  os << "<line x1='" << L << "' y1='" << T << "' x2='" << L << "' y2='" << H - B << "' stroke='#333'/>";
  for (int i = 0; i <= 4; ++i) {
    double xv = xmax * i / 4, yv = ymax * i / 4;
    os << "<text x='" << px(xv) << "' y='" << H - B + 16 << "' text-anchor='middle' font-size='11'>" << xv << "</text>";
    os << "<text x='" << L - 6 << "' y='" << py(yv) + 4 << "' text-anchor='end' font-size='11'>" << yv << "</text>";
    os << "<line x1='" << L << "' y1='" << py(yv) << "' x2='" << W - R << "' y2='" << py(yv) << "' stroke='#eee'/>";
  }
  os << "<text x='" << (L + W - R) / 2 << "' y='" << H - 8 << "' text-anchor='middle' font-size='12'>" << escape(xlabel) << "</text>";
  os << "<text x='14' y='" << (T + H - B) / 2 << "' text-anchor='middle' font-size='12' transform='rotate(-90 14 " << (T + H - B) / 2
     << ")'>" << escape(ylabel) << "</text>";
  for (size_t k = 0; k < series.size(); ++k) {
    const char* color = kColors[k % 4];
    os << "<polyline fill='none' stroke='" << color << "' stroke-width='2' points='";
    for (const auto& [x, y] : series[k].points) os << px(x) << "," << py(y) << " ";
    os << "'/>";
    os << "<rect x='" << W - R - 150 << "' y='" << T + 4 + 18 * k << "' width='12' height='12' fill='" << color << "'/>";
    os << "<text x='" << W - R - 132 << "' y='" << T + 14 + 18 * k << "' font-size='12'>" << escape(series[k].name) << "</text>";
  }
  os << "</svg>";
  return os.str();
}

std::vector<std::pair<double, double>> cdf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<double, double>> p;
  for (size_t i = 0; i < v.size(); ++i) p.emplace_back(v[i], static_cast<double>(i + 1) / static_cast<double>(v.size()));
  return p;
}

}  // namespace

void write_html_report(const std::string& path, const std::string& title, const std::vector<BenchResult>& results,
                       const Slo& slo, const std::string& notes) {
  std::vector<Series> ttft, e2e, tput, kv;
  for (const auto& r : results) {
    std::vector<double> t, e;
    for (const auto& g : r.results)
      if (!g.tokens.empty()) {
        t.push_back(g.ttft_ms);
        e.push_back(g.e2e_ms);
      }
    ttft.push_back({r.profile, cdf(t)});
    e2e.push_back({r.profile, cdf(e)});
    // Output tokens/s over 0.5 s bins, and KV usage, from the run's samples.
    Series tp{r.profile, {}}, ku{r.profile, {}};
    double bin = 0.5, next = bin;
    int64_t last_tokens = 0;
    for (const auto& [t_s, tokens, used] : r.timeline) {
      ku.points.emplace_back(t_s, r.total_blocks ? 100.0 * used / r.total_blocks : 0);
      if (t_s >= next) {
        tp.points.emplace_back(t_s, static_cast<double>(tokens - last_tokens) / bin);
        last_tokens = tokens;
        next += bin;
      }
    }
    tput.push_back(tp);
    kv.push_back(ku);
  }
  std::ofstream out(path);
  SY_CHECK(out, path << ": cannot write the report");
  out << "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>" << escape(title) << "</title>\n"
      << "<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse}"
      << "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}"
      << ".plots{display:flex;flex-wrap:wrap;gap:16px}pre{background:#f7f7f7;padding:8px}</style></head><body>\n";
  out << "<h1>" << escape(title) << "</h1>\n<pre>" << escape(notes) << "</pre>\n";
  out << "<h2>Metrics</h2>\n<pre>" << escape(results_table(results, slo)) << "</pre>\n";
  out << "<h2>Plots</h2>\n<div class='plots'>\n";
  out << chart("TTFT CDF", "time to first token (ms)", "fraction of requests", ttft) << "\n";
  out << chart("End-to-end latency CDF", "end-to-end latency (ms)", "fraction of requests", e2e) << "\n";
  out << chart("Output throughput over time", "seconds", "output tokens/s", tput) << "\n";
  out << chart("KV cache usage over time", "seconds", "blocks used (%)", kv) << "\n";
  out << "</div>\n</body></html>\n";
}

}  // namespace sy
