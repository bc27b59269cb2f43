// main() for the multi-process test binaries (test_comm_mpi, test_parallel_mpi), run as
// `mpirun -np N <binary>`. Every rank runs every test (they are collective); rank 0 prints GoogleTest's usual report and the other
// ranks print only their failures, prefixed with their rank. The exit status is non-zero on
// every rank if any rank failed, so mpirun reports the failure whichever rank saw it.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "comm/communicator.h"

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  // Remembers the test's name here: GoogleTest holds its lock while reporting a failure, so
  // asking it for the current test from OnTestPartResult would deadlock.
  void OnTestStart(const testing::TestInfo& test) override {
    test_name_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s %s:%d: %s\n", rank_, test_name_.c_str(),
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
  std::string test_name_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  anvil::Communicator& world = anvil::world();
  if (world.size() < 2) {
    std::fprintf(stderr, "%s: run under mpirun with 2 or more ranks\n", argv[0]);
    return 1;
  }
  testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
  if (world.rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(world.rank()));
  }
  const int32_t failed_here = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int32_t failed_anywhere = failed_here;
  world.all_reduce(anvil::Tensor(&failed_anywhere, anvil::DType::i32, anvil::Shape{1}),
                   anvil::ReduceOp::max);
  if (world.rank() == 0 && failed_anywhere && !failed_here)
    std::fprintf(stderr, "%s: tests failed on other ranks (see the [rank N] lines)\n", argv[0]);
  return failed_anywhere;
}
