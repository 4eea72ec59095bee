// doctest's main for the chat-template suite (no Vulkan context to tear down here).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
