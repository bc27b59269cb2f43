// Finding and loading cuDNN 9 at run time. anvil never links libcudnn: a binary built with the
// cuDNN frontend starts on machines without cuDNN, and attention then runs on anvil's own
// kernels. The library is looked for, in order, at ANVIL_CUDNN_PATH (a folder holding
// libcudnn.so.9, or the file itself), through the dynamic linker's own search (LD_LIBRARY_PATH,
// the executable's run path, the system's cache), in the CUDA toolkit's library folder known at
// build time, and in the nvidia/cudnn/lib folders that pip's nvidia-cudnn-cu1x wheels install
// into the usual Python locations (PyTorch's installs). Loading from a folder preloads cuDNN's
// sub-libraries (libcudnn_graph.so.9, the engines, ...) from the same folder, since
// libcudnn.so.9 opens them by name. The result is decided once per process.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace anvil::cuda {

struct CudnnLibrary {
  void* handle = nullptr;  // dlopen handle of libcudnn.so.9 (null when not loaded)
  std::string location;    // the candidate it was loaded from
  size_t version = 0;      // cudnnGetVersion(), e.g. 91900
  std::string error;       // why it is not loaded (every candidate and its dlerror), or ""
};

// Returns the places to look for libcudnn.so.9, in order, given ANVIL_CUDNN_PATH's value (null
// or empty: unset), the toolkit's library folder and the folders that Python installs match.
// An entry is a path to a library file or a bare soname for the dynamic linker's search.
std::vector<std::string> cudnn_library_candidates(const char* anvil_cudnn_path,
                                                  const std::string& toolkit_library_dir,
                                                  const std::vector<std::string>& pip_folders);

// Returns the nvidia/cudnn/lib folders found under the usual Python installs (system, user,
// VIRTUAL_ENV, CONDA_PREFIX, /opt/conda).
std::vector<std::string> pip_cudnn_folders();

// Loads cuDNN 9 (once per process; later calls return the same result). Never throws: a
// failure is described in `error`.
const CudnnLibrary& load_cudnn_library();

// Loads cuDNN from `candidate` (a library path or a soname) without caching; for tests.
CudnnLibrary load_cudnn_from(const std::string& candidate);

}  // namespace anvil::cuda
