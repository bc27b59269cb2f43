// ParameterLayout bookkeeping and ParameterSet allocation. Views are recomputed from the
// layout on each call (cheap arithmetic), so a set never holds stale pointers.
#include "model/parameters.h"

#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace anvil {

namespace {

int64_t align_up(int64_t n) {
  return (n + kParameterAlignment - 1) / kParameterAlignment * kParameterAlignment;
}

}  // namespace

void ParameterLayout::add(const std::string& name, int group, Shape shape, bool weight_decay,
                          int split_dim) {
  ANVIL_CHECK(index_.find(name) == index_.end(), "[params] duplicate parameter name '{}'", name);
  ANVIL_CHECK(group >= 0 && group >= group_count() - 1,
              "[params] parameter '{}' added to group {} after group {} was started", name, group,
              group_count() - 1);
  ANVIL_CHECK(shape.numel() > 0, "[params] parameter '{}' has no elements ({})", name, shape.str());
  ANVIL_CHECK(split_dim >= -1 && split_dim < shape.rank(),
              "[params] parameter '{}' ({}) cannot be split on dimension {}", name, shape.str(),
              split_dim);
  while (group_count() <= group) group_numel_.push_back(0);
  ParameterInfo info;
  info.name = name;
  info.group = group;
  info.offset = group_numel_[group];
  info.shape = shape;
  info.weight_decay = weight_decay;
  info.split_dim = split_dim;
  group_numel_[group] = align_up(info.offset + shape.numel());
  index_.emplace(name, static_cast<int>(params_.size()));
  params_.push_back(std::move(info));
}

void ParameterLayout::ensure_groups(int count) {
  while (group_count() < count) group_numel_.push_back(0);
}

int64_t ParameterLayout::group_numel(int group) const {
  ANVIL_CHECK(group >= 0 && group < group_count(), "[params] group {} out of range (0..{})", group,
              group_count() - 1);
  return group_numel_[group];
}

int64_t ParameterLayout::total_params() const {
  int64_t total = 0;
  for (const ParameterInfo& p : params_) total += p.numel();
  return total;
}

int ParameterLayout::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

int ParameterLayout::index_of(const std::string& name) const {
  const int index = find(name);
  ANVIL_CHECK(index >= 0, "[params] no parameter named '{}'", name);
  return index;
}

ParameterSet::ParameterSet(std::shared_ptr<const ParameterLayout> layout, Backend& backend,
                           MemoryCategory category, bool allocate, DType dtype)
    : layout_(std::move(layout)), backend_(&backend), dtype_(dtype) {
  ANVIL_CHECK(layout_ != nullptr, "[params] a parameter set needs a layout");
  groups_.resize(static_cast<size_t>(layout_->group_count()));
  bound_.resize(static_cast<size_t>(layout_->group_count()));
  if (!allocate) return;
  for (int g = 0; g < layout_->group_count(); ++g) {
    groups_[g] = Buffer(backend, static_cast<size_t>(layout_->group_numel(g)) * dtype_size(dtype_),
                        category);
  }
  zero();
}

Tensor ParameterSet::group(int group) const {
  const int64_t numel = layout_->group_numel(group);
  if (bound_[group].defined()) return bound_[group].flat(0, numel);
  ANVIL_CHECK(groups_[group].data() != nullptr,
              "[params] parameter group {} has no storage (the parallel layer binds it)", group);
  return groups_[group].as(dtype_, Shape{numel});
}

void ParameterSet::bind(int group, const Tensor& storage) {
  const int64_t numel = layout_->group_numel(group);
  if (storage.defined()) {
    ANVIL_CHECK(storage.dtype == dtype_ && storage.numel() >= numel,
                "[params] group {} needs {} storage of at least {} elements, got {} {}", group,
                dtype_name(dtype_), numel, storage.numel(), dtype_name(storage.dtype));
    ANVIL_CHECK(storage.device == backend_->device(),
                "[params] storage bound to group {} lives on another device", group);
  }
  bound_[group] = storage;
}

bool ParameterSet::has_storage(int group) const {
  ANVIL_CHECK(group >= 0 && group < group_count(), "[params] group {} out of range (0..{})", group,
              group_count() - 1);
  return bound_[group].defined() || groups_[group].data() != nullptr;
}

Tensor ParameterSet::tensor(int index) const {
  ANVIL_CHECK(index >= 0 && index < static_cast<int>(layout_->params().size()),
              "[params] parameter index {} out of range", index);
  const ParameterInfo& info = layout_->params()[index];
  return group(info.group).flat(info.offset, info.numel()).view(info.shape);
}

Tensor ParameterSet::tensor(const std::string& name) const {
  return tensor(layout_->index_of(name));
}

void ParameterSet::zero() {
  for (int g = 0; g < group_count(); ++g)
    if (has_storage(g)) backend_->fill_zero(group(g));
}

void write_f32_values(Backend& backend, const Tensor& t, const float* host) {
  if (t.dtype == DType::f32) {
    backend.copy_from_host(t, host);
    return;
  }
  ANVIL_CHECK(t.dtype == DType::bf16, "[params] cannot write f32 values into a {} tensor",
              dtype_name(t.dtype));
  std::vector<uint16_t> rounded(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < rounded.size(); ++i) rounded[i] = float_to_bf16(host[i]);
  backend.copy_from_host(t, rounded.data());
}

void read_f32_values(Backend& backend, const Tensor& t, float* host) {
  if (t.dtype == DType::f32) {
    backend.copy_to_host(host, t);
    return;
  }
  ANVIL_CHECK(t.dtype == DType::bf16, "[params] cannot read f32 values from a {} tensor",
              dtype_name(t.dtype));
  std::vector<uint16_t> raw(static_cast<size_t>(t.numel()));
  backend.copy_to_host(raw.data(), t);
  for (size_t i = 0; i < raw.size(); ++i) host[i] = bf16_to_float(raw[i]);
}

}  // namespace anvil
