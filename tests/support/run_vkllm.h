// Runs the built `vkllm` executable for the end-to-end tests (VKLLM_EXE is defined by CMake).
#pragma once

#include "support/test_context.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace vkllm::test {

struct CliResult {
    int status = -1;  // exit code, or 128 + signal
    std::string out, err;
};

// `vkllm <args>` with stdin from `stdin_file` (none by default); stdout captured, stderr read from
// a file named after `tag`. `env` ("NAME=value ...", shell-quoted) is set for this run only.
inline CliResult run_vkllm(const std::string& args, const std::string& tag = "cli",
                           const std::string& stdin_file = "/dev/null", const std::string& env = "") {
    namespace fs = std::filesystem;
    fs::path dir = fs::path(VKLLM_BINARY_DIR) / "test-tmp";
    fs::create_directories(dir);
    fs::path err_file = dir / (tag + "_stderr.txt");
    std::string cmd = (env.empty() ? "" : "env " + env + " ") + std::string(VKLLM_EXE) + " " + args + " 2>" + err_file.string() + " <" + stdin_file;
    CliResult r;
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    std::ifstream f(err_file);
    r.err.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    // In a sanitized build the child reports leaks, UB and memory errors on stderr; a run that is
    // expected to fail must not hide one behind its non-zero exit.
    INFO(r.err);
    CHECK(r.err.find("Sanitizer") == std::string::npos);
    CHECK(r.err.find("runtime error:") == std::string::npos);
    return r;
}

}  // namespace vkllm::test
