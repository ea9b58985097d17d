#include "scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gate.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/grappler/costs/graph_properties.h"
#include "tensorflow/core/grappler/grappler_item.h"
#include "tensorflow/core/grappler/optimizers/custom_graph_optimizer_registry.h"
#include "tensorflow/core/lib/strings/proto_serialization.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/platform/logging.h"
#include "tensorflow/core/platform/path.h"
#include "tensorflow/core/util/device_name_utils.h"
#include "tsl/platform/hash.h"

namespace tfsched {
namespace {

using tensorflow::DataType;
using tensorflow::GraphDef;
using tensorflow::NodeDef;

constexpr char kGateOp[] = "TfschedGate";
// TensorFlow's ReplicateConstantsPass copies constants this small instead of sending them.
constexpr int64_t kReplicatedConstMaxElements = 16;
// Tensors (or slices) smaller than this are ordered but not acknowledged: they take a negligible
// share of any useful credit, and each acknowledgement is one more RPC. An improvement over
// ByteScheduler, which acknowledges everything: par32 (32 tensors of 2,560 parameters) at 1 PS x
// 4 workers lost a third of its throughput to acknowledgements (benchmarks/results/
// bench-par32-train-all-acked.md, against bench-par32-train.md after this change).
constexpr int64_t kMinAckedElements = 16384;
// ... nor are tensors under this share of the pass's credit (1/8): on ResNet-50 at 10 Gbit/s
// (compute-bound) every acknowledged tensor cost about 0.3 ms of the two cores, and with all 52
// of its tensors over 16,384 parameters acknowledged in each direction, a credit that never bound
// (100,000,000) made training 0.919x of vanilla TensorFlow, against 0.982x for the same order
// without credit (benchmarks/results/bench-resnet50-10g-credit-before.md; -after.md: 0.997x). A
// tensor under credit/8 holds little of the window; the ones released ahead of an acknowledged one
// are at most a few such. The live credit (TfschedSetCredit) limits the acknowledged tensors: give
// the pass the smallest credit it will be set to. The share is the pass's ack_share
// (TfschedScheduler::ack_share_, 8 by default): on Inception-v3, whose 378 tensors are mostly
// small, 60% of the parameters are in tensors under an eighth of ByteScheduler's credit, and
// those race for the wire as without credit (benchmarks/reading.md, the acknowledgement share).

// ByteScheduler's sizes for parameter servers (§4.2) and the link they are kept for.
constexpr int64_t kDefaultPartition = 1000000;
constexpr int64_t kDefaultCredit = 4000000;
constexpr double kReferenceBandwidthBps = 1e9;
// The fastest link they are sized for (tfsched.enforce.api MAX_SIZES_BANDWIDTH_BPS): past it
// the sizes outgrow an int64 (llround's result is then unspecified).
constexpr double kMaxSizesBandwidthBps = 1e15;
// The credit at 1 Gbit/s is at most this share of what the busiest channel carries in a step.
constexpr int64_t kChannelCreditShare = 4;

// (partition, credit) for a partition or credit of -1: ByteScheduler's sizes kept to the model
// and the link, the rule of tfsched.enforce.link_sizes (its docstring has the measurements). A
// credit as large as a step's data orders nothing, so at 1 Gbit/s it is at most a quarter of
// what the busiest channel carries (`busiest`, parameters) and never under kMinAckedElements,
// the partition at most the credit; on a faster link both keep their link time.
std::pair<int64_t, int64_t> AutoSizes(int64_t busiest, double bandwidth_bps) {
  const int64_t credit =
      std::min(kDefaultCredit, std::max(kMinAckedElements, busiest / kChannelCreditShare));
  const int64_t partition = std::min(kDefaultPartition, credit);
  const double scale = std::max(
      1.0, (bandwidth_bps > 0 ? bandwidth_bps : kReferenceBandwidthBps) / kReferenceBandwidthBps);
  return {std::llround(partition * scale), std::llround(credit * scale)};
}

// "/job:J/replica:R/task:T" of a device, full or partial ("/job:ps/task:1"); "" if it names no job.
std::string TaskOf(const std::string& device) {
  tensorflow::DeviceNameUtils::ParsedName p;
  if (device.empty() || !tensorflow::DeviceNameUtils::ParseFullName(device, &p) || !p.has_job)
    return "";
  return absl::StrCat("/job:", p.job, "/replica:", p.has_replica ? p.replica : 0,
                      "/task:", p.has_task ? p.task : 0);
}

std::string JobOf(const std::string& task) {
  // "/job:ps/replica:0/task:0" -> "ps"
  auto start = task.find("/job:");
  if (start == std::string::npos) return "";
  start += 5;
  auto end = task.find('/', start);
  return task.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

struct Input {
  std::string node;
  int port = 0;
  bool control = false;
};

Input ParseInput(const std::string& s) {
  Input in;
  if (!s.empty() && s[0] == '^') {
    in.control = true;
    in.node = s.substr(1);
    return in;
  }
  auto colon = s.rfind(':');
  if (colon != std::string::npos &&
      s.find_first_not_of("0123456789", colon + 1) == std::string::npos && colon + 1 < s.size()) {
    in.node = s.substr(0, colon);
    in.port = std::stoi(s.substr(colon + 1));
  } else {
    in.node = s;
  }
  return in;
}

bool IsVariableOp(const std::string& op) {
  return op == "VarHandleOp" || op == "VariableV2" || op == "Variable" || op == "_VarHandlesOp";
}
bool IsForwarding(const std::string& op) {
  static const auto* ops = new std::set<std::string>{
      "Identity", "RefIdentity", "Snapshot", "Enter", "RefEnter", "Switch", "RefSwitch",
      "ReadVariableOp", "StopGradient",
      // reads of some rows (embedding lookups): the pull of that variable, as in tfsched.graph
      "ResourceGather", "ResourceGatherNd", "Gather", "GatherV2", "GatherNd"};
  return ops->count(op) > 0;
}
bool IsUpdate(const std::string& op) {
  // clang-format off: the names packed, not one to a line
  static const auto* ops = new std::set<std::string>{
      "Assign", "AssignAdd", "AssignSub", "AssignVariableOp", "AssignAddVariableOp",
      "AssignSubVariableOp", "ScatterAdd", "ScatterSub", "ScatterUpdate", "ResourceScatterAdd",
      "ResourceScatterSub", "ResourceScatterUpdate"};
  // clang-format on
  return ops->count(op) > 0 || absl::StartsWith(op, "Apply") ||
         absl::StartsWith(op, "ResourceApply") || absl::StartsWith(op, "SparseApply") ||
         absl::StartsWith(op, "ResourceSparseApply");
}
bool IsOp(const std::string& op, const char* name) {
  return op == name || op == absl::StrCat("Ref", name);
}

// The graph as index-based adjacency, for the analyses below.
struct Graph {
  const GraphDef* def;
  std::unordered_map<std::string, int> index;
  std::vector<std::vector<Input>> inputs;  // per node, parsed
  std::vector<std::vector<int>> preds;     // data + control, without loop back edges
  std::vector<std::vector<std::pair<int, int>>> data_out;  // (consumer, input index) per node
  std::vector<std::vector<int>> out;                       // data + control successors
  std::vector<std::string> task;
  std::vector<int> topo;

  explicit Graph(const GraphDef& g) : def(&g) {
    const int n = g.node_size();
    for (int i = 0; i < n; ++i) index[g.node(i).name()] = i;
    inputs.resize(n);
    preds.resize(n);
    data_out.resize(n);
    out.resize(n);
    task.resize(n);
    for (int i = 0; i < n; ++i) {
      const NodeDef& node = g.node(i);
      task[i] = TaskOf(node.device());
      for (int k = 0; k < node.input_size(); ++k) {
        Input in = ParseInput(node.input(k));
        inputs[i].push_back(in);
        auto it = index.find(in.node);
        if (it == index.end()) continue;
        int src = it->second;
        const std::string& sop = g.node(src).op();
        if (sop == "NextIteration" || sop == "RefNextIteration") continue;  // loop back edge
        preds[i].push_back(src);
        out[src].push_back(i);
        if (!in.control) data_out[src].push_back({i, k});
      }
    }
    // A loop's Exit waits for every input of its loop, the loop-invariant ones too: the loop
    // runs until its condition fails, and its body may need any of them on every iteration,
    // through the back edges left out here. Without these edges an Exit sent on a channel could
    // take its turn before an input of its own loop on that channel, and each waited for the
    // other until the gates' timeout (a random graph: a loop on a worker, one of its loop
    // variables from a PS, another a variable's read from that PS).
    std::map<std::string, std::vector<int>> entering;  // a frame's name -> its Enter nodes
    for (int i = 0; i < n; ++i)
      if (IsOp(g.node(i).op(), "Enter")) {
        auto it = g.node(i).attr().find("frame_name");
        if (it != g.node(i).attr().end()) entering[it->second.s()].push_back(i);
      }
    for (int x = 0; x < n && !entering.empty(); ++x) {
      if (!IsOp(g.node(x).op(), "Exit") || inputs[x].empty()) continue;
      const int sw = Find(inputs[x][0].node);  // Exit <- Switch <- Merge <- Enter (its variable's)
      const int merge = sw >= 0 && !inputs[sw].empty() ? Find(inputs[sw][0].node) : -1;
      if (merge < 0 || !IsOp(g.node(merge).op(), "Merge")) continue;
      for (const Input& in : inputs[merge]) {
        const int e = Find(in.node);
        if (e < 0 || !IsOp(g.node(e).op(), "Enter")) continue;
        auto name = g.node(e).attr().find("frame_name");
        if (name == g.node(e).attr().end()) break;
        auto frame = entering.find(name->second.s());
        if (frame == entering.end()) break;
        for (int u : frame->second)
          if (std::find(preds[x].begin(), preds[x].end(), u) == preds[x].end()) {
            preds[x].push_back(u);
            out[u].push_back(x);
          }
        break;
      }
    }
    // Kahn's algorithm; nodes left over (a cycle TensorFlow would reject) are appended.
    std::vector<int> indeg(n);
    for (int i = 0; i < n; ++i) indeg[i] = static_cast<int>(preds[i].size());
    std::deque<int> q;
    for (int i = 0; i < n; ++i)
      if (indeg[i] == 0) q.push_back(i);
    std::vector<bool> seen(n);
    while (!q.empty()) {
      int v = q.front();
      q.pop_front();
      topo.push_back(v);
      seen[v] = true;
      for (int s : out[v])
        if (--indeg[s] == 0) q.push_back(s);
    }
    for (int i = 0; i < n; ++i)
      if (!seen[i]) topo.push_back(i);
  }

  const NodeDef& node(int i) const { return def->node(i); }
  int Find(const std::string& name) const {
    auto it = index.find(name);
    return it == index.end() ? -1 : it->second;
  }
};

struct Transfer {
  int src = 0;
  int port = 0;
  std::string sender, receiver;           // tasks
  std::vector<std::pair<int, int>> uses;  // (consumer node, input index) on the receiver
  DataType dtype = tensorflow::DT_INVALID;
  std::string kind, key;
  // The variables a push updates when it updates several (Grappler merged their identical
  // gradients: Par-32 training's 32 branches); key is then its tensor's.
  std::vector<std::string> updates;
  int stage = 0;
  double value = 0;  // the order on the channel: schedule priority or TIO's M+
  bool matched = false;
  int64_t priority = 0;  // of the first slice; slice i has priority + i, or priority if tied
  bool tied = false;     // shares its priority with another transfer of its channel
  int64_t channel_size = 0;
  // Partitioning (ByteScheduler §4.2): slices of slice_elements, the last one shorter.
  int64_t slices = 1;
  int64_t slice_elements = 0;  // 0: size unknown until run time
  int64_t elements = 0;
  tensorflow::TensorShapeProto shape;
};

// More slices than this in one graph are warned of (TfschedScheduler::Gate).
constexpr int64_t kManySlices = 10000;

// Slices for a tensor of `elements` parameters of `dtype` and a partition size: (count, size).
// The size is rounded up to 64 bytes so that every slice of the sender's buffer stays aligned
// (and TfschedSplit needs no copy); a tensor within one partition is not split.
std::pair<int64_t, int64_t> Slicing(int64_t elements, DataType dtype, int64_t partition) {
  const int64_t bytes = tensorflow::DataTypeSize(dtype);
  if (partition <= 0 || elements <= partition || bytes <= 0 || 64 % bytes != 0 ||
      !tensorflow::DataTypeCanUseMemcpy(dtype))
    return {1, elements};
  const int64_t unit = 64 / bytes;
  const int64_t want = (elements + partition - 1) / partition;
  int64_t size = (elements + want - 1) / want;
  size = (size + unit - 1) / unit * unit;
  return {(elements + size - 1) / size, size};
}

std::string VariableBehind(const Graph& g, int n) {
  for (int guard = 0; guard < 64 && n >= 0; ++guard) {
    const std::string& op = g.node(n).op();
    if (IsVariableOp(op)) return g.node(n).name();
    if (!IsForwarding(op)) return "";
    int next = -1;
    for (const Input& in : g.inputs[n])
      if (!in.control) {
        next = g.Find(in.node);
        break;
      }
    n = next;
  }
  return "";
}

// The variables the update ops nearest to `start` on `task` write, sorted: several where one
// tensor feeds several updates (a learning rate, a merged gradient).
std::vector<std::string> VariablesUpdatedBy(const Graph& g, const std::vector<int>& start,
                                            const std::string& task) {
  std::vector<int> frontier(start);
  std::sort(frontier.begin(), frontier.end(),
            [&](int a, int b) { return g.node(a).name() < g.node(b).name(); });
  std::unordered_set<int> seen;
  for (int depth = 0; depth < 8 && !frontier.empty(); ++depth) {
    std::set<std::string> found;
    std::vector<int> next;
    for (int n : frontier) {
      if (!seen.insert(n).second || g.task[n] != task) continue;
      if (IsUpdate(g.node(n).op())) {
        for (const Input& in : g.inputs[n]) {
          if (in.control) continue;
          std::string var = VariableBehind(g, g.Find(in.node));
          if (!var.empty()) found.insert(var);
          break;
        }
        if (!found.empty()) continue;
      }
      for (int s : g.out[n]) next.push_back(s);
    }
    if (!found.empty()) return {found.begin(), found.end()};
    frontier = next;
  }
  return {};
}

// SyncReplicasOptimizer's synchronous training: a gradient pushed into a conditional accumulator
// updates the variable the accumulator is named for ("<variable>:0/grad_accum"). The chief's
// step that applies it is not in the graph this pass is given. Only a tensor that is nothing
// else on the PS: every use the apply op's gradient (input 2 on; input 1 is the worker's local
// step), directly or through a Cast or Identity (the optimizer casts a sparse gradient's indices
// to int64 there); the rows of an embedding's lookup, which Grappler may send once for both, are
// no variable's. graph/build.py (_accumulated_variable) reads it the same way.
std::string AccumulatedVariable(const Graph& g, const std::vector<std::pair<int, int>>& uses) {
  static const auto* apply_ops = new std::unordered_set<std::string>{
      "AccumulatorApplyGradient", "ResourceAccumulatorApplyGradient",
      "SparseAccumulatorApplyGradient"};
  std::vector<std::pair<int, int>> hops;
  for (const auto& use : uses) {
    const std::string& op = g.node(use.first).op();
    if (op != "Cast" && op != "Identity") {
      hops.push_back(use);
      continue;
    }
    if (g.data_out[use.first].empty()) return "";
    hops.insert(hops.end(), g.data_out[use.first].begin(), g.data_out[use.first].end());
  }
  std::string found;
  for (const auto& [n, input_index] : hops) {
    if (input_index < 2 || !apply_ops->count(g.node(n).op()) || g.inputs[n].empty()) return "";
    const int acc = g.Find(g.inputs[n][0].node);
    if (acc < 0) return "";
    const auto it = g.node(acc).attr().find("shared_name");
    if (it == g.node(acc).attr().end()) return "";
    absl::string_view shared = it->second.s();
    if (!absl::ConsumeSuffix(&shared, "/grad_accum")) return "";
    const std::string var(shared.substr(0, shared.rfind(':')));
    const int v = g.Find(var);
    if (v < 0 || !IsVariableOp(g.node(v).op())) return "";
    if (found.empty()) found = var;
  }
  return found;
}

// Nodes whose outputs may be dead or live in a loop frame: gating them could leave a counter
// short (a dead tensor's gate never runs) or run a gate once per iteration.
//
// A loop's frame is what its Enter nodes reach before its Exit nodes, as TensorFlow's
// BuildControlFlowInfo makes frames: its Merge nodes, its condition and LoopCond among them.
// (Until the 121st session a Merge ended the region, as a conditional's does, so a loop's
// condition after its Merge was gated: a LoopCond sent to another task ran its gate once per
// iteration.) A node outside loops may be dead when it depends on an output of a Switch: each
// node carries the Switch outputs it depends on, data or control, and a Merge whose inputs differ
// only by the two branches of one predicate (a conditional's, whose Switch nodes share it)
// depends on neither.
std::vector<bool> ControlFlowRegion(const Graph& g) {
  const int n = g.def->node_size();
  std::map<std::string, int> predicates;  // a conditional's predicate tensor, numbered
  auto predicate = [&](int sw) {
    const Input p = g.inputs[sw].size() > 1 ? g.inputs[sw][1] : Input{};
    return predicates.emplace(absl::StrCat(p.node, ":", p.port), predicates.size()).first->second;
  };
  std::vector<int> depth(n, 0);  // loop frames around the node
  // (predicate, branch) pairs it depends on: the outputs of Switch nodes outside loops
  std::vector<std::set<std::pair<int, int>>> on(n);
  for (int v : g.topo) {  // without loop back edges: a loop's Merge follows its Enter
    const std::string& op = g.node(v).op();
    std::vector<std::set<std::pair<int, int>>> ins;
    int d = 0;
    for (const Input& in : g.inputs[v]) {
      const int u = g.Find(in.node);
      if (u < 0 || IsOp(g.node(u).op(), "NextIteration")) continue;
      d = std::max(d, depth[u]);
      std::set<std::pair<int, int>> c = on[u];
      if (IsOp(g.node(u).op(), "Switch") && depth[u] == 0) {
        const int p = predicate(u);
        if (in.control) {  // after either output: dead with whichever is
          c.insert({p, 0});
          c.insert({p, 1});
        } else {
          c.insert({p, in.port});
        }
      }
      ins.push_back(std::move(c));
    }
    depth[v] = IsOp(op, "Enter") ? d + 1 : IsOp(op, "Exit") ? std::max(d - 1, 0) : d;
    if (IsOp(op, "Merge") && depth[v] == 0 && ins.size() >= 2) {
      std::set<std::pair<int, int>> common = ins[0];
      for (const auto& c : ins) {
        std::set<std::pair<int, int>> both;
        std::set_intersection(common.begin(), common.end(), c.begin(), c.end(),
                              std::inserter(both, both.begin()));
        common.swap(both);
      }
      std::set<int> preds, branches;
      bool paired = true;  // each input: the common part and one branch of one predicate
      for (const auto& c : ins) {
        if (c.size() != common.size() + 1) paired = false;
        for (const auto& pb : c)
          if (!common.count(pb)) {
            preds.insert(pb.first);
            branches.insert(pb.second);
          }
      }
      if (paired && preds.size() == 1 && branches.size() == 2) {
        on[v] = std::move(common);  // one branch or the other runs: live where they both are
        continue;
      }
    }
    for (auto& c : ins) on[v].insert(c.begin(), c.end());
  }
  std::vector<bool> in(n);
  for (int v = 0; v < n; ++v)
    in[v] = depth[v] > 0 || !on[v].empty() || IsOp(g.node(v).op(), "Switch");
  return in;
}

// Whether the pass has gated the graph already (a gate in it).
bool Gated(const GraphDef& graph) {
  return std::any_of(graph.node().begin(), graph.node().end(),
                     [](const NodeDef& n) { return n.op() == kGateOp; });
}

bool IsSmallConst(const NodeDef& node) {
  if (node.op() != "Const") return false;
  auto it = node.attr().find("value");
  if (it == node.attr().end()) return false;
  int64_t elements = 1;
  for (const auto& d : it->second.tensor().tensor_shape().dim())
    elements *= std::max<int64_t>(d.size(), 0);
  return elements <= kReplicatedConstMaxElements;
}

// Stage: the most transfers on any path into the node (tfsched.ordering.stages).
std::vector<int> Levels(const Graph& g) {
  std::vector<int> level(g.def->node_size(), 0);
  for (int v : g.topo)
    for (int u : g.preds[v])
      level[v] = std::max(level[v], level[u] + (g.task[u] != g.task[v] ? 1 : 0));
  return level;
}

// Op types that put received tensors together or re-view them
// (tfsched.ordering.tio.ASSEMBLY_TYPES).
bool IsAssemblyType(const std::string& op) {
  static const auto* types =
      new std::unordered_set<std::string>({"ConcatV2", "Concat", "Pack", "Identity", "IdentityN",
                                           "Snapshot", "ReadVariableOp", "Cast", "Reshape"});
  return types->count(op) > 0;
}

// TIO (TicTac §4.3): M+ of every recv of each worker under the general oracle. Ops that only
// assemble what the worker receives (of an assembly type, every input from another task, a
// Const or another such op: the ConcatV2 that puts a split variable's shards together) take no
// part in M+, as in tfsched.ordering.tio.assembly_ops, whose docstring says why.
void Tio(const Graph& g, std::vector<Transfer>* xfers, const std::string& ps_job) {
  std::map<std::string, std::vector<int>> by_receiver;
  for (int i = 0; i < static_cast<int>(xfers->size()); ++i) {
    const Transfer& t = (*xfers)[i];
    if (JobOf(t.receiver) != ps_job) by_receiver[t.receiver].push_back(i);
  }
  for (auto& [task, ids] : by_receiver) {
    const int r = static_cast<int>(ids.size());
    const int words = (r + 63) / 64;
    std::map<std::string, std::vector<uint64_t>> channel_mask;
    std::unordered_map<int64_t, std::vector<int>> bits_at;  // (source node, consumer) -> recv bits
    for (int k = 0; k < r; ++k) {
      const Transfer& t = (*xfers)[ids[k]];
      auto& mask = channel_mask[t.sender];
      mask.resize(words);
      mask[k / 64] |= uint64_t{1} << (k % 64);
      for (const auto& use : t.uses)
        bits_at[static_cast<int64_t>(t.src) * g.def->node_size() + use.first].push_back(k);
    }
    std::vector<std::vector<uint64_t>> dep(g.def->node_size());
    std::vector<bool> assembly(g.def->node_size(), false);
    std::vector<double> m_plus(r, std::numeric_limits<double>::infinity());
    for (int v : g.topo) {
      if (g.task[v] != task) continue;
      if (IsAssemblyType(g.def->node(v).op()) && !g.preds[v].empty()) {
        assembly[v] = true;
        for (int u : g.preds[v])
          if (g.task[u] == task && g.def->node(u).op() != "Const" && !assembly[u])
            assembly[v] = false;
      }
      std::vector<uint64_t> d(words, 0);
      for (int u : g.preds[v]) {
        if (g.task[u] == task) {
          for (int w = 0; w < words && !dep[u].empty(); ++w) d[w] |= dep[u][w];
        } else {
          auto it = bits_at.find(static_cast<int64_t>(u) * g.def->node_size() + v);
          if (it != bits_at.end())
            for (int k : it->second) d[k / 64] |= uint64_t{1} << (k % 64);
        }
      }
      int total = 0;
      for (uint64_t x : d) total += __builtin_popcountll(x);
      if (total > 1 && !assembly[v]) {
        int m = 0;  // op.M: max over channels (§4.1)
        for (const auto& [sender, mask] : channel_mask) {
          int c = 0;
          for (int w = 0; w < words; ++w) c += __builtin_popcountll(d[w] & mask[w]);
          m = std::max(m, c);
        }
        for (int k = 0; k < r; ++k)
          if (d[k / 64] >> (k % 64) & 1) m_plus[k] = std::min(m_plus[k], static_cast<double>(m));
      }
      dep[v] = std::move(d);
    }
    for (int k = 0; k < r; ++k) (*xfers)[ids[k]].value = m_plus[k];
  }
}

// Each channel's transfers (ids into xfers) in an order per-step counters enforce without
// deadlock, as close to the order of (value, stage) as that allows: the channels are taken in
// that order, and a transfer goes ahead of its place only when one ranked before it on some
// channel cannot be released without it (the rule of tfsched.ordering.stages.counter_safe, which
// documents it). Until the eighteenth session every channel was ordered by stage first, which put
// the Transformer's embedding lookup (on the PS, of the ids the worker pushes) behind every
// layer's weights, though the forward pass needs it first.
std::map<std::string, std::vector<int>> CounterSafe(const Graph& g,
                                                    const std::vector<Transfer>& xfers) {
  using Bits = std::vector<uint64_t>;
  const int n = static_cast<int>(xfers.size());
  const int words = (n + 63) / 64;
  const int64_t nodes = g.def->node_size();
  // Each transfer's ancestors: the transfers its source needs, through any path. A node's set is
  // dropped once its last successor has read it (and not kept when empty).
  std::unordered_map<int64_t, std::vector<int>> bits_at;  // (source, consumer) -> transfer ids
  std::vector<std::vector<int>> leaving(nodes);           // source -> transfer ids
  for (int i = 0; i < n; ++i) {
    leaving[xfers[i].src].push_back(i);
    for (const auto& use : xfers[i].uses) bits_at[xfers[i].src * nodes + use.first].push_back(i);
  }
  std::vector<Bits> dep(nodes), ancestors(n, Bits(words, 0));
  std::vector<int> unread(nodes);
  for (int v = 0; v < nodes; ++v) unread[v] = static_cast<int>(g.out[v].size());
  for (int v : g.topo) {
    Bits d(words, 0);
    for (int u : g.preds[v]) {
      for (int w = 0; w < words && !dep[u].empty(); ++w) d[w] |= dep[u][w];
      auto it = bits_at.find(u * nodes + v);
      if (it != bits_at.end())
        for (int k : it->second) d[k / 64] |= uint64_t{1} << (k % 64);
      if (--unread[u] == 0) Bits().swap(dep[u]);
    }
    for (int i : leaving[v]) ancestors[i] = d;
    if (unread[v] > 0 && std::any_of(d.begin(), d.end(), [](uint64_t x) { return x != 0; }))
      dep[v] = std::move(d);
  }

  const auto order = [&](int a, int b) {
    return std::make_tuple(xfers[a].value, xfers[a].stage, a) <
           std::make_tuple(xfers[b].value, xfers[b].stage, b);
  };
  std::map<std::string, std::vector<int>> queues, out;
  for (int i = 0; i < n; ++i)
    queues[absl::StrCat(xfers[i].sender, "->", xfers[i].receiver)].push_back(i);
  std::vector<int> position(n);
  for (auto& [name, ids] : queues) {
    std::sort(ids.begin(), ids.end(), order);
    for (size_t j = 0; j < ids.size(); ++j) position[ids[j]] = static_cast<int>(j);
  }
  Bits placed(words, 0);
  const auto is_placed = [&](int i) { return placed[i / 64] >> (i % 64) & 1; };
  const auto missing = [&](int i) {
    int count = 0;
    for (int w = 0; w < words; ++w) count += __builtin_popcountll(ancestors[i][w] & ~placed[w]);
    return count;
  };
  const auto place = [&](int i) {
    placed[i / 64] |= uint64_t{1} << (i % 64);
    out[absl::StrCat(xfers[i].sender, "->", xfers[i].receiver)].push_back(i);
  };
  std::map<std::string, size_t> head;
  for (;;) {
    for (bool moved = true; moved;) {
      moved = false;
      for (auto& [name, ids] : queues) {
        size_t& h = head[name];
        for (; h < ids.size(); ++h) {
          if (is_placed(ids[h])) continue;
          if (missing(ids[h]) > 0) break;
          place(ids[h]);
          moved = true;
        }
      }
    }
    // No channel's next transfer can go: unblock the one that needs the fewest, by placing one of
    // the transfers it needs whose own needs are placed (one always is), the earliest in its
    // channel.
    int target = -1, fewest = 0;
    for (auto& [name, ids] : queues) {
      if (head[name] == ids.size()) continue;
      const int i = ids[head[name]], m = missing(i);
      if (target < 0 || m < fewest || (m == fewest && order(i, target))) target = i, fewest = m;
    }
    if (target < 0) break;
    int pick = -1;
    for (int k = 0; k < n; ++k) {
      const bool needed = ancestors[target][k / 64] >> (k % 64) & 1;
      if (needed && !is_placed(k) && missing(k) == 0 &&
          (pick < 0 || std::make_pair(position[k], k) < std::make_pair(position[pick], pick)))
        pick = k;
    }
    place(pick < 0 ? target : pick);  // none only in a cyclic graph, which TensorFlow rejects
  }
  return out;
}

std::string Sanitize(const std::string& task) {
  // "/job:worker/replica:0/task:1" -> "worker_1"
  std::string job = JobOf(task);
  auto pos = task.rfind("/task:");
  return absl::StrCat(job, "_", pos == std::string::npos ? "0" : task.substr(pos + 6));
}

}  // namespace

absl::Status TfschedScheduler::Init(const tensorflow::RewriterConfig_CustomGraphOptimizer* config) {
  if (config == nullptr) return absl::OkStatus();
  const auto& params = config->parameter_map();
  if (auto it = params.find("timeout_ms"); it != params.end()) timeout_ms_ = it->second.i();
  if (timeout_ms_ < 0 || timeout_ms_ > kMaxTimeoutMs)
    return absl::InvalidArgumentError(
        absl::StrCat("tfsched: timeout_ms must be from 0 (no limit) to ", kMaxTimeoutMs));
  if (auto it = params.find("ps_job"); it != params.end() && !it->second.s().empty())
    ps_job_ = it->second.s();
  if (auto it = params.find("mode"); it != params.end() && !it->second.s().empty())
    mode_ = it->second.s();
  if (mode_ != "counter" && mode_ != "queue" && mode_ != "ready")
    return absl::InvalidArgumentError(absl::StrCat("tfsched: unknown mode '", mode_, "'"));
  if (auto it = params.find("partition"); it != params.end()) partition_ = it->second.i();
  if (auto it = params.find("credit"); it != params.end()) credit_ = it->second.i();
  if (auto it = params.find("push_credit"); it != params.end()) push_credit_ = it->second.i();
  if (auto it = params.find("inline_transfers"); it != params.end())
    inline_transfers_ = it->second.b();
  if (auto it = params.find("host_credit"); it != params.end()) host_credit_ = it->second.b();
  if (auto it = params.find("host_order"); it != params.end() && !it->second.s().empty())
    host_order_ = it->second.s();
  if (host_order_ != "steps" && host_order_ != "priority")
    return absl::InvalidArgumentError(
        absl::StrCat("tfsched: unknown host_order '", host_order_, "' (steps or priority)"));
  if (auto it = params.find("ack_share"); it != params.end()) ack_share_ = it->second.i();
  if (auto it = params.find("ack_group"); it != params.end()) ack_group_ = it->second.i();
  if (auto it = params.find("credit_return"); it != params.end() && !it->second.s().empty())
    credit_return_ = it->second.s();
  if (auto it = params.find("functions"); it != params.end()) functions_ = it->second.b();
  if (auto it = params.find("dump_dir"); it != params.end()) dump_dir_ = it->second.s();
  if (auto it = params.find("iterations"); it != params.end()) iterations_ = it->second.i();
  if (iterations_ < 1) return absl::InvalidArgumentError("tfsched: iterations must be >= 1");
  if (credit_return_ != "ack" && credit_return_ != "sent")
    return absl::InvalidArgumentError(
        absl::StrCat("tfsched: unknown credit_return '", credit_return_, "' (ack or sent)"));
  if (auto it = params.find("sizes_bandwidth_bps"); it != params.end())
    sizes_bandwidth_bps_ = it->second.f();
  if (partition_ < -1 || credit_ < -1)
    return absl::InvalidArgumentError(
        "tfsched: partition and credit must be >= 0 (parameters) or -1 (sized for the graph)");
  if (!(sizes_bandwidth_bps_ >= 0 && sizes_bandwidth_bps_ <= kMaxSizesBandwidthBps))
    return absl::InvalidArgumentError(
        "tfsched: sizes_bandwidth_bps must be from 0 (not known) to 1e15 (a petabit a second)");
  if (ack_share_ < 1) return absl::InvalidArgumentError("tfsched: ack_share must be >= 1");
  if (ack_group_ < 1) return absl::InvalidArgumentError("tfsched: ack_group must be >= 1");
  if (push_credit_ < 0)
    return absl::InvalidArgumentError("tfsched: push_credit must be >= 0 (parameters)");
  if (push_credit_ > 0 && credit_ == 0)
    return absl::InvalidArgumentError(
        "tfsched: push_credit needs a credit (the window that acknowledges the transfers)");
  if (auto it = params.find("priorities"); it != params.end()) {
    for (const std::string& line : it->second.list().s()) {
      std::vector<std::string> f = absl::StrSplit(line, '|');
      int64_t p = 0;
      if (f.size() != 4 || !absl::SimpleAtoi(f[3], &p) || p < 0)
        return absl::InvalidArgumentError(
            absl::StrCat("tfsched: malformed priority entry '", line, "'"));
      // Two transfers can share a key: the indices and the values of a sparse (IndexedSlices)
      // gradient both update one variable. Such a key takes the later of their priorities, for
      // this worker and (by_ps_) for the others alike: a push ranked by the earlier part (the
      // indices, known from the step's start) would put the values, produced at the end of the
      // backward pass, ahead of every other gradient, and under per-step counters every other
      // push would wait for them (measured: the Transformer's TAO at 0.87x of vanilla
      // TensorFlow, its embedding's gradient ranked first on workers 1 to 3).
      const auto keep_later = [p](auto& map, std::string key) {
        auto [it, inserted] = map.emplace(std::move(key), p);
        if (!inserted) it->second = std::max(it->second, p);
      };
      keep_later(exact_, absl::StrCat(f[0], "|", f[1], "|", f[2]));
      const std::string& ps_side = JobOf(f[0]) == ps_job_ ? f[0] : f[1];
      keep_later(by_ps_, absl::StrCat(ps_side, "|", f[2]));
    }
  }
  return absl::OkStatus();
}

absl::Status TfschedScheduler::Optimize(tensorflow::grappler::Cluster* /*cluster*/,
                                        const tensorflow::grappler::GrapplerItem& item,
                                        GraphDef* optimized_graph) {
  // Only the last iteration's call gates. Grappler runs its optimizers again after this pass on
  // every iteration but the last, and they did not rewrite a gated graph as they rewrite
  // TensorFlow's own: the arithmetic optimizer merged two sums of gradients into one of seven
  // operands, added in another order, but not where a sum fed a gate (a random graph, seed 133
  // of benchmarks/random_graphs.py, trained differently until the 122nd session). Gated last,
  // the graph is TensorFlow's own with the pass's nodes added.
  //
  // Grappler's iterations are RewriterConfig.meta_optimizer_iterations, which tfsched.enable()
  // read into `iterations`; the pass sees only its own parameters. Changed after enable(), the
  // pass gated before the last iteration (more calls: an error, once, where it gated, which a
  // strict config makes the session's) or never (fewer: the destructor's log line, where the
  // graph spans tasks). Until the 124th session neither said a word.
  const int64_t call = ++calls_[item.id];
  const auto spans_tasks = [&item]() {
    std::string first;
    for (const NodeDef& n : item.graph.node()) {
      const std::string task = TaskOf(n.device());
      if (task.empty()) continue;
      if (first.empty()) first = task;
      if (task != first) return true;
    }
    return false;
  };
  if (call == 1 && iterations_ > 1 && spans_tasks()) spanning_.insert(item.id);
  if (call < iterations_ || call > iterations_ + 1 || (call > iterations_ && !Gated(item.graph))) {
    *optimized_graph = item.graph;  // more calls on a graph with no gate: nothing gated early
    return absl::OkStatus();
  }
  if (call == iterations_ + 1)
    return absl::FailedPreconditionError(absl::StrCat(
        "tfsched: Grappler ran its optimizers on ", item.id, " more times than the ", iterations_,
        " iterations tfsched.enable() was told of (meta_optimizer_iterations set after it?): the "
        "pass gated the graph before Grappler's "
        "last iteration, whose optimizers may rewrite it otherwise than TensorFlow's own; set "
        "graph_options.rewrite_options.meta_optimizer_iterations before tfsched.enable()"));
  bool crossing = false;
  absl::Status status = Gate(item, optimized_graph, &crossing);
  if (crossing && !dump_dir_.empty()) Dump(item, status.ok() ? *optimized_graph : GraphDef());
  return status;
}

TfschedScheduler::~TfschedScheduler() {
  for (const auto& [id, calls] : calls_)
    if (calls < iterations_ && spanning_.count(id))
      LOG(ERROR) << "tfsched: Grappler ran its optimizers on " << id << " " << calls
                 << " times, fewer than the " << iterations_
                 << " iterations tfsched.enable() was told of (meta_optimizer_iterations set after"
                    " it, or a graph under min_graph_nodes):"
                    " the pass gates on the last, so this graph runs ungated; set "
                    "graph_options.rewrite_options.meta_optimizer_iterations before "
                    "tfsched.enable()";
}

void TfschedScheduler::Dump(const tensorflow::grappler::GrapplerItem& item,
                            const GraphDef& gated) const {
  // <graph>.<worker>: the graph's id (a function's name, for a function) and the first task of
  // another job than the PS's, which tells apart two workers' instantiations of one function
  std::set<std::string> tasks;
  for (const NodeDef& n : item.graph.node())
    if (std::string task = TaskOf(n.device()); !task.empty() && JobOf(task) != ps_job_)
      tasks.insert(task);
  std::string stem = item.id.empty() ? "graph" : item.id;
  for (char& ch : stem)
    if (!absl::ascii_isalnum(ch) && ch != '_' && ch != '-' && ch != '.') ch = '_';
  if (!tasks.empty()) absl::StrAppend(&stem, ".", Sanitize(*tasks.begin()));
  auto* env = tensorflow::Env::Default();
  if (absl::Status s = env->RecursivelyCreateDir(dump_dir_); !s.ok() && !absl::IsAlreadyExists(s)) {
    LOG(WARNING) << "tfsched: could not make " << dump_dir_ << ": " << s;
    return;
  }
  const auto write = [&](const GraphDef& graph, const std::string& name) {
    // written whole or not at all: a reader never sees half a graph
    const std::string path = tensorflow::io::JoinPath(dump_dir_, name);
    const std::string tmp = absl::StrCat(path, ".tmp", env->NowMicros());
    absl::Status s = tensorflow::WriteBinaryProto(env, tmp, graph);
    if (s.ok()) s = env->RenameFile(tmp, path);
    if (!s.ok()) {
      env->DeleteFile(tmp).IgnoreError();
      LOG(WARNING) << "tfsched: could not write " << path << ": " << s;
    }
  };
  write(item.graph, absl::StrCat(stem, ".pb"));
  if (gated.node_size() > 0) write(gated, absl::StrCat(stem, ".gated.pb"));
}

namespace {
// What a step that feeds tensors runs of the item. TensorFlow replaces a fed tensor by the fed
// value and only then prunes the graph to the fetches (subgraph::RewriteGraphForExecution), but the
// Grappler item still holds what computes it: a transfer into what is fed away never runs, and
// under the per-step counters the gates after it waited for its turn until their timeout (a run
// that fed a model's middle layer and fetched its loss: every pull after it waited 60 s; with a
// credit its acknowledgement kept it, and the step sent every pruned tensor for nothing).
struct Running {
  std::vector<bool> node;                     // empty: every node of the item runs (no feeds)
  std::set<std::pair<std::string, int>> fed;  // (node, port)
  bool Runs(int v) const { return node.empty() || node[v]; }
  bool Fed(const Input& in) const { return !in.control && fed.count({in.node, in.port}) > 0; }
};

Running RunningWithFeeds(const Graph& g, const tensorflow::grappler::GrapplerItem& item) {
  Running r;
  if (item.feed.empty()) return r;
  for (const auto& [name, value] : item.feed) {
    const Input in = ParseInput(name);
    r.fed.insert({in.node, in.port});
  }
  std::vector<bool> runs(g.inputs.size(), false);
  std::deque<int> q;
  const auto reach = [&](const std::string& name) {
    const int v = g.Find(ParseInput(name).node);
    if (v >= 0 && !runs[v]) {
      runs[v] = true;
      q.push_back(v);
    }
  };
  for (const std::string& f : item.fetch) reach(f);
  for (const std::string& k : item.keep_ops) reach(k);
  if (q.empty()) return r;  // nothing named to start from: every node may run
  while (!q.empty()) {
    const int v = q.front();
    q.pop_front();
    for (const Input& in : g.inputs[v])
      if (!r.Fed(in)) reach(in.node);
  }
  r.node = std::move(runs);
  return r;
}

// The inputs of each sum (AddN of three or more) whose result is sent to another task that a
// TfschedHold must keep from the sum, so that it adds them in TensorFlow's order: node -> its
// inputs to hold (empty: none to hold).
//
// AddN computes into the first input whose buffer nobody else holds (`forward_input`) and adds
// the inputs in order starting from that one (core/kernels/aggregate_ops.h moves it to the
// front); floats do not add associatively, so the bits of a sum depend on which input that is.
// An input may go only to an output whose allocator attributes are no stricter than its own, and
// the executor marks an output NIC-compatible when it feeds a `_Send` to another task
// (GraphView::SetAllocAttrs): without tfsched, a sum sent away takes over only an input received
// from another task or itself sent to one, and adds any other in graph order into a new buffer.
// A gate between the sum and its `_Send` leaves the sum's output unmarked, and the sum took over
// any input nobody held. Until the 122nd session that changed the last bits of six random graphs
// of 200 (benchmarks/random_graphs.py): e.g. `gradients/AddN_4` of five gradients added from its
// third on. The inputs a sum sent away could not take over without tfsched are now also inputs
// of a TfschedHold that runs after the sum, so their buffers are held while it runs.
// `sent_away`: every (node, port) sent to another task, gated or not (NIC-compatible without
// tfsched).
std::map<int, std::vector<std::string>> HeldFromSums(
    const Graph& g, const std::vector<Transfer>& xfers,
    const std::set<std::pair<int, int>>& sent_away) {
  std::map<int, std::vector<std::string>> held;
  for (const Transfer& t : xfers) {
    const NodeDef& sum = g.node(t.src);
    if (t.port != 0 || sum.op() != "AddN" || !sum.attr().count("T") || held.count(t.src)) continue;
    std::vector<std::string> keep;
    int operands = 0;
    for (int k = 0; k < sum.input_size(); ++k) {
      const Input& in = g.inputs[t.src][k];
      if (in.control) continue;
      ++operands;
      const int src = g.Find(in.node);
      // received from another task, or sent to one: NIC-compatible, TensorFlow may take it over
      if (src < 0 || g.task[src] != g.task[t.src] || sent_away.count({src, in.port})) continue;
      keep.push_back(sum.input(k));
    }
    if (operands >= 3 && !keep.empty()) held[t.src] = std::move(keep);  // two add either way
  }
  return held;
}

// The transfers a sum sent to another task ungated (its edge in a loop or a branch: the pass
// does not gate it) needs as TensorFlow makes them: (source node, port, receiving task; "" for
// every receiving task).
//
// Sent away by a `_Send`, such a sum's output is NIC-compatible, and it takes over only an input
// received from another task by a `_Recv` or itself sent to one by a `_Send` (HeldFromSums says
// why this decides the sum's bits). An operand the pass gates on its way out feeds a gate, not a
// `_Send`, and one it receives cut comes from a TfschedConcat, not a `_Recv`: neither was
// NIC-compatible any more, and the sum could no longer take it over where TensorFlow can. Those
// operands' transfers are left ungated (an operand so left may be such a sum itself: the caller
// asks again until none is left). Until the 124th session this was on the missing list (a
// sum that depends on a Switch's output while an operand does not: tests/enforce/test_pass.py).
std::set<std::tuple<int, int, std::string>> OperandsOfUngatedSums(
    const Graph& g, const std::vector<Transfer>& xfers,
    const std::set<std::pair<int, int>>& sent_away) {
  std::set<std::pair<int, int>> gated;
  for (const Transfer& t : xfers) gated.insert({t.src, t.port});
  std::set<std::tuple<int, int, std::string>> left;
  for (int s = 0; s < g.def->node_size(); ++s) {
    const NodeDef& sum = g.node(s);
    if (sum.op() != "AddN" || !sent_away.count({s, 0}) || gated.count({s, 0})) continue;
    std::vector<std::tuple<int, int, std::string>> operands;
    for (const Input& in : g.inputs[s]) {
      if (in.control) continue;
      const int src = g.Find(in.node);
      if (src < 0 || g.task[src].empty()) continue;
      operands.emplace_back(src, in.port, g.task[src] != g.task[s] ? g.task[s] : "");
    }
    if (operands.size() < 3) continue;  // two add the same in either order
    for (const auto& [src, port, receiver] : operands)
      if (!receiver.empty() || sent_away.count({src, port})) left.emplace(src, port, receiver);
  }
  return left;
}

// What the pass's gates are named for: the graph it gates. TensorFlow keeps one kernel per session
// and node name for a stateful op (OpSegment, in each worker's GraphMgr), so a session that runs
// several graphs (one per set of fetches and feeds: a training step, then its loss alone) ran in
// each the gate kernels made for the first graph that had gates of those names: that graph's
// priorities, channel sizes and credit, and, since gates send their tensors themselves
// (transfers.cc), that graph's `_Send` keys, so a tensor went to a key no `_Recv` of the step
// waited for, and the step hung (SyncReplicasOptimizer's local_step_init_op after its
// chief_init_op, in tests/enforce/test_training.py). The tag is a fingerprint of all the pass's
// output follows from (the item's graph, fetches, feeds and kept ops): gates of one name are one
// graph's, partitioned the same way, with the same keys. Everything downstream (partition graphs,
// the keys, traces) sees the tagged names, and `/ack`, `/credit` keep following their gate's.
std::string GraphTag(const tensorflow::grappler::GrapplerItem& item) {
  uint64_t h = tsl::DeterministicProtoHash64(item.graph);
  const auto mix = [&h](absl::string_view what, const std::string& name) {
    h = tsl::Hash64Combine(h, tsl::Hash64(absl::StrCat(what, name)));
  };
  for (const std::string& f : item.fetch) mix("fetch:", f);
  for (const auto& [name, value] : item.feed) mix("feed:", name);
  for (const std::string& k : item.keep_ops) mix("keep:", k);
  return absl::StrCat(".", absl::Hex(h, absl::kZeroPad16));
}
}  // namespace

absl::Status TfschedScheduler::Gate(const tensorflow::grappler::GrapplerItem& item,
                                    GraphDef* optimized_graph, bool* crossing) {
  *optimized_graph = item.graph;
  GraphDef& out = *optimized_graph;
  if (Gated(out)) return absl::OkStatus();  // idempotent: already gated

  const Graph g(out);
  const std::vector<bool> in_flow = ControlFlowRegion(g);
  const std::vector<int> level = Levels(g);
  const auto* registry = tensorflow::OpRegistry::Global();

  const Running running = RunningWithFeeds(g, item);

  // One transfer per (source tensor, receiving task), as TensorFlow's partitioner makes them.
  std::map<std::pair<std::string, std::string>, Transfer> found;  // ordered: deterministic output
  std::set<std::pair<int, int>> sent_away;  // (node, port) sent to another task at all
  for (int v = 0; v < out.node_size(); ++v) {
    if (!running.Runs(v)) continue;
    for (int k = 0; k < static_cast<int>(g.inputs[v].size()); ++k) {
      const Input& in = g.inputs[v][k];
      int src = g.Find(in.node);
      if (in.control || src < 0 || g.task[src].empty() || g.task[v].empty() ||
          g.task[src] == g.task[v] || running.Fed(in))
        continue;
      sent_away.insert({src, in.port});
      if (in_flow[src] || IsSmallConst(g.node(src))) continue;
      auto& t = found[{absl::StrCat(in.node, ":", in.port), g.task[v]}];
      t.src = src;
      t.port = in.port;
      t.sender = g.task[src];
      t.receiver = g.task[v];
      t.uses.push_back({v, k});
    }
  }
  std::vector<Transfer> xfers;
  for (auto& [key, t] : found) {
    const NodeDef& src = g.node(t.src);
    const tensorflow::OpDef* op_def = nullptr;
    if (!registry->LookUpOpDef(src.op(), &op_def).ok()) continue;  // a function call: leave it
    tensorflow::DataTypeVector ins, outs;
    if (!tensorflow::InOutTypesForNode(src, *op_def, &ins, &outs).ok() ||
        t.port >= static_cast<int>(outs.size()))
      continue;
    t.dtype = outs[t.port];
    if (tensorflow::IsRefType(t.dtype) || t.dtype == tensorflow::DT_RESOURCE ||
        t.dtype == tensorflow::DT_VARIANT)
      continue;
    std::string variable;
    if (JobOf(t.sender) == ps_job_) {
      t.kind = "pull";
      variable = VariableBehind(g, t.src);
    } else if (JobOf(t.receiver) == ps_job_) {
      t.kind = "push";
      std::vector<int> consumers;
      for (const auto& u : t.uses) consumers.push_back(u.first);
      std::vector<std::string> updated = VariablesUpdatedBy(g, consumers, t.receiver);
      if (updated.size() == 1) variable = updated[0];
      if (updated.empty()) variable = AccumulatedVariable(g, t.uses);
      if (updated.size() > 1) t.updates = std::move(updated);
    } else {
      t.kind = "pull";
      variable = VariableBehind(g, t.src);
    }
    t.key = absl::StrCat(t.kind, ":", variable.empty() ? key.first : variable);
    t.stage = level[t.src];
    xfers.push_back(std::move(t));
  }
  // Until none is left: an operand left ungated may itself be such a sum.
  for (size_t before = 0; before != xfers.size();) {
    before = xfers.size();
    const auto left = OperandsOfUngatedSums(g, xfers, sent_away);
    const auto kept = [&left](const Transfer& t) {
      return left.count({t.src, t.port, t.receiver}) > 0 || left.count({t.src, t.port, ""}) > 0;
    };
    xfers.erase(std::remove_if(xfers.begin(), xfers.end(), kept), xfers.end());
    if (xfers.size() != before)
      VLOG(1) << "tfsched: " << item.id << ": " << before - xfers.size()
              << " transfers into or out of sums sent away ungated left as TensorFlow's";
  }
  if (xfers.empty()) return absl::OkStatus();  // nothing crosses: the graph comes back unchanged
  *crossing = true;
  const std::string tag = GraphTag(item);  // what the gates' names end with

  int matched = 0;
  if (!exact_.empty()) {
    for (Transfer& t : xfers) {
      const std::string& ps_side = JobOf(t.sender) == ps_job_ ? t.sender : t.receiver;
      const auto named = [&](const std::string& key) -> std::optional<int64_t> {
        if (auto it = exact_.find(absl::StrCat(t.sender, "|", t.receiver, "|", key));
            it != exact_.end())
          return it->second;
        if (auto it = by_ps_.find(absl::StrCat(ps_side, "|", key)); it != by_ps_.end())
          return it->second;
        return std::nullopt;
      };
      std::optional<int64_t> p = named(t.key);
      // A merged push takes the most urgent of its variables' priorities: the first of their
      // updates needs it (ordering.priority_of does the same for the simulator).
      if (!p)
        for (const std::string& v : t.updates)
          if (auto q = named(absl::StrCat("push:", v)); q && (!p || *q < *p)) p = q;
      if (!p) continue;
      t.value = static_cast<double>(*p);
      t.matched = true;
      ++matched;
    }
    if (matched == 0 && !functions_)
      return absl::InvalidArgumentError(
          absl::StrCat("tfsched: the schedule matches none of the ", xfers.size(),
                       " transfers of this graph; it was made for another graph"));
    if (matched == 0)  // another function than the one the schedule was made for
      LOG(INFO) << "tfsched: " << item.id << ": the schedule names none of its " << xfers.size()
                << " transfers; ordered by TIO";
  }
  if (matched > 0) {
    // Transfers the schedule does not name follow the named ones of their stage, in TIO order.
    std::vector<Transfer> copy(xfers);
    Tio(g, &copy, ps_job_);
    for (size_t i = 0; i < xfers.size(); ++i)
      if (!xfers[i].matched) xfers[i].value = 1e12 + copy[i].value;
  } else {
    Tio(g, &xfers, ps_job_);
  }

  int64_t partition = partition_, credit_setting = credit_;  // -1 (auto) resolved below
  if (partition != 0 || credit_setting != 0) {
    tensorflow::grappler::GraphProperties properties(item);
    TF_RETURN_IF_ERROR(properties.InferStatically(/*assume_valid_feeds=*/false));
    for (Transfer& t : xfers) {
      const std::string& name = g.node(t.src).name();
      if (!properties.HasOutputProperties(name)) continue;
      const auto& props = properties.GetOutputProperties(name);
      if (t.port >= static_cast<int>(props.size())) continue;
      const tensorflow::PartialTensorShape shape(props[t.port].shape());
      if (!shape.IsFullyDefined()) continue;  // a shape known only at run time: sent whole
      t.elements = shape.num_elements();
      shape.AsProto(&t.shape);
      t.slice_elements = t.elements;
    }
    if (partition < 0 || credit_setting < 0) {
      std::map<std::pair<std::string, std::string>, int64_t> carried;  // channel -> parameters
      int64_t busiest = 0;
      for (const Transfer& t : xfers)
        busiest = std::max(busiest, carried[{t.sender, t.receiver}] += t.elements);
      const auto [auto_partition, auto_credit] = AutoSizes(busiest, sizes_bandwidth_bps_);
      if (partition < 0) partition = auto_partition;
      if (credit_setting < 0) credit_setting = auto_credit;
      VLOG(1) << "tfsched: the busiest channel carries " << busiest
              << " parameters a step: partition " << partition << ", credit " << credit_setting;
    }
    if (partition > 0) {
      int64_t slices = 0, cut = 0;
      for (Transfer& t : xfers) {
        if (t.elements > 0)
          std::tie(t.slices, t.slice_elements) = Slicing(t.elements, t.dtype, partition);
        if (t.slices > 1) {
          slices += t.slices;
          ++cut;
        }
      }
      // A partition far under the tensors' sizes (parameters taken for bytes or kilobytes) makes
      // thousands of gates and messages a step: Seq-32 (1 PS, 1 worker) cut by 1,000 ran its steps
      // in 0.35 s against 0.03 s uncut, by 16 in 20 s and its first in 250 s. It is gated as asked;
      // the log says why it is slow.
      if (slices > kManySlices)
        LOG(WARNING) << "tfsched: " << item.id << ": the partition of " << partition
                     << " parameters cuts " << cut << " of its transfers into " << slices
                     << " slices, each gated and sent as a message of its own: a step spends "
                        "their CPU before the order gains anything. A partition of 'auto' sizes it "
                        "for the graph and the link.";
    }
  }

  // Competition ranks per channel over the transfers present (TicTac §5.1's 0..n-1); the slices
  // of a tensor take consecutive ranks at their parent's place, and the slices of tensors that
  // tie all share the rank of their group. Until the thirty-eighth session a partitioned tensor
  // never tied: TIO, which ranks no push (a push's receiver is a PS), ranked the partitioned
  // pushes' slices one after the other in graph order, the first layer's first, and under the
  // counters every gradient then waited for the first layer's, which backpropagation computes
  // last (VGG16 training on TensorFlow 2, benchmarks/results/tf2-vgg16-train-s38-before.md).
  const std::map<std::string, std::vector<int>> channels = CounterSafe(g, xfers);
  for (const auto& [name, ids] : channels) {
    int64_t position = 0;
    for (size_t j = 0; j < ids.size(); ++j) {
      Transfer& t = xfers[ids[j]];
      Transfer* prev = j ? &xfers[ids[j - 1]] : nullptr;
      const bool tie = prev && prev->stage == t.stage && prev->value == t.value;
      t.priority = tie ? prev->priority : position;
      if (tie) prev->tied = t.tied = true;
      position += t.slices;
    }
    for (int i : ids) xfers[i].channel_size = position;
  }
  // How many gated channels leave each sending task: a step's state there is finished only once
  // it has seen them all (a TensorFlow 2 call's part on one task may send to several).
  std::map<std::string, int64_t> leaving;
  for (const auto& [name, ids] : channels) ++leaving[xfers[ids.front()].sender];

  // Credit needs every acknowledgement to run in the step: they are tied to a fetched node that
  // no transfer depends on (else the step would wait on itself). A credit returned when sent
  // needs no acknowledgement.
  const bool sent = credit_return_ == "sent";
  std::vector<int> anchors;  // candidate fetch nodes
  if (credit_setting > 0 && !sent) {
    std::vector<bool> upstream(out.node_size(), false);
    std::deque<int> q;
    for (const Transfer& t : xfers)
      if (!upstream[t.src]) {
        upstream[t.src] = true;
        q.push_back(t.src);
      }
    while (!q.empty()) {
      int v = q.front();
      q.pop_front();
      for (int u : g.preds[v])
        if (!upstream[u]) {
          upstream[u] = true;
          q.push_back(u);
        }
    }
    for (const std::string& fetch : item.fetch) {
      int f = g.Find(ParseInput(fetch).node);
      if (f >= 0 && !upstream[f] && !g.task[f].empty()) anchors.push_back(f);
    }
    if (anchors.empty())
      LOG(WARNING) << "tfsched: every fetched node feeds a transfer; credit is off for this graph";
  }
  const int64_t credit = sent || !anchors.empty() ? credit_setting : 0;

  std::unordered_set<std::string> names;
  for (const NodeDef& n : out.node()) names.insert(n.name());
  auto unique = [&names](const std::string& base) {
    std::string name = base;
    for (int i = 1; names.count(name); ++i) name = absl::StrCat(base, "_", i);
    names.insert(name);
    return name;
  };
  std::vector<NodeDef> added;
  // Sums whose inputs a TfschedHold keeps from them (HeldFromSums): each one's gates (or split)
  // wait for its hold, which runs right after the sum.
  std::map<int, std::string> holds;  // sum -> its TfschedHold
  for (const auto& [sum, inputs] : HeldFromSums(g, xfers, sent_away)) {
    NodeDef hold;
    hold.set_name(unique(absl::StrCat(out.node(sum).name(), "/tfsched_hold", tag)));
    hold.set_op("TfschedHold");
    hold.set_device(out.node(sum).device());
    auto& types = *(*hold.mutable_attr())["T"].mutable_list();
    for (const std::string& in : inputs) {
      hold.add_input(in);
      types.add_type(out.node(sum).attr().at("T").type());
    }
    hold.add_input(absl::StrCat("^", out.node(sum).name()));
    holds[sum] = hold.name();
    added.push_back(std::move(hold));
  }
  std::map<std::string, std::vector<std::string>> credits_on;  // sender device -> credit nodes
  int64_t split = 0;
  // The credit's counts: the gates it acknowledges, and the transfers big enough for it that the
  // partition cut into slices each under what it acknowledges (slices are cut equal: a tensor a
  // little over the partition becomes two of about half of it).
  const int64_t least_acked = credit > 0 ? std::max(kMinAckedElements, credit / ack_share_) : 0;
  int64_t acked_gates = 0, cut_under = 0;
  // Whether a transfer's gates keep their order on the channel (counters), its window, the
  // parameters of its slice i (the last is the shortest; a size unknown here, 0, is acknowledged
  // to be safe), and how many of its slices the credit counts: returned when sent (SentBuffer)
  // only for plain data types, whose bytes gRPC sends as they are. The counted slices are the
  // first ones (only the last is short).
  const auto ordered_of = [this](const Transfer& t) {
    return !(mode_ == "ready" || (mode_ == "queue" && t.kind == "push"));
  };
  // The pushes' own window, where one was given; the pulls keep the credit
  const auto window_of = [&](const Transfer& t) {
    return t.kind == "push" && push_credit_ > 0 ? push_credit_ : credit;
  };
  const auto size_of = [](const Transfer& t, int64_t i) {
    return t.slices > 1 ? std::min(t.slice_elements, t.elements - i * t.slice_elements)
                        : t.slice_elements;
  };
  const auto counted_slices_of = [&](const Transfer& t) {
    int64_t n = 0;
    for (; n < t.slices; ++n) {
      const int64_t size = size_of(t, n);
      if (!(credit > 0 && (size == 0 || size >= least_acked) &&
            (!sent || tensorflow::DataTypeCanUseMemcpy(t.dtype))))
        break;
    }
    return n;
  };
  // Acknowledgement groups (ack_group > 1; an improvement over ByteScheduler, which
  // acknowledges every slice: each acknowledgement is an RPC of its own, about 0.4 ms of CPU
  // at its two ends, BENCHMARKS.md). Up to ack_group consecutive counted slices on a channel, of
  // one tensor or of several one after the other (since the ninety-sixth session; before, a
  // group stayed within a tensor), share one: the first takes the credit of all of them, the
  // others go in their turn without waiting for credit, and the last one's acknowledgement
  // returns the whole group's. Only where the gates keep their order on the channel (counters,
  // untied priorities), so that the first goes before the rest, and no more than the window
  // holds, so that a group never waits for credit its members could not all have at once.
  // What a group holds back until its last member arrives: only the credit of its own channel,
  // whose later transfers wait for that member anyway; nothing on the way to it needs that
  // credit (what lies between its members on the channel is a member or takes none). Under one
  // window per sending task (host_credit) the credit is also other channels', which a later
  // member's inputs may wait on: there a group stays within a tensor, whose slices are ready
  // at once.
  struct AckRole {
    int64_t takes = 0;    // the first of a group: the credit of the whole group
    int64_t returns = 0;  // the last: what its acknowledgement returns
    bool later = false;   // not the first: takes no credit
    bool waits = false;   // not the last: no acknowledgement of its own
  };
  std::vector<std::vector<AckRole>> roles(xfers.size());
  for (size_t k = 0; k < xfers.size(); ++k) roles[k].resize(xfers[k].slices);
  // with ack_group: the groups made, and the counted tensors left ungrouped because they share
  // their priority (TIO's pushes, a layer's kernel and bias)
  int64_t groups = 0, tied_ungrouped = 0;
  if (ack_group_ > 1 && credit > 0 && !sent) {
    for (const auto& [name, ids] : channels) {
      std::vector<std::pair<int, int64_t>> members;  // (transfer, slice) of the group being made
      int64_t elements = 0, window = 0;
      const auto close = [&]() {
        if (members.size() > 1) {
          ++groups;
          for (const auto& [k, i] : members) roles[k][i] = {0, 0, true, true};
          auto& first = roles[members.front().first][members.front().second];
          first.later = false;
          first.takes = elements;
          auto& last = roles[members.back().first][members.back().second];
          last.waits = false;
          last.returns = elements;
        }
        members.clear();
        elements = 0;
      };
      for (int k : ids) {
        const Transfer& t = xfers[k];
        const int64_t counted = counted_slices_of(t);
        if (counted == 0) continue;  // takes no credit: it goes in its turn, within a group too
        const bool ordered = ordered_of(t);
        if (t.tied && ordered) ++tied_ungrouped;
        const bool groupable = ordered && !t.tied && t.slice_elements > 0;
        if (!groupable || host_credit_ || window_of(t) != window) close();
        if (!groupable) continue;
        window = window_of(t);
        for (int64_t i = 0; i < counted; ++i) {
          if (static_cast<int64_t>(members.size()) == ack_group_ ||
              elements + size_of(t, i) > window)
            close();
          members.emplace_back(k, i);
          elements += size_of(t, i);
        }
      }
      close();
    }
  }
  for (size_t k = 0; k < xfers.size(); ++k) {
    const Transfer& t = xfers[k];
    const NodeDef& src = out.node(t.src);
    const std::string tensor = t.port ? absl::StrCat(src.name(), ":", t.port) : src.name();
    const std::string stem =
        absl::StrCat(src.name(), "/tfsched", t.port ? absl::StrCat("_", t.port) : "", "_to_",
                     Sanitize(t.receiver));
    const std::string channel = absl::StrCat(t.sender, "->", t.receiver);
    const std::string& receiver_device = out.node(t.uses.front().first).device();
    const auto hold = holds.find(t.src);  // a sum's hold, whose inputs it may not take over
    const std::string after_hold = hold != holds.end() ? absl::StrCat("^", hold->second) : "";
    std::string split_name;
    if (t.slices > 1) {
      ++split;
      NodeDef node;
      split_name = unique(absl::StrCat(stem, "_split"));
      node.set_name(split_name);
      node.set_op("TfschedSplit");
      node.set_device(src.device());
      node.add_input(tensor);
      if (!after_hold.empty()) node.add_input(after_hold);
      auto& attr = *node.mutable_attr();
      attr["T"].set_type(t.dtype);
      attr["num_slices"].set_i(t.slices);
      attr["slice_elements"].set_i(t.slice_elements);
      attr["elements"].set_i(t.elements);
      added.push_back(std::move(node));
    }
    std::vector<std::string> gates;
    const int64_t acked_before = acked_gates;
    const bool ordered = ordered_of(t);
    const int64_t window = window_of(t);
    const int64_t counted_slices = counted_slices_of(t);
    for (int64_t i = 0; i < t.slices; ++i) {
      NodeDef gate;
      const std::string name =
          unique(t.slices > 1 ? absl::StrCat(stem, "_gate_", i, tag)
                              : absl::StrCat(src.name(), "/tfsched_gate",
                                             t.port ? absl::StrCat("_", t.port) : "", "_to_",
                                             Sanitize(t.receiver), tag));
      gate.set_name(name);
      gate.set_op(kGateOp);
      gate.set_device(src.device());
      gate.add_input(t.slices > 1 ? (i ? absl::StrCat(split_name, ":", i) : split_name) : tensor);
      if (t.slices == 1 && !after_hold.empty()) gate.add_input(after_hold);
      auto& attr = *gate.mutable_attr();
      attr["T"].set_type(t.dtype);
      attr["channel"].set_s(channel);
      attr["priority"].set_i(t.priority + (t.tied ? 0 : i));
      attr["channel_size"].set_i(t.channel_size);
      attr["sender_channels"].set_i(leaving[t.sender]);
      attr["timeout_ms"].set_i(timeout_ms_);
      const bool acked = i < counted_slices;
      acked_gates += acked;
      const AckRole& role = roles[k][i];  // in an acknowledgement group, if any
      attr["ordered"].set_b(ordered);
      // A group's later slices take no credit: its first took theirs
      attr["credit"].set_i(acked && !role.later ? window : 0);
      if (role.takes > 0) attr["group_elements"].set_i(role.takes);
      attr["host"].set_b(host_credit_);
      if (host_credit_ && host_order_ != "steps") attr["host_order"].set_s(host_order_);
      if (acked && sent) attr["credit_return"].set_s("sent");
      if (!inline_transfers_) attr[kNotInline].set_b(true);
      gates.push_back(name);
      added.push_back(std::move(gate));
      if (acked && !sent && !role.waits) {
        NodeDef ack;
        ack.set_name(unique(absl::StrCat(name, "/ack")));
        ack.set_op("TfschedAck");
        ack.set_device(receiver_device);
        ack.add_input(name);
        (*ack.mutable_attr())["T"].set_type(t.dtype);
        if (role.returns > 0) (*ack.mutable_attr())["elements"].set_i(role.returns);
        if (!inline_transfers_) (*ack.mutable_attr())[kNotInline].set_b(true);
        NodeDef back;
        back.set_name(unique(absl::StrCat(name, "/credit")));
        back.set_op("TfschedCredit");
        back.set_device(src.device());
        back.add_input(ack.name());
        (*back.mutable_attr())["channel"].set_s(channel);
        if (!inline_transfers_) (*back.mutable_attr())[kNotInline].set_b(true);
        credits_on[src.device()].push_back(back.name());
        added.push_back(std::move(ack));
        added.push_back(std::move(back));
      }
    }
    if (credit > 0 && t.slices > 1 && acked_gates == acked_before && t.elements >= least_acked)
      ++cut_under;
    std::string delivered = gates.front();
    if (t.slices > 1) {
      NodeDef concat;
      concat.set_name(unique(absl::StrCat(stem, "_concat")));
      concat.set_op("TfschedConcat");
      concat.set_device(receiver_device);
      for (const auto& gate : gates) concat.add_input(gate);
      auto& attr = *concat.mutable_attr();
      attr["T"].set_type(t.dtype);
      attr["num_slices"].set_i(t.slices);
      *attr["shape"].mutable_shape() = t.shape;
      delivered = concat.name();
      added.push_back(std::move(concat));
    }
    for (const auto& [consumer, input_index] : t.uses)
      out.mutable_node(consumer)->set_input(input_index, delivered);
  }
  // One sink per sending device gathers its credit returns; a fetched node waits for the sink,
  // so the acknowledgements belong to the step (and are not pruned away).
  for (const auto& [device, credits] : credits_on) {
    NodeDef sink;
    sink.set_name(unique(absl::StrCat("tfsched_credit_sink_", Sanitize(TaskOf(device)))));
    sink.set_op("NoOp");
    sink.set_device(device);
    for (const auto& c : credits) sink.add_input(absl::StrCat("^", c));
    int anchor = anchors.front();
    for (int a : anchors)
      if (g.task[a] == TaskOf(device)) {
        anchor = a;
        break;
      }
    out.mutable_node(anchor)->add_input(absl::StrCat("^", sink.name()));
    added.push_back(std::move(sink));
  }
  for (auto& node : added) *out.add_node() = std::move(node);
  if (acked_gates == 0 && cut_under > 0)  // the window would hold nothing: say why, once a graph
    LOG(WARNING) << "tfsched: " << item.id << ": the credit of " << credit
                 << " parameters acknowledges none of its transfers: " << cut_under
                 << " were big enough, but cut into equal slices of at most " << partition
                 << " parameters (the partition) each came out under the " << least_acked
                 << " it acknowledges (credit / ack_share " << ack_share_
                 << "); so nothing is held. Raise the partition, lower the credit or raise "
                    "ack_share.";
  if (ack_group_ > 1 && credit > 0 && !sent && groups == 0 && acked_gates > 0)
    LOG(WARNING) << "tfsched: " << item.id << ": ack_group " << ack_group_
                 << " groups none of its acknowledged slices: no two that follow each other on a "
                    "channel keep their order there and fit the credit of "
                 << credit << " parameters together"
                 << (tied_ungrouped > 0
                         ? absl::StrCat(" (", tied_ungrouped,
                                        " tensors of them share their priority with another of "
                                        "their channel, so their slices go in any order)")
                         : std::string())
                 << "; each is acknowledged on its own.";
  if (VLOG_IS_ON(2)) {  // TF_CPP_VMODULE=scheduler=2: each channel's order, as gated
    for (const auto& [name, ids] : channels)
      for (int i : ids)
        VLOG(2) << "tfsched: " << name << " #" << xfers[i].priority << " " << xfers[i].kind << " "
                << g.def->node(xfers[i].src).name() << " (" << xfers[i].elements << " parameters, "
                << xfers[i].slices << " slices)";
  }
  VLOG(1) << "tfsched: gated " << xfers.size() << " transfers on " << channels.size()
          << " channels, " << split << " partitioned, credit " << credit
          << (credit > 0 && push_credit_ > 0 ? absl::StrCat(" (pushes ", push_credit_, ")") : "")
          << (matched == 0 ? " (TIO)" : absl::StrCat(" (", matched, " from the schedule)"));
  return absl::OkStatus();
}

REGISTER_GRAPH_OPTIMIZER_AS(TfschedScheduler, "TfschedScheduler");

}  // namespace tfsched
