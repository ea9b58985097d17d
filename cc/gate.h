// Per-step, per-channel release state for TfschedGate.
//
// Two disciplines, per gate:
// - ordered (TicTac §5.1): a gate with priority p may release its tensor once p gates of its
//   channel were released in the same step (per-step counters);
// - queue (ByteScheduler §4.2): the highest-priority gate that has arrived goes first.
// Both are subject to the channel's credit (ByteScheduler's credit-based preemption): at most
// `credit` parameters released and not yet acknowledged by the receiver (TfschedAck on the
// receiving task -> TfschedCredit on this one), or, with credit_return "sent", not yet sent by
// this task's transport (ReturnSoon, when gRPC lets go of the tensor); a tensor larger than the
// credit still goes when nothing else is in flight, so a small credit never deadlocks.
// With `host` set, a channel's credit is not its own: every channel of the sending task shares one
// window (HostLink), and the steps of all workers are served in the order they reached this task
// or, with `host_order` "priority", all at once in lockstep, priority by priority.
// Waiting gates are callbacks, not blocked threads. Every wait ends: by its turn, by the timeout
// (fail open: the tensor goes, the event is counted), or by the step's cancellation. The state of
// a step lives in the step's container and is freed with it; where every step runs in one shared
// container (TensorFlow 2's functions), it is kept by step id (KeyedStep) and freed once the
// gates of every channel leaving the task have all gone and their credit came back, or when the
// call ends, fails or is cancelled (its cancellation manager fires).
#ifndef TFSCHED_CC_GATE_H_
#define TFSCHED_CC_GATE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "tensorflow/core/framework/cancellation.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/platform/mutex.h"

namespace tfsched {

using Clock = std::chrono::steady_clock;

// A gate's longest timeout, 10^12 ms (about 31.7 years): a deadline is the clock's now plus it in
// the clock's nanoseconds, which overflow an int64 past about 9.2 * 10^12 ms. Before the
// hundred-and-sixth session a timeout of sys.maxsize ms ("no limit", meant as 0) wrapped round
// to a deadline in the past, and every gate that waited let its tensor go at once, unordered.
constexpr int64_t kMaxTimeoutMs = 1000000000000;

// How a wait ended.
enum class Outcome { kTurn, kTimeout, kCancelled };

class StepGates;

class Channel;
class HostLink;

struct Waiter {
  ~Waiter();
  int64_t priority = 0;
  int64_t size = 0;     // parameters (elements) of the tensor: what it takes of the credit
  bool ordered = true;  // per-step counter (true) or priority queue (false)
  int64_t credit = 0;   // the pass's credit for this gate's channel (0: no acks, no credit)
  // Keeps the step's state (and so the channel) alive for as long as the waiter can be reached.
  StepGates* gates = nullptr;
  Channel* channel = nullptr;
  // The sending task's shared window (null: the channel's own credit, or a gate without
  // acknowledgements). `host_granted` is set under the host's lock once the window took it.
  HostLink* host = nullptr;
  bool host_granted = false;
  // Its place in the window's queue: (step sequence, priority), the oldest step first; or, with
  // host_order "priority", (priority, step sequence), every step's next tensor in turn.
  std::pair<int64_t, int64_t> host_key{0, 0};
  Clock::time_point since;
  Clock::time_point deadline;
  // Called exactly once, outside any lock.
  std::function<void(Outcome)> fire;
  std::atomic<bool> fired{false};
  // Set (to its Outcome + 1) when its wait was given up (cancellation, timeout), before the
  // channel's and the window's locks are taken to withdraw it. Neither holds a waiter on its way
  // from its channel to its window (FireInTurn, NextInTurn): the window lets such a one go at once
  // (HostLink::ArriveOrWait), and it is fired as its wait ended. Until the fifty-seventh session it
  // parked there, its cancellation spent, until credit came back or its timeout.
  std::atomic<int> abandoned{0};

  // Arming: once parked, a waiter is visible to other threads, but its ComputeAsync still has
  // to register its cancellation callback and timeout. It must not be fired (done() called)
  // before that ends: done() can end the step and free the step's CancellationManager under the
  // registration. A firer that finds it arming leaves the firing to ComputeAsync (Defer), which
  // does it once armed (Armed). Only FireInTurn fires, and it checks first.
  enum : int { kArming = 0, kArmed = 1, kDeferred = 2 };
  std::atomic<int> arm{kArmed};  // a waiter that was never parked needs no arming
  Outcome deferred = Outcome::kTurn;
  // The firer's side: true if it may fire now; false if ComputeAsync will (with `how`).
  bool FireNowOrDefer(Outcome how);
  // ComputeAsync's side, once armed: true if a firer deferred to it (`deferred` says how).
  bool ArmedAfterDeferral();
};

// A gate counts as released only once its done() has been called: the next gate's turn comes
// after that, so the order in which tensors are handed on is the priority order, not just the
// order of the counter updates.
class Channel {
 public:
  ~Channel();
  // True if `w` may go now (its credit is taken; it is counted as released only by Complete,
  // after done()); otherwise parks `w` and returns false. `others` receives parked waiters that
  // may go as well (after a live credit change).
  bool ArriveOrWait(const std::shared_ptr<Waiter>& w, std::vector<std::shared_ptr<Waiter>>* others);
  // Counts one released gate; `ready` receives the parked waiters whose turn has come. Until its
  // HandedOn, a gate that arrives waits even if its turn has come (see handing_).
  void Complete(std::vector<std::shared_ptr<Waiter>>* ready);
  // The gate Complete counted has handed its tensor on (its done() was called); `ready` receives
  // the waiters that arrived meanwhile and whose turn has come.
  void HandedOn(std::vector<std::shared_ptr<Waiter>>* ready);
  // The receiver has `size` parameters: gives them back to the credit; `ready` as above.
  void Return(int64_t size, std::vector<std::shared_ptr<Waiter>>* ready);
  // Removes a parked waiter (timeout or cancellation); false if another path took it already.
  // A withdrawn waiter's tensor goes anyway, so it takes its credit.
  bool Withdraw(const std::shared_ptr<Waiter>& w);
  int64_t released() const;
  // The shared window its credit goes to (null: its own credit, or none).
  HostLink* host() const;
  size_t waiting() const;
  int64_t in_flight() const;

 private:
  // Moves to `ready` every parked waiter that may go now, in priority order.
  void Pump(std::vector<std::shared_ptr<Waiter>>* ready);
  void Take(int64_t size);

  mutable tensorflow::mutex mu_;
  HostLink* host_ = nullptr;  // set by the first gate with a shared window; acks go there
  int64_t released_ = 0;
  // Gates counted as released (Complete) that are still handing their tensors on: a gate counts
  // before it sends (NextInTurn), and a gate arriving then must not go ahead of its send.
  int64_t handing_ = 0;
  int64_t in_flight_ = 0;  // parameters released and not yet acknowledged
  std::multimap<int64_t, std::shared_ptr<Waiter>> waiting_;
};

// One credit window for every channel of a sending task, across steps (an improvement over
// ByteScheduler, whose credit is per tensor queue): a waiter comes here once its channel gave it
// its turn, and the window takes the oldest step's highest-priority tensor first. So when several
// workers' steps pull from one PS at once, the PS serves one worker's step after the other instead
// of splitting its link between all of them: the first worker computes (and pushes, on the PS's
// other direction) while the next one pulls. Work-conserving: a step whose next tensor has not
// arrived does not hold the window. With host_order "priority" (a waiter's host_key), the window
// takes the highest priority of all the steps instead: each step's next tensor in turn, so that the
// workers' pulls end together (in lockstep), without the overlap that serving the steps one
// after the other buys (measured on VGG16 training: no gain, and a stagger not reliably lower).
class HostLink {
 public:
  // The window of sending task `sender` (process-wide, never freed).
  static HostLink* For(const std::string& sender);
  // True if `w` may go now (its size is taken from the window); otherwise parks it.
  bool ArriveOrWait(const std::shared_ptr<Waiter>& w);
  // `size` parameters sent on `c` were acknowledged.
  void Return(const Channel* c, int64_t size, std::vector<std::shared_ptr<Waiter>>* ready);
  // `c`'s step ended: what it still held comes back (a step that failed never leaks credit).
  void Forget(const Channel* c, std::vector<std::shared_ptr<Waiter>>* ready);
  // Removes a parked waiter (timeout, cancellation); false if it was not parked here.
  bool Withdraw(const std::shared_ptr<Waiter>& w);
  // A tensor that goes without the window's consent (its wait ended) still holds its size.
  void Charge(const std::shared_ptr<Waiter>& w);
  // Parameters of `c` the window took and that were not acknowledged yet.
  int64_t Held(const Channel* c);

 private:
  void Pump(std::vector<std::shared_ptr<Waiter>>* ready);
  // Takes `w`'s size from the window, for `w`'s channel, and marks `w` granted.
  void Grant(Waiter* w);

  tensorflow::mutex mu_;
  int64_t in_flight_ = 0;
  std::unordered_map<const Channel*, int64_t> held_;
  // Waiter::host_key -> parked waiter.
  std::multimap<std::pair<int64_t, int64_t>, std::shared_ptr<Waiter>> waiting_;
};

// The credit in force for a gate whose pass-given credit is `configured`: 0 (no acks on this
// channel) stays 0; otherwise the live setting (TfschedSetCredit) if any, else `configured`.
int64_t EffectiveCredit(int64_t configured);
// Sets the live credit (parameters, >= 1; -1 returns to the pass's setting); returns the old one.
int64_t SetLiveCredit(int64_t credit);
int64_t LiveCredit();

// The gates of one step on one device: lives in the step container.
class StepGates : public tensorflow::ResourceBase {
 public:
  // In the step's container (the default), or kept by KeyedStep for step `step_id`.
  StepGates();
  // `seq`: its place in seq()'s order, drawn by KeyedStep before it makes the state.
  StepGates(int64_t step_id, int64_t seq);
  ~StepGates() override;
  std::string DebugString() const override { return "tfsched step gates"; }
  // `gates`: how many gates the channel has in the graph (0: not known here, as for an ack);
  // `channels`: how many gated channels leave this task in the graph (0: not known).
  Channel* Get(const std::string& channel, int64_t gates = 0, int64_t channels = 0);
  // Order in which steps reached this process (HostLink serves the oldest first).
  int64_t seq() const { return seq_; }
  bool keyed() const { return keyed_; }
  int64_t step_id() const { return step_id_; }
  // Every channel leaving this task was seen, has released all of its gates and holds no
  // unacknowledged credit.
  bool Finished() const;

 private:
  const int64_t seq_;
  const bool keyed_;
  const int64_t step_id_;
  mutable tensorflow::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<Channel>> channels_;
  std::unordered_map<const Channel*, int64_t> gates_;  // per channel, as the pass counted them
  int64_t channels_leaving_ = 0;                       // as the pass counted them
};

// The state of step `step_id` for kernels whose step container every step shares (TensorFlow 2's
// eager functions: KernelAndDeviceFunc runs each call in the context's container or its own, so
// the container would carry one step's counters into the next). In `gates`, a reference for the
// caller, or null if the step has none and `create` is false. Cancelled, with no state made, if the
// call was cancelled already (a gate the executor ran after its call failed: a state made then
// would be one no gate of the call could ever share). `cm`, the call's cancellation manager,
// forgets a state made here when it fires: when the call fails or is cancelled, and when the call
// ends (~CancellationManager runs the callbacks still registered), once every gate of the call in
// this process has run, as a session's step container is cleaned up.
absl::Status KeyedStep(int64_t step_id, bool create, tensorflow::CancellationManager* cm,
                       StepGates** gates);
// Drops KeyedStep's reference to `gates` once its step has finished (no-op for other states).
void ForgetIfFinished(StepGates* gates);

// What the POST_PARTITIONING pass (transfers.cc) marks, for the kernels of gate_ops.cc. A gate
// that sends its tensor itself carries its `_Send`'s key attrs under kSendKeyPrefix, and that
// `_Send` runs the kernel labelled kSentLabel (nothing). An acknowledgement's `_Recv` labelled
// kCreditLabel returns the credit of the channel in kCreditChannel, and its TfschedCredit,
// marked kReturnedByRecv, does not.
inline constexpr char kSendKeyPrefix[] = "_tfsched_send_";
inline constexpr char kSentLabel[] = "tfsched_sent";
inline constexpr char kCreditLabel[] = "tfsched_credit";
inline constexpr char kCreditChannel[] = "_tfsched_channel";
// A received tensor's `_Recv` labelled kAckLabel sends its acknowledgement itself, to the key of
// its TfschedAck's `_Send` (under kAckKeyPrefix), which then runs kSentLabel's kernel.
inline constexpr char kAckLabel[] = "tfsched_ack";
inline constexpr char kAckKeyPrefix[] = "_tfsched_ack_";
// Its TfschedAck's `elements`, where set (the parameters of its acknowledgement group).
inline constexpr char kAckElements[] = "_tfsched_ack_elements";
inline constexpr char kReturnedByRecv[] = "_tfsched_returned_by_recv";
// Set by the Grappler pass on gates, acks and credits it leaves to TensorFlow's `_Send`/`_Recv`
// (``enable(inline_transfers=False)``).
inline constexpr char kNotInline[] = "_tfsched_not_inline";

// Process-wide counters, read by the TfschedStats op.
struct Stats {
  std::atomic<int64_t> released{0};        // gates passed
  std::atomic<int64_t> waited{0};          // of which had to wait for their turn
  std::atomic<int64_t> timeouts{0};        // released by the timeout
  std::atomic<int64_t> cancelled{0};       // released because the step was cancelled
  std::atomic<int64_t> live_steps{0};      // StepGates alive now (per-step state not yet freed)
  std::atomic<int64_t> wait_us{0};         // total time spent waiting
  std::atomic<int64_t> acked{0};           // credit returns (acknowledged or sent transfers)
  std::atomic<int64_t> peak_in_flight{0};  // most in flight on one channel or window (resettable)
  std::atomic<int64_t> armed_late{0};      // gates whose turn came while they armed (FireDeferred)
  std::atomic<int64_t> steps{0};           // per-step states made (one per step and task)
};
Stats& GlobalStats();

// Gives `size` parameters back to `channel`'s credit on a background thread, then unrefs `gates`
// (which the caller ref'd, so that the channel outlives the call). For a credit that comes back
// when the sender's transport is done with a tensor (SentBuffer in gate_ops.cc): the last
// reference to it can go inside gRPC's callbacks, where releasing other gates (and so starting
// their transfers) on the same thread is not safe.
void ReturnSoon(StepGates* gates, Channel* channel, int64_t size);

// Counts `w` as gone on its channel and brings the gates whose turn that makes to their shared
// window, if they have one; returns those that may go (the window parks the others). Called
// before `w` fires: a gate that sends its tensor itself (transfers.cc) can have its credit back on
// another thread at once, and the window must find the channel's next there, not serve another
// step's gate in the meantime.
std::vector<std::shared_ptr<Waiter>> NextInTurn(Waiter* w);
// Once `w` (counted by NextInTurn) has fired: the gates of its channel that arrived while it was
// handing its tensor on and whose turn has come, brought to their shared window as NextInTurn does.
std::vector<std::shared_ptr<Waiter>> HandedOn(Waiter* w);
// Fault injection for the tests: the microseconds the environment variable `variable` says (0 if
// unset or negative). Each delay reads it once into a static: the gates ask on every release.
int64_t TestDelayUs(const char* variable);
// Fires `ready` in its order (each at most once, guarded by Waiter::fired), each after whoever's
// turn that makes has reached its window (NextInTurn), then fires those after the rest;
// iterative, so long chains use no stack.
void FireInTurn(std::vector<std::shared_ptr<Waiter>> ready, Outcome how);
// Fires `w`, whose firer deferred to its ComputeAsync, then whoever's turn that makes.
void FireDeferred(const std::shared_ptr<Waiter>& w);

// One background thread fires waiters whose deadline passed.
class Watchdog {
 public:
  static Watchdog& Get();
  void Watch(const std::shared_ptr<Waiter>& w, std::function<void()> on_timeout);
  // Forgets a waiter released before its deadline (keeps the queue as small as what waits).
  void Unwatch(const std::shared_ptr<Waiter>& w);

 private:
  Watchdog();
  void Loop();
  tensorflow::mutex mu_;
  tensorflow::condition_variable cv_;
  std::multimap<Clock::time_point, std::pair<std::weak_ptr<Waiter>, std::function<void()>>> queue_;
};

}  // namespace tfsched

#endif  // TFSCHED_CC_GATE_H_
