// The table-driven op conformance driver. An OpCase describes one op invocation: its inputs
// (host values), its outputs, how to run the forward (and backward) on any Backend, and a
// double-precision oracle of the forward. run_op_case() then, for every backend compiled in:
//   - compares each forward output with the cpu-ref backend and with the double oracle;
//   - compares each gradient with cpu-ref and with central finite differences of the double
//     oracle (a random linear functional of the differentiated outputs);
//   - prints one line per check so the log shows exactly what was covered.
// Errors are max|got - want| / max|want| ("peak-relative"), checked against the case's
// tolerance for its dtype. Outputs that an op overwrites start as NaN, so an element the op
// forgets to write fails; accumulated (+=) gradients start from a random base.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"

namespace anvil::test {

// Deterministic pseudo-random numbers for inputs and cotangents.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  // Returns a value uniform in [lo, hi).
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(engine_);
  }
  // Returns an integer uniform in [lo, hi].
  int64_t integer(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(engine_);
  }

 private:
  std::mt19937_64 engine_;
};

// Returns x rounded to nearest even in dtype's format (computed independently of core/dtype.h:
// f32, bf16 and f16 keep 24, 8 and 11 significant bits; i32 values pass through).
double round_to_dtype(double x, DType dtype);

// Host values of one tensor, held as doubles exactly representable in `dtype`.
struct HostTensor {
  DType dtype = DType::f32;
  Shape shape;
  std::vector<double> values;
};

// Returns a tensor of uniform values in [lo, hi), rounded to the dtype.
HostTensor random_tensor(Rng& rng, DType dtype, Shape shape, double lo = -1.0, double hi = 1.0);
// Returns an i32 tensor holding the given integers.
HostTensor int_tensor(Shape shape, const std::vector<int32_t>& values);

struct Tolerance {
  double f32 = 0.0;
  double bf16 = 0.0;
  double f16 = 0.0;
  // Returns the tolerance for a case whose activations have this dtype.
  double pick(DType dtype) const;
};

// The tensors of one run on one backend, by name; owns their device buffers.
class Workspace {
 public:
  explicit Workspace(Backend& backend) : backend_(backend) {}
  // Allocates a device tensor named `name` and uploads the host values into it.
  Tensor upload(const std::string& name, const HostTensor& host);
  // Returns the named tensor; throws for an unknown name.
  Tensor operator[](const std::string& name) const;
  // Returns a fresh device tensor for intermediate values (contents undefined).
  Tensor scratch(DType dtype, Shape shape);
  // Returns the named tensor's values, downloaded and widened to double.
  std::vector<double> download(const std::string& name) const;
  Backend& backend() const { return backend_; }

 private:
  Backend& backend_;
  std::map<std::string, Tensor> tensors_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

using Values = std::map<std::string, std::vector<double>>;

struct OutputSpec {
  std::string name;
  DType dtype;
  Shape shape;
};

enum class GradMode { overwrite, accumulate };

// The gradient of input `input`, held in a tensor named "d" + input of the input's shape.
struct GradSpec {
  std::string input;
  DType dtype;
  GradMode mode = GradMode::overwrite;
};

struct OpCase {
  std::string forward_op;   // printed name, e.g. "attention_forward"
  std::string backward_op;  // printed name of the backward; empty when there is none
  std::string label;        // shapes and flags, e.g. "B=2 T=7 Hq=8 Hkv=1 D=16 causal"
  DType dtype = DType::f32;  // activation dtype: picks the tolerance and ends the label
  Tolerance tol;
  // Whether the op takes `dtype` only where Backend::supports_compute_dtype(dtype) holds (the
  // activation ops; a backend without it is skipped with a line). Elementwise ops and casts
  // take every float storage dtype on every backend.
  bool compute_dtype_op = true;
  std::map<std::string, HostTensor> inputs;
  std::vector<OutputSpec> outputs;
  // Runs the op: reads the inputs and writes the outputs of the workspace by name.
  std::function<void(Workspace&)> forward;
  // Returns, in double precision, the forward outputs it can define (a subset of `outputs`).
  std::function<Values(const Values& inputs)> oracle;
  // Backward: cotangents "d" + output for each output in `differentiated` are uploaded (random,
  // or `fixed_cotangents` where given), then `backward` fills the gradients in `grads`.
  std::vector<std::string> differentiated;
  Values fixed_cotangents;
  std::vector<GradSpec> grads;
  std::function<void(Workspace&)> backward;
  // The backends to run (by name); empty: every available backend. cpu-ref always runs as the
  // reference.
  std::vector<std::string> backends;
  // At most this many coordinates per gradient get a finite-difference check (each costs two
  // oracle evaluations; the cpu-ref comparison still covers every element).
  int64_t max_fd_coordinates = 256;
};

// Runs one case on every compiled backend against cpu-ref, the oracle and finite differences.
void run_op_case(const OpCase& op_case);

// Sets a bf16 dtype to f16 and returns whether it did (for with_f16_twins).
inline bool bf16_to_f16(DType& dtype) {
  if (dtype != DType::bf16) return false;
  dtype = DType::f16;
  return true;
}

// Returns the rows followed by an f16 twin of every row that has bf16 tensors: `twin` turns a
// row's bf16 dtypes into f16 (bf16_to_f16) and returns whether it changed one.
template <typename Row, typename Twin>
std::vector<Row> with_f16_twins(std::vector<Row> rows, Twin twin) {
  const size_t count = rows.size();
  for (size_t i = 0; i < count; ++i) {
    Row row = rows[i];
    if (twin(row)) rows.push_back(row);
  }
  return rows;
}

// Returns the backends to test: every compiled backend that can be created here. Prints the
// reason for each one skipped (e.g. no device).
std::vector<std::unique_ptr<Backend>> available_backends();

// Returns "2.5e-03"-style text for an error value.
std::string format_error(double error);
// Returns the peak-relative error max|got - want| / max|want| over all elements (or over
// `indices` when given). Matching non-finite values count as equal; a mismatch gives infinity.
double peak_relative_error(const std::vector<double>& got, const std::vector<double>& want,
                           const std::vector<int64_t>* indices = nullptr);

}  // namespace anvil::test
