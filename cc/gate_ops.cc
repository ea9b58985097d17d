// TfschedGate: a pass-through that releases its tensor in priority order on its channel.
// TfschedStats: this process's gate counters.

#include <string>
#include <vector>

#include "gate.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/logging.h"

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
    .Attr("timeout_ms: int >= 0 = 60000")
    .SetIsStateful()  // must not be constant-folded, deduplicated or pruned by the optimizers
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape)
    .Doc(R"doc(
Passes `input` through once every transfer of higher priority on `channel` was released in this
step (per-step counters, TicTac §5.1). Inserted by the TfschedScheduler Grappler pass on the
sender's device, in front of a tensor that crosses to another task.

channel: "<sender task>-><receiver task>".
priority: number of gates of this channel that go before this one (ties share a number).
channel_size: number of gates of this channel in the graph.
timeout_ms: longest wait; then the tensor goes anyway and the event is counted (0: no limit).
)doc");

REGISTER_OP("TfschedStats")
    .Output("stats: int64")
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->Vector(6));
      return absl::OkStatus();
    })
    .Doc(R"doc(
This process's gate counters: [released, waited, timeouts, cancelled, live_steps, wait_us].
)doc");

void WarnTimeout(const std::string& channel, int64_t priority, int64_t released) {
  // One warning a minute at most: a slow link would otherwise flood the log.
  static std::atomic<int64_t> last_us{0};
  int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                    Clock::now().time_since_epoch()).count();
  int64_t prev = last_us.load();
  if (now - prev > 60 * 1000000 && last_us.compare_exchange_strong(prev, now)) {
    LOG(WARNING) << "tfsched: a gate on " << channel << " waited past its timeout (priority "
                 << priority << ", " << released << " released before it); releasing it. "
                 << "Timeouts so far: " << GlobalStats().timeouts.load();
  }
}

class TfschedGateOp : public AsyncOpKernel {
 public:
  explicit TfschedGateOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("channel", &channel_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("priority", &priority_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("timeout_ms", &timeout_ms_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    // Zero-copy pass-through: the output shares the input's buffer.
    ctx->set_output(0, ctx->input(0));
    Stats& stats = GlobalStats();
    if (ctx->step_container() == nullptr) {
      // No per-step container (e.g. inside a function runtime): do not order rather than risk a hang.
      stats.released.fetch_add(1);
      done();
      return;
    }
    auto w = std::make_shared<Waiter>();
    OP_REQUIRES_OK_ASYNC(
        ctx,
        ctx->step_container()->LookupOrCreate<StepGates>(
            ctx->resource_manager(), "tfsched_gates", &w->gates,
            [](StepGates** g) {
              *g = new StepGates();
              return absl::OkStatus();
            }),
        done);
    Channel* channel = w->gates->Get(channel_);
    w->channel = channel;
    w->priority = priority_;
    w->since = Clock::now();
    w->deadline = timeout_ms_ > 0 ? w->since + std::chrono::milliseconds(timeout_ms_)
                                  : Clock::time_point::max();
    tensorflow::CancellationManager* cm = ctx->cancellation_manager();
    tensorflow::CancellationToken token = cm ? cm->get_cancellation_token() : 0;
    // `fire` ends this gate's wait, exactly once (guarded by Waiter::fired).
    w->fire = [ctx, done, cm, token, since = w->since](Outcome how) {
      Stats& s = GlobalStats();
      s.released.fetch_add(1);
      s.waited.fetch_add(1);
      s.wait_us.fetch_add(
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - since).count());
      if (how == Outcome::kTimeout) s.timeouts.fetch_add(1);
      if (how == Outcome::kCancelled) {
        s.cancelled.fetch_add(1);
        ctx->SetStatus(absl::CancelledError("tfsched gate: step cancelled"));
      } else if (cm != nullptr) {
        cm->TryDeregisterCallback(token);
      }
      done();
    };
    if (channel->ArriveOrWait(w)) {
      stats.released.fetch_add(1);
      w->fired.store(true);
      done();
      std::vector<std::shared_ptr<Waiter>> ready;
      channel->Complete(&ready);
      FireInTurn(std::move(ready), Outcome::kTurn);
      return;
    }
    std::weak_ptr<Waiter> weak = w;
    // Give up waiting: the step ended (cancel) or the wait took too long (timeout).
    auto withdraw = [weak, channel, name = channel_](Outcome how) {
      auto waiter = weak.lock();  // alive => its StepGates, and so `channel`, are alive
      if (!waiter) return;
      if (channel->Withdraw(waiter)) {
        if (how == Outcome::kTimeout) WarnTimeout(name, waiter->priority, channel->released());
        FireInTurn({waiter}, how);
      }
    };
    if (cm != nullptr &&
        !cm->RegisterCallback(token, [withdraw] { withdraw(Outcome::kCancelled); })) {
      withdraw(Outcome::kCancelled);  // the step was cancelled already
      return;
    }
    if (timeout_ms_ > 0) {
      Watchdog::Get().Watch(w, [withdraw] { withdraw(Outcome::kTimeout); });
    }
  }

 private:
  std::string channel_;
  int64_t priority_ = 0;
  int64_t timeout_ms_ = 0;
};

class TfschedStatsOp : public tensorflow::OpKernel {
 public:
  explicit TfschedStatsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({6}), &out));
    auto v = out->vec<int64_t>();
    Stats& s = GlobalStats();
    v(0) = s.released.load();
    v(1) = s.waited.load();
    v(2) = s.timeouts.load();
    v(3) = s.cancelled.load();
    v(4) = s.live_steps.load();
    v(5) = s.wait_us.load();
  }
};

REGISTER_KERNEL_BUILDER(Name("TfschedGate").Device(tensorflow::DEVICE_CPU), TfschedGateOp);
REGISTER_KERNEL_BUILDER(Name("TfschedStats").Device(tensorflow::DEVICE_CPU), TfschedStatsOp);

}  // namespace
}  // namespace tfsched
