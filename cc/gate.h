// Per-step, per-channel release counters for TfschedGate (TicTac §5.1).
//
// A gate with priority p on channel c may release its tensor once p gates of c were released in
// the same step. Waiting gates are callbacks, not blocked threads. Every wait ends: by its turn,
// by the timeout (fail open: the tensor goes, the event is counted), or by the step's
// cancellation. The state of a step lives in the step's container and is freed with it.
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

#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/platform/mutex.h"

namespace tfsched {

using Clock = std::chrono::steady_clock;

// How a wait ended.
enum class Outcome { kTurn, kTimeout, kCancelled };

class StepGates;

struct Waiter {
  ~Waiter();
  int64_t priority = 0;
  // Keeps the step's state (and so the channel) alive for as long as the waiter can be reached.
  StepGates* gates = nullptr;
  Clock::time_point since;
  Clock::time_point deadline;
  // Called exactly once, outside any lock.
  std::function<void(Outcome)> fire;
  std::atomic<bool> fired{false};
};

class Channel {
 public:
  // Either releases now (returns true, counter advanced) or parks `w` (returns false).
  // `ready` receives waiters whose turn came because of this release.
  bool ArriveOrWait(const std::shared_ptr<Waiter>& w, std::vector<std::shared_ptr<Waiter>>* ready);
  // Removes a parked waiter (timeout or cancellation) and counts it as released.
  // Returns false if it was already taken by another path.
  bool Withdraw(const std::shared_ptr<Waiter>& w, std::vector<std::shared_ptr<Waiter>>* ready);
  int64_t released() const;
  size_t waiting() const;

 private:
  void ReleaseReadyLocked(std::vector<std::shared_ptr<Waiter>>* ready);

  mutable tensorflow::mutex mu_;
  int64_t released_ = 0;
  std::multimap<int64_t, std::shared_ptr<Waiter>> waiting_;
};

// The gates of one step on one device: lives in the step container.
class StepGates : public tensorflow::ResourceBase {
 public:
  StepGates();
  ~StepGates() override;
  std::string DebugString() const override { return "tfsched step gates"; }
  Channel* Get(const std::string& channel);

 private:
  tensorflow::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<Channel>> channels_;
};

// Process-wide counters, read by the TfschedStats op.
struct Stats {
  std::atomic<int64_t> released{0};   // gates passed
  std::atomic<int64_t> waited{0};     // of which had to wait for their turn
  std::atomic<int64_t> timeouts{0};   // released by the timeout
  std::atomic<int64_t> cancelled{0};  // released because the step was cancelled
  std::atomic<int64_t> live_steps{0};  // StepGates alive now (per-step state not yet freed)
  std::atomic<int64_t> wait_us{0};    // total time spent waiting
};
Stats& GlobalStats();

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
