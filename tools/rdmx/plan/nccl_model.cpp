// SPDX-License-Identifier: MIT
#include "plan/nccl_model.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "rdmx/error.hpp"

namespace rdmx::cli::plan {
namespace {

// The figures below are NCCL's tuner constants (NVIDIA/nccl, src/graph/
// tuning.cc, master of 2026; docs/ADVISOR.md cites each): microseconds and
// GB/s, indexed by algorithm, protocol, link kind, GPU generation and node
// count (one, two, more).
enum Algo { kTree, kRing, kPat, kAlgos };
enum Proto { kLL, kLL128, kSimple, kProtos };
enum Hw { kNvlink, kPci, kNet };
enum Generation { kVolta, kAmpere, kHopper, kBlackwell };

const char* const kAlgoNames[kAlgos] = {"tree", "ring", "pat"};
const char* const kProtoNames[kProtos] = {"LL", "LL128", "Simple"};

constexpr double kBaseLatency[kAlgos][kProtos] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {8.0, 8.0, 8.0}};
constexpr double kHwLatency[3][kAlgos][kProtos] = {
    {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}, {0, 0, 4.0}},    // NVLink
    {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0, 0, 4.0}},     // PCI
    {{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}, {0, 0, 14.0}},  // network
};
// LL's ceiling: one node by GPU generation; across nodes by CPU, where the
// tables' Intel row is taken (the CPU is not part of a fabric profile).
constexpr double kLlMaxOneNode[4] = {39.0, 87.7, 141.0, 282.0};
constexpr double kLlMaxAcross[2] = {39.0, 20.4};  // two nodes, more
constexpr double kPerChannelRingLl128[4] = {20.0, 20.0, 36.7, 40.0};
constexpr double kPerChannelTreeLl128[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
constexpr double kPerChannelTree[4][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
// The tree's all_reduce bandwidth at medium sizes, by log2(bytes / 64).
constexpr double kTreeCorrection[kProtos][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9}};
// How much faster than a ring's the two-node tree's network carries an
// all_reduce, by GPU generation: Volta and Ampere's balanced tree as
// published A100 runs realise it (their median), Hopper's and Blackwell's
// as NCCL's tuner charges its two-node NVLS tree (docs/ADVISOR.md, "The
// two-node tree").
constexpr double kTwoNodeTreeNetGain[4] = {1.3, 1.3, 2.0, 2.0};
constexpr double kNetOverheadUs = 1.0;  // a network post from an Intel host
// The fabric's per-step latency beyond what the tuner's network figures
// already hold: they are InfiniBand's, about rdmx's ib profiles' 4 us.
constexpr double kTunerNetLatencyUs = 4.0;

Generation generation_of(const std::string& gpu) {
  std::string g;
  for (char c : gpu) g += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (g.rfind("GB", 0) == 0 || g.rfind("B1", 0) == 0 || g.rfind("B2", 0) == 0 || g.rfind("B3", 0) == 0) {
    return kBlackwell;
  }
  if (g.rfind("H", 0) == 0 || g.rfind("GH", 0) == 0) return kHopper;
  if (g.rfind("A", 0) == 0 || g.rfind("L", 0) == 0 || g.rfind("RTX", 0) == 0) return kAmpere;
  if (g.rfind("V", 0) == 0 || g.rfind("P", 0) == 0 || g.rfind("T4", 0) == 0 || g.rfind("K", 0) == 0) return kVolta;
  throw Error(ErrorCode::InvalidArgument, "no NCCL tables for the GPU '" + gpu + "'",
              {.op = "rdmx plan",
               .hint = "name the GPU as NVIDIA does (V100, A100, H100, H200, B200, ...) in the fabric's \"gpu\""});
}

int log2_floor(double v) { return v < 2 ? 0 : static_cast<int>(std::floor(std::log2(v) + 1e-12)); }

// What one layout offers NCCL: the bus bandwidths of its links and how the
// tuner sees them.
struct Layout {
  int nodes, ppn, ranks, channels;
  Generation gen;
  Hw intra_hw;
  double net_gb_s;    // a node's network bandwidth, its NICs together
  double intra_gb_s;  // one GPU to the next inside a node
  double inter_extra_us;
  bool ll128;
  int node_index() const { return nodes == 1 ? 0 : nodes == 2 ? 1 : 2; }
};

Layout layout_of(const Fabric& f, const Cluster& c) {
  Layout l{};
  l.nodes = c.nodes;
  l.ppn = c.ranks_per_node;
  l.ranks = c.ranks();
  l.gen = generation_of(f.gpu);
  l.intra_hw = f.intra_link == "pci" ? kPci : kNvlink;
  l.net_gb_s = f.node_net_bytes_per_s(c.ranks_per_node) / 1e9;
  l.intra_gb_s = f.intra_gb_s;
  l.channels = f.nccl_channels > 0 ? f.nccl_channels : std::max(2, 2 * f.nics_per_node);
  l.inter_extra_us = std::max(0.0, f.latency_us - kTunerNetLatencyUs);
  // LL128 needs NVLink inside the node and, across nodes, a NIC the GPU
  // reaches directly (GPUDirect); the socket transport's host path is not.
  l.ll128 = l.intra_hw == kNvlink && (l.nodes == 1 || (f.transport == "rdma" && f.gpudirect));
  return l;
}

// The bus bandwidth each algorithm's data path reaches on the links.
double path_bus_bandwidth(const Layout& l, Algo a) {
  if (l.nodes == 1) return l.intra_gb_s;
  // At two nodes each half of NCCL's double binary tree crosses the
  // network once each way: half the bytes a ring sends. Not every
  // generation realises the 2x that allows (docs/ADVISOR.md, "The two-node
  // tree").
  if (a == kTree && l.nodes == 2) return std::min(kTwoNodeTreeNetGain[l.gen] * l.net_gb_s, l.intra_gb_s);
  if (a == kPat) return l.net_gb_s;
  return std::min(l.net_gb_s, l.intra_gb_s);
}

// The algorithm bandwidth NCCL gets from algorithm `a` and protocol `p`
// (0: it does not run that pair).
double algo_bandwidth(const Layout& l, Algo a, Proto p, int steps) {
  double bus = path_bus_bandwidth(l, a);
  const int n = l.node_index();
  const double ll_max = l.nodes == 1 ? kLlMaxOneNode[l.gen] : kLlMaxAcross[n - 1];
  if (a == kRing && p == kLL) bus = std::min(ll_max, bus * 0.5);
  if (a == kRing && p == kLL128) bus = std::min(bus * 0.92, l.channels * kPerChannelRingLl128[l.gen]);
  if (a == kTree) {
    bus = std::min(bus * 0.92, l.channels * kPerChannelTree[l.gen][n]);
    if (p == kLL) bus = std::min(bus / 3.8, ll_max);
    if (p == kLL128) {
      bus = std::min(bus * (l.nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), l.channels * kPerChannelTreeLl128[l.gen][n]);
    }
  }
  if (a == kPat) return bus * 0.75;
  if (a == kRing) return bus * l.ranks / steps;
  return bus * 0.5;  // the tree's all_reduce: each byte goes up and comes down
}

double latency_us(const Layout& l, Collective op, Algo a, Proto p, int steps) {
  double lat = kBaseLatency[a][p];
  double intra = kHwLatency[l.intra_hw][a][p];
  // One GPU per node exposes the network's latency fully: the tree's figure.
  double inter = kHwLatency[kNet][l.ppn == 1 ? kTree : a][p] + l.inter_extra_us;
  if (p == kSimple) inter += l.inter_extra_us;  // and the flush after a Simple step
  const bool rooted = op == Collective::Broadcast || op == Collective::Reduce;
  if (a == kRing && rooted) {
    const Hw hw = l.nodes == 1 ? l.intra_hw : kNet;
    lat += steps * kHwLatency[hw][p == kSimple ? kTree : kRing][p] + (l.nodes - 1) * l.inter_extra_us;
  } else if (a == kRing) {
    if (l.nodes > 1) intra = std::max(intra, kNetOverheadUs * (p == kSimple ? 3 : 1));
    const int inter_steps = l.nodes == 1 ? 0 : (op == Collective::AllReduce ? 2 * (l.nodes - 1) : l.nodes - 1);
    lat += (steps - inter_steps) * intra + inter_steps * inter;
  } else if (a == kTree) {
    lat += 2 * ((l.ppn - 1) * intra + log2_floor(l.nodes) * inter);
  } else {
    lat += log2_floor(l.nodes) * (inter / 3.5) + l.ranks * 2.8;
  }
  return lat;
}

double time_us(const Layout& l, Collective op, Algo a, Proto p, double bytes) {
  const int steps = op == Collective::AllReduce                                      ? 2 * (l.ranks - 1)
                    : op == Collective::AllGather || op == Collective::ReduceScatter ? l.ranks - 1
                                                                                     : l.ranks;
  double bw = algo_bandwidth(l, a, p, steps);
  double lat = latency_us(l, op, a, p, steps);
  const int log_size = log2_floor(std::max(1.0, std::floor(bytes / 64)));
  if (a == kTree && op == Collective::AllReduce && bytes >= 64 && log_size < 23) bw *= kTreeCorrection[p][log_size];
  // The ring's plateau across nodes, once each rank's share of a channel is
  // past 64 bytes.
  if (a == kRing && p == kSimple && l.nodes > 1 && op == Collective::AllReduce &&
      bytes / (l.channels * l.ranks) >= 64) {
    lat *= l.gen < kAmpere ? 1.9 : 1.4;
  }
  return lat + bytes / (1000 * bw);
}

}  // namespace

std::string nccl_generation(const std::string& gpu) {
  static const char* const names[] = {"Volta", "Ampere", "Hopper", "Blackwell"};
  return names[generation_of(gpu)];
}

std::vector<NcclCandidate> nccl_candidates(const Fabric& fabric, const Cluster& cluster, Collective op, double bytes,
                                           bool ring_only) {
  const Layout l = layout_of(fabric, cluster);
  std::vector<Algo> algos{kRing};
  if (!ring_only && op == Collective::AllReduce) algos.push_back(kTree);
  // PAT: all_gather and reduce_scatter with one GPU per node.
  if (!ring_only && (op == Collective::AllGather || op == Collective::ReduceScatter) && l.ppn == 1 && l.nodes > 1) {
    algos.push_back(kPat);
  }
  std::vector<NcclCandidate> out;
  for (Algo a : algos) {
    for (Proto p : {kLL, kLL128, kSimple}) {
      if (p == kLL128 && (ring_only || !l.ll128)) continue;
      if (a == kPat && p != kSimple) continue;
      out.push_back({kAlgoNames[a], kProtoNames[p], time_us(l, op, a, p, bytes) * 1e-6});
    }
  }
  return out;
}

}  // namespace rdmx::cli::plan
