// Built-in chat templates, for GGUF files that carry no `tokenizer.chat_template`. Each follows
// its model family's published prompt format; they are written for this project. Message
// content may be a string or a list of parts ({"type": "text", "text": ...}); only text parts
// are kept. Tool calls are not rendered by these: models with tools carry their own templates.
#include "serving/chat_template/chat_template.h"

#include <utility>

namespace vkllm::chat_template {

namespace {

// Shared prelude: `text(content)` flattens a content value to its text.
constexpr const char* kTextMacro =
    "{%- macro text(content) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- elif content is iterable and content is not mapping -%}"
    "{%- for part in content if part is mapping and part.type == 'text' -%}{{ part.text }}{%- endfor -%}"
    "{%- elif content is not none -%}{{ content | string }}"
    "{%- endif -%}"
    "{%- endmacro -%}";

struct Builtin {
    const char* name;
    const char* body;
};

const Builtin kBuiltins[] = {
    // ChatML (Qwen, Yi, Hermes, SmolLM, ...): <|im_start|>role\ncontent<|im_end|>\n per turn.
    {"chatml",
     "{%- for m in messages -%}"
     "{{ '<|im_start|>' ~ m.role ~ '\\n' ~ text(m.content) ~ '<|im_end|>\\n' }}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"},

    // Llama 2 chat: the system prompt sits inside the first [INST] between <<SYS>> markers;
    // every exchange is <s>[INST] user [/INST] answer </s>.
    {"llama2",
     "{%- set ns = namespace(system='') -%}"
     "{%- if messages and messages[0].role == 'system' -%}"
     "{%- set ns.system = '<<SYS>>\\n' ~ text(messages[0].content) ~ '\\n<</SYS>>\\n\\n' -%}"
     "{%- set turns = messages[1:] -%}"
     "{%- else -%}{%- set turns = messages -%}{%- endif -%}"
     "{%- for m in turns -%}"
     "{%- if m.role == 'user' -%}"
     "{{ bos_token ~ '[INST] ' ~ (ns.system if loop.first else '') ~ text(m.content) | trim ~ ' [/INST]' }}"
     "{%- elif m.role == 'assistant' -%}"
     "{{ ' ' ~ text(m.content) | trim ~ ' ' ~ eos_token }}"
     "{%- endif -%}"
     "{%- endfor -%}"},

    // Llama 3 / 3.x: header-delimited turns, each ended by <|eot_id|>.
    {"llama3",
     "{{- bos_token -}}"
     "{%- for m in messages -%}"
     "{{ '<|start_header_id|>' ~ m.role ~ '<|end_header_id|>\\n\\n' ~ text(m.content) | trim ~ '<|eot_id|>' }}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif -%}"},

    // Mistral instruct (v0.1-v0.3): [INST] user [/INST]answer</s>; a system prompt goes in
    // front of the first user message.
    {"mistral",
     "{%- set ns = namespace(system='') -%}"
     "{%- if messages and messages[0].role == 'system' -%}"
     "{%- set ns.system = text(messages[0].content) ~ '\\n\\n' -%}"
     "{%- set turns = messages[1:] -%}"
     "{%- else -%}{%- set turns = messages -%}{%- endif -%}"
     "{{- bos_token -}}"
     "{%- for m in turns -%}"
     "{%- if m.role == 'user' -%}"
     "{{ '[INST] ' ~ (ns.system if loop.first else '') ~ text(m.content) ~ ' [/INST]' }}"
     "{%- elif m.role == 'assistant' -%}"
     "{{ text(m.content) ~ eos_token }}"
     "{%- endif -%}"
     "{%- endfor -%}"},

    // Phi-3: <|role|>\ncontent<|end|>\n per turn.
    {"phi3",
     "{%- for m in messages -%}"
     "{{ '<|' ~ m.role ~ '|>\\n' ~ text(m.content) ~ '<|end|>\\n' }}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{ '<|assistant|>\\n' }}{%- else -%}{{ eos_token }}{%- endif -%}"},

    // Gemma: user and model turns only; a system prompt is folded into the first user turn.
    {"gemma",
     "{%- set ns = namespace(system='') -%}"
     "{%- if messages and messages[0].role == 'system' -%}"
     "{%- set ns.system = text(messages[0].content) ~ '\\n\\n' -%}"
     "{%- set turns = messages[1:] -%}"
     "{%- else -%}{%- set turns = messages -%}{%- endif -%}"
     "{{- bos_token -}}"
     "{%- for m in turns -%}"
     "{%- set role = 'model' if m.role == 'assistant' else m.role -%}"
     "{{ '<start_of_turn>' ~ role ~ '\\n' ~ (ns.system if loop.first else '') ~ text(m.content) | trim ~ "
     "'<end_of_turn>\\n' }}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"},

    // Zephyr: <|role|>\ncontent</s>\n per turn.
    {"zephyr",
     "{%- for m in messages -%}"
     "{{ '<|' ~ m.role ~ '|>\\n' ~ text(m.content) ~ eos_token ~ '\\n' }}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{ '<|assistant|>\\n' }}{%- endif -%}"},

    // DeepSeek LLM chat (V1): "User: ...\n\nAssistant: ...<eos>", a system prompt first.
    {"deepseek",
     "{{- bos_token -}}"
     "{%- for m in messages -%}"
     "{%- if m.role == 'user' -%}{{ 'User: ' ~ text(m.content) ~ '\\n\\n' }}"
     "{%- elif m.role == 'assistant' -%}{{ 'Assistant: ' ~ text(m.content) ~ eos_token }}"
     "{%- elif m.role == 'system' -%}{{ text(m.content) ~ '\\n\\n' }}"
     "{%- endif -%}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{ 'Assistant:' }}{%- endif -%}"},

    // DeepSeek V3 / R1: system text first, then <｜User｜> and <｜Assistant｜> turns.
    {"deepseek3",
     "{{- bos_token -}}"
     "{%- for m in messages if m.role == 'system' -%}{{ text(m.content) }}{%- endfor -%}"
     "{%- for m in messages -%}"
     "{%- if m.role == 'user' -%}{{ '<\xef\xbd\x9c"
     "User\xef\xbd\x9c"
     ">' ~ text(m.content) }}"
     "{%- elif m.role == 'assistant' -%}{{ '<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c"
     ">' ~ text(m.content) ~ eos_token }}"
     "{%- endif -%}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{ '<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c"
     ">' }}{%- endif -%}"},

    // Vicuna v1.1: "USER: ...\nASSISTANT: ...</s>\n", a system prompt first.
    {"vicuna",
     "{%- for m in messages -%}"
     "{%- if m.role == 'system' -%}{{ text(m.content) ~ '\\n\\n' }}"
     "{%- elif m.role == 'user' -%}{{ 'USER: ' ~ text(m.content) ~ '\\n' }}"
     "{%- elif m.role == 'assistant' -%}{{ 'ASSISTANT: ' ~ text(m.content) ~ eos_token ~ '\\n' }}"
     "{%- endif -%}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{ 'ASSISTANT:' }}{%- endif -%}"},
};

}  // namespace

std::vector<std::string> builtin_template_names() {
    std::vector<std::string> names;
    for (const Builtin& b : kBuiltins) names.emplace_back(b.name);
    return names;
}

std::string builtin_template_source(const std::string& name) {
    for (const Builtin& b : kBuiltins)
        if (name == b.name) return std::string(kTextMacro) + b.body;
    std::string list;
    for (const Builtin& b : kBuiltins) list += std::string(list.empty() ? "" : ", ") + b.name;
    throw TemplateError("no built-in chat template named '" + name + "' (built-ins: " + list + ")");
}

}  // namespace vkllm::chat_template
