// Running commands from tests: the anvil executable (ANVIL_BINARY, defined for every test
// binary) or any shell line, with its exit code and output. The one copy the CLI tests of
// every layer share.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace anvil::test {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // what the command wrote to stdout (and stderr, where joined)
};

// Runs a shell command line and returns its exit code (-1 when it did not exit normally) and
// what it wrote to stdout; stderr goes wherever the line sends it.
inline CommandResult run_capturing_stdout(const std::string& command_line) {
  CommandResult result;
  FILE* pipe = popen(command_line.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Runs a shell command line with stderr joined to stdout.
inline CommandResult run_shell(const std::string& command_line) {
  return run_capturing_stdout(command_line + " 2>&1");
}

// Runs `anvil <args>` with stderr joined to stdout.
inline CommandResult run_anvil(const std::string& args) {
  return run_shell(std::string(ANVIL_BINARY) + " " + args);
}

struct MeasuredRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
  double peak_rss_mb = 0;
};

// Runs `anvil <args>` as a child, its stdout and stderr written to `output_path`, and returns
// its exit code, output and peak RSS: wait4's rusage, the child's own high-water mark (not this
// process's).
inline MeasuredRun run_anvil_measured(const std::vector<std::string>& args,
                                      const std::string& output_path) {
  std::vector<std::string> argv_text = {ANVIL_BINARY};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_text) argv.push_back(arg.data());
  argv.push_back(nullptr);
  MeasuredRun run;
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) _exit(126);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (pid < 0) return run;
  int status = 0;
  rusage usage{};
  if (wait4(pid, &status, 0, &usage) != pid) return run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(output_path, std::ios::binary);
  run.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  run.peak_rss_mb = static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB
  return run;
}

}  // namespace anvil::test
