// A POST_PARTITIONING pass that takes the executor's thread pool off the path of a gated transfer.
//
// The partitioner puts a `_Send` after each gate, a `_Recv` before each TfschedAck and each
// TfschedCredit. What follows them would wait for an inter-op thread of its task: a gate released
// by an acknowledgement (on the thread that received it) is done, and the executor schedules its
// `_Send` on the pool; so are a received tensor's TfschedAck and an acknowledgement's
// TfschedCredit. With one inter-op thread per core (TensorFlow's
// default) both threads can be in the backward pass's convolutions for 100 ms and more, and the
// credit of the workers' pushes came back up to 345 ms late (BENCHMARKS.md,
// `results/credit-latency.md`): the windows drained.
//
// This pass, which runs in every task on the partitions it executes (TF-NOTES: it sees the
// `_Send`/`_Recv` pairs), lets each do its part on the thread that has it in hand:
// - a gate whose output feeds one `_Send` gets that `_Send`'s rendezvous key and puts the tensor
//   in the rendezvous when released (gate_ops.cc, SendNow); the `_Send` stays in the graph (the
//   traces read the partition graphs' pairs) and runs a kernel that does nothing;
// - an acknowledged tensor's `_Recv` on its receiver sends the acknowledgement as the tensor
//   arrives (TfschedAckRecvOp), and the acknowledgement's `_Send` after TfschedAck does nothing;
// - an acknowledgement's `_Recv` runs a kernel that returns the credit as it arrives
//   (TfschedCreditRecvOp); its TfschedCredit only checks it.
// The nodes keep their ops and names: what is marked is a kernel label (`_kernel`) and attrs
// beginning with an underscore. The Grappler pass marks gates and credits to leave alone
// (kNotInline, `enable(inline_transfers=False)`).

#include <algorithm>
#include <iterator>
#include <string>

#include "absl/strings/match.h"
#include "gate.h"
#include "tensorflow/core/common_runtime/optimization_registry.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/graph/graph.h"

namespace tfsched {
namespace {

using tensorflow::Edge;
using tensorflow::Node;

constexpr const char* kKeyAttrs[] = {"send_device", "recv_device", "tensor_name",
                                     "send_device_incarnation"};

// A transfer between tasks on a CPU, as the partitioner made it (not one the client feeds or
// fetches, not a host-memory pair in a function, not given a kernel of its own already).
bool Plain(const Node* transfer) {
  bool client = true, hostmem = false;
  return absl::StrContains(transfer->assigned_device_name(), "/device:CPU:") &&
         tensorflow::TryGetNodeAttr(transfer->attrs(), "client_terminated", &client) && !client &&
         !(tensorflow::TryGetNodeAttr(transfer->attrs(), "_hostmem_sendrecv", &hostmem) &&
           hostmem) &&
         transfer->attrs().Find("_kernel") == nullptr &&
         std::all_of(std::begin(kKeyAttrs), std::end(kKeyAttrs),
                     [&](const char* a) { return transfer->attrs().Find(a) != nullptr; });
}

// The one `_Send` `gate`'s output feeds, if there is exactly one.
Node* OnlySend(const Node* gate) {
  Node* send = nullptr;
  for (const Edge* e : gate->out_edges()) {
    if (e->IsControlEdge() || e->dst()->type_string() != "_Send") continue;
    if (send != nullptr) return nullptr;
    send = e->dst();
  }
  return send;
}

// The `_Recv` that feeds `credit` and nothing else, if any.
Node* OwnRecv(const Node* credit) {
  for (const Edge* e : credit->in_edges()) {
    if (e->IsControlEdge() || e->dst_input() != 0) continue;
    Node* recv = e->src();
    if (recv->type_string() != "_Recv") return nullptr;
    int consumers = 0;
    for (const Edge* out : recv->out_edges()) consumers += !out->IsControlEdge();
    return consumers == 1 ? recv : nullptr;
  }
  return nullptr;
}

void Mark(tensorflow::Graph* graph) {
  for (Node* node : graph->op_nodes()) {
    if (tensorflow::HasNodeAttr(node->def(), kNotInline)) continue;
    if (node->type_string() == "TfschedGate") {
      Node* send = OnlySend(node);
      if (send == nullptr || !Plain(send)) continue;
      for (const char* a : kKeyAttrs)
        node->AddAttr(std::string(kSendKeyPrefix) + a, *send->attrs().Find(a));
      send->AddAttr("_kernel", std::string(kSentLabel));
    } else if (node->type_string() == "TfschedAck") {
      Node* recv = nullptr;
      for (const Edge* e : node->in_edges())
        if (!e->IsControlEdge() && e->dst_input() == 0) recv = e->src();
      Node* send = OnlySend(node);
      if (recv == nullptr || recv->type_string() != "_Recv" || !Plain(recv) || send == nullptr ||
          !Plain(send))
        continue;
      for (const char* a : kKeyAttrs)
        recv->AddAttr(std::string(kAckKeyPrefix) + a, *send->attrs().Find(a));
      recv->AddAttr("_kernel", std::string(kAckLabel));
      int64_t elements = 0;
      if (tensorflow::TryGetNodeAttr(node->attrs(), "elements", &elements) && elements > 0)
        recv->AddAttr(kAckElements, elements);
      send->AddAttr("_kernel", std::string(kSentLabel));
    } else if (node->type_string() == "TfschedCredit") {
      Node* recv = OwnRecv(node);
      std::string channel;
      if (recv == nullptr || !Plain(recv) ||
          !tensorflow::TryGetNodeAttr(node->attrs(), "channel", &channel))
        continue;
      recv->AddAttr("_kernel", std::string(kCreditLabel));
      recv->AddAttr(kCreditChannel, channel);
      node->AddAttr(kReturnedByRecv, true);
    }
  }
}

class InlineTransfers : public tensorflow::GraphOptimizationPass {
 public:
  absl::Status Run(const tensorflow::GraphOptimizationPassOptions& options) override {
    if (options.partition_graphs == nullptr) return absl::OkStatus();
    for (auto& [device, graph] : *options.partition_graphs) Mark(graph.get());
    return absl::OkStatus();
  }
};

REGISTER_OPTIMIZATION(tensorflow::OptimizationPassRegistry::POST_PARTITIONING, 0, InlineTransfers);

}  // namespace
}  // namespace tfsched
