// Preloaded into every process of the sanitized test run (see tests/CMakeLists.txt): dlclose()
// becomes a no-op, so the Vulkan driver and layers that the loader dlopen()s stay mapped until the
// process exits. LeakSanitizer reports at exit, after the loader has unloaded them; without this
// the stack of a leak inside the driver is only "<unknown module>" frames, which no suppression
// can name -- with it, lsan.supp can name the driver's module and nothing else. The Vulkan loader
// of Debian 12 (1.3.239) has no switch of its own to keep libraries loaded.
// Exported explicitly: the project builds with hidden visibility, and a hidden dlclose interposes nothing.
extern "C" __attribute__((visibility("default"))) int dlclose(void*) { return 0; }
