// Loads cuDNN 9 with dlopen (see cudnn_library.h). Sub-libraries are preloaded by full path
// before libcudnn.so.9: the dynamic linker then finds them by soname when cuDNN opens them.
// Sub-libraries that fail to load are left to cuDNN itself (it reports what it misses).
#include "backend/cuda/cudnn_library.h"

#include <dlfcn.h>
#include <glob.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include <fmt/format.h>

namespace anvil::cuda {
namespace {

constexpr const char* kSoname = "libcudnn.so.9";
// In dependency order: the graph library first, everything else needs it.
constexpr const char* kSubLibraries[] = {"libcudnn_graph.so.9",
                                         "libcudnn_engines_precompiled.so.9",
                                         "libcudnn_engines_runtime_compiled.so.9",
                                         "libcudnn_heuristic.so.9",
                                         "libcudnn_ops.so.9",
                                         "libcudnn_cnn.so.9",
                                         "libcudnn_adv.so.9"};

std::string last_dl_error() {
  const char* error = dlerror();
  return error ? error : "unknown dlopen error";
}

bool is_file(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error);
}

// Returns the folder part of a path ("" for a bare name).
std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

}  // namespace

std::vector<std::string> cudnn_library_candidates(const char* anvil_cudnn_path,
                                                  const std::string& toolkit_library_dir,
                                                  const std::vector<std::string>& pip_folders) {
  std::vector<std::string> candidates;
  if (anvil_cudnn_path != nullptr && anvil_cudnn_path[0] != '\0') {
    const std::string path = anvil_cudnn_path;
    const bool names_file = path.size() >= 3 && path.find(".so") != std::string::npos &&
                            path.back() != '/';
    candidates.push_back(names_file ? path
                                    : (path.back() == '/' ? path : path + "/") + kSoname);
  }
  candidates.push_back(kSoname);
  if (!toolkit_library_dir.empty()) candidates.push_back(toolkit_library_dir + "/" + kSoname);
  for (const std::string& folder : pip_folders) candidates.push_back(folder + "/" + kSoname);
  return candidates;
}

std::vector<std::string> pip_cudnn_folders() {
  std::vector<std::string> patterns = {
      "/usr/local/lib/python3*/dist-packages/nvidia/cudnn/lib",
      "/usr/local/lib/python3*/site-packages/nvidia/cudnn/lib",
      "/usr/lib/python3/dist-packages/nvidia/cudnn/lib",
      "/usr/lib/python3*/site-packages/nvidia/cudnn/lib",
      "/opt/conda/lib/python3*/site-packages/nvidia/cudnn/lib",
  };
  for (const char* variable : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    const char* prefix = std::getenv(variable);
    if (prefix != nullptr && prefix[0] != '\0')
      patterns.push_back(std::string(prefix) + "/lib/python3*/site-packages/nvidia/cudnn/lib");
  }
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0')
    patterns.push_back(std::string(home) + "/.local/lib/python3*/site-packages/nvidia/cudnn/lib");
  std::vector<std::string> folders;
  for (const std::string& pattern : patterns) {
    glob_t found{};
    if (glob(pattern.c_str(), 0, nullptr, &found) == 0) {
      for (size_t i = 0; i < found.gl_pathc; ++i) folders.emplace_back(found.gl_pathv[i]);
    }
    globfree(&found);
  }
  return folders;
}

CudnnLibrary load_cudnn_from(const std::string& candidate) {
  CudnnLibrary library;
  const std::string folder = folder_of(candidate);
  if (!folder.empty()) {
    if (!is_file(candidate)) {
      library.error = fmt::format("{}: no such file", candidate);
      return library;
    }
    for (const char* sub : kSubLibraries) {
      const std::string path = folder + "/" + sub;
      if (is_file(path)) dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept for the process
    }
  }
  dlerror();
  void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    library.error = fmt::format("{}: {}", candidate, last_dl_error());
    return library;
  }
  using GetVersion = size_t (*)();
  const auto get_version = reinterpret_cast<GetVersion>(dlsym(handle, "cudnnGetVersion"));
  if (get_version == nullptr) {
    library.error = fmt::format("{}: no cudnnGetVersion symbol", candidate);
    dlclose(handle);
    return library;
  }
  const size_t version = get_version();
  if (version < 90000 || version >= 100000) {
    library.error = fmt::format("{}: cuDNN {} found; anvil needs cuDNN 9", candidate, version);
    dlclose(handle);
    return library;
  }
  library.handle = handle;
  library.location = candidate;
  library.version = version;
  return library;
}

const CudnnLibrary& load_cudnn_library() {
  static std::once_flag once;
  static CudnnLibrary library;
  std::call_once(once, [] {
#ifdef ANVIL_CUDA_LIBRARY_DIR
    const std::string toolkit_dir = ANVIL_CUDA_LIBRARY_DIR;
#else
    const std::string toolkit_dir;
#endif
    std::string tried;
    for (const std::string& candidate :
         cudnn_library_candidates(std::getenv("ANVIL_CUDNN_PATH"), toolkit_dir,
                                  pip_cudnn_folders())) {
      CudnnLibrary attempt = load_cudnn_from(candidate);
      if (attempt.handle != nullptr) {
        library = std::move(attempt);
        return;
      }
      tried += (tried.empty() ? "" : "; ") + attempt.error;
    }
    library.error = "libcudnn.so.9 not loadable (set ANVIL_CUDNN_PATH to its folder): " + tried;
  });
  return library;
}

}  // namespace anvil::cuda
