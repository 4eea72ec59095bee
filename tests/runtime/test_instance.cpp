// Instances and volk: the loader's function pointers are loaded once per process (see
// runtime/instance.cpp), which is only sound if they serve every instance, whichever came first.
#include "support/test_context.h"

#include <latch>
#include <thread>

using namespace vkllm;

// First in this file so that, in its own process (ctest runs each file alone), these threads race
// to create the process's first instance and so to load volk's pointers.
TEST_CASE("instance: several threads create instances and devices at once") {
    constexpr int kThreads = 4;
    std::latch start(kThreads);
    std::vector<std::string> errors(kThreads);
    std::vector<size_t> device_count(kThreads, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++)
        threads.emplace_back([&, t] {
            try {
                start.arrive_and_wait();
                InstanceOptions o;
                o.validation = t % 2 == 0;  // with and without layers in the same process
                o.sink = [&errors, t](MessageSeverity s, std::string_view m) {
                    if (s == MessageSeverity::Error) errors[t] += std::string(m) + "\n";
                };
                Instance instance(o);
                auto devices = enumerate_devices(instance);
                device_count[t] = devices.size();
                if (!devices.empty()) {
                    Device device(instance, devices.front(), {});
                }
            } catch (const std::exception& e) {
                errors[t] = e.what();
            }
        });
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; t++) {
        INFO("thread ", t, ": ", errors[t]);
        CHECK(errors[t].empty());
        CHECK(device_count[t] >= 1);
    }
}

TEST_CASE("instance: volk's pointers are the loader trampolines every instance gets") {
    // The pointers were loaded through whichever instance came first; destroy one, make another
    // with different layers, and it must hand out the very same entry points.
    { Instance first; }
    InstanceOptions o;
    o.validation = true;
    Instance other(o);
    // As integers: doctest cannot print function pointers.
    auto same = [&](PFN_vkVoidFunction loaded, const char* name) {
        INFO(name);
        auto address = reinterpret_cast<uintptr_t>(loaded);
        CHECK(address != 0);
        CHECK(address == reinterpret_cast<uintptr_t>(vkGetInstanceProcAddr(other.get(), name)));
    };
#define VKLLM_SAME(fn) same(reinterpret_cast<PFN_vkVoidFunction>(fn), #fn)
    VKLLM_SAME(vkDestroyInstance);
    VKLLM_SAME(vkEnumeratePhysicalDevices);
    VKLLM_SAME(vkGetPhysicalDeviceProperties2);
    VKLLM_SAME(vkGetPhysicalDeviceFeatures2);
    VKLLM_SAME(vkGetPhysicalDeviceMemoryProperties);
    VKLLM_SAME(vkCreateDevice);
    VKLLM_SAME(vkDestroyDevice);
    VKLLM_SAME(vkGetDeviceQueue);
    VKLLM_SAME(vkQueueSubmit);
    VKLLM_SAME(vkCreateBuffer);
    VKLLM_SAME(vkAllocateMemory);
    VKLLM_SAME(vkCreateComputePipelines);
    VKLLM_SAME(vkUpdateDescriptorSets);
    VKLLM_SAME(vkCmdBindPipeline);
    VKLLM_SAME(vkCmdDispatch);
    VKLLM_SAME(vkCmdPipelineBarrier);
    VKLLM_SAME(vkCmdWriteTimestamp);
    VKLLM_SAME(vkWaitForFences);
#undef VKLLM_SAME
}
