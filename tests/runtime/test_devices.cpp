#include "support/test_context.h"

#include "runtime/vk_check.h"

using namespace vkllm;

TEST_CASE("devices: enumeration finds a usable device with sane limits") {
    Instance instance;
    auto devices = enumerate_devices(instance);
    REQUIRE(!devices.empty());
    for (auto& d : devices) {
        INFO(d.caps.name);
        CHECK(d.caps.api_version >= VK_API_VERSION_1_1);
        CHECK(d.caps.device_api_version >= d.caps.api_version);  // what vkllm uses never exceeds the driver
        CHECK(d.caps.subgroup_size >= 1);
        CHECK(d.caps.max_shared_memory >= 16384);  // Vulkan's required minimum
        CHECK(d.caps.max_storage_buffer_range >= (1u << 27));
        CHECK(d.caps.max_workgroup_invocations >= 128);
    }
}

TEST_CASE("devices: lavapipe reports its real limits") {
    Instance instance;
    auto devices = enumerate_devices(instance);
    const PhysicalDeviceEntry* lvp = nullptr;
    for (auto& d : devices)
        if (d.caps.name.find("llvmpipe") != std::string::npos) lvp = &d;
    if (!lvp) {
        MESSAGE("no lavapipe device: skipped");
        return;
    }
    CHECK(lvp->caps.type == VK_PHYSICAL_DEVICE_TYPE_CPU);
    CHECK(lvp->caps.type_name() == "cpu");
    CHECK(lvp->caps.max_storage_buffer_range == 128ull << 20);
    CHECK(lvp->caps.max_shared_memory == 32768);
    CHECK((lvp->caps.subgroup_size == 4 || lvp->caps.subgroup_size == 8 || lvp->caps.subgroup_size == 16));
#if defined(__x86_64__) || defined(__i386__)
    // llvmpipe offers shaderFloat16 only where it converts halves natively: on x86 with F16C. On
    // aarch64, Debian 12's Mesa 22.3 does not offer it (newer Mesa releases do).
    CHECK(lvp->caps.fp16);
#endif
    // Without native half conversion llvmpipe cannot select unpackHalf2x16 (see half.glsl).
    CHECK(lvp->caps.soft_half == !lvp->caps.fp16);
    CHECK(lvp->caps.int8);
    CHECK(lvp->caps.storage16);
    CHECK(lvp->caps.timestamps);
}

TEST_CASE("devices: selection by index, name and preference") {
    Instance instance;
    auto devices = enumerate_devices(instance);
    REQUIRE(!devices.empty());
    const auto& first = devices.front();
    CHECK(&select_device(devices, DeviceSelector::parse(std::to_string(first.index))) == &first);
    std::string upper = first.caps.name.substr(0, 4);
    for (auto& ch : upper) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    CHECK(select_device(devices, DeviceSelector::parse(upper)).caps.name.substr(0, 4) == first.caps.name.substr(0, 4));
    CHECK_THROWS_WITH_AS(select_device(devices, DeviceSelector::parse("999")),
                         doctest::Contains("device index 999 does not exist"), DeviceLimitError);
    CHECK_THROWS_WITH_AS(select_device(devices, DeviceSelector::parse("no-such-gpu")),
                         doctest::Contains("no device name contains 'no-such-gpu'"), DeviceLimitError);
    CHECK_THROWS_AS(DeviceSelector::parse("12345678901"), std::invalid_argument);
    CHECK_THROWS_AS(select_device({}, {}), DeviceLimitError);

    // Preference: a discrete GPU beats a CPU device even at a higher index.
    std::vector<PhysicalDeviceEntry> fake(2);
    fake[0].index = 0;
    fake[0].caps.type = VK_PHYSICAL_DEVICE_TYPE_CPU;
    fake[1].index = 1;
    fake[1].caps.type = VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
    CHECK(select_device(fake, {}).index == 1);
    fake[1].caps.type = VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU;
    fake[0].caps.type = VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
    CHECK(select_device(fake, {}).index == 0);
}

TEST_CASE("caps override: parsing and weakening") {
    auto o = CapsOverride::parse("no-fp16, no-subgroup-ops,shared-mem=16k,max-storage-range=33554432,max-uniform-range=16k");
    CHECK(o.no_fp16);
    CHECK(o.no_subgroup_ops);
    CHECK(o.shared_mem == 16384);
    CHECK(o.max_storage_range == 33554432);
    CHECK(o.max_uniform_range == 16384);
    CHECK(CapsOverride::parse("").empty());
    CHECK_THROWS_WITH_AS(CapsOverride::parse("fast-mode"), doctest::Contains("unknown entry 'fast-mode'"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(CapsOverride::parse("shared-mem=abc"), doctest::Contains("not a number"), std::invalid_argument);
    CHECK_THROWS_AS(CapsOverride::parse("shared-mem=-5"), std::invalid_argument);
    CHECK_THROWS_AS(CapsOverride::parse("shared-mem=0"), std::invalid_argument);
    CHECK_THROWS_AS(CapsOverride::parse("no-fp16=1"), std::invalid_argument);

    DeviceCaps c;
    c.fp16 = c.subgroup_arithmetic = true;
    c.max_shared_memory = 32768;
    c.max_storage_buffer_range = 1ull << 27;
    c.max_uniform_buffer_range = 65536;
    o.apply(c);
    CHECK(c.max_uniform_buffer_range == 16384);
    CHECK(!c.fp16);
    CHECK(!c.subgroup_arithmetic);
    CHECK(c.max_shared_memory == 16384);
    CHECK(c.max_storage_buffer_range == 33554432);
    // An override never strengthens a device.
    CapsOverride::parse("shared-mem=1g").apply(c);
    CHECK(c.max_shared_memory == 16384);
    // The driver workaround can be forced (to test it anywhere), never turned off.
    CHECK(!c.soft_half);
    CapsOverride::parse("soft-half").apply(c);
    CHECK(c.soft_half);
    CapsOverride::parse("").apply(c);
    CHECK(c.soft_half);
}

TEST_CASE("caps override: a context created with it reports the weaker device") {
    test::ValidationGuard guard;
    auto ctx = test::make_context(CapsOverride::parse("no-fp16,no-subgroup-ops,shared-mem=16384,max-storage-range=32m"));
    CHECK(!ctx->caps().fp16);
    CHECK(!ctx->caps().subgroup_arithmetic);
    CHECK(ctx->caps().max_shared_memory == 16384);
    CHECK(ctx->caps().max_storage_buffer_range == 32ull << 20);
    // A binding beyond the (overridden) range is refused with a clear message, never truncated.
    auto buf = ctx->create_buffer(40ull << 20, MemoryUsage::Device, "big");
    auto& p = ctx->pipeline({"vec_add", {64}});
    CommandStream s(*ctx);
    s.begin();
    uint32_t n = 16;
    CHECK_THROWS_WITH_AS(s.dispatch(p, {buf.slice(), buf.slice(0, 64), buf.slice(0, 64)}, n, {1, 1, 1}),
                         doctest::Contains("maxStorageBufferRange"), DeviceLimitError);
    s.end();
}

TEST_CASE("vk_check: errors carry the call and the VkResult name") {
    try {
        VK_CHECK(VK_ERROR_DEVICE_LOST);
        FAIL("no throw");
    } catch (const VulkanError& e) {
        CHECK(e.result() == VK_ERROR_DEVICE_LOST);
        CHECK(std::string(e.what()).find("VK_ERROR_DEVICE_LOST") != std::string::npos);
        CHECK(std::string(e.what()).find("VK_ERROR_DEVICE_LOST") != std::string::npos);
        CHECK(e.call() == "VK_ERROR_DEVICE_LOST");
    }
    CHECK_NOTHROW(VK_CHECK(VK_SUCCESS));
    CHECK_NOTHROW(VK_CHECK(VK_INCOMPLETE));  // positive codes are not errors
}

TEST_CASE("validation harness: a real validation error is caught") {
    // Proves that ValidationGuard can fail: an invalid vkCreateBuffer (size 0) must be reported.
    Context& ctx = test::context();
    test::take_validation_errors();
    VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bci.size = 0;
    bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
    VkBuffer b = VK_NULL_HANDLE;
    if (vkCreateBuffer(ctx.device().get(), &bci, nullptr, &b) == VK_SUCCESS && b) vkDestroyBuffer(ctx.device().get(), b, nullptr);
    CHECK(!test::take_validation_errors().empty());
}
