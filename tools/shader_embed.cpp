// shader_embed: build-time tool. Reads the SPIR-V modules produced by glslangValidator, reflects
// what the runtime needs to build a pipeline without hand-written tables (workgroup size and its
// specialization ids, push-constant block size, storage-buffer bindings and which of them are
// written), and writes one C++ source that embeds every module as a `ShaderInfo` table.
//
// usage: shader_embed OUT.cpp NAME=FILE.spv [NAME=FILE.spv ...]
//
// Only the subset of SPIR-V that compute shaders produced by glslang use is understood; anything
// unexpected (a sampler, a second descriptor set) is a build error, not a silent miss.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

enum : uint32_t {
    OpExecutionMode = 16,
    OpTypeInt = 21,
    OpTypeFloat = 22,
    OpTypeVector = 23,
    OpTypeArray = 28,
    OpTypeRuntimeArray = 29,
    OpTypeStruct = 30,
    OpTypePointer = 32,
    OpConstant = 43,
    OpConstantComposite = 44,
    OpSpecConstant = 50,
    OpSpecConstantComposite = 51,
    OpVariable = 59,
    OpDecorate = 71,
    OpMemberDecorate = 72,
    OpExecutionModeId = 331,
};
enum : uint32_t {
    DecSpecId = 1,
    DecBlock = 2,
    DecBufferBlock = 3,
    DecArrayStride = 6,
    DecBuiltIn = 11,
    DecNonWritable = 24,
    DecNonReadable = 25,
    DecBinding = 33,
    DecDescriptorSet = 34,
    DecOffset = 35,
};
enum : uint32_t { ScUniform = 2, ScPushConstant = 9, ScStorageBuffer = 12 };
constexpr uint32_t kBuiltInWorkgroupSize = 25;
constexpr uint32_t kExecModeLocalSize = 17;

struct Reflection {
    uint32_t local_size[3] = {1, 1, 1};
    int32_t local_size_spec_id[3] = {-1, -1, -1};
    uint32_t push_constant_bytes = 0;
    uint32_t binding_count = 0;
    uint32_t written_mask = 0;  // bit b: binding b is written by the shader
    uint32_t uniform_mask = 0;  // bit b: binding b is a uniform buffer (else a storage buffer)
};

std::vector<uint32_t> read_words(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open " + path);
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (bytes.size() % 4 != 0 || bytes.size() < 20) throw std::runtime_error(path + ": not SPIR-V");
    std::vector<uint32_t> words(bytes.size() / 4);
    std::memcpy(words.data(), bytes.data(), bytes.size());
    if (words[0] != 0x07230203u) throw std::runtime_error(path + ": bad SPIR-V magic");
    return words;
}

Reflection reflect(const std::vector<uint32_t>& w, const std::string& name) {
    struct Type {
        uint32_t op = 0;
        std::vector<uint32_t> args;
    };
    std::map<uint32_t, Type> types;
    std::map<uint32_t, uint32_t> constants;  // id -> literal value
    std::map<uint32_t, std::vector<uint32_t>> composites;  // id -> constituent ids
    std::map<uint32_t, std::map<uint32_t, uint32_t>> decorations;  // id -> decoration -> value
    std::map<uint32_t, std::map<uint32_t, std::map<uint32_t, uint32_t>>> member_decorations;
    struct Var {
        uint32_t type, storage;
    };
    std::map<uint32_t, Var> vars;
    Reflection r;

    for (size_t i = 5; i < w.size();) {
        uint32_t count = w[i] >> 16, op = w[i] & 0xffffu;
        if (count == 0 || i + count > w.size()) throw std::runtime_error(name + ": truncated SPIR-V");
        const uint32_t* a = &w[i + 1];
        uint32_t n = count - 1;
        switch (op) {
            case OpExecutionMode:
                if (a[1] == kExecModeLocalSize) {
                    r.local_size[0] = a[2];
                    r.local_size[1] = a[3];
                    r.local_size[2] = a[4];
                }
                break;
            case OpExecutionModeId:
                throw std::runtime_error(name + ": LocalSizeId is not supported, use local_size_x_id");
            case OpTypeInt:
            case OpTypeFloat:
            case OpTypeVector:
            case OpTypeArray:
            case OpTypeRuntimeArray:
            case OpTypeStruct:
            case OpTypePointer: types[a[0]] = Type{op, std::vector<uint32_t>(a + 1, a + n)}; break;
            case OpConstant:
            case OpSpecConstant: constants[a[1]] = a[2]; break;
            case OpConstantComposite:
            case OpSpecConstantComposite: composites[a[1]] = std::vector<uint32_t>(a + 2, a + n); break;
            case OpVariable: vars[a[1]] = Var{a[0], a[2]}; break;
            case OpDecorate: decorations[a[0]][a[1]] = n > 2 ? a[2] : 1; break;
            case OpMemberDecorate: member_decorations[a[0]][a[1]][a[2]] = n > 3 ? a[3] : 1; break;
            default: break;
        }
        i += count;
    }

    // Workgroup size given through specialization constants (local_size_x_id) wins over LocalSize.
    for (auto& [id, decs] : decorations) {
        auto it = decs.find(DecBuiltIn);
        if (it == decs.end() || it->second != kBuiltInWorkgroupSize) continue;
        auto comp = composites.find(id);
        if (comp == composites.end() || comp->second.size() != 3) continue;
        for (int d = 0; d < 3; ++d) {
            uint32_t cid = comp->second[d];
            r.local_size[d] = constants.count(cid) ? constants[cid] : 1;
            auto spec = decorations.find(cid);
            if (spec != decorations.end() && spec->second.count(DecSpecId))
                r.local_size_spec_id[d] = int32_t(spec->second.at(DecSpecId));
        }
    }

    std::function<uint32_t(uint32_t)> size_of = [&](uint32_t tid) -> uint32_t {
        const Type& t = types.at(tid);
        switch (t.op) {
            case OpTypeInt:
            case OpTypeFloat: return t.args[0] / 8;
            case OpTypeVector: return size_of(t.args[0]) * t.args[1];
            case OpTypeArray: return constants.at(t.args[1]) * decorations[tid][DecArrayStride];
            case OpTypeStruct: {
                uint32_t end = 0;
                for (uint32_t m = 0; m < t.args.size(); ++m)
                    end = std::max(end, member_decorations[tid][m][DecOffset] + size_of(t.args[m]));
                return end;
            }
            default: throw std::runtime_error(name + ": unsupported type in push-constant block");
        }
    };

    std::set<uint32_t> bindings;
    for (auto& [id, v] : vars) {
        const Type& ptr = types.at(v.type);
        uint32_t pointee = ptr.args.at(1);
        if (v.storage == ScPushConstant) {
            r.push_constant_bytes = size_of(pointee);
            continue;
        }
        bool is_storage =
            v.storage == ScStorageBuffer || (v.storage == ScUniform && decorations[pointee].count(DecBufferBlock));
        bool is_uniform = v.storage == ScUniform && decorations[pointee].count(DecBlock);
        if (!is_storage && !is_uniform) {
            if (decorations[id].count(DecBinding))
                throw std::runtime_error(name + ": only storage and uniform buffers may be bound");
            continue;
        }
        if (decorations[id][DecDescriptorSet] != 0) throw std::runtime_error(name + ": only set 0 is used");
        uint32_t b = decorations[id][DecBinding];
        if (b >= 32) throw std::runtime_error(name + ": binding >= 32");
        if (!bindings.insert(b).second) throw std::runtime_error(name + ": binding used twice");
        if (is_uniform) {
            r.uniform_mask |= 1u << b;
            continue;  // read-only by definition
        }
        bool readonly = decorations[id].count(DecNonWritable) != 0;
        if (!readonly) {
            const Type& st = types.at(pointee);
            readonly = !st.args.empty();
            for (uint32_t m = 0; m < st.args.size(); ++m)
                readonly = readonly && member_decorations[pointee][m].count(DecNonWritable);
        }
        if (!readonly) r.written_mask |= 1u << b;
    }
    for (uint32_t b = 0; b < bindings.size(); ++b)
        if (!bindings.count(b)) throw std::runtime_error(name + ": bindings must be 0..n-1 without gaps");
    r.binding_count = uint32_t(bindings.size());
    return r;
}

uint64_t fnv1a(const std::vector<uint32_t>& w) {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t x : w)
        for (int b = 0; b < 4; ++b) {
            h ^= (x >> (8 * b)) & 0xffu;
            h *= 1099511628211ull;
        }
    return h;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::cerr << "usage: shader_embed OUT.cpp NAME=FILE.spv...\n";
        return 2;
    }
    try {
        std::ostringstream out, table;
        out << "// Generated by tools/shader_embed.cpp. Do not edit, do not commit.\n"
               "#include \"runtime/shader_registry.h\"\n\nnamespace vkllm {\nnamespace {\n";
        int count = 0;
        for (int i = 2; i < argc; ++i) {
            std::string arg = argv[i];
            auto eq = arg.find('=');
            if (eq == std::string::npos) throw std::runtime_error("bad argument " + arg);
            std::string name = arg.substr(0, eq), path = arg.substr(eq + 1);
            auto words = read_words(path);
            Reflection r = reflect(words, name);
            out << "const uint32_t k_" << name << "[] = {";
            for (size_t j = 0; j < words.size(); ++j) out << (j % 12 ? "" : "\n") << words[j] << "u,";
            out << "};\n";
            char hash[32];
            std::snprintf(hash, sizeof hash, "0x%016llxull", (unsigned long long)fnv1a(words));
            table << "    {\"" << name << "\", k_" << name << ", " << words.size() << ", {" << r.local_size[0] << ", "
                  << r.local_size[1] << ", " << r.local_size[2] << "}, {" << r.local_size_spec_id[0] << ", "
                  << r.local_size_spec_id[1] << ", " << r.local_size_spec_id[2] << "}, " << r.push_constant_bytes
                  << ", " << r.binding_count << ", 0x" << std::hex << r.written_mask << "u, 0x" << r.uniform_mask
                  << std::dec << "u, " << hash << "},\n";
            ++count;
        }
        out << "const ShaderInfo k_table[] = {\n"
            << table.str() << "};\n}  // namespace\n\n"
            << "std::span<const ShaderInfo> shader_table() { return {k_table, " << count << "}; }\n"
            << "}  // namespace vkllm\n";
        std::string text = out.str();
        // Rewrite only when the content changes, so that an unrelated rebuild recompiles nothing.
        std::ifstream old(argv[1], std::ios::binary);
        std::string prev((std::istreambuf_iterator<char>(old)), std::istreambuf_iterator<char>());
        if (prev != text) std::ofstream(argv[1], std::ios::binary) << text;
    } catch (const std::exception& e) {
        std::cerr << "shader_embed: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
