// TfschedGate: a pass-through that releases its tensor in priority order on its channel.
// TfschedStats: this process's gate counters.
// TfschedBuild: which build of the library this process loaded.
// TfschedHold: keeps a sum's inputs from it (scheduler.cc, HeldFromSums).

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gate.h"
#include "tensorflow/core/framework/allocation_description.pb.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/rendezvous.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/platform/logging.h"
#include "tensorflow/core/platform/statusor.h"
#include "tsl/profiler/lib/traceme_encode.h"

namespace tfsched {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;

REGISTER_OP("TfschedGate")
    .Input("input: T")
    .Output("output: T")
    .Attr("T: type")
    .Attr("channel: string")
    .Attr("priority: int >= 0")
    .Attr("channel_size: int >= 1")
    .Attr("sender_channels: int >= 0 = 0")
    .Attr("timeout_ms: int >= 0 = 60000")
    .Attr("ordered: bool = true")
    .Attr("credit: int >= 0 = 0")
    .Attr("host: bool = false")
    .Attr("host_order: {'steps', 'priority'} = 'steps'")
    .Attr("credit_return: {'ack', 'sent'} = 'ack'")
    .Attr("group_elements: int >= 0 = 0")
    .SetIsStateful()  // must not be constant-folded, deduplicated or pruned by the optimizers
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape)
    .Doc(R"doc(
Passes `input` through once its turn has come on `channel` in this step. Inserted by the
TfschedScheduler Grappler pass on the sender's device, in front of a tensor that crosses to
another task.

channel: "<sender task>-><receiver task>".
priority: number of gates of this channel that go before this one (ties share a number).
channel_size: number of gates of this channel in the graph.
sender_channels: number of gated channels leaving the sending task in the graph (0: not known).
timeout_ms: longest wait; then the tensor goes anyway and the event is counted (0: no limit; at
  most 10^12).
ordered: true: wait until `priority` gates of the channel were released (TicTac's per-step
  counters); false: the highest-priority gate that has arrived goes first (ByteScheduler's queue).
credit: at most this many parameters released and not acknowledged on the channel (TfschedAck /
  TfschedCredit carry the acknowledgements); 0: the channel has no acknowledgements, no limit.
  TfschedSetCredit overrides it while training runs.
host: the credit is one window for every channel of the sending task, and the window serves the
  steps in the order they reached this task (the oldest step's tensors first).
host_order: with `host`, "steps" (the oldest step's tensors first) or "priority" (the highest
  priority of every step first, ties by age: the steps in lockstep).
credit_return: "ack": a TfschedAck on the receiver returns the credit (ByteScheduler's); "sent":
  the credit comes back once this task's transport is done with the tensor (no acknowledgement
  RPC; plain data types only).
group_elements: with `credit`, the parameters this gate takes of the credit: its own and those of
  the gates after it on its channel (its tensor's next slices, or the next tensors') whose one
  acknowledgement (the last one's TfschedAck, `elements`) returns them all; they go in their
  turn without credit. 0: its own.
)doc");

REGISTER_OP("TfschedAck")
    .Input("input: T")
    .Output("ack: int64")
    .Attr("T: type")
    .Attr("elements: int >= 0 = 0")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
On the receiving task: the number of parameters of `input`, once it arrived. Sent back to the
sender's TfschedCredit, it returns that much credit to the channel.

elements: what it returns, if not 0: the parameters of an acknowledgement group (the slices the
  group's first gate took credit for), `input` being its last.
)doc");

REGISTER_OP("TfschedCredit")
    .Input("ack: int64")
    .Attr("channel: string")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
On the sending task: gives `ack` parameters back to the credit of `channel` in this step.
)doc");

REGISTER_OP("TfschedSetCredit")
    .Input("credit: int64")
    .Output("previous: int64")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Sets the credit (parameters) of every gated channel of this process from the next decision on,
without a new session; credit < 1 returns to the pass's setting. Returns the previous live
setting (-1: none) and resets the peak in-flight counter of TfschedStats.
)doc");

REGISTER_OP("TfschedSplit")
    .Input("input: T")
    .Output("output: num_slices * T")
    .Attr("T: type")
    .Attr("num_slices: int >= 2")
    .Attr("slice_elements: int >= 1")
    .Attr("elements: int >= 1")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      int64_t n = 0, s = 0, total = 0;
      TF_RETURN_IF_ERROR(c->GetAttr("num_slices", &n));
      TF_RETURN_IF_ERROR(c->GetAttr("slice_elements", &s));
      TF_RETURN_IF_ERROR(c->GetAttr("elements", &total));
      for (int64_t i = 0; i < n; ++i) c->set_output(i, c->Vector(std::min(s, total - i * s)));
      return absl::OkStatus();
    })
    .Doc(R"doc(
ByteScheduler's tensor partitioning, sender side: `input` (of `elements` parameters) as
`num_slices` flat slices of `slice_elements` (the last one shorter). The slices share the input's
buffer (no copy); `slice_elements` is a multiple of 64 bytes, so every slice stays aligned.
)doc");

REGISTER_OP("TfschedConcat")
    .Input("slices: num_slices * T")
    .Output("output: T")
    .Attr("T: type")
    .Attr("num_slices: int >= 2")
    .Attr("shape: shape")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::PartialTensorShape shape;
      TF_RETURN_IF_ERROR(c->GetAttr("shape", &shape));
      tensorflow::shape_inference::ShapeHandle out;
      TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(shape, &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Receiver side of TfschedSplit: the slices, in order, as one tensor of `shape`.
)doc");

REGISTER_OP("TfschedHold")
    .Input("inputs: T")
    .Attr("T: list(type) >= 1")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Does nothing with `inputs`: the pass makes it run right after a sum (AddN) that is sent to another
task, so that those inputs' buffers are still held while the sum runs and the sum adds them in
TensorFlow's own order (scheduler.cc, HeldFromSums). Stateful, so that Grappler leaves it be.
)doc");

REGISTER_OP("TfschedStats")
    .Output("stats: int64")
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->Vector(11));
      return absl::OkStatus();
    })
    .Doc(R"doc(
This process's gate counters: [released, waited, timeouts, cancelled, live_steps, wait_us, acked,
peak_in_flight, live_credit (-1: none set), armed_late, steps].
)doc");

REGISTER_OP("TfschedBuild")
    .Output("build: string")
    .SetIsStateful()  // never folded into a constant by the master: it answers for its own task
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
The build of tfsched's library this process loaded: the TensorFlow version it was compiled
against and the hash of its sources and flags (tfsched.enforce.build), as in the library's name.
)doc");

// Fault injection for the tests ($TFSCHED_TEST_ARM_DELAY_US, read once): a parked gate waits
// this long before it arms, so that its turn comes on another thread meanwhile.
int64_t ArmDelayUs() {
  static const int64_t us = TestDelayUs("TFSCHED_TEST_ARM_DELAY_US");
  return us;
}

void WarnTimeout(const std::string& channel, int64_t priority, int64_t released) {
  // One warning a minute at most: a slow link would otherwise flood the log.
  static std::atomic<int64_t> last_us{0};
  int64_t now =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
          .count();
  int64_t prev = last_us.load();
  if (now - prev > 60 * 1000000 && last_us.compare_exchange_strong(prev, now)) {
    LOG(WARNING) << "tfsched: a gate on " << channel << " waited past its timeout (priority "
                 << priority << ", " << released << " released before it); releasing it. "
                 << "Timeouts so far: " << GlobalStats().timeouts.load();
  }
}

// The output of a gate whose credit comes back when it has been sent (credit_return "sent"): the
// input's bytes, not copied, in a buffer of its own. gRPC keeps a reference to the root buffer of
// a tensor it sends until it has written the response (TensorReference in grpc_tensor_coding.cc),
// so the last reference to this one goes once the transfer has left this task, and that returns
// its credit without an acknowledgement RPC (about 0.3 ms of the two cores each on ResNet-50 at 10
// Gbit/s; benchmarks/reading.md). A step that drops the tensor (cancelled, failed) returns it too.
// An improvement over ByteScheduler, whose credit returns only by the receiver's acknowledgement;
// what it does not see is the bytes already in this host's socket buffer and network queue.
class SentBuffer : public tensorflow::TensorBuffer {
 public:
  SentBuffer(const tensorflow::Tensor& input, StepGates* gates, Channel* channel, int64_t size)
      : TensorBuffer(const_cast<char*>(input.tensor_data().data())),
        input_(input),
        gates_(gates),
        channel_(channel),
        size_(size) {
    gates_->Ref();  // the channel outlives the step if the transport still holds the tensor
  }
  ~SentBuffer() override { ReturnSoon(gates_, channel_, size_); }
  size_t size() const override { return input_.tensor_data().size(); }
  // Itself, not the input's root: what gRPC holds while it sends must be this buffer.
  TensorBuffer* root_buffer() override { return this; }
  void FillAllocationDescription(tensorflow::AllocationDescription* proto) const override {
    proto->set_requested_bytes(static_cast<int64_t>(size()));
    proto->set_allocator_name("tfsched_sent");
  }
  // The bytes are the input's: no op may take them over and write them in place.
  bool OwnsMemory() const override { return false; }

 private:
  const tensorflow::Tensor input_;
  StepGates* const gates_;
  Channel* const channel_;
  const int64_t size_;
};

// The state of this step (a reference for the caller): in the step's container, made there if
// new; or, where that container is not the step's own but shared by every step (TensorFlow 2's
// functions: its step id is not this step's), by step id (KeyedStep), and then null if there is
// none and `create_keyed` is false, or if the step has no cancellation manager to end it (never
// so for a function's call: the runtime makes one if the caller gave none); Cancelled if that call
// was cancelled before its state was made.
absl::Status StepState(OpKernelContext* ctx, bool create_keyed, StepGates** gates) {
  tensorflow::ScopedStepContainer* container = ctx->step_container();
  if (container->StepId() != ctx->step_id()) {
    tensorflow::CancellationManager* cm = ctx->cancellation_manager();
    return KeyedStep(ctx->step_id(), create_keyed && cm != nullptr, cm, gates);
  }
  return container->LookupOrCreate<StepGates>(ctx->resource_manager(), "tfsched_gates", gates,
                                              [](StepGates** g) {
                                                *g = new StepGates();
                                                return absl::OkStatus();
                                              });
}

// Where a transfer's `_Send` puts its tensor (the attrs the partitioner gave it), for a gate that
// sends the tensor itself and a `_Recv` that returns credit itself (transfers.cc).
struct RendezvousKey {
  std::string send_device, recv_device, tensor_name;
  int64_t incarnation = 0;
  tensorflow::Rendezvous::ParsedKey root;  // the key in the root frame, parsed once

  static absl::Status FromAttrs(OpKernelConstruction* ctx, const std::string& prefix,
                                RendezvousKey* key) {
    TF_RETURN_IF_ERROR(ctx->GetAttr(prefix + "send_device", &key->send_device));
    TF_RETURN_IF_ERROR(ctx->GetAttr(prefix + "recv_device", &key->recv_device));
    TF_RETURN_IF_ERROR(ctx->GetAttr(prefix + "tensor_name", &key->tensor_name));
    TF_RETURN_IF_ERROR(ctx->GetAttr(prefix + "send_device_incarnation", &key->incarnation));
    return key->Parse(tensorflow::FrameAndIter(0, 0), &key->root);
  }
  // As `_Send`/`_Recv` make it: the partitioner's key in this step's frame and iteration. In the
  // root frame (every transfer the pass marks) it is the one parsed at construction, as
  // TensorFlow's SendOp and RecvOp keep theirs; `scratch` holds one made for another frame.
  absl::StatusOr<const tensorflow::Rendezvous::ParsedKey*> For(
      OpKernelContext* ctx, tensorflow::Rendezvous::ParsedKey* scratch) const {
    if (ctx->frame_iter() == tensorflow::FrameAndIter(0, 0)) return &root;
    TF_RETURN_IF_ERROR(Parse(ctx->frame_iter(), scratch));
    return scratch;
  }

 private:
  absl::Status Parse(tensorflow::FrameAndIter frame_iter,
                     tensorflow::Rendezvous::ParsedKey* parsed) const {
    return tensorflow::Rendezvous::ParseKey(
        tensorflow::Rendezvous::CreateKey(send_device, static_cast<uint64_t>(incarnation),
                                          recv_device, tensor_name, frame_iter),
        parsed);
  }
};

// What TensorFlow's SendOp and RecvOp say of themselves to the profiler (their TraceString): the
// node the tensor comes from and goes to, and the rendezvous key (of the root frame, as theirs),
// which tracing/functions.py reads to name a function's transfers.
std::string TransferTraceString(const tensorflow::OpKernel& op, const RendezvousKey& key) {
  const auto& attr = op.def().attr();
  const auto get = [&attr](const char* name) {
    auto it = attr.find(name);
    return it != attr.end() ? it->second.s() : std::string();
  };
  return tsl::profiler::TraceMeEncode(
      tsl::profiler::TraceMeOp(op.name_view(), op.type_string_view()),
      {{"from", get("_src")},
       {"to", get("_dst")},
       {"key", tensorflow::Rendezvous::CreateKey(
                   key.send_device, static_cast<uint64_t>(key.incarnation), key.recv_device,
                   key.tensor_name, tensorflow::FrameAndIter(0, 0))}});
}

// Puts a released gate's output in the rendezvous, as its `_Send` would: on the thread that
// released it (often the one that received an acknowledgement), not after the executor found an
// inter-op thread for the `_Send`.
absl::Status SendNow(OpKernelContext* ctx, const RendezvousKey& key,
                     const tensorflow::Tensor& value) {
  if (ctx->rendezvous() == nullptr)
    return absl::InternalError("tfsched: this step has no rendezvous to send to");
  tensorflow::Rendezvous::ParsedKey scratch;
  TF_ASSIGN_OR_RETURN(const tensorflow::Rendezvous::ParsedKey* parsed, key.For(ctx, &scratch));
  tensorflow::Rendezvous::Args args;
  args.device_context = ctx->op_device_context();
  return ctx->rendezvous()->Send(*parsed, args, value, false);
}
absl::Status SendNow(OpKernelContext* ctx, const RendezvousKey& key) {
  return SendNow(ctx, key, *ctx->mutable_output(0));
}

// Gives an acknowledgement's parameters back to `channel`'s credit in this step.
absl::Status ReturnCredit(OpKernelContext* ctx, const std::string& channel,
                          const tensorflow::Tensor& ack) {
  if (!tensorflow::TensorShapeUtils::IsScalar(ack.shape()) || ack.dtype() != tensorflow::DT_INT64)
    return absl::InvalidArgumentError("tfsched: an acknowledgement is an int64 scalar");
  if (ctx->step_container() == nullptr) return absl::OkStatus();  // the gates did not order
  StepGates* gates = nullptr;
  // A keyed step (TensorFlow 2's functions) is not made here: without it, its gates all went
  // and its credit came back already, or its call ended.
  TF_RETURN_IF_ERROR(StepState(ctx, false, &gates));
  if (gates == nullptr) return absl::OkStatus();
  tensorflow::core::ScopedUnref unref(gates);
  GlobalStats().acked.fetch_add(1);
  std::vector<std::shared_ptr<Waiter>> ready;
  gates->Get(channel)->Return(ack.scalar<int64_t>()(), &ready);
  FireInTurn(std::move(ready), Outcome::kTurn);
  ForgetIfFinished(gates);
  return absl::OkStatus();
}

class TfschedGateOp : public AsyncOpKernel {
 public:
  explicit TfschedGateOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("channel", &channel_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("priority", &priority_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("channel_size", &channel_size_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("sender_channels", &sender_channels_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("timeout_ms", &timeout_ms_));
    OP_REQUIRES(ctx, timeout_ms_ <= kMaxTimeoutMs,
                absl::InvalidArgumentError(absl::StrCat("TfschedGate: timeout_ms ", timeout_ms_,
                                                        " is more than ", kMaxTimeoutMs,
                                                        " (about 31.7 years); 0 is no limit")));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("ordered", &ordered_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("credit", &credit_));
    bool host = false;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("host", &host));
    if (host && credit_ > 0) host_ = HostLink::For(channel_.substr(0, channel_.find("->")));
    std::string host_order;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("host_order", &host_order));
    by_priority_ = host_order == "priority";
    std::string credit_return;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("credit_return", &credit_return));
    sent_ = credit_ > 0 && credit_return == "sent";
    OP_REQUIRES_OK(ctx, ctx->GetAttr("group_elements", &group_elements_));
    if (tensorflow::HasNodeAttr(def(), kSendKeyPrefix + std::string("tensor_name"))) {
      auto key = std::make_shared<RendezvousKey>();
      OP_REQUIRES_OK(ctx, RendezvousKey::FromAttrs(ctx, kSendKeyPrefix, key.get()));
      send_ = std::move(key);
    }
    OP_REQUIRES(ctx, !sent_ || tensorflow::DataTypeCanUseMemcpy(ctx->input_type(0)),
                absl::InvalidArgumentError(absl::StrCat(
                    "tfsched: ", name(), ": credit_return 'sent' needs a plain data type, not ",
                    tensorflow::DataTypeString(ctx->input_type(0)))));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    // Zero-copy pass-through: the output shares the input's buffer (with credit_return "sent",
    // through a SentBuffer, set below: an output is set once).
    if (!sent_) ctx->set_output(0, ctx->input(0));
    Stats& stats = GlobalStats();
    auto w = std::make_shared<Waiter>();
    if (ctx->step_container() != nullptr) {
      const absl::Status state = StepState(ctx, true, &w->gates);
      if (absl::IsCancelled(state)) {  // its call failed before it ran: it went, cancelled
        stats.released.fetch_add(1);
        stats.cancelled.fetch_add(1);
      }
      OP_REQUIRES_OK_ASYNC(ctx, state, done);
    }
    if (w->gates == nullptr) {
      // No state can be kept for this step (no per-step container, or a shared one and no
      // cancellation manager to end it): do not order rather than risk a hang.
      if (sent_) ctx->set_output(0, ctx->input(0));
      stats.released.fetch_add(1);
      if (send_) ctx->SetStatus(SendNow(ctx, *send_));
      done();
      return;
    }
    Channel* channel = w->gates->Get(channel_, channel_size_, sender_channels_);
    w->channel = channel;
    w->size = group_elements_ > 0 ? group_elements_ : ctx->input(0).NumElements();
    if (sent_) {  // the output's last reference gives the credit back (SentBuffer)
      const tensorflow::Tensor& input = ctx->input(0);
      auto* buf = new SentBuffer(input, w->gates, channel, w->size);
      ctx->set_output(0, tensorflow::Tensor(input.dtype(), input.shape(), buf));
      buf->Unref();  // the output holds it now
    }
    w->priority = priority_;
    w->ordered = ordered_;
    w->credit = credit_;
    w->host = host_;
    w->host_key = by_priority_ ? std::make_pair(priority_, w->gates->seq())
                               : std::make_pair(w->gates->seq(), priority_);
    w->since = Clock::now();
    w->deadline = timeout_ms_ > 0 ? w->since + std::chrono::milliseconds(timeout_ms_)
                                  : Clock::time_point::max();
    tensorflow::CancellationManager* cm = ctx->cancellation_manager();
    tensorflow::CancellationToken token = cm ? cm->get_cancellation_token() : 0;
    // `fire` ends this gate's wait, exactly once (guarded by Waiter::fired).
    w->fire = [ctx, done, cm, token, since = w->since, send = send_](Outcome how) {
      Stats& s = GlobalStats();
      s.released.fetch_add(1);
      s.waited.fetch_add(1);
      s.wait_us.fetch_add(
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - since).count());
      if (how == Outcome::kTimeout) s.timeouts.fetch_add(1);
      if (how == Outcome::kCancelled) {
        s.cancelled.fetch_add(1);
        ctx->SetStatus(absl::CancelledError("tfsched gate: step cancelled"));
      } else {
        if (cm != nullptr) cm->TryDeregisterCallback(token);
        if (send) ctx->SetStatus(SendNow(ctx, *send));  // its turn, or its timeout: it goes
      }
      done();
    };
    std::vector<std::shared_ptr<Waiter>> others;
    w->arm.store(Waiter::kArming);  // parked, it is not fired until armed below
    bool go = channel->ArriveOrWait(w, &others);
    if (!others.empty()) FireInTurn(std::move(others), Outcome::kTurn);
    // Its turn on the channel; a shared window may still make it wait.
    if (go && host_ != nullptr && !host_->ArriveOrWait(w)) go = false;
    if (go) {
      stats.released.fetch_add(1);
      w->fired.store(true);
      std::vector<std::shared_ptr<Waiter>> ready = NextInTurn(w.get());
      if (send_) ctx->SetStatus(SendNow(ctx, *send_));
      done();
      std::vector<std::shared_ptr<Waiter>> arrived = HandedOn(w.get());
      ready.insert(ready.end(), arrived.begin(), arrived.end());
      FireInTurn(std::move(ready), Outcome::kTurn);
      ForgetIfFinished(w->gates);
      return;
    }
    std::weak_ptr<Waiter> weak = w;
    // Give up waiting: the step ended (cancel) or the wait took too long (timeout).
    auto withdraw = [weak, channel, name = channel_](Outcome how) {
      auto waiter = weak.lock();  // alive => its StepGates, and so `channel`, are alive
      if (!waiter) return;
      // Before the locks: a window that takes it after them lets it go (Waiter::abandoned).
      waiter->abandoned.store(static_cast<int>(how) + 1);
      bool withdrawn = channel->Withdraw(waiter);
      if (waiter->host != nullptr) {
        if (withdrawn) {
          waiter->host->Charge(waiter);
        } else {
          withdrawn = waiter->host->Withdraw(waiter);
        }
      }
      if (withdrawn) {
        if (how == Outcome::kTimeout) WarnTimeout(name, waiter->priority, channel->released());
        FireInTurn({waiter}, how);
      }
    };
    if (ArmDelayUs() > 0) {  // tests only: widen the window in which its turn can come
      std::this_thread::sleep_for(std::chrono::microseconds(ArmDelayUs()));
    }
    // Arm the parked waiter. Its turn can come on another thread meanwhile: that thread then
    // leaves the firing to this one (Waiter::FireNowOrDefer), since firing calls done(), which
    // can end the step and free `cm` while it is still used here.
    const bool registered =
        cm == nullptr || cm->RegisterCallback(token, [withdraw] { withdraw(Outcome::kCancelled); });
    if (registered && timeout_ms_ > 0) {
      Watchdog::Get().Watch(w, [withdraw] { withdraw(Outcome::kTimeout); });
    }
    if (w->ArmedAfterDeferral()) {
      FireDeferred(w);  // its turn (or its timeout, or the cancellation) came while it armed
    } else if (!registered) {
      withdraw(Outcome::kCancelled);  // the step was cancelled already
    }
  }

 private:
  std::string channel_;
  int64_t priority_ = 0;
  int64_t channel_size_ = 1;
  int64_t sender_channels_ = 0;
  int64_t timeout_ms_ = 0;
  bool ordered_ = true;
  int64_t credit_ = 0;
  HostLink* host_ = nullptr;    // the sending task's shared window, if the pass asked for one
  bool by_priority_ = false;    // host_order "priority": the window serves the steps in lockstep
  bool sent_ = false;           // the credit comes back when the tensor was sent (SentBuffer)
  int64_t group_elements_ = 0;  // what it takes of the credit, if not its own size
  // Set by the POST_PARTITIONING pass (transfers.cc): the gate puts its tensor in the rendezvous
  // itself, and its `_Send` does nothing.
  std::shared_ptr<const RendezvousKey> send_;
};

class TfschedAckOp : public tensorflow::OpKernel {
 public:
  explicit TfschedAckOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("elements", &elements_));
  }
  bool IsExpensive() override { return false; }  // run inline: the ack leaves at once
  void Compute(OpKernelContext* ctx) override {
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({}), &out));
    out->scalar<int64_t>()() = elements_ > 0 ? elements_ : ctx->input(0).NumElements();
  }

 private:
  int64_t elements_ = 0;  // an acknowledgement group's parameters (0: the input's)
};

class TfschedCreditOp : public tensorflow::OpKernel {
 public:
  explicit TfschedCreditOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("channel", &channel_));
    // Its `_Recv` returns the credit (transfers.cc): this one only checks the acknowledgement.
    returned_by_recv_ = tensorflow::HasNodeAttr(def(), kReturnedByRecv);
  }
  bool IsExpensive() override { return false; }
  void Compute(OpKernelContext* ctx) override {
    const tensorflow::Tensor& ack = ctx->input(0);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(ack.shape()),
                absl::InvalidArgumentError("tfsched: an acknowledgement is a scalar"));
    if (!returned_by_recv_) OP_REQUIRES_OK(ctx, ReturnCredit(ctx, channel_, ack));
  }

 private:
  std::string channel_;
  bool returned_by_recv_ = false;
};

// The `_Send` of a gate that sends its tensor itself: nothing left to do.
class TfschedSentSendOp : public tensorflow::OpKernel {
 public:
  explicit TfschedSentSendOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, RendezvousKey::FromAttrs(ctx, "", &key_));
  }
  // Expensive, as TensorFlow's SendOp: the profiler records inexpensive ops only at its verbose
  // level, and a function's trace names its transfers from this op's TraceString.
  void Compute(OpKernelContext*) override {}
  std::string TraceString(const OpKernelContext&, bool) const override {
    return TransferTraceString(*this, key_);
  }

 private:
  RendezvousKey key_;
};

// A `_Recv` that acts on its tensor as it arrives, on the thread that received it, where
// TensorFlow's `_Recv` -> consumer waits for an inter-op thread of the task first (up to 345 ms
// behind the backward pass's convolutions, measured in BENCHMARKS.md). `Arrived` does the
// consumer's part; the tensor is then the output, as `_Recv`'s.
class ActingRecvOp : public AsyncOpKernel {
 public:
  explicit ActingRecvOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, RendezvousKey::FromAttrs(ctx, "", &key_));
  }

  std::string TraceString(const OpKernelContext&, bool) const override {
    return TransferTraceString(*this, key_);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    OP_REQUIRES_ASYNC(ctx, ctx->rendezvous() != nullptr,
                      absl::InternalError("tfsched: this step has no rendezvous to receive from"),
                      done);
    // The rendezvous copies what it keeps of the key, as TensorFlow's RecvOp relies on.
    tensorflow::Rendezvous::ParsedKey scratch;
    absl::StatusOr<const tensorflow::Rendezvous::ParsedKey*> parsed = key_.For(ctx, &scratch);
    OP_REQUIRES_OK_ASYNC(ctx, parsed.status(), done);
    tensorflow::Rendezvous::Args args;
    args.device_context = ctx->op_device_context();
    args.alloc_attrs = ctx->output_alloc_attr(0);
    args.cancellation_manager = ctx->cancellation_manager();
    ctx->rendezvous()->RecvAsync(
        **parsed, args,
        [this, ctx, done = std::move(done)](
            const absl::Status& s, const tensorflow::Rendezvous::Args&,
            const tensorflow::Rendezvous::Args&, const tensorflow::Tensor& value, bool is_dead) {
          if (!s.ok()) {
            ctx->SetStatus(s);
          } else if (is_dead) {  // the pass marks no transfer in control flow: never dead
            ctx->SetStatus(absl::InternalError("tfsched: a dead tensor where a live one was due"));
          } else {
            ctx->set_output(0, value);
            ctx->SetStatus(Arrived(ctx, value));
          }
          done();
        });
  }

 protected:
  virtual absl::Status Arrived(OpKernelContext* ctx, const tensorflow::Tensor& value) = 0;

 private:
  RendezvousKey key_;
};

// An acknowledgement's `_Recv`: returns its credit (its TfschedCredit only checks it).
class TfschedCreditRecvOp : public ActingRecvOp {
 public:
  explicit TfschedCreditRecvOp(OpKernelConstruction* ctx) : ActingRecvOp(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr(kCreditChannel, &channel_));
  }

 protected:
  absl::Status Arrived(OpKernelContext* ctx, const tensorflow::Tensor& ack) override {
    return ReturnCredit(ctx, channel_, ack);
  }

 private:
  std::string channel_;
};

// An acknowledged tensor's `_Recv` on its receiver: sends the acknowledgement (TfschedAck's
// value) to its sender at once (its TfschedAck's `_Send` does nothing).
class TfschedAckRecvOp : public ActingRecvOp {
 public:
  explicit TfschedAckRecvOp(OpKernelConstruction* ctx) : ActingRecvOp(ctx) {
    OP_REQUIRES_OK(ctx, RendezvousKey::FromAttrs(ctx, kAckKeyPrefix, &ack_));
    if (!tensorflow::TryGetNodeAttr(def(), kAckElements, &elements_)) elements_ = 0;
  }

 protected:
  absl::Status Arrived(OpKernelContext* ctx, const tensorflow::Tensor& value) override {
    tensorflow::Tensor ack(tensorflow::DT_INT64, tensorflow::TensorShape({}));
    ack.scalar<int64_t>()() = elements_ > 0 ? elements_ : value.NumElements();
    return SendNow(ctx, ack_, ack);
  }

 private:
  RendezvousKey ack_;
  int64_t elements_ = 0;  // its TfschedAck's `elements` (an acknowledgement group's), if set
};

class TfschedSetCreditOp : public tensorflow::OpKernel {
 public:
  explicit TfschedSetCreditOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const tensorflow::Tensor& credit = ctx->input(0);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(credit.shape()),
                absl::InvalidArgumentError("tfsched: the credit is a scalar"));
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({}), &out));
    out->scalar<int64_t>()() = SetLiveCredit(credit.scalar<int64_t>()());
    GlobalStats().peak_in_flight.store(0);
  }
};

class TfschedSplitOp : public tensorflow::OpKernel {
 public:
  explicit TfschedSplitOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_slices", &num_slices_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("slice_elements", &slice_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("elements", &elements_));
  }
  bool IsExpensive() override { return false; }  // no copy: slices share the input's buffer
  void Compute(OpKernelContext* ctx) override {
    const tensorflow::Tensor& input = ctx->input(0);
    OP_REQUIRES(ctx, input.NumElements() == elements_,
                absl::InvalidArgumentError(absl::StrCat(
                    "tfsched: ", name(), " expected ", elements_, " parameters, got shape ",
                    input.shape().DebugString(), " (the graph changed after it was partitioned)")));
    tensorflow::Tensor flat;
    OP_REQUIRES(ctx, flat.CopyFrom(input, tensorflow::TensorShape({elements_})),
                absl::InternalError("tfsched: cannot view the tensor as flat"));
    for (int64_t i = 0; i < num_slices_; ++i) {
      ctx->set_output(i, flat.Slice(i * slice_, std::min(elements_, (i + 1) * slice_)));
    }
  }

 private:
  int64_t num_slices_ = 0, slice_ = 0, elements_ = 0;
};

class TfschedConcatOp : public tensorflow::OpKernel {
 public:
  explicit TfschedConcatOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    tensorflow::PartialTensorShape shape;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shape", &shape));
    OP_REQUIRES(ctx, shape.AsTensorShape(&shape_),
                absl::InvalidArgumentError("tfsched: TfschedConcat needs a fully known shape"));
    OP_REQUIRES(ctx, tensorflow::DataTypeCanUseMemcpy(ctx->input_type(0)),
                absl::InvalidArgumentError("tfsched: TfschedConcat copies plain data types only"));
  }
  void Compute(OpKernelContext* ctx) override {
    tensorflow::OpInputList slices;
    OP_REQUIRES_OK(ctx, ctx->input_list("slices", &slices));
    int64_t total = 0;
    for (const auto& s : slices) total += s.NumElements();
    OP_REQUIRES(
        ctx, total == shape_.num_elements(),
        absl::InvalidArgumentError(absl::StrCat("tfsched: ", name(), " got ", total,
                                                " parameters for shape ", shape_.DebugString())));
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape_, &out));
    char* dst = const_cast<char*>(out->tensor_data().data());
    for (const auto& s : slices) {
      auto src = s.tensor_data();
      std::memcpy(dst, src.data(), src.size());
      dst += src.size();
    }
  }

 private:
  tensorflow::TensorShape shape_;
};

class TfschedHoldOp : public tensorflow::OpKernel {
 public:
  explicit TfschedHoldOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext*) override {}
};

class TfschedStatsOp : public tensorflow::OpKernel {
 public:
  explicit TfschedStatsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({11}), &out));
    auto v = out->vec<int64_t>();
    Stats& s = GlobalStats();
    v(0) = s.released.load();
    v(1) = s.waited.load();
    v(2) = s.timeouts.load();
    v(3) = s.cancelled.load();
    v(4) = s.live_steps.load();
    v(5) = s.wait_us.load();
    v(6) = s.acked.load();
    v(7) = s.peak_in_flight.load();
    v(8) = LiveCredit();
    v(9) = s.armed_late.load();
    v(10) = s.steps.load();
  }
};

// The build's name, given by tfsched.enforce.build as -DTFSCHED_BUILD_ID="tf<version>-<hash>".
#ifndef TFSCHED_BUILD_ID
#define TFSCHED_BUILD_ID "unknown"
#endif

class TfschedBuildOp : public tensorflow::OpKernel {
 public:
  explicit TfschedBuildOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({}), &out));
    out->scalar<tensorflow::tstring>()() = TFSCHED_BUILD_ID;
  }
};

REGISTER_KERNEL_BUILDER(Name("TfschedGate").Device(tensorflow::DEVICE_CPU), TfschedGateOp);
REGISTER_KERNEL_BUILDER(Name("TfschedBuild").Device(tensorflow::DEVICE_CPU), TfschedBuildOp);
REGISTER_KERNEL_BUILDER(Name("TfschedStats").Device(tensorflow::DEVICE_CPU), TfschedStatsOp);
REGISTER_KERNEL_BUILDER(Name("TfschedAck").Device(tensorflow::DEVICE_CPU), TfschedAckOp);
REGISTER_KERNEL_BUILDER(Name("TfschedCredit").Device(tensorflow::DEVICE_CPU), TfschedCreditOp);
REGISTER_KERNEL_BUILDER(Name("_Send").Device(tensorflow::DEVICE_CPU).Label(kSentLabel),
                        TfschedSentSendOp);
REGISTER_KERNEL_BUILDER(Name("_Recv").Device(tensorflow::DEVICE_CPU).Label(kCreditLabel),
                        TfschedCreditRecvOp);
REGISTER_KERNEL_BUILDER(Name("_Recv").Device(tensorflow::DEVICE_CPU).Label(kAckLabel),
                        TfschedAckRecvOp);
REGISTER_KERNEL_BUILDER(Name("TfschedSetCredit").Device(tensorflow::DEVICE_CPU),
                        TfschedSetCreditOp);
REGISTER_KERNEL_BUILDER(Name("TfschedSplit").Device(tensorflow::DEVICE_CPU), TfschedSplitOp);
REGISTER_KERNEL_BUILDER(Name("TfschedConcat").Device(tensorflow::DEVICE_CPU), TfschedConcatOp);
REGISTER_KERNEL_BUILDER(Name("TfschedHold").Device(tensorflow::DEVICE_CPU), TfschedHoldOp);

}  // namespace
}  // namespace tfsched
