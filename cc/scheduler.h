// TfschedScheduler: the Grappler pass that puts a TfschedGate in front of every tensor that
// crosses from one task to another, with its priority on its channel.
#ifndef TFSCHED_CC_SCHEDULER_H_
#define TFSCHED_CC_SCHEDULER_H_

#include <map>
#include <set>
#include <string>

#include "tensorflow/core/grappler/optimizers/custom_graph_optimizer.h"

namespace tfsched {

class TfschedScheduler : public tensorflow::grappler::CustomGraphOptimizer {
 public:
  // parameter_map:
  //   priorities: list of "sender|receiver|key|priority" from a tfsched.schedule/1 file
  //               (may be empty: then TIO, computed here from the graph)
  //   timeout_ms: int, longest gate wait (default 60000)
  //   ps_job:     string, job name of the parameter servers (default "ps")
  //   mode:       "counter" (default): every gate waits for its turn (TicTac's per-step counters);
  //               "queue" (ByteScheduler's priority queue): pulls, all ready at the start of a
  //               step, by counters (that is queue order); pushes, ready one by one, highest
  //               priority first among those that have arrived;
  //               "ready": pulls too, each channel's gates served highest priority first among
  //               those that have arrived (steps across TensorFlow's barrier, where a pull is
  //               ready when its variable is updated: tfsched.enforce.crossing)
  //   partition:  int, parameters; a transfer larger than this is split into slices on the sender,
  //               each gated in turn, and concatenated on the receiver (0, default: no splitting;
  //               -1: AutoSizes')
  //   credit:     int, parameters; at most this much released and not yet acknowledged per
  //               channel (0, default: no acknowledgements, no limit; -1: AutoSizes')
  //   push_credit: int, parameters; the window of the pushes (a worker's transfers to a PS) in
  //               place of `credit`, which the pulls keep; which transfers are acknowledged is
  //               still credit/ack_share's (0, default: the pushes have `credit` too)
  //   inline_transfers: bool (default true): a gate puts its tensor in the rendezvous itself and
  //               an acknowledgement's `_Recv` returns its credit, neither waiting for an inter-op
  //               thread (transfers.cc); false marks them to keep TensorFlow's `_Send`/`_Recv`
  //   sizes_bandwidth_bps: float, the link AutoSizes sizes for (0, default: 1 Gbit/s's sizes)
  //   host_credit: bool, the credit is one window for every channel of the sending task
  //   host_order: "steps" (default): the window serves the oldest step first; "priority": the
  //               highest priority of every step first (the steps in lockstep)
  //   ack_share:  int >= 1, the credit acknowledges transfers of at least credit/ack_share
  //               parameters (default 8)
  //   ack_group:  int >= 1, with credit_return "ack": at most this many consecutive acknowledged
  //               slices of one tensor share one acknowledgement (default 1: ByteScheduler's, one
  //               each); the group's first slice takes the whole group's credit, the others go
  //               in their turn, and the last one's arrival gives it back. Only on channels that
  //               keep their order (not "ready", not "queue"'s pushes) and only as many slices as
  //               the credit holds
  //   credit_return: "ack" (default): the receiver acknowledges each counted transfer
  //               (ByteScheduler's); "sent": its credit comes back when this task's transport is
  //               done with it, with no acknowledgement (SentBuffer in gate_ops.cc)
  //   functions:  bool, the pass is in force for every function a process instantiates: a graph the
  //               schedule names none of the transfers of (another function) is ordered by TIO,
  //               not refused
  //   iterations: int >= 1, how many times Grappler's meta optimizer runs its optimizers, this
  //               one the last each time (RewriterConfig.meta_optimizer_iterations; default 2,
  //               TensorFlow's): the pass gates the graph on its last call, the graph TensorFlow's
  //               own optimizers have finished with, and returns it unchanged before
  //   dump_dir:   string, a directory on this task's host: each graph with cross-task transfers is
  //               written there as it came to the pass (<graph>.<worker>.pb, placed: what `tfsched
  //               analyze` reads) and as gated (<graph>.<worker>.gated.pb)
  absl::Status Init(const tensorflow::RewriterConfig_CustomGraphOptimizer* config) override;
  // Grappler makes its optimizers for each graph it optimizes and ends them after: an item
  // Grappler ran fewer iterations on than `iterations`, whose nodes are on several tasks, was
  // not gated, and the log says why.
  ~TfschedScheduler() override;
  std::string name() const override { return "TfschedScheduler"; }
  bool UsesFunctionLibrary() const override { return false; }
  absl::Status Optimize(tensorflow::grappler::Cluster* cluster,
                        const tensorflow::grappler::GrapplerItem& item,
                        tensorflow::GraphDef* optimized_graph) override;

 private:
  // Optimize without the dump; `crossing` says whether the graph has transfers to gate.
  absl::Status Gate(const tensorflow::grappler::GrapplerItem& item,
                    tensorflow::GraphDef* optimized_graph, bool* crossing);
  void Dump(const tensorflow::grappler::GrapplerItem& item,
            const tensorflow::GraphDef& gated) const;

  // "sender|receiver|key" and "ps-side task|key" -> priority from the schedule
  std::map<std::string, int64_t> exact_;
  std::map<std::string, int64_t> by_ps_;
  int64_t timeout_ms_ = 60000;
  std::string ps_job_ = "ps";
  std::string mode_ = "counter";
  int64_t partition_ = 0;         // -1: AutoSizes'
  int64_t credit_ = 0;            // -1: AutoSizes'
  bool inline_transfers_ = true;  // gates send, acknowledgements return credit (transfers.cc)
  int64_t push_credit_ = 0;       // the pushes' window in place of credit_ (0: credit_)
  double sizes_bandwidth_bps_ = 0;
  bool host_credit_ = false;          // one credit window per sending task, steps served in turn
  std::string host_order_ = "steps";  // or "priority": the window's steps in lockstep
  // acknowledge transfers of at least credit / ack_share_ parameters (and kMinAckedElements)
  int64_t ack_share_ = 8;
  int64_t ack_group_ = 1;  // consecutive slices of a tensor one acknowledgement returns at most
  std::string credit_return_ = "ack";
  bool functions_ = false;
  std::string dump_dir_;
  int64_t iterations_ = 2;
  std::map<std::string, int64_t> calls_;  // item id -> the calls so far (Optimize)
  std::set<std::string> spanning_;        // item ids whose nodes are on several tasks
};

}  // namespace tfsched

#endif  // TFSCHED_CC_SCHEDULER_H_
