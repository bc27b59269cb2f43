// Signal handlers: async-signal-safe only (an atomic flag, write(2), signal(2), raise(3)).
#include "train/signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace anvil {
namespace {

std::atomic<int> g_signal{0};
struct sigaction g_previous_int;
struct sigaction g_previous_term;

void on_stop_signal(int signal) {
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, signal)) {
    static const char kNote[] =
        "\nanvil: stopping after the current step and writing a checkpoint "
        "(send the signal again to abort at once)\n";
    [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, kNote, sizeof(kNote) - 1);
    return;
  }
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

}  // namespace

StopSignalGuard::StopSignalGuard() {
  g_signal.store(0);
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
}

StopSignalGuard::~StopSignalGuard() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
}

bool StopSignalGuard::stop_requested() { return g_signal.load() != 0; }

int StopSignalGuard::signal_number() { return g_signal.load(); }

}  // namespace anvil
