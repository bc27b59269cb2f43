// Per-backend factories that backend.cpp's registry calls. Each backend folder defines its
// own; the no_cuda stub defines the CUDA pair when CUDA is not built.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace anvil {

// Creates the CPU backend; reference = true selects the plain reference loops.
std::unique_ptr<Backend> make_cpu_backend(bool reference);
std::string describe_cpu_backend();
std::unique_ptr<Backend> make_cuda_backend();
std::string describe_cuda_backend();

}  // namespace anvil
