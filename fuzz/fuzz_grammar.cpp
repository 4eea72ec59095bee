// libFuzzer target: the GBNF parser, the JSON-Schema compiler and the matcher on arbitrary input.
//
// The first byte picks the input's kind (even: GBNF, odd: a JSON schema); the rest is the text. A
// grammar that parses is followed over a few fixed texts and over the input itself, byte by byte,
// and asked can_end / complete, as sampling would. The only acceptable failures are GrammarError
// and SchemaError (malformed input, limits); anything else -- another exception, a crash, a hang
// past -timeout, a leak or a sanitizer report -- is a finding. Seeds (fuzz_make_seeds): grammars
// written here and the schemas of the JSON Schema Test Suite.
#include "model/grammar/grammar.h"
#include "model/grammar/json_schema.h"

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace vkllm::grammar;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const bool schema = data[0] & 1;
    const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
    try {
        const std::string gbnf = schema ? json_schema_to_gbnf(text) : text;
        const Grammar g = Grammar::parse(gbnf);
        for (const std::string& probe : {std::string("{\"a\": [1, \"x\"]}"), std::string("hello world"), text}) {
            Matcher m(g);
            for (const char c : probe) {
                if (!m.accept(std::string_view(&c, 1))) break;
                (void)m.can_end();
                (void)m.complete();
            }
        }
    } catch (const GrammarError&) {
    } catch (const SchemaError&) {
    } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_grammar: unexpected exception: %s\n", e.what());
        std::abort();
    }
    return 0;
}
