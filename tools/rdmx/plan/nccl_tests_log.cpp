// SPDX-License-Identifier: MIT
#include "plan/nccl_tests_log.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "rdmx/error.hpp"

namespace rdmx::cli::plan {
namespace {

bool number(const std::string& token, double* out) {
  if (token.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(token.c_str(), &end);
  if (end != token.c_str() + token.size()) return false;
  *out = v;
  return true;
}

bool integer(const std::string& token) {
  return !token.empty() && std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; });
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

NcclTestsLog parse_nccl_tests_log(const std::string& text, const std::string& origin) {
  // mpirun --tag-output's "[1,0]<stdout>:" and a rank's "[0]" go wherever a
  // rank's output begins, mid-line too.
  static const std::regex tag(R"(\[\d+(,\d+)?\](<std(out|err)>:)?)");
  static const std::regex rank_line(
      R"(Rank\s+(\d+)\s+(Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$)");
  static const std::regex test_name(
      R"((all_reduce|all_gather|reduce_scatter|broadcast|reduce|alltoall|sendrecv)_perf)");
  NcclTestsLog log;
  std::map<int, std::string> hosts;
  std::map<double, std::vector<double>> times, busbws;
  std::istringstream in(text);
  std::size_t line_no = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++line_no;
    const std::string line = std::regex_replace(raw, tag, " ");
    std::smatch m;
    if (log.collective.empty() && std::regex_search(line, m, test_name)) log.collective = m[1].str();
    if (std::regex_search(line, m, rank_line)) {
      hosts[std::stoi(m[1].str())] = m[3].str();
      if (log.gpu.empty()) log.gpu = m[4].str();
      continue;
    }
    if (line.find('#') != std::string::npos) continue;
    std::istringstream words(line);
    std::vector<std::string> tokens;
    for (std::string w; words >> w;) tokens.push_back(w);
    // size, count, type, [redop], [root], then groups of time, algbw, busbw, #wrong.
    if (tokens.size() < 7 || !integer(tokens[0]) || !integer(tokens[1])) continue;
    std::vector<double> values;
    for (std::size_t i = 3; i < tokens.size(); ++i) {
      double v = 0;
      if (number(tokens[i], &v)) {
        values.push_back(v);
      } else if (tokens[i] == "N/A") {
        values.push_back(0);
      }
    }
    if (values.size() < 4) continue;
    const std::size_t group = values.size() >= 8 ? values.size() - 8 : values.size() - 4;
    const double bytes = std::strtod(tokens[0].c_str(), nullptr);
    const double time_us = values[group], busbw = values[group + 2];
    if (bytes <= 0 || time_us <= 0) continue;
    if (!std::isfinite(time_us) || !std::isfinite(busbw)) {
      throw Error(ErrorCode::InvalidArgument,
                  origin + ":" + std::to_string(line_no) + ": a measurement that is not a number",
                  {.op = "plan calibrate --from-nccl-tests"});
    }
    times[bytes].push_back(time_us * 1e-6);
    busbws[bytes].push_back(busbw);
  }
  if (times.empty()) {
    throw Error(ErrorCode::InvalidArgument, origin + ": no nccl-tests measurement in it",
                {.op = "plan calibrate --from-nccl-tests",
                 .hint = "give the output of all_reduce_perf (or all_gather_perf, reduce_scatter_perf), whose lines "
                         "read: size count type redop root time algbw busbw #wrong ..."});
  }
  for (const auto& [bytes, t] : times) log.points.push_back({bytes, median(t), median(busbws[bytes])});
  log.ranks = static_cast<int>(hosts.size());
  std::set<std::string> distinct;
  for (const auto& [rank, host] : hosts) distinct.insert(host);
  log.nodes = static_cast<int>(distinct.size());
  return log;
}

namespace {

double log_error(const Fabric& f, const Cluster& c, Collective op, const std::vector<CurvePoint>& points,
                 Library library, std::vector<double>* predicted) {
  double sum = 0;
  if (predicted) predicted->clear();
  for (const auto& p : points) {
    const double t = estimate(f, c, op, p.bytes, library).seconds;
    if (predicted) predicted->push_back(t);
    const double e = std::log(t / p.seconds);
    sum += e * e;
  }
  return sum / static_cast<double>(points.size());
}

// The minimum of `cost` over [lo, hi] by golden-section search in log
// space (the fitted values span decades); the cost is unimodal enough in
// each field alone for a few rounds of coordinate descent.
template <typename Cost>
double golden_log(double lo, double hi, Cost cost) {
  double a = std::log(lo), b = std::log(hi);
  const double r = (std::sqrt(5.0) - 1) / 2;
  double x1 = b - r * (b - a), x2 = a + r * (b - a);
  double f1 = cost(std::exp(x1)), f2 = cost(std::exp(x2));
  for (int i = 0; i < 60; ++i) {
    if (f1 <= f2) {
      b = x2;
      x2 = x1;
      f2 = f1;
      x1 = b - r * (b - a);
      f1 = cost(std::exp(x1));
    } else {
      a = x1;
      x1 = x2;
      f1 = f2;
      x2 = a + r * (b - a);
      f2 = cost(std::exp(x2));
    }
  }
  return std::exp((a + b) / 2);
}

}  // namespace

NcclTestsLog parse_perf_coll_json(const std::string& text, const std::string& origin, const std::string& collective) {
  const auto refuse = [&origin](const std::string& what) {
    throw Error(ErrorCode::InvalidArgument, origin + ": " + what,
                {.op = "plan calibrate", .hint = "give the output of rdmx perf coll --json, or an nccl-tests log"});
  };
  const auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || doc.value("schema", "") != "rdmx.perf.coll/1" ||
      !doc.contains("runs") || !doc["runs"].is_array()) {
    refuse("not a document of rdmx perf coll --json (schema rdmx.perf.coll/1)");
  }
  std::set<std::string> names;
  for (const auto& run : doc["runs"]) names.insert(run.value("collective", ""));
  if (collective.empty() && names.size() != 1) refuse("it holds several collectives: say which with --op");
  const std::string want = collective.empty() ? *names.begin() : collective;
  NcclTestsLog log;
  for (const auto& run : doc["runs"]) {
    if (run.value("collective", "") != want || !log.points.empty()) continue;
    log.collective = want;
    log.ranks = run.value("np", doc.value("np", 0));
    for (const auto& row : run.value("results", nlohmann::json::array())) {
      if (row.value("inplace", false)) continue;
      const double us = row.value("time_us", 0.0);
      if (us <= 0) continue;
      log.points.push_back({row.value("bytes", 0.0), us / 1e6, row.value("busbw_GBps", 0.0)});
    }
  }
  if (log.points.empty()) refuse("no out-of-place " + want + " rows in it");
  std::sort(log.points.begin(), log.points.end(),
            [](const CurvePoint& a, const CurvePoint& b) { return a.bytes < b.bytes; });
  return log;
}

CurveFit fit_curve(const Fabric& like, const Cluster& layout, Collective op, const std::vector<CurvePoint>& points,
                   Library library) {
  if (points.empty()) {
    throw Error(ErrorCode::InvalidArgument, "no points to fit", {.op = "plan calibrate --from-nccl-tests"});
  }
  CurveFit out;
  Fabric f = like;
  auto cost = [&](const Fabric& trial) { return log_error(trial, layout, op, points, library, nullptr); };
  if (layout.nodes == 1) {
    f.intra_gb_s = golden_log(0.01, 5000, [&](double v) {
      Fabric t = f;
      t.intra_gb_s = v;
      return cost(t);
    });
    out.fitted = "intra_gb_s";
  } else {
    for (int round = 0; round < 6; ++round) {
      f.efficiency = golden_log(1e-3, 1.0, [&](double v) {
        Fabric t = f;
        t.efficiency = v;
        return cost(t);
      });
      f.latency_us = golden_log(0.1, 1e4, [&](double v) {
        Fabric t = f;
        t.latency_us = v;
        return cost(t);
      });
    }
    out.fitted = "efficiency, latency_us";
  }
  out.rms_error = std::sqrt(log_error(f, layout, op, points, library, &out.predicted_seconds));
  out.fabric = f;
  return out;
}

}  // namespace rdmx::cli::plan
