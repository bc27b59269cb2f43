// The op conformance driver (see op_driver.h). Finite differences use the double oracle, not
// an f32 backend: with a step of 1e-5 the central difference of a smooth double function is
// accurate to ~1e-10, far below any tolerance here, so a mismatch always points at the
// backward under test (or at an oracle/forward disagreement, which the forward check reports).
#include "op_driver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "core/error.h"

namespace anvil::test {
namespace {

constexpr double kFdStep = 1e-5;

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char ch : text) hash = (hash ^ ch) * 1099511628211ull;
  return hash;
}

HostTensor filled(DType dtype, Shape shape, double value) {
  return HostTensor{dtype, shape, std::vector<double>(static_cast<size_t>(shape.numel()), value)};
}

// Returns the coordinates whose finite-difference gradient is computed: all of them for small
// tensors, otherwise the first, the last and a random sample, `limit` in all.
std::vector<int64_t> fd_coordinates(int64_t numel, int64_t limit, Rng& rng) {
  std::set<int64_t> chosen;
  if (numel <= limit) {
    for (int64_t i = 0; i < numel; ++i) chosen.insert(i);
  } else {
    chosen.insert(0);
    chosen.insert(numel - 1);
    while (static_cast<int64_t>(chosen.size()) < limit)
      chosen.insert(rng.integer(0, numel - 1));
  }
  return {chosen.begin(), chosen.end()};
}

// Returns sum over differentiated outputs of cotangent . output, evaluated by the oracle.
double functional(const OpCase& op_case, const Values& inputs, const Values& cotangents) {
  const Values outputs = op_case.oracle(inputs);
  double sum = 0.0;
  for (const std::string& name : op_case.differentiated) {
    const std::vector<double>& out = outputs.at(name);
    const std::vector<double>& weight = cotangents.at("d" + name);
    for (size_t k = 0; k < out.size(); ++k) sum += weight[k] * out[k];
  }
  return sum;
}

struct RunResult {
  Values outputs;
  Values grads;
};

RunResult run_on(Backend& backend, const OpCase& op_case, const Values& cotangents,
                 const std::map<std::string, HostTensor>& grad_start) {
  Workspace ws(backend);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const auto& [name, host] : op_case.inputs) ws.upload(name, host);
  for (const OutputSpec& out : op_case.outputs)
    ws.upload(out.name, filled(out.dtype, out.shape, nan));
  op_case.forward(ws);
  backend.synchronize();
  RunResult result;
  for (const OutputSpec& out : op_case.outputs) result.outputs[out.name] = ws.download(out.name);
  if (!op_case.backward) return result;
  for (const std::string& name : op_case.differentiated) {
    const auto spec = std::find_if(op_case.outputs.begin(), op_case.outputs.end(),
                                   [&](const OutputSpec& o) { return o.name == name; });
    ws.upload("d" + name, HostTensor{spec->dtype, spec->shape, cotangents.at("d" + name)});
  }
  for (const auto& [name, start] : grad_start) ws.upload(name, start);
  op_case.backward(ws);
  backend.synchronize();
  for (const GradSpec& grad : op_case.grads)
    result.grads["d" + grad.input] = ws.download("d" + grad.input);
  return result;
}

struct Check {
  std::string tensor;
  std::vector<std::pair<std::string, double>> errors;  // (what it was compared with, error)
};

void report(const std::string& op, const OpCase& op_case, const std::string& backend,
            const std::vector<Check>& checks) {
  const double tol = op_case.tol.pick(op_case.dtype);
  bool ok = true;
  std::string details;
  for (const Check& check : checks) {
    details += details.empty() ? "" : ", ";
    details += check.tensor;
    for (const auto& [against, error] : check.errors) {
      details += fmt::format(" {}={}", against, format_error(error));
      ok = ok && error <= tol;
    }
  }
  const std::string line =
      fmt::format("[ops] {} {} {} on {}: {}; tol={} {}", op, op_case.label,
                  dtype_name(op_case.dtype), backend, details, format_error(tol),
                  ok ? "OK" : "FAIL");
  std::printf("%s\n", line.c_str());
  EXPECT_TRUE(ok) << line;
}

Backend& reference_backend() {
  static std::unique_ptr<Backend> backend = make_backend("cpu-ref");
  return *backend;
}

const std::vector<std::unique_ptr<Backend>>& backends_under_test() {
  static const std::vector<std::unique_ptr<Backend>> backends = available_backends();
  return backends;
}

}  // namespace

double round_to_dtype(double x, DType dtype) {
  int significant_bits = 0, min_exponent = 0;
  double max_finite = 0.0;
  switch (dtype) {
    case DType::f32: significant_bits = 24, min_exponent = -126, max_finite = 0x1.fffffep127; break;
    case DType::bf16: significant_bits = 8, min_exponent = -126, max_finite = 0x1.fep127; break;
    case DType::f16: significant_bits = 11, min_exponent = -14, max_finite = 65504.0; break;
    default: return x;
  }
  if (!std::isfinite(x) || x == 0.0) return x;
  // The spacing of representable values around x; subnormals share the smallest exponent's.
  const int exponent = std::max(std::ilogb(x), min_exponent);
  const double quantum = std::ldexp(1.0, exponent - (significant_bits - 1));
  const double rounded = std::nearbyint(x / quantum) * quantum;  // default mode: ties to even
  if (std::fabs(rounded) > max_finite) return std::copysign(HUGE_VAL, x);
  return rounded;
}

HostTensor random_tensor(Rng& rng, DType dtype, Shape shape, double lo, double hi) {
  HostTensor t{dtype, shape, std::vector<double>(static_cast<size_t>(shape.numel()))};
  for (double& v : t.values) v = round_to_dtype(rng.uniform(lo, hi), dtype);
  return t;
}

HostTensor int_tensor(Shape shape, const std::vector<int32_t>& values) {
  ANVIL_CHECK(static_cast<int64_t>(values.size()) == shape.numel(),
              "[test] {} values for shape {}", values.size(), shape.str());
  return HostTensor{DType::i32, shape, std::vector<double>(values.begin(), values.end())};
}

double Tolerance::pick(DType dtype) const {
  switch (dtype) {
    case DType::f32: return f32;
    case DType::bf16: return bf16;
    case DType::f16: return f16;
    default: return 0.0;
  }
}

Tensor Workspace::upload(const std::string& name, const HostTensor& host) {
  ANVIL_CHECK(!tensors_.count(name), "[test] workspace tensor '{}' defined twice", name);
  Tensor t = scratch(host.dtype, host.shape);
  std::vector<unsigned char> bytes(t.nbytes());
  for (size_t i = 0; i < host.values.size(); ++i) {
    const double v = host.values[i];
    switch (host.dtype) {
      case DType::f32: {
        const float f = static_cast<float>(v);
        std::memcpy(&bytes[4 * i], &f, 4);
        break;
      }
      case DType::bf16:
      case DType::f16: {
        const float f = static_cast<float>(v);
        const uint16_t h = host.dtype == DType::bf16 ? float_to_bf16(f) : float_to_f16(f);
        std::memcpy(&bytes[2 * i], &h, 2);
        break;
      }
      case DType::i32: {
        const int32_t n = static_cast<int32_t>(v);
        std::memcpy(&bytes[4 * i], &n, 4);
        break;
      }
      default: ANVIL_FAIL("[test] cannot upload {}", dtype_name(host.dtype));
    }
  }
  backend_.copy_from_host(t, bytes.data());
  tensors_[name] = t;
  return t;
}

Tensor Workspace::operator[](const std::string& name) const {
  const auto it = tensors_.find(name);
  ANVIL_CHECK(it != tensors_.end(), "[test] workspace has no tensor '{}'", name);
  return it->second;
}

Tensor Workspace::scratch(DType dtype, Shape shape) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  buffers_.push_back(
      std::make_unique<Buffer>(backend_, std::max<size_t>(bytes, 1), MemoryCategory::workspace));
  return buffers_.back()->as(dtype, shape);
}

std::vector<double> Workspace::download(const std::string& name) const {
  const Tensor t = (*this)[name];
  std::vector<unsigned char> bytes(t.nbytes());
  backend_.copy_to_host(bytes.data(), t);
  std::vector<double> values(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < values.size(); ++i) {
    switch (t.dtype) {
      case DType::f32: {
        float f;
        std::memcpy(&f, &bytes[4 * i], 4);
        values[i] = f;
        break;
      }
      case DType::bf16:
      case DType::f16: {
        uint16_t h;
        std::memcpy(&h, &bytes[2 * i], 2);
        values[i] = t.dtype == DType::bf16 ? bf16_to_float(h) : f16_to_float(h);
        break;
      }
      case DType::i32: {
        int32_t n;
        std::memcpy(&n, &bytes[4 * i], 4);
        values[i] = n;
        break;
      }
      default: ANVIL_FAIL("[test] cannot download {}", dtype_name(t.dtype));
    }
  }
  return values;
}

std::string format_error(double error) {
  return error == 0.0 ? "0" : fmt::format("{:.1e}", error);
}

double peak_relative_error(const std::vector<double>& got, const std::vector<double>& want,
                           const std::vector<int64_t>* indices) {
  if (got.size() != want.size()) return HUGE_VAL;
  double peak = 0.0, worst = 0.0;
  auto visit = [&](size_t i) {
    const double g = got[i], w = want[i];
    if (!std::isfinite(w) || !std::isfinite(g)) {
      const bool same = (std::isnan(g) && std::isnan(w)) || g == w;
      if (!same) worst = HUGE_VAL;
      return;
    }
    peak = std::max(peak, std::fabs(w));
    worst = std::max(worst, std::fabs(g - w));
  };
  if (indices) {
    for (int64_t i : *indices) visit(static_cast<size_t>(i));
  } else {
    for (size_t i = 0; i < got.size(); ++i) visit(i);
  }
  return peak > 0.0 ? worst / peak : worst;
}

std::vector<std::unique_ptr<Backend>> available_backends() {
  std::vector<std::unique_ptr<Backend>> backends;
  for (const std::string& name : compiled_backends()) {
    try {
      backends.push_back(make_backend(name));
    } catch (const Error& e) {
      // "[cuda] no CUDA device (...)" prints as "[ops] cuda skipped: no CUDA device (...)".
      std::string reason = e.what();
      const std::string prefix = "[" + name + "] ";
      if (reason.rfind(prefix, 0) == 0) reason.erase(0, prefix.size());
      static std::set<std::string> reported;  // one line per backend, however often called
      if (reported.insert(name).second)
        std::printf("[ops] %s skipped: %s\n", name.c_str(), reason.c_str());
    }
  }
  return backends;
}

void run_op_case(const OpCase& op_case) {
  Rng rng(fnv1a(op_case.forward_op + op_case.label + std::string(dtype_name(op_case.dtype))));
  Values input_values;
  for (const auto& [name, host] : op_case.inputs) input_values[name] = host.values;
  const Values oracle_outputs = op_case.oracle(input_values);

  // Backward set-up shared by every backend: cotangents, gradient start values, and the
  // finite-difference gradients at a sample of coordinates.
  Values cotangents;
  std::map<std::string, HostTensor> grad_start;
  Values fd_grads;
  std::map<std::string, std::vector<int64_t>> fd_at;
  if (op_case.backward) {
    for (const OutputSpec& out : op_case.outputs) {
      if (std::find(op_case.differentiated.begin(), op_case.differentiated.end(), out.name) ==
          op_case.differentiated.end())
        continue;
      const std::string name = "d" + out.name;
      const auto fixed = op_case.fixed_cotangents.find(name);
      if (fixed != op_case.fixed_cotangents.end()) {
        cotangents[name] = fixed->second;
        continue;
      }
      // Representable in the output's dtype and the case's, so backwards that cast the
      // cotangent to the input dtype (matmul) see the same values as the oracle.
      std::vector<double> values = random_tensor(rng, out.dtype, out.shape).values;
      for (double& v : values) v = round_to_dtype(v, op_case.dtype);
      cotangents[name] = std::move(values);
    }
    for (const GradSpec& grad : op_case.grads) {
      const std::string name = "d" + grad.input;
      const Shape shape = op_case.inputs.at(grad.input).shape;
      if (grad.mode == GradMode::accumulate) {
        // Small dyadic start values: adding them changes no gradient bit beyond f32 rounding.
        HostTensor start = random_tensor(rng, grad.dtype, shape);
        for (double& v : start.values) v /= 64.0;
        grad_start[name] = start;
      } else {
        grad_start[name] = filled(grad.dtype, shape, std::numeric_limits<double>::quiet_NaN());
      }
      std::vector<int64_t> coords =
          fd_coordinates(shape.numel(), std::max<int64_t>(2, op_case.max_fd_coordinates), rng);
      std::vector<double> fd(static_cast<size_t>(shape.numel()), 0.0);
      Values perturbed = input_values;
      std::vector<double>& x = perturbed.at(grad.input);
      for (int64_t i : coords) {
        const double original = x[i];
        const double step = kFdStep * std::max(1.0, std::fabs(original));
        x[i] = original + step;
        const double plus = functional(op_case, perturbed, cotangents);
        x[i] = original - step;
        const double minus = functional(op_case, perturbed, cotangents);
        x[i] = original;
        fd[i] = (plus - minus) / (2.0 * step);
      }
      fd_grads[name] = std::move(fd);
      fd_at[name] = std::move(coords);
    }
  }

  const RunResult reference = run_on(reference_backend(), op_case, cotangents, grad_start);
  for (const std::unique_ptr<Backend>& backend : backends_under_test()) {
    if (!op_case.backends.empty() &&
        std::find(op_case.backends.begin(), op_case.backends.end(), backend->name()) ==
            op_case.backends.end())
      continue;
    if (op_case.compute_dtype_op && !backend->supports_compute_dtype(op_case.dtype)) {
      std::printf("[ops] %s %s %s on %s skipped: the backend has no %s kernels\n",
                  op_case.forward_op.c_str(), op_case.label.c_str(),
                  std::string(dtype_name(op_case.dtype)).c_str(), backend->name().c_str(),
                  std::string(dtype_name(op_case.dtype)).c_str());
      continue;
    }
    const RunResult result = run_on(*backend, op_case, cotangents, grad_start);
    std::vector<Check> forward_checks;
    for (const OutputSpec& out : op_case.outputs) {
      Check check{out.name, {}};
      const std::vector<double>& got = result.outputs.at(out.name);
      check.errors.push_back({"ref", peak_relative_error(got, reference.outputs.at(out.name))});
      const auto oracle = oracle_outputs.find(out.name);
      if (oracle != oracle_outputs.end())
        check.errors.push_back({"f64", peak_relative_error(got, oracle->second)});
      forward_checks.push_back(check);
    }
    report(op_case.forward_op, op_case, backend->name(), forward_checks);
    if (!op_case.backward) continue;

    std::vector<Check> backward_checks;
    for (const GradSpec& grad : op_case.grads) {
      const std::string name = "d" + grad.input;
      Check check{name, {}};
      const std::vector<double>& got = result.grads.at(name);
      check.errors.push_back({"ref", peak_relative_error(got, reference.grads.at(name))});
      std::vector<double> increment = got;
      if (grad.mode == GradMode::accumulate)
        for (size_t i = 0; i < increment.size(); ++i) increment[i] -= grad_start[name].values[i];
      check.errors.push_back(
          {"fd", peak_relative_error(increment, fd_grads.at(name), &fd_at.at(name))});
      backward_checks.push_back(check);
    }
    report(op_case.backward_op, op_case, backend->name(), backward_checks);
  }
}

}  // namespace anvil::test
