// The gates of a step across TensorFlow's barrier (tfsched.enforce.crossing): one count per
// variable and side on the variable's PS, in the device's resource manager (it outlives a
// session, as a shared queue does). A count keeps each worker's arrivals apart.
//
// - TfschedCrossArrive adds one to its worker's arrivals: the worker's read of the variable in
//   this step (what its updates wait on), or its update of it (what its reads wait on).
// - TfschedCrossWait passes its inputs through once every worker of the `workers` has arrived the
//   waits of its worker that went before it since the reset, plus `offset`, times: a read of step
//   t waits for every worker's t updates of the steps before it, an update of step t for every
//   worker's t + 1 reads of the steps up to it. A worker's waits on one count go one at a time and
//   in its steps' order (the crossing's turn queue for the reads, its one apply thread for the
//   updates), so the waits gone before a wait are its step. No wait can pass early: no update of
//   step t lands before every worker's read of step t, and no read of step t + 1 before every
//   worker's update of step t.
// - TfschedCrossRetire takes a worker whose input ended out of what the waits wait for: it has
//   applied every step it took (CrossingRunner retires it once they are in), and the other
//   workers' steps after it wait for one another only, as each worker's own steps go on behind the
//   barrier once another's input has ended.
// - TfschedCrossReset (the crossing's prime) sets its worker's arrivals and waits to none and
//   takes it back in, and ends a wait of that worker still parked from a run before (Aborted).
//   It also moves the worker into its next generation (an epoch: each prime is one). A wait goes
//   only once every worker is in its worker's generation, so a worker primed for the next epoch
//   waits at its first reads for the others to be primed too, with no barrier of the caller's;
//   and a worker that left the wait's generation retired (its input ended, then its prime) is
//   waited for no longer there, so the others finish their epoch without it. One that left it
//   without retiring (a failed run, then a new session's prime) is still waited for, until the
//   waits' deadline: every worker primes again after a failure. Until the hundred-and-third
//   session a worker primed before the others had ended their epoch stepped on with them in
//   lockstep no longer (its counts none, theirs at their last step), and the caller had to hold
//   every prime until every worker's input had ended.
// - A TfschedCrossWait with `join` (CrossingRunner.join) waits for that alone: every worker in
//   its worker's generation, or gone from it retired. It is not one of its worker's waits (those
//   count its steps), and it runs in a run of its own, with a deadline of its own: a worker whose
//   epoch ends long before the others' waits there, not in its first step's run, whose deadline
//   is a step's.
//
// An improvement on the queues it replaces (until the eighty-fourth session): a token queue per
// (variable, reader), each update putting a token in every reader's queue and each read taking one
// per worker, W^2 queue ops a variable a step on its PS (4W+3 a worker's step, W = 4: 19; counted
// by benchmarks/crossing_ops.py); here 4 a worker's step, whatever W. Until the hundred-and-second
// session a count was one sum over the workers (a wait's target W t), which cannot tell which
// worker's arrivals are missing: every worker had to meet its input's end at the same step, or
// the others' next reads waited for its updates until their deadline.
//
// A wait holds no thread (an asynchronous kernel). It ends by its count, by its step's
// cancellation (the run's deadline, RunOptions.timeout_in_ms, or its session closed: the master
// cancels the step), or by the reset: as a queue's dequeue does, never by a timeout of its own,
// which would let a read see a variable before its update (training no longer vanilla's).

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/cancellation.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/mutex.h"

namespace tfsched {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::CancellationManager;
using tensorflow::CancellationToken;
using tensorflow::mutex;
using tensorflow::mutex_lock;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;

REGISTER_OP("TfschedCrossArrive")
    .Attr("count: string")
    .Attr("worker: int >= 0")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Adds one to `worker`'s arrivals on the count `count` on this device (a read or an update across
the barrier).
)doc");

REGISTER_OP("TfschedCrossWait")
    .Input("inputs: T")
    .Output("outputs: T")
    .Output("reached: int64")
    .Attr("T: list(type) >= 0")
    .Attr("count: string")
    .Attr("worker: int >= 0")
    .Attr("workers: int >= 1")
    .Attr("offset: int >= 0")
    .Attr("join: bool = false")
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      c->set_output(c->num_inputs(), c->Scalar());
      return absl::OkStatus();
    })
    .Doc(R"doc(
Passes `inputs` through once every worker of `workers` (but those retired) has arrived on the
count `count` on this device the waits of `worker` on it since its reset + offset times, each in
`worker`'s generation (its resets), or has left that generation retired; `reached` is that
number. A `join` waits for every worker to be in `worker`'s generation (or to have left it
retired) only: its target is none, and it is not one of `worker`'s waits.
)doc");

REGISTER_OP("TfschedCrossRetire")
    .Attr("count: string")
    .Attr("worker: int >= 0")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Takes `worker` out of what the waits on the count `count` on this device wait for (its input
ended, its steps applied) until its next reset; the waits it held go.
)doc");

REGISTER_OP("TfschedCrossReset")
    .Attr("count: string")
    .Attr("worker: int >= 0")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Moves `worker` into its next generation on the count `count` on this device, its arrivals and
waits none, and takes it back in if it was retired; a wait of `worker` still parked on it ends
(Aborted), and the other workers' waits its new generation meets go.
)doc");

struct Wait {
  int64_t worker = 0;
  int64_t workers = 1;
  int64_t target = 0;  // each worker's arrivals it waits for
  bool join = false;   // waits for the generation only, and is not counted in its worker's waits
  OpKernelContext* ctx = nullptr;
  AsyncOpKernel::DoneCallback done;
  CancellationManager* cm = nullptr;
  CancellationToken token = 0;
  bool parked = false;     // under the count's lock
  bool cancelled = false;  // its step's cancellation came before it was parked
};

class Count : public tensorflow::ResourceBase {
 public:
  std::string DebugString() const override { return "tfsched crossing count"; }

  // Parks `w` unless its target is met (returns true: it goes) or its step was cancelled
  // meanwhile (returns false, with *cancelled set). Sets its target.
  bool ArriveOrPark(const std::shared_ptr<Wait>& w, int64_t offset, bool* cancelled,
                    tensorflow::Status* status) {
    mutex_lock l(mu_);
    *cancelled = w->cancelled;
    if (w->cancelled) return false;
    for (const auto& other : parked_) {
      if (other->worker == w->worker) {
        *status = absl::FailedPreconditionError(absl::StrCat(
            "tfsched crossing: two waits of worker ", w->worker,
            " at once on one count (a second compute or apply run of that worker past its turn)"));
        return true;
      }
    }
    w->target = w->join ? 0 : waits_[w->worker] + offset;
    if (Met(*w)) {
      if (!w->join) ++waits_[w->worker];
      return true;
    }
    w->parked = true;
    parked_.push_back(w);
    return false;
  }

  // One more of `worker`'s; the waits it meets go.
  std::vector<std::shared_ptr<Wait>> Add(int64_t worker) {
    mutex_lock l(mu_);
    ++arrived_[worker];
    return Release();
  }

  // `worker` out of what the waits wait for; the waits that met everything else go.
  std::vector<std::shared_ptr<Wait>> Retire(int64_t worker) {
    mutex_lock l(mu_);
    retired_.insert(worker);
    return Release();
  }

  // The step's cancellation: true if `w` was parked (the caller ends it); before it was parked,
  // marks it so that it is not.
  bool Cancel(const std::shared_ptr<Wait>& w) {
    mutex_lock l(mu_);
    if (!w->parked) {
      w->cancelled = true;
      return false;
    }
    w->parked = false;
    parked_.remove(w);
    return true;
  }

  // `worker` into its next generation, arrivals and waits none; its waits still parked are
  // stale (*stale), and the other workers' waits that its new generation meets go (returned).
  std::vector<std::shared_ptr<Wait>> Reset(int64_t worker,
                                           std::vector<std::shared_ptr<Wait>>* stale) {
    mutex_lock l(mu_);
    if (retired_.erase(worker) > 0) done_[worker].insert(gen_[worker]);
    ++gen_[worker];
    arrived_[worker] = 0;
    waits_[worker] = 0;
    for (auto it = parked_.begin(); it != parked_.end();) {
      if ((*it)->worker == worker) {
        (*it)->parked = false;
        stale->push_back(*it);
        it = parked_.erase(it);
      } else {
        ++it;
      }
    }
    return Release();
  }

 private:
  // Every worker of w's, in w's worker's generation, has arrived w's target times or is retired;
  // a worker in a generation after it has left that one retired; none is in a generation before.
  bool Met(const Wait& w) {  // under mu_
    const int64_t gen = Of(gen_, w.worker);
    for (int64_t u = 0; u < w.workers; ++u) {
      const int64_t at = Of(gen_, u);
      if (at < gen) return false;  // not primed for this generation yet
      if (at > gen) {              // gone on to the next epoch: only once its input ended here
        auto done = done_.find(u);
        if (done == done_.end() || done->second.count(gen) == 0) return false;
      } else if (retired_.count(u) == 0 && Of(arrived_, u) < w.target) {
        return false;
      }
    }
    return true;
  }

  static int64_t Of(const std::map<int64_t, int64_t>& m, int64_t worker) {
    auto it = m.find(worker);
    return it == m.end() ? 0 : it->second;
  }

  // The parked waits now met, out of the parked ones.
  std::vector<std::shared_ptr<Wait>> Release() {  // under mu_
    std::vector<std::shared_ptr<Wait>> ready;
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (Met(**it)) {
        (*it)->parked = false;
        if (!(*it)->join) ++waits_[(*it)->worker];
        ready.push_back(*it);
        it = parked_.erase(it);
      } else {
        ++it;
      }
    }
    return ready;
  }

  mutex mu_;
  std::map<int64_t, int64_t> arrived_;  // worker -> its arrivals since its reset
  std::map<int64_t, int64_t> waits_;    // worker -> its waits that went since its reset
  std::map<int64_t, int64_t> gen_;      // worker -> its resets (its generation; 0: none yet)
  std::set<int64_t> retired_;           // the workers whose input ended, until their reset
  // worker -> the generations it left retired (its input ended, then its reset: the next epoch)
  std::map<int64_t, std::set<int64_t>> done_;
  std::list<std::shared_ptr<Wait>> parked_;
};

absl::Status CountOf(OpKernelContext* ctx, const std::string& name, Count** count) {
  return ctx->resource_manager()->LookupOrCreate<Count>(
      ctx->resource_manager()->default_container(), name, count, [](Count** made) {
        *made = new Count();
        return absl::OkStatus();
      });
}

// The count a kernel names, looked up once and kept (a reference) for the kernel's life, as
// TensorFlow's queue kernels keep their queue: not a lookup by name in the resource manager, under
// its lock, every time a gate runs (4 a variable a worker's step).
class CountOfKernel {
 public:
  explicit CountOfKernel(OpKernelConstruction* ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("count", &name_));
  }
  ~CountOfKernel() {
    if (Count* count = count_.load()) count->Unref();
  }
  absl::Status Get(OpKernelContext* ctx, Count** out) {
    Count* count = count_.load(std::memory_order_acquire);
    if (count == nullptr) {
      TF_RETURN_IF_ERROR(CountOf(ctx, name_, &count));  // a reference: the kernel's
      Count* first = nullptr;
      if (!count_.compare_exchange_strong(first, count)) {  // another thread's came first
        count->Unref();
        count = first;
      }
    }
    *out = count;
    return absl::OkStatus();
  }

 private:
  std::string name_;
  std::atomic<Count*> count_{nullptr};
};

// Ends a wait that left its count: its cancellation callback first (it may be running on another
// thread: DeregisterCallback waits for it, and it finds the wait gone from its count), then done.
void End(const std::shared_ptr<Wait>& w, const absl::Status& status) {
  if (w->cm != nullptr) w->cm->DeregisterCallback(w->token);
  if (!status.ok()) w->ctx->SetStatus(status);
  w->done();
}

// Arrive and retire: one of a worker's on a count, whose waits that it meets go.
template <bool kRetire>
class CrossWorkerOp : public OpKernel {
 public:
  explicit CrossWorkerOp(OpKernelConstruction* ctx) : OpKernel(ctx), count_(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("worker", &worker_));
  }

  void Compute(OpKernelContext* ctx) override {
    Count* count = nullptr;
    OP_REQUIRES_OK(ctx, count_.Get(ctx, &count));
    for (const auto& w : kRetire ? count->Retire(worker_) : count->Add(worker_)) {
      End(w, absl::OkStatus());
    }
  }

 private:
  CountOfKernel count_;
  int64_t worker_ = 0;
};

class CrossResetOp : public OpKernel {
 public:
  explicit CrossResetOp(OpKernelConstruction* ctx) : OpKernel(ctx), count_(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("worker", &worker_));
  }

  void Compute(OpKernelContext* ctx) override {
    Count* count = nullptr;
    OP_REQUIRES_OK(ctx, count_.Get(ctx, &count));
    std::vector<std::shared_ptr<Wait>> stale;
    for (const auto& w : count->Reset(worker_, &stale)) End(w, absl::OkStatus());
    for (const auto& w : stale) {
      End(w, absl::AbortedError("tfsched crossing: the count was reset (primed) under this wait"));
    }
  }

 private:
  CountOfKernel count_;
  int64_t worker_ = 0;
};

class CrossWaitOp : public AsyncOpKernel {
 public:
  explicit CrossWaitOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx), count_(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("worker", &worker_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("workers", &workers_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("offset", &offset_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("join", &join_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    Count* count = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, count_.Get(ctx, &count), done);
    count->Ref();  // the wait's own: a reset of another session's graph may end it
    const int n = ctx->num_inputs();
    for (int i = 0; i < n; ++i) ctx->set_output(i, ctx->input(i));  // zero copy
    auto w = std::make_shared<Wait>();
    w->worker = worker_;
    w->workers = workers_;
    w->join = join_;
    w->ctx = ctx;
    // The reference taken above goes with the wait.
    w->done = [count, done, ctx, w_target = &w->target, n] {
      tensorflow::Tensor* reached = nullptr;
      if (ctx->status().ok() &&
          ctx->allocate_output(n, tensorflow::TensorShape({}), &reached).ok()) {
        reached->scalar<int64_t>()() = *w_target;
      }
      count->Unref();
      done();
    };
    w->cm = ctx->cancellation_manager();
    if (w->cm == nullptr) {  // nothing could end a wait that parked (a session's step has one)
      ctx->SetStatus(absl::FailedPreconditionError(
          "tfsched crossing: this step cannot be cancelled, so its wait could not end; run it in a "
          "session's step"));
      w->done();
      return;
    }
    {
      // The callback before the wait is parked: once parked, an arrival on another thread may
      // end it, and its done() may end the step and free the manager under a registration.
      w->token = w->cm->get_cancellation_token();
      std::weak_ptr<Wait> weak = w;
      const bool registered = w->cm->RegisterCallback(w->token, [count, weak] {
        auto wait = weak.lock();
        if (wait && count->Cancel(wait)) {  // parked: nobody else ends it now
          wait->ctx->SetStatus(absl::CancelledError("tfsched crossing: step cancelled"));
          wait->done();  // its callback is the one running: nothing to deregister
        }
      });
      if (!registered) {  // the step was cancelled already
        w->cm = nullptr;
        ctx->SetStatus(absl::CancelledError("tfsched crossing: step cancelled"));
        w->done();
        return;
      }
    }
    bool cancelled = false;
    absl::Status status;
    if (count->ArriveOrPark(w, offset_, &cancelled, &status)) {
      End(w, status);
    } else if (cancelled) {
      End(w, absl::CancelledError("tfsched crossing: step cancelled"));
    }
    // else parked: an arrival, the cancellation or a reset ends it
  }

 private:
  CountOfKernel count_;
  int64_t worker_ = 0;
  int64_t workers_ = 1;
  int64_t offset_ = 0;
  bool join_ = false;
};

REGISTER_KERNEL_BUILDER(Name("TfschedCrossArrive").Device(tensorflow::DEVICE_CPU),
                        CrossWorkerOp<false>);
REGISTER_KERNEL_BUILDER(Name("TfschedCrossRetire").Device(tensorflow::DEVICE_CPU),
                        CrossWorkerOp<true>);
REGISTER_KERNEL_BUILDER(Name("TfschedCrossWait").Device(tensorflow::DEVICE_CPU), CrossWaitOp);
REGISTER_KERNEL_BUILDER(Name("TfschedCrossReset").Device(tensorflow::DEVICE_CPU), CrossResetOp);

}  // namespace
}  // namespace tfsched
