// doctest's main for test_capi, honouring VKLLM_TEST_CASE_EXCLUDE as the other suites do
// (tests/support/doctest_main.cpp): scripts/slow_driver_tests.sh leaves out cases that compile many
// pipelines on slow drivers.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>

int main(int argc, char** argv) {
    doctest::Context runner(argc, argv);
    if (const char* exclude = std::getenv("VKLLM_TEST_CASE_EXCLUDE"); exclude && *exclude)
        runner.setOption("test-case-exclude", exclude);
    return runner.run();
}
