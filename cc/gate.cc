#include "gate.h"

#include <thread>

namespace tfsched {

using tensorflow::mutex_lock;

bool Channel::ArriveOrWait(const std::shared_ptr<Waiter>& w) {
  mutex_lock l(mu_);
  if (released_ >= w->priority) return true;
  waiting_.emplace(w->priority, w);
  return false;
}

void Channel::Complete(std::vector<std::shared_ptr<Waiter>>* ready) {
  mutex_lock l(mu_);
  ++released_;
  while (!waiting_.empty() && waiting_.begin()->first <= released_) {
    ready->push_back(waiting_.begin()->second);
    waiting_.erase(waiting_.begin());
  }
}

bool Channel::Withdraw(const std::shared_ptr<Waiter>& w) {
  mutex_lock l(mu_);
  auto range = waiting_.equal_range(w->priority);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second == w) {
      waiting_.erase(it);
      return true;
    }
  }
  return false;
}

void FireInTurn(std::vector<std::shared_ptr<Waiter>> ready, Outcome how) {
  while (!ready.empty()) {
    std::shared_ptr<Waiter> w = std::move(ready.back());
    ready.pop_back();
    if (w->fired.exchange(true)) continue;
    if (how == Outcome::kTurn) Watchdog::Get().Unwatch(w);
    w->fire(how);
    // A gate that went without its turn (timeout, cancellation) still counts: the transfers
    // behind it need not wait for it a second time.
    w->channel->Complete(&ready);
    how = Outcome::kTurn;  // whoever comes next goes because it is their turn
  }
}

int64_t Channel::released() const {
  mutex_lock l(mu_);
  return released_;
}

size_t Channel::waiting() const {
  mutex_lock l(mu_);
  return waiting_.size();
}

Waiter::~Waiter() {
  if (gates != nullptr) gates->Unref();
}

StepGates::StepGates() { GlobalStats().live_steps.fetch_add(1); }
StepGates::~StepGates() { GlobalStats().live_steps.fetch_sub(1); }

Channel* StepGates::Get(const std::string& channel) {
  mutex_lock l(mu_);
  auto& slot = channels_[channel];
  if (!slot) slot = std::make_unique<Channel>();
  return slot.get();
}

Stats& GlobalStats() {
  static Stats* stats = new Stats();
  return *stats;
}

Watchdog& Watchdog::Get() {
  static Watchdog* w = new Watchdog();
  return *w;
}

Watchdog::Watchdog() {
  std::thread([this] { Loop(); }).detach();
}

void Watchdog::Watch(const std::shared_ptr<Waiter>& w, std::function<void()> on_timeout) {
  mutex_lock l(mu_);
  queue_.emplace(w->deadline, std::make_pair(std::weak_ptr<Waiter>(w), std::move(on_timeout)));
  cv_.notify_one();
}

void Watchdog::Unwatch(const std::shared_ptr<Waiter>& w) {
  mutex_lock l(mu_);
  auto range = queue_.equal_range(w->deadline);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second.first.lock() == w) {
      queue_.erase(it);
      return;
    }
  }
}

void Watchdog::Loop() {
  while (true) {
    std::vector<std::function<void()>> due;
    {
      mutex_lock l(mu_);
      while (queue_.empty()) cv_.wait(l);
      auto now = Clock::now();
      while (!queue_.empty() && queue_.begin()->first <= now) {
        auto entry = std::move(queue_.begin()->second);
        queue_.erase(queue_.begin());
        auto w = entry.first.lock();
        if (w && !w->fired.load()) due.push_back(std::move(entry.second));
      }
      if (due.empty() && !queue_.empty()) {
        // Sleep until the earliest deadline, or until a new one arrives.
        auto wait_for = std::chrono::duration_cast<std::chrono::milliseconds>(
            queue_.begin()->first - now);
        cv_.wait_for(l, std::max(wait_for, std::chrono::milliseconds(1)));
        continue;
      }
    }
    for (auto& f : due) f();
  }
}

}  // namespace tfsched
