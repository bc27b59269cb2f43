// MPI start-up, shut-down, error strings and type mapping. MPI starts only when world()
// finds a launcher; it is finalised by an atexit handler so every normal exit path (return
// from main, std::exit) finalises. Fatal errors go through abort_world instead, because
// MPI_Finalize waits for every rank and would hang if a peer is stuck in a collective.
#include "comm/mpi/mpi_runtime.h"

#include <climits>
#include <cstdlib>
#include <string_view>

#include "comm/reduce_kernels.h"

namespace anvil::mpi {
namespace {

struct UserOps {
  MPI_Op max_f32 = MPI_OP_NULL;
  MPI_Op max_bf16 = MPI_OP_NULL;
  MPI_Op max_f16 = MPI_OP_NULL;
};
UserOps user_ops;

template <DType kind>
void max_op(void* in, void* inout, int* length, MPI_Datatype* /*datatype*/) {
  max_into(in, inout, *length, kind);
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Op* op : {&user_ops.max_f32, &user_ops.max_bf16, &user_ops.max_f16})
    if (*op != MPI_OP_NULL) MPI_Op_free(op);
  MPI_Finalize();
}

}  // namespace

void fail(int code, const char* call_text, const char* file, int line) {
  std::string_view call(call_text);
  call = call.substr(0, call.find('('));
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  const std::string_view reason =
      length > 0 ? std::string_view(text, static_cast<size_t>(length)) : "unknown error code";
  throw_error(file, line, fmt::format("[mpi] {} failed: {} (code {})", call, reason, code));
}

bool active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

void start() {
  if (user_ops.max_f32 != MPI_OP_NULL) return;
  int initialized = 0, finalized = 0, provided = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  MPI_CHECK(MPI_Finalized(&finalized));
  ANVIL_CHECK(!finalized, "[mpi] MPI was already finalised; it cannot be started again");
  if (!initialized) {
    // MULTIPLE where the library has it: a device backend's stream communicators call MPI
    // from their communication streams while the main thread calls it too.
    MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    std::atexit(finalize_at_exit);
  } else {
    MPI_CHECK(MPI_Query_thread(&provided));
  }
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  ANVIL_CHECK(provided >= MPI_THREAD_SERIALIZED,
              "[mpi] the MPI library provides thread level {}, anvil needs "
              "MPI_THREAD_SERIALIZED ({})",
              provided, static_cast<int>(MPI_THREAD_SERIALIZED));
  MPI_CHECK(MPI_Op_create(&max_op<DType::f32>, 1, &user_ops.max_f32));
  MPI_CHECK(MPI_Op_create(&max_op<DType::bf16>, 1, &user_ops.max_bf16));
  MPI_CHECK(MPI_Op_create(&max_op<DType::f16>, 1, &user_ops.max_f16));
}

MPI_Datatype datatype_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::i32: return MPI_INT32_T;
    case DType::u32: return MPI_UINT32_T;
    case DType::bf16:
    case DType::f16:
    case DType::u16: return MPI_UINT16_T;
  }
  ANVIL_FAIL("[mpi] no MPI datatype for dtype {}", dtype_name(dtype));
}

bool runs_as_ordered_sum(ReduceOp op, DType dtype) {
  const bool floating = dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
  const bool half = dtype == DType::bf16 || dtype == DType::f16;
  // Integer sums are exact, so MPI_SUM already gives the rank-order result; MPI has no 16-bit
  // float type, so their plain sums run in order too (with an f32 accumulator).
  return (op == ReduceOp::ordered_sum && floating) || (op == ReduceOp::sum && half);
}

MPI_Op op_for(ReduceOp op, DType dtype) {
  if (op == ReduceOp::max) {
    switch (dtype) {
      case DType::f32: return user_ops.max_f32;
      case DType::bf16: return user_ops.max_bf16;
      case DType::f16: return user_ops.max_f16;
      default: return MPI_MAX;
    }
  }
  ANVIL_CHECK(!runs_as_ordered_sum(op, dtype), "[mpi] {} on {} has no MPI_Op",
              reduce_op_name(op), dtype_name(dtype));
  return MPI_SUM;
}

int count_of(const Tensor& t, const char* what) {
  ANVIL_CHECK(t.numel() <= INT_MAX,
              "[mpi] {} has {} elements; one MPI message carries at most {} (split it)", what,
              t.numel(), INT_MAX);
  return static_cast<int>(t.numel());
}

}  // namespace anvil::mpi
