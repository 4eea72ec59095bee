// doctest's main, plus one step after the tests: the cached Vulkan contexts are destroyed while
// main() still runs, and a validation error raised by their destruction -- a buffer, pipeline or
// memory block nobody destroyed -- fails the run (see test::release_contexts()).
//
// VKLLM_TEST_CASE_EXCLUDE, in doctest's --test-case-exclude syntax (comma-separated names with *
// wildcards), leaves test cases out of every run of the executables built with this main (test_capi
// reads it too), also of the ones ctest starts with its fixed
// command lines: scripts/slow_driver_tests.sh leaves out the real-model-size shapes, which take
// hours under emulation and on Mesa 25 with a cold shader cache. VKLLM_TEST_CASE_INCLUDE
// (doctest's --test-case) keeps only the cases it names: scripts/arm64.sh runs the kernels' (runtime.ops)
// basic cases under emulation.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "support/test_context.h"

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
    doctest::Context runner(argc, argv);
    if (const char* exclude = std::getenv("VKLLM_TEST_CASE_EXCLUDE"); exclude && *exclude)
        runner.setOption("test-case-exclude", exclude);
    if (const char* include = std::getenv("VKLLM_TEST_CASE_INCLUDE"); include && *include)
        runner.setOption("test-case", include);
    int status = runner.run();
    const std::vector<std::string> errors = vkllm::test::release_contexts();
    for (const std::string& e : errors) std::fprintf(stderr, "Vulkan validation error at teardown: %s\n", e.c_str());
    if (!errors.empty() && status == 0) status = 1;
    return status;
}
