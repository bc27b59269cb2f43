// Argument checks for the collectives: dtype and element-count agreement, host memory and
// buffer overlap. Shapes need not match, only element counts: collectives see flat memory.
#include "comm/comm_common.h"

#include <cstdint>

namespace anvil {
namespace {

class CompletedHandle final : public CommHandle {
 public:
  void wait() override {}
  bool test() override { return true; }
};

bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  const auto a_begin = reinterpret_cast<uintptr_t>(a.data);
  const auto b_begin = reinterpret_cast<uintptr_t>(b.data);
  return a_begin < b_begin + b.nbytes() && b_begin < a_begin + a.nbytes();
}

}  // namespace

std::unique_ptr<CommHandle> make_completed_handle() { return std::make_unique<CompletedHandle>(); }

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::ordered_sum: return "ordered_sum";
  }
  return "?";
}

void check_host_tensor(const Tensor& t, const char* what) {
  ANVIL_CHECK(t.device.is_cpu(), "[comm] {} is on a device; this communicator moves CPU tensors",
              what);
  ANVIL_CHECK(t.data != nullptr || t.numel() == 0, "[comm] {} has {} elements but no memory",
              what, t.numel());
}

void check_reduce_scatter_args(const Tensor& in, const Tensor& out, int size) {
  check_host_tensor(in, "reduce_scatter input");
  check_host_tensor(out, "reduce_scatter output");
  ANVIL_CHECK(in.dtype == out.dtype, "[comm] reduce_scatter input is {} but output is {}",
              dtype_name(in.dtype), dtype_name(out.dtype));
  ANVIL_CHECK(in.numel() == out.numel() * size,
              "[comm] reduce_scatter over {} ranks needs an input of {} x {} elements, got {}",
              size, size, out.numel(), in.numel());
  ANVIL_CHECK(!overlaps(in, out), "[comm] reduce_scatter input and output overlap");
}

bool all_gather_is_in_place(const Tensor& in, const Tensor& out, int rank) {
  return in.numel() > 0 && static_cast<const char*>(in.data) ==
                               static_cast<const char*>(out.data) + rank * in.nbytes();
}

void check_all_gather_args(const Tensor& in, const Tensor& out, int rank, int size) {
  check_host_tensor(in, "all_gather input");
  check_host_tensor(out, "all_gather output");
  ANVIL_CHECK(in.dtype == out.dtype, "[comm] all_gather input is {} but output is {}",
              dtype_name(in.dtype), dtype_name(out.dtype));
  ANVIL_CHECK(out.numel() == in.numel() * size,
              "[comm] all_gather over {} ranks needs an output of {} x {} elements, got {}", size,
              size, in.numel(), out.numel());
  ANVIL_CHECK(!overlaps(in, out) || all_gather_is_in_place(in, out, rank),
              "[comm] all_gather input overlaps the output but is not rank {}'s slice of it",
              rank);
}

void check_rank_arg(int peer, int size, const char* role) {
  ANVIL_CHECK(0 <= peer && peer < size, "[comm] {} {} is not a rank of this {}-rank group", role,
              peer, size);
}

}  // namespace anvil
